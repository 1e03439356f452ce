"""The emulator's toolchain: the C++ compiler and its flags, the on-disk cache of what it builds, and
the emulator's runtime (runtime.cpp) built once per machine. ``compiler`` builds kernels with it,
``driver`` and ``device_process`` load what it built.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import kernel_cache
from .errors import CompileError

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
HEADER = HERE / "cuda_emu.h"
PTX_HEADER = HERE / "ptx.h"  # force-included after HEADER: what ptx.lower's calls call
KERNEL_MEMORY = HERE / "kernel_memory.cpp"  # linked into instrumented kernels: their C library calls, seen
OWN_HEADERS = [HEADER, PTX_HEADER, HERE / "tensor_core.h"]  # what every build opens besides include/
CXX = os.environ.get("CXX", "g++")
CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-fno-strict-aliasing", "-fno-math-errno", "-ffp-contract=off"]


def _host_flags() -> list[str]:
    """FMA and AVX2 where this CPU has them: fmaf() becomes one instruction, as on a GPU, and
    the register-tiled matmuls run 1.4x faster. They are part of the cache key."""
    try:
        flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())
    except (OSError, AttributeError):
        return []
    return ["-mfma", "-mavx2"] if {"fma", "avx2"} <= flags else []


CXXFLAGS += _host_flags()
# The checks a GPU makes in hardware (or compute-sanitizer does): UBSan's handlers for
# these live in runtime.cpp and turn a violation into a launch error. Stack-clash probes
# touch every page of a large frame, so locals beyond a fiber's stack hit its guard page.
CHECKS = ["-fsanitize=bounds,alignment", "-fno-sanitize-recover=all", "-fstack-clash-protection", "-U_FORTIFY_SOURCE"]
# Race checking (racecheck.cpp): ThreadSanitizer's calls before every memory access, compiled in
# but never its runtime (the kernel links without -fsanitize=thread): the emulator's runtime answers them.
TSAN_CALLS = ["-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0", "--param=tsan-distinguish-volatile=1"]
# and a kernel's memcpy, memmove and memset kept calls (g++ would expand them after placing the calls),
# which kernel_memory.cpp answers, telling race checking of their bytes; no tail calls, so that each
# call of the C library returns into the kernel, whose line a report names
RACECHECK = [
    *TSAN_CALLS,
    *("-fno-builtin-memcpy", "-fno-builtin-memmove", "-fno-builtin-memset", "-fno-optimize-sibling-calls"),
]
# Access tracing (trace.cpp) answers the same calls, with each access of the source one call, as it is
# one instruction on a GPU: no vectorization (which joins a thread's neighbouring accesses) and no
# scalar replacement of aggregates (which splits a float4 read into four, where nvcc makes one LDS.128).
TRACE = [*TSAN_CALLS, "-fno-tree-vectorize", "-fno-tree-sra", "-fno-ipa-sra"]
MAIN = "kernel.cu"  # the source's name in messages


# Where the framework caches compiled kernels (kernel_cache.py), unless a caller names another.
DEFAULT_CACHE = kernel_cache.folder()


def cache_dir(folder: str | None = None) -> Path:
    """The emulator's part of the kernel cache (``folder``, else DEFAULT_CACHE)."""
    path = kernel_cache.emulator_builds(folder or DEFAULT_CACHE)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(
    args: list[str], cwd: str, label: str, runner: Callable[[list[str], str], subprocess.CompletedProcess] | None = None
) -> str:
    """Run one g++ command in ``cwd`` (through ``runner`` where given: compiler.run_compiler); its output,
    or CompileError with its log in nvcc's style."""
    env = {**os.environ, "LC_ALL": "C"}  # plain quotes in messages, as nvcc writes them
    if runner is not None:
        done = runner(args, cwd)
    else:
        done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        log = nvcc_style(done.stderr)
        raise CompileError(f"{label} failed:\n{log}", " ".join(args), done.stdout, log)
    return done.stdout


def nvcc_style(log: str) -> str:
    """g++'s ``kernel.cu:12:5: error:`` as nvcc's ``kernel.cu(12): error:``, which callers parse."""
    return re.sub(rf"^{re.escape(MAIN)}:(\d+):\d+: ", rf"{MAIN}(\1): ", log, flags=re.M)


@functools.cache
def compiler_version() -> str:
    return subprocess.run([CXX, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]


def install(built: Path, path: Path) -> None:
    """Put a built library into the cache atomically: copied beside its final name first, since
    the cache may lie on another filesystem than the build's temporary folder."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    shutil.copyfile(built, staging)
    os.replace(staging, path)


# What the runtime exports: the C calls of the driver and the device process (emu_*) and of kernels
# (__emu_*, ThreadSanitizer's and UBSan's entry points). Its C++ internals stay out of the dynamic symbol
# table, so no kernel finds them by name (dlsym reached from a C library function's address):
# emu::racecheck::launch_end() would switch race checking off for the launch.
RUNTIME_EXPORTS = "{ global: emu_*; __emu_*; __tsan_*; __ubsan_*; local: *; };\n"


@functools.cache
def runtime_library() -> ctypes.CDLL:
    """runtime.cpp, built once per machine and loaded for every kernel library to link against
    (one copy per process: kernels and the driver must share its workers and state)."""
    sources = [HERE / "runtime.cpp", HERE / "racecheck.cpp", HERE / "trace.cpp"]
    text = "".join(p.read_text() for p in [*sources, HEADER, HERE / "racecheck.h", HERE / "trace.h"])
    key = hashlib.sha256((text + RUNTIME_EXPORTS + compiler_version()).encode()).hexdigest()[:16]
    path = cache_dir() / f"runtime-{key}.so"
    if not path.exists():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "runtime.so"
            Path(tmp, "exports.map").write_text(RUNTIME_EXPORTS)
            args = [CXX, *CXXFLAGS, "-U_FORTIFY_SOURCE", "-shared", "-I", str(HERE), *map(str, sources)]
            args.append(f"-Wl,--version-script={Path(tmp, 'exports.map')}")
            run([*args, "-o", str(out), "-lpthread"], tmp, "building the emulator's runtime")
            install(out, path)
    return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
