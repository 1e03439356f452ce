"""Timing on the device: the framework's event timer (cuda/timing.py) around launches, with
warm-up and rotation.

Every model launches on the legacy default stream (PyCUDA with stream None,
Triton and CuPy by default), so events recorded there bracket their work.
A sample is ``inner`` launches between two events, each launch on the next of
``rotations`` buffer sets, so that small arrays are not served from a warm L2.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from ..cuda.timing import elapsed_ms


def summary(samples_ms: list[float], per_sample: int) -> dict:
    """Median and spread of the time of one launch, in milliseconds."""
    per_launch = sorted(t / per_sample for t in samples_ms)
    q = statistics.quantiles(per_launch, n=4) if len(per_launch) > 1 else [per_launch[0]] * 3
    return {
        "median_ms": statistics.median(per_launch),
        "min_ms": per_launch[0],
        "max_ms": per_launch[-1],
        "q1_ms": q[0],
        "q3_ms": q[2],
        "samples": len(per_launch),
        "launches_per_sample": per_sample,
    }


SAMPLE_BUDGET_MS = 2000.0  # GPU time after which a slow kernel stops being sampled ...
MIN_SAMPLES = 3  # ... once it has this many samples (Triton's heavy64 takes seconds per launch)
SAMPLE_TARGET_MS = 10.0  # a sample batches launches until it lasts about this long


def inner_launches(n: int, one_launch_ms: float = 0.0) -> int:
    """Launches per sample: enough that a sample of a small array lasts well over the event
    resolution, few enough that a sample of a slow kernel stays near SAMPLE_TARGET_MS."""
    by_size = max(1, min(100, (1 << 24) // max(n, 1)))
    if one_launch_ms <= 0:
        return by_size
    return max(1, min(by_size, int(SAMPLE_TARGET_MS / one_launch_ms)))


def time_launches(launch: Callable[[int], None], n: int, rotations: int, warmup: int = 3, repeats: int = 20) -> dict:
    """``launch(i)`` enqueues one launch on buffer set ``i % rotations``. Up to ``repeats`` samples,
    at least MIN_SAMPLES; sampling stops early once SAMPLE_BUDGET_MS of GPU time is spent."""
    import pycuda.driver as drv

    def timed(first: int, count: int) -> float:
        def launches() -> None:
            for i in range(first, first + count):
                launch(i % rotations)

        return elapsed_ms(launches)

    launch(0)  # the first launch may load the module; the second one is the pilot
    one = timed(1, 1)
    if one < SAMPLE_TARGET_MS:  # a kernel that long is warm after two launches
        for i in range(2, warmup + 2):
            launch(i % rotations)
    drv.Context.synchronize()
    inner = inner_launches(n, one)
    samples, k = [], 0
    while len(samples) < repeats and (len(samples) < MIN_SAMPLES or sum(samples) < SAMPLE_BUDGET_MS):
        samples.append(timed(k, inner))
        k += inner
    return summary(samples, inner)


def launch_overhead(launch: Callable[[], None], count: int = 2000) -> dict:
    """Host cost of a launch of a tiny kernel: enqueue time, and time until all have run."""
    import pycuda.driver as drv

    for _ in range(20):
        launch()
    drv.Context.synchronize()
    t0 = time.perf_counter()
    for _ in range(count):
        launch()
    t1 = time.perf_counter()
    drv.Context.synchronize()
    t2 = time.perf_counter()
    return {"enqueue_us": 1e6 * (t1 - t0) / count, "until_done_us": 1e6 * (t2 - t0) / count, "launches": count}


def copy_bandwidth(nbytes: int, repeats: int = 20) -> dict:
    """Device-to-device cuMemcpy of ``nbytes``: GB/s counting the read and the write."""
    import pycuda.driver as drv

    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    try:
        t = time_launches(lambda i: drv.memcpy_dtod(dst, src, nbytes), nbytes, rotations=1, repeats=repeats)
    finally:
        src.free()
        dst.free()
    t["gbps"] = 2 * nbytes / (t["median_ms"] * 1e6)
    return t


def rotations_for(set_bytes: int, l2_bytes: int, cap: int = 1024) -> int:
    """Buffer sets to cycle through so that consecutive launches miss in L2 (twice its size)."""
    return max(1, min(cap, -(-2 * l2_bytes // max(set_bytes, 1))))
