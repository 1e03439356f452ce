"""CUDA graphs (stage 11): capture a whole training step once, replay it per batch.

PyCUDA has no graph API; NVIDIA's ``cuda-bindings`` has the driver's. Capture
works on any stream by handle: ``cuStreamBeginCapture`` on the stream that
PyCUDA launches into, the step's launches (``prepared_async_call`` on that
stream, see ``runtime.on_stream``), ``cuStreamEndCapture``, then
``cuGraphInstantiate`` once and ``cuGraphLaunch`` per batch.

A captured graph replays fixed addresses. ``GraphedStep`` (exercise 18.1 asks
for it, against a fake device with the same operations) applies the rules this
implies through five operations of a device: ``empty``, ``copy``, ``read``,
``warmup`` and ``capture``. ``CudaGraphDevice`` provides them on device arrays:

1. the first batch of each shape is copied into static input buffers and the
   step runs eagerly on them inside ``warmup`` (a real training step, which
   also compiles and autotunes every kernel), which keeps every buffer it
   allocates alive; dropping them afterwards returns them to the pool, and
   ``pool.reserve`` tops it up to as many buffers of each size as the step
   asked for (in case something still holds some of them);
2. ``capture`` records the same step on a stream of its own, and the graph
   keeps the buffers of the capture alive for as long as it lives
   (``memory.keep_alive``): the pool hands out nothing during the capture that
   it must allocate, and nothing the graph writes is ever handed to anyone else;
3. every later batch: two device-to-device copies into the static inputs, one
   ``cuGraphLaunch``, one 4-byte read-back of the loss.

The backend knows no ``Tensor``: the body takes and returns device arrays, and
the caller (``train.Trainer``) wraps them in its own tensors.

The stream is created with default flags, so it orders itself with the legacy
default stream: the batch copies before a replay and the loss read-back after
it need no explicit synchronization.
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Callable

from .. import profiler
from . import launchers, memory, runtime
from .array import ITEMSIZE, DeviceArray
from .autotune import tuner
from .batch_cursor import BatchCursor
from .driver import bindings, check, drv
from .ops_tensor import contiguous, full, item


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
        self.owned: list = []  # the buffers its capture allocated (``CudaGraphDevice.capture``)

    def capture(self):
        return _Capture(self)

    def launch(self) -> None:
        if self._exec is None:
            raise RuntimeError("launch() before a capture finished")
        cu = bindings()
        profiler.counters.launches += 1
        check(cu.cuGraphLaunch(self._exec, cu.CUstream(self.stream.handle)), "cuGraphLaunch")

    def __del__(self):
        try:
            cu = bindings()
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
        cu = bindings()
        # Python's collector may free an unreachable object with device resources at any moment
        # (a buffer outside the pool: cuMemFree, which synchronizes; a module: cuModuleUnload),
        # and from this thread, during a capture, that invalidates it. Collect now, then not
        # until the capture ends.
        gc.collect()
        self._handle = cu.CUstream(self.graph.stream.handle)
        self._misses = profiler.counters.pool_misses
        self._stream_ctx = runtime.on_stream(self.graph.stream, capturing=True)
        # Thread-local mode: an allocation or a sync from this thread during the capture
        # is an error, not a silent hazard.
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self._collecting = gc.isenabled()
        gc.disable()
        try:
            check(cu.cuStreamBeginCapture(self._handle, mode), "cuStreamBeginCapture")
        except BaseException:
            if self._collecting:
                gc.enable()
            raise
        self._stream_ctx.__enter__()
        tuner.frozen = True
        return self.graph

    def __exit__(self, exc_type, exc, tb):
        cu = bindings()
        tuner.frozen = False
        self._stream_ctx.__exit__(None, None, None)
        result = cu.cuStreamEndCapture(self._handle)
        if self._collecting:
            gc.enable()
        if exc_type is not None:
            return False  # the capture's own error is the one to report
        graph = check(result, "cuStreamEndCapture")
        missed = profiler.counters.pool_misses - self._misses
        if missed:
            raise runtime.KernelError(f"{missed} device allocations during a graph capture: warm the pool first")
        self.graph._graph = graph
        self.graph._exec = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        return False


class CudaGraphDevice:
    """What ``GraphedStep`` asks of a device (exercise 18.1's contract), on the GPU.

    Arrays are ``DeviceArray``s; ``warmup`` and ``capture`` bracket the eager step
    and the capture of one batch shape.
    """

    def empty(self, shape: tuple[int, ...]) -> DeviceArray:
        return DeviceArray.empty(shape)

    def copy(self, dst: DeviceArray, src: DeviceArray) -> None:
        """Queue a device-to-device copy of ``src`` into ``dst`` (of the same shape)."""
        if dst.shape != src.shape:
            raise ValueError(f"copy of a {src.shape} array into a {dst.shape} one")
        src = contiguous(src)
        runtime.copy_dtod(dst.ptr, src.ptr, ITEMSIZE * src.size)

    def read(self, x: DeviceArray) -> float:
        """Wait for the device, then read the one element of ``x`` back (4 bytes)."""
        if x.size != 1:
            raise ValueError(f"read() needs an array with one element, this one has shape {x.shape}")
        return item(x, 0)

    @contextlib.contextmanager
    def warmup(self):
        # Every buffer the eager step allocates stays alive until it ends; then they return
        # to the pool together, and ``reserve`` makes it hold as many of each size even if
        # something still holds some of them (a reference cycle, a flush after running out
        # of memory): the capture, which keeps all of its buffers, finds them there.
        with memory.keep_alive() as eager:
            yield
        sizes = Counter(buffer.nbytes for buffer in eager)
        del eager
        memory.pool.reserve(sizes)

    @contextlib.contextmanager
    def capture(self):
        # A graph on its own stream; it owns every buffer allocated during its capture for
        # as long as it lives, so that no later array is handed memory a replay writes.
        graph = Graph()
        with memory.keep_alive() as owned, graph.capture():
            yield graph
        graph.owned = owned


class GraphedStep:
    """``step(xb, yb) -> loss`` through a CUDA graph per batch shape (exercise 18.1).

    ``body(x, y)`` is the device part of a training step on the device's arrays:
    forward, backward, clipping, optimizer, ``zero_grad``; it returns the array that
    holds the loss (one element) and must not read anything back to the host.
    """

    def __init__(self, body: Callable, device):
        self.body, self.device = body, device
        self.graphs: dict[tuple, tuple] = {}  # (x shape, y shape) -> what a replay needs

    def __call__(self, xb, yb) -> float:
        device, key = self.device, (xb.shape, yb.shape)
        if key not in self.graphs:
            x, y = device.empty(xb.shape), device.empty(yb.shape)
            device.copy(x, xb)
            device.copy(y, yb)
            with device.warmup():  # eager: compiles, tunes and allocates outside the capture
                value = device.read(self.body(x, y))
            with device.capture() as graph:
                loss = self.body(x, y)  # recorded, not run
            self.graphs[key] = x, y, graph, loss  # static inputs, graph, loss buffer
            return value
        x, y, graph, loss = self.graphs[key]
        device.copy(x, xb)  # the graph reads the addresses it was captured with
        device.copy(y, yb)
        graph.launch()
        return device.read(loss)

    def queue(self, xb, yb) -> Callable[[], float]:
        """The step, for ``Trainer.queue_step``: here it runs and reads back at once."""
        loss = self(xb, yb)
        return lambda: loss


class FetchingGraphedStep(GraphedStep):
    """GraphedStep whose graph fetches its own batch (the lean step, stage 11): ``fetch_batch``
    at the head of the captured step copies the rows where a BatchCursor points into the static
    inputs and moves the cursor past them. A replay on the next batch of the same array is then
    one ``cuGraphLaunch`` and the read-back, without the two copies a replay otherwise queues from
    the host (18 us of the host's time a step, measured once on the H200 machine); the host writes the
    cursor only where the batch lies elsewhere. The first batch of a shape goes through
    GraphedStep's own path (its copies, the eager step, the capture), the cursor aimed at it."""

    def __init__(self, body: Callable, device):
        self.cursor, self.arrived = BatchCursor(), full((1,), 0.0)  # arrived: zero bits, once

        def fetching(x, y):
            launchers.fetch_batch(self.cursor.array, x, y, self.arrived)
            return body(x, y)

        super().__init__(fetching, device)

    def __call__(self, xb, yb) -> float:
        return self.queue(xb, yb)()

    def queue(self, xb, yb) -> Callable[[], float]:
        """Queue the step; returns the call that reads its loss back (before the next step's
        queue, which overwrites it). A new shape runs GraphedStep's first step and reads at once."""
        xb, yb = contiguous(xb), contiguous(yb)  # the fetch reads whole rows in place
        self.cursor.point_at(xb, yb)
        key = (xb.shape, yb.shape)
        if key not in self.graphs:
            value = super().__call__(xb, yb)
            self.cursor.moved_past(xb, yb)
            return lambda: value
        _, _, graph, loss = self.graphs[key]
        graph.launch()
        self.cursor.moved_past(xb, yb)
        return lambda: self.device.read(loss)
