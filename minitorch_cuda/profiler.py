"""Counting and timing what the CUDA backend does, without nsys.

Counters are always on (plain integer adds). Timing is on inside
``with profile() as prof:``: the runtime brackets every launch and copy by a pair of
CUDA events and hands them over (``Profile.add``); they are read back when the block
ends. ``prof.stats()`` prints a table in the form of ``nsys stats`` and
``prof.timeline()`` draws the events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Iterator

from . import emulator


@dataclasses.dataclass
class Counters:
    launches: int = 0
    syncs: int = 0
    htod_copies: int = 0
    htod_bytes: int = 0
    dtoh_copies: int = 0
    dtoh_bytes: int = 0
    dtod_copies: int = 0
    dtod_bytes: int = 0
    allocations: int = 0  # real device allocations (cuMemAlloc)
    pool_hits: int = 0  # requests served from the pool
    pool_misses: int = 0  # requests the pool had to allocate for

    def reset(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, 0)

    def snapshot(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def pool_hit_rate(self) -> float:
        requests = self.pool_hits + self.pool_misses
        return self.pool_hits / requests if requests else 0.0


counters = Counters()


@contextlib.contextmanager
def count() -> Iterator[Counters]:
    """Counters for the block only: ``with count() as c: ...; c.syncs``."""
    before = counters.snapshot()
    delta = Counters()
    try:
        yield delta
    finally:
        for name, value in counters.snapshot().items():
            setattr(delta, name, value - before[name])


@dataclasses.dataclass
class Record:
    name: str
    kind: str  # "kernel" or "memcpy"
    start_ms: float
    duration_ms: float


class Profile:
    """Events recorded while active; records are resolved when the block ends."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, str, object, object]] = []
        self.records: list[Record] = []

    def add(self, name: str, kind: str, start, stop) -> None:
        """One launch or copy between two events its caller recorded (the runtime: this module
        knows no driver), read when the block ends."""
        self._pending.append((name, kind, start, stop))

    def _resolve(self) -> None:
        if not self._pending:
            return
        self._pending[-1][3].synchronize()
        origin = self._pending[0][2]
        for name, kind, start, stop in self._pending:
            self.records.append(Record(name, kind, start.time_since(origin), stop.time_since(start)))
        self._pending.clear()

    def stats(self, kind: str | None = None) -> list[dict]:
        """Rows like ``nsys stats`` (times in microseconds), largest total first."""
        groups: dict[str, list[float]] = {}
        for record in self.records:
            if kind is None or record.kind == kind:
                groups.setdefault(record.name, []).append(record.duration_ms * 1e3)
        total_all = sum(sum(v) for v in groups.values()) or 1.0
        rows = [
            {
                "time_pct": 100.0 * sum(v) / total_all,
                "total_us": sum(v),
                "instances": len(v),
                "avg_us": statistics.fmean(v),
                "med_us": statistics.median(v),
                "min_us": min(v),
                "max_us": max(v),
                "stddev_us": statistics.pstdev(v),
                "name": name,
            }
            for name, v in groups.items()
        ]
        return sorted(rows, key=lambda row: -row["total_us"])

    def table(self, kind: str | None = None) -> str:
        head = (
            f"{'Time (%)':>9} {'Total (us)':>12} {'Instances':>9} {'Avg (us)':>10} "
            f"{'Med (us)':>10} {'Min (us)':>10} {'Max (us)':>10} {'StdDev (us)':>11}  Name"
        )
        lines = [head, "-" * len(head)]
        for r in self.stats(kind):
            lines.append(
                f"{r['time_pct']:9.1f} {r['total_us']:12.1f} {r['instances']:9d} {r['avg_us']:10.2f} "
                f"{r['med_us']:10.2f} {r['min_us']:10.2f} {r['max_us']:10.2f} {r['stddev_us']:11.2f}  {r['name']}"
            )
        if emulator.selected():
            lines.append("(emulated on the CPU: host times, not GPU times)")
        return "\n".join(lines)

    def timeline(self, ax=None, max_records: int | None = None):
        """Draw one bar per recorded launch or copy, a row per name (``draw_timeline``)."""
        records = self.records[:max_records] if max_records else self.records
        ax = draw_timeline([(r.name, r.kind, r.start_ms * 1e3, r.duration_ms * 1e3) for r in records], ax)
        where = "CPU-emulator timeline, host times" if emulator.selected() else "GPU timeline"
        ax.set_title(f"{where} (kernels blue, copies red)")
        return ax


def draw_timeline(events: list, ax=None):
    """Events ``(name, kind, start_us, duration_us)`` as bars, one row per name in the order
    the names first run (the first on top); kernels blue, copies red. Every event is drawn
    at least 1/250 of the span wide, so that a 3 us kernel stays visible beside a 25 ms
    gap, and the longest stretch without any event, if it is most of the span, is shaded
    and named: that is where the GPU waited for the host."""
    import matplotlib.pyplot as plt

    ordered = sorted(events, key=lambda e: e[2])
    names = list(dict.fromkeys(e[0] for e in ordered))[::-1]
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.28 * len(names) + 1.4))
    row = {name: i for i, name in enumerate(names)}
    first, last = ordered[0][2], max(e[2] + e[3] for e in ordered)
    shortest = (last - first) / 250
    colors = {"kernel": "tab:blue", "memcpy": "tab:red"}
    for name, kind, start, duration in ordered:
        ax.barh(row[name], max(duration, shortest), left=start, height=0.6, color=colors.get(kind, "tab:gray"))
    ends = [max(e[2] + e[3] for e in ordered[: i + 1]) for i in range(len(ordered))]
    gap, at = max(((e[2] - end, end) for end, e in zip(ends, ordered[1:])), default=(0.0, 0.0))
    if gap > 0.3 * (last - first):
        ax.axvspan(at, at + gap, color="0.92", zorder=0)
        ax.text(
            at + gap / 2,
            (len(names) - 1) / 2,
            f"no GPU work for {gap / 1e3:.1f} ms",
            ha="center",
            va="center",
            fontsize=8,
            color="0.3",
        )
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlabel("time since the first recorded event (us)")
    return ax


_active: Profile | None = None


@contextlib.contextmanager
def uncounted() -> Iterator[None]:
    """Work that is not the program's (measuring the machine), counted apart and not profiled:
    the counters the program reads neither grow nor go back meanwhile."""
    global counters, _active
    kept, counters = counters, Counters()
    profiling, _active = _active, None
    try:
        yield
    finally:
        counters, _active = kept, profiling


def active() -> Profile | None:
    return _active


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Time every launch and copy in the block with CUDA events."""
    global _active
    if _active is not None:
        raise RuntimeError("profile() blocks cannot be nested")
    prof = Profile()
    _active = prof
    try:
        yield prof
    finally:
        _active = None
        prof._resolve()
