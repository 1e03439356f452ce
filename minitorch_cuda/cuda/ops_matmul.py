"""CUDA matmul per stage: naive per matrix, flags, batched, tiled, register-tiled, fused, tensor cores."""

from __future__ import annotations

import math

from .. import stages
from . import registry
from .array import ITEMSIZE, DeviceArray
from .autotune import fits, tuner
from .launchers import NULL_POINTER
from .ops_tensor import contiguous, copy, transpose
from .runtime import arch, launch, time_launch_ms
from .kernel_table import ASYNC_TILE, MMA_TILE, REGTILED_TILES, WGMMA_TILE


def _operand(x: DeviceArray, flag: bool) -> tuple[DeviceArray, bool]:
    """Contiguous storage for a matmul operand and whether to read it transposed."""
    if x.is_contiguous():
        return x, flag
    flipped = transpose(x)
    if flipped.is_contiguous():  # a transposed view: read the storage with the flag flipped
        return flipped, not flag
    return contiguous(x), flag


def matmul(a: DeviceArray, b: DeviceArray, ta: bool = False, tb: bool = False) -> DeviceArray:
    """``op(a) @ op(b)`` over the last two axes; leading axes are a batch (or broadcast)."""
    a, ta = _operand(a, ta)
    b, tb = _operand(b, tb)
    if not stages.fused_transpose():  # stages 0-2 materialize every transposed operand
        if ta:
            a, ta = contiguous(transpose(a)), False
        if tb:
            b, tb = contiguous(transpose(b)), False
    M, K = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
    N = b.shape[-2] if tb else b.shape[-1]
    batch_shape = a.shape[:-2] if a.ndim > b.ndim else b.shape[:-2]
    batch = math.prod(batch_shape)
    stride_a = M * K if a.ndim > 2 else 0
    stride_b = K * N if b.ndim > 2 else 0
    out = DeviceArray.empty(batch_shape + (M, N))
    shapes = (a.shape, b.shape, (ta, tb))
    if stages.regtiled_matmul():
        _matmul_beyond(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch, shapes)
        return out
    if stages.tiled_matmul() or stages.batched_matmul():
        tile = 32 if stages.tiled_matmul() else 16
        name = "matmul_tiled" if stages.tiled_matmul() else "matmul_batched"
        grid = ((N + tile - 1) // tile, (M + tile - 1) // tile, batch)
        launch(
            registry.get(name),
            grid,
            (tile, tile, 1),
            out.ptr,
            a.ptr,
            b.ptr,
            M,
            N,
            K,
            int(ta),
            int(tb),
            stride_a,
            stride_b,
            shapes=shapes,
        )
        return out
    grid = ((N + 15) // 16, (M + 15) // 16, 1)
    for z in range(batch):  # stages 0-4: one launch per 2-D matrix of the batch
        pa, pb, pc = a.ptr + ITEMSIZE * z * stride_a, b.ptr + ITEMSIZE * z * stride_b, out.ptr + ITEMSIZE * z * M * N
        if stages.fused_transpose():
            launch(
                registry.get("matmul_transposed"),
                grid,
                (16, 16, 1),
                pc,
                pa,
                pb,
                M,
                N,
                K,
                int(ta),
                int(tb),
                shapes=shapes,
            )
        else:
            launch(registry.get("matmul_naive"), grid, (16, 16, 1), pc, pa, pb, M, N, K, shapes=shapes)
    return out


def _matmul_beyond(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch, shapes, bias=None, relu=False) -> None:
    """Stages 9-12: a tensor-core kernel (12: warpgroup MMA for large products on Hopper,
    else mma.sync or WMMA) or the autotuned register-tiled variant; with ``bias`` the fused
    bias (+ ReLU) epilogue of stage 10."""
    flags = (M, N, K, int(ta), int(tb), stride_a, stride_b)
    if stages.tensor_cores() and bias is None:
        if batch * M * N * K >= WGMMA_MIN_PRODUCT and wgmma_fits(K):
            matmul_wgmma(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch, shapes)
            return
        quads = (M if ta else K) % 4 == 0 and (K if tb else N) % 4 == 0 and stride_a % 4 == 0 and stride_b % 4 == 0
        fast = quads and a.ptr % 16 == 0 and b.ptr % 16 == 0  # cp.async copies whole aligned quads
        bm, bn, threads = ASYNC_TILE if fast else MMA_TILE
        grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, batch)
        name = "matmul_tf32_async" if fast else "matmul_tf32"
        launch(registry.get(name), grid, (threads, 1, 1), out.ptr, a.ptr, b.ptr, *flags, shapes=shapes)
        return
    tile = _regtiled_tile(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch)
    bm, bn, _, threads = REGTILED_TILES[tile]
    grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, batch)
    if bias is None:
        args = (out.ptr, a.ptr, b.ptr, *flags)
        launch(registry.get(f"matmul_regtiled_{tile}"), grid, (threads, 1, 1), *args, shapes=shapes)
    else:
        args = (out.ptr, a.ptr, b.ptr, bias.ptr, *flags, int(relu))
        launch(registry.get(f"matmul_bias_act_{tile}"), grid, (threads, 1, 1), *args, shapes=shapes)


# From 1024^3 up, wgmma with its transposes beat mma.sync by 1.4-1.7x on the H200
# (book/results/tf32_wgmma.json). Smaller products were not timed with it: there a
# single 128 x 256 tile covers much of the product, and the transposes weigh more.
WGMMA_MIN_PRODUCT = 1024**3


def wgmma_fits(K: int) -> bool:
    """Whether matmul_wgmma can run here: a Hopper GPU, and K in whole 16-byte quads."""
    return K % 4 == 0 and arch() == "sm_90"


def matmul_wgmma(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch, shapes=()) -> None:
    """TF32 on warpgroup MMA (wgmma.cu): operands stored the other way round are transposed
    first, since wgmma takes TF32 operands K-contiguous only. Stage 12 takes it for products of
    at least WGMMA_MIN_PRODUCT multiply-adds (chapter 19)."""
    if not wgmma_fits(K):
        raise ValueError(f"matmul_wgmma needs a Hopper GPU and K % 4 == 0 (K={K}, GPU {arch()})")
    # K % 4 == 0 makes the batch strides whole quads; cp.async also needs 16-byte aligned starts
    if ta:  # A must be M x K
        a, stride_a = _transposed(a, K, M, stride_a, batch)
    elif a.ptr % 16:
        a = copy(a)
    if not tb:  # B must be N x K
        b, stride_b = _transposed(b, K, N, stride_b, batch)
    elif b.ptr % 16:
        b = copy(b)
    bm, bn, threads = WGMMA_TILE
    grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, batch)
    args = (out.ptr, a.ptr, b.ptr, M, N, K, stride_a, stride_b)
    launch(registry.get("matmul_tf32_wgmma"), grid, (threads, 1, 1), *args, shapes=shapes)


def _transposed(x: DeviceArray, rows: int, cols: int, stride: int, batch: int) -> tuple[DeviceArray, int]:
    """The (batch of) rows x cols matrices of x, transposed into new storage, and its batch stride."""
    count = batch if stride else 1  # a broadcast operand is transposed once
    out = DeviceArray.empty((count, cols, rows))
    grid = ((cols + 31) // 32, (rows + 31) // 32, count)
    launch(registry.get("transpose_2d"), grid, (32, 8, 1), out.ptr, x.ptr, rows, cols, stride, shapes=(x.shape,))
    return out, rows * cols if stride else 0


def _regtiled_tile(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch) -> str:
    """The register-tiled variant for this problem: timed on first use (autotune.tuner)."""
    key = (M, N, K, int(ta), int(tb), batch, a.ptr % 16 == 0, b.ptr % 16 == 0)
    choice = tuner.cached("matmul_regtiled", key)
    if choice is not None:
        return choice
    tiles = [t for t, (bm, bn, _, _) in REGTILED_TILES.items() if fits(bm, bn, M, N)]
    args = (out.ptr, a.ptr, b.ptr, M, N, K, int(ta), int(tb), stride_a, stride_b)

    def time_ms(tile: str) -> float:
        bm, bn, _, threads = REGTILED_TILES[tile]
        grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, batch)
        return time_launch_ms(registry.get(f"matmul_regtiled_{tile}"), grid, (threads, 1, 1), *args)

    return tuner.pick("matmul_regtiled", key, tiles, time_ms)


def linear(x: DeviceArray, w: DeviceArray, bias: DeviceArray | None, relu: bool) -> DeviceArray:
    """``act(x @ w + bias)`` for a 2-D ``x`` in one launch (stage 10's fused epilogue)."""
    x, tx = _operand(x, False)
    w, tw = _operand(w, False)
    M, K = (x.shape[-1], x.shape[-2]) if tx else x.shape
    N = w.shape[-2] if tw else w.shape[-1]
    out = DeviceArray.empty((M, N))
    bias = contiguous(bias) if bias is not None else NULL_POINTER
    _matmul_beyond(out, x, w, M, N, K, tx, tw, 0, 0, 1, (x.shape, w.shape, (tx, tw)), bias=bias, relu=relu)
    return out
