"""Stage 9's pipelined SGEMM (kernels/matmul_pipelined.cu) and its split-K twin against float64.

On the CPU emulator (a subprocess with MINITORCH_CUDA_EMULATE=1, small shapes: every GPU thread
is a fiber there) the emulated cp.async copies land at the wait that covers them, so a wait
for too few batches gives wrong numbers on every run: the test that builds the kernel with
PIPELINED_WAIT_LAG=1 proves the comparison can fail. The large sizes need a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_gxx, needs_nvcc
from helpers import MATMUL_CASES, large_product, matmul_inputs, matmul_wrong, run_emulated, sm90_build

from minitorch_cuda.cuda.kernel_table import PIPELINED_TILES, REGTILED_TILES

VARIANTS = [f"pipelined_{t}" for t in PIPELINED_TILES] + ["pipelined_128x128x16_splitk2", "pipelined_64x64x16_splitk3"]
# One variant over MATMUL_CASES through its launcher, built with PIPELINED_WAIT_LAG = lag, the output
# poisoned with NaN first.
EMULATED_RUN = """
import json, sys
import numpy as np
from minitorch_cuda.cuda import backend, launch_core, matmul_launchers, registry

variant, lag, folder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
_, tile, *split = variant.split("_")
splits = int(split[0].removeprefix("splitk")) if split else 1
name = f"matmul_pipelined_{tile}" if splits == 1 else f"matmul_pipelined_splitk_{tile}"
kernel = registry.variant(name, {"PIPELINED_WAIT_LAG": lag})
inputs = np.load(f"{folder}/inputs.npz")
outputs = {}
for i, (M, N, K, ta, tb, batch_a, batch_b) in enumerate(json.loads(sys.argv[4])):
    a, b = inputs[f"a{i}"], inputs[f"b{i}"]
    g = launch_core.Gemm.of(a, b, bool(ta), bool(tb))
    out = backend.from_numpy(np.full((g.batch, M, N), np.nan, np.float32))
    matmul_launchers.matmul_pipelined(out, backend.from_numpy(a), backend.from_numpy(b), g, tile=tile, splits=splits,
                               kernel=kernel)
    outputs[f"c{i}"] = backend.to_numpy(out)
np.savez(f"{folder}/outputs.npz", **outputs)
"""


def _emulated(variant: str, lag: int, tmp_path: Path, seed: int) -> list[int]:
    """Wrong elements per case of ``variant`` run on the emulator."""
    pairs = [matmul_inputs(*case, seed=seed + i) for i, case in enumerate(MATMUL_CASES)]
    np.savez(tmp_path / "inputs.npz", **{f"{x}{i}": v for i, p in enumerate(pairs) for x, v in zip("ab", p)})
    run_emulated(EMULATED_RUN, variant, str(lag), str(tmp_path), json.dumps(MATMUL_CASES))
    outputs = np.load(tmp_path / "outputs.npz")
    cases = zip(pairs, MATMUL_CASES)
    return [matmul_wrong(outputs[f"c{i}"], *pair, case[3], case[4]) for i, (pair, case) in enumerate(cases)]


@needs_gxx
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_matches_float64_on_the_emulator(variant, tmp_path):
    wrong = _emulated(variant, 0, tmp_path, seed=len(variant))
    assert wrong == [0] * len(MATMUL_CASES), dict(zip(map(str, MATMUL_CASES), wrong))


@needs_gxx
@pytest.mark.parametrize("variant", ["pipelined_128x128x16", "pipelined_64x64x16_splitk3"])
def test_a_wait_one_batch_short_fails(variant, tmp_path):
    # Waiting until STAGES - 1 batches remain instead of STAGES - 2 leaves the slice about to be
    # read in flight, from the first slice on: every case, K = 1 too, multiplies stale tiles.
    wrong = _emulated(variant, 1, tmp_path, seed=7)
    assert all(w > 0 for w in wrong), dict(zip(map(str, MATMUL_CASES), wrong))


# The split counts for an H200's 132 SMs, and what the stage-9 choice does on the emulator.
CHOICES = """
import json
import numpy as np
from minitorch_cuda.cuda import backend, launch_core, matmul_choice, runtime
from minitorch_cuda.cuda.autotune import tuner

gemm = launch_core.Gemm
a, b, c = (backend.from_numpy(np.ones((8, 8), np.float32)) for _ in range(3))
matmul_choice.matmul_sgemm(c, a, b, gemm(8, 8, 8))
emulated = tuner.choices()
runtime.multiprocessors = lambda: 132
print(json.dumps({
    "1024 128": matmul_choice.splitk_counts(gemm(1024, 1024, 1024), "128x128x16"),
    "1024 64": matmul_choice.splitk_counts(gemm(1024, 1024, 1024), "64x64x16"),
    "64x10x128": matmul_choice.splitk_counts(gemm(64, 10, 128), "64x64x16"),
    "dW1": matmul_choice.splitk_counts(gemm(784, 256, 64), "64x64x16"),
    "fwd1": matmul_choice.sgemm_candidates(gemm(64, 256, 784)),
    "fwd3": matmul_choice.sgemm_candidates(gemm(64, 10, 128)),
    "emulated": emulated,
}))
"""


@needs_gxx
def test_split_counts_fill_the_multiprocessors_and_the_emulator_times_no_new_variant():
    got = json.loads(run_emulated(CHOICES))
    assert got["1024 128"] == [2, 4]  # 64 blocks for 132 SMs: 128, then 256
    assert got["1024 64"] == []  # 256 blocks already cover them
    assert got["64x10x128"] == [2]  # 8 K-tiles: 2 slices of 4, not 4 of 2
    assert got["dW1"] == []  # MNIST's weight gradient, K = 64: 4 K-tiles, no split
    assert "pipelined_64x64x16_splitk8" in got["fwd1"] and "pipelined_64x64x16_splitk16" not in got["fwd1"]
    assert got["fwd3"] == ["pipelined_32x32x16", "pipelined_32x32x16_splitk2"]  # only a 32-wide tile fits N = 10
    stage9 = got["emulated"]["matmul_sgemm 8,8,8,0,0,1,True,True"]
    assert stage9["how"] == "heuristic" and stage9["choice"] in REGTILED_TILES, stage9


# --- GPU: the benchmark's sizes -----------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 2048, 4096])
@pytest.mark.parametrize("variant", VARIANTS + [None])
def test_large_products_against_float64(variant, n):
    from minitorch_cuda.cuda import backend, launch_core, matmul_choice, matmul_launchers

    a, b, ref, scale = large_product(n)
    g = launch_core.Gemm(n, n, n)
    out = backend.from_numpy(np.full((n, n), np.nan, np.float32))
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    if variant is None:  # the tuner's choice (a launcher never chooses)
        matmul_choice.matmul_sgemm(out, da, db, g)
    else:
        matmul_launchers.matmul_sgemm(out, da, db, g, variant=variant)
    got = backend.to_numpy(out)
    assert np.all(np.abs(got - ref) <= 1e-5 * scale + 1e-6), f"{variant or 'the autotuned one'} at {n}^3"


# --- CPU: nvcc's build for the H200 -------------------------------------------------------------

# Blocks per SM each variant asks of ptxas (its __launch_bounds__).
RESIDENT = {"128x128x16": 2, "128x128x16s3": 2, "128x64x16": 3, "64x64x16": 4, "32x32x16": 8}


@needs_nvcc
def test_builds_for_sm_90_without_spills_and_fits_its_blocks(tmp_path):
    """ptxas's report per kernel: no stack, no spills, registers within the 64 K an SM has for
    the resident blocks asked for, no static shared memory, and the dynamic shared memory the
    launch gives (its stages of A^T and B, rows padded by 4) within an H200 SM for those blocks."""
    from minitorch_cuda.cuda.kernel_table import KERNEL_DIR, SPECS

    report = sm90_build(KERNEL_DIR / "matmul_pipelined.cu", tmp_path)
    for tile, (bm, bn, bk, threads, stages) in PIPELINED_TILES.items():
        blocks = RESIDENT[tile]
        for name in (f"matmul_pipelined_{tile}", f"matmul_pipelined_splitk_{tile}"):
            kernel = report[name]
            assert kernel.stack_bytes == kernel.spill_stores == kernel.spill_loads == 0, kernel
            assert kernel.registers * threads * blocks <= 65536, kernel
            assert kernel.shared_bytes == 0, kernel  # no static shared memory: the launch gives it
            shared = SPECS[name].shared_bytes
            assert shared == stages * bk * (bm + 4 + bn + 4) * 4, (name, shared)
            assert (shared + 1024) * blocks <= 228 * 1024, (name, shared)  # + 1 KB the SM keeps per block
