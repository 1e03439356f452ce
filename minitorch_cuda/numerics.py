"""Rounding float32 to narrower formats, two ways: on the bits and in float64.

``round_mantissa`` is what chapter 19 uses to emulate TF32 and BF16 products on
the CPU, and the answer key of exercise 19.1; ``tf32_reference`` reaches the
same values without looking at the bits, so the checker of that exercise does
not compare a submission with a copy of the answer. The check refuses a
submission that uses this module.
"""

from __future__ import annotations

import numpy as np


def round_mantissa(x, bits: int) -> np.ndarray:
    """float32 values rounded to nearest (ties to even) with ``bits`` explicit mantissa
    bits, as numpy float32: 10 for TF32, 7 for BF16, 23 leaves them as they are."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - bits
    if drop <= 0:
        return np.asarray(x, dtype=np.float32)
    half = (1 << (drop - 1)) - 1
    u = (u + half + ((u >> drop) & 1)) & ~np.uint64((1 << drop) - 1)
    return u.astype(np.uint32).view(np.float32)


def tf32_reference(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to TF32 (10 mantissa bits, ties to even) in float64 arithmetic,
    without looking at the bits: near ``|x|`` in ``[2**(e-1), 2**e)`` TF32 values are
    ``2**(e-11)`` apart, and never closer than the subnormal spacing ``2**-136``."""
    x64 = np.asarray(x, dtype=np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):  # frexp of inf
        _, e = np.frexp(x64)
    spacing = np.ldexp(1.0, np.maximum(e, -125) - 11)
    rounded = np.round(x64 / spacing) * spacing  # both steps exact; np.round ties to even
    rounded = np.where(np.abs(rounded) >= 2.0**128, np.copysign(np.inf, x64), rounded)  # past the largest TF32
    return np.where(np.isfinite(x64), rounded, x64).astype(np.float32)
