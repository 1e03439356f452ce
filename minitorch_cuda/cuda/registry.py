"""The kernel registry: every op finds its kernel by name, and names can be overridden.

The built-in kernels live in ``minitorch_cuda/kernels/*.cu``. ``override``
compiles a user's source (from a notebook cell, a string or a file), checks
that its entry point takes the same parameters as the built-in kernel, and
routes every launch of that name to it until the scope ends:

    with override("ew_relu", source=my_cuda_source):
        model(x)                      # runs the student's ReLU

or, in a notebook, ``handle = override(...)`` and later ``handle.restore()``.

``variant(name, defines)`` builds the source that runs for ``name`` now (the override's, else
the built-in file) with other ``#define``s: the one door for a kernel built in another shape
(wgmma_tma.cu per tile width, persistent_step.cu with its phase clock, a test's late wait), so
that an override reaches those builds too.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .kernel_table import KERNEL_DIR, SPECS, KernelSpec, entry_params, prepare_signature
from .runtime import DriverKernel, Kernel, compile_module

__all__ = [
    "SPECS", "KernelSpec", "current_override", "entry_params", "get", "override", "prepare_signature", "restore_all",
    "spec", "variant",
]  # fmt: skip

_builtin: dict[str, Kernel] = {}
_overrides: dict[str, list[override]] = {}
_variants: dict[tuple, Kernel] = {}


def spec(name: str) -> KernelSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r}; known kernels: {', '.join(sorted(SPECS))}") from None


def get(name: str) -> Kernel:
    """The kernel that runs for ``name`` now: the innermost override, else the built-in."""
    stack = _overrides.get(name)
    if stack:
        return stack[-1].kernel
    kernel = _builtin.get(name)
    if kernel is None:
        s = spec(name)
        source = builtin_source(name)
        kernel = _builtin[name] = _kernel(name, compile_module(source, s.file, s.arch_specific), name, s, source)
    return kernel


def current_override(name: str) -> override | None:
    """The override that runs for ``name`` now (the innermost), or None for the built-in."""
    stack = _overrides.get(name)
    return stack[-1] if stack else None


def builtin_source(name: str) -> str:
    return (KERNEL_DIR / spec(name).file).read_text()


def variant(
    name: str, defines: Mapping[str, object], *, extra_params: str = "", shared_bytes: int | None = None
) -> Kernel:
    """Kernel ``name`` built, once per process, from the source that runs for it now (the innermost
    override's, else its built-in file) with ``defines`` before it (``#define KEY value``; a value
    of None defines the bare KEY). ``extra_params``: C parameters the defines append to the
    kernel's (PS_PHASE_CLOCK's clock); ``shared_bytes``: the dynamic shared memory of the shape the
    defines choose (None: the spec's)."""
    s = spec(name)
    top = _overrides[name][-1] if _overrides.get(name) else None
    if top is not None and top.source is None:
        raise ValueError(
            f"{name!r} is overridden by a compiled module, which cannot be built again with other defines "
            f"({', '.join(defines)}): override it with source= or path="
        )
    head = "".join(f"#define {k}{'' if v is None else f' {v}'}\n" for k, v in defines.items())
    key = (name, top, head, extra_params, shared_bytes)  # top: the override, kept alive with its build
    if key not in _variants:
        source = top.source if top else builtin_source(name)
        entry, label = (top.entry, f"your kernel {top.entry!r}") if top else (name, s.file)
        full = f'{head}#line 1 "{s.file}"\n{source}'
        params = ", ".join(p for p in (s.params, extra_params) if p)
        shape = KernelSpec(s.file, params, s.shared_bytes if shared_bytes is None else shared_bytes, s.arch_specific)
        module = compile_module(full, f"{label} with {', '.join(defines) or 'no defines'}", s.arch_specific)
        _variants[key] = _kernel(name, module, entry, shape, full)
    return _variants[key]


def _kernel(name: str, module, entry: str, s: KernelSpec, source: str) -> Kernel:
    """The launchable kernel: one that takes a structure by value (a TMA descriptor, ``128s``)
    launches through the driver API (runtime.DriverKernel), which builds it again from ``source``."""
    if "s" in s.signature:
        return DriverKernel(name, module, entry, s.signature, s.shared_bytes, source)
    return Kernel(name, module, entry, s.signature, s.shared_bytes)


class override:
    """Route launches of kernel ``name`` to ``entry`` compiled from ``source`` (or ``path``)."""

    def __init__(
        self,
        name: str,
        source: str | None = None,
        *,
        entry: str | None = None,
        path: str | Path | None = None,
        module=None,
    ):
        """``module``: one compiled already (the grader builds a student's kernel in its sandbox and
        checks its entry's parameters from the compiled code), instead of ``source`` or ``path``."""
        expected = spec(name)
        if sum(x is not None for x in (source, path, module)) != 1:
            raise ValueError("give exactly one of source=, path= or module=")
        if path is not None:
            source = Path(path).read_text()
        entry = entry or name
        if module is None:
            if not isinstance(source, str) or not source.strip():
                raise ValueError(f"the kernel source for {name!r} is empty")
            theirs = entry_params(source, entry)
            if prepare_signature(theirs) != expected.signature:
                raise TypeError(
                    f"kernel {entry!r} must take ({expected.params}) to replace {name!r}; it takes ({theirs})"
                )
            module = compile_module(source, f"your kernel {entry!r}", expected.arch_specific)
        self.name, self.entry, self.source = name, entry, source  # source: None for a compiled module
        self.kernel = _kernel(name, module, entry, expected, source or "")
        _overrides.setdefault(name, []).append(self)
        self._active = True

    def restore(self) -> None:
        """Put back whatever ran for this name before (idempotent)."""
        if self._active:
            _overrides[self.name].remove(self)
            self._active = False

    def __enter__(self) -> override:
        return self

    def __exit__(self, *exc_info) -> None:
        self.restore()


def restore_all() -> None:
    """Drop every override (a notebook's reset button)."""
    _overrides.clear()
