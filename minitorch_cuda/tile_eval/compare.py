"""Correctness as the evaluation asks for it: bitwise, or in units in the last place.

Two results of the same kernel on the same inputs are compared element by
element. Floating-point results are compared through their bit patterns mapped
to a monotonic integer line, where the distance is the number of representable
values between them (ULPs); integers by their difference.
"""

from __future__ import annotations

import numpy as np

from .cases import DTYPES, scalar_for, stream_inputs

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def ordered_bits(x: np.ndarray) -> np.ndarray:
    """Float bit patterns as signed integers that sort like the floats (-0 and +0 both 0)."""
    size = x.dtype.itemsize
    bits = x.view(_INT[size]).astype(np.int64)
    magnitude = bits & np.int64((1 << (8 * size - 1)) - 1)  # drop the sign bit (sign-extended here)
    return np.where(bits < 0, -magnitude, magnitude)


def differences(got: np.ndarray, want: np.ndarray, dtype: str) -> dict:
    """How far ``got`` is from ``want`` (same shape, host types from ``cases.host_dtype``)."""
    if got.shape != want.shape:
        raise ValueError(f"shapes differ: {got.shape} and {want.shape}")
    size = got.dtype.itemsize
    same_bits = got.view(_UINT[size]) == want.view(_UINT[size])
    out = {"elements": int(got.size), "bitwise_equal": bool(same_bits.all()), "differing": int((~same_bits).sum())}
    if DTYPES[dtype].is_float:
        nan_got, nan_want = _isnan(got, dtype), _isnan(want, dtype)
        both = nan_got & nan_want
        dist = np.abs(ordered_bits(got) - ordered_bits(want))
        dist = np.where(both, 0, dist)
        out["max_ulp"] = int(dist.max()) if dist.size else 0
        out["nan_mismatch"] = int((nan_got != nan_want).sum())
    else:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        out["max_abs_diff"] = int(diff.max()) if diff.size else 0
    if out["differing"]:
        first = int(np.flatnonzero(~same_bits)[0])
        out["first_difference"] = {
            "index": first,
            "got_bits": hex(int(got.view(_UINT[size])[first])),
            "want_bits": hex(int(want.view(_UINT[size])[first])),
        }
    return out


def _isnan(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":  # uint16 patterns: exponent all ones and a non-zero fraction
        bits = x.view(np.uint16)
        return ((bits & 0x7F80) == 0x7F80) & ((bits & 0x007F) != 0)
    return np.isnan(x)


def fp16_nstream_roundings(n: int, prefix: int, contracted: bool = True) -> dict:
    """CuPy's fp16 nstream (``a = a + b + s * c``) against CUDA C's, both emulated on the host
    for the benchmark's inputs of size ``n`` and compared like the GPU results (first
    ``prefix`` elements, CuPy as ``got``). The two programs round differently:

    - CUDA C (and Triton): ``a + b`` in fp16, then ``s * c`` added by one fused
      multiply-add (ptxas contracts PTX's ``mul.f16`` and ``add.f16`` into HFMA), so
      two roundings to fp16;
    - CuPy: its ``float16`` computes in float32 and rounds to fp16 once, at the end.

    ``contracted=False`` emulates CUDA C without the fused multiply-add (``s * c`` rounded
    to fp16 on its own), the alternative the recorded comparison rules out.
    """
    a, b, c = (x[:prefix] for x in stream_inputs("nstream", "fp16", n, seed=n.bit_length()))
    s = scalar_for("fp16")
    # the product of two fp16 values is exact in float64, so one rounding follows, as in HFMA
    product = s * c.astype(np.float64) if contracted else (np.float16(s) * c).astype(np.float64)
    cuda_c = ((a + b).astype(np.float64) + product).astype(np.float16)
    wide = (a.astype(np.float32) + b.astype(np.float32) + np.float32(s) * c.astype(np.float32)).astype(np.float16)
    return differences(wide, cuda_c, "fp16")
