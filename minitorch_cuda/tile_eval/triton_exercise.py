"""The hidden checks of Exercise 20.2: bias and ReLU as a Triton tile kernel, in Triton's interpreter.

The student writes ``bias_relu_kernel`` (one program per row and block of ``BLOCK_N`` columns);
the notebook's launcher ``bias_relu_triton(out, c, bias)`` runs it with ``TRITON_INTERPRET=1`` on
numpy arrays, so no GPU is needed. In the grader the launcher runs in the subject process: the
check hands it fresh arrays and reads back what the kernel wrote; then it launches the kernel
alone itself, with other tile widths (``triton_launch``), so that what counts is what the kernel
computes, not a launcher that computes on the host. The matrix is the first ``N``
columns of rows ``row_stride`` wide (a slice of a wider buffer, as the kernel's stride
arguments allow), and the columns past ``N`` are poisoned: a tile whose mask lets the ragged
last block through writes there, where the check sees it.
"""

from __future__ import annotations

import re

import numpy as np

POISON = np.float32(-1.2345678e30)
BLOCK_N = 64  # the launcher's tile width, given in the notebook
GRADER_BLOCKS = (128,)  # the tile widths the grader launches the kernel with itself (not the notebook's)
# (rows M, columns N, row stride): one tile, a ragged last tile, several tiles, one column
SHAPES = [(1, 1, 80), (3, 64, 130), (5, 65, 130), (4, 200, 264), (2, 1000, 1064), (9, 7, 71)]


def _parts(artifact, source: str):
    """(the cell's launcher, the grader's launch of the cell's kernel, the cell's source). In the
    grader the subject hands over both (``triton_launch``); in a notebook the check gets the launcher
    and finds the kernel in its globals."""
    from ..grade.verdict import source_of
    from .triton_launch import launcher

    if isinstance(artifact, (tuple, list)):
        return artifact[0], artifact[1], source
    kernel = getattr(artifact, "__globals__", {}).get("bias_relu_kernel")
    return artifact, launcher(kernel), source or source_of(artifact) + "\n" + source_of(getattr(kernel, "fn", None))


def check_bias_relu_triton(artifact, source: str = "") -> list[str]:
    from ..grade.verdict import HOST_SIDE, CheckFailed, fail

    bias_relu_triton, launch_kernel, code = _parts(artifact, source)
    if re.search(r"raise NotImplementedError\(", code):  # the stub: Triton's interpreter would wrap its exception
        raise NotImplementedError("Exercise 20.2")
    rng = np.random.default_rng()
    from ..grade import hidden  # a shape drawn from the grader's seed, past the fixed ones

    rows, cols = hidden.between("M", 2, 40, 1)[0], hidden.between("N", 65, 1500, 1)[0]
    shapes = [*SHAPES, (rows, cols, cols + hidden.between("pad", 0, 70, 1)[0])]
    # the cell's launcher as the notebook calls it, then the kernel alone, launched here with other tiles
    runs = [("bias_relu_triton", lambda out, c, bias: bias_relu_triton(out, c, bias))]
    runs += [(f"bias_relu_kernel launched by the grader with BLOCK_N = {b}",
              lambda out, c, bias, b=b: launch_kernel(out, c, bias, b)) for b in GRADER_BLOCKS]  # fmt: skip
    for i, (name, run) in enumerate(runs):
        try:
            _check_runs(name, run, shapes, rng)
        except CheckFailed as failure:
            if i == 0:  # the cell's own launcher is wrong: that is the verdict
                raise
            fail(HOST_SIDE, f"bias_relu_triton's result is right, but {failure.message}: the kernel must do the "
                 "work (a launcher that computes with numpy on the host earns nothing)", failure.details)  # fmt: skip
    return [
        f"out = max(c + bias, 0) for (M, N, row stride) {SHAPES} and a hidden one, through your launcher "
        f"(tiles of {BLOCK_N})",
        f"the same from bias_relu_kernel alone, launched by the grader with tiles of {GRADER_BLOCKS[0]}",
        "nothing written past column N - 1 of any row: the ragged last tile is masked",
    ]


def _check_runs(name: str, run, shapes, rng) -> None:
    """``run(out, c, bias)`` right on every shape, and nothing written past column N - 1."""
    from ..grade.verdict import BOUNDARY, WRONG_RESULT, call, compare, fail

    for M, N, stride in shapes:
        c = (rng.standard_normal((M, stride)) * 2).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        out = np.full((M, stride), POISON, np.float32)
        what = f"{name}, {M} x {N} (rows {stride} floats apart)"
        want = np.maximum(c[:, :N].astype(np.float64) + bias, 0)  # before the student's code sees c
        got = np.asarray(call(what, run, out, c, bias))
        if got.shape != out.shape:
            fail(WRONG_RESULT, f"{what}: the result has shape {got.shape}, want out's {out.shape}")
        past = got[:, N:] != POISON
        if past.any():
            row, col = (int(v) for v in np.argwhere(past)[0])
            count = f"{int(past.sum())} value{'s' * (int(past.sum()) != 1)}"
            fail(
                BOUNDARY,
                f"{what}: {count} written past column {N - 1}, first in row {row}, column {col}: mask the ragged "
                "last tile (columns >= N) in both tl.load and tl.store",
            )
        compare(got[:, :N], want, what, atol=1e-7, rtol=1e-6, poison=POISON)
