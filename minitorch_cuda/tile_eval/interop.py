"""Zero-copy views that let Triton, cuTile and CuPy work on our device memory.

The framework's ``DeviceArray`` is float32 only and knows nothing of other
libraries. ``TileArray`` is a typed view of a raw device pointer that speaks
the three protocols the tile models understand:

* ``__cuda_array_interface__`` (CuPy, cuTile, Numba): a dict with the pointer,
  shape, strides in bytes and the numpy type string;
* ``data_ptr()`` and ``dtype`` (Triton): Triton only needs the address and the
  element type, which it reads from ``str(dtype)``;
* ``ptr`` / ``shape`` / ``strides`` in elements, like ``DeviceArray``.

None of them copies: the other library gets the same address our kernels use.
``HostArray`` is the same duck type over a numpy array, so that Triton's
interpreter (``TRITON_INTERPRET=1``) runs the very same kernels on the CPU.
"""

from __future__ import annotations

import math

import numpy as np

from ..strides import contiguous_strides
from .cases import DTYPES, numpy_dtype


class _TritonDtype:
    """What Triton reads from ``arg.dtype``: only ``str()`` of it matters."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


# One object per type, alive for the whole process: Triton caches what it read
# from a dtype by the object's identity, so a freed dtype whose id is reused by
# another type would be taken for the old one.
_TRITON_DTYPES = {name: _TritonDtype(d.triton) for name, d in DTYPES.items()}


class TileArray:
    """A typed, contiguous view of device memory at ``ptr`` (owned by ``owner``)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: str, owner=None):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
        self.ptr, self.shape, self.kind = int(ptr), tuple(shape), dtype
        self.strides = contiguous_strides(self.shape)
        self.size = math.prod(self.shape)
        self.itemsize = DTYPES[dtype].itemsize
        self.nbytes = self.size * self.itemsize
        self.dtype = _TRITON_DTYPES[dtype]
        self._owner = owner  # keeps the allocation alive as long as the view

    @classmethod
    def from_device_array(cls, array) -> TileArray:
        """The framework's float32 ``DeviceArray`` (contiguous) as a TileArray: same address."""
        if not array.is_contiguous():
            raise ValueError("only contiguous DeviceArrays can be shared without a copy")
        return cls(array.ptr, array.shape, "fp32", owner=array)

    def data_ptr(self) -> int:
        return self.ptr

    @property
    def __cuda_array_interface__(self) -> dict:
        typestr = DTYPES[self.kind].typestr
        if typestr is None:
            raise TypeError(f"{self.kind} has no numpy type string: CUDA array interface consumers cannot take it")
        return {
            "shape": self.shape,
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": None,  # contiguous (C order)
            "version": 3,
        }

    def __repr__(self) -> str:
        return f"TileArray(ptr={self.ptr:#x}, shape={self.shape}, dtype={self.kind})"


class _HostStorage:
    """The part of torch's storage API that Triton's interpreter calls."""

    def __init__(self, array: HostArray):
        self.array = array

    def data_ptr(self) -> int:
        return self.array.data_ptr()

    def cpu(self) -> _HostStorage:
        return self  # already on the host: the interpreter works in place

    def copy_(self, _other) -> None:
        return None  # host and "device" are the same memory here


class HostArray:
    """A numpy array dressed as a tensor for Triton's interpreter (CPU only, no copies)."""

    def __init__(self, values: np.ndarray, dtype: str):
        want = numpy_dtype(dtype)
        values = np.ascontiguousarray(values)
        if values.dtype != want:
            raise TypeError(f"a {dtype} HostArray needs numpy dtype {want}, got {values.dtype}")
        self.values, self.kind = values, dtype
        # numpy has no bfloat16: the interpreter stores bf16 as uint16 bit patterns
        self.dtype = _TRITON_DTYPES[dtype]

    def data_ptr(self) -> int:
        return self.values.ctypes.data

    # --- what triton.runtime.interpreter.GridExecutor calls on tensor arguments ---
    def untyped_storage(self) -> _HostStorage:
        return _HostStorage(self)

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.values.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.values.itemsize for s in self.values.strides)

    def new_empty(self, *_args, **_kwargs) -> HostArray:
        return HostArray(self.values, self.kind)

    def set_(self, storage: _HostStorage, *_args) -> HostArray:
        return self  # new_empty already aliases the same numpy memory
