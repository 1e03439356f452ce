"""TMA tensor maps for the Hopper kernels (wgmma_tma.cu): what the copy engine needs to fetch a
tile of an operand by its coordinates alone.

A tensor map (the driver's ``CUtensorMap``, 128 opaque bytes) describes a tensor in device memory:
its address, extents and strides, the box one copy moves, and how the box is laid out in shared
memory. Only the driver can encode one (``cuTensorMapEncodeTiled``); the framework reaches the
driver API through NVIDIA's cuda-bindings, as ``graphs.py`` does for CUDA graphs. A kernel takes
the encoded bytes by value (a ``__grid_constant__`` parameter), which ``runtime.DriverKernel``
hands the driver as one argument of 128 bytes.

``swizzled_stack`` works out and checks the encoding's arguments (pure Python, tested on the CPU);
``encode`` hands them to the driver.
"""

from __future__ import annotations

import dataclasses
import functools
import struct

TENSOR_MAP_BYTES = 128
SWIZZLE_SPAN = 128  # bytes: the 128-byte swizzle permutes the 16-byte chunks of each 128-byte row
FLOAT_BYTES = 4
MAX_BOX = 256  # elements along any axis of a box


@dataclasses.dataclass(frozen=True)
class TiledMap:
    """The arguments of cuTensorMapEncodeTiled for a stack of float32 matrices, innermost axis
    first (the driver's order): extents in elements, strides of the outer axes in bytes."""

    address: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]


def swizzled_stack(address: int, rows: int, cols: int, matrices: int, matrix_stride: int, box_rows: int,
                   box_cols: int, row_stride: int | None = None) -> TiledMap:  # fmt: skip
    """A map of ``matrices`` row-major ``rows`` x ``cols`` float32 matrices, ``matrix_stride``
    floats apart, rows ``row_stride`` floats apart (``cols`` where None), whose box is
    ``box_rows`` rows of ``box_cols`` floats: one 128-byte swizzled row per row of the box. For A
    or B^T (cols = K) that is the K-major layout wgmma reads; for B of ``a @ b`` (rows = K,
    cols = N) it is 32 columns of N, which wgmma_tma.cu's N-major build loads into registers. A
    row stride past ``cols`` makes the matrices slices of a wider one: K-slices of A, side by
    side, for a split-K product. Raises ValueError with the rule a problem breaks."""
    row_stride = cols if row_stride is None else row_stride
    if min(rows, cols, matrices) < 1:
        raise ValueError(f"a tensor map needs a non-empty tensor, not {matrices} x {rows} x {cols}")
    if address % 16:
        raise ValueError(f"TMA needs a 16-byte aligned operand; this one starts at {address:#x}")
    if (row_stride * FLOAT_BYTES) % 16 or (matrix_stride * FLOAT_BYTES) % 16:
        raise ValueError(
            f"TMA strides are whole 16 bytes: rows {row_stride} floats and matrices {matrix_stride} floats apart"
        )
    if row_stride < cols:
        raise ValueError(f"rows of {cols} floats cannot lie {row_stride} floats apart")
    if box_cols * FLOAT_BYTES != SWIZZLE_SPAN:
        raise ValueError(f"a 128-byte swizzled box is {SWIZZLE_SPAN // FLOAT_BYTES} floats wide, not {box_cols}")
    if not 1 <= box_rows <= MAX_BOX:
        raise ValueError(f"a box has 1 to {MAX_BOX} rows, not {box_rows}")
    matrix_bytes = FLOAT_BYTES * (matrix_stride if matrices > 1 else rows * row_stride)  # one matrix: any valid stride
    return TiledMap(address, (cols, rows, matrices), (row_stride * FLOAT_BYTES, matrix_bytes), (box_cols, box_rows, 1))


@functools.lru_cache(maxsize=64)  # a map only describes memory: the same arguments, the same bytes
def encode(tiled: TiledMap) -> bytes:
    """The driver's encoding of ``tiled``: float32, 128-byte swizzle, boxes read through L2 in
    256-byte lines, elements outside the tensor filled with zeros."""
    from .driver import bindings, check

    cu = bindings()
    rank = len(tiled.dims)
    encoded = check(
        cu.cuTensorMapEncodeTiled(
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            rank,
            tiled.address,
            [cu.cuuint64_t(d) for d in tiled.dims],
            [cu.cuuint64_t(s) for s in tiled.strides],
            [cu.cuuint32_t(b) for b in tiled.box],
            [cu.cuuint32_t(1)] * rank,  # every element of the box, none skipped
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,  # NONE: zeros
        ),
        f"cuTensorMapEncodeTiled({tiled})",
    )
    return struct.pack("<16Q", *(int(word) for word in encoded.opaque))
