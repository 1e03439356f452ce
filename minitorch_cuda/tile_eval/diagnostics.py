"""The same two mistakes in every model, and the message each one gives.

1. ``undefined_name``: the triad refers to ``bb``, a name that does not exist.
2. ``tile_not_power_of_two``: a tile of 1000 elements (tile models only: a
   CUDA C block of 1000 threads is legal).

Each function returns the first lines of the error, or what happened instead.
The CUDA C one needs only nvcc; the Triton one runs in the interpreter too.
"""

from __future__ import annotations

import re
import traceback

import numpy as np

from . import cuda_c

MAX_LINES = 14


def _message(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    lines = text.splitlines()
    return "\n".join(
        lines[:MAX_LINES] + ([f"... ({len(lines) - MAX_LINES} more lines)"] if len(lines) > MAX_LINES else [])
    )


def cuda_c_undefined_name() -> str:
    source = cuda_c.module_source(["triad_fp32"]).replace("return T(a + s * b);", "return T(a + s * bb);")
    try:
        cuda_c.nvcc_compile(source)
    except Exception as exc:
        # the compiler's own lines, with the temporary file's path shortened to its name
        lines = str(exc).removeprefix("nvcc failed:").strip().splitlines()[:MAX_LINES]
        return "\n".join(re.sub(r'"?[^\s"]*/k\.cu"?', "k.cu", line) for line in lines)
    return "compiled without an error"


def triton_undefined_name(make_array) -> str:
    """``make_array(values, dtype)`` gives a TileArray on the GPU or a HostArray in the interpreter."""
    import triton
    import triton.language as tl

    @triton.jit
    def triad_with_typo(out_ptr, a_ptr, b_ptr, scalar, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)  # noqa: F841 (b is loaded, bb is used: the mistake)
        tl.store(out_ptr + offs, a + scalar * bb, mask=mask)  # noqa: F821 (the deliberate mistake)

    x = make_array(np.ones(64, np.float32), "fp32")
    try:
        triad_with_typo[(1,)](x, x, x, 0.5, 64, BLOCK=64)
    except Exception as exc:
        return _message(exc)
    return "ran without an error"


def triton_tile_not_power_of_two(make_array) -> str:
    from . import triton_kernels

    x = make_array(np.ones(1000, np.float32), "fp32")
    try:
        triton_kernels.stream("copy", x, [x], 0.0, block=1000)
    except Exception as exc:
        return _message(exc)
    return "ran without an error"


def cupy_undefined_name() -> str:
    import cupy as cp

    kernel = cp.ElementwiseKernel("T a, T b, T s", "T out", "out = a + s * bb", "triad_with_typo")
    x = cp.ones(64, cp.float32)
    try:
        kernel(x, x, cp.float32(0.5), x)
    except Exception as exc:
        return _message(exc)
    return "ran without an error"


def cutile_undefined_name(make_array) -> str:
    import cuda.tile as ct

    @ct.kernel
    def triad_with_typo(out, a, b, scalar, tile: ct.Constant[int]):
        i = ct.bid(0)
        x = ct.load(a, index=(i,), shape=(tile,))
        ct.store(out, index=(i,), tile=x + scalar * bb)  # noqa: F821 (the deliberate mistake)

    x = make_array(np.ones(64, np.float32), "fp32")
    try:
        ct.launch(0, (1, 1, 1), triad_with_typo, (x, x, x, 0.5, 64))
    except Exception as exc:
        return _message(exc)
    return "ran without an error"


def cutile_tile_not_power_of_two(make_array) -> str:
    from . import cutile_kernels

    x = make_array(np.ones(1000, np.float32), "fp32")
    try:
        cutile_kernels.stream("copy", x, [x], 0.0, tile=1000)
    except Exception as exc:
        return _message(exc)
    return "ran without an error"
