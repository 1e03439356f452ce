"""A small autotuner: on the first call of each shape, time every candidate kernel, keep the fastest.

The key is whatever decides the fastest variant (for matmul: M, N, K, the flags,
the batch and whether the operands allow vector loads). The tuner is pure
Python: the backend hands it a ``time_ms(name)`` callable that launches one
variant and measures it with CUDA events, so the bookkeeping is testable on a
machine without a GPU, and optionally a ``host_ms(name)``, the host's time to launch
a variant: it costs the longer of the two. Every decision
is recorded in ``choices()`` (a JSON-serializable dict) so that the benchmark can
save what it ran.

Set ``MINITORCH_CUDA_AUTOTUNE=0`` to skip the timing and take the heuristic
choice (the first candidate that fits), e.g. for reproducible profiles.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Hashable, Sequence

# Launches of a candidate between the two events of one sample (a launcher's ``timed=``). A single
# launch between two events carries the events' own few microseconds (on the H100 at 1024^3: 71 us
# for a product that takes 66 back to back), and a split-K product, whose two launches are timed
# one by one, paid it twice: the tuner kept an unsplit tile 15% slower than the split one.
TIMED_LAUNCHES = 10


@dataclasses.dataclass
class Decision:
    choice: str
    timings_ms: dict[str, float]  # the GPU times as measured; empty when the heuristic decided
    how: str  # "timed" or "heuristic"
    # the host's time to launch each candidate, where it was given: a candidate costs the longer
    # of that and its GPU time
    host_ms: dict[str, float] = dataclasses.field(default_factory=dict)


class Autotuner:
    def __init__(self, enabled: bool | None = None, repeats: int = 3):
        self.enabled = os.environ.get("MINITORCH_CUDA_AUTOTUNE", "1") != "0" if enabled is None else enabled
        self.repeats = repeats
        self._decisions: dict[tuple[str, Hashable], Decision] = {}
        self.frozen = False  # while True (e.g. during graph capture) nothing may be timed
        self.generation = 0  # counts clear()s: what is kept from the decisions is kept per generation

    def pick(
        self,
        family: str,
        key: Hashable,
        candidates: Sequence[str],
        time_ms: Callable[[str], float],
        host_ms: Callable[[str], float] | None = None,
    ) -> str:
        """The fastest of ``candidates`` for ``key``: timed once, then remembered.
        ``time_ms(name)`` runs one candidate and returns its time in milliseconds;
        it is called ``repeats`` times per candidate and the minimum counts.
        ``host_ms(name)``: the host's milliseconds to launch the candidate (asked only when
        timing). A step whose host queues one launch after another pays the longer of the two:
        a split into two launches that saves GPU time wins only where the GPU, not the host,
        was what the product waited for."""
        if not candidates:
            raise ValueError(f"autotune {family}: no candidate kernels for {key}")
        found = self.cached(family, key)
        if found is not None:
            return found
        if not self.enabled or len(candidates) == 1:
            decision = Decision(candidates[0], {}, "heuristic")
        elif self.frozen:
            raise RuntimeError(
                f"autotune {family}: {key} was never tuned and timing is not allowed now "
                "(inside a CUDA graph capture); run the step once eagerly first"
            )
        else:
            timings = {name: min(time_ms(name) for _ in range(self.repeats)) for name in candidates}
            host = {name: host_ms(name) for name in candidates} if host_ms else {}
            best = min(timings, key=lambda name: max(timings[name], host.get(name, 0.0)))
            decision = Decision(best, timings, "timed", host)
        self._decisions[(family, key)] = decision
        return decision.choice

    def cached(self, family: str, key: Hashable) -> str | None:
        """The choice already made for ``key``, or None: lets a caller skip building the
        candidates on the hot path (a training step asks for the same shapes every step)."""
        found = self._decisions.get((family, key))
        return found.choice if found is not None else None

    def choices(self) -> dict[str, dict]:
        """Every decision so far: ``{"family key": {"choice", "how", "timings_ms"}}``, and
        ``"host_ms"`` where the host's launch times were given (the choice: the least of each
        candidate's longer time)."""
        return {f"{family} {_format_key(key)}": _record(d) for (family, key), d in self._decisions.items()}

    def clear(self) -> None:
        self._decisions.clear()
        self.generation += 1


def _record(decision: Decision) -> dict:
    record = dataclasses.asdict(decision)
    if not record["host_ms"]:
        del record["host_ms"]
    return record


def _format_key(key: Hashable) -> str:
    if isinstance(key, tuple):
        return ",".join(str(part) for part in key)
    return str(key)


def fits(tile_m: int, tile_n: int, M: int, N: int) -> bool:
    """Whether a tile shape is worth trying: at most one tile of padding in each direction
    beyond the matrix (a 128-row tile for a 10-row matrix wastes 92% of the block)."""
    return tile_m <= max(32, 2 * M) and tile_n <= max(32, 2 * N)


tuner = Autotuner()
