"""An early refusal, with a message a student understands, of kernel libraries that hold host code.

The guarantee does not come from here: the grader runs every emulated kernel in the emulator's
device process (emulator/device_process.py), under a system call filter, and never loads a
kernel library into the checking process; a library that calls the C library through an address
it computed (which no inspection sees) is stopped there. What this adds is the plain case named
before anything runs: host code in the source (a constructor, a static object, a destructor, an
``#if __CUDA_ARCH__`` branch that nvcc never compiles) that imports what device code cannot call
gets "host code, which a GPU never runs", the same verdict the filter gives, with the function's
name. ``guard()`` makes every library the emulator builds in this process
pass ``refusal`` before it is loaded (the emulator's ``compiler.before_load``): nothing
that runs on loading or unloading (one entry each in ``.init_array`` and ``.fini_array``,
those g++ puts in every library, and ThreadSanitizer's ``__tsan_init`` in a build for race checking; no
``.ctors``, ``.dtors``, ``.preinit_array`` or IFUNC resolvers), no system call
instruction, and calls only into the emulator's runtime, the sanitizers' handlers and
the C library's math, ``printf`` and memory functions (what device code may call). The
binutils that g++ needs read the file; where they are missing the library is refused.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .verdict import HOST_SIDE, fail

_MATH = (
    "acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh cospi erf erfc erfcinv erfinv exp exp10 "
    "exp2 expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ilogb j0 j1 jn ldexp lgamma llrint llround log "
    "log10 log1p log2 logb lrint lround modf nan nearbyint nextafter pow remainder remquo rint round scalbln "
    "scalbn sin sincos sincospi sinh sinpi sqrt tan tanh tgamma trunc y0 y1 yn"
).split()
ALLOWED = {f"{name}{suffix}" for name in _MATH for suffix in ("", "f")} | {
    "printf", "puts", "putchar", "vprintf", "memcpy", "memmove", "memset", "clock_gettime",
    "__assert_fail", "__stack_chk_fail", "__tls_get_addr", "__cxa_finalize", "__gmon_start__",
    "_ITM_registerTMCloneTable", "_ITM_deregisterTMCloneTable", "_Unwind_Resume", "__gxx_personality_v0",
}  # fmt: skip
_ALLOWED_PREFIXES = ("__emu_", "__ubsan_handle_", "__tsan_")  # the emulator's runtime answers all three
_SYSCALL = re.compile(r"\s(syscall|sysenter|int\s+\$0x80|svc\s)")


def _tool(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"\0{argv[0]}: {exc}"
    return done.stdout if done.returncode == 0 else f"\0{argv[0]} exited with code {done.returncode}"


def refusal(path: str | Path) -> str | None:
    """Why the library at ``path`` may not be loaded into the checker, or None."""
    path = str(path)
    sections, symbols = _tool("readelf", "-W", "-S", path), _tool("readelf", "-W", "--dyn-syms", "-r", path)
    imports, code = _tool("nm", "-D", "--undefined-only", path), _tool("objdump", "-d", "--no-show-raw-insn", path)
    for out in (sections, symbols, imports, code):
        if out.startswith("\0"):
            return f"could not be inspected ({out[1:]})"
    called = sorted({line.split()[-1].split("@")[0] for line in imports.splitlines() if line.strip()})
    # one pointer: g++'s own; and ThreadSanitizer's call of __tsan_init (a build for race checking)
    own = {".init_array": 8 + 8 * ("__tsan_init" in called), ".fini_array": 8}
    for name, size in re.findall(r"\]\s+(\.\S+)\s+\S+\s+\S+\s+\S+\s+([0-9a-f]+)", sections):
        beyond_gcc = name in own and int(size, 16) > own[name]
        if name in (".ctors", ".dtors", ".preinit_array") or beyond_gcc:
            return f"has code that runs when it is loaded or unloaded ({name}: a constructor or a static object)"
    if re.search(r"\bIFUNC\b|R_\w+_IRELATIVE", symbols):
        return "has an IFUNC resolver (code that runs when it is loaded)"
    outside = [s for s in called if s not in ALLOWED and not s.startswith(_ALLOWED_PREFIXES)]
    if outside:
        return f"calls the host's C library ({', '.join(outside[:5])})"
    found = _SYSCALL.search(code)
    if found:
        return f"makes a system call ({found.group(1).strip()})"
    return None


def refuse(path: Path) -> None:
    """Fail the check as host code where ``refusal`` names something in the library at ``path``."""
    why = refusal(path)
    if why:
        fail(
            HOST_SIDE,
            f"your kernel, built for the CPU emulator, {why}: host code, which a GPU never runs; "
            "a kernel exercise is device code only (__global__ and __device__ functions)",
        )


def guard() -> None:
    """Have every emulator library this process builds pass ``refuse`` before it is loaded."""
    from ..emulator import compiler

    compiler.before_load = refuse
