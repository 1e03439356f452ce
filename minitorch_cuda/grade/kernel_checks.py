"""Checks of the CUDA kernel exercises (they need a GPU).

Every check does two things with the student's source:

1. launches the kernel directly through the backend's own launcher
   (``cuda/launchers.py``, ``cuda/matmul_launchers.py``: the grid, block and argument order
   the backend uses), into output buffers that are poisoned and padded with guard zones on
   both sides, on fresh random inputs of awkward sizes (not multiples of the
   block or tile): an empty kernel leaves the poison, an off-by-one writes into
   a guard zone or leaves the tail unwritten;
2. runs the framework op under ``mt.override`` and checks both the result and
   that the overriding kernel was really launched.

On a GPU a passed check ends with the student's GB/s or GFLOP/s beside the built-in
kernel's (``speed``: feedback, never part of the verdict).
"""

from __future__ import annotations

import math

import numpy as np

from .. import emulator
from ..cuda.kernel_table import matmul_stage
from . import access_checks, exercises, grid_phase, hidden
from .artifact import Artifact
from .exercises import Exercise, check_entry
from .harness import GUARD, POISON, Buffer, CountingFunction, Override, student_kernel  # noqa: F401
from .kernel_build import compiled
from .verdict import (
    BOUNDARY,
    FORBIDDEN,
    HOST_SIDE,
    NO_WRITES,
    NOT_A_KERNEL,
    NOT_LAUNCHED,
    RACE,
    SIGNATURE,
    SYNCS,
    WRONG_RESULT,
    compare,
    fail,
)


def static_checks(ex: Exercise, source) -> Artifact:
    """The submission must be CUDA C that compiles (``kernel_build``: against the course's headers, in
    the sandbox) to an ``extern "C" __global__`` entry of the right name and parameters; its artifact."""
    if not isinstance(source, str):
        fail(HOST_SIDE, f"expected the kernel as a string of CUDA C, got a {type(source).__name__}")
    artifact = compiled(ex, source)
    try:
        check_entry(ex, artifact)
    except ValueError as exc:
        fail(NOT_A_KERNEL, str(exc))
    except TypeError as exc:
        fail(SIGNATURE, str(exc))
    return artifact


def _rng() -> np.random.Generator:
    return np.random.default_rng()


def _tail(n: int, block: int) -> int:
    """Elements in the last block of a one-thread-per-element grid."""
    return n % block or block


# --- 1.1 scale (standalone PyCUDA) ---------------------------------------------------


def check_scale(ex: Exercise, source: str) -> list[str]:
    from ..cuda import launchers

    kernel = student_kernel(ex, source)
    counter = CountingFunction(kernel.function)
    kernel.function = counter
    rng = _rng()
    sizes = [1, 255, 256, 257, 100_003]
    for n in sizes + hidden.sizes("n", 100_003, 4_000_000):
        x = rng.standard_normal(n).astype(np.float32)
        alpha = np.float32(rng.uniform(-3, 3))
        want = alpha * x
        out, inp = Buffer(n), Buffer(n, x)
        launchers.elementwise(kernel, n, out, inp, float(alpha), n)  # the elementwise ops' 256-thread blocks
        compare(out.read(f"n={n}"), want, f"scale, n={n}", poison=POISON, tail=_tail(n, launchers.BLOCK))
        if not np.array_equal(inp.read("the input"), x):
            fail(WRONG_RESULT, "the kernel modified its input")
    if counter.calls != len(sizes) + 2:
        fail(NOT_LAUNCHED, "the kernel was not launched")
    return [
        f"out = alpha * in for n in {sizes} and 2 hidden sizes, 256 threads per block, nothing written out of bounds"
    ]


# --- 14.2 bias and ReLU after a library GEMM (standalone, one launch) ------------------------


def check_bias_relu(ex: Exercise, source: str) -> list[str]:
    """out = max(c + bias[col], 0) over a row-major M x N matrix, out-of-place and in place (out == c),
    launched as the backend launches its elementwise kernels: one thread per element, 256 per block."""
    from ..cuda import launchers

    kernel = student_kernel(ex, source)
    counter = CountingFunction(kernel.function)
    kernel.function = counter
    rng = _rng()
    shapes = [(1, 1), (64, 256), (64, 10), (7, 33), (33, 7), (3, 1000), (257, 129)]
    hidden_shapes = [(hidden.sizes("M", 257, 4000, 1, 2)[0], hidden.between("N", 130, 1100, 1)[0])]
    in_place = [(65, 31), (1, 300)]
    for M, N in shapes + hidden_shapes + in_place:
        c = (rng.standard_normal((M, N)) * 2).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        want = np.maximum(c.astype(np.float64) + bias, 0)
        d_c, d_bias = Buffer(M * N, c), Buffer(N, bias)
        alias = (M, N) in in_place
        out = d_c if alias else Buffer(M * N)
        launchers.elementwise(kernel, M * N, out, d_c, d_bias, M, N)
        what = f"bias_relu {M} x {N}" + (" in place (out == c)" if alias else "")
        got = out.read(what).reshape(M, N)
        tail = _tail(M * N, launchers.BLOCK)
        compare(got, want, what, atol=1e-7, rtol=1e-6, poison=None if alias else POISON, tail=tail)
        if not alias and not np.array_equal(d_c.read("c"), c.ravel()):
            fail(WRONG_RESULT, f"{what}: the kernel modified c (write only out)")
        if not np.array_equal(d_bias.read("bias"), bias):
            fail(WRONG_RESULT, f"{what}: the kernel modified bias")
    if counter.calls != len(shapes) + len(hidden_shapes) + len(in_place):
        fail(NOT_LAUNCHED, "the kernel was not launched")
    return [
        f"out = max(c + bias[col], 0) for (M, N) in {shapes} and a hidden shape, 256 threads per block, "
        "nothing written out of bounds",
        f"in place (out == c) for {in_place}; c and bias left unchanged out-of-place",
    ]


# --- elementwise -------------------------------------------------------------------------


def _check_unary(ex: Exercise, source: str, inputs, reference, op: str, atol: float, rtol: float) -> list[str]:
    import minitorch_cuda as mt

    from ..cuda import launchers

    rng = _rng()
    sizes = [1, 255, 256, 257, 10_013]
    with Override(ex.kernel, source) as ov:
        for n in sizes + hidden.sizes("n", 10_013, 4_000_000):
            x = inputs(rng, n)
            want = reference(x.astype(np.float64))
            out, inp = Buffer(n), Buffer(n, x)
            launchers.elementwise(ex.kernel, n, out, inp, n)
            got = out.read(f"{ex.kernel}, n={n}")
            compare(
                got,
                want,
                f"{ex.kernel}, n={n}",
                atol=atol,
                rtol=rtol,
                poison=POISON,
                tail=_tail(n, launchers.BLOCK),
            )
        x = inputs(rng, 64 * 129).reshape(64, 129)
        want = reference(x.astype(np.float64))
        before = ov.counter.calls
        y = getattr(mt.tensor(x.copy(), device="cuda"), op)().numpy()
        if ov.counter.calls == before:
            fail(NOT_LAUNCHED, f"x.{op}() never launched your kernel")
        compare(y, want, f"x.{op}() on a (64, 129) tensor", atol=atol, rtol=rtol)
    return [
        f"{ex.kernel} for n in {sizes} and 2 hidden sizes (guarded, poisoned output)",
        f"tensor.{op}() runs your kernel",
    ]


def _stable_sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _sigmoid_inputs(rng, n):
    x = rng.standard_normal(n) * 6
    extremes = np.array([-1e4, 1e4, -100.0, 100.0, -88.5, 88.5, 0.0, -0.0, -200.0, 200.0])
    x[: min(n, extremes.size)] = extremes[: min(n, extremes.size)]
    rng.shuffle(x)
    return x.astype(np.float32)


# --- 15.1 16-byte loads, grid-stride loop, scalar tail --------------------------------------


def check_relu_vec4(ex: Exercise, source: str) -> list[str]:
    import minitorch_cuda as mt

    from ..cuda import launchers

    if not compiled(ex, source).moves_16_bytes:
        fail(FORBIDDEN, "move 16 bytes per load and per store: read and write float4 (your compiled kernel does not)")
    rng = _rng()
    sizes = [5, 1023, 1, 3, 4, 1025, 4 * launchers.BLOCK + 3, 100_003]  # a float4 and a tail first
    hidden_sizes = hidden.sizes("n", 2**20 + 2, 16_000_000)  # past the fixed sizes, on the capped grid
    small = [(100_003, (1, 256)), (100_001, (7, 128)), (2**20 + 2, (3, 256))]  # fewer threads than float4s
    with Override(ex.kernel, source) as ov:
        for n, undersized in [(n, None) for n in sizes + hidden_sizes] + small:
            x = (rng.standard_normal(n) * 3).astype(np.float32)
            want = np.maximum(x, 0)
            out, inp = Buffer(n), Buffer(n, x)
            launchers.elementwise_vec4(ex.kernel, n, out, inp, n, undersized=undersized)
            blocks, threads = undersized or (launchers.vec4_blocks(n), launchers.BLOCK)
            what = f"ew_relu_vec4, n={n}, {blocks} blocks of {threads}"
            got = out.read(what)
            unwritten = int((got[: 4 * (n // 4)] == POISON).sum())
            if undersized and 0 < unwritten < 4 * (n // 4):
                fail(
                    WRONG_RESULT,
                    f"{what}: {unwritten} values never written; with fewer threads than float4s each "
                    "thread must loop, with a stride of gridDim.x * blockDim.x float4s",
                )
            compare(got, want, what, atol=0, rtol=0, poison=POISON, tail=n % 4 or None)
        x = (rng.standard_normal((37, 129)) * 3).astype(np.float32)
        want = np.maximum(x, 0)
        with mt.use_stage(9):
            y = mt.tensor(x.copy(), device="cuda").relu().numpy()
        ov.expect_launched("x.relu() at stage 9")
        compare(y, want, "x.relu() on a (37, 129) tensor at stage 9", atol=0, rtol=0)
    return [
        f"n in {sizes} and 2 hidden sizes with the backend's grid, and grids too small to cover n in one pass: {small}"
        " (n, (blocks, threads))",
        "x.relu() at stage 9 runs your kernel",
    ]


# --- reductions: softmax, sum of squares, row sums, softmax with cross-entropy -----------


def _own_reduction(ex: Exercise, source: str) -> None:
    """The reductions' rule: block_reduce.cuh (in the course's headers for 21.1) is their answer key."""
    if "block_reduce.cuh" in compiled(ex, source).headers:
        fail(
            FORBIDDEN,
            "your kernel includes the course's `block_reduce.cuh`, which holds the answer: "
            "write the reduction yourself",
        )


_SHAPES_ROWS = [(64, 10), (7, 1000), (3, 3001), (5, 1), (2, 65), (1, 4096)]


def _hidden_rows() -> list[tuple[int, int]]:
    """(rows, cols) past the fixed shapes: rows longer than 4096 (more values per thread than the
    fixed shapes give a block of 1024), and many rows of an odd length."""
    long_rows = [(r, c) for r, c in zip(hidden.between("rows", 2, 6, 2), hidden.sizes("cols", 4096, 60_000, 2, 32))]
    return long_rows + [(hidden.sizes("many rows", 64, 3000, 1, 2)[0], hidden.between("short cols", 11, 999, 1)[0])]


def check_softmax(ex: Exercise, source: str) -> list[str]:
    import minitorch_cuda as mt

    from ..cuda import launchers

    _own_reduction(ex, source)
    rng = _rng()
    with Override(ex.kernel, source) as ov:
        for rows, cols in _SHAPES_ROWS + _hidden_rows():
            x = (rng.standard_normal((rows, cols)) * 20 + rng.uniform(-80, 80, (rows, 1))).astype(np.float32)
            z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
            want = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
            runs = []
            for _ in range(2):
                out, inp = Buffer(x.size), Buffer(x.size, x)
                launchers.softmax_rows(ex.kernel, out, inp, rows, cols)
                runs.append(out.read(f"softmax {rows}x{cols}").reshape(rows, cols))
            compare(runs[0], want, f"softmax {rows}x{cols}", atol=1e-6, rtol=1e-4, poison=POISON)
            if not np.array_equal(runs[0], runs[1]):
                fail(RACE, f"softmax {rows}x{cols}: two runs on the same input disagree (a missing __syncthreads?)")
        x = rng.standard_normal((64, 10)).astype(np.float32) * 5
        z = x - x.max(axis=1, keepdims=True)
        want = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        with mt.use_stage(7):
            y = mt.tensor(x.copy(), device="cuda").softmax().numpy()
        ov.expect_launched("x.softmax() at stage 7")
        compare(y, want, "x.softmax()", atol=1e-6, rtol=1e-4)
    return [
        f"softmax rows for shapes {_SHAPES_ROWS} and 3 hidden ones, inputs up to +-150 (no overflow), twice each",
        "x.softmax() at stage 7 runs your kernel",
    ]


def _check_clip_gradients(rng, ov, shapes, what: str, rtol: float) -> None:
    """The framework's device clipping (stage 7) with the overridden kernel, against the host's."""
    import minitorch_cuda as mt

    from ..cuda import backend

    grads_host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads_host))
    with mt.use_stage(7):
        grads = [backend.from_numpy(g.copy()) for g in grads_host]
        backend.clip_gradients(grads, 1.0)
        clipped = [backend.to_numpy(g) for g in grads]
    ov.expect_launched("clip_gradients at stage 7")
    for g, h in zip(clipped, grads_host):
        compare(g, h / (norm + 1e-6), f"clip_gradients with {what}", atol=1e-7, rtol=rtol)


def check_sumsq(ex: Exercise, source: str) -> list[str]:
    from ..cuda import launchers

    _own_reduction(ex, source)
    rng = _rng()
    sizes = [1, 1000, 1024, 1025, 200_003]
    # past the fixed sizes and the largest gradient the exercise claims (784 x 256), on the one block
    hidden_sizes = hidden.sizes("n", 784 * 256, 4_000_000, 2, 1024)
    with Override(ex.kernel, source) as ov:
        for n in sizes + hidden_sizes:
            x = rng.standard_normal(n).astype(np.float32)
            want = np.array([np.sum(x.astype(np.float64) ** 2)])
            results = []
            for _ in range(3):
                out, inp = Buffer(1), Buffer(n, x)
                launchers.sumsq(ex.kernel, out, inp, n)
                results.append(out.read(f"sumsq n={n}"))
            if any(not np.array_equal(r, results[0]) for r in results):
                fail(RACE, f"sumsq n={n}: three runs on one input gave {[float(r[0]) for r in results]}")
            compare(results[0], want, f"sumsq n={n}", atol=1e-3, rtol=1e-4, poison=POISON)
        _check_clip_gradients(rng, ov, [(784, 256), (256,), (256, 10), (10,)], "your sumsq", rtol=1e-3)
        x = Buffer(784 * 256, rng.standard_normal(784 * 256).astype(np.float32))
        accesses = access_checks.traced(ov, lambda: launchers.sumsq(ex.kernel, Buffer(1), x, 784 * 256))
    return [
        f"sum of squares for n in {sizes} and {len(hidden_sizes)} hidden sizes with one block of 1024 threads, "
        "three runs each",
        "clip_gradients at stage 7 runs your kernel and clips to norm 1",
        *access_checks.numbers(accesses, "n = 784 x 256 on the CPU emulator"),
    ]


def check_sum_rows(ex: Exercise, source: str) -> list[str]:
    import minitorch_cuda as mt

    from ..cuda import launchers

    _own_reduction(ex, source)
    if not compiled(ex, source).uses_shuffle:
        fail(
            FORBIDDEN,
            "reduce within each warp with __shfl_down_sync (or __shfl_xor_sync): your compiled kernel has none",
        )
    rng = _rng()
    with Override(ex.kernel, source) as ov:
        for rows, cols in _SHAPES_ROWS + _hidden_rows():
            x = rng.standard_normal((rows, cols)).astype(np.float32)
            scale = float(rng.uniform(0.5, 2.0))
            want = scale * x.astype(np.float64).sum(axis=1)
            runs = []
            for _ in range(2):
                out, inp = Buffer(rows), Buffer(x.size, x)
                launchers.sum_rows(ex.kernel, out, inp, rows, cols, scale)
                runs.append(out.read(f"row sums {rows}x{cols}"))
            compare(runs[0], want, f"row sums {rows}x{cols}", atol=1e-4, rtol=1e-4, poison=POISON)
            if not np.array_equal(runs[0], runs[1]):
                fail(RACE, f"row sums {rows}x{cols}: two runs on the same input disagree")
        x = rng.standard_normal((64, 130)).astype(np.float32)
        want = x.astype(np.float64).mean(axis=1)
        with mt.use_stage(8):
            y = mt.tensor(x.copy(), device="cuda").mean(axis=1).numpy()
        ov.expect_launched("x.mean(axis=1) at stage 8")
        compare(y, want, "x.mean(axis=1)", atol=1e-5, rtol=1e-4)
        x = Buffer(256 * 64, rng.standard_normal(256 * 64).astype(np.float32))
        accesses = access_checks.traced(ov, lambda: launchers.sum_rows(ex.kernel, Buffer(256), x, 256, 64, 1.0))
    return [
        f"scaled row sums for shapes {_SHAPES_ROWS} and 3 hidden ones",
        "x.mean(axis=1) at stage 8 runs your kernel",
        *access_checks.numbers(accesses, "256 rows of 64 on the CPU emulator"),
    ]


def check_sumsq_last_block(ex: Exercise, source: str) -> list[str]:
    """13.2: many blocks, the last one to finish adds their partials. One count serves every launch,
    as a backend would keep it: a kernel that does not put it back to 0 leaves no block last next time.
    The atomic this needs is allowed; a missing __threadfence() fails on the emulator's race checking."""
    from ..cuda import launchers

    _own_reduction(ex, source)
    rng = _rng()
    sizes = [1, 255, 256 * 128 + 7]
    hidden_sizes = hidden.sizes("n", 256 * 128 + 7, 4_000_000, 1)  # up to the most blocks the grid takes
    with Override(ex.kernel, source) as ov:
        count = Buffer(1, np.zeros(1, np.uint32), np.uint32)
        for n in sizes + hidden_sizes:
            x = rng.standard_normal(n).astype(np.float32)
            blocks = launchers.last_block_grid(n)
            squares = x.astype(np.float64) ** 2
            # grid-stride: element i is read by thread i % 256 of block (i / 256) % blocks
            want_partials = np.bincount(np.arange(n) // launchers.BLOCK % blocks, squares, blocks)
            what, runs = f"sumsq_last_block n={n} ({blocks} block{'s' * (blocks > 1)})", []
            for _ in range(2):
                out, partials, inp = Buffer(1), Buffer(blocks), Buffer(n, x)
                launchers.sumsq_last_block(out, partials, count, inp, n, blocks)
                runs.append(out.read(what))
                compare(runs[-1], [squares.sum()], what, atol=1e-3, rtol=1e-4, poison=POISON)
                compare(partials.read(f"{what}, partials"), want_partials, f"{what}: partials[b], block b's sum",
                        atol=1e-3, rtol=1e-4, poison=POISON)  # fmt: skip
                left = int(count.read(f"{what}, count")[0])
                if left != 0:
                    fail(WRONG_RESULT, f"{what}: *count is {left} after the launch: the last block must put it "
                         "back to 0, or no block of the next launch finds itself last")  # fmt: skip
            if not np.array_equal(runs[0], runs[1]):
                fail(RACE, f"{what}: two runs on one input gave {float(runs[0][0])!r} and {float(runs[1][0])!r}: "
                     "add the partials in a fixed order")  # fmt: skip
        n = 256 * 128 + 7
        x, blocks = Buffer(n, rng.standard_normal(n).astype(np.float32)), launchers.last_block_grid(n)
        accesses = access_checks.traced(
            ov, lambda: launchers.sumsq_last_block(Buffer(1), Buffer(blocks), count, x, n, blocks)
        )
    return [
        f"sum of squares for n in {sizes} and 1 hidden size, up to 128 blocks of 256 threads, twice each: "
        "the same bits both times, every partial its block's sum, the count back to 0",
        *access_checks.numbers(accesses, f"n = {n} on the CPU emulator"),
    ]


_SHAPES_XENT = [(64, 10), (1, 1), (5, 33), (37, 257), (3, 1024), (128, 1000), (600, 7)]


def _xent_reference(x: np.ndarray, t: np.ndarray, scale: float) -> tuple[np.ndarray, float]:
    z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return np.exp(log_p), scale * float(-(t * log_p).sum())


def check_softmax_xent(ex: Exercise, source: str) -> list[str]:
    import minitorch_cuda as mt

    from ..cuda import launchers

    _own_reduction(ex, source)
    atomics = compiled(ex, source).own_atomics
    if atomics:
        fail(
            FORBIDDEN, f"sum the losses in a fixed order: atomics make them vary (your kernel compiles to {atomics[0]})"
        )
    rng = _rng()
    # within what the exercise claims (1 to 600 rows of at most 1024 columns): a ragged number of
    # rows for the block's 16 warps, a ragged row for the lanes' 32 columns, up to the largest
    hidden_shapes = list(zip(hidden.sizes("rows", 64, 600, 1, 16), hidden.sizes("cols", 256, 1024, 1, 32)))
    with Override(ex.kernel, source) as ov:
        for rows, cols in _SHAPES_XENT + hidden_shapes:
            x = (rng.standard_normal((rows, cols)) * 5 + rng.uniform(-80, 80, (rows, 1))).astype(np.float32)
            t = np.eye(cols, dtype=np.float32)[rng.integers(0, cols, rows)]
            t[::3] = rng.dirichlet(np.ones(cols), len(t[::3]))  # soft targets on every third row
            scale = 1.0 / rows
            want_p, want_loss = _xent_reference(x, t, scale)
            what, runs = f"softmax_xent_fused {rows}x{cols}", []
            for _ in range(2):
                probs, loss, d_x, d_t = Buffer(x.size), Buffer(1), Buffer(x.size, x), Buffer(t.size, t)
                launchers.softmax_xent_fused(probs, loss, d_x, d_t, rows, cols, scale)
                runs.append((probs.read(f"{what}, probs").reshape(rows, cols), loss.read(f"{what}, loss")))
            compare(runs[0][0], want_p, f"{what}: probs", atol=1e-6, rtol=1e-4, poison=POISON)
            compare(runs[0][1], [want_loss], f"{what}: loss", atol=1e-5, rtol=1e-4, poison=POISON)
            if not all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1])):
                fail(RACE, f"{what}: two runs on the same input disagree (a missing __syncthreads?)")
        x = rng.standard_normal((64, 10)).astype(np.float32) * 3
        t = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
        want_p, want_loss = _xent_reference(x, t, 1 / 64)
        with mt.use_stage(10):
            logits = mt.tensor(x.copy(), device="cuda", requires_grad=True)
            loss = mt.cross_entropy_with_softmax(logits, mt.tensor(t.copy(), device="cuda"))
            loss.backward()
            value, grad = loss.item(), logits.grad.numpy()
        ov.expect_launched("the cross-entropy loss at stage 10")
        compare(value, want_loss, "the loss at stage 10", atol=1e-5, rtol=1e-4)
        compare(grad, (want_p - t) / 64, "its gradient (probs - target) / rows", atol=1e-7, rtol=1e-4)
    return [
        f"probs and mean loss for shapes {_SHAPES_XENT} and a hidden one, logits up to +-100, one-hot and soft "
        "targets, twice each",
        "the cross-entropy loss at stage 10 runs your kernel, and its gradient uses your probabilities",
    ]


# --- clipping scale ----------------------------------------------------------------------


def check_clip_scale(ex: Exercise, source: str) -> list[str]:
    from ..cuda import launchers

    rng = _rng()
    cases = []
    with Override(ex.kernel, source) as ov:
        hidden_n = hidden.sizes("n", 10_007, 2_000_000, 1)[0]
        for n, max_norm in [(1, 0.5), (257, 1.0), (10_007, 2.0), (10_007, 1e6), (hidden_n, 1.0)]:
            g = rng.standard_normal(n).astype(np.float32)
            partials = np.array([float(np.sum(g.astype(np.float64) ** 2)), rng.uniform(0, 5), rng.uniform(0, 5)])
            norm = math.sqrt(partials.sum())
            want = g * (max_norm / (norm + 1e-6)) if norm > max_norm else g
            buf, parts = Buffer(n, g), Buffer(3, partials.astype(np.float32))
            launchers.elementwise(ex.kernel, n, buf, parts, 3, float(max_norm), n)
            got = buf.read(f"clip_scale n={n}")
            if norm > max_norm and np.array_equal(got, g):
                fail(NO_WRITES, f"clip_scale n={n}: the gradient was not scaled (norm {norm:.3g} > {max_norm})")
            what = f"clip_scale n={n}, max_norm={max_norm}"
            compare(got, want, what, atol=1e-7, rtol=1e-5, tail=_tail(n, launchers.BLOCK))
            cases.append(n)
        _check_clip_gradients(rng, ov, [(100, 30), (30,)], "your clip_scale", rtol=1e-4)
    return [
        f"in-place scaling for n in {cases[:-1]} and a hidden size, clipped and unclipped",
        "clip_gradients runs your kernel",
    ]


# --- gather ------------------------------------------------------------------------------


def check_gather(ex: Exercise, source: str) -> list[str]:
    import minitorch_cuda as mt

    from ..cuda import launchers

    rng = _rng()
    shapes = [(64, 784, 1000), (3, 5, 7), (1000, 1, 50), (257, 3, 10)]
    rows, row_len = hidden.sizes("rows", 1000, 6000, 1, 2)[0], hidden.between("row_len", 785, 1100, 1)[0]
    hidden_shapes = [(rows, row_len, 1500)]
    with Override(ex.kernel, source) as ov:
        for rows, row_len, n_src in shapes + hidden_shapes:
            src = rng.standard_normal((n_src, row_len)).astype(np.float32)
            idx = rng.integers(0, n_src, rows).astype(np.int32)
            want = src[idx]
            out, inp, d_idx = Buffer(rows * row_len), Buffer(src.size, src), Buffer(rows, idx, np.int32)
            launchers.elementwise(ex.kernel, rows * row_len, out, inp, d_idx, rows, row_len)
            got = out.read(f"gather {rows} rows of {row_len}").reshape(rows, row_len)
            compare(
                got,
                want,
                f"gather {rows} rows of {row_len}",
                atol=0,
                rtol=0,
                poison=POISON,
                tail=_tail(rows * row_len, launchers.BLOCK),
            )
        x = rng.standard_normal((500, 33)).astype(np.float32)
        order = rng.permutation(500)
        want = x[order]
        with mt.use_stage(7):
            y = mt.tensor(x.copy(), device="cuda")[order.copy()].numpy()
        ov.expect_launched("x[order] at stage 7")
        compare(y, want, "x[order]", atol=0, rtol=0)
        src, idx = rng.standard_normal((1000, 784)).astype(np.float32), rng.integers(0, 1000, 64).astype(np.int32)
        out, inp, d_idx = Buffer(64 * 784), Buffer(src.size, src), Buffer(64, idx, np.int32)
        accesses = access_checks.traced(
            ov, lambda: launchers.elementwise(ex.kernel, 64 * 784, out, inp, d_idx, 64, 784)
        )
    return [
        f"gathers (rows, row_len, source rows) {shapes} and a hidden one with repeated indices",
        "x[order] runs your kernel",
        *access_checks.numbers(accesses, "64 rows of 784 on the CPU emulator"),
    ]


# --- matmul family ---------------------------------------------------------------------------


def _operands(rng, M, N, K, ta, tb, batch=None):
    lead = () if batch is None else (batch,)
    a = rng.standard_normal(lead + ((K, M) if ta else (M, K))).astype(np.float32)
    b = rng.standard_normal(lead + ((N, K) if tb else (K, N))).astype(np.float32)
    return a, b


def _matmul_ref(a, b, ta, tb):
    """op(a) @ op(b) in float64; a 2-D b broadcasts over a's batch."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (np.swapaxes(a64, -1, -2) if ta else a64) @ (np.swapaxes(b64, -1, -2) if tb else b64)


def _matmul_tol(K: int) -> dict:
    return {"atol": 1e-4 * math.sqrt(K), "rtol": 1e-4}


# the matmul exercises' kernels (kernel_table.matmul_stage: the stage whose matmul launches each)
_MATMUL_EXERCISES = ("matmul_transposed", "matmul_batched", "matmul_tiled", "matmul_regtiled_32x32x8")


def _run_matmul(name: str, a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> np.ndarray:
    """op(a) @ op(b) by kernel ``name`` through the backend's launcher, into a guarded buffer."""
    from ..cuda import launch_core, matmul_choice, matmul_launchers

    g = launch_core.Gemm.of(a, b, ta, tb)
    out, da, db = Buffer(g.batch * g.M * g.N), Buffer(a.size, a), Buffer(b.size, b)
    if name.startswith("matmul_regtiled_"):
        matmul_launchers.matmul_regtiled(out, da, db, g, tile=name.removeprefix("matmul_regtiled_"))
    else:
        matmul_choice.MATMULS[name](out, da, db, g)
    return out.read(f"matmul M={g.M} N={g.N} K={g.K} ta={int(ta)} tb={int(tb)}").reshape(g.batch, g.M, g.N)


_MATMUL_SHAPES = [(64, 256, 784), (33, 17, 65), (1, 1, 1), (70, 45, 129), (31, 33, 32)]


def check_matmul(ex: Exercise, source: str) -> list[str]:
    import minitorch_cuda as mt

    rng = _rng()
    batched = ex.kernel != "matmul_transposed"
    shared = ex.kernel in ("matmul_tiled", "matmul_regtiled_32x32x8")
    stage = matmul_stage(ex.kernel)
    if shared and not compiled(ex, source).uses_shared:
        fail(
            FORBIDDEN, "stage the tiles of A and B in __shared__ memory: your compiled kernel never uses shared memory"
        )
    # one hidden shape past the fixed ones in every dimension (more tiles than they need, K past 784)
    hidden_shape = tuple(
        hidden.between(d, low, high, 1)[0] for d, low, high in (("M", 71, 400), ("N", 46, 400), ("K", 785, 1600))
    )
    with Override(ex.kernel, source) as ov:
        for M, N, K in _MATMUL_SHAPES + [hidden_shape]:
            for ta in (False, True):
                for tb in (False, True):
                    batch = 3 if batched else 1
                    a, b = _operands(rng, M, N, K, ta, tb, batch if batched else None)
                    if batched and tb:  # broadcast B over the batch: stride 0
                        b = b[0]
                    want = _matmul_ref(a, b, ta, tb)
                    got = _run_matmul(ex.kernel, a, b, ta, tb)
                    what = f"{ex.kernel} M={M} N={N} K={K} ta={int(ta)} tb={int(tb)}" + (
                        f" batch={batch}" if batched else ""
                    )
                    compare(got, want.reshape(got.shape), what, poison=POISON, **_matmul_tol(K))
        if shared:  # a missing __syncthreads shows as run-to-run differences on a GPU
            M, N, K = 256, 256, 2048
            a, b = _operands(rng, M, N, K, False, False)
            want = _matmul_ref(a, b, False, False)
            # the emulator runs the threads in one order, every run the same, and its race checking
            # reports a missing barrier in the first: one run there
            runs = [_run_matmul(ex.kernel, a, b, False, False) for _ in range(1 if emulator.selected() else 3)]
            if any(not np.array_equal(r, runs[0]) for r in runs[1:]):
                fail(RACE, "the same 256x256x2048 product differs from run to run: a missing __syncthreads()?")
            compare(runs[0][0], want, "256x256x2048", poison=POISON, **_matmul_tol(K))
        # at stage 9 only the 32 x 32 tile fits products of at most 16 x 16: the tuner must pick it
        M, N = (12, 9) if stage == 9 else (40, 33)
        a = rng.standard_normal((4, M, 70) if batched else (M, 70)).astype(np.float32)
        b = rng.standard_normal((N, 70)).astype(np.float32)
        want = a.astype(np.float64) @ b.T.astype(np.float64)
        with mt.use_stage(stage):
            y = mt.tensor(a.copy(), device="cuda").matmul(mt.tensor(b.copy(), device="cuda"), transpose_b=True).numpy()
        ov.expect_launched(f"a.matmul(b, transpose_b=True) at stage {stage}")
        compare(y, want, "a.matmul(b, transpose_b=True)", **_matmul_tol(70))
        a, b = _operands(rng, 64, 64, 64, False, False)
        accesses = access_checks.traced(ov, lambda: _run_matmul(ex.kernel, a, b, False, False))
        if ex.kernel == "matmul_tiled":  # chapter 11's lesson: a tile read and written without bank conflicts
            access_checks.conflict_free(accesses, "a 64x64x64 product")
    done = [
        f"all four transpose flags on shapes (M, N, K) {_MATMUL_SHAPES} and a hidden one"
        + (", batch 3, B broadcast with stride 0" if batched else "")
    ]
    if shared and emulator.selected():
        done.append("256x256x2048: correct, and no race found by the emulator's race checking")
    elif shared:
        done.append("256x256x2048 three times: identical, correct (no race)")
    done.append(f"tensor matmul at stage {stage} runs your kernel")
    return done + access_checks.numbers(accesses, "64x64x64 on the CPU emulator")


# --- on-device init ----------------------------------------------------------------------------


def check_init(ex: Exercise, source: str) -> list[str]:
    import minitorch_cuda as mt

    from ..cuda import launchers

    rng = _rng()
    n, std = hidden.sizes("n", 1_000_003, 4_000_000, 1)[0], float(rng.uniform(0.5, 2.0))  # past the fixed 1,000,003
    seed = int(rng.integers(0, 2**31))

    def draw(count, s, std_=std):
        out = Buffer(count)
        launchers.elementwise(ex.kernel, count, out, count, float(std_), s & 0xFFFFFFFF)
        values = out.read(f"init_normal n={count}")
        if np.all(values == POISON):
            fail(NO_WRITES, f"init_normal n={count}: nothing was written")
        if (values == POISON).any():
            fail(
                BOUNDARY,
                f"init_normal n={count}: elements {np.flatnonzero(values == POISON)[:5].tolist()} were never written",
            )
        if not np.isfinite(values).all():
            fail(
                WRONG_RESULT, f"init_normal n={count}: non-finite values at {np.flatnonzero(~np.isfinite(values))[:5]}"
            )
        return values.astype(np.float64)

    done = []
    with Override(ex.kernel, source) as ov:
        x = draw(n, seed)
        z = x / std
        tol_mean = 6 / math.sqrt(n)
        if abs(z.mean()) > tol_mean or abs(z.std() - 1) > 0.01:
            fail(WRONG_RESULT, f"mean {x.mean():.4g} and std {x.std():.4g}; want 0 and {std:.4g}")
        within = float(np.mean(np.abs(z) < 1)), float(np.mean(np.abs(z) < 2))
        if abs(within[0] - 0.6827) > 0.005 or abs(within[1] - 0.9545) > 0.003:
            fail(
                WRONG_RESULT,
                f"not normal: {within[0]:.4f} within 1 std (want 0.6827), {within[1]:.4f} within 2 (want 0.9545)",
            )
        done.append(f"n={n}: mean, std and the share within 1 and 2 std match N(0, {std:.3g}^2)")
        lag = float(np.corrcoef(z[:-1], z[1:])[0, 1])
        block = launchers.BLOCK  # a lag of one block: threads of two blocks must not repeat each other
        lag_block = float(np.corrcoef(z[:-block], z[block:])[0, 1])
        if max(abs(lag), abs(lag_block)) > tol_mean:
            fail(WRONG_RESULT, f"neighbours are correlated: lag 1 {lag:.4f}, lag {block} {lag_block:.4f}")
        other = draw(n, seed + 1) / std
        cross = float(np.corrcoef(z, other)[0, 1])
        if abs(cross) > tol_mean or np.array_equal(z, other):
            fail(WRONG_RESULT, f"seeds {seed} and {seed + 1} give correlated draws (r = {cross:.4f})")
        done.append("independent: neighbours and consecutive seeds uncorrelated")
        again = draw(n, seed)
        if not np.array_equal(again, x):
            fail(WRONG_RESULT, f"the same seed gave different values (first at {np.flatnonzero(again != x)[0]})")
        prefix = draw(1000, seed)
        if not np.array_equal(prefix, x[:1000]):
            fail(
                WRONG_RESULT,
                f"element i must depend only on (seed, i): n=1000 and n={n} disagree on the first 1000 values",
            )
        done.append("deterministic per seed; element i depends only on (seed, i)")
        with mt.use_stage(4):
            w = mt.randn((300, 7), std=0.1, seed=5, device="cuda").numpy()
        ov.expect_launched("mt.randn at stage 4")
        if abs(w.std() - 0.1) > 0.01:
            fail(WRONG_RESULT, f"mt.randn(std=0.1) at stage 4 gave std {w.std():.4g}")
        done.append("mt.randn at stage 4 runs your kernel")
    return done


# --- 12.1 a training step without syncs ---------------------------------------------------------


def check_train_step(ex: Exercise, train_step) -> list[str]:
    """Three steps of ``train_step`` at stage 7 against a reference run that ends before the student's
    first step. In the grader ``train_step`` runs in the subject process: every tensor operation it asks
    for comes back here, and so does its ``mt.synchronize()`` (the subject has no device; it asks this
    process for the ``synchronize`` service offered below), so the counts are of what this process did
    on the GPU. Every wait of the host for the device beyond the loss's one read-back is a sync, named
    by the call that made it (``waits``)."""
    import minitorch_cuda as mt

    from .. import nn, optim, profiler
    from . import channel, waits

    rng = _rng()

    def make():
        net = nn.Sequential(
            nn.FeedForward(20, 16, device="cuda", seed=1), nn.ReLU(), nn.FeedForward(16, 4, device="cuda", seed=2)
        )
        return net, optim.RmsProp(net.parameters(), lr=1e-2, decay=0.9)

    loss_fn = nn.CrossEntropyWithSoftmax()
    batches = [
        (rng.standard_normal((8, 20)).astype(np.float32), np.eye(4, dtype=np.float32)[rng.integers(0, 4, 8)])
        for _ in range(3)
    ]
    with mt.use_stage(7):
        ref_net, ref_opt = make()
        want = []
        for x, y in batches:
            ref_loss = loss_fn(ref_net(mt.tensor(x, device="cuda")), mt.tensor(y, device="cuda"))
            ref_loss.backward()
            ref_opt.clip_gradients(1.0)
            ref_opt.step()
            ref_opt.zero_grad()
            want.append(ref_loss.item())
        want_params = [q.numpy() for q in ref_net.parameters()]
        net, opt = make()
        for step, (x, y) in enumerate(batches):
            xb, yb = mt.tensor(x, device="cuda"), mt.tensor(y, device="cuda")
            mt.synchronize()
            with channel.offered(train_step, "synchronize", mt.synchronize), profiler.count() as c:
                with waits.named() as named:
                    loss = train_step(net, loss_fn, opt, xb, yb, 1.0)
            if not isinstance(loss, float):
                fail(WRONG_RESULT, f"train_step must return the loss as a Python float, got {type(loss).__name__}")
            if c.launches == 0:
                fail(HOST_SIDE, "train_step launched no kernel: the step must run on the GPU")
            if c.dtoh_copies == 0 or c.htod_copies:
                uploads = f" ({waits.describe(named['htod_copies'], c.htod_copies)})" if c.htod_copies else ""
                fail(
                    HOST_SIDE,
                    f"step {step}: {c.dtoh_copies} device-to-host and {c.htod_copies} host-to-device "
                    f"copies{uploads}; want exactly one read-back (the loss) and no upload",
                )
            if c.syncs or c.dtoh_copies > 1:  # a read-back waits for the device as a sync does
                syncs = f"{c.syncs} device sync(s): {waits.describe(named['syncs'], c.syncs)}; " if c.syncs else ""
                reads = f"{c.dtoh_copies} read-back(s): {waits.describe(named['dtoh_copies'], c.dtoh_copies)}"
                fail(
                    SYNCS,
                    f"step {step}: the host waits for the device {c.syncs + c.dtoh_copies} times ({syncs}{reads}); "
                    "want one wait: the loss read back once, at the end",
                )
            compare(np.float32(loss), np.float32(want[step]), f"loss at step {step}", atol=1e-6, rtol=1e-5)
        for i, (p, q) in enumerate(zip(net.parameters(), want_params)):
            compare(p.numpy(), q, f"parameter {i} after 3 steps", atol=1e-6, rtol=1e-5)
    return [
        "3 steps: loss and parameters match forward, backward, clip(1.0), RmsProp step, zero_grad",
        "each step: 0 device syncs, 1 device-to-host copy, no uploads",
    ]


PYTHON_GPU_CHECKS = {"12.1": check_train_step}

# --- dispatch ------------------------------------------------------------------------------------

CHECKS = {
    "scale": check_scale,
    "bias_relu": check_bias_relu,
    "ew_relu": lambda ex, s: _check_unary(
        ex,
        s,
        lambda rng, n: (rng.standard_normal(n) * 3).astype(np.float32),
        lambda x: np.maximum(x, 0),
        "relu",
        0.0,
        0.0,
    ),
    "ew_sigmoid": lambda ex, s: _check_unary(ex, s, _sigmoid_inputs, _stable_sigmoid, "sigmoid", 1e-7, 1e-5),
    "softmax_rows_volatile": check_softmax,
    "sumsq_volatile": check_sumsq,
    "clip_scale": check_clip_scale,
    "gather_rows": check_gather,
    "matmul_transposed": check_matmul,
    "matmul_batched": check_matmul,
    "matmul_tiled": check_matmul,
    "init_normal": check_init,
    "sum_rows_shuffle": check_sum_rows,
    "sumsq_last_block": check_sumsq_last_block,
    "ew_relu_vec4": check_relu_vec4,
    "matmul_regtiled_32x32x8": check_matmul,
    "softmax_xent_fused": check_softmax_xent,
    "clip_global_norm": grid_phase.check,  # 21.1, with the kernel it checks
}


def run(ex: Exercise, artifact, cell_source: str = "") -> list[str]:
    from ..device import require_cuda

    if ex.kind == "python":
        require_cuda()
        return PYTHON_GPU_CHECKS[ex.id](ex, artifact)
    if exercises.holds_stub(artifact):
        raise exercises.not_done(ex.id)
    static_checks(ex, artifact)
    require_cuda()
    done = CHECKS[ex.kernel](ex, artifact)
    if emulator.selected():  # the emulator's times are host times: no speed is shown there
        return done
    from . import speed

    return done + speed.feedback(ex, artifact)


# --- one small launch per kernel, for compute-sanitizer ----------------------------------------


def small_launch(ex: Exercise, source: str) -> None:
    """Launch the student's kernel once or twice on small, odd shapes through the backend's launcher
    (what ``sanitizer`` runs under memcheck, racecheck and synccheck); no comparison."""
    import minitorch_cuda as mt

    from ..cuda import launchers

    rng = _rng()

    def floats(n):
        return Buffer(n, rng.standard_normal(n).astype(np.float32))

    name = ex.kernel
    if name == "scale":
        kernel = student_kernel(ex, source)
        launchers.elementwise(kernel, 257, Buffer(257), floats(257), 1.5, 257)
        mt.synchronize()
        return
    if name == "bias_relu":
        launchers.elementwise(student_kernel(ex, source), 5 * 67, Buffer(5 * 67), floats(5 * 67), floats(67), 5, 67)
        mt.synchronize()
        return
    if name == "clip_global_norm":
        grid_phase.small_launch(ex, source)
        return
    with Override(name, source):
        if name in ("ew_relu", "ew_sigmoid"):
            launchers.elementwise(name, 257, Buffer(257), floats(257), 257)
        elif name == "ew_relu_vec4":
            launchers.elementwise_vec4(name, 1023, Buffer(1023), floats(1023), 1023)
        elif name == "softmax_rows_volatile":
            launchers.softmax_rows(name, Buffer(5 * 65), floats(5 * 65), 5, 65)
        elif name == "sumsq_volatile":
            launchers.sumsq(name, Buffer(1), floats(1025), 1025)
        elif name == "clip_scale":
            launchers.elementwise(name, 257, floats(257), Buffer(3, np.float32([5, 1, 1])), 3, 1.0, 257)
        elif name == "gather_rows":
            idx = Buffer(3, rng.integers(0, 7, 3).astype(np.int32), np.int32)
            launchers.elementwise(name, 15, Buffer(15), floats(35), idx, 3, 5)
        elif name == "init_normal":
            launchers.elementwise(name, 1000, Buffer(1000), 1000, 1.0, 7)
        elif name == "sum_rows_shuffle":
            launchers.sum_rows(name, Buffer(5), floats(5 * 65), 5, 65, 1.0)
        elif name == "sumsq_last_block":
            blocks = launchers.last_block_grid(5000)
            count = Buffer(1, np.zeros(1, np.uint32), np.uint32)
            launchers.sumsq_last_block(Buffer(1), Buffer(blocks), count, floats(5000), 5000, blocks)
        elif name == "softmax_xent_fused":
            t = np.eye(33, dtype=np.float32)[rng.integers(0, 33, 5)]
            launchers.softmax_xent_fused(Buffer(5 * 33), Buffer(1), floats(5 * 33), Buffer(t.size, t), 5, 33, 0.2)
        elif name in _MATMUL_EXERCISES:
            batched = name != "matmul_transposed"
            for ta, tb in ((False, False), (True, True)):
                a, b = _operands(rng, 33, 17, 65, ta, tb, 2 if batched else None)
                _run_matmul(name, a, b, ta, tb)
        else:
            raise KeyError(f"no small launch for {name}")
        mt.synchronize()
