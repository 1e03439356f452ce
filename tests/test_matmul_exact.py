"""The exact twins of stage 9's large register tiles (matmul_regtiled[_splitk]_exact_*, EXACT in
kernels/matmul_regtiled.cuh): where matmul_launchers.exact_fit lets them run, and that they compute the
plain kernels' bits.

The emulated run launches each exact twin and its plain kernel directly on products the tile
divides (one matrix each: the twins take no batch), at one and several K-slices: the same bits,
and the float64 product. exact_fit's rules, and the launcher's choice of kernel,
are checked without launching anything (on the emulator's pass, which imports the launchers).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_gxx, needs_nvcc
from helpers import launch_bounds, matmul_inputs, matmul_wrong, run_emulated, sm90_build

from minitorch_cuda.cuda.kernel_table import (
    KERNEL_DIR,
    REGTILED_EDGE_SPLITK_TILES,
    REGTILED_EDGE_TILES,
    REGTILED_EXACT_TILES,
    REGTILED_TILES,
)

# Per tile: (M, N, K, batch of A, batch of B) the tile divides, small for the emulator.
# K in 3, 5 or 6 tiles of 8: each of SPLITS leaves no slice empty (exact_fit's rule).
CASES = {
    "128x128x8": [(128, 256, 40, (), ()), (256, 128, 24, (), ())],
    "128x64x8t128": [(256, 64, 40, (), ()), (128, 128, 48, (), ())],
    "256x128x8": [(256, 128, 40, (), ()), (512, 256, 24, (), ())],
}
SPLITS = (1, 2, 3)

EMULATED_RUN = """
import json, sys
import numpy as np
from minitorch_cuda.cuda import backend, registry, runtime
from minitorch_cuda.cuda.kernel_table import REGTILED_TILES
from minitorch_cuda.cuda.launch_core import Gemm
from minitorch_cuda.cuda.matmul_launchers import exact_fit

tile, splits, folder = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
bm, bn, _, threads = REGTILED_TILES[tile]
inputs = np.load(f"{folder}/inputs.npz")
outputs = {}
for i in range(len(json.loads(sys.argv[4]))):
    a, b = inputs[f"a{i}"], inputs[f"b{i}"]
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    g = Gemm.of(a, b)
    for s in splits:
        assert exact_fit(da, db, g, tile, s), (tile, g, s)
        for kind in ("", "exact_"):
            name = f"matmul_regtiled_{kind}{tile}" if s == 1 else f"matmul_regtiled_splitk_{kind}{tile}"
            out = backend.from_numpy(np.full((g.batch * s, g.M, g.N), np.nan, np.float32))
            extra = () if s == 1 else (s,)
            runtime.launch(registry.get(name), (*g.grid(bm, bn)[:2], g.batch * s), (threads, 1, 1),
                           out.ptr, da.ptr, db.ptr, *g.args, *extra)
            outputs[f"{kind}{i}_{s}"] = backend.to_numpy(out)
np.savez(f"{folder}/outputs.npz", **outputs)
"""


def emulated_outputs(pairs, folder: Path, script: str, *args: str):
    """What ``script`` (run on the emulator with ``args``) wrote to ``folder``/outputs.npz, given the
    operand ``pairs`` as ``folder``/inputs.npz (a0, b0, a1, ...)."""
    np.savez(folder / "inputs.npz", **{f"{x}{i}": v for i, p in enumerate(pairs) for x, v in zip("ab", p)})
    run_emulated(script, *args)
    return np.load(folder / "outputs.npz")


@needs_gxx
@pytest.mark.parametrize("tile", REGTILED_EXACT_TILES)
def test_exact_twins_compute_the_plain_kernels_bits_on_the_emulator(tile, tmp_path):
    cases = CASES[tile]
    pairs = [matmul_inputs(M, N, K, 0, 0, ba, bb, seed=len(tile) + i) for i, (M, N, K, ba, bb) in enumerate(cases)]
    outputs = emulated_outputs(
        pairs, tmp_path, EMULATED_RUN, tile, json.dumps(SPLITS), str(tmp_path), json.dumps(cases)
    )
    for i, (a, b) in enumerate(pairs):
        for s in SPLITS:
            plain, exact = outputs[f"{i}_{s}"], outputs[f"exact_{i}_{s}"]
            assert np.array_equal(plain, exact), f"{tile}, case {i}, {s} slices: the exact twin's bits differ"
            total = exact.reshape(-1, s, *exact.shape[-2:]).sum(axis=1, dtype=np.float64)
            assert matmul_wrong(total, a, b, False, False) == 0, f"{tile}, case {i}, {s} slices against float64"


class _Aligned:
    """An operand at a given device address: what exact_fit reads of an array."""

    def __init__(self, ptr: int):
        self.ptr = ptr


A, B = _Aligned(256), _Aligned(4096)


@pytest.mark.gpu
@pytest.mark.emulated
def test_exact_fit_takes_only_products_the_tile_divides():
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    g = launch_core.Gemm
    assert matmul_launchers.exact_fit(A, B, g(4096, 4096, 4096), "256x128x8")
    assert matmul_launchers.exact_fit(A, B, g(1024, 1024, 1024), "256x128x8", splits=4)
    refused = {
        "a batch (the twins take no strides)": (g(256, 128, 64, stride_a=256 * 64, batch=3), "256x128x8", 1),
        "a plain tile without a twin": (g(1024, 1024, 1024), "64x64x16", 1),
        "M not a multiple of BM": (g(1000, 1024, 1024), "256x128x8", 1),
        "N not a multiple of BN": (g(1024, 1000, 1024), "128x128x8", 1),
        "K not a multiple of BK": (g(1024, 1024, 1020), "128x128x8", 1),
        "A transposed": (g(1024, 1024, 1024, ta=True), "128x128x8", 1),
        "B transposed": (g(1024, 1024, 1024, tb=True), "128x128x8", 1),
        "a batch stride off float4s": (g(128, 128, 8, stride_a=130, batch=2), "128x128x8", 1),
        "an empty K-slice (5 tiles in 4 slices of 2)": (g(128, 128, 40), "128x128x8", 4),
    }
    for why, (problem, tile, splits) in refused.items():
        assert not matmul_launchers.exact_fit(A, B, problem, tile, splits), why
    assert not matmul_launchers.exact_fit(_Aligned(260), B, g(4096, 4096, 4096), "256x128x8"), "A off a 16-byte start"
    assert all(t in REGTILED_TILES for t in REGTILED_EXACT_TILES)


@pytest.mark.gpu
@pytest.mark.emulated
def test_the_launcher_takes_the_exact_twin_where_it_fits(monkeypatch):
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    launched = []
    monkeypatch.setattr(launch_core, "dispatch", lambda kernel, *rest: launched.append(kernel))  # Launch.dispatch's
    monkeypatch.setattr(matmul_launchers, "split_k", lambda kernel, *rest: launched.append(kernel))
    g = launch_core.Gemm
    matmul_launchers.matmul_regtiled(A, A, B, g(4096, 4096, 4096), tile="256x128x8")
    matmul_launchers.matmul_regtiled(A, A, B, g(4000, 4096, 4096), tile="256x128x8")
    matmul_launchers.matmul_regtiled(A, A, B, g(1024, 1024, 1024), tile="256x128x8", splits=4)
    matmul_launchers.matmul_regtiled(A, A, B, g(1024, 1024, 1024, tb=True), tile="256x128x8", splits=4)
    assert launched == [
        "matmul_regtiled_exact_256x128x8",
        "matmul_regtiled_256x128x8",
        "matmul_regtiled_splitk_exact_256x128x8",
        "matmul_regtiled_splitk_256x128x8",
    ]


@needs_nvcc
def test_exact_twins_build_for_sm_90_like_their_plain_kernels(tmp_path):
    """ptxas's report: each exact twin (and edge twin) with its plain kernel's launch bounds,
    without stack or spills, and with no more registers than those bounds leave it."""
    bounds = launch_bounds("matmul_regtiled.cu")  # (threads, blocks per SM) as matmul_tiles.cuh's line gives them
    report = sm90_build(KERNEL_DIR / "matmul_regtiled.cu", tmp_path)
    for tile in REGTILED_EXACT_TILES:
        plain = bounds[f"matmul_regtiled_{tile}"]
        edge = (f"matmul_regtiled_edge_{tile}",) if tile in REGTILED_EDGE_TILES else ()
        edge += (f"matmul_regtiled_edge_splitk_{tile}",) if tile in REGTILED_EDGE_SPLITK_TILES else ()
        for name in (f"matmul_regtiled_exact_{tile}", f"matmul_regtiled_splitk_exact_{tile}", *edge):
            assert bounds[name] == plain, (name, bounds[name], plain)
            kernel, blocks = report[name], plain[1]
            assert kernel.stack_bytes == kernel.spill_stores == kernel.spill_loads == 0, kernel
            assert kernel.registers * REGTILED_TILES[tile][3] * blocks <= 65536, kernel


# --- the edge twins: the exact body inside C, the plain one on its edges ---------------------------

# Per edge tile: (M, N, K) with M or N left over and K in whole tiles, small for the emulator.
EDGE_CASES = {
    "128x128x8": [(200, 136, 40), (256, 300, 24), (130, 128, 16)],
    "128x64x8t128": [(300, 100, 48), (128, 68, 32)],
}

EDGE_RUN = """
import json, sys
import numpy as np
from minitorch_cuda.cuda import backend, registry, runtime
from minitorch_cuda.cuda.kernel_table import REGTILED_TILES
from minitorch_cuda.cuda.launch_core import Gemm
from minitorch_cuda.cuda.matmul_launchers import edge_fit, matmul_regtiled, matmul_regtiled_edge

tile, folder, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
bm, bn, _, threads = REGTILED_TILES[tile]
inputs = np.load(f"{folder}/inputs.npz")
outputs = {}
for i in range(count):
    a, b = inputs[f"a{i}"], inputs[f"b{i}"]
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    g = Gemm.of(a, b)
    assert edge_fit(da, db, g, tile), (tile, g)
    for kind in ("", "edge_"):
        out = backend.from_numpy(np.full((g.M, g.N), np.nan, np.float32))
        runtime.launch(registry.get(f"matmul_regtiled_{kind}{tile}"), g.grid(bm, bn), (threads, 1, 1),
                       out.ptr, da.ptr, db.ptr, *g.args)
        outputs[f"{kind}{i}"] = backend.to_numpy(out)
    if not edge_fit(da, db, g, tile, 2):  # (a tile without a split edge twin)
        continue
    for kind, launcher in (("split_", matmul_regtiled), ("edge_split_", matmul_regtiled_edge)):  # two K-slices
        out = backend.from_numpy(np.full((g.M, g.N), np.nan, np.float32))
        launcher(out, da, db, g, tile=tile, splits=2)
        outputs[f"{kind}{i}"] = backend.to_numpy(out)
np.savez(f"{folder}/outputs.npz", **outputs)
"""


@needs_gxx
@pytest.mark.parametrize("tile", REGTILED_EDGE_TILES)
def test_edge_twins_compute_the_plain_kernels_bits_on_the_emulator(tile, tmp_path):
    """Whole and in two K-slices (the split edge twin against the plain split-K kernel)."""
    cases = EDGE_CASES[tile]
    pairs = [matmul_inputs(M, N, K, 0, 0, seed=len(tile) + i) for i, (M, N, K) in enumerate(cases)]
    outputs = emulated_outputs(pairs, tmp_path, EDGE_RUN, tile, str(tmp_path), str(len(cases)))
    for i, (a, b) in enumerate(pairs):
        plain, edge = outputs[f"{i}"], outputs[f"edge_{i}"]
        assert np.array_equal(plain, edge), f"{tile}, case {i}: the edge twin's bits differ"
        assert matmul_wrong(edge, a, b, False, False) == 0, f"{tile}, case {i} against float64"
        if tile not in REGTILED_EDGE_SPLITK_TILES:
            continue
        split, edge_split = outputs[f"split_{i}"], outputs[f"edge_split_{i}"]  # in two K-slices, then their sum
        assert np.array_equal(split, edge_split), f"{tile}, case {i}: the split edge twin's bits differ"
        assert matmul_wrong(edge_split, a, b, False, False) == 0, f"{tile}, case {i} in two slices against float64"


@pytest.mark.gpu
@pytest.mark.emulated
def test_edge_fit_takes_the_exact_twins_products_but_for_m_and_n():
    from minitorch_cuda.cuda import launch_core, matmul_choice, matmul_launchers, runtime

    g = launch_core.Gemm
    fit = matmul_launchers.edge_fit
    assert fit(A, B, g(3000, 3000, 3000), "128x128x8") and fit(A, B, g(1000, 1000, 1000), "128x64x8t128")
    refused = {
        "the exact twin's product": (g(1024, 1024, 1024), "128x128x8"),
        "a tile without an edge twin": (g(3000, 3000, 3000), "256x128x8"),
        "K not a multiple of BK": (g(3000, 3000, 3004), "128x128x8"),
        "N not whole float4s": (g(3000, 3002, 3000), "128x128x8"),
        "B transposed": (g(3000, 3000, 3000, tb=True), "128x128x8"),
        "a batch": (g(200, 136, 40, stride_a=200 * 40, batch=2), "128x128x8"),
    }
    for why, (problem, tile) in refused.items():
        assert not fit(A, B, problem, tile), why
    assert not fit(_Aligned(260), B, g(3000, 3000, 3000), "128x128x8"), "A off a 16-byte start"
    edges = [v for v in matmul_choice.sgemm_candidates(g(3000, 3000, 3000)) if v.endswith("_edge")]
    assert edges == [f"{t}_edge" for t in REGTILED_EDGE_TILES]  # the tuner times them against the rest
    assert not [v for v in matmul_choice.sgemm_candidates(g(1024, 1024, 1024)) if "_edge" in v]
    # split where the grid leaves SMs idle: 1000^3 on 132 SMs is 64 tiles of 128 x 128, 128 of 128 x 64
    runtime.multiprocessors, sms = (lambda: 132), runtime.multiprocessors
    try:
        split = [v for v in matmul_choice.sgemm_candidates(g(1000, 1000, 1000)) if "_edge_" in v]
        assert split == [f"{t}_edge_splitk2" for t in REGTILED_EDGE_SPLITK_TILES] == ["128x64x8t128_edge_splitk2"]
        assert fit(A, B, g(1000, 1000, 1000), "128x64x8t128", 2) and not fit(A, B, g(1000, 1000, 24), "128x64x8t128", 4)
        assert not fit(A, B, g(1000, 1000, 1000), "128x128x8", 2)  # no split edge twin (it spills)
    finally:
        runtime.multiprocessors = sms
