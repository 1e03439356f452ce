"""``Tensor``: an n-dimensional float32 array on a device, with autograd.

A tensor holds a backend array (``numpy.ndarray`` on the CPU, ``DeviceArray``
on CUDA) and calls ``self.backend.op(...)``; it never asks which device it is
on. Everything the user can get wrong (shapes, devices, dtypes, indices) is
checked here, before any work reaches the GPU.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import functions as F
from .autograd import backward as _backward
from .device import Device, as_device, backend_for, cpu


def _as_float32(data) -> np.ndarray:
    array = np.asarray(data)
    if array.dtype.kind not in "biuf":
        raise TypeError(
            f"tensors hold real numbers; got data of dtype {array.dtype} "
            "(convert it to a float or integer numpy array first)"
        )
    if array.size == 0:
        raise ValueError(f"empty tensors are not supported (shape {array.shape})")
    return array.astype(np.float32, copy=False)


def _check_shape(shape) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    if not all(isinstance(d, numbers.Integral) for d in shape):
        raise TypeError(f"shape must be integers, got {shape}")
    if any(d <= 0 for d in shape):
        raise ValueError(f"every dimension must be positive (empty tensors are not supported), got {shape}")
    return tuple(int(d) for d in shape)


def _check_scalar(value, op: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: expected a Tensor or a real number, got {type(value).__name__}")
    return float(value)


class Tensor:
    __slots__ = ("data", "device", "backend", "requires_grad", "grad", "_node", "__weakref__")

    def __init__(self, data, device: Device = cpu, requires_grad: bool = False):
        """Wrap a backend array; use ``tensor()``, ``zeros()`` ... to create one from data."""
        self.data = data
        self.device = device
        self.backend = backend_for(device)
        self.requires_grad = requires_grad
        self.grad: Tensor | None = None
        self._node = None

    # --- properties ----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return len(self.data.shape)

    @property
    def size(self) -> int:
        return math.prod(self.data.shape)

    @property
    def T(self) -> Tensor:
        return self.transpose()

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor(shape={self.shape}, device={self.device}{grad})"

    def __len__(self) -> int:
        return self.shape[0]

    # --- transfer --------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        return self.backend.to_numpy(self.data)

    def tolist(self):
        return self.numpy().tolist()

    def to(self, device: str | Device) -> Tensor:
        device = as_device(device)
        if device == self.device:
            return self
        out = Tensor(backend_for(device).from_numpy(self.numpy()), device)
        out.requires_grad = self.requires_grad
        return out

    def item(self) -> float:
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.backend.item(self.data, 0)

    def __float__(self) -> float:  # float(loss), as in PyTorch: the one element, read back as item() does
        return self.item()

    def detach(self) -> Tensor:
        return Tensor(self.data, self.device)

    def assign(self, values) -> None:
        """Overwrite this tensor's contents in place (no graph), e.g. to load weights."""
        host = _as_float32(values)
        if host.shape != self.shape:
            raise ValueError(f"assign: expected values of shape {self.shape}, got {host.shape}")
        self.backend.assign(self.data, host)

    def fill_(self, value: float) -> Tensor:
        self.backend.fill_(self.data, _check_scalar(value, "fill_"))
        return self

    # --- autograd --------------------------------------------------------------------
    def backward(self, grad: Tensor | None = None) -> None:
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (no graph to walk)")
        if grad is None:
            if self.size != 1:
                raise ValueError(f"backward() without a gradient needs a single-element tensor, got {self.shape}")
            # a leaf keeps its seed as .grad; a computed root's seed is only read (a backend may share it)
            seed = self.backend.full(self.shape, 1.0) if self._node is None else self.backend.backward_seed(self.shape)
        else:
            if grad.shape != self.shape or grad.device != self.device:
                raise ValueError(f"gradient must have shape {self.shape} on {self.device}")
            # A leaf keeps its seed as .grad, later scaled in place: never alias the caller's tensor.
            seed = grad.data if self._node is not None else self.backend.copy(grad.data)
        _backward(self, seed)

    # --- elementwise -----------------------------------------------------------------
    def _binary(self, other, op: str) -> Tensor:
        if not isinstance(other, Tensor):
            value = _check_scalar(other, op)
            if op == "add":
                return F.Affine.apply(self, alpha=1.0, beta=value)
            if op == "sub":
                return F.Affine.apply(self, alpha=1.0, beta=-value)
            if op == "mul":
                return F.Affine.apply(self, alpha=value, beta=0.0)
            if value == 0.0:
                raise ZeroDivisionError("division of a tensor by the scalar 0")
            return F.Affine.apply(self, alpha=1.0 / value, beta=0.0)
        pattern = F.broadcast_pattern(self.shape, other.shape)
        if pattern is not None:
            return F.Binary.apply(self, other, op=op, pattern=pattern)
        if F.broadcast_pattern(other.shape, self.shape) is not None:
            if op in ("add", "mul"):
                return other._binary(self, op)
            if op == "sub":
                return -(other._binary(self, "sub"))
            return (1.0 / other)._binary(self, "mul")  # a / b == (1 / b) * a
        raise ValueError(
            f"{op}: shapes {self.shape} and {other.shape} do not broadcast; the second operand may be "
            "the same shape, a scalar, a row (last axis) or a column (size 1 in the last axis)"
        )

    def __add__(self, other):
        return self._binary(other, "add")

    def __sub__(self, other):
        return self._binary(other, "sub")

    def __mul__(self, other):
        return self._binary(other, "mul")

    def __truediv__(self, other):
        return self._binary(other, "div")

    __radd__ = __add__
    __rmul__ = __mul__

    def __rsub__(self, other):
        return F.Affine.apply(self, alpha=-1.0, beta=_check_scalar(other, "sub"))

    def __rtruediv__(self, other):
        return F.RDiv.apply(self, s=_check_scalar(other, "div"))

    def __neg__(self):
        return F.Affine.apply(self, alpha=-1.0, beta=0.0)

    def exp(self) -> Tensor:
        return F.Exp.apply(self)

    def log(self) -> Tensor:
        return F.Log.apply(self)

    def relu(self) -> Tensor:
        return F.ReLU.apply(self)

    def sigmoid(self) -> Tensor:
        return F.Sigmoid.apply(self)

    def softmax(self) -> Tensor:
        """Softmax over the last axis."""
        return F.Softmax.apply(self)

    # --- reductions -----------------------------------------------------------------
    def _axis(self, axis) -> int | None:
        if axis is None:
            return None
        if not isinstance(axis, numbers.Integral) or not -self.ndim <= axis < self.ndim:
            raise ValueError(f"axis {axis!r} is out of range for a tensor of shape {self.shape}")
        return int(axis) % self.ndim

    def sum(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return F.Sum.apply(self, axis=self._axis(axis), keepdims=keepdims, scale=1.0)

    def mean(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        axis = self._axis(axis)
        count = self.size if axis is None else self.shape[axis]
        return F.Sum.apply(self, axis=axis, keepdims=keepdims, scale=1.0 / count)

    # --- matmul -------------------------------------------------------------------------
    def matmul(self, other: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
        """``op(self) @ op(other)``; op transposes the last two axes where its flag is set."""
        if not isinstance(other, Tensor):
            raise TypeError(f"matmul: expected a Tensor, got {type(other).__name__}")
        shape_a, shape_b = tuple(self.data.shape), tuple(other.data.shape)  # once: a user's loop pays every line
        if len(shape_a) < 2 or len(shape_b) < 2:
            raise ValueError(f"matmul needs at least 2-D operands, got {shape_a} and {shape_b}")
        k = shape_a[-2] if transpose_a else shape_a[-1]
        k2 = shape_b[-1] if transpose_b else shape_b[-2]
        batch_a, batch_b = shape_a[:-2], shape_b[:-2]
        if k != k2 or (batch_a and batch_b and batch_a != batch_b):
            raise ValueError(
                f"matmul: shapes {shape_a} and {shape_b} (transpose flags {transpose_a}, {transpose_b}) "
                f"do not match: inner sizes {k} and {k2}, batch {batch_a} and {batch_b}"
            )
        return F.MatMul.apply(self, other, ta=bool(transpose_a), tb=bool(transpose_b))

    __matmul__ = matmul

    # --- shape ---------------------------------------------------------------------------
    def reshape(self, *shape) -> Tensor:
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape
        shape = tuple(shape)
        if shape.count(-1) == 1:
            known = math.prod(d for d in shape if d != -1)
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        shape = _check_shape(shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape {self.shape} ({self.size} elements) into {shape}")
        return F.Reshape.apply(self, shape=shape)

    def transpose(self) -> Tensor:
        """A view with the last two axes swapped (no copy)."""
        if self.ndim < 2:
            raise ValueError(f"transpose needs at least 2 dimensions, got shape {self.shape}")
        return F.Transpose.apply(self)

    def contiguous(self) -> Tensor:
        return F.Contiguous.apply(self)

    def __getitem__(self, index):
        """Rows by int, by range (a view) or by a list of indices (a gather);
        a tuple with one int per axis reads one element as a Python float."""
        n = self.shape[0]
        if isinstance(index, tuple):
            if len(index) != self.ndim or not all(isinstance(i, numbers.Integral) for i in index):
                raise IndexError("a tuple index needs one integer per axis")
            flat = 0
            for i, dim in zip(index, self.shape):
                if not -dim <= i < dim:
                    raise IndexError(f"index {index} is out of range for shape {self.shape}")
                flat = flat * dim + (i % dim)
            return self.backend.item(self.data, flat)
        if isinstance(index, numbers.Integral) and not isinstance(index, bool):
            if not -n <= index < n:
                raise IndexError(f"row {index} is out of range for {n} rows")
            index %= n
            return F.SliceRows.apply(self, start=index, stop=index + 1).reshape(self.shape[1:])
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise IndexError("only step-1 slices are supported; use a list of indices to gather")
            if stop <= start:
                raise IndexError(f"slice {index} selects no rows (empty tensors are not supported)")
            return F.SliceRows.apply(self, start=start, stop=stop)
        indices = np.asarray(index.numpy() if isinstance(index, Tensor) else index)
        if indices.ndim != 1 or indices.size == 0 or indices.dtype.kind not in "iu":
            raise IndexError(f"row indices must be a non-empty 1-D list of integers, got dtype {indices.dtype}")
        if indices.min() < -n or indices.max() >= n:
            raise IndexError(f"row indices must lie in [-{n}, {n}), got {indices.min()}..{indices.max()}")
        return F.TakeRows.apply(self, indices=indices % n)


# --- creation --------------------------------------------------------------------------


def tensor(data, device: str | Device | None = None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a float32 copy of ``data`` (numbers, lists or numpy arrays)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    device = as_device(device)
    out = Tensor(backend_for(device).from_numpy(_as_float32(data)), device)
    out.requires_grad = requires_grad
    return out


from_numpy = tensor


def full(shape, value: float, device=None, requires_grad: bool = False) -> Tensor:
    device = as_device(device)
    out = Tensor(backend_for(device).full(_check_shape(shape), _check_scalar(value, "full")), device)
    out.requires_grad = requires_grad
    return out


def zeros(shape, device=None, requires_grad: bool = False) -> Tensor:
    return full(shape, 0.0, device, requires_grad)


def ones(shape, device=None, requires_grad: bool = False) -> Tensor:
    return full(shape, 1.0, device, requires_grad)


_seed_sequence = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Make every later ``randn`` without an explicit seed reproducible."""
    global _seed_sequence
    _seed_sequence = np.random.default_rng(seed)


def randn(shape, std: float = 1.0, seed: int | None = None, device=None, requires_grad: bool = False) -> Tensor:
    """Normal samples with standard deviation ``std``. On CUDA from stage 4 on they are
    drawn on the device, otherwise by numpy on the host (then copied)."""
    device = as_device(device)
    if seed is None:
        seed = int(_seed_sequence.integers(0, 2**31 - 1))
    out = Tensor(backend_for(device).randn(_check_shape(shape), float(std), int(seed)), device)
    out.requires_grad = requires_grad
    return out
