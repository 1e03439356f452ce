"""The launch core under every launch contract: arguments, a launch or its timing, and ``Gemm``.

A launch contract (``launchers``, ``matmul_launchers``) works out a kernel's grid, block and
argument order and hands them to ``dispatch``, which looks the kernel up in the registry by name
(so an override, a student's kernel, is what runs) or takes a compiled ``Kernel`` (a standalone
exercise, a ``registry.variant``), then queues the launch on the current stream or times it.

Pointer arguments are ints, ``None`` (a null pointer: an optional operand left out) or anything
with ``.ptr`` (a DeviceArray, the grader's guarded buffers). With ``timed=True`` a launcher
returns the GPU milliseconds of its launches (events on the legacy stream; not counted, not
profiled) instead of queueing them on the current stream; ``timed=n`` times n back-to-back
launches of each and returns milliseconds per launch, so that host gaps between launches of a
short kernel do not count.
"""

from __future__ import annotations

import dataclasses
import math

from . import registry
from .runtime import Kernel, launch, time_launch_ms


def cdiv(n: int, d: int) -> int:
    return -(-n // d)


def as_arg(x):
    """A kernel argument: a pointer from anything with ``.ptr``, 0 for None, a scalar as it is."""
    return 0 if x is None else getattr(x, "ptr", x)


def resolve(kernel: str | Kernel) -> Kernel:
    """The kernel that runs for a name now (registry.get), or the compiled one given."""
    return registry.get(kernel) if isinstance(kernel, str) else kernel


def dispatch(kernel: str | Kernel, grid: tuple, block: tuple, args: tuple, timed: int, what=()) -> float | None:
    """Queue one launch on the current stream, or (``timed``) time it alone. ``what``: the
    problem's shapes, for a failed launch's message."""
    kernel = resolve(kernel)
    args = tuple(map(as_arg, args))
    if timed:
        return time_launch_ms(kernel, grid, block, *args, repeats=int(timed))
    launch(kernel, grid, block, *args, shapes=what)
    return None


def queue(kernel: str | Kernel, grid: tuple, block: tuple, *args, shapes=()) -> None:
    """dispatch's queued launch for arguments that are already pointers and scalars: a prepared
    route's launch (Launch.queue), with nothing worked out again."""
    launch(resolve(kernel), grid, block, *args, shapes=shapes)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of a matmul kernel worked out for a problem, all but its pointers: ``kernel`` (a
    name, looked up in the registry at every launch so that an override still counts, or a
    compiled Kernel), ``grid``, ``block`` and the arguments after C, A and B. A launcher builds
    one and dispatches it; the backend keeps it per shape and queues it again for every product
    of that shape (``queue``), without working anything out twice."""

    kernel: str | Kernel
    grid: tuple
    block: tuple
    rest: tuple
    what: tuple = ()  # the problem, for a failed launch's message

    def dispatch(self, c, a, b, timed: int = 0) -> float | None:
        return dispatch(self.kernel, self.grid, self.block, (c, a, b, *self.rest), timed, self.what)

    def queue(self, c, a, b) -> None:
        """The launch on the current stream for C, A and B (DeviceArrays)."""
        queue(self.kernel, self.grid, self.block, c.ptr, a.ptr, b.ptr, *self.rest, shapes=self.what)


def total_ms(times: list) -> float | None:
    """The sum of a launcher's timed launches (None where they were queued, not timed)."""
    return None if times[0] is None else float(sum(times))


def aligned16(*pointers) -> bool:
    """Whether every pointer starts a 16-byte vector (fresh buffers do; odd row slices may not)."""
    return all(as_arg(p) % 16 == 0 for p in pointers)


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One matmul problem as every matmul kernel takes it: C[z] = op(A[z]) @ op(B[z]) for z
    in the batch, op transposing where ``ta``/``tb``; each operand's matrices lie
    ``stride_a``/``stride_b`` floats apart (0: one matrix broadcast over the batch)."""

    M: int
    N: int
    K: int
    ta: bool = False
    tb: bool = False
    stride_a: int = 0
    stride_b: int = 0
    batch: int = 1

    @classmethod
    def of(cls, a, b, ta: bool = False, tb: bool = False) -> Gemm:
        """The problem of contiguous operands ``a`` and ``b`` (anything with ``.shape``);
        leading axes of the operand with more of them are the batch."""
        M, K = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
        N = b.shape[-2] if tb else b.shape[-1]
        lead = a.shape[:-2] if len(a.shape) > len(b.shape) else b.shape[:-2]
        return cls(
            M, N, K, bool(ta), bool(tb),
            stride_a=M * K if len(a.shape) > 2 else 0,
            stride_b=K * N if len(b.shape) > 2 else 0,
            batch=math.prod(lead),
        )  # fmt: skip

    @property
    def args(self) -> tuple[int, ...]:
        """The kernels' (M, N, K, ta, tb, stride_a, stride_b)."""
        return (self.M, self.N, self.K, int(self.ta), int(self.tb), self.stride_a, self.stride_b)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.M * self.N * self.K

    def grid(self, bm: int, bn: int) -> tuple[int, int, int]:
        """A block per bm x bn tile of C, the batch along z."""
        return (cdiv(self.N, bn), cdiv(self.M, bm), self.batch)

    def quads(self) -> bool:
        """Whether every row of A and B and every batch stride is whole 16-byte quads."""
        rows_a, rows_b = (self.M if self.ta else self.K), (self.K if self.tb else self.N)
        return rows_a % 4 == 0 and rows_b % 4 == 0 and self.stride_a % 4 == 0 and self.stride_b % 4 == 0
