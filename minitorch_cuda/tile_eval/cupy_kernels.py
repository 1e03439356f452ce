"""CuPy's ElementwiseKernel: the library baseline.

CuPy writes the loop, the indexing and the launch; the user writes the body
for one element, in CUDA C, and CuPy compiles it with NVRTC on first use.
Our device memory reaches CuPy without a copy through the CUDA array
interface (``cupy.asarray(tile_array)`` wraps the same pointer). CuPy has no
bfloat16 type, so bf16 is not measured here. Importing this module imports cupy.
"""

from __future__ import annotations

import cupy as cp

from .cases import MAX_FIB_N

BODIES = {
    "copy": ("T a", "out = a"),
    "scale": ("T a, T s", "out = s * a"),
    "add": ("T a, T b", "out = a + b"),
    "triad": ("T a, T b, T s", "out = a + s * b"),
    "nstream": ("T a, T b, T c, T s", "out = a + b + s * c"),
}
KERNELS = {op: cp.ElementwiseKernel(params, "T out", body, f"cupy_{op}") for op, (params, body) in BODIES.items()}

FIB = cp.ElementwiseKernel(
    "int64 k",
    "int64 out",
    """
    long long t1 = 0, t2 = 1;
    for (long long j = 3; j <= k; ++j) { long long next = t1 + t2; t1 = t2; t2 = next; }
    out = k < 2 ? 0 : (k == 2 ? 1 : t2);
    """,
    "cupy_fib",
)
assert MAX_FIB_N < 93  # fib(92) is the last that fits in int64


def view(array) -> cp.ndarray:
    """Our TileArray as a CuPy array on the same memory (no copy)."""
    return cp.asarray(array)


def stream(op: str, out, inputs: list, scalar) -> None:
    args = [view(a) for a in inputs]
    if "s" in BODIES[op][0]:
        args.append(args[0].dtype.type(scalar))
    KERNELS[op](*args, view(out))


def fib(out, inp) -> None:
    FIB(view(inp), view(out))
