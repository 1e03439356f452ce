"""What each feature of chapter 19's TMA kernel buys: wgmma_tma.cu with one feature taken away at a
time, beside the whole kernel and cuBLAS TF32, in one run.

    python3 -m minitorch_cuda.experiments.tma_ablation        (writes book/results/ch19_tma_ablation.json)

The kernel (C = A B^T, B^T given, as the "matmul_tf32_wgmma_tma" row of tf32_wgmma.py) has four
features over wgmma.cu: TMA copies, two consumer warpgroups beside a producer (warp
specialization), persistent blocks, and 128 x 256 tiles. Each variant below is the whole kernel
less one of them, built by ``registry.variant`` with other defines (wgmma_tma.cu's WT_TMA,
WT_CONSUMERS, WT_BN) or launched otherwise (a block per tile), through the launcher the backend
uses (matmul_launchers.matmul_tf32_wgmma_tma). Rounds interleave the variants and cuBLAS, so that a
clock or temperature drift touches them alike; each number is the median over the rounds of
``timing.launcher_seconds``. Every variant's product at 264 x 260 x 300 is first held to float64.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys

import numpy as np

NAME = "ch19_tma_ablation"
SIZES = (4096, 2048)
# name: (what is taken away, the launcher's switches; "blocks": None is filled in as the tile count)
VARIANTS = {
    "whole kernel": ("nothing: TMA, two consumers, persistent blocks, 128 x 256 tiles", {"bn": 256}),
    "TMA off": ("the copy engine: the producer warpgroup's 128 threads copy by cp.async", {"bn": 256, "tma": False}),
    "one consumer": ("the second consumer: one consumer warpgroup on 64 x 256 tiles", {"bn": 256, "consumers": 1}),
    "no persistence": ("persistence: one tile a block, a block per tile", {"bn": 256, "blocks": None}),
    "narrower tile": ("half the tile's width: 128 x 128 tiles", {"bn": 128}),
}


def switches(name: str, tiles: int) -> dict:
    """The launcher's keyword arguments for variant ``name`` on a product of ``tiles`` 128 x 256 tiles."""
    found = dict(VARIANTS[name][1])
    if "blocks" in found:
        found["blocks"] = tiles  # as many blocks as tiles: each block computes one
    return found


def fractions(record: dict) -> dict[str, dict[str, float]]:
    """Each variant's GFLOP/s over cuBLAS TF32's in the same run, per size ("4096": ...)."""
    cublas = record["cublas_tf32_gflops"]
    return {
        name: {n: v["gflops"][n] / cublas[n] for n in cublas if n in v.get("gflops", {})}
        for name, v in record["variants"].items()
    }


def summary(record: dict) -> str:
    sizes = list(record["cublas_tf32_gflops"])
    lines = [f"{'variant':16s}" + "".join(f" {n + '^3':>8s}" for n in sizes)]
    for name, per in fractions(record).items():
        lines.append(f"{name:16s}" + "".join(f" {per.get(n, float('nan')):8.1%}" for n in sizes))
    lines.append("(GFLOP/s as a fraction of cuBLAS TF32 in the same run)")
    return "\n".join(lines)


def measure(rounds: int = 3, repeats: int = 10) -> dict:
    """Time every variant and cuBLAS TF32 at SIZES, ``rounds`` times interleaved."""
    from minitorch_cuda import torch_reference
    from minitorch_cuda.cuda import backend, launch_core, matmul_launchers, timing
    from minitorch_cuda.cuda.array import DeviceArray
    from minitorch_cuda.cuda.runtime import arch, device_properties

    if arch() != "sm_90":
        raise SystemExit(f"the TMA kernel needs a Hopper GPU (sm_90); this one is {arch()}")
    rng = np.random.default_rng(0)
    launch = matmul_launchers.matmul_tf32_wgmma_tma

    def problem(m: int, n: int, k: int):
        a = rng.standard_normal((m, k)).astype(np.float32)
        b_t = rng.standard_normal((n, k)).astype(np.float32)  # B^T: both operands K-contiguous
        return a, b_t, launch_core.Gemm(m, n, k, tb=True), backend.from_numpy(a), backend.from_numpy(b_t)

    def tiles(g) -> int:
        return -(-g.M // 128) * -(-g.N // 256)

    record = {"device": device_properties(), "rounds": rounds, "repeats": repeats, "variants": {}}
    a, b_t, g, da, db = problem(264, 260, 300)
    exact = a.astype(np.float64) @ b_t.T.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b_t.T.astype(np.float64))
    for name, (removed, _) in VARIANTS.items():
        c = DeviceArray.empty((g.M, g.N))
        launch(c, da, db, g, **switches(name, tiles(g)))
        error = float(np.max(np.abs(backend.to_numpy(c) - exact) / scale))
        record["variants"][name] = {"removed": removed, "switches": switches(name, 0), "max_rel_err": error}

    samples = {name: {str(n): [] for n in SIZES} for name in [*VARIANTS, "cublas_tf32"]}
    for _ in range(rounds):
        for n in SIZES:
            _, _, g, da, db = problem(n, n, n)
            c = DeviceArray.empty((n, n))
            for name in VARIANTS:
                call = functools.partial(launch, c, da, db, g, **switches(name, tiles(g)))
                samples[name][str(n)].append(g.flops / timing.launcher_seconds(call, repeats) / 1e9)
            samples["cublas_tf32"][str(n)].append(
                2 * n**3 / torch_reference.cublas_seconds(n, n, n, repeats, True) / 1e9
            )
    for name in VARIANTS:
        record["variants"][name]["gflops"] = {n: statistics.median(v) for n, v in samples[name].items()}
    record["cublas_tf32_gflops"] = {n: statistics.median(v) for n, v in samples["cublas_tf32"].items()}
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--repeats", type=int, default=10, help="timed samples per variant and round (default 10)")
    args = parser.parse_args(argv)
    from minitorch_cuda.needs_gpu import refuse_emulated

    command = "python3 -m minitorch_cuda.experiments.tma_ablation " + " ".join(argv or sys.argv[1:])
    refuse_emulated(command.strip())
    from minitorch_cuda import results
    from minitorch_cuda.cuda.probe import cuda_unavailable_reason

    if cuda_unavailable_reason():
        print(f"{command.strip()}: needs a CUDA GPU: {cuda_unavailable_reason()}", file=sys.stderr)
        return 2
    record = measure(args.rounds, args.repeats)
    print(summary(record))
    print(results.save(NAME, record, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
