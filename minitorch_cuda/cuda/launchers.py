"""The launch contracts of every kernel but the matmuls (``matmul_launchers``): grid, block,
dynamic shared memory and argument order.

One public launcher per kernel family. The backend's ops (``ops_*``) choose a launcher by stage;
the benchmark, the grader, the sanitizer, the experiments and the tests call these same launchers,
so what they launch is what the backend launches. Launchers read no stage and choose nothing: each
works out its launch from its arguments and hands it to ``launch_core.dispatch`` (the registry's
kernel for the name, pointers from arrays, ``timed=``: see ``launch_core``).
"""

from __future__ import annotations

import functools

from .kernel_table import MULTI_TENSOR_SLOTS, PERSISTENT, SPECS, TRANSPOSE
from .launch_core import as_arg, cdiv, dispatch, resolve
from .runtime import Kernel, multiprocessors

BLOCK = 256  # threads per block of the one-thread-per-element kernels
XENT_THREADS = 512  # fused.cu: softmax_xent_fused's __launch_bounds__
BLOCK_ROW_COLUMNS = 512 * 32  # vectorized.cu: softmax_rows_block, 512 threads of 32 values at most


# --- one thread per element ----------------------------------------------------------------


def elementwise(kernel: str | Kernel, n: int, *args, timed: int = 0) -> float | None:
    """The one-thread-per-element kernels (elementwise ops, strided copy, gathers, init,
    axis sums, clipping scale, optimizer steps): ceil(n / 256) blocks of 256 threads."""
    return dispatch(kernel, (cdiv(n, BLOCK), 1, 1), (BLOCK, 1, 1), args, timed, (n,))


def vec4_blocks(n: int) -> int:
    """Blocks of the grid-stride float4 kernels: one thread per float4, at most 8 per SM."""
    return max(1, min(cdiv(n // 4, BLOCK), 8 * multiprocessors()))


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
    return dispatch(kernel, (blocks, 1, 1), (threads, 1, 1), args, timed, (n,))


# --- reductions and softmax: one block per row ------------------------------------------------


def reduce_block(length: int) -> int:
    """Threads of a block-reduction kernel: a power of two in 64..1024."""
    return min(1024, max(64, 1 << (max(length, 1) - 1).bit_length()))


def sum_rows(kernel: str, out, x, rows: int, cols: int, scale: float, *, timed: int = 0):
    """``sum_rows_volatile`` / ``sum_rows_shuffle``: out[r] = scale * sum of row r."""
    return dispatch(kernel, (rows, 1, 1), (reduce_block(cols), 1, 1), (out, x, rows, cols, float(scale)), timed)


def sumsq(kernel: str, out, x, n: int, *, timed: int = 0):
    """``sumsq_volatile`` / ``sumsq_shuffle``: one block of 1024 threads sums x[i]^2 into *out."""
    return dispatch(kernel, (1, 1, 1), (1024, 1, 1), (out, x, n), timed, (n,))


def last_block_grid(n: int) -> int:
    """Blocks of ``sumsq_last_block``: at least 4 values a thread, at most 128 partials."""
    return max(1, min(cdiv(n, 4 * BLOCK), 128))


def sumsq_last_block(out, partials, count, x, n: int, blocks: int, *, timed: int = 0):
    """``sumsq_last_block``: ``blocks`` blocks of 256 threads each store a partial sum of x[i]^2
    in ``partials`` (``blocks`` floats); the last to finish writes their total to *out and puts
    the ``count`` it counted on (one unsigned int, 0 before the launch) back to 0."""
    return dispatch("sumsq_last_block", (blocks, 1, 1), (BLOCK, 1, 1), (out, partials, count, x, n), timed, (n,))


def block_row_threads(cols: int) -> int:
    """Threads for softmax_rows_block: 32 columns each, rounded up to whole warps."""
    return 32 * cdiv(cols, 32 * 32)


def softmax_rows(kernel: str, out, x, rows: int, cols: int, *, timed: int = 0):
    """Every softmax over rows: ``softmax_rows_{volatile,shuffle}`` (a block per row, three
    passes), ``_warp`` (a warp per row held in registers, cols <= 1024), ``_block`` (a block per
    row in registers, cols <= BLOCK_ROW_COLUMNS), ``_online`` (one pass for max and sum)."""
    variant = kernel.rsplit("_", 1)[1]
    if variant == "warp":
        if cols > 1024:
            raise ValueError(f"softmax_rows_warp holds a row of at most 1024 columns in registers, not {cols}")
        grid, threads = (cdiv(rows, 8), 1, 1), 256  # 8 warps, one row each
    elif variant == "block":
        if cols > BLOCK_ROW_COLUMNS:
            raise ValueError(f"softmax_rows_block holds at most {BLOCK_ROW_COLUMNS} columns, not {cols}")
        grid, threads = (rows, 1, 1), block_row_threads(cols)
    elif variant == "online":
        grid, threads = (rows, 1, 1), 256
    else:
        grid, threads = (rows, 1, 1), reduce_block(cols)
    return dispatch(kernel, grid, (threads, 1, 1), (out, x, rows, cols), timed, (rows, cols))


def softmax_xent(kernel: str, probs, row_loss, logits, target, rows: int, cols: int, *, timed: int = 0):
    """``softmax_xent_{volatile,shuffle}``: a block per row writes its probabilities and loss."""
    args = (probs, row_loss, logits, target, rows, cols)
    return dispatch(kernel, (rows, 1, 1), (reduce_block(cols), 1, 1), args, timed, (rows, cols))


def softmax_xent_fused(probs, loss, logits, target, rows: int, cols: int, scale: float, *, timed: int = 0):
    """One block: the probabilities and ``scale`` times the summed loss (a warp per row)."""
    block = (min(XENT_THREADS, 32 * rows), 1, 1)
    args = (probs, loss, logits, target, rows, cols, float(scale))
    return dispatch("softmax_xent_fused", (1, 1, 1), block, args, timed, (rows, cols))


def softmax_xent_grad(grad, loss, logits, target, rows: int, cols: int, scale: float, *, timed: int = 0):
    """softmax_xent_fused's launch, writing ``scale * (softmax - target)`` instead of the probabilities."""
    block = (min(XENT_THREADS, 32 * rows), 1, 1)
    args = (grad, loss, logits, target, rows, cols, float(scale))
    return dispatch("softmax_xent_grad", (1, 1, 1), block, args, timed, (rows, cols))


# --- layout ------------------------------------------------------------------------------------


def transpose(out, x, rows: int, cols: int, stride: int, count: int = 1, *, timed: int = 0):
    """``count`` rows x cols matrices, ``stride`` floats apart, transposed into ``out``: square
    tiles staged in shared memory, a block of 32 x ROWS threads each (layout.cu's TR_ shape)."""
    tile = TRANSPOSE["TILE"]
    grid = (cdiv(cols, tile), cdiv(rows, tile), count)
    block = (32, TRANSPOSE["ROWS"], 1)
    return dispatch("transpose_2d", grid, block, (out, x, rows, cols, stride), timed, (count, rows, cols))


# --- multi-tensor apply: up to MULTI_TENSOR_SLOTS tensors a launch ------------------------------


def multi_chunks(sizes: list[int]) -> int:
    """Blocks per tensor: enough for the largest at 4 elements a thread, at most 128."""
    return max(1, min(128, cdiv(max(sizes), 4 * BLOCK)))


def _slots(arrays: list, what) -> list:
    if len(arrays) > MULTI_TENSOR_SLOTS:
        raise ValueError(f"a multi-tensor launch takes at most {MULTI_TENSOR_SLOTS} tensors, not {len(arrays)}")
    return [what(x) for x in arrays] + [0] * (MULTI_TENSOR_SLOTS - len(arrays))


def _multi(kernel: str, head: tuple, tensors: list[list], sizes: list[int], chunks: int, timed: int):
    args = (*head, *(p for group in tensors for p in _slots(group, as_arg)), *_slots(sizes, int))
    return dispatch(kernel, (chunks, len(sizes), 1), (BLOCK, 1, 1), args, timed, tuple(sizes))


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
    args = (*head, *(p for group in (params, grads, states) for p in _slots(group, as_arg)), *_slots(sizes, int))
    return dispatch("multi_clip_rmsprop_grid", (blocks, 1, 1), (BLOCK, 1, 1), args, timed, tuple(sizes))


# --- the whole training step: one persistent kernel ------------------------------------------


def fetch_batch(cursor, x, target, arrived, *, timed: int = 0):
    """Stage 11's lean graph: copy the rows where ``cursor`` (a BatchCursor) points into ``x``
    and ``target`` (the graph's static inputs, whose sizes say how many), then move it past
    them. ``arrived``: one zeroed unsigned int, left zeroed. A block per multiprocessor."""
    args = (cursor, x, target, x.size, target.size, arrived)
    return dispatch("fetch_batch", (multiprocessors(), 1, 1), (BLOCK, 1, 1), args, timed, (x.size, target.size))


def persistent_step(
    layers, n_layers: int, row_from: int, batch, rows: int, row_loss, partials, n_partials: int, loss, report: int,
    barrier, rmsprop: bool, lr: float, decay: float, eps: float, max_norm: float, *, blocks: int = 0, timed: int = 0,
    kernel: str | Kernel = "persistent_step", phase_ns=None, shared_bytes: int = 0,
):  # fmt: skip
    """Stage 13: the training step of the MLP that the table ``layers`` describes (``row_from``: the
    first layer of its rows phase; the layers before it are computed in tiles), one block of
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
    if not 1 <= row_from <= max(1, n_layers - 1):  # the last layer's loss is the rows phase's
        raise ValueError(f"persistent_step's rows phase starts at a layer from 1 to {n_layers - 1}, not {row_from}")
    args = (
        layers, n_layers, row_from, batch, rows, row_loss, partials, n_partials, loss, report, barrier,
        int(rmsprop), float(lr), float(decay), float(eps), float(max_norm),
    )  # fmt: skip
    args += () if phase_ns is None else (phase_ns,)
    kernel = _sized(resolve(kernel), shared_bytes) if shared_bytes else kernel
    return dispatch(kernel, (blocks, 1, 1), (PERSISTENT["THREADS"], 1, 1), args, timed, (rows,))


def persistent_step_staging_bytes() -> int:
    """The most dynamic shared memory persistent_step can have on this GPU: room for the later
    layers' weights that its rows phase reads."""
    return resolve("persistent_step").dynamic_shared_limit()


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
        return dispatch(kernel, (1, 1, 1), (1, 1, 1), args, timed)
    most = multiprocessors()
    if not 1 <= blocks <= most:
        raise ValueError(f"{name} needs 1..{most} blocks (one per multiprocessor at most), not {blocks}")
    return dispatch(kernel, (blocks, 1, 1), (PERSISTENT["THREADS"], 1, 1), args, timed, (blocks,))
