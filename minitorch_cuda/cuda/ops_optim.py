"""CUDA optimizer ops: gradient clipping (host or device), RmsProp, SGD, multi-tensor apply."""

from __future__ import annotations

import math

import numpy as np

from .. import stages
from . import launchers
from .array import ITEMSIZE, DeviceArray
from .kernel_table import MULTI_TENSOR_SLOTS
from .ops_math import reduction_variant
from .ops_tensor import assign, full, to_numpy
from .runtime import multiprocessors


def clip_gradients(grads: list[DeviceArray], max_norm: float) -> None:
    """Scale all gradients in place so that their global L2 norm is at most ``max_norm``."""
    if not stages.device_clipping():
        _clip_on_host(grads, max_norm)
        return
    if stages.fused_kernels():  # two launches for all gradients together
        partials, n_partials = _multi_sumsq(grads)
        chunks = _chunks(grads)
        for group in _groups(grads):
            launchers.multi_clip_scale(partials, n_partials, max_norm, _contiguous(group), _sizes(group), chunks)
        return
    partials = DeviceArray.empty((len(grads),))
    for i, g in enumerate(grads):
        launchers.sumsq(reduction_variant("sumsq"), partials.ptr + ITEMSIZE * i, g, g.size)
    for g in grads:
        launchers.elementwise("clip_scale", g.size, g, partials, len(grads), float(max_norm), g.size)


def _clip_on_host(grads: list[DeviceArray], max_norm: float) -> None:
    """Stage 0, as the blog's first version did it: every gradient crosses the bus
    twice and the host touches each element in a Python loop."""
    host = [to_numpy(g) for g in grads]
    total = 0.0
    for h in host:
        for value in h.ravel().tolist():
            total += value * value
    norm = math.sqrt(total)
    if norm <= max_norm:
        return
    factor = max_norm / (norm + 1e-6)
    for g, h in zip(grads, host):
        scaled = np.array([value * factor for value in h.ravel().tolist()], dtype=np.float32)
        assign(g, scaled.reshape(h.shape))


def rmsprop_step(p: DeviceArray, g: DeviceArray, v: DeviceArray, lr: float, decay: float, eps: float) -> None:
    launchers.elementwise("rmsprop_step", p.size, p, g, v, float(lr), float(decay), float(eps), p.size)


def rmsprop_multi(
    params: list[DeviceArray],
    grads: list[DeviceArray],
    states: list[DeviceArray],
    lr: float,
    decay: float,
    eps: float,
    max_norm: float | None = None,
) -> None:
    """Clip all gradients to a global norm (if ``max_norm``) and take an RmsProp step for
    every parameter: two launches (one without clipping) for up to 8 tensors; from the lean
    step on one, the sums of squares and the update on either side of a grid barrier."""
    if max_norm is not None and stages.lean_step() and len(params) <= MULTI_TENSOR_SLOTS:
        partials = DeviceArray.empty((multiprocessors(),))  # one per block
        launchers.multi_clip_rmsprop_grid(
            partials, _grid_barrier(), max_norm, lr, decay, eps,
            _contiguous(params), _contiguous(grads), _contiguous(states), _sizes(params),
        )  # fmt: skip
        return
    partials, n_partials = _multi_sumsq(grads) if max_norm is not None else (None, 0)
    chunks = _chunks(grads)
    for start in range(0, len(params), MULTI_TENSOR_SLOTS):
        group = slice(start, start + MULTI_TENSOR_SLOTS)
        launchers.multi_clip_rmsprop(
            partials, n_partials, max_norm or 0.0, lr, decay, eps,
            _contiguous(params[group]), _contiguous(grads[group]), _contiguous(states[group]),
            _sizes(params[group]), chunks,
        )  # fmt: skip


_barrier: list[DeviceArray] = []


def _grid_barrier() -> DeviceArray:
    """multi_clip_rmsprop_grid's GridBarrier {count, generation}: zeroed once, left zeroed."""
    if not _barrier:
        _barrier.append(full((2,), 0.0))
    return _barrier[0]


def _groups(arrays: list) -> list[list]:
    return [arrays[i : i + MULTI_TENSOR_SLOTS] for i in range(0, len(arrays), MULTI_TENSOR_SLOTS)]


def _contiguous(arrays: list[DeviceArray]) -> list[DeviceArray]:
    for x in arrays:
        if not x.is_contiguous():
            raise ValueError("multi-tensor kernels need contiguous tensors")
    return arrays


def _sizes(arrays: list[DeviceArray]) -> list[int]:
    return [x.size for x in arrays]


def _chunks(arrays: list[DeviceArray]) -> int:
    return launchers.multi_chunks(_sizes(arrays))


def _multi_sumsq(grads: list[DeviceArray]) -> tuple[DeviceArray, int]:
    """Partial sums of squares of all gradients: one launch per 8 tensors."""
    chunks = _chunks(grads)
    partials = DeviceArray.empty((chunks * len(grads),))
    for g, group in enumerate(_groups(grads)):
        start = partials.ptr + ITEMSIZE * g * MULTI_TENSOR_SLOTS * chunks
        launchers.multi_sumsq(start, _contiguous(group), _sizes(group), chunks)
    return partials, chunks * len(grads)


def sgd_step(p: DeviceArray, g: DeviceArray, lr: float) -> None:
    launchers.elementwise("sgd_step", p.size, p, g, float(lr), p.size)
