"""What the emulator's access analysis (emulator/access.py) adds to a kernel exercise's check on the CPU:
the student's own numbers (requests, sectors per request, bank conflicts per source line, as Nsight
Compute counts them on a GPU), and the bank-conflict rule of the exercise that teaches it (11.1).

On a GPU there is nothing to add here: the counters are ncu's to read, and the checks do not run it.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import emulator
from .harness import Override
from .kernel_build import build_traced
from .verdict import BANK_CONFLICT, fail


def traced(override: Override, launch: Callable[[], object]) -> list:
    """The access reports (emulator/access.py's) of every launch ``launch()`` makes of the student's
    kernel that ``override`` put in place, built for tracing in the sandbox; [] on a GPU."""
    if not emulator.selected():
        return []
    from ..emulator.access import tracing

    build_traced(override.counter.function.library)
    with tracing() as reports:
        launch()
    return reports


def numbers(reports: list, what: str) -> list[str]:
    """The student's kernel's accesses, one line per source line, for the check's list of what passed."""
    lines = []
    for report in reports:
        for a in report.accesses:
            if a.kind == "atomic":
                continue
            per = (
                f"{a.sectors_per_request:.2f} sectors a request"
                if a.space == "global"
                else f"{a.conflict_degree:.2f} wavefronts a request ({a.conflicts} bank conflicts)"
            )
            lines.append(f"{what}, line {a.line} `{a.code}`: {a.requests} {a.space} {a.kind}s, {per}")
    return lines


def conflict_free(reports: list, what: str) -> None:
    """Fail BANK_CONFLICT at the first shared access that takes more wavefronts than its phases need."""
    for report in reports:
        for a in report.accesses:
            if a.space == "shared" and a.conflicts:
                fail(
                    BANK_CONFLICT,
                    f"{what}: the shared-memory {a.kind} at line {a.line} `{a.code}` is a {a.conflict_degree:.0f}-way "
                    f"bank conflict ({a.wavefronts} wavefronts for {a.requests} requests): the lanes of a warp reach "
                    "different words of one bank. Index the tile so that neighbouring lanes (threadIdx.x) reach "
                    "neighbouring words, or pad its rows by one float",
                )
