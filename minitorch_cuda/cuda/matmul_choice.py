"""The tuner: which matmul variant runs for a problem, and the ``MATMULS`` table.

Launchers (``matmul_launchers``) launch the variant they are given; this module chooses it. A
choice is made per tuning key (``tuning_key``: the shape, the layout, the batch, the operands'
alignment) the first time the key is seen, by timing the candidates that fit
(``autotune.tuner``, which keeps every decision), and looked up afterwards:

- ``regtiled_tile``: the register tile of a product (stage 9, and the tile of stage 10's and the
  lean step's fused products);
- ``sgemm_variant``: that tile against the pipelined tiles and the split-K variants
  (``sgemm_candidates``), each at the longer of its GPU time and its launches' host time (the
  host-cost model: ``host_launch_ms``, ``sgemm_host_ms``);
- ``linear_variant``: the lean step's forward, the register tile or a split-K bias+act variant;
- ``wgmma_tma_variant``: stage 12's tile width, way of reading B and K-split on Hopper;
- ``tf32_variant``: stage 12's kernel below the products that go to wgmma_tma: mma.sync, WMMA,
  or on Hopper the TMA-fed wgmma;
- ``lean_tensor_cores_faster``: whether stage 12 runs a product of the lean step on tensor cores
  or fused in FP32, as stage 11 does.

The split-K policy (``splitk_counts``) says which K-splits are worth timing for a tile. On the CPU
emulator, whose times stand for nothing a GPU would do, the choices are the heuristic ones.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

from .. import profiler, stages
from . import matmul_launchers, runtime, timing
from .autotune import TIMED_LAUNCHES, fits, tuner
from .driver import EMULATED
from .kernel_table import (
    CLUSTER_SPLITK_TILES,
    CLUSTER_SPLITS,
    PIPELINED_TILES,
    REGTILED_EDGE_TILES,
    REGTILED_SPLITK_TILES,
    REGTILED_TILES,
    SPLITK_BIAS_ACT_TILES,
)
from .launch_core import Gemm, aligned16, cdiv
from .launchers import floor
from .probe import clusters_fit


def tuning_launches() -> int:
    """Back-to-back launches per sample when the autotuner times a candidate (the ``timed=`` of
    its launcher): autotune.TIMED_LAUNCHES on a GPU, one on the CPU emulator, whose times stand
    for nothing the GPU would do."""
    return 1 if EMULATED else TIMED_LAUNCHES


def tuning_key(a, b, g: Gemm) -> tuple:
    """What makes two problems the same for the autotuner: the shape, the layout, the batch and
    whether each operand starts a 16-byte vector (the vectorized loads' condition)."""
    return (g.M, g.N, g.K, int(g.ta), int(g.tb), g.batch, aligned16(a), aligned16(b))


def regtiled_tile(c, a, b, g: Gemm) -> str:
    """The register-tiled variant for this problem: the tiles that fit are timed on first use
    (autotune.tuner) and the fastest is kept for the shape."""
    key = tuning_key(a, b, g)
    choice = tuner.cached("matmul_regtiled", key)
    if choice is not None:
        return choice
    tiles = [t for t, (bm, bn, _, _) in REGTILED_TILES.items() if fits(bm, bn, g.M, g.N)]
    return tuner.pick(
        "matmul_regtiled",
        key,
        tiles,
        lambda t: matmul_launchers.matmul_regtiled(c, a, b, g, tile=t, timed=tuning_launches()),
    )


# Split-K: a product of few output tiles leaves SMs idle (1024^3 in 128 x 128 tiles is 64 blocks
# for the H200's 132 SMs). Splitting K over blockIdx.z multiplies the blocks; a slice keeps at
# least SPLITK_MIN_TILES K-tiles so that its pipeline fills, and the partial products cost
# k_splits * M * N floats of scratch written and read once more.
SPLITK_COUNTS = (2, 4, 8, 16)
SPLITK_MIN_TILES = 4


def block_tile(tile: str) -> tuple[int, int, int]:
    """(BM, BN, BK) of a pipelined or register-tiled tile (64x64x16, a name in both tables, is
    the same block tile in both)."""
    bm, bn, bk, *_ = PIPELINED_TILES[tile] if tile in PIPELINED_TILES else REGTILED_TILES[tile]
    return bm, bn, bk


def splitk_counts(g: Gemm, tile: str) -> list[int]:
    """The K-splits worth timing for this tile (pipelined or register-tiled): none when its grid
    already covers every SM, else each count from 2 up to the first whose blocks cover them all."""
    bm, bn, bk = block_tile(tile)
    blocks = g.batch * cdiv(g.M, bm) * cdiv(g.N, bn)
    return covering_splits(blocks, lambda splits: cdiv(g.K, bk) >= splits * SPLITK_MIN_TILES)


def covering_splits(blocks: int, fits: Callable[[int], bool]) -> list[int]:
    """Of SPLITK_COUNTS, those a grid of ``blocks`` is split in: none where it covers every SM,
    else each count from 2 up to the first whose blocks cover them all, while ``fits(count)``."""
    counts, sms = [], runtime.multiprocessors()
    for splits in SPLITK_COUNTS if blocks < sms else ():
        if not fits(splits):
            break
        counts.append(splits)
        if blocks * splits >= sms:
            break
    return counts


def matmul_splitk_covering(c, a, b, g: Gemm, *, launcher, tile: str, timed: int = 0):
    """``launcher`` (matmul_pipelined or matmul_regtiled) at the split count that first covers
    every SM (splitk_counts' last), for the benchmark's table; a product that needs no split is
    refused (ValueError)."""
    counts = splitk_counts(g, tile)
    if not counts:
        raise ValueError(f"{tile} tiles of {g} cover every SM or leave too few K-tiles: no split-K")
    return launcher(c, a, b, g, tile=tile, splits=counts[-1], timed=timed)


def sgemm_candidates(g: Gemm) -> list[str]:
    """Stage 9's variants for this problem beyond the register-tiled winner: every pipelined tile
    that fits and its split-K counts, then the split-K counts of the register tiles that have a
    split-K twin (``128x128x8_splitk2``). Tiles for wave quantization at 1024^3 on 132 SMs:
    128 x 128 gives 64 blocks (48% of the SMs busy), 128 x 64 gives 128 (97%), 64 x 64 gives 256
    (at most 2 per SM, 97% on average); split-K 2 brings 128 x 128 to 128 blocks. Outputs as
    narrow as 10 columns fit the 32 x 32 tile only. On Hopper, the same splits of the cluster
    tiles in one launch (``128x64x8t128_cluster2``, matmul_cluster_splitk) where the shape is exact.
    Where only M or N is ragged (3000^3, 1000^3), the edge twins (``128x128x8_edge``, and split
    ``128x64x8t128_edge_splitk2``, matmul_regtiled_edge): the exact twin's speed inside, the plain
    kernel's on the edges (the caller checks alignment)."""
    names = []
    for tile, (bm, bn, *_) in PIPELINED_TILES.items():
        if fits(bm, bn, g.M, g.N):
            names += [f"pipelined_{tile}"] + [f"pipelined_{tile}_splitk{s}" for s in splitk_counts(g, tile)]
    for tile in REGTILED_SPLITK_TILES:
        bm, bn, *_ = REGTILED_TILES[tile]
        if fits(bm, bn, g.M, g.N):
            names += [f"{tile}_splitk{s}" for s in splitk_counts(g, tile)]
    if clusters_fit(runtime.arch()):
        for tile in CLUSTER_SPLITK_TILES:
            splits = [
                s for s in splitk_counts(g, tile) if s in CLUSTER_SPLITS and matmul_launchers.exact_shape(g, tile, s)
            ]
            names += [f"{tile}_cluster{s}" for s in splits]
    for tile in REGTILED_EDGE_TILES:
        if matmul_launchers.edge_shape(g, tile):
            names += [f"{tile}_edge"]
        names += [f"{tile}_edge_splitk{s}" for s in splitk_counts(g, tile) if matmul_launchers.edge_shape(g, tile, s)]
    return names


HOST_LAUNCH_SAMPLES = 300
HOST_LAUNCH_EMULATED_MS = 0.010  # nominal: the emulator runs kernels on the host, nothing to measure


@functools.cache
def host_launch_ms() -> float:
    """Host milliseconds one launch through a launcher costs (the registry, PyCUDA's prepared
    call, the counters, the stage's checks): the median over HOST_LAUNCH_SAMPLES launches of
    floor_empty, measured once per process and left out of the counters (measuring is not the
    program's work). A host-bound training step pays this for every launch it makes."""
    if EMULATED:
        return HOST_LAUNCH_EMULATED_MS
    seconds = []
    with profiler.uncounted():
        floor("floor_empty")  # compiled and loaded before the clock starts
        for _ in range(HOST_LAUNCH_SAMPLES):
            start = time.perf_counter()
            floor("floor_empty")
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) * 1e3


def sgemm_host_ms(variant: str) -> float:
    """The host's milliseconds to launch ``variant``: host_launch_ms per launch (a split-K product
    has SPLITK_LAUNCHES, a split in one cluster one). The tuner takes the longer of this and the
    GPU time, so that a split wins where it shortens a product the GPU was slow at (1024^3), not
    where the GPU would only have waited for the host's second launch (the MNIST step's small
    products)."""
    family, _, splits = matmul_launchers.sgemm_parts(variant)
    return (matmul_launchers.SPLITK_LAUNCHES if splits > 1 and family != "cluster" else 1) * host_launch_ms()


def sgemm_variant(c, a, b, g: Gemm) -> str:
    """Stage 9's kernel for this problem: the register-tiled winner (regtiled_tile) timed against
    the pipelined and split-K variants (sgemm_candidates), each at the longer of its GPU time
    and its launches' host time (sgemm_host_ms), the least kept for the shape. On the CPU
    emulator nothing more is timed: the register-tiled choice stands."""
    key = tuning_key(a, b, g)
    choice = tuner.cached("matmul_sgemm", key)
    if choice is not None:
        return choice
    others = [] if EMULATED else sgemm_candidates(g)
    others = [v for v in others if matmul_launchers.sgemm_parts(v)[0] not in ("cluster", "edge") or aligned16(a, b)]
    candidates = [regtiled_tile(c, a, b, g), *others]
    return tuner.pick(
        "matmul_sgemm", key, candidates,
        lambda v: matmul_launchers.matmul_sgemm(c, a, b, g, variant=v, timed=tuning_launches()), host_ms=sgemm_host_ms,
    )  # fmt: skip


def linear_variant(c, a, b, bias, counters, g: Gemm, relu: bool) -> str:
    """The lean step's forward product: matmul_bias_act at its register tile, or a split-K
    bias+act variant (``pipelined_32x32x16_splitk8``), the fastest on this GPU, kept per shape.
    On the CPU emulator nothing is timed: the split that first covers the SMs of the smallest
    tile, if any, else the register tile."""
    key = tuning_key(a, b, g)
    choice = tuner.cached("matmul_linear", key)
    if choice is not None:
        return choice
    splits = [
        f"pipelined_{t}_splitk{s}"
        for t in SPLITK_BIAS_ACT_TILES
        if fits(*PIPELINED_TILES[t][:2], g.M, g.N)
        for s in splitk_counts(g, t)
    ]
    plain = regtiled_tile(c, a, b, g)
    if EMULATED:
        return (splits or [plain])[-1]
    return tuner.pick(
        "matmul_linear", key, [plain, *splits],
        lambda v: matmul_launchers.matmul_linear(c, a, b, bias, counters, g, relu, variant=v, timed=tuning_launches()),
    )  # fmt: skip


WGMMA_TMA_WIDTHS = (256, 128)  # wgmma_tma.cu's WT_BN: the tile widths stage 12 chooses from
AS_STORED = " as stored"  # a candidate's suffix: the N-major build, B read without a transpose
SPLIT = " split "  # ... and "split 4": the product in four K-slices, then their sum


def wgmma_tma_variant(c, a, b, g: Gemm) -> dict:
    """Stage 12's launch of this problem as matmul_launchers.matmul_tf32_wgmma_tma's keywords:
    the tile width ``bn`` (128 x 256 tiles, or 128 x 128 where the wide ones leave SMs idle),
    ``as_stored`` (for ``a @ b``, B read as stored or transposed first: "256 as stored") and
    ``splits`` (where the tiles leave SMs idle, the product in K-slices: "256 as stored split 4",
    wgmma_tma_splits). Each is timed on first use (autotune.tuner, transposes and the slices' sum
    included), at the longer of its GPU time and its launches' host time (wgmma_tma_host_ms: a
    transpose first or a sum after is a launch more, and at 1024^3 the product takes the GPU
    about as long as a launch takes the host), the least kept for the shape."""
    ways = (AS_STORED, "") if matmul_launchers.b_reads_as_stored(a, b, g) else ("",)  # untuned (tuner off): the first
    variants = {}
    for way in ways:
        for width in WGMMA_TMA_WIDTHS:
            for splits in wgmma_tma_splits(g, width, way == AS_STORED):
                name = f"{width}{way}" + (f"{SPLIT}{splits}" if splits > 1 else "")
                variants[name] = {"bn": width, "as_stored": way == AS_STORED, "splits": splits}

    def time_ms(name: str) -> float:
        return matmul_launchers.matmul_tf32_wgmma_tma(c, a, b, g, **variants[name], timed=tuning_launches())

    def host_ms(name: str) -> float:
        return wgmma_tma_host_ms(g, variants[name]["as_stored"], variants[name]["splits"])

    choice = tuner.pick("matmul_tf32_wgmma_tma", tuning_key(a, b, g), list(variants), time_ms, host_ms=host_ms)
    return variants[choice]


WGMMA_TMA_MIN_SLICE = 4 * 32  # floats of K in a slice: four of the kernel's 32-wide stages, its ring full


def wgmma_tma_splits(g: Gemm, bn: int, as_stored: bool) -> list[int]:
    """The K-splits worth timing for stage 12's TMA kernel at tile width ``bn``: 1 (unsplit), and
    where its 128 x ``bn`` tiles (``bn`` x 128 as stored) are fewer than the SMs, covering_splits'
    counts while a slice keeps WGMMA_TMA_MIN_SLICE of K and starts 16 bytes aligned (one matrix
    only: the slices are the kernel's batch). 4096 x 4096 x 128: 16 wide tiles for 132 SMs."""
    if g.batch != 1:
        return [1]
    tile_m, tile_n = (bn, 128) if as_stored else (128, bn)
    tiles = cdiv(g.M, tile_m) * cdiv(g.N, tile_n)
    return [1, *covering_splits(tiles, lambda splits: g.K % (4 * splits) == 0 and g.K // splits >= WGMMA_TMA_MIN_SLICE)]


def wgmma_tma_host_ms(g: Gemm, as_stored: bool, splits: int = 1) -> float:
    """The host's milliseconds to launch matmul_tf32_wgmma_tma: host_launch_ms for its launch, for
    each operand k_major_operands transposes first (none where B is read as stored) and for the
    slices' sum of a split product."""
    transposes = 0 if as_stored else int(g.ta) + int(not g.tb)
    return (1 + transposes + int(splits > 1)) * host_launch_ms()


WGMMA_TMA, MMA_SYNC, WMMA = "wgmma_tma", "mma.sync", "wmma"  # stage 12's kernels, as tf32_variant names them


def tf32_variant(c, a, b, g: Gemm, *, wgmma: bool = False) -> str:
    """Stage 12's kernel for this problem among MMA_SYNC (matmul_tf32_async), WMMA (matmul_tf32)
    and, where ``wgmma`` (Hopper, products below ops_matmul.WGMMA_MIN_PRODUCT), WGMMA_TMA (the
    TMA-fed kernel at the variant wgmma_tma_variant keeps). Operands in whole aligned quads, which
    mma.sync copies 16 bytes at a time (36% of cuBLAS TF32 at 4096^3 on the H200, WMMA 15%), skip
    WMMA; others it copies a float at a time, which was not measured against WMMA, so both are
    timed. Each candidate is timed on first use, at the longer of its GPU time and its launches'
    host time, the least kept for the shape; untimed (the CPU emulator, the tuner off), mma.sync."""
    candidates = [MMA_SYNC] + ([WGMMA_TMA] if wgmma else [])
    if not matmul_launchers.tf32_async_quads(a, b, g):
        candidates.append(WMMA)
    if EMULATED or len(candidates) == 1:  # the emulator's times stand for nothing a GPU would do
        return MMA_SYNC

    def time_ms(name: str) -> float:
        launcher = {MMA_SYNC: matmul_launchers.matmul_tf32_async, WMMA: matmul_launchers.matmul_tf32,
                    WGMMA_TMA: matmul_tf32_wgmma_tma}[name]  # fmt: skip
        return launcher(c, a, b, g, timed=tuning_launches())

    def host_ms(name: str) -> float:  # wgmma's variant is chosen by the time this is asked (time_ms)
        if name != WGMMA_TMA:
            return host_launch_ms()
        way = wgmma_tma_variant(c, a, b, g)
        return wgmma_tma_host_ms(g, way["as_stored"], way["splits"])

    return tuner.pick("matmul_tf32", tuning_key(a, b, g), candidates, time_ms, host_ms=host_ms)


# --- the tuned launches: a family at the variant chosen for the problem -----------------------


def matmul_regtiled(c, a, b, g: Gemm, *, timed: int = 0):
    """matmul_launchers.matmul_regtiled at the tile regtiled_tile chose."""
    return matmul_launchers.matmul_regtiled(c, a, b, g, tile=regtiled_tile(c, a, b, g), timed=timed)


def matmul_sgemm(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 9's product: matmul_launchers.matmul_sgemm at the variant sgemm_variant chose."""
    return matmul_launchers.matmul_sgemm(c, a, b, g, variant=sgemm_variant(c, a, b, g), timed=timed)


def matmul_tf32_wgmma_tma(c, a, b, g: Gemm, *, timed: int = 0, **debugging):
    """Stage 12 on Hopper: matmul_launchers.matmul_tf32_wgmma_tma at the tile width and way of
    reading B that wgmma_tma_variant chose (``debugging``: the launcher's stages, blocks, tiles, debug)."""
    return matmul_launchers.matmul_tf32_wgmma_tma(c, a, b, g, **wgmma_tma_variant(c, a, b, g), timed=timed, **debugging)


# The matmul kernels by name, each launched as (c, a, b, gemm, timed=...): the benchmark's and the
# grader's table (kernel_table.MATMUL_STAGES says the stage of each). A family that tunes runs at
# its tuned variant. A launcher that cannot take a problem raises ValueError saying why.
MATMULS = {
    "matmul_naive": matmul_launchers.matmul_naive,
    "matmul_transposed": matmul_launchers.matmul_transposed,
    "matmul_batched": matmul_launchers.matmul_batched,
    "matmul_tiled": matmul_launchers.matmul_tiled,
    "matmul_regtiled": matmul_regtiled,
    "matmul_sgemm": matmul_sgemm,
    **{f"matmul_pipelined_{t}": functools.partial(matmul_launchers.matmul_pipelined, tile=t) for t in PIPELINED_TILES},
    **{
        f"matmul_pipelined_splitk_{t}": functools.partial(
            matmul_splitk_covering, launcher=matmul_launchers.matmul_pipelined, tile=t
        )
        for t in ("128x128x16", "64x64x16", "32x32x16")
    },
    **{
        f"matmul_regtiled_splitk_{t}": functools.partial(
            matmul_splitk_covering, launcher=matmul_launchers.matmul_regtiled, tile=t
        )
        for t in REGTILED_SPLITK_TILES
    },
    "matmul_tf32": matmul_launchers.matmul_tf32,
    "matmul_bf16": matmul_launchers.matmul_bf16,
    "matmul_tf32_async": matmul_launchers.matmul_tf32_async,
    "matmul_tf32_wgmma": matmul_launchers.matmul_tf32_wgmma,
    "matmul_tf32_wgmma_tma": matmul_tf32_wgmma_tma,
}


def lean_tensor_cores_faster(family: str, a, b, g: Gemm, fused: Callable[[], object], tf32: Callable[[], object]
                             ) -> bool:  # fmt: skip
    """Whether stage 12 runs a product of the lean step on tensor cores (``tf32``: the TF32 product,
    then its epilogue as launches of their own) rather than as stage 11 does (``fused``: FP32,
    the epilogue inside), for ``op(a) @ op(b)``. On first use per shape each way's launches are
    timed back to back (the graphed step replays them so), the faster kept: stage 12's step is
    then no slower than stage 11's where TF32 does not pay (few, small tiles). Never before stage
    12; from it, untimed (the CPU emulator, the tuner off), tensor cores."""
    if not stages.tensor_cores():
        return False
    ways = {"tensor cores": tf32, "stage 11": fused}  # untimed: the first

    def time_ms(way: str) -> float:
        ways[way]()  # a first call may time and choose its own kernels: not in the sample
        n = tuning_launches()
        return timing.elapsed_ms(lambda: [ways[way]() for _ in range(n)]) / n

    if EMULATED:  # the emulator's times stand for nothing a GPU would do
        return True
    return tuner.pick(f"lean_tf32 {family}", tuning_key(a, b, g), list(ways), time_ms) == "tensor cores"
