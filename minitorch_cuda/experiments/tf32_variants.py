"""Time shapes of stage 12's mma_async.cu against cuBLAS TF32 on this GPU (chapter 19's shape table).

    python3 -m minitorch_cuda.experiments.tf32_variants --json $OUT/ch19_async_variants.json [--adopt]

Each shape is the kernel file compiled with other #defines (block width, warp tile, pipeline
stages, blocks per SM, unrolling of the fragment loop); "trunc" rows feed the raw FP32 bits to
the tensor cores, which then drop the low mantissa bits instead of rounding (measured for the
cost of the cvt instructions only; the framework always rounds). Every shape is checked against
float64 for all four flag pairs before it is timed. --adopt writes the fastest rounding shape at
4096^3 into the file's defaults.
"""

import argparse
import datetime
import functools
import json
import re

import numpy as np

from minitorch_cuda import torch_reference
from minitorch_cuda.cuda import backend, launch_core, matmul_launchers, timing
from minitorch_cuda.cuda.array import DeviceArray
from minitorch_cuda.cuda.kernel_table import KERNEL_DIR, SPECS, async_launch, kernel_defines
from minitorch_cuda.cuda.runtime import Kernel
from minitorch_cuda.needs_gpu import refuse_emulated

# name: BN, WM, WN, STAGES, MIN_BLOCKS, KK_UNROLL, truncate
SHAPES = {
    "A 128/64x32 s3 b2 u4": (128, 64, 32, 3, 2, 4, False),
    "B 128/64x32 s3 b2 u2": (128, 64, 32, 3, 2, 2, False),
    "C 128/64x64 s3 b1 u1": (128, 64, 64, 3, 1, 1, False),
    "D 256/64x64 s3 b1 u1": (256, 64, 64, 3, 1, 1, False),
    "E 256/64x64 s3 b1 u2": (256, 64, 64, 3, 1, 2, False),
    "F 256/64x32 s3 b1 u4": (256, 64, 32, 3, 1, 4, False),
    "G 256/64x64 s4 b1 u1": (256, 64, 64, 4, 1, 1, False),
    "A trunc": (128, 64, 32, 3, 2, 4, True),
    "D trunc": (256, 64, 64, 3, 1, 1, True),
}
KEYS = ("BN", "WM", "WN", "STAGES", "MIN_BLOCKS", "KK_UNROLL")
CVT = 'asm("cvt.rna.tf32.f32 %0, %1;\\n" : "=r"(r) : "f"(x));'
SIZES = (1024, 2048, 4096)


def compile_shape(source: str, shape: tuple) -> tuple[Kernel, tuple[int, int, int]]:
    """matmul_tf32_async compiled with this shape's #defines, and its (BM, BN, threads)."""
    from pycuda.compiler import SourceModule  # imported here: main's refusal on the emulator comes first

    *values, truncate = shape
    options = [f"-DASYNC_{k}={v}" for k, v in zip(KEYS, values)]
    source = source.replace(CVT, "r = __float_as_uint(x);") if truncate else source
    module = SourceModule(source, no_extern_c=True, arch="sm_90", include_dirs=[str(KERNEL_DIR)], options=options)
    tile, smem = async_launch({**kernel_defines("mma_async.cu", "ASYNC"), **dict(zip(KEYS, values))})
    spec = SPECS["matmul_tf32_async"]
    return Kernel("matmul_tf32_async", module, "matmul_tf32_async", spec.signature, smem), tile


def max_error(kernel: Kernel, tile: tuple, rng) -> float:
    M, N, K = 264, 260, 300
    worst = 0.0
    for ta in (False, True):
        for tb in (False, True):
            a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
            b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
            c = DeviceArray.empty((M, N))
            problem = launch_core.Gemm(M, N, K, ta, tb)
            da, db = backend.from_numpy(a), backend.from_numpy(b)
            matmul_launchers.matmul_tf32_async(c, da, db, problem, kernel=kernel, tile=tile)
            a64 = a.astype(np.float64).T if ta else a.astype(np.float64)
            b64 = b.astype(np.float64).T if tb else b.astype(np.float64)
            got = backend.to_numpy(c)
            worst = max(worst, float(np.max(np.abs(got - a64 @ b64) / (np.abs(a64) @ np.abs(b64)))))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--adopt", action="store_true", help="write the fastest shape into mma_async.cu")
    args = parser.parse_args()
    refuse_emulated("python -m minitorch_cuda.experiments.tf32_variants")
    import pycuda.autoprimaryctx  # noqa: F401  (imported here: the refusal above comes first)

    path = KERNEL_DIR / "mma_async.cu"
    source = path.read_text()
    rng = np.random.default_rng(0)
    rows = {}
    for name, shape in SHAPES.items():
        kernel, tile = compile_shape(source, shape)
        row = {
            "registers": kernel.function.num_regs,
            "local_bytes": kernel.function.local_size_bytes,
            "threads": tile[2],
            "smem": kernel.shared_bytes,
            "max_rel_err": max_error(kernel, tile, rng),
            "gflops": {},
        }
        for n in SIZES:
            a, b = (backend.from_numpy(rng.standard_normal((n, n)).astype(np.float32)) for _ in range(2))
            problem = launch_core.Gemm(n, n, n)
            call = functools.partial(
                matmul_launchers.matmul_tf32_async, DeviceArray.empty((n, n)), a, b, problem, kernel=kernel, tile=tile
            )
            row["gflops"][str(n)] = problem.flops / timing.launcher_seconds(call, 10) / 1e9
        rows[name] = row
        print(name, row, flush=True)
    cublas = {str(n): 2 * n**3 / torch_reference.cublas_seconds(n, n, n, 10, True) / 1e9 for n in SIZES}
    rounding = {k: v for k, v in rows.items() if not SHAPES[k][-1] and v["max_rel_err"] < 1e-3}
    best = max(rounding, key=lambda k: rounding[k]["gflops"]["4096"])
    out = {
        "command": "python3 -m minitorch_cuda.experiments.tf32_variants --json ... --adopt",
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "shapes": rows,
        "cublas_tf32_gflops": cublas,
        "best": best,
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print("best:", best)
    if args.adopt:
        for key, value in zip(KEYS, SHAPES[best]):
            source = re.sub(rf"^#define ASYNC_{key} \d+", f"#define ASYNC_{key} {value}", source, flags=re.M)
        path.write_text(source)


if __name__ == "__main__":
    main()
