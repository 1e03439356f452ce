"""Speed feedback of the kernel exercises, on a GPU: the student's kernel beside the built-in one.

After a kernel exercise's checks pass, ``feedback`` times the built-in kernel of the same
name and then the student's (under ``mt.override``) on one larger problem, through the
backend's launchers and the benchmark's timer (``cuda/timing.launcher_seconds``: a warm-up,
then TIMED samples of ``timing.INNER`` back-to-back launches), and returns one line with both:
GB/s for the memory-bound kernels, GFLOP/s for the matmuls. It is feedback, never part of a
verdict, and is never called under the CPU emulator, whose times are host times.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from ..cuda import timing
from .exercises import Exercise
from .harness import student_kernel

TIMED = 2  # samples of timing.INNER launches each: 20 timed launches per kernel
N = 1 << 24  # floats of an array (64 MiB) in the memory-bound problems
MATMUL = 1024  # the matmuls' M = N = K
XENT = (512, 1000)  # rows and columns of softmax_xent_fused's one block
# the standalone exercises' kernels have no built-in of their name: a built-in moving the same bytes
STAND_INS = {"scale": "ew_affine", "bias_relu": "ew_add", "clip_global_norm": "multi_clip_scale"}


def _floats(rng, n: int):
    from ..cuda.backend import from_numpy

    return from_numpy(rng.standard_normal(n, dtype=np.float32))


def _empty(n: int):
    from ..cuda.array import DeviceArray

    return DeviceArray.empty((n,))


@dataclasses.dataclass
class Problem:
    """One problem both kernels are timed on; each launch takes ``timed=`` as the launchers do."""

    what: str  # shown in the line
    unit: str  # "GB/s" or "GFLOP/s"
    amount: float  # bytes moved or flops done per launch
    builtin_name: str
    builtin: Callable
    yours: Callable  # by name (the student's runs under the override), but for STAND_INS' kernels


def _same(what: str, unit: str, amount: float, name: str, launch: Callable) -> Problem:
    return Problem(what, unit, amount, name, launch, launch)


def _stand_in(name: str) -> str:
    return f" (no built-in {name}: {STAND_INS[name]} moves the same bytes)"


def problem(ex: Exercise, source: str, rng) -> Problem:
    """The exercise kernel's problem: arrays of N floats, or a MATMUL^3 matmul."""
    from ..cuda import launch_core, launchers, matmul_choice, matmul_launchers
    from ..cuda.backend import from_numpy
    from .harness import Buffer

    name, part = ex.kernel, functools.partial
    floats = f"{N:,} floats"
    if name == "scale":  # the stand-in: ew_affine with beta 0
        kernel, out, x = student_kernel(ex, source), _empty(N), _floats(rng, N)
        builtin = part(launchers.elementwise, "ew_affine", N, out, x, 1.5, 0.0, N)
        yours = part(launchers.elementwise, kernel, N, out, x, 1.5, N)
        return Problem(floats + _stand_in(name), "GB/s", 8 * N, STAND_INS[name], builtin, yours)
    if name == "bias_relu":  # the stand-in: ew_add with the bias broadcast along the rows
        rows, cols = N // 4096, 4096
        kernel, out, bias = student_kernel(ex, source), _empty(rows * cols), _floats(rng, cols)
        c = _floats(rng, rows * cols)
        builtin = part(launchers.elementwise, "ew_add", rows * cols, out, c, bias, rows * cols, 1, cols)
        yours = part(launchers.elementwise, kernel, rows * cols, out, c, bias, rows, cols)
        what = f"{rows} x {cols}" + _stand_in(name)
        return Problem(what, "GB/s", 8 * rows * cols + 4 * cols, STAND_INS[name], builtin, yours)
    if name == "clip_global_norm":  # one launch against stage 11's two (multi_sumsq, multi_clip_scale)
        from .grid_phase import speed_problem

        what, nbytes, builtin, yours = speed_problem(ex, source, rng, N)
        return Problem(what, "GB/s", nbytes, STAND_INS[name], builtin, yours)
    if name in ("ew_relu", "ew_sigmoid", "ew_relu_vec4"):
        launcher = launchers.elementwise_vec4 if name.endswith("_vec4") else launchers.elementwise
        return _same(floats, "GB/s", 8 * N, name, part(launcher, name, N, _empty(N), _floats(rng, N), N))
    if name == "clip_scale":  # in place, the norm just above max_norm: each launch scales by 0.999
        partials = from_numpy(np.float32([1, 0, 0]))
        launch = part(launchers.elementwise, name, N, _floats(rng, N), partials, 3, 0.999, N)
        return _same(floats, "GB/s", 8 * N, name, launch)
    if name == "init_normal":
        launch = part(launchers.elementwise, name, N, _empty(N), N, 1.0, 7)
        return _same(floats + " written", "GB/s", 4 * N, name, launch)
    if name == "sumsq_volatile":
        launch = part(launchers.sumsq, name, _empty(1), _floats(rng, N), N)
        return _same(floats + " read by one block", "GB/s", 4 * N, name, launch)
    if name == "sumsq_last_block":
        blocks, count = launchers.last_block_grid(N), Buffer(1, np.zeros(1, np.uint32), np.uint32)
        launch = part(launchers.sumsq_last_block, _empty(1), _empty(blocks), count, _floats(rng, N), N, blocks)
        return _same(f"{floats} read by {blocks} blocks", "GB/s", 4 * N, name, launch)
    if name == "gather_rows":
        rows, row_len = N // 1024, 1024
        idx = Buffer(rows, rng.permutation(rows).astype(np.int32), np.int32)  # from_numpy makes float32
        out, src = _empty(rows * row_len), _floats(rng, rows * row_len)
        launch = part(launchers.elementwise, name, rows * row_len, out, src, idx, rows, row_len)
        return _same(f"{rows} rows of {row_len}", "GB/s", 8 * rows * row_len + 4 * rows, name, launch)
    if name == "sum_rows_shuffle":
        rows, cols = N // 4096, 4096
        launch = part(launchers.sum_rows, name, _empty(rows), _floats(rng, rows * cols), rows, cols, 1.0)
        return _same(f"{rows} x {cols}", "GB/s", 4 * rows * cols + 4 * rows, name, launch)
    if name == "softmax_rows_volatile":
        rows, cols = N // 1024, 1024
        launch = part(launchers.softmax_rows, name, _empty(rows * cols), _floats(rng, rows * cols), rows, cols)
        return _same(f"{rows} x {cols}", "GB/s", 8 * rows * cols, name, launch)
    if name == "softmax_xent_fused":  # one block for the whole batch, as at stage 10
        rows, cols = XENT
        target = from_numpy(np.full(rows * cols, 1 / cols, np.float32))
        probs, logits = _empty(rows * cols), _floats(rng, rows * cols)
        launch = part(launchers.softmax_xent_fused, probs, _empty(1), logits, target, rows, cols, 1 / rows)
        return _same(f"{rows} x {cols} in one block", "GB/s", 12 * rows * cols, name, launch)
    if name not in matmul_choice.MATMULS and not name.startswith("matmul_regtiled_"):
        raise KeyError(f"no speed problem for kernel {name!r}")
    g = launch_core.Gemm(MATMUL, MATMUL, MATMUL)
    a, b, c = _floats(rng, MATMUL * MATMUL), _floats(rng, MATMUL * MATMUL), _empty(MATMUL * MATMUL)
    if name.startswith("matmul_regtiled_"):
        launch = part(matmul_launchers.matmul_regtiled, c, a, b, g, tile=name.removeprefix("matmul_regtiled_"))
    else:
        launch = part(matmul_choice.MATMULS[name], c, a, b, g)
    return _same(f"{MATMUL}^3", "GFLOP/s", g.flops, name, launch)


def line(p: Problem, your_seconds: float, builtin_seconds: float) -> str:
    yours, builtin = p.amount / your_seconds / 1e9, p.amount / builtin_seconds / 1e9
    return (
        f"speed (feedback, not graded): yours {yours:,.0f} {p.unit}, the built-in {p.builtin_name} "
        f"{builtin:,.0f} {p.unit} ({yours / builtin:.2f}x) on {p.what}, {TIMED * timing.INNER} launches each"
    )


def feedback(ex: Exercise, source: str) -> list[str]:
    """One line: the student's speed beside the built-in kernel's, measured now; or why it
    could not be measured (the verdict stands either way)."""
    from .harness import Override

    try:
        p = problem(ex, source, np.random.default_rng(0))
        builtin_seconds = timing.launcher_seconds(p.builtin, TIMED)
        if p.yours is p.builtin:
            with Override(ex.kernel, source):
                your_seconds = timing.launcher_seconds(p.yours, TIMED)
        else:
            your_seconds = timing.launcher_seconds(p.yours, TIMED)
    except Exception as exc:  # feedback only: a failure here must not change the verdict
        return [f"speed not measured: {type(exc).__name__}: {exc}"]
    return [line(p, your_seconds, builtin_seconds)]
