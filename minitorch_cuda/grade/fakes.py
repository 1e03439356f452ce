"""The fake devices the chapters teach with and the checks drive student code on.

Chapter 4's memory pool runs on ``FakeDevice`` (a driver that runs out of memory on
purpose), chapter 5's timing on ``QueueingDevice`` (a GPU on a fake clock that queues
work), chapter 18's graphed step on ``GraphDevice`` (captures and replays) with
``TinyStep`` as the training step. They live in the checker's process: a student's
code reaches them only through the grader's channel, so what they count is what
happened. Nothing here needs a GPU.
"""

from __future__ import annotations

import collections
import contextlib

import numpy as np

from .verdict import WRONG_RESULT, fail


class FakeAllocation:
    """What the fake driver hands out: an id, a size and a free() that may be called once."""

    def __init__(self, device: FakeDevice, nbytes: int):
        self.device, self.nbytes, self.freed = device, nbytes, False
        self.id = device.next_id
        device.next_id += 1

    def free(self) -> None:
        if self.freed:
            fail(WRONG_RESULT, f"allocation {self.id} ({self.nbytes} bytes) was freed twice")
        self.freed = True
        self.device.used -= self.nbytes
        self.device.frees += 1

    def __int__(self) -> int:
        return 0x10000 + self.id * 0x1000

    def __repr__(self) -> str:
        return f"<fake allocation {self.id}: {self.nbytes} bytes>"


class FakeDevice:
    """A driver with ``capacity`` bytes that raises MemoryError when full."""

    def __init__(self, capacity: int):
        self.capacity, self.used, self.next_id, self.allocs, self.frees = capacity, 0, 0, 0, 0

    def allocate(self, nbytes: int) -> FakeAllocation:
        if self.used + nbytes > self.capacity:
            raise MemoryError(f"out of memory: {self.used} + {nbytes} > {self.capacity} bytes")
        self.used += nbytes
        self.allocs += 1
        return FakeAllocation(self, nbytes)


class QueueingDevice:
    """A fake GPU on a fake clock: ``launch()`` queues work and returns after a small host
    cost, as a kernel launch does; ``sync()`` waits until the queue is empty."""

    HOST_S = 1e-6  # what a launch costs the host

    def __init__(self, durations: list[float]):
        self.durations = iter(durations)  # device seconds of each successive call
        self.now = 0.0
        self.queued = 0.0
        self.events: list[str] = []

    def clock(self) -> float:
        self.events.append("clock")
        return self.now

    def sync(self) -> None:
        self.events.append("sync")
        self.now += self.queued
        self.queued = 0.0

    def launch(self) -> None:
        self.events.append("fn")
        self.queued += next(self.durations, 0.0)  # calls beyond the plan are counted and reported
        self.now += self.HOST_S


class CaptureError(RuntimeError):
    """What the fake driver raises for work that cannot be part of a capture."""


class FakeArray:
    """A buffer of the fake device (the checker's batches are FakeArrays too)."""

    def __init__(self, data: np.ndarray):
        self.data = data

    @property
    def shape(self) -> tuple:
        return self.data.shape


class FakeGraph:
    def __init__(self, device: GraphDevice):
        self.device, self.nodes = device, []

    def launch(self) -> None:
        self.device.refuse_in_capture("a graph launch", "replay only after the capture has ended")
        self.device.calls["graph_launch"] += 1
        for work in self.nodes:
            work()


class GraphDevice:
    """A fake GPU with the operations of chapter 18's ``GraphedStep`` (``CudaGraphDevice`` has
    them on the GPU). Outside a capture every call runs at once; inside one, copies and
    launches are recorded into the graph and run only when it is launched, and a
    synchronization raises, as under the driver's thread-local capture mode. So does an
    allocation that no warm-up provided: what a warm-up allocates stays reserved, as the
    memory pool reserves it, for one capture."""

    def __init__(self):
        self.graph: FakeGraph | None = None  # the graph being captured
        self.calls: collections.Counter = collections.Counter()
        self._warming: collections.Counter | None = None  # shapes allocated in the running warm-up
        self._reserved: collections.Counter = collections.Counter()  # shapes a capture may allocate

    def empty(self, shape) -> FakeArray:
        shape = tuple(shape)
        if self.graph is not None:
            if not self._reserved[shape]:
                self.refuse_in_capture(
                    f"an allocation of a {shape} array (no warm-up reserved one)",
                    "allocate the static inputs before capturing, and run the step once eagerly "
                    "inside `with device.warmup():` before capturing it",
                )
            self._reserved[shape] -= 1
        elif self._warming is not None:
            self._warming[shape] += 1
        self.calls["empty"] += 1
        return FakeArray(np.zeros(shape))

    def copy(self, dst: FakeArray, src: FakeArray) -> None:
        if dst.shape != src.shape:
            raise ValueError(f"copy of a {src.shape} array into a {dst.shape} one")
        self._enqueue("copy", lambda: np.copyto(dst.data, src.data))

    def launch(self, kernel) -> None:
        self._enqueue("launch", kernel)

    def read(self, x: FakeArray) -> float:
        """Wait for the device, then read the one value of ``x`` back."""
        self.refuse_in_capture("a read-back (it synchronizes)", "read the loss after the capture or the replay")
        if x.data.size != 1:
            raise ValueError(f"read() needs an array with one element, this one has shape {x.shape}")
        self.calls["read"] += 1
        return float(x.data.flat[0])

    def sync(self, what: str, fix: str) -> None:
        self.refuse_in_capture(what, fix)

    @contextlib.contextmanager
    def warmup(self):
        self.refuse_in_capture("a warm-up", "warm the step up before capturing it")
        if self._warming is not None:
            raise CaptureError("a warm-up inside a warm-up: warm one step at a time")
        self._warming = collections.Counter()
        try:
            yield
            for shape, count in self._warming.items():
                self._reserved[shape] = max(self._reserved[shape], count)
        finally:
            self._warming = None
            self.calls["warmup"] += 1

    @contextlib.contextmanager
    def capture(self):
        self.refuse_in_capture("a capture", "capture one graph at a time")
        if self._warming is not None:
            raise CaptureError("a capture inside a warm-up: let the warm-up end first")
        self.graph = graph = FakeGraph(self)
        try:
            yield graph
        finally:
            self.graph = None
            self.calls["capture"] += 1

    def refuse_in_capture(self, what: str, fix: str) -> None:
        if self.graph is not None:
            raise CaptureError(f"{what} inside a capture: {fix}")

    def _enqueue(self, kind: str, work) -> None:
        if self.graph is not None:
            self.graph.nodes.append(work)
        else:
            self.calls[kind] += 1
            work()


class TinyStep:
    """A training step on the fake device: least squares by SGD in three kernels, so that
    each loss depends on its batch and on every step before it. Like the real step, it
    allocates its outputs on every call (the memory pool hands them out), and its first
    call for a batch shape tunes, which synchronizes; inside a capture both raise unless
    a warm-up came first."""

    LR = 0.05

    def __init__(self, device: GraphDevice, w0: np.ndarray):
        self.device, self.calls = device, 0
        self.w = device.empty(w0.shape)
        self.w.data[:] = w0
        self.tuned: set[tuple] = set()

    def __call__(self, x: FakeArray, y: FakeArray) -> FakeArray:
        dev, w = self.device, self.w.data
        self.calls += 1
        if x.shape not in self.tuned:
            dev.sync(
                "the autotuner timing a new shape",
                "run the step once eagerly, inside `with device.warmup():`, before capturing it",
            )
            self.tuned.add(x.shape)
        pred, loss = dev.empty(x.shape[:1]), dev.empty((1,))
        dev.launch(lambda: np.matmul(x.data, w, out=pred.data))
        dev.launch(lambda: loss.data.fill(np.mean((pred.data - y.data) ** 2)))
        dev.launch(lambda: np.subtract(w, self.LR * 2 / len(pred.data) * (x.data.T @ (pred.data - y.data)), out=w))
        return loss
