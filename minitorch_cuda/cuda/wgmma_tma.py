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
def shape(bn: int, stages: int | None) -> dict[str, int]:
    """wgmma_tma.cu's WT_ defines (BM, BN, BK, STAGES, THREADS, ...) with WT_BN=bn and WT_STAGES=stages
    (None: the file's own), checked against what a Hopper block can hold."""
    found = {**kernel_defines("wgmma_tma.cu", "WT"), "BN": bn, **({} if stages is None else {"STAGES": stages})}
    if bn not in (128, 256) or found["STAGES"] < 1:
        raise ValueError(f"wgmma_tma.cu takes WT_BN 128 or 256 and at least one stage, not {bn} and {stages}")
    if shared_bytes(found) + 16 * found["STAGES"] > HOPPER_SHARED_BYTES:  # + the static mbarriers
        raise ValueError(
            f"{found['STAGES']} stages of {found['BM']} x {bn} tiles need {shared_bytes(found)} bytes of shared memory"
        )
    return found


def shared_bytes(shape: dict[str, int]) -> int:
    """The dynamic shared memory of a shape: its stages of A and B tiles, aligned to 1024 bytes
    (wgmma_tma.cu's WT_SMEM_BYTES)."""
    return shape["STAGES"] * (shape["BM"] + shape["BN"]) * shape["BK"] * ITEMSIZE + 1024


def kernel(bn: int, stages: int | None, debug: bool, n_major: bool = False) -> tuple[Kernel, dict[str, int]]:
    """wgmma_tma.cu built for this Hopper GPU with WT_BN=bn and WT_STAGES=stages (None: the file's
    own), once per process, and its shape. ``debug`` makes a stuck wait print which barrier it was;
    ``n_major`` builds the kernel that reads B as stored for ``a @ b`` (WT_B_N_MAJOR: C^T = B^T A^T,
    B^T the register operand)."""
    return _kernel(bn, stages, debug, n_major, registry.current_override(NAME))


@functools.cache  # per override of NAME (or none): looked up at every launch of stage 12's route
def _kernel(bn: int, stages: int | None, debug: bool, n_major: bool, _override) -> tuple[Kernel, dict[str, int]]:
    s = shape(bn, stages)
    defines = {"WT_BN": bn, "WT_STAGES": s["STAGES"], "WT_B_N_MAJOR": int(n_major)}
    if debug:
        defines["WT_DEBUG"] = None
    return registry.variant(NAME, defines, shared_bytes=shared_bytes(s)), s


@functools.lru_cache(maxsize=64)  # the same operands, the same launch: a map only describes memory
def plan(pa: int, pb: int, k: Gemm, bn: int, stages: int | None, blocks: int | None, tiles: int | None,
         n_major: bool = False) -> tuple[tuple[bytes, bytes], tuple, tuple]:  # fmt: skip
    """wgmma_tma.cu's launch of C = A B^T (``k``, operands K-contiguous at ``pa`` and ``pb``), or
    with ``n_major`` of C = A B (B N-contiguous, read in boxes of 32 x 32): its two encoded tensor
    maps, its grid, and its arguments after C. Worked out once per problem and operands: at
    2048^3 the product takes tens of microseconds, as long as working this out took."""
    s = shape(bn, stages)
    bm, bk = s["BM"], s["BK"]
    # each operand as row-major rows x inner matrices, and its box: (rows, inner, stride, box rows, box inner)
    if n_major:  # A's rows take B^T's place; B is K rows of N
        operands = ((pa, k.M, k.K, k.stride_a, bn, bk), (pb, k.K, k.N, k.stride_b, bk, 32))
        tile_m, tile_n = bn, bm
    else:
        operands = ((pa, k.M, k.K, k.stride_a, bm, bk), (pb, k.N, k.K, k.stride_b, bn, bk))
        tile_m, tile_n = bm, bn
    maps, batches = [], []
    for x, rows, inner, stride, box_rows, box_inner in operands:
        matrices = k.batch if stride else 1  # stride 0: one matrix for the whole batch
        tiled = tensor_map.swizzled_stack(x, rows, inner, matrices, stride, box_rows, box_inner)
        maps.append(tensor_map.encode(tiled))
        batches.append(matrices)
    total = k.batch * cdiv(k.M, tile_m) * cdiv(k.N, tile_n)
    count = total if tiles is None else max(1, min(tiles, total))
    grid = (min(blocks or multiprocessors(), count), 1, 1)
    return tuple(maps), grid, (k.M, k.N, k.K, *batches, count)
