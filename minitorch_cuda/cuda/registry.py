"""The kernel registry: every op finds its kernel by name, and names can be overridden.

The built-in kernels live in ``minitorch_cuda/kernels/*.cu``. ``override``
compiles a user's source (from a notebook cell, a string or a file), checks
that its entry point takes the same parameters as the built-in kernel, and
routes every launch of that name to it until the scope ends:

    with override("ew_relu", source=my_cuda_source):
        model(x)                      # runs the student's ReLU

or, in a notebook, ``handle = override(...)`` and later ``handle.restore()``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from .runtime import KERNEL_DIR, Kernel, compile_module

_BINARY = "float* out, const float* a, const float* b, int n, int b_div, int b_mod"
_UNARY = "float* out, const float* a, int n"


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    file: str
    params: str  # the C parameter list every implementation must take

    @property
    def signature(self) -> str:
        return prepare_signature(self.params)


SPECS: dict[str, KernelSpec] = {
    **{name: KernelSpec("elementwise.cu", _BINARY) for name in ("ew_add", "ew_sub", "ew_mul", "ew_div")},
    **{name: KernelSpec("elementwise.cu", _UNARY) for name in ("ew_exp", "ew_log", "ew_relu", "ew_sigmoid")},
    "ew_affine": KernelSpec("elementwise.cu", "float* out, const float* a, float alpha, float beta, int n"),
    "ew_rdiv": KernelSpec("elementwise.cu", "float* out, const float* a, float s, int n"),
    "ew_relu_backward": KernelSpec("elementwise.cu", "float* out, const float* grad, const float* x, int n"),
    "ew_sigmoid_backward": KernelSpec("elementwise.cu", "float* out, const float* grad, const float* y, int n"),
    "ew_fill": KernelSpec("elementwise.cu", "float* out, float value, int n"),
    "strided_copy": KernelSpec(
        "layout.cu",
        "float* out, const float* in, int n, int d1, int d2, int d3, int s0, int s1, int s2, int s3",
    ),
    "gather_rows": KernelSpec("gather.cu", "float* out, const float* in, const int* idx, int rows, int row_len"),
    "scatter_add_rows": KernelSpec("gather.cu", "float* out, const float* grad, const int* idx, int rows, int row_len"),
    **{
        f"sum_rows_{kind}": KernelSpec("reduce.cu", "float* out, const float* in, int rows, int cols, float scale")
        for kind in ("volatile", "shuffle")
    },
    **{
        f"sumsq_{kind}": KernelSpec("reduce.cu", "float* out, const float* x, int n")
        for kind in ("volatile", "shuffle")
    },
    "sum_axis": KernelSpec("reduce.cu", "float* out, const float* in, int outer, int red, int inner, float scale"),
    **{
        f"softmax_rows_{kind}": KernelSpec("softmax.cu", "float* out, const float* in, int rows, int cols")
        for kind in ("volatile", "shuffle")
    },
    **{
        f"softmax_xent_{kind}": KernelSpec(
            "softmax.cu",
            "float* probs, float* row_loss, const float* logits, const float* target, int rows, int cols",
        )
        for kind in ("volatile", "shuffle")
    },
    "xent_backward": KernelSpec(
        "softmax.cu",
        "float* out, const float* probs, const float* target, const float* upstream, int n, float scale",
    ),
    "matmul_naive": KernelSpec("matmul.cu", "float* c, const float* a, const float* b, int M, int N, int K"),
    "matmul_transposed": KernelSpec(
        "matmul.cu", "float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb"
    ),
    **{
        name: KernelSpec(
            "matmul.cu",
            "float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb, int stride_a, int stride_b",
        )
        for name in ("matmul_batched", "matmul_tiled")
    },
    "clip_scale": KernelSpec("optim.cu", "float* g, const float* partials, int n_parts, float max_norm, int n"),
    "rmsprop_step": KernelSpec(
        "optim.cu", "float* p, const float* g, float* v, float lr, float decay, float eps, int n"
    ),
    "sgd_step": KernelSpec("optim.cu", "float* p, const float* g, float lr, int n"),
    "init_normal": KernelSpec("init.cu", "float* out, int n, float std, unsigned int seed"),
}


def prepare_signature(params: str) -> str:
    """C parameters -> PyCUDA's prepare() format: P pointer, i int, I unsigned, f float."""
    codes = []
    for param in filter(None, (p.strip() for p in params.split(","))):
        if "*" in param:
            codes.append("P")
        elif re.search(r"\bfloat\b", param):
            codes.append("f")
        elif re.search(r"\bunsigned\b", param):
            codes.append("I")
        elif re.search(r"\bint\b", param):
            codes.append("i")
        else:
            raise TypeError(f"unsupported kernel parameter {param!r}: use pointers, int, unsigned int or float")
    return "".join(codes)


def entry_params(source: str, entry: str) -> str:
    """The parameter list of ``__global__ void entry(...)`` in ``source``."""
    match = re.search(r"__global__\s+void\s+" + re.escape(entry) + r"\s*\(([^)]*)\)", source)
    if match is None:
        raise ValueError(f"no `__global__ void {entry}(...)` found in the kernel source")
    return " ".join(match.group(1).split())


_builtin: dict[str, Kernel] = {}
_overrides: dict[str, list[Kernel]] = {}


def spec(name: str) -> KernelSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r}; known kernels: {', '.join(sorted(SPECS))}") from None


def get(name: str) -> Kernel:
    """The kernel that runs for ``name`` now: the innermost override, else the built-in."""
    stack = _overrides.get(name)
    if stack:
        return stack[-1]
    kernel = _builtin.get(name)
    if kernel is None:
        s = spec(name)
        source = (KERNEL_DIR / s.file).read_text()
        kernel = _builtin[name] = Kernel(name, compile_module(source, s.file), name, s.signature)
    return kernel


def builtin_source(name: str) -> str:
    return (KERNEL_DIR / spec(name).file).read_text()


class override:
    """Route launches of kernel ``name`` to ``entry`` compiled from ``source`` (or ``path``)."""

    def __init__(
        self, name: str, source: str | None = None, *, entry: str | None = None, path: str | Path | None = None
    ):
        expected = spec(name)
        if (source is None) == (path is None):
            raise ValueError("give exactly one of source= or path=")
        if path is not None:
            source = Path(path).read_text()
        entry = entry or name
        if not isinstance(source, str) or not source.strip():
            raise ValueError(f"the kernel source for {name!r} is empty")
        theirs = entry_params(source, entry)
        if prepare_signature(theirs) != expected.signature:
            raise TypeError(f"kernel {entry!r} must take ({expected.params}) to replace {name!r}; it takes ({theirs})")
        self.name = name
        self.kernel = Kernel(name, compile_module(source, f"your kernel {entry!r}"), entry, expected.signature)
        _overrides.setdefault(name, []).append(self.kernel)
        self._active = True

    def restore(self) -> None:
        """Put back whatever ran for this name before (idempotent)."""
        if self._active:
            _overrides[self.name].remove(self.kernel)
            self._active = False

    def __enter__(self) -> override:
        return self

    def __exit__(self, *exc_info) -> None:
        self.restore()


def restore_all() -> None:
    """Drop every override (a notebook's reset button)."""
    _overrides.clear()
