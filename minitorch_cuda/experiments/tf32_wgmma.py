"""Time wgmma.cu's TF32 kernel beside stage 12's mma.sync kernel and cuBLAS TF32, in one run.

    python3 -m minitorch_cuda.experiments.tf32_wgmma --json $OUT/tf32_wgmma.json

The wgmma kernel computes C = A B^T from K-contiguous operands; the others get A and B as
stored (no transposes), as stage 12's mma.sync path does for a @ b. "matmul_wgmma a @ b" is
what stage 12 runs from 1024^3 multiply-adds up on Hopper (ops_matmul.WGMMA_MIN_PRODUCT):
ops_matmul.matmul_wgmma, B transposed first, then the kernel. Before timing, each kernel's
result at 264 x 260 x 300 is held to float64 (largest error relative to |A| |B|).
"""

import argparse
import datetime
import functools
import json

import numpy as np
import pycuda.autoprimaryctx  # noqa: F401
import pycuda.driver as drv

from minitorch_cuda import bench
from minitorch_cuda.cuda import backend, ops_matmul, registry
from minitorch_cuda.cuda.array import DeviceArray
from minitorch_cuda.cuda.kernel_table import ASYNC_TILE, WGMMA_TILE

SIZES = (1024, 2048, 4096)


def launcher(name: str, a, b, c, M: int, N: int, K: int):
    """A call that launches kernel ``name`` once on device arrays (b is N x K for wgmma)."""
    kernel = registry.get(name)
    bm, bn, threads = WGMMA_TILE if name == "matmul_tf32_wgmma" else ASYNC_TILE
    grid = (-(-N // bn), -(-M // bm), 1)
    flags = () if name == "matmul_tf32_wgmma" else (0, 0)  # a @ b, both as stored
    args = (c, a, b, M, N, K, *flags, 0, 0)
    return functools.partial(kernel.launch_async, grid, (threads, 1, 1), None, *args)


def max_error(name: str, rng) -> float:
    M, N, K = 264, 260, 300
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    stored_b = np.ascontiguousarray(b.T) if name == "matmul_tf32_wgmma" else b
    c = np.empty((M, N), np.float32)
    dc = drv.mem_alloc(c.nbytes)
    launcher(name, drv.to_device(a), drv.to_device(stored_b), dc, M, N, K)()
    drv.memcpy_dtoh(c, dc)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(c - a64 @ b64) / (np.abs(a64) @ np.abs(b64))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = {}
    for name in ("matmul_tf32_wgmma", "matmul_tf32_async"):
        kernel = registry.get(name).function
        row = {"registers": kernel.num_regs, "max_rel_err": max_error(name, rng), "gflops": {}}
        for n in SIZES:
            a, b = (drv.to_device(rng.standard_normal((n, n)).astype(np.float32)) for _ in range(2))
            c = drv.mem_alloc(4 * n * n)
            row["gflops"][str(n)] = 2 * n**3 / bench._median_seconds(launcher(name, a, b, c, n, n, n), 10, drv) / 1e9
        rows[name] = row
        print(name, row, flush=True)
    row = {"gflops": {}}
    for n in SIZES:
        a, b = (backend.from_numpy(rng.standard_normal((n, n)).astype(np.float32)) for _ in range(2))
        c = DeviceArray.empty((n, n))
        call = functools.partial(ops_matmul.matmul_wgmma, c, a, b, n, n, n, False, False, 0, 0, 1)
        row["gflops"][str(n)] = 2 * n**3 / bench._median_seconds(call, 10, drv) / 1e9
    rows["matmul_wgmma a @ b"] = row
    print("matmul_wgmma a @ b", row, flush=True)
    cublas = {str(n): 2 * n**3 / bench._cublas_seconds(n, n, n, 10, True) / 1e9 for n in SIZES}
    print("cublas tf32", cublas)
    out = {
        "command": "python3 -m minitorch_cuda.experiments.tf32_wgmma --json ...",
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "kernels": rows,
        "cublas_tf32_gflops": cublas,
        "fraction_of_cublas": {name: {n: row["gflops"][n] / cublas[n] for n in cublas} for name, row in rows.items()},
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
