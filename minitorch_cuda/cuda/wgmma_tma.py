"""The build and the launch plan of wgmma_tma.cu (stage 12 from 1024^3 up on Hopper): the kernel
for a tile width, a number of stages and a way of reading B (``registry.variant``, so an override
of ``matmul_tf32_wgmma_tma`` reaches every build), and the tensor maps, grid and arguments of one
product. The launch contract is ``matmul_launchers.matmul_tf32_wgmma_tma``."""

from __future__ import annotations

import functools

from . import registry, tensor_map
from .array import ITEMSIZE
from .kernel_table import kernel_defines
from .launch_core import Gemm, cdiv
from .runtime import Kernel, multiprocessors

HOPPER_SHARED_BYTES = 227 * 1024  # the most shared memory a block of an H100/H200 may opt in to
NAME = "matmul_tf32_wgmma_tma"


@functools.cache
def shape(bn: int, stages: int | None, consumers: int = 2) -> dict[str, int]:
    """wgmma_tma.cu's WT_ defines (BM, BN, BK, STAGES, THREADS, ...) with WT_BN=bn, WT_STAGES=stages
    (None: the file's own) and WT_CONSUMERS=consumers, checked against what a Hopper block can hold."""
    found = {**kernel_defines("wgmma_tma.cu", "WT"), "BN": bn, **({} if stages is None else {"STAGES": stages})}
    # a consumer warpgroup computes 64 rows of the tile; the producer warpgroup is the block's first
    found |= {"CONSUMERS": consumers, "BM": 64 * consumers, "THREADS": 128 * (1 + consumers)}
    if bn not in (128, 256) or found["STAGES"] < 1 or consumers not in (1, 2):
        raise ValueError(
            f"wgmma_tma.cu takes WT_BN 128 or 256, at least one stage and 1 or 2 consumer warpgroups, "
            f"not {bn}, {stages} and {consumers}"
        )
    if shared_bytes(found) + 16 * found["STAGES"] > HOPPER_SHARED_BYTES:  # + the static mbarriers
        raise ValueError(
            f"{found['STAGES']} stages of {found['BM']} x {bn} tiles need {shared_bytes(found)} bytes of shared memory"
        )
    return found


def shared_bytes(shape: dict[str, int]) -> int:
    """The dynamic shared memory of a shape: its stages of A and B tiles, aligned to 1024 bytes
    (wgmma_tma.cu's WT_SMEM_BYTES)."""
    return shape["STAGES"] * (shape["BM"] + shape["BN"]) * shape["BK"] * ITEMSIZE + 1024


# What a build without TMA also takes: the operands its producer's threads read (wgmma_tma.cu's WT_COPY_PARAMS).
COPY_PARAMS = "const float *a, const float *b, int stride_a, int stride_b"


def kernel(bn: int, stages: int | None, debug: bool, n_major: bool = False, *, consumers: int = 2,
           tma: bool = True) -> tuple[Kernel, dict[str, int]]:  # fmt: skip
    """wgmma_tma.cu built for this Hopper GPU with WT_BN=bn and WT_STAGES=stages (None: the file's
    own), once per process, and its shape. ``debug`` makes a stuck wait print which barrier it was;
    ``n_major`` builds the kernel that reads B as stored for ``a @ b`` (WT_B_N_MAJOR: C^T = B^T A^T,
    B^T the register operand). The ablation's switches (K-major only): ``consumers=1``, one consumer
    warpgroup and 64-row tiles; ``tma=False``, the producer's threads copy (the kernel then takes
    COPY_PARAMS after its own)."""
    if n_major and (consumers != 2 or not tma):
        raise ValueError("the N-major build has two consumers and TMA copies: the ablation's switches are K-major only")
    return _kernel(bn, stages, debug, n_major, consumers, tma, registry.current_override(NAME))


@functools.cache  # per override of NAME (or none): looked up at every launch of stage 12's route
def _kernel(
    bn: int, stages: int | None, debug: bool, n_major: bool, consumers: int, tma: bool, _override
) -> tuple[Kernel, dict[str, int]]:
    s = shape(bn, stages, consumers)
    defines = {"WT_BN": bn, "WT_STAGES": s["STAGES"], "WT_B_N_MAJOR": int(n_major)}
    if consumers != 2:
        defines["WT_CONSUMERS"] = consumers
    if not tma:
        defines["WT_TMA"] = 0
    if debug:
        defines["WT_DEBUG"] = None
    extra = "" if tma else COPY_PARAMS
    return registry.variant(NAME, defines, extra_params=extra, shared_bytes=shared_bytes(s)), s


@functools.lru_cache(maxsize=64)  # the same operands, the same launch: a map only describes memory
def plan(
    pa: int,
    pb: int,
    k: Gemm,
    bn: int,
    stages: int | None,
    blocks: int | None,
    tiles: int | None,
    n_major: bool = False,
    consumers: int = 2,
    splits: int = 1,
) -> tuple[tuple[bytes, bytes], tuple, tuple]:
    """wgmma_tma.cu's launch of C = A B^T (``k``, operands K-contiguous at ``pa`` and ``pb``), or
    with ``n_major`` of C = A B (B N-contiguous, read in boxes of 32 x 32): its two encoded tensor
    maps, its grid, and its arguments after C. Worked out once per problem and operands: at
    2048^3 the product takes tens of microseconds, as long as working this out took.
    ``splits`` > 1 (one matrix, K a multiple of 4 x splits: matmul_launchers.wgmma_tma_launch
    refuses others): the K-slices of the product as a batch of ``splits`` products, slice s of A
    (and of B) read as matrix s of a map whose rows lie K apart; the kernel then writes slice s's
    partial product to C + s M N."""
    s = shape(bn, stages, consumers)
    bm, bk = s["BM"], s["BK"]
    kk = k.K // splits
    # each operand's (matrices, matrix stride, row stride), then its (address, rows, inner, ...,
    # box rows, box inner); split, slice s of each operand is its matrix s
    if splits > 1:
        a_stack, b_stack = (splits, kk, k.K), (splits, kk * k.N, k.N) if n_major else (splits, kk, k.K)
    else:
        a_stack = (_matrices(k, k.stride_a), k.stride_a, k.K)
        b_stack = (_matrices(k, k.stride_b), k.stride_b, k.N if n_major else k.K)
    if n_major:  # A's rows take B^T's place; B is K rows of N
        operands = ((pa, k.M, kk, *a_stack, bn, bk), (pb, kk, k.N, *b_stack, bk, 32))
        tile_m, tile_n = bn, bm
    else:
        operands = ((pa, k.M, kk, *a_stack, bm, bk), (pb, k.N, kk, *b_stack, bn, bk))
        tile_m, tile_n = bm, bn
    maps, batches = [], []
    for x, rows, inner, matrices, stride, row_stride, box_rows, box_inner in operands:
        tiled = tensor_map.swizzled_stack(x, rows, inner, matrices, stride, box_rows, box_inner, row_stride)
        maps.append(tensor_map.encode(tiled))
        batches.append(matrices)
    total = k.batch * splits * cdiv(k.M, tile_m) * cdiv(k.N, tile_n)
    count = total if tiles is None else max(1, min(tiles, total))
    grid = (min(blocks or multiprocessors(), count), 1, 1)
    return tuple(maps), grid, (k.M, k.N, kk, *batches, count)


def _matrices(k: Gemm, stride: int) -> int:
    """The matrices of an operand ``stride`` floats apart: the batch, or one shared by it (stride 0)."""
    return k.batch if stride else 1
