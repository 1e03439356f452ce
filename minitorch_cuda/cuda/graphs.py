"""CUDA graphs (stage 11): capture a whole training step once, replay it per batch.

PyCUDA has no graph API; NVIDIA's ``cuda-bindings`` has the driver's. Capture
works on any stream by handle: ``cuStreamBeginCapture`` on the stream that
PyCUDA launches into, the step's launches (``prepared_async_call`` on that
stream, see ``runtime.on_stream``), ``cuStreamEndCapture``, then
``cuGraphInstantiate`` once and ``cuGraphLaunch`` per batch.

A captured graph replays fixed addresses, so ``GraphedStep``:

1. copies the first batch of each shape into static input buffers and runs the
   step eagerly on them (a real training step, which also compiles and
   autotunes every kernel) while keeping every buffer it allocates alive;
   dropping them afterwards returns them to the pool, and ``pool.reserve``
   tops it up to as many buffers of each size as the step asked for (in case
   something still holds some of them);
2. captures the same step on its own stream, keeping the buffers of the capture
   alive for as long as the graph lives (``memory.keep_alive``): the pool hands
   out nothing during the capture that it must allocate, and nothing the graph
   writes is ever handed to anyone else;
3. on every later batch: two device-to-device copies into the static inputs,
   one ``cuGraphLaunch``, one 4-byte read-back of the loss.

The stream is created with default flags, so it orders itself with the legacy
default stream: the batch copies before a replay and the loss read-back after
it need no explicit synchronization.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pycuda.driver as drv

from .. import profiler
from . import memory, runtime
from .array import ITEMSIZE, DeviceArray
from .autotune import tuner


def driver():
    """``cuda.bindings.driver``, imported on first use."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:
        raise ImportError(
            "stage 11 captures the training step in a CUDA graph through NVIDIA's cuda-bindings, "
            "which is not installed: pip install 'minitorch-cuda[cuda]' (or pip install cuda-bindings)"
        ) from exc
    return cu


def check(result, what: str):
    """cuda-bindings returns (CUresult, *values): raise on an error, else the values."""
    cu = driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise runtime.KernelError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return values[0] if len(values) == 1 else values


def usable_now() -> bool:
    """Whether a step may be captured or replayed now: not while profiling (the
    profiler's events go to the legacy stream) or debugging with a sync after every launch."""
    return profiler.active() is None and not runtime.DEBUG_SYNC and not runtime.capturing()


class Graph:
    """One captured stream of work: ``with graph.capture(): ...`` then ``graph.launch()``."""

    def __init__(self, stream: drv.Stream | None = None):
        self.stream = stream or drv.Stream()
        self._graph = None
        self._exec = None

    def capture(self):
        return _Capture(self)

    def launch(self) -> None:
        if self._exec is None:
            raise RuntimeError("launch() before a capture finished")
        cu = driver()
        profiler.counters.launches += 1
        check(cu.cuGraphLaunch(self._exec, cu.CUstream(self.stream.handle)), "cuGraphLaunch")

    def __del__(self):
        try:
            cu = driver()
            if self._exec is not None:
                cu.cuGraphExecDestroy(self._exec)
            if self._graph is not None:
                cu.cuGraphDestroy(self._graph)
        except Exception:  # interpreter exit: the context may be gone
            pass


class _Capture:
    def __init__(self, graph: Graph):
        self.graph = graph

    def __enter__(self):
        cu = driver()
        self._handle = cu.CUstream(self.graph.stream.handle)
        self._misses = profiler.counters.pool_misses
        self._stream_ctx = runtime.on_stream(self.graph.stream, capturing=True)
        # Thread-local mode: an allocation or a sync from this thread during the capture
        # is an error, not a silent hazard.
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(cu.cuStreamBeginCapture(self._handle, mode), "cuStreamBeginCapture")
        self._stream_ctx.__enter__()
        tuner.frozen = True
        return self.graph

    def __exit__(self, exc_type, exc, tb):
        cu = driver()
        tuner.frozen = False
        self._stream_ctx.__exit__(None, None, None)
        result = cu.cuStreamEndCapture(self._handle)
        if exc_type is not None:
            return False  # the capture's own error is the one to report
        graph = check(result, "cuStreamEndCapture")
        missed = profiler.counters.pool_misses - self._misses
        if missed:
            raise runtime.KernelError(f"{missed} device allocations during a graph capture: warm the pool first")
        self.graph._graph = graph
        self.graph._exec = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        return False


class _Captured:
    """The state of one captured step: its static inputs, its loss buffer, the buffers it owns."""

    def __init__(self, x: DeviceArray, y: DeviceArray):
        self.x, self.y = x, y
        self.graph = Graph()
        self.loss: DeviceArray | None = None
        self.owned: list = []


class GraphedStep:
    """``step(xb, yb) -> loss`` through a CUDA graph per batch shape.

    ``body(x, y)`` is the device part of a training step: forward, backward,
    clipping, optimizer, ``zero_grad``; it returns the loss as a one-element
    tensor and must not read anything back to the host.
    """

    def __init__(self, body: Callable):
        self.body = body
        self._captured: dict[tuple, _Captured] = {}

    def __call__(self, xb, yb) -> float:
        from ..tensor import Tensor  # a Tensor wraps the static buffers for the body

        key = (xb.shape, yb.shape)
        state = self._captured.get(key)
        if state is None:
            state = _Captured(DeviceArray.empty(xb.shape), DeviceArray.empty(yb.shape))
            self._load(state, xb, yb)
            x, y = Tensor(state.x, xb.device), Tensor(state.y, yb.device)
            with memory.keep_alive() as eager:  # 1. the eager step: its buffers return to the pool together
                loss = self.body(x, y)
                value = loss.item()
            sizes = Counter(buffer.nbytes for buffer in eager)
            del loss, eager
            # Whatever kept some of them alive (a reference cycle, a flush after running out of
            # memory), the capture finds every size the eager step asked for.
            memory.pool.reserve(sizes)
            with memory.keep_alive() as owned, state.graph.capture():  # 2. the capture
                state.loss = self.body(x, y).data
            state.owned = owned
            self._captured[key] = state
            return value
        self._load(state, xb, yb)  # 3. a replay
        state.graph.launch()
        return _read_scalar(state.loss)

    @staticmethod
    def _load(state: _Captured, xb, yb) -> None:
        from . import backend

        for dst, src in ((state.x, xb.data), (state.y, yb.data)):
            src = backend.contiguous(src)
            runtime.copy_dtod(dst.ptr, src.ptr, ITEMSIZE * src.size)

    def captured_shapes(self) -> list[tuple]:
        return list(self._captured)


def _read_scalar(x: DeviceArray) -> float:
    from . import backend

    return backend.item(x, 0)
