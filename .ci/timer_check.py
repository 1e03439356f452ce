"""On a GPU: the one event timer (cuda/timing.py) against the timers it replaced, in one run.

    bash .ci/gpu_run.sh python3 .ci/timer_check.py      (writes $OUT/timer_check.json, about a minute)

The benchmark, the grader's speed feedback and the experiments now time through
cuda/timing.py. Two of its uses measure differently from before: cuBLAS is timed between the
driver's (PyCUDA's) events instead of PyTorch's, and tile_eval creates its two events per
sample. Each row times the same work both ways, interleaved, so that the ratio shows whether
the numbers moved beyond noise; a ratio near 1 is the expected result. On the CPU emulator
(MINITORCH_CUDA_EMULATE=1) it runs tiny sizes once, as a dry run of the script: host times.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minitorch_cuda.device import require_cuda  # noqa: E402

require_cuda()
from minitorch_cuda import torch_reference  # noqa: E402
from minitorch_cuda.cuda import launch_core, matmul_launchers, runtime, timing  # noqa: E402
from minitorch_cuda.cuda.array import DeviceArray  # noqa: E402
from minitorch_cuda.cuda.backend import from_numpy  # noqa: E402
from minitorch_cuda.cuda.driver import EMULATED  # noqa: E402

ROUNDS, REPEATS, N, COPY_FLOATS = (1, 2, 64, 4096) if EMULATED else (5, 10, 1024, 1 << 24)


def torch_events_seconds(M: int, N: int, K: int, repeats: int) -> float:
    """The benchmark's cuBLAS timer before cuda/timing.py: PyTorch's own events."""
    import torch

    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(timing.INNER):
            torch.matmul(a, b)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / timing.INNER)
    return float(np.median(times))


def driver_events_seconds(call, repeats: int) -> float:
    """The benchmark's copy timer before cuda/timing.py (bench._median_seconds)."""
    from minitorch_cuda.cuda.driver import drv

    call()
    times = []
    for _ in range(repeats):
        start, stop = drv.Event(), drv.Event()
        start.record()
        for _ in range(timing.INNER):
            call()
        stop.record()
        stop.synchronize()
        times.append(stop.time_since(start) / 1e3 / timing.INNER)
    return float(np.median(times))


def launcher_direct_seconds(launch, repeats: int) -> float:
    """A launcher's own timed launches, read without the timer module (as bench did)."""
    launch(timed=1)
    return float(np.median([launch(timed=timing.INNER) / 1e3 for _ in range(repeats)]))


def compare(name: str, new, old) -> dict:
    pairs = [(new(), old()) for _ in range(ROUNDS)]  # interleaved: drift reaches both
    ours, before = float(np.median([p[0] for p in pairs])), float(np.median([p[1] for p in pairs]))
    row = {"timer_us": ours * 1e6, "before_us": before * 1e6, "ratio": ours / before}
    print(f"{name:40s} timer {row['timer_us']:10.2f} us  before {row['before_us']:10.2f} us  ratio {row['ratio']:.3f}")
    return row


def main() -> None:
    rng = np.random.default_rng(0)
    out: dict = {"device": runtime.device_properties(), "rounds": ROUNDS, "repeats": REPEATS, "rows": {}}
    rows = out["rows"]
    if torch_reference.available():
        for n in (1024, 4096):
            rows[f"cuBLAS FP32 {n}^3"] = compare(
                f"cuBLAS FP32 {n}^3",
                lambda n=n: torch_reference.cublas_seconds(n, n, n, REPEATS),
                lambda n=n: torch_events_seconds(n, n, n, REPEATS),
            )
    else:
        out["torch"] = "PyTorch with CUDA is not available: the cuBLAS rows are missing"
    n = N
    a, b = (from_numpy(rng.standard_normal((n, n), dtype=np.float32)) for _ in range(2))
    c, g = DeviceArray.empty((n, n)), launch_core.Gemm(n, n, n)
    tiled = functools.partial(matmul_launchers.matmul_tiled, c, a, b, g)
    rows[f"matmul_tiled {n}^3"] = compare(
        f"matmul_tiled {n}^3",
        lambda: timing.launcher_seconds(tiled, REPEATS),
        lambda: launcher_direct_seconds(tiled, REPEATS),
    )
    m = COPY_FLOATS
    x, y = DeviceArray.empty((m,)), DeviceArray.empty((m,))
    copy = functools.partial(runtime.copy_dtod, y.ptr, x.ptr, 4 * m)
    rows[f"copy_dtod {4 * m} bytes"] = compare(
        f"copy_dtod {4 * m} bytes",
        lambda: timing.seconds_per_call(copy, REPEATS),
        lambda: driver_events_seconds(copy, REPEATS),
    )
    path = Path(os.environ.get("OUT", "/tmp")) / "timer_check.json"
    path.write_text(json.dumps(out, indent=1))
    print(path)


if __name__ == "__main__":
    main()
