"""The launch contracts of the matmul kernels, one launcher per family: grid, block, dynamic shared
memory and argument order for a problem (``launch_core.Gemm``) and every tile, split or variant given
explicitly. A launcher never chooses: the tuner (``matmul_choice``) chooses the variant for a
shape, the backend's ``ops_matmul`` the family for a stage. What a launcher does decide is fit,
never speed: the exact twin of a register tile where the problem divides it (``exact_fit``), the
four-wide reduction of a split-K product where the sizes allow, B read as stored where TMA can.
A problem a kernel cannot take is refused with ValueError saying why.
"""

from __future__ import annotations

import dataclasses
import functools

from . import probe, runtime, wgmma_tma
from .array import ITEMSIZE
from .kernel_table import (
    ASYNC_TILE,
    CLUSTER_SPLITK_TILES,
    CLUSTER_SPLITS,
    MMA_TILE,
    PIPELINED_TILES,
    REGTILED_EDGE_SPLITK_TILES,
    REGTILED_EDGE_TILES,
    REGTILED_EXACT_TILES,
    REGTILED_SPLITK_TILES,
    REGTILED_TILES,
    SPLITK_BIAS_ACT_TILES,
    WGMMA_TILE,
)
from .launch_core import Gemm, Launch, aligned16, as_arg, cdiv, dispatch, queue, total_ms
from .launchers import elementwise, transpose
from .memory import DeviceBuffer
from .runtime import Kernel


def per_matrix(name: str, c, a, b, g: Gemm, flags: tuple, timed: int):
    """Kernels without a batch axis: a host loop of one launch per matrix of the batch."""
    grid = (cdiv(g.N, 16), cdiv(g.M, 16), 1)
    times = []
    for z in range(g.batch):
        pc = as_arg(c) + ITEMSIZE * z * g.M * g.N
        pa = as_arg(a) + ITEMSIZE * z * g.stride_a
        pb = as_arg(b) + ITEMSIZE * z * g.stride_b
        times.append(dispatch(name, grid, (16, 16, 1), (pc, pa, pb, g.M, g.N, g.K, *flags), timed, (g,)))
    return total_ms(times)


def matmul_naive(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 0: 16 x 16 threads, one per element of C, untransposed operands only."""
    if g.ta or g.tb:
        raise ValueError("matmul_naive reads untransposed operands only: materialize the transposes first")
    return per_matrix("matmul_naive", c, a, b, g, (), timed)


def matmul_transposed(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 3: matmul_naive with the transposes read through flags."""
    return per_matrix("matmul_transposed", c, a, b, g, (int(g.ta), int(g.tb)), timed)


def matmul_batched(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 5: the whole batch in one launch, 16 x 16 threads per 16 x 16 tile of C."""
    return dispatch("matmul_batched", g.grid(16, 16), (16, 16, 1), (c, a, b, *g.args), timed, (g,))


def matmul_tiled(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 6: 32 x 32 tiles of A and B staged in shared memory, a thread per element of C."""
    return dispatch("matmul_tiled", g.grid(32, 32), (32, 32, 1), (c, a, b, *g.args), timed, (g,))


def matmul_regtiled(c, a, b, g: Gemm, *, tile: str, splits: int = 1, timed: int = 0):
    """Stage 9: ``matmul_regtiled_{tile}``, a BM x BN tile of C
    per block, each thread a TM x TN register tile. ``splits`` > 1: its split-K twin
    ``matmul_regtiled_splitk_{tile}`` (REGTILED_SPLITK_TILES), reduced by split_k. Where
    exact_fit holds, the kernel's exact twin (``_exact_`` before the tile) runs instead."""
    if splits == 1:
        return regtiled_launch(a, b, g, tile).dispatch(c, a, b, timed)
    bm, bn, _, threads = REGTILED_TILES[tile]
    exact = "exact_" if exact_fit(a, b, g, tile, splits) else ""
    if tile not in REGTILED_SPLITK_TILES:
        raise ValueError(f"no split-K twin of register tile {tile}: the tiles are {', '.join(REGTILED_SPLITK_TILES)}")
    return split_k(f"matmul_regtiled_splitk_{exact}{tile}", c, a, b, g, (bm, bn, threads), splits, timed)


def regtiled_launch(a, b, g: Gemm, tile: str) -> Launch:
    """matmul_regtiled's one launch at ``tile`` (its exact twin where exact_fit holds)."""
    bm, bn, _, threads = REGTILED_TILES[tile]
    exact = "exact_" if exact_fit(a, b, g, tile) else ""
    return Launch(f"matmul_regtiled_{exact}{tile}", g.grid(bm, bn), (threads, 1, 1), g.args, (g,))


def exact_fit(a, b, g: Gemm, tile: str, splits: int = 1) -> bool:
    """Whether the exact twin of register tile ``tile`` may compute this product (EXACT in
    matmul_regtiled.cuh): exact_shape, and A and B start 16-byte aligned."""
    return exact_shape(g, tile, splits) and aligned16(a, b)


def exact_shape(g: Gemm, tile: str, splits: int = 1) -> bool:
    """The shape half of exact_fit: a tile in REGTILED_EXACT_TILES, one matrix (no batch: the
    twins take their batch strides as 0, which is what lets ptxas keep their multiply-adds in
    order), no transposes, BM, BN and BK dividing M, N and K, a K-tile in every one of ``splits``
    slices, and every row of A and B a whole number of float4s."""
    if tile not in REGTILED_EXACT_TILES or g.ta or g.tb or g.batch != 1:
        return False
    bm, bn, bk, _ = REGTILED_TILES[tile]
    k_tiles = g.K // bk
    slice_tiles = cdiv(k_tiles, splits)  # regtiled_body's per_split: the last slice has the rest
    return (
        g.M % bm == 0 and g.N % bn == 0 and g.K % bk == 0 and (splits - 1) * slice_tiles < k_tiles
        and g.N % 4 == 0 and g.stride_a % 4 == 0 and g.stride_b % 4 == 0
    )  # fmt: skip


def matmul_regtiled_edge(c, a, b, g: Gemm, *, tile: str, splits: int = 1, timed: int = 0):
    """Stage 9's ``matmul_regtiled_edge_{tile}`` (REGTILED_EDGE_TILES): the exact twin's body in the
    blocks whose tile lies inside C, the plain one in the rest, for the products edge_fit takes
    (3000^3: K in whole tiles, M and N not); the plain kernel's bits. ``splits`` > 1: its split-K
    twin ``matmul_regtiled_edge_splitk_{tile}``, reduced by split_k (1000^3: one wave unsplit)."""
    if splits == 1:
        return edge_launch(a, b, g, tile).dispatch(c, a, b, timed)
    if not edge_fit(a, b, g, tile, splits):
        raise ValueError(f"matmul_regtiled_edge_splitk_{tile} takes the exact twin's products in {splits} "
                         f"slices but for M and N (matmul_launchers.edge_fit), not {g}")  # fmt: skip
    bm, bn, _, threads = REGTILED_TILES[tile]
    return split_k(f"matmul_regtiled_edge_splitk_{tile}", c, a, b, g, (bm, bn, threads), splits, timed)


def edge_launch(a, b, g: Gemm, tile: str) -> Launch:
    """matmul_regtiled_edge's launch, or ValueError where edge_fit does not hold."""
    if not edge_fit(a, b, g, tile):
        raise ValueError(f"matmul_regtiled_edge_{tile} takes the exact twin's products but for M and N "
                         f"(matmul_launchers.edge_fit), not {g}")  # fmt: skip
    bm, bn, _, threads = REGTILED_TILES[tile]
    return Launch(f"matmul_regtiled_edge_{tile}", g.grid(bm, bn), (threads, 1, 1), g.args, (g,))


def edge_fit(a, b, g: Gemm, tile: str, splits: int = 1) -> bool:
    """Whether the edge twin of register tile ``tile`` (in ``splits`` K-slices) may compute this
    product: edge_shape, and A and B start 16-byte aligned."""
    return edge_shape(g, tile, splits) and aligned16(a, b)


def edge_shape(g: Gemm, tile: str, splits: int = 1) -> bool:
    """The shape half of edge_fit: a tile in REGTILED_EDGE_TILES (split: REGTILED_EDGE_SPLITK_TILES),
    exact_shape's rules for the blocks inside C (one matrix, no transposes, BK dividing K, a K-tile
    in every slice, rows of whole float4s) with M or N left over (else the exact twin takes it)."""
    twins = REGTILED_EDGE_TILES if splits == 1 else REGTILED_EDGE_SPLITK_TILES
    if tile not in twins or exact_shape(g, tile, splits):
        return False
    bm, bn, _, _ = REGTILED_TILES[tile]
    rounded = dataclasses.replace(g, M=cdiv(g.M, bm) * bm, N=cdiv(g.N, bn) * bn)  # C's edges filled up
    return exact_shape(rounded, tile, splits) and g.N % 4 == 0


def matmul_pipelined(c, a, b, g: Gemm, *, tile: str, splits: int = 1, kernel: Kernel | None = None, timed: int = 0):
    """Stage 9's ``matmul_pipelined_{tile}``: cp.async copies into 2 or 3 shared-memory stages feed
    the register tiles. ``splits`` > 1: ``matmul_pipelined_splitk_{tile}`` computes that many
    K-slices into scratch and matmul_splitk_reduce sums them in order (deterministic).
    ``kernel``: that kernel compiled with other defines (the tests' late wait)."""
    if splits == 1:
        return pipelined_launch(g, tile, kernel).dispatch(c, a, b, timed)
    bm, bn, _, threads, _ = PIPELINED_TILES[tile]
    return split_k(kernel or f"matmul_pipelined_splitk_{tile}", c, a, b, g, (bm, bn, threads), splits, timed)


def pipelined_launch(g: Gemm, tile: str, kernel: Kernel | None = None) -> Launch:
    """matmul_pipelined's one launch at ``tile``, unsplit (``kernel``: built with other defines)."""
    bm, bn, _, threads, _ = PIPELINED_TILES[tile]
    return Launch(kernel or f"matmul_pipelined_{tile}", g.grid(bm, bn), (threads, 1, 1), g.args, (g,))


SPLITK_LAUNCHES = 2  # split_k's: the sliced product, then the reduction


def split_k(kernel: str | Kernel, c, a, b, g: Gemm, tile: tuple[int, int, int], splits: int, timed: int):
    """A split-K product in SPLITK_LAUNCHES launches: ``kernel`` (a ``*_splitk_*`` twin, block
    tile ``(BM, BN, threads)``) writes each of ``splits`` K-slices of every matrix to scratch,
    partial + z * M * N for grid z = batch * splits; matmul_splitk_reduce then sums the slices in
    order 0, 1, ... into c (deterministic: no atomics), four outputs a thread (matmul_splitk_reduce4)
    where M * N is a multiple of 4 and c starts 16-byte aligned."""
    bm, bn, threads = tile
    mn, grid = g.M * g.N, g.grid(bm, bn)
    partial = DeviceBuffer(ITEMSIZE * g.batch * splits * mn)  # the pool reuses it in stream order
    args = (partial.ptr, a, b, *g.args, splits)
    times = [dispatch(kernel, (*grid[:2], g.batch * splits), (threads, 1, 1), args, timed, (g,))]
    times.append(splitk_reduce(c, partial, mn, splits, g.batch, timed))
    return total_ms(times)


def splitk_reduce(c, partial, mn: int, splits: int, batch: int = 1, timed: int = 0) -> float | None:
    """c[z] = the sum of partial's ``splits`` slices of ``mn`` floats for each matrix z, in order
    0, 1, ... (deterministic: no atomics); four outputs a thread (matmul_splitk_reduce4) where mn is
    a multiple of 4 and both start 16-byte aligned."""
    args = (c, partial, mn, splits, batch * mn)
    if mn % 4 == 0 and aligned16(c, partial):
        return elementwise("matmul_splitk_reduce4", cdiv(batch * mn, 4), *args, timed=timed)
    return elementwise("matmul_splitk_reduce", batch * mn, *args, timed=timed)


def matmul_cluster_splitk(c, a, b, g: Gemm, *, tile: str, splits: int, timed: int = 0):
    """Stage 9's split-K in one launch on Hopper (matmul_cluster.cu): the ``splits`` blocks of an
    output tile form a cluster and sum their K-slices in distributed shared memory, in the
    reduction's order (the same bits as matmul_regtiled at these splits), with no scratch. For
    the products the exact twin of ``tile`` takes (exact_fit)."""
    return cluster_launch(a, b, g, tile, splits).dispatch(c, a, b, timed)


def cluster_launch(a, b, g: Gemm, tile: str, splits: int) -> Launch:
    """matmul_cluster_splitk's one launch, or ValueError saying why this problem cannot have it."""
    if not probe.clusters_fit(runtime.arch()):
        raise ValueError(f"matmul_cluster_splitk needs thread block clusters (compute capability 9.0 or newer); "
                         f"{runtime.device_name()} is {runtime.arch()}")  # fmt: skip
    if tile not in CLUSTER_SPLITK_TILES or splits not in CLUSTER_SPLITS:
        raise ValueError(f"no cluster split-K kernel of tile {tile} in {splits} splits: the tiles are "
                         f"{', '.join(CLUSTER_SPLITK_TILES)}, the splits {CLUSTER_SPLITS}")  # fmt: skip
    if not exact_fit(a, b, g, tile, splits):
        raise ValueError(f"matmul_cluster_splitk_{tile} computes only products its tile divides exactly "
                         f"(matmul_launchers.exact_fit), not {g}")  # fmt: skip
    bm, bn, _, threads = REGTILED_TILES[tile]
    grid = (*g.grid(bm, bn)[:2], splits)
    return Launch(f"matmul_cluster_splitk{splits}_{tile}", grid, (threads, 1, 1), g.args, (g,))


def sgemm_parts(variant: str) -> tuple[str, str, int]:
    """(family, tile, splits) of a stage-9 variant: ``128x128x8`` is ("regtiled", "128x128x8", 1),
    ``128x128x8_splitk2`` ("regtiled", ..., 2), ``pipelined_64x64x16_splitk4`` ("pipelined", ...),
    ``128x64x8t128_cluster2`` ("cluster", "128x64x8t128", 2), ``128x128x8_edge`` ("edge", ..., 1),
    ``128x64x8t128_edge_splitk2`` ("edge", ..., 2)."""
    if "_edge" in variant:
        tile, _, split = variant.partition("_edge")
        return "edge", tile, int(split.removeprefix("_splitk") or 1)
    family = "pipelined" if variant.startswith("pipelined_") else "cluster" if "_cluster" in variant else "regtiled"
    tile, _, split = variant.removeprefix("pipelined_").partition("_cluster" if family == "cluster" else "_splitk")
    return family, tile, int(split) if split else 1


def matmul_sgemm(c, a, b, g: Gemm, *, variant: str, timed: int = 0):
    """Stage 9's product: ``variant`` a register-tiled tile (``128x128x8``), its split-K
    (``128x128x8_splitk2``, or in one cluster ``128x64x8t128_cluster2``), its edge twins
    (``128x128x8_edge``, ``128x64x8t128_edge_splitk2``) or a pipelined one (``pipelined_128x128x16``,
    ``pipelined_64x64x16_splitk4``): matmul_choice.sgemm_variant's names."""
    family, tile, splits = sgemm_parts(variant)
    launcher = {"pipelined": matmul_pipelined, "regtiled": matmul_regtiled, "cluster": matmul_cluster_splitk,
                "edge": matmul_regtiled_edge}[family]  # fmt: skip
    return launcher(c, a, b, g, tile=tile, splits=splits, timed=timed)


def sgemm_launch(a, b, g: Gemm, variant: str) -> Launch | None:
    """matmul_sgemm's launch at ``variant`` where it is one launch (None for a split-K variant in
    SPLITK_LAUNCHES launches, which needs scratch of its own every time)."""
    family, tile, splits = sgemm_parts(variant)
    if family == "cluster":
        return cluster_launch(a, b, g, tile, splits)
    if splits > 1:
        return None
    if family == "edge":
        return edge_launch(a, b, g, tile)
    return regtiled_launch(a, b, g, tile) if family == "regtiled" else pipelined_launch(g, tile)


def matmul_bias_act(c, a, b, bias, g: Gemm, relu: bool, *, tile: str, timed: int = 0):
    """Stage 10: the register-tiled product ``matmul_bias_act_{tile}`` with ``+ bias`` (None: none)
    and ReLU fused into its epilogue."""
    bm, bn, _, threads = REGTILED_TILES[tile]
    args = (c, a, b, bias, *g.args, int(relu))
    return dispatch(f"matmul_bias_act_{tile}", g.grid(bm, bn), (threads, 1, 1), args, timed, (g,))


def matmul_grad(c, a, b, g: Gemm, mask=None, colsum=None, *, tile: str, timed: int = 0):
    """The lean step's backward products (stage 11), ``matmul_grad_{tile}``: ``op(a) op(b)``,
    zeroed where ``mask`` (like c; None: none) is not > 0, and (``colsum`` not None, batch 1) the
    column sums of op(b) over K into ``colsum``."""
    if colsum is not None and g.batch != 1:
        raise ValueError(f"matmul_grad sums op(b)'s columns for one matrix, not a batch of {g.batch}")
    bm, bn, _, threads = REGTILED_TILES[tile]
    args = (c, a, b, mask, colsum, *g.args)
    return dispatch(f"matmul_grad_{tile}", g.grid(bm, bn), (threads, 1, 1), args, timed, (g,))


# One counter per output tile of a split-K launch that reduces in its last block (tiles that
# few are what split-K is for: matmul_choice.splitk_counts splits only grids smaller than the SMs).
SPLITK_COUNTERS = 1024


def matmul_splitk_bias_act(c, a, b, bias, counters, g: Gemm, relu: bool, *, tile: str, splits: int, timed: int = 0):
    """``act(op(a) op(b) + bias)`` over ``splits`` K-slices in one launch: the pipelined split-K
    product, then the last block of each tile sums its slices in order and applies the epilogue.
    ``counters``: SPLITK_COUNTERS zeroed unsigned ints, left zeroed."""
    if tile not in SPLITK_BIAS_ACT_TILES:
        raise ValueError(f"no split-K bias+act kernel of tile {tile}: the tiles are {', '.join(SPLITK_BIAS_ACT_TILES)}")
    bm, bn, _, threads, _ = PIPELINED_TILES[tile]
    grid = g.grid(bm, bn)
    if grid[0] * grid[1] * grid[2] > SPLITK_COUNTERS:
        raise ValueError(f"{tile} tiles of {g} are more than the {SPLITK_COUNTERS} counters of a split-K reduction")
    partial = DeviceBuffer(ITEMSIZE * g.batch * splits * g.M * g.N)  # the pool reuses it in stream order
    args = (c, partial.ptr, counters, a, b, bias, *g.args, splits, int(relu))
    kernel = f"matmul_pipelined_splitk_bias_act_{tile}"
    return dispatch(kernel, (*grid[:2], g.batch * splits), (threads, 1, 1), args, timed, (g,))


def matmul_linear(c, a, b, bias, counters, g: Gemm, relu: bool, *, variant: str, timed: int = 0):
    """The lean step's ``act(op(a) op(b) + bias)``: ``variant`` a register tile (matmul_bias_act)
    or ``pipelined_{tile}_splitk{n}`` (matmul_splitk_bias_act): matmul_choice.linear_variant's names."""
    if variant in REGTILED_TILES:
        return matmul_bias_act(c, a, b, bias, g, relu, tile=variant, timed=timed)
    _, tile, split = variant.split("_")
    splits = int(split.removeprefix("splitk"))
    return matmul_splitk_bias_act(c, a, b, bias, counters, g, relu, tile=tile, splits=splits, timed=timed)


def require_tensor_cores(what: str) -> None:
    """Refuse, before anything compiles, a tensor-core kernel this GPU cannot run."""
    if not probe.tensor_cores_fit(runtime.arch()):
        raise ValueError(
            f"{what} needs TF32 tensor cores (compute capability 8.0 or newer); {runtime.device_name()} is "
            f"{runtime.arch()}: "
            "use stage 11 or below here"
        )


def matmul_tf32(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 12's fallback: WMMA fragments of TF32, 128 x 128 tiles of C."""
    return tf32_launch(g).dispatch(c, a, b, timed)


def tf32_launch(g: Gemm) -> Launch:
    """matmul_tf32's launch."""
    require_tensor_cores("matmul_tf32")
    bm, bn, threads = MMA_TILE
    return Launch("matmul_tf32", g.grid(bm, bn), (threads, 1, 1), g.args, (g,))


def matmul_bf16(c, a, b, g: Gemm, *, timed: int = 0):
    """matmul_tf32's geometry with BF16 operands rounded on load (chapter 19's comparison)."""
    require_tensor_cores("matmul_bf16")
    bm, bn, threads = MMA_TILE
    return dispatch("matmul_bf16", g.grid(bm, bn), (threads, 1, 1), (c, a, b, *g.args), timed, (g,))


def tf32_async_quads(a, b, g: Gemm) -> bool:
    """Whether matmul_tf32_async copies both operands 16 bytes at a time: rows and strides in
    quads, operands 16-byte aligned (others it copies a float at a time)."""
    return g.quads() and aligned16(a, b)


def matmul_tf32_async(c, a, b, g: Gemm, *, kernel: str | Kernel = "matmul_tf32_async",
                      tile: tuple[int, int, int] = ASYNC_TILE, timed: int = 0):  # fmt: skip
    """Stage 12: mma.sync on TF32 fed by a cp.async pipeline, any shape, layout and alignment
    (tf32_async_quads says which copies it makes). ``kernel`` and ``tile`` (BM, BN, threads) name a
    variant compiled with other ASYNC_ shapes (experiments.tf32_variants)."""
    return tf32_async_launch(g, kernel, tile).dispatch(c, a, b, timed)


def tf32_async_launch(g: Gemm, kernel: str | Kernel = "matmul_tf32_async",
                      tile: tuple[int, int, int] = ASYNC_TILE) -> Launch:  # fmt: skip
    """matmul_tf32_async's launch."""
    require_tensor_cores("matmul_tf32_async")
    bm, bn, threads = tile
    return Launch(kernel, g.grid(bm, bn), (threads, 1, 1), g.args, (g,))


def k_major_operands(a, b, g: Gemm, timed: int = 0):
    """A and B of ``g`` as the wgmma kernels read them, K-contiguous and 16-byte aligned (TF32
    wgmma cannot transpose an operand in shared memory, and TMA needs 16-byte starts): operands
    stored the other way round are transposed into scratch (a batch of A each, a broadcast
    operand once), a misaligned one copied. Returns (a, b, the problem as C = A B^T with their
    strides, the transposes' times, the scratch buffers, to keep alive until the launches are
    queued: the pool reuses them in stream order)."""
    times, scratch = [], []

    def k_major(x, stored_k_major: bool, rows: int, stride: int):
        count = g.batch if stride else 1
        if stored_k_major and aligned16(x):
            return as_arg(x), stride
        buffer = DeviceBuffer(ITEMSIZE * count * rows * g.K)
        scratch.append(buffer)
        if stored_k_major:
            runtime.copy_dtod(buffer.ptr, as_arg(x), ITEMSIZE * count * rows * g.K)
        else:
            times.append(transpose(buffer.ptr, x, g.K, rows, stride, count, timed=timed))
        return buffer.ptr, rows * g.K if stride else 0

    pa, stride_a = k_major(a, not g.ta, g.M, g.stride_a)
    pb, stride_b = k_major(b, g.tb, g.N, g.stride_b)
    return pa, pb, _as_kmajor(g, stride_a, stride_b), times, scratch


@functools.lru_cache(maxsize=256)
def _as_kmajor(g: Gemm, stride_a: int, stride_b: int) -> Gemm:
    """``g`` as C = A B^T of operands ``stride_a``/``stride_b`` floats apart (cached: a call's
    host time counts where the product is short)."""
    return dataclasses.replace(g, ta=False, tb=True, stride_a=stride_a, stride_b=stride_b)


def matmul_tf32_wgmma(c, a, b, g: Gemm, *, timed: int = 0):
    """Warpgroup MMA on Hopper (wgmma.cu), C = A B^T with both operands K-contiguous; operands
    stored otherwise are made so first (k_major_operands)."""
    if not probe.wgmma_fits(g.K, runtime.arch()):
        raise ValueError(f"matmul_tf32_wgmma needs a Hopper GPU and K % 4 == 0 (K={g.K}, GPU {runtime.arch()})")
    pa, pb, k, times, _scratch = k_major_operands(a, b, g, timed)
    bm, bn, threads = WGMMA_TILE
    args = (c, pa, pb, k.M, k.N, k.K, k.stride_a, k.stride_b)
    times.append(dispatch("matmul_tf32_wgmma", k.grid(bm, bn), (threads, 1, 1), args, timed, (g,)))
    return total_ms(times)


def matmul_tf32_wgmma_tma(c, a, b, g: Gemm, *, bn: int, as_stored: bool | None = None, splits: int = 1,
                          stages: int | None = None, blocks: int | None = None, tiles: int | None = None,
                          debug: bool = False, consumers: int = 2, tma: bool = True, timed: int = 0):  # fmt: skip
    """Stage 12 from WGMMA_MIN_PRODUCT up: C = op(A) op(B) on Hopper by wgmma_tma.cu, TMA copies
    into a ring of mbarrier-synchronized stages, a producer and two consumer warpgroups, persistent
    blocks over grouped tiles 128 rows by ``bn`` columns. Its operands are read K-contiguous
    (k_major_operands transposes the others first), or, ``as_stored``, B of ``a @ b`` as it lies
    (the N-major build; b_reads_as_stored says where it can); ``as_stored`` None: as stored
    wherever it can be (matmul_choice.wgmma_tma_variant times both ways). Its two tensor maps are
    passed by value (128 bytes each, ``128s`` in its signature). ``splits`` > 1: the K-slices
    as a batch of products into scratch (wgmma_tma.plan), then matmul_splitk_reduce sums them into
    C: a skinny product's few tiles then fill the SMs.
    Debugging: ``stages=1`` builds a single stage, ``blocks=1`` has one block walk every tile,
    ``tiles=n`` computes only the first n tiles of the raster, ``debug`` names a stuck barrier.
    The ablation (experiments/tma_ablation.py; B^T given, as_stored False): ``consumers=1``, one
    consumer warpgroup on 64-row tiles; ``tma=False``, the producer's threads copy the slices;
    ``blocks`` as many as the tiles, one tile a block (no persistence)."""
    launch = wgmma_tma_launch(a, b, g, bn, as_stored, splits)
    switches = (stages, blocks, tiles, debug, consumers, tma)
    if switches != PLAIN:
        launch = dataclasses.replace(launch, **dict(zip(SWITCHES, switches)))
    return launch.dispatch(c, a, b, timed)


# matmul_tf32_wgmma_tma's debugging and ablation switches, and their values as the route launches it
SWITCHES = ("stages", "blocks", "tiles", "debug", "consumers", "tma")
PLAIN = (None, None, None, False, 2, True)


def wgmma_tma_launch(a, b, g: Gemm, bn: int, as_stored: bool | None = None, splits: int = 1) -> WgmmaTmaLaunch:
    """matmul_tf32_wgmma_tma's launch at tile width ``bn`` (and ``splits`` K-slices), for every
    product of ``g``'s shape and of operands aligned like ``a`` and ``b``; ValueError where the
    problem or this GPU cannot have it."""
    if runtime.arch() != "sm_90":
        raise ValueError(
            f"matmul_tf32_wgmma_tma needs a Hopper GPU (sm_90: TMA, wgmma, setmaxnreg); "
            f"{runtime.device_name()} is {runtime.arch()}"
        )
    if g.K % 4:
        raise ValueError(f"TMA strides are whole 16 bytes: K={g.K} is not a multiple of 4")
    if as_stored is None:
        as_stored = b_reads_as_stored(a, b, g)
    elif as_stored and not b_reads_as_stored(a, b, g):
        raise ValueError(f"B is read as stored only for a @ b with aligned operands and N % 4 == 0, not {g}")
    if splits > 1 and (g.batch > 1 or g.K % (4 * splits)):
        raise ValueError(
            f"{splits} K-slices need one matrix and K a multiple of {4 * splits} (16-byte slices), not {g}"
        )
    return WgmmaTmaLaunch(g, bn, as_stored, splits)


@dataclasses.dataclass(frozen=True)
class WgmmaTmaLaunch:
    """wgmma_tma_launch's: all but the tensor maps, which hold the operands' addresses
    (wgmma_tma.plan keeps them per pair of operands), and matmul_tf32_wgmma_tma's debugging
    switches. Read as stored, a product is one launch; else the operands' transposes come first
    (k_major_operands); split, the reduction follows."""

    g: Gemm
    bn: int
    as_stored: bool
    splits: int = 1
    stages: int | None = None
    blocks: int | None = None
    tiles: int | None = None
    debug: bool = False
    consumers: int = 2
    tma: bool = True
    # the last operands' (pointers, maps, grid, arguments after C): a user's loop multiplies the same ones
    _last: list = dataclasses.field(default_factory=lambda: [None], compare=False, repr=False)

    def dispatch(self, c, a, b, timed: int = 0) -> float | None:
        g, bn, as_stored, consumers = self.g, self.bn, self.as_stored, self.consumers
        kernel, shape = wgmma_tma.kernel(bn, self.stages, self.debug, as_stored, consumers=consumers, tma=self.tma)
        if as_stored:
            pa, pb, k, times = as_arg(a), as_arg(b), g, []
        else:
            pa, pb, k, times, _scratch = k_major_operands(a, b, g, timed)
        maps, grid, rest = wgmma_tma.plan(
            pa, pb, k, bn, self.stages, self.blocks, self.tiles, as_stored, consumers, self.splits
        )
        copied = () if self.tma else (pa, pb, k.stride_a, k.stride_b)  # the operands the producer's threads read
        out, partial = self._output(c)
        times.append(dispatch(kernel, grid, (shape["THREADS"], 1, 1), (*maps, out, *rest, *copied), timed, (g,)))
        if partial is not None:
            times.append(splitk_reduce(c, partial, g.M * g.N, self.splits, timed=timed))
        return total_ms(times)

    def queue(self, c, a, b) -> None:
        """The launches on the current stream for C, A and B (DeviceArrays); read as stored, with
        the last operands' maps where these are the same."""
        if not self.as_stored or (self.stages, self.blocks, self.tiles, self.debug, self.consumers, self.tma) != PLAIN:
            self.dispatch(c, a, b)
            return
        kernel, shape = wgmma_tma.kernel(self.bn, None, False, True)
        pointers, last = (a.ptr, b.ptr), self._last[0]
        if last is None or last[0] != pointers:
            plan = wgmma_tma.plan(*pointers, self.g, self.bn, None, None, None, True, 2, self.splits)
            last = self._last[0] = (pointers, *plan)
        _, maps, grid, rest = last
        out, partial = self._output(c)
        queue(kernel, grid, (shape["THREADS"], 1, 1), *maps, as_arg(out), *rest, shapes=(self.g,))
        if partial is not None:
            splitk_reduce(c, partial, self.g.M * self.g.N, self.splits)

    def _output(self, c):
        """Where the kernel writes: C, or for a split product scratch of its slices (the pool
        reuses it in stream order), returned too."""
        if self.splits == 1:
            return c, None
        partial = DeviceBuffer(ITEMSIZE * self.splits * self.g.M * self.g.N)
        return partial.ptr, partial


def b_reads_as_stored(a, b, g: Gemm) -> bool:
    """Whether wgmma_tma.cu's N-major build takes ``g`` without a transpose: ``a @ b`` (A
    K-contiguous, B N-contiguous), both 16-byte aligned with rows and matrices whole 16 bytes
    apart (TMA's rules)."""
    return (not g.ta and not g.tb and aligned16(a, b) and g.N % 4 == 0
            and g.stride_a % 4 == 0 and g.stride_b % 4 == 0)  # fmt: skip
