"""The commands that time, profile or record GPU work refuse to run on the CPU emulator.

Under ``MINITORCH_CUDA_EMULATE=1`` every kernel runs on the CPU and event times are host
times: the benchmark and the experiments would print, or record in ``book/results/``,
numbers that are no GPU's, and Nsight Compute or compute-sanitizer would find no GPU work
to watch. Those commands call ``refuse_emulated`` first: one line on stderr, exit status 2.
"""

from __future__ import annotations

import sys

from . import emulator

TIMINGS = "its timings would be the CPU's, not GPU timings"


def refuse_emulated(command: str, why: str = TIMINGS) -> None:
    """Exit with status 2 and one line on stderr where kernels run on the CPU emulator."""
    if emulator.selected():
        print(
            f"{command}: not run: kernels run on the CPU emulator here ({emulator.SWITCH}), so {why}. "
            f"Run it on a machine with a GPU, with {emulator.ENV} unset.",
            file=sys.stderr,
        )
        raise SystemExit(2)
