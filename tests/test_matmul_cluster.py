"""Stage 9's split-K in one launch on Hopper (matmul_cluster_splitk*, kernels/matmul_cluster.cu):
the K-slices of a tile summed in a thread block cluster's distributed shared memory.

On the GPU: the same bits as the two-launch split-K of the same tile and splits (the header's
promise: the reduction's additions in its order), within float64's tolerance, the same bits
twice; a product the exact twin does not take is refused before anything launches. On the CPU:
nvcc's build (no spills, registers and shared memory for the blocks asked), the variant's name,
its one launch in the tuner's host time, its place among the candidates of a Hopper GPU, the
refusal on a GPU without clusters (the emulator's), and, on the emulator launched as on a Hopper,
the two-launch bits."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needs_gxx, needs_nvcc
from helpers import matmul_inputs, matmul_reference, run_emulated, sm90_build

from minitorch_cuda.cuda.kernel_table import CLUSTER_SPLITK_TILES, CLUSTER_SPLITS, KERNEL_DIR, REGTILED_TILES

# (M, N, K): square sizes of the benchmark, and oblong ones the 128 x 64 tile divides with K in
# 5 or 6 tiles of 8 per slice
SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (256, 192, 320), (384, 128, 192)]


def _gpu_clusters():
    from minitorch_cuda.cuda import probe, runtime

    if not probe.clusters_fit(runtime.arch()):
        pytest.skip(f"thread block clusters need compute capability 9.0; this GPU is {runtime.arch()}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("splits", CLUSTER_SPLITS)
@pytest.mark.parametrize("tile", CLUSTER_SPLITK_TILES)
def test_the_cluster_sums_the_two_launch_bits(tile, splits, shape):
    from minitorch_cuda.cuda import backend, launch_core, matmul_launchers

    _gpu_clusters()
    M, N, K = shape
    a, b = matmul_inputs(M, N, K, 0, 0, seed=M + N + K)
    ref, scale = matmul_reference(a, b, False, False)
    g = launch_core.Gemm(M, N, K)
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    runs = {}
    for variant in (f"{tile}_cluster{splits}", f"{tile}_splitk{splits}", f"{tile}_cluster{splits}"):
        out = backend.from_numpy(np.full((M, N), np.nan, np.float32))
        matmul_launchers.matmul_sgemm(out, da, db, g, variant=variant)
        runs.setdefault(variant, []).append(backend.to_numpy(out))
    one, two = runs[f"{tile}_cluster{splits}"], runs[f"{tile}_splitk{splits}"][0]
    assert np.all(np.abs(one[0] - ref) <= 1e-5 * scale + 1e-6), f"{tile} in {splits} at {shape}"
    assert np.array_equal(one[0], two), "the reduction's additions in its order: the two-launch bits"
    assert np.array_equal(one[0], one[1]), "the same bits every run"


@pytest.mark.gpu
def test_a_product_the_exact_twin_does_not_take_is_refused_before_launching():
    from minitorch_cuda import profiler
    from minitorch_cuda.cuda import backend, launch_core, matmul_launchers

    _gpu_clusters()
    a, b = matmul_inputs(256, 128, 200, 0, 0, seed=1)  # K = 200: 25 tiles of 8, no K-tile short
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    out = backend.from_numpy(np.zeros((256, 128), np.float32))
    for g in (launch_core.Gemm(256, 128, 200, ta=True), launch_core.Gemm(250, 128, 200)):
        before = profiler.counters.launches
        with pytest.raises(ValueError, match="divides exactly"):
            matmul_launchers.matmul_cluster_splitk(out, da, db, g, tile="128x64x8t128", splits=2)
        assert profiler.counters.launches == before
    with pytest.raises(ValueError, match="the splits"):
        problem = launch_core.Gemm(256, 128, 200)
        matmul_launchers.matmul_cluster_splitk(out, da, db, problem, tile="128x64x8t128", splits=3)


# --- CPU ---------------------------------------------------------------------------------------------


@needs_nvcc
def test_cluster_kernels_build_for_sm_90_without_spills_within_their_blocks(tmp_path):
    """ptxas's report: no stack or spills, registers and static shared memory (the stages and the
    tile a rank hands over) for the two blocks per SM that __launch_bounds__ asks."""
    report = sm90_build(KERNEL_DIR / "matmul_cluster.cu", tmp_path)
    for tile in CLUSTER_SPLITK_TILES:
        bm, bn, bk, threads = REGTILED_TILES[tile]
        for splits in CLUSTER_SPLITS:
            kernel = report[f"matmul_cluster_splitk{splits}_{tile}"]
            assert kernel.stack_bytes == kernel.spill_stores == kernel.spill_loads == 0, kernel
            assert kernel.registers * threads * 2 <= 65536, kernel
            stages = 2 * bk * (bm + 4 + bn + 4) * 4
            assert kernel.shared_bytes == stages + bm * bn * 4 <= 48 * 1024, kernel


HOPPER = """
import json
from minitorch_cuda.cuda import launch_core, matmul_choice, matmul_launchers, runtime

runtime.multiprocessors = lambda: 132
runtime.arch = lambda: "sm_90"
gemm = launch_core.Gemm
print(json.dumps({
    "1024": [v for v in matmul_choice.sgemm_candidates(gemm(1024, 1024, 1024)) if "cluster" in v],
    "1000": [v for v in matmul_choice.sgemm_candidates(gemm(1000, 1024, 1024)) if "cluster" in v],
    "4096": [v for v in matmul_choice.sgemm_candidates(gemm(4096, 4096, 4096)) if "cluster" in v],
    "parts": matmul_launchers.sgemm_parts("128x64x8t128_cluster2"),
    "host_ms": [matmul_choice.sgemm_host_ms(v) / matmul_choice.host_launch_ms()
                for v in ("128x64x8t128_cluster2", "128x64x8t128_splitk2")],
}))
"""

REFUSED = """
import numpy as np
from minitorch_cuda.cuda import backend, launch_core, matmul_launchers

a = backend.from_numpy(np.ones((256, 64), np.float32))
try:
    matmul_launchers.matmul_cluster_splitk(a, a, a, launch_core.Gemm(256, 64, 64), tile="128x64x8t128", splits=2)
except ValueError as exc:
    print(exc)
"""


AS_HOPPER = """
import sys
import numpy as np
from minitorch_cuda.cuda import backend, launch_core, matmul_launchers, runtime

runtime.arch = lambda: "sm_90"  # the emulator runs clusters; stage 9 offers them on a Hopper only
M, N, K, splits = map(int, sys.argv[1:5])
tile, path = sys.argv[5], sys.argv[6]
with np.load(path) as data:
    a, b = backend.from_numpy(data["a"]), backend.from_numpy(data["b"])
outs = {}
for way in ("cluster", "splitk"):
    out = backend.from_numpy(np.full((M, N), np.nan, np.float32))
    matmul_launchers.matmul_sgemm(out, a, b, launch_core.Gemm(M, N, K), variant=f"{tile}_{way}{splits}")
    outs[way] = backend.to_numpy(out)
np.savez(path, **outs)
"""


@needs_gxx
@pytest.mark.parametrize("shape", SHAPES[2:], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("splits", CLUSTER_SPLITS)
def test_the_cluster_sums_the_two_launch_bits_on_the_emulator(splits, shape, tmp_path):
    """The emulator runs the clusters (tests/test_emulator_cluster.py): the product within float64's
    tolerance, and the same bits as the split in two launches."""
    (tile,) = CLUSTER_SPLITK_TILES
    M, N, K = shape
    a, b = matmul_inputs(M, N, K, 0, 0, seed=M + N + K)
    ref, scale = matmul_reference(a, b, False, False)
    np.savez(tmp_path / "io.npz", a=a, b=b)
    run_emulated(AS_HOPPER, str(M), str(N), str(K), str(splits), tile, str(tmp_path / "io.npz"))
    got = np.load(tmp_path / "io.npz")
    assert np.all(np.abs(got["cluster"] - ref) <= 1e-5 * scale + 1e-6), f"{tile} in {splits} at {shape}"
    assert np.array_equal(got["cluster"], got["splitk"]), "the reduction's additions in its order"


@needs_gxx
def test_a_hopper_gpu_times_the_cluster_where_the_split_twin_would_run():
    got = json.loads(run_emulated(HOPPER))
    # 1024^3 in 128 x 64 tiles: 128 blocks for 132 SMs, split in 2; 4096^3 fills the SMs unsplit
    assert got == {"1024": ["128x64x8t128_cluster2"], "1000": [], "4096": [],
                   "parts": ["cluster", "128x64x8t128", 2], "host_ms": [1.0, 2.0]}  # fmt: skip


@needs_gxx
def test_a_gpu_without_clusters_is_refused_with_its_name():
    said = run_emulated(REFUSED)
    assert "needs thread block clusters (compute capability 9.0 or newer)" in said and "sm_80" in said, said
