"""The hidden checks of Exercise 20.2: bias and ReLU as a Triton tile kernel, in Triton's interpreter.

The student writes ``bias_relu_kernel`` (one program per row and block of ``BLOCK_N`` columns);
the notebook's launcher ``bias_relu_triton(out, c, bias)`` runs it with ``TRITON_INTERPRET=1`` on
numpy arrays, so no GPU is needed. In the grader the launcher runs in the subject process: the
check hands it fresh arrays and reads back what the kernel wrote. The matrix is the first ``N``
columns of rows ``row_stride`` wide (a slice of a wider buffer, as the kernel's stride
arguments allow), and the columns past ``N`` are poisoned: a tile whose mask lets the ragged
last block through writes there, where the check sees it.
"""

from __future__ import annotations

import re

import numpy as np

POISON = np.float32(-1.2345678e30)
BLOCK_N = 64  # the launcher's tile width, given in the notebook
# (rows M, columns N, row stride): one tile, a ragged last tile, several tiles, one column
SHAPES = [(1, 1, 80), (3, 64, 130), (5, 65, 130), (4, 200, 264), (2, 1000, 1064), (9, 7, 71)]


def _notebook_source(launcher) -> str:
    """The launcher's source and the kernel's, found through the launcher's globals (in a notebook the
    check gets the function itself, not its cell; in the grader it always gets the cell)."""
    from ..grade.verdict import source_of

    kernel = getattr(launcher, "__globals__", {}).get("bias_relu_kernel")
    return source_of(launcher) + "\n" + source_of(getattr(kernel, "fn", None))


def check_bias_relu_triton(bias_relu_triton, source: str = "") -> list[str]:
    from ..grade.verdict import BOUNDARY, FORBIDDEN, WRONG_RESULT, call, compare, fail, forbid

    code = source or _notebook_source(bias_relu_triton)
    if re.search(r"raise NotImplementedError\(", code):  # the stub: Triton's interpreter would wrap its exception
        raise NotImplementedError("Exercise 20.2")
    forbid(
        code,
        {
            r"np\.(maximum|fmax|where|clip|add)\b|\.clip\(|\btorch\b|ml_dtypes": "compute in the Triton kernel: "
            "no numpy or torch arithmetic on the host",
        },
    )
    for needed, what in (("@triton.jit", "a @triton.jit kernel"), ("tl.store", "tl.store"), ("mask", "a mask")):
        if needed not in code:
            fail(FORBIDDEN, f"the cell must define the kernel with {what} (found no {needed!r})")
    rng = np.random.default_rng()
    done = []
    from ..grade import hidden  # a shape drawn from the grader's seed, past the fixed ones

    rows, cols = hidden.between("M", 2, 40, 1)[0], hidden.between("N", 65, 1500, 1)[0]
    for M, N, stride in [*SHAPES, (rows, cols, cols + hidden.between("pad", 0, 70, 1)[0])]:
        c = (rng.standard_normal((M, stride)) * 2).astype(np.float32)
        bias = rng.standard_normal(N).astype(np.float32)
        out = np.full((M, stride), POISON, np.float32)
        what = f"{M} x {N} (rows {stride} floats apart)"
        want = np.maximum(c[:, :N].astype(np.float64) + bias, 0)  # before the student's code sees c
        got = call(f"bias_relu_triton on {what}", bias_relu_triton, out, c, bias)
        got = np.asarray(got)
        if got.shape != out.shape:
            fail(WRONG_RESULT, f"{what}: bias_relu_triton returned shape {got.shape}, want out's {out.shape}")
        past = got[:, N:] != POISON
        if past.any():
            row, col = (int(v) for v in np.argwhere(past)[0])
            fail(
                BOUNDARY,
                f"{what}: {int(past.sum())} values written past column {N - 1}, first in row {row}, column {col}: "
                "mask the ragged last tile (columns >= N) in both tl.load and tl.store",
            )
        compare(got[:, :N], want, what, atol=1e-7, rtol=1e-6, poison=POISON)
    done.append(f"out = max(c + bias, 0) for (M, N, row stride) {SHAPES} and a hidden one, in tiles of {BLOCK_N}")
    done.append("nothing written past column N - 1 of any row: the ragged last tile is masked")
    return done
