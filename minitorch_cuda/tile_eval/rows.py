"""The evaluation rows that are not throughput: compile time, binary size and
generated code, launch overhead, tuning, diagnostics and ncu (needs a GPU,
except where a function says otherwise)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import cases, codegen, cuda_c, diagnostics, timing
from .interop import TileArray


def _device_array(values: np.ndarray, dtype: str) -> TileArray:
    import pycuda.driver as drv

    allocation = drv.mem_alloc(max(1, values.nbytes))
    drv.memcpy_htod(allocation, np.ascontiguousarray(values))
    return TileArray(int(allocation), values.shape, dtype, owner=allocation)


def cuda_compile(model: cuda_c.CudaModel, kernels: list[str]) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        for name in kernels:
            done = cuda_c.compile_one(name, cache)
            out[name] = {
                "cold_s": done["cold_s"],
                "warm_s": done["warm_s"],
                **model.resources(name),
                **codegen.evidence(done["ptx"], done["cubin"]),
            }
    return out


def _triton_specs(tk) -> dict:
    """name -> (jit function, args builder, constexpr kwargs)."""
    n = 1 << 16
    f32 = lambda: [_device_array(np.zeros(n, np.float32), "fp32") for _ in range(4)]  # noqa: E731
    i64 = lambda: [_device_array(np.zeros(n, np.int64), "int64") for _ in range(2)]  # noqa: E731
    u32 = lambda: [_device_array(np.zeros(n, np.uint32), "uint32") for _ in range(2)]  # noqa: E731
    specs = {
        "triad_fp32": (tk.triad_kernel, lambda: [*f32(), 0.375, n], {"BLOCK": tk.STREAM_BLOCK}),
        "fib": (tk.fib_unrolled_kernel, lambda: [*i64(), n], {"MAX_N": cases.MAX_FIB_N, "BLOCK": tk.STREAM_BLOCK}),
        "fib_tilemax": (tk.fib_tilemax_kernel, lambda: [*i64(), n], {"BLOCK": tk.STREAM_BLOCK}),
    }
    for k in cases.HEAVY_NS:
        specs[f"heavy_{k}"] = (tk.heavy_kernel, lambda: [*u32(), n], {"N": k, "BLOCK": tk.HEAVY_BLOCK})
    return specs


def triton_compile(kernels: list[str]) -> dict:
    """Cold (empty TRITON_CACHE_DIR, set by the caller) and warm (on-disk cache) compiles."""
    from . import triton_kernels as tk

    out = {}
    for name, (fn, make_args, constexprs) in _triton_specs(tk).items():
        if name.removesuffix("_tilemax") not in kernels:
            continue
        try:
            args = make_args()
            t0 = time.perf_counter()
            compiled = fn.warmup(*args, grid=(1,), **constexprs)
            cold = time.perf_counter() - t0
            fn.device_caches.clear()  # forget the in-memory kernel; the disk cache stays
            t0 = time.perf_counter()
            compiled = fn.warmup(*args, grid=(1,), **constexprs)
            warm = time.perf_counter() - t0
            compiled._init_handles()
            asm = compiled.asm
            out[name] = {
                "cold_s": cold,
                "warm_s": warm,
                "registers": compiled.n_regs,
                "spills": compiled.n_spills,
                "ttgir_lines": asm.get("ttgir", "").count("\n"),
                **codegen.evidence(asm.get("ptx"), asm.get("cubin")),
            }
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    return out


# Triton kernels that take minutes to compile (heavy_64: 198 and 206 s in two H200 runs):
# compiled in a child process, beside the rest of the run.
SLOW_TRITON_COMPILES = ("heavy_64",)


class CompileProbe:
    """``triton_compile([kernel])`` in a child process sharing TRITON_CACHE_DIR, so that its
    minutes of compiling overlap the measurements. ``row()`` waits for it and returns the row."""

    def __init__(self, kernel: str):
        self.kernel = kernel
        folder = Path(tempfile.mkdtemp(prefix="tile_eval_probe_"))
        self.path, self.log = folder / "row.json", (folder / "stderr.txt").open("w")
        command = [sys.executable, "-m", "minitorch_cuda.tile_eval", "--compile-probe", kernel]
        self.proc = subprocess.Popen([*command, "--json", str(self.path)], stdout=subprocess.DEVNULL, stderr=self.log)

    def row(self, timeout_s: float = 900) -> dict:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return {"error": f"the compile of {self.kernel} did not finish in {timeout_s:g} s"}
        finally:
            self.log.close()
        if self.proc.returncode != 0 or not self.path.exists():
            tail = Path(self.log.name).read_text()[-400:]
            return {"error": f"the compile probe exited with {self.proc.returncode}: {tail}"}
        return json.loads(self.path.read_text())


def compile_probe(kernel: str) -> dict:
    """The child's side: Triton started up first (the parent's triad pays that once for the
    others), then ``kernel`` cold and warm."""
    return triton_compile(["triad_fp32", kernel])[kernel]


def cupy_compile() -> dict:
    """First call of a fresh ElementwiseKernel: with an empty CUPY_CACHE_DIR, then with it filled."""
    import cupy as cp

    x = cp.ones(1 << 16, cp.float32)
    times = []
    for _ in range(2):
        kernel = cp.ElementwiseKernel("T a, T b, T s", "T out", "out = a + s * b", "cupy_triad_compile")
        t0 = time.perf_counter()
        kernel(x, x, cp.float32(0.375), x)
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return {
        "triad_fp32": {
            "cold_s": times[0],
            "warm_s": times[1],
            "cubin_bytes": None,
            "note": "CuPy keeps its cubins in its cache folder and does not expose them per kernel",
        }
    }


def launch_overhead(models: dict) -> dict:
    a = _device_array(np.zeros(1024, np.float32), "fp32")
    out = _device_array(np.zeros(1024, np.float32), "fp32")
    launch = {"cuda_c": lambda: models["cuda_c"].stream("copy", "fp32", out, [a], 0.0)}
    for name in ("triton", "cupy", "cutile"):
        if name in models:
            launch[name] = lambda m=models[name]: m.stream("copy", out, [a], 0.0)
    overhead = {}  # not `out`: the launchers above read that name when they run
    for name, f in launch.items():
        try:
            overhead[name] = timing.launch_overhead(f)
        except Exception as exc:  # one model failing must not lose the others
            overhead[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return overhead


def triton_tuning(repeats: int, l2_bytes: int, case_names=cases.CASE_NAMES) -> dict:
    """The effect of the tile size and warp count, chosen by hand (what triton.autotune would search).

    heavy64 is left out: each of its configurations takes minutes to compile (206 s for one on the H200)."""
    from . import measure
    from . import triton_kernels as tk

    out = {}
    n = 1 << 24
    sweeps = {
        "triad_fp32": ([256, 512, 1024, 2048, 4096], lambda b, w: lambda o, i: tk.stream("triad", o, i, 0.375, b, w)),
        "heavy8": ([32, 64, 128, 256, 512], lambda b, w: lambda o, i: tk.heavy(o, i[0], 8, b, w)),
        "heavy32": ([32, 64, 128, 256, 512], lambda b, w: lambda o, i: tk.heavy(o, i[0], 32, b, w)),
    }
    for case, (blocks, make) in sweeps.items():
        if case.removesuffix("_fp32") not in case_names:
            continue
        host = cases.stream_inputs("triad", "fp32", n, bits=True) if case == "triad_fp32" else [cases.heavy_inputs(n)]
        dtype, out_dtype = ("fp32", "fp32") if case == "triad_fp32" else ("uint32", "uint32")
        buffers = measure.Buffers(host, out_dtype, dtype, 1)
        rows = []
        try:
            for block in blocks:
                for warps in (4, 8):
                    launch = make(block, warps)
                    try:
                        t = timing.time_launches(
                            lambda i, launch=launch, sets=buffers.sets: launch(*sets[0]), n, 1, repeats=repeats
                        )
                        rows.append(
                            {
                                "block": block,
                                "num_warps": warps,
                                "median_ms": t["median_ms"],
                                "gelems": n / (t["median_ms"] * 1e6),
                            }
                        )
                    except Exception as exc:
                        rows.append({"block": block, "num_warps": warps, "error": f"{type(exc).__name__}: {exc}"[:300]})
        finally:
            buffers.free()
        out[case] = {"n": n, "rows": rows}
    return out


def diagnostics_rows(available: dict) -> dict:
    make = _device_array
    out = {
        "undefined_name": {"cuda_c": diagnostics.cuda_c_undefined_name()},
        "tile_not_power_of_two": {"cuda_c": "no such rule: a block of 1000 threads is legal in CUDA C"},
    }
    tries = {
        ("undefined_name", "triton"): lambda: diagnostics.triton_undefined_name(make),
        ("tile_not_power_of_two", "triton"): lambda: diagnostics.triton_tile_not_power_of_two(make),
        ("undefined_name", "cupy"): diagnostics.cupy_undefined_name,
        ("undefined_name", "cutile"): lambda: diagnostics.cutile_undefined_name(make),
        ("tile_not_power_of_two", "cutile"): lambda: diagnostics.cutile_tile_not_power_of_two(make),
    }
    for (mistake, model), run in tries.items():
        try:
            out[mistake][model] = run() if available[model] is None else f"not run: {available[model]}"
        except Exception as exc:  # the harness itself failed, not the model's diagnostic
            out[mistake][model] = f"could not be produced: {type(exc).__name__}: {str(exc)[:300]}"
    return out


def ncu_rows(timeout_s: int = 150) -> dict:
    """Run ncu on one launch of each model's kernels (``--ncu-target``) and keep what it reports."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return {"error": "ncu is not on PATH"}
    metrics = "gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread"
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--csv",
        "--metrics",
        metrics,
        sys.executable,
        "-m",
        "minitorch_cuda.tile_eval",
        "--ncu-target",
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu did not finish in {timeout_s} s"}
    rows = [line for line in done.stdout.splitlines() if line.startswith('"')]
    return {"returncode": done.returncode, "csv": rows[:200], "stderr_tail": done.stderr[-1500:]}
