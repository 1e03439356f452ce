"""Row-major strides in elements, shared by the CUDA backend's ``DeviceArray`` and the
tile models' ``TileArray``; no PyCUDA needed to import it."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)  # a step asks for the same few shapes on every launch
def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))
