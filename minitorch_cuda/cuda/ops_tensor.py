"""CUDA ops that create, move and re-view arrays: creation, transfer, layout, row gathers."""

from __future__ import annotations

import numpy as np

from .. import stages
from . import launch_core, launchers
from .array import ITEMSIZE, DeviceArray
from .memory import DeviceBuffer
from .runtime import copy_dtod, copy_dtoh, copy_htod, synchronize


def elementwise_at_stage(name: str, n: int, *args) -> None:
    """An elementwise kernel, from stage 9 in its float4 variant where it has one and every
    array argument is 16-byte aligned (fresh buffers are; row slices of odd widths may not be)."""
    arrays = [a for a in args if hasattr(a, "ptr")]
    if stages.vectorized_kernels() and launchers.has_vec4(name) and launch_core.aligned16(*arrays):
        launchers.elementwise_vec4(f"{name}_vec4", n, *args)
    else:
        launchers.elementwise(name, n, *args)


def empty(shape: tuple[int, ...]) -> DeviceArray:
    return DeviceArray.empty(shape)


def full(shape: tuple[int, ...], value: float) -> DeviceArray:
    out = DeviceArray.empty(shape)
    fill_(out, value)
    return out


def from_numpy(array: np.ndarray) -> DeviceArray:
    # ascontiguousarray makes a 0-d array 1-d: keep the shape, e.g. () for a scalar tensor
    host = np.ascontiguousarray(array, dtype=np.float32).reshape(np.shape(array))
    out = DeviceArray.empty(host.shape)
    copy_htod(out.ptr, host)
    return out


def to_numpy(x: DeviceArray) -> np.ndarray:
    x = contiguous(x)
    host = np.empty(x.shape, dtype=np.float32)
    copy_dtoh(host, x.ptr)
    return host


def assign(dst: DeviceArray, src: np.ndarray) -> None:
    """Overwrite a contiguous array with host data of the same shape."""
    if not dst.is_contiguous():
        raise ValueError(f"assign needs a contiguous tensor; this view has strides {dst.strides}")
    copy_htod(dst.ptr, np.ascontiguousarray(src, dtype=np.float32))


def item(x: DeviceArray, flat_index: int) -> float:
    """One element read back to the host (a blocking 4-byte copy)."""
    element = x.offset  # the first element, as a loss read back every step is: no index arithmetic
    if flat_index and x.shape:
        element += int(np.dot(np.unravel_index(flat_index, x.shape), x.strides))
    host = np.empty(1, dtype=np.float32)
    copy_dtoh(host, x.buffer.ptr + ITEMSIZE * element)
    return float(host[0])


def randn(shape: tuple[int, ...], std: float, seed: int) -> DeviceArray:
    if not stages.device_init():
        # Stages 0-3: the host draws and copies, exactly as the CPU backend draws.
        return from_numpy(np.random.default_rng(seed).standard_normal(shape) * std)
    out = DeviceArray.empty(shape)
    launchers.elementwise("init_normal", out.size, out, out.size, float(std), seed & 0xFFFFFFFF)
    return out


def fill_(x: DeviceArray, value: float) -> None:
    if not x.is_contiguous():
        raise ValueError("fill_ needs a contiguous tensor")
    elementwise_at_stage("ew_fill", x.size, x, float(value), x.size)


def contiguous(x: DeviceArray) -> DeviceArray:
    if x.is_contiguous():
        return x
    if x.ndim > 4:
        raise ValueError(f"cannot copy a non-contiguous view with {x.ndim} > 4 dimensions on CUDA")
    shape = (1,) * (4 - x.ndim) + x.shape
    strides = (0,) * (4 - x.ndim) + x.strides
    out = DeviceArray.empty(x.shape)
    launchers.elementwise("strided_copy", out.size, out, x, out.size, *shape[1:], *strides)
    return out


def copy(x: DeviceArray) -> DeviceArray:
    if not x.is_contiguous():
        return contiguous(x)
    out = DeviceArray.empty(x.shape)
    copy_dtod(out.ptr, x.ptr, ITEMSIZE * x.size)
    return out


def shares_memory(a: DeviceArray, b: DeviceArray) -> bool:
    return a.buffer is b.buffer


def reshape(x: DeviceArray, shape: tuple[int, ...]) -> DeviceArray:
    x = contiguous(x)
    return DeviceArray(x.buffer, shape, None, x.offset)


def transpose(x: DeviceArray) -> DeviceArray:
    shape, strides = list(x.shape), list(x.strides)
    shape[-1], shape[-2] = shape[-2], shape[-1]
    strides[-1], strides[-2] = strides[-2], strides[-1]
    return x.view(tuple(shape), tuple(strides))


def broadcast_to(x: DeviceArray, shape: tuple[int, ...]) -> DeviceArray:
    """A contiguous copy of ``x`` repeated along its size-1 (or missing) leading axes."""
    padded_shape = (1,) * (len(shape) - x.ndim) + x.shape
    padded_strides = (0,) * (len(shape) - x.ndim) + x.strides
    strides = tuple(0 if d == 1 and t != 1 else s for d, s, t in zip(padded_shape, padded_strides, shape))
    return contiguous(x.view(tuple(shape), strides))


def slice_rows(x: DeviceArray, start: int, stop: int) -> DeviceArray:
    return x.view((stop - start,) + x.shape[1:], x.strides, x.offset + start * x.strides[0])


def take_rows(x: DeviceArray, indices: np.ndarray) -> DeviceArray:
    """Rows ``x[indices]``: one gather launch (stage 2 on) or one blocking copy per row."""
    x = contiguous(x)
    rows = len(indices)
    row_len = x.size // x.shape[0]
    out = DeviceArray.empty((rows,) + x.shape[1:])
    if not stages.gather_kernel():
        row_bytes = ITEMSIZE * row_len
        for r, index in enumerate(indices.tolist()):
            copy_dtod(out.ptr + r * row_bytes, x.ptr + index * row_bytes, row_bytes)
            synchronize("a row copy")  # cudaMemcpy semantics: the host waits for each row
        return out
    d_idx = _upload_indices(indices)
    launchers.elementwise("gather_rows", out.size, out, x, d_idx, rows, row_len)
    return out


def scatter_add_rows(grad: DeviceArray, indices: np.ndarray, n_rows: int) -> DeviceArray:
    """The backward of ``take_rows``: zeros with ``grad``'s rows added at ``indices``."""
    grad = contiguous(grad)
    row_len = grad.size // grad.shape[0]
    out = full((n_rows,) + grad.shape[1:], 0.0)
    d_idx = _upload_indices(indices)
    launchers.elementwise("scatter_add_rows", grad.size, out, grad, d_idx, len(indices), row_len)
    return out


def _upload_indices(indices: np.ndarray) -> DeviceBuffer:
    host = np.ascontiguousarray(indices, dtype=np.int32)
    buffer = DeviceBuffer(host.nbytes)
    copy_htod(buffer.ptr, host)
    return buffer
