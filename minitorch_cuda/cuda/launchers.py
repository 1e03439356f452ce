"""Every kernel's launch contract: grid, block, dynamic shared memory and argument order.

One public launcher per kernel family. The backend's ops (``ops_*``) choose a
launcher by stage; the benchmark, the grader, the sanitizer, the experiments and
the tests call these same launchers, so what they launch is what the backend
launches. Launchers read no stage and look each kernel up in the registry by
name, so an override (a student's kernel) is what runs; a compiled ``Kernel``
may be passed instead of a name (a standalone exercise, a variant compiled with
other defines).

Pointer arguments are ints, ``None`` (a null pointer: an optional operand left
out) or anything with ``.ptr`` (a DeviceArray, the grader's guarded buffers).
With ``timed=True`` a launcher returns the GPU milliseconds of its launches
(events on the legacy stream; not counted, not profiled) instead of queueing
them on the current stream; ``timed=n`` times n back-to-back launches of each
and returns milliseconds per launch, so that host gaps between launches of a
short kernel do not count.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import statistics
import time

from . import registry
from .array import ITEMSIZE
from .kernel_table import (
    ASYNC_TILE,
    CLUSTER_SPLITK_TILES,
    CLUSTER_SPLITS,
    MMA_TILE,
    MULTI_TENSOR_SLOTS,
    PERSISTENT,
    PIPELINED_TILES,
    REGTILED_EXACT_TILES,
    REGTILED_SPLITK_TILES,
    REGTILED_TILES,
    SPECS,
    SPLITK_BIAS_ACT_TILES,
    TRANSPOSE,
    WGMMA_TILE,
)
from .runtime import Kernel, launch, multiprocessors, time_launch_ms

BLOCK = 256  # threads per block of the one-thread-per-element kernels
XENT_THREADS = 512  # fused.cu: softmax_xent_fused's __launch_bounds__
BLOCK_ROW_COLUMNS = 512 * 32  # vectorized.cu: softmax_rows_block, 512 threads of 32 values at most


def _cdiv(n: int, d: int) -> int:
    return -(-n // d)


def _arg(x):
    """A kernel argument: a pointer from anything with ``.ptr``, 0 for None, a scalar as it is."""
    return 0 if x is None else getattr(x, "ptr", x)


def _kernel(kernel: str | Kernel) -> Kernel:
    return registry.get(kernel) if isinstance(kernel, str) else kernel


def _go(kernel: str | Kernel, grid: tuple, block: tuple, args: tuple, timed: int, what=()) -> float | None:
    """Queue one launch on the current stream, or (``timed``) time it alone."""
    kernel = _kernel(kernel)
    args = tuple(map(_arg, args))
    if timed:
        return time_launch_ms(kernel, grid, block, *args, repeats=int(timed))
    launch(kernel, grid, block, *args, shapes=what)
    return None


def _total(times: list) -> float | None:
    return None if times[0] is None else float(sum(times))


def aligned16(*pointers) -> bool:
    """Whether every pointer starts a 16-byte vector (fresh buffers do; odd row slices may not)."""
    return all(_arg(p) % 16 == 0 for p in pointers)


# --- one thread per element ----------------------------------------------------------------


def elementwise(kernel: str | Kernel, n: int, *args, timed: int = 0) -> float | None:
    """The one-thread-per-element kernels (elementwise ops, strided copy, gathers, init,
    axis sums, clipping scale, optimizer steps): ceil(n / 256) blocks of 256 threads."""
    return _go(kernel, (_cdiv(n, BLOCK), 1, 1), (BLOCK, 1, 1), args, timed, (n,))


def vec4_blocks(n: int) -> int:
    """Blocks of the grid-stride float4 kernels: one thread per float4, at most 8 per SM."""
    return max(1, min(_cdiv(n // 4, BLOCK), 8 * multiprocessors()))


def has_vec4(name: str) -> bool:
    """Whether elementwise kernel ``name`` has a ``{name}_vec4`` variant."""
    return f"{name}_vec4" in SPECS


def elementwise_vec4(
    kernel: str | Kernel, n: int, *args, timed: int = 0, undersized: tuple[int, int] | None = None
) -> float | None:
    """The 16-byte vectorized, grid-stride ``*_vec4`` kernels (every pointer 16-byte aligned).
    ``undersized=(blocks, threads)`` launches a deliberately smaller grid: a check that the
    kernel's grid-stride loop covers what one pass of its threads does not."""
    blocks, threads = undersized or (vec4_blocks(n), BLOCK)
    return _go(kernel, (blocks, 1, 1), (threads, 1, 1), args, timed, (n,))


# --- reductions and softmax: one block per row ------------------------------------------------


def reduce_block(length: int) -> int:
    """Threads of a block-reduction kernel: a power of two in 64..1024."""
    return min(1024, max(64, 1 << (max(length, 1) - 1).bit_length()))


def sum_rows(kernel: str, out, x, rows: int, cols: int, scale: float, *, timed: int = 0):
    """``sum_rows_volatile`` / ``sum_rows_shuffle``: out[r] = scale * sum of row r."""
    return _go(kernel, (rows, 1, 1), (reduce_block(cols), 1, 1), (out, x, rows, cols, float(scale)), timed)


def sumsq(kernel: str, out, x, n: int, *, timed: int = 0):
    """``sumsq_volatile`` / ``sumsq_shuffle``: one block of 1024 threads sums x[i]^2 into *out."""
    return _go(kernel, (1, 1, 1), (1024, 1, 1), (out, x, n), timed, (n,))


def block_row_threads(cols: int) -> int:
    """Threads for softmax_rows_block: 32 columns each, rounded up to whole warps."""
    return 32 * _cdiv(cols, 32 * 32)


def softmax_rows(kernel: str, out, x, rows: int, cols: int, *, timed: int = 0):
    """Every softmax over rows: ``softmax_rows_{volatile,shuffle}`` (a block per row, three
    passes), ``_warp`` (a warp per row held in registers, cols <= 1024), ``_block`` (a block per
    row in registers, cols <= BLOCK_ROW_COLUMNS), ``_online`` (one pass for max and sum)."""
    variant = kernel.rsplit("_", 1)[1]
    if variant == "warp":
        if cols > 1024:
            raise ValueError(f"softmax_rows_warp holds a row of at most 1024 columns in registers, not {cols}")
        grid, threads = (_cdiv(rows, 8), 1, 1), 256  # 8 warps, one row each
    elif variant == "block":
        if cols > BLOCK_ROW_COLUMNS:
            raise ValueError(f"softmax_rows_block holds at most {BLOCK_ROW_COLUMNS} columns, not {cols}")
        grid, threads = (rows, 1, 1), block_row_threads(cols)
    elif variant == "online":
        grid, threads = (rows, 1, 1), 256
    else:
        grid, threads = (rows, 1, 1), reduce_block(cols)
    return _go(kernel, grid, (threads, 1, 1), (out, x, rows, cols), timed, (rows, cols))


def softmax_xent(kernel: str, probs, row_loss, logits, target, rows: int, cols: int, *, timed: int = 0):
    """``softmax_xent_{volatile,shuffle}``: a block per row writes its probabilities and loss."""
    args = (probs, row_loss, logits, target, rows, cols)
    return _go(kernel, (rows, 1, 1), (reduce_block(cols), 1, 1), args, timed, (rows, cols))


def softmax_xent_fused(probs, loss, logits, target, rows: int, cols: int, scale: float, *, timed: int = 0):
    """One block: the probabilities and ``scale`` times the summed loss (a warp per row)."""
    block = (min(XENT_THREADS, 32 * rows), 1, 1)
    args = (probs, loss, logits, target, rows, cols, float(scale))
    return _go("softmax_xent_fused", (1, 1, 1), block, args, timed, (rows, cols))


def softmax_xent_grad(grad, loss, logits, target, rows: int, cols: int, scale: float, *, timed: int = 0):
    """softmax_xent_fused's launch, writing ``scale * (softmax - target)`` instead of the probabilities."""
    block = (min(XENT_THREADS, 32 * rows), 1, 1)
    args = (grad, loss, logits, target, rows, cols, float(scale))
    return _go("softmax_xent_grad", (1, 1, 1), block, args, timed, (rows, cols))


# --- layout ------------------------------------------------------------------------------------


def transpose(out, x, rows: int, cols: int, stride: int, count: int = 1, *, timed: int = 0):
    """``count`` rows x cols matrices, ``stride`` floats apart, transposed into ``out``: square
    tiles staged in shared memory, a block of 32 x ROWS threads each (layout.cu's TR_ shape)."""
    tile = TRANSPOSE["TILE"]
    grid = (_cdiv(cols, tile), _cdiv(rows, tile), count)
    block = (32, TRANSPOSE["ROWS"], 1)
    return _go("transpose_2d", grid, block, (out, x, rows, cols, stride), timed, (count, rows, cols))


# --- multi-tensor apply: up to MULTI_TENSOR_SLOTS tensors a launch ------------------------------


def multi_chunks(sizes: list[int]) -> int:
    """Blocks per tensor: enough for the largest at 4 elements a thread, at most 128."""
    return max(1, min(128, _cdiv(max(sizes), 4 * BLOCK)))


def _slots(arrays: list, what) -> list:
    if len(arrays) > MULTI_TENSOR_SLOTS:
        raise ValueError(f"a multi-tensor launch takes at most {MULTI_TENSOR_SLOTS} tensors, not {len(arrays)}")
    return [what(x) for x in arrays] + [0] * (MULTI_TENSOR_SLOTS - len(arrays))


def _multi(kernel: str, head: tuple, tensors: list[list], sizes: list[int], chunks: int, timed: int):
    args = (*head, *(p for group in tensors for p in _slots(group, _arg)), *_slots(sizes, int))
    return _go(kernel, (chunks, len(sizes), 1), (BLOCK, 1, 1), args, timed, tuple(sizes))


def multi_sumsq(partials, grads: list, sizes: list[int], chunks: int, *, timed: int = 0):
    """``chunks`` partial sums of squares per gradient into ``partials`` (gradient-major)."""
    return _multi("multi_sumsq", (partials,), [grads], sizes, chunks, timed)


def multi_clip_scale(
    partials, n_partials: int, max_norm: float, grads: list, sizes: list[int], chunks: int, *, timed: int = 0
):
    """Scale every gradient by the clipping factor of the global norm that ``partials`` sum to."""
    return _multi("multi_clip_scale", (partials, n_partials, float(max_norm)), [grads], sizes, chunks, timed)


def multi_clip_rmsprop(
    partials, n_partials: int, max_norm: float, lr: float, decay: float, eps: float,
    params: list, grads: list, states: list, sizes: list[int], chunks: int, *, timed: int = 0,
):  # fmt: skip
    """Clip (``partials`` None: no clipping) and take an RmsProp step for every parameter."""
    head = (partials, n_partials, float(max_norm), float(lr), float(decay), float(eps))
    return _multi("multi_clip_rmsprop", head, [params, grads, states], sizes, chunks, timed)


def multi_clip_rmsprop_grid(
    partials, barrier, max_norm: float, lr: float, decay: float, eps: float,
    params: list, grads: list, states: list, sizes: list[int], *, blocks: int = 0, timed: int = 0,
):  # fmt: skip
    """Clip to the global norm and take an RmsProp step in one launch: ``blocks`` (0: one per
    multiprocessor) of BLOCK threads, ``partials`` one float per block, ``barrier`` a zeroed
    GridBarrier. Its grid barrier waits for every block: never more blocks than multiprocessors."""
    most = multiprocessors()
    blocks = blocks or most
    if not 1 <= blocks <= most:
        raise ValueError(f"multi_clip_rmsprop_grid needs 1..{most} blocks (at most one per SM), not {blocks}")
    head = (partials, barrier, float(max_norm), float(lr), float(decay), float(eps))
    args = (*head, *(p for group in (params, grads, states) for p in _slots(group, _arg)), *_slots(sizes, int))
    return _go("multi_clip_rmsprop_grid", (blocks, 1, 1), (BLOCK, 1, 1), args, timed, tuple(sizes))


# --- the whole training step: one persistent kernel ------------------------------------------


def fetch_batch(cursor, x, target, arrived, *, timed: int = 0):
    """Stage 11's lean graph: copy the rows where ``cursor`` (a BatchCursor) points into ``x``
    and ``target`` (the graph's static inputs, whose sizes say how many), then move it past
    them. ``arrived``: one zeroed unsigned int, left zeroed. A block per multiprocessor."""
    args = (cursor, x, target, x.size, target.size, arrived)
    return _go("fetch_batch", (multiprocessors(), 1, 1), (BLOCK, 1, 1), args, timed, (x.size, target.size))


def persistent_step(
    layers, n_layers: int, batch, rows: int, row_loss, partials, n_partials: int, loss, report: int, barrier,
    rmsprop: bool, lr: float, decay: float, eps: float, max_norm: float, *, blocks: int = 0, timed: int = 0,
    kernel: str | Kernel = "persistent_step", phase_ns=None, shared_bytes: int = 0,
):  # fmt: skip
    """Stage 13: the training step of the MLP that the table ``layers`` describes, one block of
    PS_THREADS per multiprocessor (``blocks``: fewer, at least 1). Its grid barriers wait for
    every block, so all must be resident at once: never more blocks than multiprocessors.
    ``batch``: the step's BatchCursor (the rows' addresses), moved past them by the kernel.
    ``report``: the address of the host's word for the loss (step_report.StepReport), or 0.
    ``phase_ns``: the clock's buffer of a ``kernel`` built with PS_PHASE_CLOCK (one more argument).
    ``shared_bytes``: the dynamic shared memory of the staged weights (at most persistent_step_staging_bytes())."""
    most = multiprocessors()
    blocks = blocks or most
    if not 1 <= blocks <= most:
        raise ValueError(f"persistent_step needs 1..{most} blocks (one per multiprocessor at most), not {blocks}")
    args = (
        layers, n_layers, batch, rows, row_loss, partials, n_partials, loss, report, barrier,
        int(rmsprop), float(lr), float(decay), float(eps), float(max_norm),
    )  # fmt: skip
    args += () if phase_ns is None else (phase_ns,)
    kernel = _sized(_kernel(kernel), shared_bytes) if shared_bytes else kernel
    return _go(kernel, (blocks, 1, 1), (PERSISTENT["THREADS"], 1, 1), args, timed, (rows,))


def persistent_step_staging_bytes() -> int:
    """The most dynamic shared memory persistent_step can have on this GPU: room for the later
    layers' weights that its rows phase reads."""
    return _kernel("persistent_step").dynamic_shared_limit()


@functools.cache
def _sized(kernel: Kernel, shared_bytes: int) -> Kernel:
    return kernel.with_shared_bytes(shared_bytes)


# --- the latency floor (chapter 21): launches that do no work --------------------------------


def floor(kernel: str | Kernel, *args, blocks: int = 1, timed: int = 0) -> float | None:
    """floor.cu: ``floor_empty`` (no arguments) and ``floor_report(report)`` on one thread;
    ``floor_barriers(barrier, count)`` on ``blocks`` blocks of PS_THREADS, as persistent_step's
    (its grid barriers wait for every block, so never more blocks than multiprocessors)."""
    name = kernel if isinstance(kernel, str) else kernel.name
    if name in ("floor_empty", "floor_report"):
        return _go(kernel, (1, 1, 1), (1, 1, 1), args, timed)
    most = multiprocessors()
    if not 1 <= blocks <= most:
        raise ValueError(f"{name} needs 1..{most} blocks (one per multiprocessor at most), not {blocks}")
    return _go(kernel, (blocks, 1, 1), (PERSISTENT["THREADS"], 1, 1), args, timed, (blocks,))


HOST_LAUNCH_SAMPLES = 300
HOST_LAUNCH_EMULATED_MS = 0.010  # nominal: the emulator runs kernels on the host, nothing to measure


@functools.cache
def host_launch_ms() -> float:
    """Host milliseconds one launch through this module costs (the registry, PyCUDA's prepared
    call, the counters, the stage's checks): the median over HOST_LAUNCH_SAMPLES launches of
    floor_empty, measured once per process and left out of the counters (measuring is not the
    program's work). A host-bound training step pays this for every launch it makes."""
    from .. import profiler
    from .driver import EMULATED

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


# --- matmul ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One matmul problem as every matmul kernel takes it: C[z] = op(A[z]) @ op(B[z]) for z
    in the batch, op transposing where ``ta``/``tb``; each operand's matrices lie
    ``stride_a``/``stride_b`` floats apart (0: one matrix broadcast over the batch)."""

    M: int
    N: int
    K: int
    ta: bool = False
    tb: bool = False
    stride_a: int = 0
    stride_b: int = 0
    batch: int = 1

    @classmethod
    def of(cls, a, b, ta: bool = False, tb: bool = False) -> Gemm:
        """The problem of contiguous operands ``a`` and ``b`` (anything with ``.shape``);
        leading axes of the operand with more of them are the batch."""
        M, K = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
        N = b.shape[-2] if tb else b.shape[-1]
        lead = a.shape[:-2] if len(a.shape) > len(b.shape) else b.shape[:-2]
        return cls(
            M, N, K, bool(ta), bool(tb),
            stride_a=M * K if len(a.shape) > 2 else 0,
            stride_b=K * N if len(b.shape) > 2 else 0,
            batch=math.prod(lead),
        )  # fmt: skip

    @property
    def args(self) -> tuple[int, ...]:
        """The kernels' (M, N, K, ta, tb, stride_a, stride_b)."""
        return (self.M, self.N, self.K, int(self.ta), int(self.tb), self.stride_a, self.stride_b)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.M * self.N * self.K

    def grid(self, bm: int, bn: int) -> tuple[int, int, int]:
        """A block per bm x bn tile of C, the batch along z."""
        return (_cdiv(self.N, bn), _cdiv(self.M, bm), self.batch)

    def quads(self) -> bool:
        """Whether every row of A and B and every batch stride is whole 16-byte quads."""
        rows_a, rows_b = (self.M if self.ta else self.K), (self.K if self.tb else self.N)
        return rows_a % 4 == 0 and rows_b % 4 == 0 and self.stride_a % 4 == 0 and self.stride_b % 4 == 0


def per_matrix(name: str, c, a, b, g: Gemm, flags: tuple, timed: int):
    """Kernels without a batch axis: a host loop of one launch per matrix of the batch."""
    grid = (_cdiv(g.N, 16), _cdiv(g.M, 16), 1)
    times = []
    for z in range(g.batch):
        pc = _arg(c) + ITEMSIZE * z * g.M * g.N
        pa = _arg(a) + ITEMSIZE * z * g.stride_a
        pb = _arg(b) + ITEMSIZE * z * g.stride_b
        times.append(_go(name, grid, (16, 16, 1), (pc, pa, pb, g.M, g.N, g.K, *flags), timed, (g,)))
    return _total(times)


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
    return _go("matmul_batched", g.grid(16, 16), (16, 16, 1), (c, a, b, *g.args), timed, (g,))


def matmul_tiled(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 6: 32 x 32 tiles of A and B staged in shared memory, a thread per element of C."""
    return _go("matmul_tiled", g.grid(32, 32), (32, 32, 1), (c, a, b, *g.args), timed, (g,))


def tuning_launches() -> int:
    """Back-to-back launches per sample when the autotuner times a candidate (the ``timed=`` of
    its launcher): autotune.TIMED_LAUNCHES on a GPU, one on the CPU emulator, whose times stand
    for nothing the GPU would do."""
    from .autotune import TIMED_LAUNCHES
    from .driver import EMULATED

    return 1 if EMULATED else TIMED_LAUNCHES


def tuning_key(a, b, g: Gemm) -> tuple:
    """What makes two problems the same for the autotuner: the shape, the layout, the batch and
    whether each operand starts a 16-byte vector (the vectorized loads' condition)."""
    return (g.M, g.N, g.K, int(g.ta), int(g.tb), g.batch, aligned16(a), aligned16(b))


def regtiled_tile(c, a, b, g: Gemm) -> str:
    """The register-tiled variant for this problem: the tiles that fit are timed on first use
    (autotune.tuner) and the fastest is kept for the shape."""
    from .autotune import fits, tuner

    key = tuning_key(a, b, g)
    choice = tuner.cached("matmul_regtiled", key)
    if choice is not None:
        return choice
    tiles = [t for t, (bm, bn, _, _) in REGTILED_TILES.items() if fits(bm, bn, g.M, g.N)]
    return tuner.pick(
        "matmul_regtiled", key, tiles, lambda t: matmul_regtiled(c, a, b, g, tile=t, timed=tuning_launches())
    )


def matmul_regtiled(c, a, b, g: Gemm, *, tile: str | None = None, splits: int = 1, timed: int = 0):
    """Stage 9: ``matmul_regtiled_{tile}`` (tile None: the autotuned one), a BM x BN tile of C
    per block, each thread a TM x TN register tile. ``splits`` > 1: its split-K twin
    ``matmul_regtiled_splitk_{tile}`` (REGTILED_SPLITK_TILES), reduced by split_k. Where
    exact_fit holds, the kernel's exact twin (``_exact_`` before the tile) runs instead."""
    tile = tile or regtiled_tile(c, a, b, g)
    bm, bn, _, threads = REGTILED_TILES[tile]
    exact = "exact_" if exact_fit(a, b, g, tile, splits) else ""
    if splits == 1:
        grid = g.grid(bm, bn)
        return _go(f"matmul_regtiled_{exact}{tile}", grid, (threads, 1, 1), (c, a, b, *g.args), timed, (g,))
    if tile not in REGTILED_SPLITK_TILES:
        raise ValueError(f"no split-K twin of register tile {tile}: the tiles are {', '.join(REGTILED_SPLITK_TILES)}")
    return split_k(f"matmul_regtiled_splitk_{exact}{tile}", c, a, b, g, (bm, bn, threads), splits, timed)


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
    slice_tiles = _cdiv(k_tiles, splits)  # regtiled_body's per_split: the last slice has the rest
    return (
        g.M % bm == 0 and g.N % bn == 0 and g.K % bk == 0 and (splits - 1) * slice_tiles < k_tiles
        and g.N % 4 == 0 and g.stride_a % 4 == 0 and g.stride_b % 4 == 0
    )  # fmt: skip


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
    blocks, sms = g.batch * _cdiv(g.M, bm) * _cdiv(g.N, bn), multiprocessors()
    counts = []
    for splits in SPLITK_COUNTS if blocks < sms else ():
        if _cdiv(g.K, bk) < splits * SPLITK_MIN_TILES:
            break
        counts.append(splits)
        if blocks * splits >= sms:
            break
    return counts


def matmul_pipelined(c, a, b, g: Gemm, *, tile: str, splits: int = 1, kernel: Kernel | None = None, timed: int = 0):
    """Stage 9's ``matmul_pipelined_{tile}``: cp.async copies into 2 or 3 shared-memory stages feed
    the register tiles. ``splits`` > 1: ``matmul_pipelined_splitk_{tile}`` computes that many
    K-slices into scratch and matmul_splitk_reduce sums them in order (deterministic).
    ``kernel``: that kernel compiled with other defines (the tests' late wait)."""
    bm, bn, _, threads, _ = PIPELINED_TILES[tile]
    if splits == 1:
        kernel = kernel or f"matmul_pipelined_{tile}"
        return _go(kernel, g.grid(bm, bn), (threads, 1, 1), (c, a, b, *g.args), timed, (g,))
    return split_k(kernel or f"matmul_pipelined_splitk_{tile}", c, a, b, g, (bm, bn, threads), splits, timed)


SPLITK_LAUNCHES = 2  # split_k's: the sliced product, then the reduction


def split_k(kernel: str | Kernel, c, a, b, g: Gemm, tile: tuple[int, int, int], splits: int, timed: int):
    """A split-K product in SPLITK_LAUNCHES launches: ``kernel`` (a ``*_splitk_*`` twin, block
    tile ``(BM, BN, threads)``) writes each of ``splits`` K-slices of every matrix to scratch,
    partial + z * M * N for grid z = batch * splits; matmul_splitk_reduce then sums the slices in
    order 0, 1, ... into c (deterministic: no atomics), four outputs a thread (matmul_splitk_reduce4)
    where M * N is a multiple of 4 and c starts 16-byte aligned."""
    from .memory import DeviceBuffer

    bm, bn, threads = tile
    mn, grid = g.M * g.N, g.grid(bm, bn)
    partial = DeviceBuffer(ITEMSIZE * g.batch * splits * mn)  # the pool reuses it in stream order
    args = (partial.ptr, a, b, *g.args, splits)
    times = [_go(kernel, (*grid[:2], g.batch * splits), (threads, 1, 1), args, timed, (g,))]
    reduce_args = (c, partial.ptr, mn, splits, g.batch * mn)
    if mn % 4 == 0 and aligned16(c, partial):
        times.append(elementwise("matmul_splitk_reduce4", _cdiv(g.batch * mn, 4), *reduce_args, timed=timed))
    else:
        times.append(elementwise("matmul_splitk_reduce", g.batch * mn, *reduce_args, timed=timed))
    return _total(times)


def clusters_fit(arch: str) -> bool:
    """Whether a GPU of this ``sm_XY`` runs thread block clusters (compute capability 9.0 on)."""
    return int(arch.removeprefix("sm_")) >= 90


def matmul_cluster_splitk(c, a, b, g: Gemm, *, tile: str, splits: int, timed: int = 0):
    """Stage 9's split-K in one launch on Hopper (matmul_cluster.cu): the ``splits`` blocks of an
    output tile form a cluster and sum their K-slices in distributed shared memory, in the
    reduction's order (the same bits as matmul_regtiled at these splits), with no scratch. For
    the products the exact twin of ``tile`` takes (exact_fit)."""
    from .runtime import arch, device_name

    if not clusters_fit(arch()):
        raise ValueError(f"matmul_cluster_splitk needs thread block clusters (compute capability 9.0 or newer); "
                         f"{device_name()} is {arch()}")  # fmt: skip
    if tile not in CLUSTER_SPLITK_TILES or splits not in CLUSTER_SPLITS:
        raise ValueError(f"no cluster split-K kernel of tile {tile} in {splits} splits: the tiles are "
                         f"{', '.join(CLUSTER_SPLITK_TILES)}, the splits {CLUSTER_SPLITS}")  # fmt: skip
    if not exact_fit(a, b, g, tile, splits):
        raise ValueError(f"matmul_cluster_splitk_{tile} computes only products its tile divides exactly "
                         f"(launchers.exact_fit), not {g}")  # fmt: skip
    bm, bn, _, threads = REGTILED_TILES[tile]
    grid = (*g.grid(bm, bn)[:2], splits)
    return _go(f"matmul_cluster_splitk{splits}_{tile}", grid, (threads, 1, 1), (c, a, b, *g.args), timed, (g,))


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
    tiles in one launch (``128x64x8t128_cluster2``, matmul_cluster_splitk) where the shape is exact."""
    from .autotune import fits
    from .runtime import arch

    names = []
    for tile, (bm, bn, *_) in PIPELINED_TILES.items():
        if fits(bm, bn, g.M, g.N):
            names += [f"pipelined_{tile}"] + [f"pipelined_{tile}_splitk{s}" for s in splitk_counts(g, tile)]
    for tile in REGTILED_SPLITK_TILES:
        bm, bn, *_ = REGTILED_TILES[tile]
        if fits(bm, bn, g.M, g.N):
            names += [f"{tile}_splitk{s}" for s in splitk_counts(g, tile)]
    if clusters_fit(arch()):
        for tile in CLUSTER_SPLITK_TILES:
            splits = [s for s in splitk_counts(g, tile) if s in CLUSTER_SPLITS and exact_shape(g, tile, s)]
            names += [f"{tile}_cluster{s}" for s in splits]
    return names


def sgemm_parts(variant: str) -> tuple[str, str, int]:
    """(family, tile, splits) of a stage-9 variant: ``128x128x8`` is ("regtiled", "128x128x8", 1),
    ``128x128x8_splitk2`` ("regtiled", ..., 2), ``pipelined_64x64x16_splitk4`` ("pipelined", ...),
    ``128x64x8t128_cluster2`` ("cluster", "128x64x8t128", 2)."""
    family = "pipelined" if variant.startswith("pipelined_") else "cluster" if "_cluster" in variant else "regtiled"
    tile, _, split = variant.removeprefix("pipelined_").partition("_cluster" if family == "cluster" else "_splitk")
    return family, tile, int(split) if split else 1


def sgemm_host_ms(variant: str) -> float:
    """The host's milliseconds to launch ``variant``: host_launch_ms per launch (a split-K product
    has SPLITK_LAUNCHES, a split in one cluster one). The tuner takes the longer of this and the
    GPU time, so that a split wins where it shortens a product the GPU was slow at (1024^3), not
    where the GPU would only have waited for the host's second launch (the MNIST step's small
    products)."""
    family, _, splits = sgemm_parts(variant)
    return (SPLITK_LAUNCHES if splits > 1 and family != "cluster" else 1) * host_launch_ms()


def sgemm_variant(c, a, b, g: Gemm) -> str:
    """Stage 9's kernel for this problem: the register-tiled winner (regtiled_tile) timed against
    the pipelined and split-K variants (sgemm_candidates), each at the longer of its GPU time
    and its launches' host time (sgemm_host_ms), the least kept for the shape. On the CPU
    emulator nothing more is timed: the register-tiled choice stands."""
    from .autotune import tuner
    from .driver import EMULATED

    key = tuning_key(a, b, g)
    choice = tuner.cached("matmul_sgemm", key)
    if choice is not None:
        return choice
    others = [] if EMULATED else sgemm_candidates(g)
    candidates = [regtiled_tile(c, a, b, g)] + [v for v in others if sgemm_parts(v)[0] != "cluster" or aligned16(a, b)]
    return tuner.pick(
        "matmul_sgemm", key, candidates,
        lambda v: matmul_sgemm(c, a, b, g, variant=v, timed=tuning_launches()), host_ms=sgemm_host_ms,
    )  # fmt: skip


def matmul_sgemm(c, a, b, g: Gemm, *, variant: str | None = None, timed: int = 0):
    """Stage 9's product: ``variant`` a register-tiled tile (``128x128x8``), its split-K
    (``128x128x8_splitk2``, or in one cluster ``128x64x8t128_cluster2``) or a pipelined one
    (``pipelined_128x128x16``, ``pipelined_64x64x16_splitk4``); None: the autotuned one."""
    family, tile, splits = sgemm_parts(variant or sgemm_variant(c, a, b, g))
    launcher = {"pipelined": matmul_pipelined, "regtiled": matmul_regtiled, "cluster": matmul_cluster_splitk}[family]
    return launcher(c, a, b, g, tile=tile, splits=splits, timed=timed)


def matmul_bias_act(c, a, b, bias, g: Gemm, relu: bool, *, tile: str | None = None, timed: int = 0):
    """Stage 10: the register-tiled product with ``+ bias`` (None: none) and ReLU fused into
    its epilogue, at the tile the autotuner chose for the plain product."""
    tile = tile or regtiled_tile(c, a, b, g)
    bm, bn, _, threads = REGTILED_TILES[tile]
    args = (c, a, b, bias, *g.args, int(relu))
    return _go(f"matmul_bias_act_{tile}", g.grid(bm, bn), (threads, 1, 1), args, timed, (g,))


def matmul_grad(c, a, b, g: Gemm, mask=None, colsum=None, *, tile: str | None = None, timed: int = 0):
    """The lean step's backward products (stage 11), at the tile the autotuner chose for the
    plain product: ``op(a) op(b)``, zeroed where ``mask`` (like c; None: none) is not > 0, and
    (``colsum`` not None, batch 1) the column sums of op(b) over K into ``colsum``."""
    if colsum is not None and g.batch != 1:
        raise ValueError(f"matmul_grad sums op(b)'s columns for one matrix, not a batch of {g.batch}")
    tile = tile or regtiled_tile(c, a, b, g)
    bm, bn, _, threads = REGTILED_TILES[tile]
    args = (c, a, b, mask, colsum, *g.args)
    return _go(f"matmul_grad_{tile}", g.grid(bm, bn), (threads, 1, 1), args, timed, (g,))


# One counter per output tile of a split-K launch that reduces in its last block (tiles that
# few are what split-K is for: splitk_counts splits only grids smaller than the SMs).
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
    from .memory import DeviceBuffer

    partial = DeviceBuffer(ITEMSIZE * g.batch * splits * g.M * g.N)  # the pool reuses it in stream order
    args = (c, partial.ptr, counters, a, b, bias, *g.args, splits, int(relu))
    kernel = f"matmul_pipelined_splitk_bias_act_{tile}"
    return _go(kernel, (*grid[:2], g.batch * splits), (threads, 1, 1), args, timed, (g,))


def linear_variant(c, a, b, bias, counters, g: Gemm, relu: bool) -> str:
    """The lean step's forward product: matmul_bias_act at its register tile, or a split-K
    bias+act variant (``pipelined_32x32x16_splitk8``), the fastest on this GPU, kept per shape.
    On the CPU emulator nothing is timed: the split that first covers the SMs of the smallest
    tile, if any, else the register tile."""
    from .autotune import fits, tuner
    from .driver import EMULATED

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
        lambda v: matmul_linear(c, a, b, bias, counters, g, relu, variant=v, timed=tuning_launches()),
    )  # fmt: skip


def matmul_linear(c, a, b, bias, counters, g: Gemm, relu: bool, *, variant: str | None = None, timed: int = 0):
    """The lean step's ``act(op(a) op(b) + bias)``: ``variant`` a register tile (matmul_bias_act)
    or ``pipelined_{tile}_splitk{n}`` (matmul_splitk_bias_act); None: linear_variant's."""
    variant = variant or linear_variant(c, a, b, bias, counters, g, relu)
    if variant in REGTILED_TILES:
        return matmul_bias_act(c, a, b, bias, g, relu, tile=variant, timed=timed)
    _, tile, split = variant.split("_")
    splits = int(split.removeprefix("splitk"))
    return matmul_splitk_bias_act(c, a, b, bias, counters, g, relu, tile=tile, splits=splits, timed=timed)


def tensor_cores_fit(arch: str) -> bool:
    """Whether a GPU of this architecture (``sm_75``, ``sm_90a``) has TF32 and BF16 tensor
    cores: compute capability 8.0 (Ampere) or newer. A T4 (sm_75) has FP16 ones only."""
    return int(re.sub(r"\D", "", arch)) >= 80


def require_tensor_cores(what: str) -> None:
    """Refuse, before anything compiles, a tensor-core kernel this GPU cannot run."""
    from .runtime import arch, device_name

    if not tensor_cores_fit(arch()):
        raise ValueError(
            f"{what} needs TF32 tensor cores (compute capability 8.0 or newer); {device_name()} is {arch()}: "
            "use stage 11 or below here"
        )


def matmul_tf32(c, a, b, g: Gemm, *, timed: int = 0):
    """Stage 12's fallback: WMMA fragments of TF32, 128 x 128 tiles of C."""
    require_tensor_cores("matmul_tf32")
    bm, bn, threads = MMA_TILE
    return _go("matmul_tf32", g.grid(bm, bn), (threads, 1, 1), (c, a, b, *g.args), timed, (g,))


def matmul_bf16(c, a, b, g: Gemm, *, timed: int = 0):
    """matmul_tf32's geometry with BF16 operands rounded on load (chapter 19's comparison)."""
    require_tensor_cores("matmul_bf16")
    bm, bn, threads = MMA_TILE
    return _go("matmul_bf16", g.grid(bm, bn), (threads, 1, 1), (c, a, b, *g.args), timed, (g,))


def tf32_async_fits(a, b, g: Gemm) -> bool:
    """cp.async copies whole aligned quads: rows and strides in quads, operands 16-byte aligned."""
    return g.quads() and aligned16(a, b)


def matmul_tf32_async(c, a, b, g: Gemm, *, kernel: str | Kernel = "matmul_tf32_async",
                      tile: tuple[int, int, int] = ASYNC_TILE, timed: int = 0):  # fmt: skip
    """Stage 12: mma.sync on TF32 fed by a cp.async pipeline. ``kernel`` and ``tile`` (BM, BN,
    threads) name a variant compiled with other ASYNC_ shapes (experiments.tf32_variants)."""
    require_tensor_cores("matmul_tf32_async")
    if not tf32_async_fits(a, b, g):
        raise ValueError(f"matmul_tf32_async copies whole aligned quads: {g} or its operands' alignment does not fit")
    bm, bn, threads = tile
    return _go(kernel, g.grid(bm, bn), (threads, 1, 1), (c, a, b, *g.args), timed, (g,))


def wgmma_fits(K: int, arch: str) -> bool:
    """Whether matmul_tf32_wgmma can run: a Hopper GPU, and K in whole 16-byte quads."""
    return K % 4 == 0 and arch == "sm_90"


def k_major_operands(a, b, g: Gemm, timed: int = 0):
    """A and B of ``g`` as the wgmma kernels read them, K-contiguous and 16-byte aligned (TF32
    wgmma cannot transpose an operand in shared memory, and TMA needs 16-byte starts): operands
    stored the other way round are transposed into scratch (a batch of A each, a broadcast
    operand once), a misaligned one copied. Returns (a, b, the problem as C = A B^T with their
    strides, the transposes' times, the scratch buffers, to keep alive until the launches are
    queued: the pool reuses them in stream order)."""
    from . import runtime
    from .memory import DeviceBuffer

    times, scratch = [], []

    def k_major(x, stored_k_major: bool, rows: int, stride: int):
        count = g.batch if stride else 1
        if stored_k_major and aligned16(x):
            return _arg(x), stride
        buffer = DeviceBuffer(ITEMSIZE * count * rows * g.K)
        scratch.append(buffer)
        if stored_k_major:
            runtime.copy_dtod(buffer.ptr, _arg(x), ITEMSIZE * count * rows * g.K)
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
    from . import runtime

    if not wgmma_fits(g.K, runtime.arch()):
        raise ValueError(f"matmul_tf32_wgmma needs a Hopper GPU and K % 4 == 0 (K={g.K}, GPU {runtime.arch()})")
    pa, pb, k, times, _scratch = k_major_operands(a, b, g, timed)
    bm, bn, threads = WGMMA_TILE
    args = (c, pa, pb, k.M, k.N, k.K, k.stride_a, k.stride_b)
    times.append(_go("matmul_tf32_wgmma", k.grid(bm, bn), (threads, 1, 1), args, timed, (g,)))
    return _total(times)


HOPPER_SHARED_BYTES = 227 * 1024  # the most shared memory a block of an H100/H200 may opt in to
_wgmma_tma_kernels: dict[tuple, tuple[Kernel, dict[str, int]]] = {}


def wgmma_tma_kernel(bn: int, stages: int | None, debug: bool, n_major: bool = False) -> tuple[Kernel, dict[str, int]]:
    """wgmma_tma.cu built for this Hopper GPU with WT_BN=bn and WT_STAGES=stages (None: the file's
    own), once per process, and its shape (its WT_ defines: BM, BN, BK, STAGES, THREADS, ...).
    ``debug`` makes a stuck wait print which barrier it was; ``n_major`` builds the kernel that
    reads B as stored for ``a @ b`` (WT_B_N_MAJOR: C^T = B^T A^T, B^T the register operand)."""
    if (bn, stages, debug, n_major) in _wgmma_tma_kernels:
        return _wgmma_tma_kernels[bn, stages, debug, n_major]
    from .kernel_table import KERNEL_DIR, SPECS, kernel_defines
    from .runtime import DriverKernel, compile_module

    shape = {**kernel_defines("wgmma_tma.cu", "WT"), "BN": bn, **({} if stages is None else {"STAGES": stages})}
    if bn not in (128, 256) or shape["STAGES"] < 1:
        raise ValueError(f"wgmma_tma.cu takes WT_BN 128 or 256 and at least one stage, not {bn} and {stages}")
    smem = shape["STAGES"] * (shape["BM"] + bn) * shape["BK"] * ITEMSIZE + 1024  # its WT_SMEM_BYTES
    if smem + 16 * shape["STAGES"] > HOPPER_SHARED_BYTES:  # + the static mbarriers
        raise ValueError(f"{shape['STAGES']} stages of {shape['BM']} x {bn} tiles need {smem} bytes of shared memory")
    defines = (f"#define WT_BN {bn}\n#define WT_STAGES {shape['STAGES']}\n#define WT_B_N_MAJOR {int(n_major)}\n"
               + ("#define WT_DEBUG\n" if debug else ""))  # fmt: skip
    source = defines + '#line 1 "wgmma_tma.cu"\n' + (KERNEL_DIR / "wgmma_tma.cu").read_text()
    module = compile_module(source, "wgmma_tma.cu", arch_specific=True)
    name = "matmul_tf32_wgmma_tma"
    kernel = DriverKernel(name, module, name, SPECS[name].signature, smem, source)  # its maps go by value
    _wgmma_tma_kernels[bn, stages, debug, n_major] = kernel, shape
    return kernel, shape


def matmul_tf32_wgmma_tma(c, a, b, g: Gemm, *, bn: int | None = None, as_stored: bool | None = None,
                          stages: int | None = None, blocks: int | None = None, tiles: int | None = None,
                          debug: bool = False, timed: int = 0):  # fmt: skip
    """Stage 12 from WGMMA_MIN_PRODUCT up: C = op(A) op(B) on Hopper by wgmma_tma.cu, TMA copies
    into a ring of mbarrier-synchronized stages, a producer and two consumer warpgroups, persistent
    blocks over grouped tiles 128 rows by ``bn`` columns. Its operands are read K-contiguous
    (k_major_operands transposes the others first), or, ``as_stored``, B of ``a @ b`` as it lies
    (the N-major build; b_reads_as_stored says where it can). ``bn`` None: the width and the way
    wgmma_tma_variant timed fastest for the shape; ``as_stored`` None with a width given: as
    stored wherever it can be. Its two tensor maps are passed by value (128 bytes each, ``128s``
    in its signature).
    Debugging: ``stages=1`` builds a single stage, ``blocks=1`` has one block walk every tile,
    ``tiles=n`` computes only the first n tiles of the raster, ``debug`` names a stuck barrier."""
    from . import runtime

    if runtime.arch() != "sm_90":
        raise ValueError(
            f"matmul_tf32_wgmma_tma needs a Hopper GPU (sm_90: TMA, wgmma, setmaxnreg); "
            f"{runtime.device_name()} is {runtime.arch()}"
        )
    if g.K % 4:
        raise ValueError(f"TMA strides are whole 16 bytes: K={g.K} is not a multiple of 4")
    if bn is None:
        if as_stored is not None:  # the tuner times widths and ways together
            raise ValueError("as_stored needs a tile width (bn): without one the tuner chooses both")
        bn, as_stored = wgmma_tma_variant(c, a, b, g)
    elif as_stored is None:
        as_stored = b_reads_as_stored(a, b, g)
    elif as_stored and not b_reads_as_stored(a, b, g):
        raise ValueError(f"B is read as stored only for a @ b with aligned operands and N % 4 == 0, not {g}")
    kernel, shape = wgmma_tma_kernel(bn, stages, debug, as_stored)
    if as_stored:
        pa, pb, k, times = _arg(a), _arg(b), g, []
    else:
        pa, pb, k, times, _scratch = k_major_operands(a, b, g, timed)
    maps, grid, rest = _wgmma_tma_plan(pa, pb, k, bn, stages, debug, blocks, tiles, as_stored)
    times.append(_go(kernel, grid, (shape["THREADS"], 1, 1), (*maps, c, *rest), timed, (g,)))
    return _total(times)


def b_reads_as_stored(a, b, g: Gemm) -> bool:
    """Whether wgmma_tma.cu's N-major build takes ``g`` without a transpose: ``a @ b`` (A
    K-contiguous, B N-contiguous), both 16-byte aligned with rows and matrices whole 16 bytes
    apart (TMA's rules)."""
    return (not g.ta and not g.tb and aligned16(a, b) and g.N % 4 == 0
            and g.stride_a % 4 == 0 and g.stride_b % 4 == 0)  # fmt: skip


WGMMA_TMA_WIDTHS = (256, 128)  # wgmma_tma.cu's WT_BN: the tile widths stage 12 chooses from
AS_STORED = " as stored"  # a candidate's suffix: the N-major build, B read without a transpose


def wgmma_tma_variant(c, a, b, g: Gemm) -> tuple[int, bool]:
    """Stage 12's tile width for this problem, and whether to read B as stored: 128 x 256 tiles,
    or 128 x 128 where the wide ones leave SMs idle (1024^3: 32 wide tiles for 132 SMs, 64 narrow
    ones); for ``a @ b``, each width with B transposed first and as stored (``"256 as stored"``).
    Each is timed on first use (autotune.tuner, transposes included), the fastest kept for the
    shape."""
    from .autotune import tuner

    ways = (AS_STORED, "") if b_reads_as_stored(a, b, g) else ("",)  # untuned (tuner off): the first
    variants = {f"{width}{way}": (width, way == AS_STORED) for way in ways for width in WGMMA_TMA_WIDTHS}
    choice = tuner.pick(
        "matmul_tf32_wgmma_tma", tuning_key(a, b, g), list(variants),
        lambda name: matmul_tf32_wgmma_tma(c, a, b, g, bn=variants[name][0], as_stored=variants[name][1],
                                           timed=tuning_launches()),
    )  # fmt: skip
    return variants[choice]


@functools.lru_cache(maxsize=64)  # the same operands, the same launch: a map only describes memory
def _wgmma_tma_plan(pa: int, pb: int, k: Gemm, bn: int, stages: int | None, debug: bool, blocks: int | None,
                    tiles: int | None, n_major: bool = False) -> tuple[tuple[bytes, bytes], tuple, tuple]:  # fmt: skip
    """wgmma_tma.cu's launch of C = A B^T (``k``, operands K-contiguous at ``pa`` and ``pb``), or
    with ``n_major`` of C = A B (B N-contiguous, read in boxes of 32 x 32): its two encoded tensor
    maps, its grid, and its arguments after C. Worked out once per problem and operands: at
    2048^3 the product takes tens of microseconds, as long as working this out took."""
    from . import tensor_map

    _, shape = wgmma_tma_kernel(bn, stages, debug, n_major)
    bm, bk = shape["BM"], shape["BK"]
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
    total = k.batch * _cdiv(k.M, tile_m) * _cdiv(k.N, tile_n)
    count = total if tiles is None else max(1, min(tiles, total))
    grid = (min(blocks or multiprocessors(), count), 1, 1)
    return tuple(maps), grid, (k.M, k.N, k.K, *batches, count)


# The matmul kernels by name, each launched as (c, a, b, gemm, timed=...): the benchmark's and the
# grader's table. A launcher that cannot take a problem raises ValueError saying why.
MATMULS = {
    "matmul_naive": matmul_naive,
    "matmul_transposed": matmul_transposed,
    "matmul_batched": matmul_batched,
    "matmul_tiled": matmul_tiled,
    "matmul_regtiled": matmul_regtiled,
    "matmul_sgemm": matmul_sgemm,
    **{f"matmul_pipelined_{t}": functools.partial(matmul_pipelined, tile=t) for t in PIPELINED_TILES},
    **{
        f"matmul_pipelined_splitk_{t}": functools.partial(matmul_splitk_covering, launcher=matmul_pipelined, tile=t)
        for t in ("128x128x16", "64x64x16", "32x32x16")
    },
    **{
        f"matmul_regtiled_splitk_{t}": functools.partial(matmul_splitk_covering, launcher=matmul_regtiled, tile=t)
        for t in REGTILED_SPLITK_TILES
    },
    "matmul_tf32": matmul_tf32,
    "matmul_bf16": matmul_bf16,
    "matmul_tf32_async": matmul_tf32_async,
    "matmul_tf32_wgmma": matmul_tf32_wgmma,
    "matmul_tf32_wgmma_tma": matmul_tf32_wgmma_tma,
}
