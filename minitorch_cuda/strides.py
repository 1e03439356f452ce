"""Row-major strides in elements, shared by the CUDA backend's ``DeviceArray`` and the
tile models' ``TileArray``; no PyCUDA needed to import it."""

from __future__ import annotations


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))
