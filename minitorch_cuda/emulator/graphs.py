"""The part of cuda-bindings' driver API that stage 11 uses (cuda/graphs.py), on the emulator.

Stream capture as CUDA does it: between ``cuStreamBeginCapture`` and
``cuStreamEndCapture`` the work issued to the stream (launches and device-to-device
copies) is recorded, not run; ``cuGraphLaunch`` runs the recording in order, with
the addresses and arguments it was captured with.
"""

from __future__ import annotations

import enum

from .driver import Stream


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_ILLEGAL_STATE = 401


class CUstreamCaptureMode(enum.IntEnum):
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
    CU_STREAM_CAPTURE_MODE_RELAXED = 2


def CUstream(handle: int) -> Stream | None:  # noqa: N802  (the bindings' name)
    return Stream.by_handle(handle)


def cuStreamBeginCapture(stream: Stream | None, mode: CUstreamCaptureMode) -> tuple:  # noqa: N802
    if stream is None or stream.captured is not None:  # the legacy stream cannot be captured
        return (CUresult.CUDA_ERROR_ILLEGAL_STATE,)
    stream.captured = []
    return (CUresult.CUDA_SUCCESS,)


def cuStreamEndCapture(stream: Stream | None) -> tuple:  # noqa: N802
    if stream is None or stream.captured is None:
        return (CUresult.CUDA_ERROR_ILLEGAL_STATE, None)
    graph, stream.captured = tuple(stream.captured), None
    return (CUresult.CUDA_SUCCESS, graph)


def cuGraphInstantiate(graph: tuple, flags: int) -> tuple:  # noqa: N802
    return (CUresult.CUDA_SUCCESS, graph)


def cuGraphLaunch(graph: tuple, stream: Stream | None) -> tuple:  # noqa: N802
    for work in graph:
        work()  # a failing kernel raises the driver's LaunchError, naming it
    return (CUresult.CUDA_SUCCESS,)


def cuGraphExecDestroy(graph: tuple) -> tuple:  # noqa: N802
    return (CUresult.CUDA_SUCCESS,)


cuGraphDestroy = cuGraphExecDestroy


def cuGetErrorName(error: CUresult) -> tuple:  # noqa: N802
    return (CUresult.CUDA_SUCCESS, CUresult(error).name.encode())
