"""Time wgmma.cu's TF32 kernel beside stage 12's mma.sync kernel and cuBLAS TF32, in one run.

    python3 -m minitorch_cuda.experiments.tf32_wgmma --json $OUT/tf32_wgmma.json

The wgmma kernel computes C = A B^T from K-contiguous operands: "matmul_tf32_wgmma" times it
alone, given B^T. mma.sync gets A and B as stored, as stage 12's mma.sync path does for a @ b.
"matmul_wgmma a @ b" is the same launcher given B as stored, which transposes it first.
The "matmul_tf32_wgmma_tma" rows are wgmma_tma.cu, with 128 x 256 and 128 x 128 tiles, given B^T;
"matmul_tf32_wgmma_tma a @ b" is stage 12's route from 1024^3 multiply-adds up on Hopper
(ops_matmul.WGMMA_MIN_PRODUCT): the same kernel after the transpose of B, or its N-major build
reading B as stored, at the tile width and in the way matmul_choice.wgmma_tma_variant times and
keeps for the shape; the two rows after it time each way at 256 columns. "transposes" times the
transpose (transpose_2d, n x n) beside a device-to-device copy of the same bytes, its bandwidth peer.
Before timing, each result at 264 x 260 x 300 is held to float64 (largest error relative to
|A| |B|). Every launch goes through cuda/matmul_launchers.py, as the backend's does. The record is
written after every row: a kernel that faults is recorded with its error, the rows before it kept.
"""

import argparse
import datetime
import functools
import json

import numpy as np

from minitorch_cuda import torch_reference
from minitorch_cuda.cuda import (
    backend,
    launch_core,
    launchers,
    matmul_choice,
    matmul_launchers,
    registry,
    runtime,
    timing,
)
from minitorch_cuda.cuda.array import DeviceArray
from minitorch_cuda.cuda.kernel_table import SPECS
from minitorch_cuda.cuda.runtime import KernelError
from minitorch_cuda.needs_gpu import refuse_emulated

SIZES = (1024, 2048, 4096)
CASES = {  # row: (launcher, whether B is handed over as B^T, N x K)
    "matmul_tf32_wgmma": (matmul_launchers.matmul_tf32_wgmma, True),
    "matmul_tf32_async": (matmul_launchers.matmul_tf32_async, False),
    "matmul_wgmma a @ b": (matmul_launchers.matmul_tf32_wgmma, False),
    # wgmma_tma.cu (TMA, mbarriers, warp specialization, persistent blocks), given B^T like the first row
    "matmul_tf32_wgmma_tma": (functools.partial(matmul_launchers.matmul_tf32_wgmma_tma, bn=256), True),
    "matmul_tf32_wgmma_tma a @ b": (matmul_choice.matmul_tf32_wgmma_tma, False),  # stage 12's route
    # its two ways at one width, each launch timed alone on the GPU: B transposed first, B as stored
    "matmul_tf32_wgmma_tma a @ b, B transposed": (
        functools.partial(matmul_launchers.matmul_tf32_wgmma_tma, bn=256, as_stored=False),
        False,
    ),
    "matmul_tf32_wgmma_tma a @ b, B as stored": (
        functools.partial(matmul_launchers.matmul_tf32_wgmma_tma, bn=256, as_stored=True),
        False,
    ),
    "matmul_tf32_wgmma_tma 128x128": (functools.partial(matmul_launchers.matmul_tf32_wgmma_tma, bn=128), True),
}


def operands(rng, M: int, N: int, K: int, b_transposed: bool):
    """Host A and B, the problem, and A and B on the device as the case hands them over."""
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    stored_b = np.ascontiguousarray(b.T) if b_transposed else b
    problem = launch_core.Gemm(M, N, K, tb=b_transposed)
    return a, b, problem, backend.from_numpy(a), backend.from_numpy(stored_b)


def max_error(name: str, rng) -> float:
    launch, b_transposed = CASES[name]
    a, b, problem, da, db = operands(rng, 264, 260, 300, b_transposed)
    c = DeviceArray.empty((problem.M, problem.N))
    launch(c, da, db, problem)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(backend.to_numpy(c) - a64 @ b64) / (np.abs(a64) @ np.abs(b64))))


def transpose_row(n: int) -> dict:
    """Microseconds and GB/s (bytes read plus written) of transpose_2d on an n x n matrix and of
    a device-to-device copy of it, in the same run."""
    x, out = DeviceArray.empty((n, n)), DeviceArray.empty((n, n))
    transpose_s = timing.launcher_seconds(functools.partial(launchers.transpose, out, x, n, n, 0), 10)
    copy_s = timing.seconds_per_call(lambda: runtime.copy_dtod(out.ptr, x.ptr, 4 * n * n), 10)
    moved = 2 * 4 * n * n / 1e9
    return {"transpose_us": transpose_s * 1e6, "copy_us": copy_s * 1e6,
            "transpose_gbps": moved / transpose_s, "copy_gbps": moved / copy_s}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    refuse_emulated("python -m minitorch_cuda.experiments.tf32_wgmma")
    import pycuda.autoprimaryctx  # noqa: F401  (imported here: the refusal above comes first)
    import pycuda.driver as drv

    rng = np.random.default_rng(0)
    # The peers first, then one kernel row at a time, the record rewritten after each: a kernel
    # that faults leaves the CUDA context unusable, and the rows before it must not be lost.
    cublas = {str(n): 2 * n**3 / torch_reference.cublas_seconds(n, n, n, 10, True) / 1e9 for n in SIZES}
    print("cublas tf32", cublas, flush=True)
    transposes = {str(n): transpose_row(n) for n in SIZES}
    print("transposes", transposes, flush=True)
    out = {
        "command": "python3 -m minitorch_cuda.experiments.tf32_wgmma --json ...",
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": runtime.device_name(),  # the H200 or an H100: the shares are not the same between them
        "kernels": {},
        "cublas_tf32_gflops": cublas,
        "transposes": transposes,
        "fraction_of_cublas": {},
    }
    for name, (launch, b_transposed) in CASES.items():
        try:
            row = {"max_rel_err": max_error(name, rng), "gflops": {}}
            if name in SPECS:  # a kernel of its own (not a route through one)
                row["registers"] = registry.get(name).function.num_regs
            for n in SIZES:
                _, _, problem, da, db = operands(rng, n, n, n, b_transposed)
                call = functools.partial(launch, DeviceArray.empty((n, n)), da, db, problem)
                row["gflops"][str(n)] = problem.flops / timing.launcher_seconds(call, 10) / 1e9
        except (KernelError, drv.Error) as exc:  # a fault, or a call on the context it broke
            out["kernels"][name] = {"error": str(exc)}
            _write(args.json, out)
            raise SystemExit(f"{name} failed; the rows before it are in {args.json}: {exc}") from None
        out["kernels"][name] = row
        out["fraction_of_cublas"][name] = {n: row["gflops"][n] / cublas[n] for n in cublas}
        _write(args.json, out)
        print(name, row, flush=True)


def _write(path: str, out: dict) -> None:
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
