"""What race checking costs on the CPU emulator, on two cores (issue 39's numbers), about 3 minutes.

    python3 .ci/racecheck_cost.py        (writes $OUT/racecheck_cost.json; on any idle machine, GPU or not)

Every run is a child process pinned to cores 0 and 1 (os.sched_setaffinity), so the emulator runs
its blocks on two workers as on a 2-core laptop, and the machine must be otherwise idle. Measured:
- the tiled-matmul exercise's check (11.1, its shipped solution) with MINITORCH_CUDA_EMULATE=1, warm
  (the second of two checks in one process): without race checking, with it (MINITORCH_CUDA_RACECHECK=1),
  and with it on one worker (MINITORCH_CUDA_EMULATE_THREADS=1, how race checking ran before); the
  target: with it at most 3 times without it;
- 20 MNIST training steps at stage 8 with race checking, as tests/test_emulator_racecheck.py runs 5
  (the target: at most 60 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("OUT", "/tmp/racecheck_cost"))
CORES = {0, 1}

CHECK = r"""
import json, sys, time
sys.path.insert(0, "tests")
from test_exercise_helper import solution_kernel
from minitorch_cuda.grade import checks
src = solution_kernel("11.1")
times = []
for _ in range(2):
    start = time.perf_counter()
    result = checks.run_check("11.1", src)
    times.append(time.perf_counter() - start)
    assert result.passed, result
print(json.dumps(times))
"""

MNIST = r"""
import json, time
import minitorch_cuda as mt
from minitorch_cuda import train
with mt.use_stage(8):
    data = train.load_to("cuda")
    trainer = train.Trainer(train.Protocol(), "cuda")
    start = time.perf_counter()
    loss = trainer.epoch(data.x_train[: 64 * 20], data.y_train[: 64 * 20])
    print(json.dumps([time.perf_counter() - start, loss]))
"""


def child(script: str, cache: str, **env: str) -> list:
    """Runs `script` on CORES with the emulator on; its last line of output, as JSON."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MINITORCH_CUDA_EMULATE": "1", "MINITORCH_CUDA_CACHE": cache}
    for name in ("MINITORCH_CUDA_RACECHECK", "MINITORCH_CUDA_EMULATE_THREADS"):
        environment.pop(name, None)
    environment.update(env)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=280,
        preexec_fn=lambda: os.sched_setaffinity(0, CORES),
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the run failed ({env}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    record: dict = {"cores": sorted(CORES), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as cache:
        check = {
            "without": child(CHECK, cache),
            "racecheck": child(CHECK, cache, MINITORCH_CUDA_RACECHECK="1"),
            "racecheck_one_worker": child(
                CHECK, cache, MINITORCH_CUDA_RACECHECK="1", MINITORCH_CUDA_EMULATE_THREADS="1"
            ),
        }
        record["check_11_1_s"] = {k: {"first": round(v[0], 2), "warm": round(v[1], 2)} for k, v in check.items()}
        warm = {k: v[1] for k, v in check.items()}
        record["check_11_1_ratio"] = round(warm["racecheck"] / warm["without"], 2)
        record["check_11_1_ratio_one_worker"] = round(warm["racecheck_one_worker"] / warm["without"], 2)
        seconds, loss = child(MNIST, cache, MINITORCH_CUDA_RACECHECK="1")
        record["mnist_20_steps_stage_8_racecheck_s"] = round(seconds, 1)
        record["mnist_loss"] = loss
    record["targets_met"] = record["check_11_1_ratio"] <= 3.0 and record["mnist_20_steps_stage_8_racecheck_s"] <= 60
    record["script_s"] = round(time.perf_counter() - started, 1)
    (OUT / "racecheck_cost.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
