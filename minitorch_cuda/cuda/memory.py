"""Device memory: one allocation per buffer (stages 0-3) or a size-keyed pool (4+).

A ``DeviceBuffer`` owns device memory for as long as Python holds it. When the
last reference goes, the memory is freed (cuMemFree, which waits for the
device) or, with the pool, put back on the free list for its exact size and
handed to the next request of that size without touching the driver.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

from .. import profiler, stages
from .runtime import DeviceMemoryError, allocate, capturing


class MemoryPool:
    """Free lists of device allocations keyed by their size in bytes."""

    def __init__(self) -> None:
        self._free: dict[int, list] = defaultdict(list)

    def acquire(self, nbytes: int):
        free = self._free.get(nbytes)
        if free:
            profiler.counters.pool_hits += 1
            return free.pop()
        profiler.counters.pool_misses += 1
        if capturing():  # the driver would refuse too, with a message that names nothing
            held = {size: len(a) for size, a in self._free.items() if a}
            raise RuntimeError(
                f"a graph capture asked for {nbytes} bytes and the pool holds none of that size "
                f"(free sizes: {held}); the eager step before a capture must allocate the same buffers"
            )
        return _allocate(nbytes, retry=self.flush)

    def release(self, allocation, nbytes: int) -> None:
        self._free[nbytes].append(allocation)

    def reserve(self, sizes: dict[int, int]) -> None:
        """Make the free lists hold at least ``sizes[n]`` buffers of ``n`` bytes, allocating
        what is missing now (before a graph capture, which must not allocate)."""
        for nbytes, count in sizes.items():
            free = self._free[nbytes]
            while len(free) < count:
                free.append(_allocate(nbytes))

    def flush(self) -> None:
        """Give every cached allocation back to the driver."""
        for allocations in self._free.values():
            for allocation in allocations:
                allocation.free()
        self._free.clear()

    def cached_bytes(self) -> int:
        return sum(size * len(allocs) for size, allocs in self._free.items())


pool = MemoryPool()


def _allocate(nbytes: int, retry=None):
    profiler.counters.allocations += 1
    try:
        return allocate(nbytes)
    except DeviceMemoryError:
        if retry is None:
            raise
        retry()  # out of memory: return the pool's cache to the driver, try once more
        return allocate(nbytes)


_keepers: list[list] = []


@contextlib.contextmanager
def keep_alive():
    """Collect every buffer created in the block into a list that holds them: none goes
    back to the pool while the list lives. A captured CUDA graph owns its buffers this
    way, so that no later tensor is handed memory that a replay still writes."""
    kept: list = []
    _keepers.append(kept)
    try:
        yield kept
    finally:
        _keepers.remove(kept)


class DeviceBuffer:
    """``nbytes`` of device memory, returned to where it came from when collected."""

    __slots__ = ("ptr", "nbytes", "_allocation", "_pooled")

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self._pooled = stages.memory_pool()
        self._allocation = pool.acquire(nbytes) if self._pooled else _allocate(nbytes)
        self.ptr = int(self._allocation)
        if _keepers:
            _keepers[-1].append(self)

    def __del__(self) -> None:
        allocation = getattr(self, "_allocation", None)
        if allocation is None:
            return
        if self._pooled:
            pool.release(allocation, self.nbytes)
        else:
            try:
                allocation.free()
            except Exception:  # the context is gone at interpreter exit; nothing to free
                pass
