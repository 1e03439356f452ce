"""Exercise 21.1: one phase of a persistent kernel, the global-norm clip of stage 13.

The student's ``clip_global_norm`` runs on a co-resident grid (at most one block per
multiprocessor, launched by ``launchers.floor`` as chapter 21's barrier kernels are): each
chunk of 256 elements of each gradient writes its sum of squares into its own slot of
``partials``, a ``grid_barrier``, every block sums all slots in one fixed order, and every
gradient is scaled in place by the clip factor. The checks read the slots, the norm and the
gradients of grids of 1, 2, 3 and every multiprocessor's block, against float64, and hold
the norm and the gradients to the same bits on every grid and on a second run: that is what
one slot per chunk, summed in one order, buys (a slot per block, or a float ``atomicAdd``,
does not). The typical mistakes get a message of their own: a slot read before the barrier
(its poison gets into the norm), the tail of a gradient left out, a kernel written for a grid
that covers the data (one thread per element), atomics, no barrier at all.
"""

from __future__ import annotations

import math

import numpy as np

from .. import emulator
from . import hidden
from .exercises import Exercise
from .harness import POISON, Buffer, CountingFunction, student_kernel
from .verdict import BOUNDARY, FORBIDDEN, NO_WRITES, NOT_LAUNCHED, RACE, WRONG_RESULT, compare, fail

CHUNK = 256  # elements per slot of partials: one per thread of a block
EPS = 1e-6  # the clip factor's, as optim.cu's clip_scale
# gradient sizes and max_norm as a share of the true norm (above 1: nothing is clipped)
CASES = [
    ([1], 0.5),
    ([255, 256, 257], 0.5),
    ([1000, 3, 4097, 17], 2.0),
    ([784 * 64, 64, 64 * 10, 10], 0.3),  # a 784-64-10 model's weights and biases
]
LARGE = ([1_000_003, 4099], 0.5)  # on a GPU only: about 30 chunks for each of 132 blocks

NO_ATOMICS = (
    "use no atomics: a float atomicAdd sums in the order the blocks arrive, so the norm changes "
    "in its last bits from run to run (and a barrier of your own would hang: use grid_barrier); "
    "write each chunk's sum to its own slot and sum the slots in one fixed order"
)


def _slots(sizes: list[int]) -> list[tuple[int, int]]:
    """(gradient, chunk) of every slot of partials, in slot order."""
    return [(j, c) for j, n in enumerate(sizes) for c in range(-(-n // CHUNK))]


def _chunk_sums(grads: list[np.ndarray]) -> np.ndarray:
    out = []
    for g in grads:
        padded = np.zeros(-(-g.size // CHUNK) * CHUNK)
        padded[: g.size] = g.astype(np.float64) ** 2
        out.append(padded.reshape(-1, CHUNK).sum(axis=1))
    return np.concatenate(out)


def grid_sizes(most: int) -> list[int]:
    """The grids the checks launch: 1, 2, 3, 7 and every multiprocessor's block, as far as they fit."""
    return sorted({b for b in (1, 2, 3, 7) if b <= most} | {most})


def launch(k, grads: list[np.ndarray], max_norm: float, blocks: int):
    """One launch on guarded, poisoned buffers: (gradients, partials, norm, what)."""
    from ..cuda import launchers

    sizes = [g.size for g in grads]
    d_grads = [Buffer(g.size, g) for g in grads]
    table = Buffer(len(grads), np.array([b.ptr for b in d_grads], np.uint64), np.uint64)
    d_sizes = Buffer(len(grads), np.array(sizes, np.int32), np.int32)
    partials, norm = Buffer(len(_slots(sizes))), Buffer(1)
    barrier = Buffer(2, None, np.uint32)  # GridBarrier {count, generation}: zeroed
    launchers.floor(k, table, d_sizes, len(grads), partials, norm, float(max_norm), barrier, blocks=blocks)
    what = f"{blocks} block(s), gradients of {sizes} floats"
    got = [b.read(f"{what}: gradient {j}") for j, b in enumerate(d_grads)]
    return got, partials.read(f"{what}: partials"), float(norm.read(f"{what}: norm")[0]), what


def _check_partials(got: np.ndarray, grads: list[np.ndarray], blocks: int, what: str) -> None:
    sizes = [g.size for g in grads]
    slots = _slots(sizes)
    chunks = [-(-n // CHUNK) for n in sizes]
    tails = {s for s, (j, c) in enumerate(slots) if c == chunks[j] - 1 and sizes[j] % CHUNK}  # partial chunks
    beyond = {s for s, (_, c) in enumerate(slots) if c >= blocks}  # chunks a block reaches only by looping
    want = _chunk_sums(grads)
    unwritten = {int(s) for s in np.flatnonzero(got == POISON)}
    bad = unwritten | {int(s) for s in np.flatnonzero(~np.isclose(got, want, atol=1e-6, rtol=1e-5))}
    if not bad:
        return
    named = ", ".join(f"slot {s} (gradient {slots[s][0]}, chunk {slots[s][1]})" for s in sorted(bad)[:3])
    if unwritten and unwritten == beyond:
        fail(
            WRONG_RESULT,
            f"{what}: {named} of partials never written: with {blocks} block(s) for {len(slots)} chunks, each "
            "block takes chunks blockIdx.x, blockIdx.x + gridDim.x, ... of each gradient. The grid is at most one "
            "block per multiprocessor (all co-resident, so that the barrier can wait for every block), never one "
            "block per chunk: loop grid-stride",
        )
    if bad <= tails:
        fail(
            BOUNDARY,
            f"{what}: {named} of partials wrong or never written, the last chunk of a gradient whose size is not a "
            "multiple of 256: that chunk is partial (a gradient has (n + 255) / 256 chunks) and its threads past "
            "the end add 0",
        )
    if unwritten:
        fail(
            WRONG_RESULT,
            f"{what}: {named} of partials never written: one slot per chunk of 256, at first_j + c, whichever "
            "block computes it (a slot per block would make the norm depend on the grid)",
        )
    compare(got, want, f"{what}: partials, the chunks' sums of squares (slot first_j + c)", atol=1e-6, rtol=1e-5)


def _check_norm(norm: float, want: float, blocks: int, what: str) -> None:
    if norm == POISON:
        fail(WRONG_RESULT, f"{what}: the norm was never written (block 0's thread 0 writes *norm)")
    if not math.isfinite(norm) or norm < 0 or norm > 1e10 * max(want, 1e-10):
        early = " with more than one block" if blocks > 1 else ""
        fail(
            WRONG_RESULT,
            f"{what}: the norm is {norm:g}, want {want:g}: a slot of partials was read before it was written "
            f"(it still held the poison {POISON:g}){early}: every block must pass grid_barrier(barrier) after "
            "writing its slots and before summing any",
        )
    compare(np.array([norm]), np.array([want]), f"{what}: the norm", atol=1e-6, rtol=2e-5)


def _check_grads(got, grads, factor: float, blocks: int, what: str) -> None:
    for j, (g, out) in enumerate(zip(grads, got)):
        label = f"{what}: gradient {j} ({g.size} floats)"
        if factor != 1.0:
            unscaled = np.flatnonzero((out == g) & (g != 0))
            covered = blocks * CHUNK
            if unscaled.size and unscaled[0] >= covered and g.size > covered:
                fail(
                    WRONG_RESULT,
                    f"{label}: elements from {unscaled[0]} on were not scaled: {blocks} block(s) of 256 threads "
                    f"cover {covered} elements at once; the grid is at most one block per multiprocessor (all "
                    "co-resident, so that the barrier can wait for every block), not one thread per element: "
                    "loop grid-stride",
                )
            scaled = np.flatnonzero((out != g) & (g != 0))
            if unscaled.size and scaled.size:
                fail(
                    WRONG_RESULT,
                    f"{label}: {unscaled.size} element(s) were not scaled (the first at {unscaled[0]}) while the "
                    f"others were: the blocks that own them used a factor of 1, as a block does that sums the slots "
                    "before every block has written its own (a NaN norm is not > max_norm); sum the slots only "
                    "after grid_barrier(barrier)",
                )
        nonzero = g != 0
        ratios = out[nonzero].astype(np.float64) / g[nonzero]
        if (
            ratios.size
            and np.allclose(ratios, ratios[0], rtol=1e-5)
            and not math.isclose(ratios[0], factor, rel_tol=1e-4)
        ):
            fail(
                WRONG_RESULT,
                f"{label}: every element was multiplied by {ratios[0]:.6g}, want {factor:.6g}: "
                "factor = norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f",
            )
        want = g.astype(np.float64) * factor
        compare(out, want, label, atol=1e-9, rtol=2e-5, tail=(g.size % CHUNK or CHUNK) if g.size > CHUNK else None)


def _check_bits(got, grads, norm: float, max_norm: float, what: str) -> None:
    """The update is g * factor to the last bit, with the factor of the norm block 0 wrote: a block
    that summed the slots in an order of its own may get another norm, and scale by another factor."""
    f32 = np.float32
    if not f32(norm) > f32(max_norm):
        factor = f32(1)
    else:
        factor = f32(max_norm) / (f32(norm) + f32(EPS))
    for j, (g, out) in enumerate(zip(grads, got)):
        off = np.flatnonzero(out != g * factor)
        if off.size:
            fail(
                WRONG_RESULT,
                f"{what}: gradient {j}: {off.size} of {g.size} elements are not g * factor to the last bit, with "
                f"factor {factor!r} from the norm block 0 wrote ({norm!r}): every block must sum the slots in the "
                "same order, so that all get that norm, and multiply each element by the factor once",
                [f"index {i}: got {out[i]!r}, want {g[i] * factor!r}" for i in off[:3]],
            )


def _same_bits(runs: dict[str, tuple], what: str) -> None:
    """Every run of one case gives the same norm and gradients, to the last bit."""
    (first, (norm0, grads0)), *rest = runs.items()
    for name, (norm, grads) in rest:
        if np.float32(norm).tobytes() != np.float32(norm0).tobytes() or not all(
            np.array_equal(a, b) for a, b in zip(grads, grads0)
        ):
            again = name.startswith("again")
            fail(
                RACE if again else WRONG_RESULT,
                f"{what}: {first} and {name} give different bits (norms {norm0!r} and {norm!r}): "
                + (
                    "the same launch twice must agree; a sum in the order the blocks arrive (atomicAdd) or a slot "
                    "read before it is written does not"
                    if again
                    else "with one slot per chunk and every block summing all slots in one fixed order, the norm "
                    "and the update are the same for every grid"
                ),
            )


def check(ex: Exercise, source: str) -> list[str]:
    from ..cuda.runtime import multiprocessors
    from .kernel_build import compiled

    artifact = compiled(ex, source)  # what the kernel compiled to: comments and dead code are not in it
    if "grid_barrier" not in artifact.calls:
        fail(
            FORBIDDEN,
            "call grid_barrier(barrier) (grid_barrier.cuh) between writing the partial sums and reading them: "
            "without it a block sums slots that other blocks have not written yet",
        )
    if artifact.own_atomics:  # grid_barrier's own counter is the course header's, not yours
        fail(FORBIDDEN, f"{NO_ATOMICS} (your kernel compiles to {artifact.own_atomics[0]})")
    k = student_kernel(ex, source)
    counter = CountingFunction(k.function)
    k.function = counter
    rng = np.random.default_rng()
    most = multiprocessors()
    grids = grid_sizes(most)
    # One chunk more than the largest grid: block 0 computes two, every other block one, and every
    # block has elements to scale. A block that reads the slots before the barrier reaches block 0's
    # second slot while block 0 still computes it: on a GPU a race that block 0 loses by a whole
    # chunk's work, shown as the poisoned slot's NaN in that block's factor; on the emulator, always.
    skewed = ([CHUNK * most + 3], 0.5)
    # hidden: gradients of sizes drawn from the run's seed, one past the largest fixed one
    drawn = ([*hidden.between("sizes", 1, 5000, 2), *hidden.sizes("largest", 784 * 64, 2_000_000, 1)], 0.4)
    cases = [*CASES, skewed, drawn] + ([] if emulator.selected() else [LARGE])
    launches = 0
    for sizes, share in cases:
        grads = [(rng.standard_normal(n) * rng.uniform(0.1, 3)).astype(np.float32) for n in sizes]
        want_norm = float(np.sqrt(_chunk_sums(grads).sum()))
        max_norm = float(np.float32(share * want_norm))
        factor = max_norm / (want_norm + EPS) if want_norm > max_norm else 1.0
        runs = {}
        for blocks in [*grids, most]:
            got, partials, norm, what = launch(k, grads, max_norm, blocks)
            launches += 1
            if norm == POISON and (partials == POISON).all() and all(np.array_equal(a, b) for a, b in zip(got, grads)):
                fail(NO_WRITES, f"{what}: nothing was written (partials, norm and gradients as they were)")
            _check_partials(partials, grads, blocks, what)
            _check_norm(norm, want_norm, blocks, what)
            _check_grads(got, grads, factor, blocks, what)
            _check_bits(got, grads, norm, max_norm, what)
            runs[f"again {blocks} blocks" if f"{blocks} blocks" in runs else f"{blocks} blocks"] = (norm, got)
        _same_bits(runs, f"gradients of {sizes} floats")
    if counter.calls != launches:
        fail(NOT_LAUNCHED, "the kernel was not launched")
    return [
        f"gradients of {[s for s, _ in cases if s is not drawn[0]]} floats and a hidden set, clipped and not, "
        f"on grids of {grids} blocks "
        "(every multiprocessor's block twice): partial sums, norm and update match float64",
        "the norm and the update are the same bits on every grid and on a second run; nothing written out of bounds",
    ]


def small_launch(ex: Exercise, source: str) -> None:
    """Small launches for compute-sanitizer and the emulator; no comparison. Under compute-sanitizer
    one block (whether its tools keep the blocks of a launch co-resident is not relied on: a grid
    barrier would wait forever for a block held back), on the emulator one and two."""
    import minitorch_cuda as mt

    k, rng = student_kernel(ex, source), np.random.default_rng()
    grads = [rng.standard_normal(n).astype(np.float32) for n in (300, 7)]
    for blocks in (1, 2) if emulator.selected() else (1,):
        launch(k, grads, 0.5, blocks)
    mt.synchronize()


def speed_problem(ex: Exercise, source: str, rng, largest: int):
    """A 784-256-10 model's gradients in one launch on every multiprocessor, beside stage 11's two launches
    (multi_sumsq, then multi_clip_scale), the largest gradient at most ``largest`` floats:
    (what, bytes, built-in, yours)."""
    from ..cuda import launchers
    from ..cuda.array import DeviceArray
    from ..cuda.backend import from_numpy
    from ..cuda.runtime import multiprocessors

    sizes = [min(784 * 256, largest), 256, 256 * 10, 10]
    grads = [from_numpy(rng.standard_normal(n, dtype=np.float32)) for n in sizes]
    chunks = launchers.multi_chunks(sizes)
    partials = DeviceArray.empty((chunks * len(sizes),))
    max_norm = 1e6  # nothing clipped: every launch leaves the gradients as they are

    def builtin(timed: int = 0):  # timed: milliseconds per pair, each kernel timed alone as the launchers time
        first = launchers.multi_sumsq(partials, grads, sizes, chunks, timed=timed)
        second = launchers.multi_clip_scale(partials, chunks * len(sizes), max_norm, grads, sizes, chunks, timed=timed)
        return first + second if timed else None

    k = student_kernel(ex, source)
    table = Buffer(len(sizes), np.array([g.ptr for g in grads], np.uint64), np.uint64)
    d_sizes = Buffer(len(sizes), np.array(sizes, np.int32), np.int32)
    slots, norm, barrier = Buffer(len(_slots(sizes))), Buffer(1), Buffer(2, None, np.uint32)
    blocks = multiprocessors()

    def yours(timed: int = 0):
        return launchers.floor(
            k, table, d_sizes, len(sizes), slots, norm, max_norm, barrier, blocks=blocks, timed=timed
        )

    what = (
        f"gradients of {sizes} floats (no built-in {ex.kernel}: "
        "stage 11's multi_sumsq and multi_clip_scale, two launches, do the same work)"
    )
    return what, 12 * sum(sizes), builtin, yours
