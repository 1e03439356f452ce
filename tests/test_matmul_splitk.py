"""Stage 9's register-tiled split-K (matmul_regtiled_splitk_*, kernels/matmul_regtiled.cu) against
float64, and the sgemm tuner's host time per variant (matmul_choice.sgemm_host_ms).

The emulated runs (a subprocess with MINITORCH_CUDA_EMULATE=1) check every K-slice the split
kernel writes against the float64 product over that slice's K range, not only their sum: a slice
that overlaps its neighbour, or drops a tile, fails even where the total happens to be close.
The large sizes, the timing and the host-launch measurement need a GPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import needs_gxx, needs_nvcc
from helpers import MATMUL_CASES, large_product, launch_bounds, matmul_inputs, matmul_wrong, run_emulated, sm90_build

from minitorch_cuda.cuda.autotune import Autotuner
from minitorch_cuda.cuda.kernel_table import KERNEL_DIR, REGTILED_SPLITK_TILES, REGTILED_TILES

SPLITS = (2, 3, 4)  # 3: K-tiles seldom divide evenly; 4 on K = 17 (3 tiles of 8): a slice past the end
# beyond helpers.MATMUL_CASES: K = 20 in tiles of 8 (3 tiles, the last one ragged)
MORE_CASES = [(40, 70, 20, 1, 0, (2,), (2,)), (5, 3, 257, 0, 1, (), (2,))]

# Each split count of one tile over the cases, through matmul_sgemm's variant name (the sum), and
# the split kernel alone into a NaN-poisoned scratch (every slice).
EMULATED_RUN = """
import json, sys
import numpy as np
from minitorch_cuda.cuda import backend, launch_core, matmul_launchers, registry, runtime
from minitorch_cuda.cuda.kernel_table import REGTILED_TILES

tile, splits, folder = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
bm, bn, _, threads = REGTILED_TILES[tile]
inputs = np.load(f"{folder}/inputs.npz")
outputs = {}
for i, (M, N, K, ta, tb, batch_a, batch_b) in enumerate(json.loads(sys.argv[4])):
    a, b = inputs[f"a{i}"], inputs[f"b{i}"]
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    g = launch_core.Gemm.of(a, b, bool(ta), bool(tb))
    for s in splits:
        out = backend.from_numpy(np.full((g.batch, M, N), np.nan, np.float32))
        matmul_launchers.matmul_sgemm(out, da, db, g, variant=f"{tile}_splitk{s}")
        outputs[f"c{i}_{s}"] = backend.to_numpy(out)
        partial = backend.from_numpy(np.full((g.batch * s, M, N), np.nan, np.float32))
        grid = (*g.grid(bm, bn)[:2], g.batch * s)
        runtime.launch(registry.get(f"matmul_regtiled_splitk_{tile}"), grid, (threads, 1, 1),
                       partial.ptr, da.ptr, db.ptr, *g.args, s)
        outputs[f"p{i}_{s}"] = backend.to_numpy(partial)
np.savez(f"{folder}/outputs.npz", **outputs)
"""


def _k_slices(K: int, bk: int, splits: int) -> list[tuple[int, int]]:
    """The K range of each slice: whole BK-tiles, ceil(tiles / splits) of them a slice (the
    header's contract); a slice past the end is empty."""
    tiles = -(-K // bk)
    per = -(-tiles // splits) * bk
    return [(min(K, s * per), min(K, (s + 1) * per)) for s in range(splits)]


def _slice_wrong(partial, a, b, ta, tb, bk: int, splits: int) -> int:
    """Elements of the split kernel's scratch (batch * splits matrices, slice-minor) that miss
    the float64 product over their slice's K range."""
    ka, kb = (-2 if ta else -1), (-1 if tb else -2)  # the K axis of each operand
    wrong = 0
    for s, (k0, k1) in enumerate(_k_slices(a.shape[ka], bk, splits)):
        part_a = np.take(a, range(k0, k1), axis=ka)
        part_b = np.take(b, range(k0, k1), axis=kb)
        got = partial.reshape(-1, splits, *partial.shape[-2:])[:, s]
        wrong += matmul_wrong(got, part_a, part_b, ta, tb)
    return wrong


@needs_gxx
@pytest.mark.parametrize("tile", REGTILED_SPLITK_TILES)
def test_each_split_and_every_slice_match_float64_on_the_emulator(tile, tmp_path):
    cases = MATMUL_CASES + MORE_CASES
    pairs = [matmul_inputs(*case, seed=len(tile) + i) for i, case in enumerate(cases)]
    np.savez(tmp_path / "inputs.npz", **{f"{x}{i}": v for i, p in enumerate(pairs) for x, v in zip("ab", p)})
    run_emulated(EMULATED_RUN, tile, json.dumps(SPLITS), str(tmp_path), json.dumps(cases))
    outputs = np.load(tmp_path / "outputs.npz")
    bk = REGTILED_TILES[tile][2]
    wrong = {
        (str(case), s): (matmul_wrong(outputs[f"c{i}_{s}"], a, b, case[3], case[4]),
                         _slice_wrong(outputs[f"p{i}_{s}"], a, b, case[3], case[4], bk, s))
        for i, (case, (a, b)) in enumerate(zip(cases, pairs))
        for s in SPLITS
    }  # fmt: skip
    assert all(w == (0, 0) for w in wrong.values()), {k: w for k, w in wrong.items() if w != (0, 0)}


def test_k_slices_cover_k_once_in_whole_tiles():
    assert _k_slices(74, 8, 3) == [(0, 32), (32, 64), (64, 74)]  # 10 tiles: 4, 4, 2
    assert _k_slices(17, 8, 4) == [(0, 8), (8, 16), (16, 17), (17, 17)]  # 3 tiles: the last slice empty


# The candidates on an H200's 132 SMs, and their host time with the emulator's nominal launch cost.
CHOICES = """
import json
from minitorch_cuda.cuda import launch_core, matmul_choice, matmul_launchers, runtime

gemm = launch_core.Gemm
runtime.multiprocessors = lambda: 132
cube = matmul_choice.sgemm_candidates(gemm(1024, 1024, 1024))
print(json.dumps({
    "counts": {t: matmul_choice.splitk_counts(gemm(1024, 1024, 1024), t) for t in ("128x128x8", "128x64x8t128",
                                                                            "256x128x8", "64x64x16")},
    "1024": [v for v in cube if not v.startswith("pipelined_")],
    "1024 all": len(cube),
    "2048": [v for v in matmul_choice.sgemm_candidates(gemm(2048, 2048, 2048)) if not v.startswith("pipelined_")],
    "fwd3": matmul_choice.sgemm_candidates(gemm(64, 10, 128)),
    "parts": [matmul_launchers.sgemm_parts(v) for v in ("128x128x8", "128x64x8t128_splitk2", "pipelined_128x128x16s3",
                                                 "pipelined_64x64x16_splitk4")],
    "host": matmul_choice.host_launch_ms(),
    "host_ms": {v: matmul_choice.sgemm_host_ms(v) for v in ("64x64x16", "256x128x8_splitk4",
                                                           "pipelined_32x32x16", "pipelined_32x32x16_splitk8")},
}))
"""


@needs_gxx
def test_split_candidates_of_the_register_tiles_and_their_host_time():
    got = json.loads(run_emulated(CHOICES))
    # 1024^3 on 132 SMs: 64 blocks of 128 x 128 (2: 128, 4: 256), 128 of 128 x 64, 32 of 256 x 128
    assert got["counts"] == {"128x128x8": [2, 4], "128x64x8t128": [2], "256x128x8": [2, 4, 8], "64x64x16": []}
    assert got["1024"] == ["128x128x8_splitk2", "128x128x8_splitk4", "128x64x8t128_splitk2", "256x128x8_splitk2",
                           "256x128x8_splitk4", "256x128x8_splitk8"]  # fmt: skip
    assert got["1024 all"] <= 20  # each timed 3 times on the first call of the shape
    assert got["2048"] == ["256x128x8_splitk2"]  # 128 blocks of 256 x 128 for 132 SMs
    assert got["fwd3"] == ["pipelined_32x32x16", "pipelined_32x32x16_splitk2"]  # N = 10: no 64-wide tile fits
    assert got["parts"] == [["regtiled", "128x128x8", 1], ["regtiled", "128x64x8t128", 2],
                            ["pipelined", "128x128x16s3", 1], ["pipelined", "64x64x16", 4]]  # fmt: skip
    host = got["host"]
    assert host > 0
    assert got["host_ms"] == {"64x64x16": host, "256x128x8_splitk4": 2 * host, "pipelined_32x32x16": host,
                              "pipelined_32x32x16_splitk8": 2 * host}  # fmt: skip


# --- CPU: the host's time in the tuner -----------------------------------------------------------


def _host(name: str) -> float:
    return 0.020 if "splitk" in name else 0.010  # 10 us of host time a launch; a split has two


@pytest.mark.parametrize(
    ("split_ms", "plain_ms", "expected"),
    [
        (0.027, 0.0428, "split"),  # the GPU is slower than the host either way: the faster GPU time wins
        (0.012, 0.0150, "plain"),  # the split's GPU time hides under its two launches: 20 us against 15
        (0.0887, 0.0951, "split"),  # 1024^3: the host's 20 us hide under the product's 89 us
    ],
)
def test_a_split_wins_where_the_gpu_not_the_host_is_what_the_product_waits_for(split_ms, plain_ms, expected):
    fake = {"plain": plain_ms, "split": split_ms}
    names = {"plain": "32x32x8", "split": "pipelined_32x32x16_splitk8"}
    timings = {names[k]: v for k, v in fake.items()}
    untimed = Autotuner(enabled=True, repeats=3)
    assert untimed.pick("sgemm", (64, 256, 784), list(timings), timings.__getitem__) == names[min(fake, key=fake.get)]
    tuner = Autotuner(enabled=True, repeats=3)
    assert tuner.pick("sgemm", (64, 256, 784), list(timings), timings.__getitem__, host_ms=_host) == names[expected]
    record = tuner.choices()["sgemm 64,256,784"]
    # the measured GPU times as they were; the host's beside them
    assert record == {"choice": names[expected], "how": "timed", "timings_ms": timings,
                      "host_ms": {"32x32x8": 0.010, "pipelined_32x32x16_splitk8": 0.020}}  # fmt: skip
    json.dumps(record)


def test_no_host_time_is_recorded_where_none_was_given():
    tuner = Autotuner(enabled=True, repeats=1)
    tuner.pick("sgemm", 1, ["a", "b"], {"a": 2.0, "b": 1.0}.__getitem__)
    assert tuner.choices()["sgemm 1"] == {"choice": "b", "how": "timed", "timings_ms": {"a": 2.0, "b": 1.0}}
    heuristic = Autotuner(enabled=False)

    def never(name):
        pytest.fail("the heuristic times nothing and asks for no host time")

    heuristic.pick("sgemm", 1, ["a", "b"], never, host_ms=never)
    assert heuristic.choices()["sgemm 1"]["choice"] == "a"


# --- CPU: nvcc's build for the H200 ----------------------------------------------------------------


@needs_nvcc
def test_split_twins_build_for_sm_90_without_spills_within_their_blocks(tmp_path):
    """ptxas's report: each split-K twin, like its plain kernel, without stack or spills and with
    registers for the blocks per SM its __launch_bounds__ asks (the same as the plain one's)."""
    bounds = launch_bounds("matmul_regtiled.cu")  # (threads, blocks per SM) as matmul_tiles.cuh's line gives them
    report = sm90_build(KERNEL_DIR / "matmul_regtiled.cu", tmp_path)
    for tile in REGTILED_SPLITK_TILES:
        plain, split = bounds[f"matmul_regtiled_{tile}"], bounds[f"matmul_regtiled_splitk_{tile}"]
        assert split == plain and plain[0] == REGTILED_TILES[tile][3], (tile, split, plain)
        threads, blocks = plain
        for name in (f"matmul_regtiled_{tile}", f"matmul_regtiled_splitk_{tile}"):
            kernel = report[name]
            assert kernel.stack_bytes == kernel.spill_stores == kernel.spill_loads == 0, kernel
            assert kernel.registers * threads * blocks <= 65536, kernel


# --- GPU: the benchmark's sizes ---------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 2048, 4096])
@pytest.mark.parametrize("variant", ["128x128x8_splitk2", "128x64x8t128_splitk2", "256x128x8_splitk4"])
def test_large_split_products_against_float64_and_the_same_bits_twice(variant, n):
    from minitorch_cuda.cuda import backend, launch_core, matmul_launchers

    a, b, ref, scale = large_product(n)
    g = launch_core.Gemm(n, n, n)
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    runs = []
    for _ in range(2):
        out = backend.from_numpy(np.full((n, n), np.nan, np.float32))
        matmul_launchers.matmul_sgemm(out, da, db, g, variant=variant)
        runs.append(backend.to_numpy(out))
    assert np.all(np.abs(runs[0] - ref) <= 1e-5 * scale + 1e-6), f"{variant} at {n}^3"
    assert np.array_equal(runs[0], runs[1]), "the slices are summed in order: the same bits every run"


@pytest.mark.gpu
def test_host_launch_cost_is_measured_once_and_left_out_of_the_counters():
    from minitorch_cuda import profiler
    from minitorch_cuda.cuda import matmul_choice

    matmul_choice.host_launch_ms.cache_clear()
    before = profiler.counters.snapshot()
    ms = matmul_choice.host_launch_ms()
    assert profiler.counters.snapshot() == before
    assert 0.0005 < ms < 0.2, ms  # a launch from Python: microseconds, not nothing, not a sync
    assert matmul_choice.host_launch_ms() == ms
