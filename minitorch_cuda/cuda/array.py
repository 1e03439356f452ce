"""``DeviceArray``: a strided view of float32 device memory (the CUDA backend's array).

Shape and strides count elements, like numpy's but not in bytes. Views
(reshape, transpose, row ranges) share the buffer; ``offset`` says where the
view starts in it.
"""

from __future__ import annotations

import math

from ..strides import contiguous_strides
from .memory import DeviceBuffer

ITEMSIZE = 4  # float32 and int32 alike


class DeviceArray:
    # masked_by, set by the lean step's masked products only: the ReLU output whose mask
    # (> 0) this gradient already carries (ops_math.relu_backward then launches nothing)
    __slots__ = ("buffer", "shape", "strides", "offset", "size", "masked_by")

    def __init__(self, buffer: DeviceBuffer, shape: tuple[int, ...], strides=None, offset: int = 0):
        self.buffer = buffer
        self.shape = shape
        self.strides = contiguous_strides(shape) if strides is None else strides
        self.offset = offset
        self.size = math.prod(shape)

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> DeviceArray:
        return cls(DeviceBuffer(ITEMSIZE * max(math.prod(shape), 1)), shape)

    @property
    def ptr(self) -> int:
        return self.buffer.ptr + ITEMSIZE * self.offset

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        row_major = contiguous_strides(self.shape)
        return self.strides == row_major or all(
            stride == expected or dim == 1 for dim, stride, expected in zip(self.shape, self.strides, row_major)
        )

    def view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int | None = None) -> DeviceArray:
        return DeviceArray(self.buffer, shape, strides, self.offset if offset is None else offset)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, strides={self.strides}, offset={self.offset})"
