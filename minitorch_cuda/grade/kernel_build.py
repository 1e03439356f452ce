"""Building a student's kernel: nothing to copy from, and the rules read from what was built.

A student's source compiles against ``headers()``, a folder of the course headers a kernel may
include (no ``.cu`` file, none that holds an exercise's answer), inside the sandbox
(``sandbox.run_compiler``: no other student, no checkout, not the grader's environment), on the
GPU (nvcc to a cubin, loaded from its bytes) and on the CPU emulator (its g++ build). What the source
opened comes from the preprocessor's own output (its line markers), and a file outside those headers
and the system's is refused by name. A compiler's log reaches the feedback only in its lines about the
student's own file. ``build`` returns the loaded module and its ``Artifact`` (grade/artifact.py).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

from .. import emulator
from ..cuda.kernel_table import KERNEL_DIR, NVCC_OPTIONS, SPECS
from ..emulator import toolchain
from . import sandbox
from .artifact import Artifact, emulator_internals, from_preprocessed, from_ptx, unchecked
from .exercises import Exercise
from .verdict import FORBIDDEN, fail

MAIN = "kernel.cu"  # the student's source, as compilers name it in their messages (PyCUDA's name too)
# Headers of the kernel folder that hold an exercise's answer (16.1's register tiling and its tile
# loader): never in the students' include folder. block_reduce.cuh is there, for 21.1, and refused
# by the reductions' own rules (kernel_checks).
ANSWER_KEYS = frozenset({"matmul_regtiled.cuh", "tile_load.cuh"})
MAX_LOG_LINES = 20


@dataclasses.dataclass(frozen=True)
class Built:
    module: object  # a pycuda Module (from the cubin's bytes) or the emulator's SourceModule
    artifact: Artifact


@functools.cache
def headers() -> Path:
    """The folder a student's kernel includes from, made once per process: a copy of the kernel
    folder's headers (``.cuh``, ``.h``) without ``ANSWER_KEYS``."""
    folder = Path(tempfile.mkdtemp(prefix="minitorch-cuda-headers-")).resolve()
    atexit.register(shutil.rmtree, folder, True)
    for path in sorted(KERNEL_DIR.iterdir()):
        if path.suffix in (".cuh", ".h") and path.name not in ANSWER_KEYS:
            shutil.copyfile(path, folder / path.name)
    return folder


def _system_dirs() -> list[str]:
    """Where the system's and CUDA's own headers lie (what a kernel may open besides ``headers()``), and
    the emulator's stand-ins for CUDA's (its include folder and own headers, not its runtime's source)."""
    dirs = ["/usr/include", "/usr/lib/gcc", "/usr/local/include", "/usr/local/cuda", str(toolchain.INCLUDE)]
    dirs += [str(header) for header in toolchain.OWN_HEADERS]
    for compiler_path in (sandbox.real_nvcc(), sandbox.real_cxx()):  # a toolchain's own headers (/opt/gcc)
        prefix = compiler_path and os.path.realpath(str(Path(compiler_path).parents[1]))
        if prefix and prefix != "/usr":  # not all of /usr: an installed package's kernels lie there
            dirs.append(prefix)
    return dirs


def _refusal(name: str) -> str:
    allowed = ", ".join(sorted(p.name for p in headers().iterdir()))
    shown = name if len(name) <= 80 else name[:77] + "..."
    base = Path(name).name
    if (KERNEL_DIR / base).is_file() and (base.endswith(".cu") or base in ANSWER_KEYS):
        return (
            f"your kernel includes the framework's `{base}`, which holds the answer: write the kernel yourself, "
            f"including only the course's headers ({allowed})"
        )
    return f"your kernel includes `{shown}`, a file outside the course's headers: include only those ({allowed})"


_MARKER = re.compile(r'^#(?: line)? \d+ "((?:\\.|[^"\\])*)"', re.M)


def check_opened(preprocessed: str) -> frozenset[str]:
    """The course headers the preprocessor opened (its line markers); fails unless every file it opened
    is the student's own, a course header or a system/CUDA header."""
    folder, system, opened = str(headers()), _system_dirs(), set()
    for name in dict.fromkeys(_MARKER.findall(preprocessed)):
        name = name.encode().decode("unicode_escape", errors="replace") if "\\" in name else name
        if name in (MAIN, "<built-in>", "<command-line>") or name.startswith("<"):
            continue
        path = os.path.normpath(name if os.path.isabs(name) else os.path.join("/nonexistent", name))
        if Path(path).parent == Path(folder) and Path(path).suffix in (".cuh", ".h"):
            opened.add(Path(path).name)
            continue
        if any(path == d or path.startswith(d.rstrip("/") + "/") for d in system):  # by where it lies, not a flag
            continue
        fail(FORBIDDEN, _refusal(name))
    return frozenset(opened)


def _header_lines(preprocessed: str) -> dict[str, list[str]]:
    """Each course header's own lines in preprocessed text (after its markers, before the next one),
    and each of the emulator's stand-ins for CUDA's headers (``<cooperative_groups.h>``, by that name)."""
    folder, stand_ins, out, name = headers(), toolchain.INCLUDE, {}, None
    for line in preprocessed.splitlines():
        marker = _MARKER.match(line)
        if marker:
            path = Path(os.path.normpath(marker.group(1)))
            name = path.name if path.parent == folder else None
            if stand_ins in path.parents:
                name = f"<{path.relative_to(stand_ins)}>"
            out.setdefault(name, [])
        elif name is not None and line.strip():
            out[name].append(line)
    out.pop(None, None)
    return out


def check_headers_unchanged(preprocessed: str, baseline: str) -> None:
    """Fail if a course header compiles to other code in the student's source than it does included
    alone (``baseline``): a macro of the student's used inside it would pass the student's code off
    as the header's (an atomic inside grid_barrier, say)."""
    theirs = _header_lines(baseline)
    for name, lines in _header_lines(preprocessed).items():
        if lines != theirs.get(name):
            fail(
                FORBIDDEN,
                f"your kernel changes what the course's `{name}` compiles to (a macro of yours is used inside it, "
                "or a line marker of yours claims a header's name): define no macro that a header uses before "
                "including it",
            )


def baseline_source(opened: frozenset[str], stand_ins: frozenset[str] = frozenset()) -> str:
    """A source that only includes the course headers ``opened`` (and the emulator's ``stand_ins``,
    ``<cooperative_groups.h>``, ...)."""
    return "".join(f"#include {name}\n" for name in sorted(stand_ins)) + "".join(
        f'#include "{name}"\n' for name in sorted(opened)
    )


def stand_ins_opened(preprocessed: str) -> frozenset[str]:
    """The emulator's stand-ins for CUDA's headers that the preprocessor opened, as ``<name>``."""
    return frozenset(name for name in _header_lines(preprocessed) if name.startswith("<"))


_MISSING = re.compile(r"^kernel\.cu[(:]\d+\)?(?::\d+)?:? (?:fatal )?error:? (?:#include file )?\"?([^\"\n]+?)\"?(?::)? "
                      r"(?:No such file or directory|cannot be opened|could not be opened)", re.M)  # fmt: skip


# what a compiler says of itself, in words of ours (its own lines may quote files)
_VERDICTS = [
    (r"memory exhausted|out of memory|cannot allocate memory|std::bad_alloc", "the compiler ran out of memory "
     "(a macro that expands without end?)"),
    (r"compile time limit", f"the compiler took more than {sandbox.COMPILE_TIMEOUT} s"),
]  # fmt: skip


def student_log(log: str) -> str:
    """The lines of a compiler's log about the student's own file (``kernel.cu(12): error: ...``) and
    ptxas's verdicts on its kernels, at most ``MAX_LOG_LINES``: nothing that quotes another file."""
    kept = [line[:300] for line in log.splitlines() if re.match(r"(kernel\.cu[(:]\d+|ptxas (error|fatal))", line)]
    kept += [words for pattern, words in _VERDICTS if re.search(pattern, log, re.I)]
    return "\n".join(kept[:MAX_LOG_LINES]) or "(the compiler's messages are about files other than your kernel)"


def _refuse_missing(log: str) -> None:
    """An include the compiler did not find (not in the course's headers) is refused by name."""
    missing = _MISSING.search(log)
    if missing:
        fail(FORBIDDEN, _refusal(missing.group(1)))


def _compile_error(source: str, compiler: str, log: str):
    from ..cuda.runtime import KernelCompileError, _numbered_excerpt  # (the runtime needs a device)

    kept = student_log(re.sub(rf"^{re.escape(MAIN)}:(\d+):\d+: ", rf"{MAIN}(\1): ", log, flags=re.M))
    return KernelCompileError(f"{compiler} could not compile your kernel:\n{kept}\n\n{_numbered_excerpt(source, kept)}")


def _nvcc(source: str, arch: str, folder: Path) -> tuple[int, str]:
    """nvcc on ``source`` in the sandbox, keeping its device-side preprocessing and PTX in ``folder``."""
    (folder / MAIN).write_text(source)
    argv = ["nvcc", "-cubin", f"-arch={arch}", f"-I{headers()}", *NVCC_OPTIONS, "--keep", "-o", "kernel.cubin", MAIN]
    done = sandbox.run_compiler(argv, folder, [headers()])
    return done.returncode, done.stdout + done.stderr


@dataclasses.dataclass(frozen=True)
class GpuBuild:
    ptx: str | None  # None: nvcc failed
    cubin: bytes
    opened: frozenset[str]  # the course headers its preprocessing opened
    preprocessed: str  # nvcc's preprocessed source (device side)
    log: str


def _gpu_compile(source: str, arch: str) -> GpuBuild:
    """nvcc on ``source``, in the sandbox; fails (FORBIDDEN) on a file it may not include."""
    with tempfile.TemporaryDirectory(prefix="grade-nvcc-") as tmp:
        folder = Path(tmp)
        code, log = _nvcc(source, arch, folder)
        # the preprocessed source, kept also when the compile failed
        preprocessed = "".join(kept.read_text(errors="replace") for kept in sorted(folder.glob("*.ii")))
        opened = check_opened(preprocessed)
        if code != 0:
            _refuse_missing(log)
            return GpuBuild(None, b"", opened, preprocessed, log)
        ptx = (folder / "kernel.ptx").read_text(errors="replace")
        return GpuBuild(ptx, (folder / "kernel.cubin").read_bytes(), opened, preprocessed, log)


@functools.cache
def _gpu_baseline(opened: frozenset[str], arch: str) -> str:
    return _gpu_compile(baseline_source(opened), arch).preprocessed


def compile_for_gpu(source: str, arch: str) -> tuple[bytes, Artifact]:
    """``source``'s cubin for ``arch`` (nvcc in the sandbox, against ``headers()``) and its artifact; fails
    (FORBIDDEN) on a file it may not include, raises KernelCompileError with its own lines."""
    built = _gpu_compile(source, arch)
    if built.opened:
        check_headers_unchanged(built.preprocessed, _gpu_baseline(built.opened, arch))
    if built.ptx is None:
        raise _compile_error(source, "nvcc", built.log)
    return built.cubin, from_ptx(built.ptx, headers(), built.opened)


def gpu_errors(source: str, arch: str = "sm_90") -> list[str]:
    """Under emulation, nvcc's first errors on ``source`` for a GPU (built as ``build`` builds it there),
    or [] where it compiles or where nvcc is absent; fails (FORBIDDEN) on a file it may not include."""
    if shutil.which("nvcc") is None:
        return []
    built = _gpu_compile(source, arch)
    return [] if built.ptx is not None else student_log(built.log).splitlines()[:3]


def compiled(ex: Exercise, source: str) -> Artifact:
    """What ``source``, the answer to exercise ``ex``, compiled to (built once per process: the
    checks launch the same module)."""
    spec = SPECS.get(ex.kernel)
    return build(source, bool(spec and spec.arch_specific)).artifact


@functools.cache
def build(source: str, arch_specific: bool = False) -> Built:
    """``source`` compiled for this process's device (the GPU, or the CPU emulator), with its artifact;
    fails (FORBIDDEN) on a file it may not include, raises KernelCompileError with its own lines."""
    if emulator.selected():
        return _emulated(source)
    from ..device import require_cuda

    require_cuda()  # without a GPU: CudaUnavailableError, whose advice names the emulator (no_gpu)
    import pycuda.driver as drv

    from ..cuda.runtime import arch

    cubin, artifact = compile_for_gpu(source, arch() + ("a" if arch_specific else ""))
    return Built(drv.module_from_buffer(cubin), artifact)


@contextlib.contextmanager
def _sandboxed(seen: list[tuple[str, frozenset[str]]]):
    """The emulator's builds inside run g++ in the sandbox, and what each opened is checked and kept
    in ``seen`` (its preprocessed text, the course headers it opened)."""
    from ..emulator import compiler

    def preprocessed(text: str) -> None:  # before g++ compiles it: a refused file never reaches a log
        seen.append((text, check_opened(text)))

    def run(argv: list[str], cwd: str):
        return sandbox.run_compiler(argv, Path(cwd), [headers(), toolchain.HERE])  # (HERE: cuda_emu.h, include/)

    compiler.run_compiler, compiler.on_preprocessed = run, preprocessed
    try:
        yield
    finally:
        compiler.run_compiler = compiler.on_preprocessed = None


def _emulated(source: str) -> Built:
    seen: list[tuple[str, frozenset[str]]] = []
    with _sandboxed(seen):
        module = _emulator_module(source)
        text, opened = seen[-1]
        _emulator_module(baseline_source(opened, stand_ins_opened(text)))
        baseline = seen[-1][0]
    check_headers_unchanged(text, baseline)
    if switched_off := unchecked(text, baseline):
        fail(
            FORBIDDEN,
            f"your kernel switches off the emulator's race and bounds checks ({', '.join(switched_off)}): "
            "remove the attribute, or call memcpy/memset for the builtin: the grader checks each access of your kernel",
        )
    if reached := emulator_internals(text, baseline):
        fail(
            FORBIDDEN,
            f"your kernel reaches into the CPU emulator's own code ({', '.join(reached)}): use CUDA's names "
            "only (threadIdx, __syncthreads(), ...); the emulator's internals are not part of CUDA",
        )
    return Built(module, from_preprocessed(text, baseline, opened))


def build_traced(library) -> None:
    """The emulator's build for access tracing (emulator/access.py) of a student's kernel ``library``
    (built by ``build``), in the sandbox: its traced launches (``tracing()``) find it built."""
    with _sandboxed([]):
        library.traced()


def _emulator_module(source: str):
    """The emulator's build of ``source`` (in the sandbox while ``_emulated`` has set its hooks)."""
    from ..cuda.kernel_table import source_define
    from ..emulator import compiler
    from ..emulator.errors import CompileError

    try:
        options = [*NVCC_OPTIONS, source_define(source)]
        return compiler.SourceModule(source, options=options, include_dirs=[str(headers())], no_extern_c=True)
    except CompileError as exc:
        _refuse_missing(exc.stderr or str(exc))
        raise _compile_error(source, "g++ (the CPU emulator)", exc.stderr or str(exc)) from None
