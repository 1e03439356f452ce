"""The grader's own launch of Exercise 20.2's kernel, in the subject process.

The check runs the cell's ``bias_relu_kernel`` on its own arrays, with its own grid and tile widths,
in Triton's interpreter: what is graded is what the kernel computes, whatever the cell's launcher
does around it (a launcher that computes the answer on the host with numpy earns nothing here). The
launcher is made after the cell has run, so no code of the cell holds it; the subject keeps Triton
and numpy as installed (its snapshot) and the cell's code away from frames (``subject_rules``).
"""

from __future__ import annotations

import os

import numpy as np

from .interop import HostArray


def load_triton() -> None:
    """Import Triton to run kernels in its interpreter (this process has no GPU), before the cell."""
    os.environ["TRITON_INTERPRET"] = "1"  # read when triton is first imported
    import triton  # noqa: F401


def launcher(kernel):
    """``launch(out, c, bias, block_n) -> out``: ``kernel`` run over (rows, tiles of ``block_n`` columns)
    of the first ``bias.size`` columns, as the notebook's launcher runs it."""
    from triton.runtime.interpreter import InterpretedFunction

    def launch(out: np.ndarray, c: np.ndarray, bias: np.ndarray, block_n: int) -> np.ndarray:
        if type(kernel) is not InterpretedFunction:
            raise TypeError(
                f"bias_relu_kernel is a {type(kernel).__name__}, not a @triton.jit kernel run by Triton's "
                "interpreter: define it with @triton.jit (and TRITON_INTERPRET=1 set before triton is imported)"
            )
        out = np.ascontiguousarray(out, np.float32)
        c, bias = np.ascontiguousarray(c, np.float32), np.ascontiguousarray(bias, np.float32)
        rows, n = c.shape[0], bias.size
        grid = (rows, -(-n // int(block_n)))
        arrays = HostArray(out, "fp32"), HostArray(c, "fp32"), HostArray(bias, "fp32")
        kernel[grid](*arrays, n, c.shape[1], out.shape[1], BLOCK_N=int(block_n))
        return out

    return launch
