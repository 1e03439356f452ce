"""Device time by CUDA events: the one timer of the benchmark, the grader's speed feedback,
the experiments and ``tile_eval``.

Work is queued between two events recorded on the legacy default stream, where PyCUDA
(stream None), PyTorch, Triton and CuPy launch unless told otherwise, and the second event
is waited for: the time between the two is the device's time for that work, once the host
queues it faster than the GPU runs it. A sample therefore holds several calls back to back
(``INNER``), so that the host's gaps between launches hide behind the GPU's work.

The events are the driver's that the backend uses (``cuda/driver.py``): PyCUDA's, or on the
CPU emulator the emulator's, whose times are the host's; the commands that would show or
record those refuse to run there (``needs_gpu.py``). Call these functions with CUDA started
(``device.require_cuda``) and never while a CUDA graph is being captured.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

INNER = 10  # calls between two events, so that host launch gaps do not count


def elapsed_ms(work: Callable[[], object]) -> float:
    """Milliseconds between an event recorded before ``work()`` queues its work and one
    recorded after it, once the device has reached the second."""
    from .driver import drv

    start, stop = drv.Event(), drv.Event()
    start.record()
    work()
    stop.record()
    stop.synchronize()
    return stop.time_since(start)


def seconds_per_call(call: Callable[[], object], repeats: int, inner: int = INNER) -> float:
    """Median seconds per call of ``call()``: one call first as the warm-up (module load,
    caches), then ``repeats`` samples of ``inner`` calls back to back."""
    call()

    def calls() -> None:
        for _ in range(inner):
            call()

    return float(np.median([elapsed_ms(calls) / 1e3 / inner for _ in range(repeats)]))


def launcher_seconds(launch: Callable[..., float], repeats: int) -> float:
    """Median seconds per launch of a launcher (``cuda/launchers.py``) given all but ``timed=``:
    with ``timed=n`` a launcher times n launches itself, its arguments prepared once and
    nothing counted or profiled. One timed launch first as the warm-up (module load,
    autotuning, caches), then ``repeats`` samples of INNER launches."""
    launch(timed=1)
    return float(np.median([launch(timed=INNER) / 1e3 for _ in range(repeats)]))
