"""CUDA optimizer ops: gradient clipping (host or device), RmsProp, SGD, multi-tensor apply."""

from __future__ import annotations

import math

import numpy as np

from .. import stages
from . import registry
from .array import ITEMSIZE, DeviceArray
from .launchers import BLOCK, NULL_POINTER, _elementwise, _variant
from .ops_tensor import assign, to_numpy
from .runtime import launch
from .kernel_table import MULTI_TENSOR_SLOTS


def clip_gradients(grads: list[DeviceArray], max_norm: float) -> None:
    """Scale all gradients in place so that their global L2 norm is at most ``max_norm``."""
    if not stages.device_clipping():
        _clip_on_host(grads, max_norm)
        return
    if stages.fused_kernels():  # two launches for all gradients together
        partials, n_partials = _multi_sumsq(grads)
        for group in _groups(grads):
            launch(
                registry.get("multi_clip_scale"),
                (_multi_chunks(grads), len(group), 1),
                (BLOCK, 1, 1),
                partials.ptr,
                n_partials,
                float(max_norm),
                *_slot_ptrs(group),
                *_slot_sizes(group),
            )
        return
    partials = DeviceArray.empty((len(grads),))
    sumsq = registry.get(_variant("sumsq"))
    for i, g in enumerate(grads):
        launch(sumsq, (1, 1, 1), (1024, 1, 1), partials.ptr + ITEMSIZE * i, g.ptr, g.size, shapes=(g.shape,))
    for g in grads:
        _elementwise("clip_scale", g.size, g.ptr, partials.ptr, len(grads), float(max_norm), g.size, shapes=(g.shape,))


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
    _elementwise(
        "rmsprop_step", p.size, p.ptr, g.ptr, v.ptr, float(lr), float(decay), float(eps), p.size, shapes=(p.shape,)
    )


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
    every parameter: two launches (one without clipping) for up to 8 tensors."""
    if max_norm is not None:
        partials, n_partials = _multi_sumsq(grads)
    else:
        partials, n_partials = NULL_POINTER, 0
    chunks = _multi_chunks(grads)
    for start in range(0, len(params), MULTI_TENSOR_SLOTS):
        end = start + MULTI_TENSOR_SLOTS
        launch(
            registry.get("multi_clip_rmsprop"),
            (chunks, len(params[start:end]), 1),
            (BLOCK, 1, 1),
            partials.ptr,
            n_partials,
            float(max_norm or 0.0),
            float(lr),
            float(decay),
            float(eps),
            *_slot_ptrs(params[start:end]),
            *_slot_ptrs(grads[start:end]),
            *_slot_ptrs(states[start:end]),
            *_slot_sizes(params[start:end]),
        )


def _groups(arrays: list) -> list[list]:
    return [arrays[i : i + MULTI_TENSOR_SLOTS] for i in range(0, len(arrays), MULTI_TENSOR_SLOTS)]


def _multi_chunks(arrays: list[DeviceArray]) -> int:
    """Blocks per tensor: enough for the largest at 4 elements a thread, at most 128."""
    return max(1, min(128, -(-max(x.size for x in arrays) // (4 * BLOCK))))


def _slot_ptrs(arrays: list[DeviceArray]) -> list[int]:
    for x in arrays:
        if not x.is_contiguous():
            raise ValueError("multi-tensor kernels need contiguous tensors")
    return [x.ptr for x in arrays] + [0] * (MULTI_TENSOR_SLOTS - len(arrays))


def _slot_sizes(arrays: list[DeviceArray]) -> list[int]:
    return [x.size for x in arrays] + [0] * (MULTI_TENSOR_SLOTS - len(arrays))


def _multi_sumsq(grads: list[DeviceArray]) -> tuple[DeviceArray, int]:
    """Partial sums of squares of all gradients: one launch per 8 tensors."""
    chunks = _multi_chunks(grads)
    partials = DeviceArray.empty((chunks * len(grads),))
    for g, group in enumerate(_groups(grads)):
        launch(
            registry.get("multi_sumsq"),
            (chunks, len(group), 1),
            (BLOCK, 1, 1),
            partials.ptr + ITEMSIZE * g * MULTI_TENSOR_SLOTS * chunks,
            *_slot_ptrs(group),
            *_slot_sizes(group),
        )
    return partials, chunks * len(grads)


def sgd_step(p: DeviceArray, g: DeviceArray, lr: float) -> None:
    _elementwise("sgd_step", p.size, p.ptr, g.ptr, float(lr), p.size, shapes=(p.shape,))
