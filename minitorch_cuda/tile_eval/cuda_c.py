"""The CUDA C side: build ``transform.cu`` for any set of kernels, compile, launch.

Offline helpers (``module_source``, ``nvcc_compile``) need only nvcc; the
``CudaModel`` class needs PyCUDA and a GPU and imports it when created.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

from .cases import DTYPES, HEAVY_NS, STREAM_DTYPES, STREAMS

SOURCE = Path(__file__).with_name("transform.cu")
BLOCK = 256
FUNCTORS = {"copy": "Copy", "scale": "Scale", "add": "Add", "triad": "Triad", "nstream": "Nstream"}


def all_kernels() -> list[str]:
    names = [f"{op}_{dt}" for op in STREAMS for dt in STREAM_DTYPES]
    return names + ["fib"] + [f"heavy_{n}" for n in HEAVY_NS]


def instantiation(name: str) -> str:
    """The line that makes kernel ``name`` exist."""
    if name == "fib":
        return "INSTANTIATE_FIB()"
    if m := re.fullmatch(r"heavy_(\d+)", name):
        return f"INSTANTIATE_HEAVY({m.group(1)})"
    op, _, dt = name.partition("_")
    if op not in FUNCTORS or dt not in STREAM_DTYPES:
        raise KeyError(f"no CUDA C kernel {name!r}")
    return f"INSTANTIATE_STREAM({op}, {FUNCTORS[op]}, {DTYPES[dt].ctype}, {dt})"


def module_source(names: list[str] | None = None) -> str:
    """transform.cu plus the instantiations of ``names`` (default: every kernel)."""
    lines = [instantiation(n) for n in (names or all_kernels())]
    return SOURCE.read_text() + "\n" + "\n".join(lines) + "\n"


def nvcc_compile(source: str, arch: str = "sm_90", target: str = "cubin", nvcc: str = "nvcc") -> tuple[bytes, float]:
    """Compile with the nvcc on PATH, without a GPU: (output bytes, seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.cu", Path(tmp) / f"k.{target}"
        src.write_text(source)
        start = time.perf_counter()
        done = subprocess.run(
            [nvcc, f"-arch={arch}", f"--{target}", "-lineinfo", "-o", str(out), str(src)],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{done.stderr.strip()}")
        return out.read_bytes(), seconds


class CudaModel:
    """The CUDA C kernels compiled through PyCUDA, ready to launch on the default stream."""

    name = "cuda_c"

    def __init__(self, names: list[str] | None = None, cache_dir: str | None = None):
        from pycuda.compiler import SourceModule

        from ..cuda.runtime import arch

        self.arch = arch()
        start = time.perf_counter()
        self.module = SourceModule(
            module_source(names), no_extern_c=True, arch=self.arch, options=["-lineinfo"], cache_dir=cache_dir
        )
        self.compile_seconds = time.perf_counter() - start
        self._functions: dict = {}

    def function(self, name: str):
        if name not in self._functions:
            f = self.module.get_function(name)
            f.prepare("PPq" if name == "fib" or name.startswith("heavy") else "PPPPdq")
            self._functions[name] = f
        return self._functions[name]

    def resources(self, name: str) -> dict:
        f = self.function(name)
        return {"registers": f.num_regs, "local_bytes": f.local_size_bytes, "shared_bytes": f.shared_size_bytes}

    def stream(self, op: str, dtype: str, out, inputs: list, scalar: float) -> None:
        """Launch ``op`` on TileArrays; missing operands are passed as null pointers."""
        ptrs = [a.ptr for a in inputs] + [0] * (3 - len(inputs))
        n = out.size
        per_thread = 16 // DTYPES[dtype].itemsize  # one 16-byte pack per operand (transform.cu)
        grid = (max(1, -(-n // (BLOCK * per_thread))), 1)
        self.function(f"{op}_{dtype}").prepared_async_call(grid, (BLOCK, 1, 1), None, out.ptr, *ptrs, scalar, n)

    def unary(self, name: str, out, inp) -> None:
        """fib or heavy_<N>: one input, one output."""
        n = out.size
        grid = ((n + BLOCK - 1) // BLOCK, 1)
        self.function(name).prepared_async_call(grid, (BLOCK, 1, 1), None, out.ptr, inp.ptr, n)


def compile_one(name: str, cache_dir: str) -> dict:
    """Compile one kernel alone through PyCUDA: cold (empty cache) then warm (disk cache)."""
    from pycuda.compiler import compile as pycuda_compile

    from ..cuda.runtime import arch

    source = module_source([name])
    timings = []
    for _ in range(2):  # the first run fills cache_dir, the second finds it there
        start = time.perf_counter()
        cubin = pycuda_compile(source, no_extern_c=True, arch=arch(), options=["-lineinfo"], cache_dir=cache_dir)
        timings.append(time.perf_counter() - start)
    ptx = pycuda_compile(source, no_extern_c=True, arch=arch(), target="ptx", cache_dir=False)
    return {"cold_s": timings[0], "warm_s": timings[1], "cubin": bytes(cubin), "ptx": ptx.decode()}
