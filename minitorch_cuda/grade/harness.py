"""The GPU harness of the kernel checks: guarded, poisoned buffers and counted launches.

``Buffer`` puts ``n`` values between two guard zones, all poisoned unless given: an
empty kernel leaves the poison, an off-by-one writes into a guard. ``Override``
swaps a student's kernel into the framework (``mt.override``) and counts its
launches, so a check can tell that the framework really ran it.
"""

from __future__ import annotations

import numpy as np

from .verdict import BOUNDARY, NOT_LAUNCHED, fail

POISON = np.float32(-1.2345678e30)
GUARD = 256  # floats on each side of every buffer


def student_kernel(ex, source: str):
    """The student's ``ex.kernel`` compiled from ``source``, prepared with the exercise's own
    parameters: for an exercise whose kernel the registry does not hold."""
    from ..cuda.kernel_table import prepare_signature
    from ..cuda.runtime import Kernel
    from .kernel_build import build

    return Kernel(ex.kernel, build(source).module, ex.kernel, prepare_signature(ex.params))


class Buffer:
    """``n`` values on the device between two guard zones, all poisoned unless given."""

    def __init__(self, n: int, host: np.ndarray | None = None, dtype=np.float32):
        from ..cuda.memory import DeviceBuffer
        from ..cuda.runtime import copy_htod

        self.n, self.dtype = n, dtype
        fill = POISON if dtype == np.float32 else 0  # index guards stay valid row numbers
        self.initial = np.full(n + 2 * GUARD, fill, dtype=dtype)
        if host is not None:
            self.initial[GUARD : GUARD + n] = np.asarray(host, dtype=dtype).ravel()
        self.buffer = DeviceBuffer(self.initial.nbytes)
        copy_htod(self.buffer.ptr, self.initial)
        self.ptr = self.buffer.ptr + GUARD * self.initial.itemsize

    def read(self, what: str) -> np.ndarray:
        """The ``n`` values; fails if anything was written into a guard zone."""
        from ..cuda.runtime import copy_dtoh

        host = np.empty_like(self.initial)
        copy_dtoh(host, self.buffer.ptr)
        before, after = host[:GUARD], host[GUARD + self.n :]
        if not (np.array_equal(before, self.initial[:GUARD]) and np.array_equal(after, self.initial[GUARD + self.n :])):
            where = "after the end" if not np.array_equal(after, self.initial[GUARD + self.n :]) else "before the start"
            first = np.flatnonzero(after != self.initial[GUARD + self.n :])
            detail = [f"element n + {int(first[0])} was written"] if first.size else []
            fail(BOUNDARY, f"{what}: the kernel wrote {where} of the {self.n}-element buffer", detail)
        return host[GUARD : GUARD + self.n].copy()


class CountingFunction:
    """Stands in for a pycuda Function and counts prepared launches."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def prepared_async_call(self, *args, **kwargs):
        self.calls += 1
        return self.function.prepared_async_call(*args, **kwargs)


class Override:
    """``mt.override`` of the student's kernel as ``kernel_build`` built it, plus a launch counter."""

    def __init__(self, name: str, source: str):
        from ..cuda.registry import override, spec
        from .kernel_build import build

        self.handle = override(name, module=build(source, spec(name).arch_specific).module)
        self.counter = CountingFunction(self.handle.kernel.function)
        self.handle.kernel.function = self.counter

    def __enter__(self) -> Override:
        return self

    def __exit__(self, *exc) -> None:
        self.handle.restore()

    def expect_launched(self, what: str) -> None:
        if self.counter.calls == 0:
            fail(NOT_LAUNCHED, f"{what}: the framework never launched your kernel")
