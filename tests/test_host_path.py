"""The CUDA backend's Python at every stage, on a stand-in driver, against the H200's record.

CI has no GPU, so the GPU tests skip there; but most of what a stage changes is
decided in Python: which kernels launch, when the host syncs, what is copied
and allocated. A subprocess runs the benchmark's own ``profile_stage`` (20
training steps after a short epoch, as recorded in ``book/results/
profiles_beyond.json``) on ``standin_pycuda``, whose driver does nothing, and
the counters per step must equal those recorded on the H200. A stage that
launches, syncs, copies or allocates differently from what was measured fails
here, without a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minitorch_cuda import results

TESTS = Path(__file__).resolve().parent
STAGES = range(0, 11)  # 11 and 12 replay CUDA graphs through cuda-bindings, which has no stand-in
# Stage 0 copies gradients back to the device only on steps that clip: data-dependent,
# and the stand-in's data are not MNIST.
DATA_DEPENDENT = {0: {"htod_copies", "htod_bytes"}}

PROFILE_EVERY_STAGE = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401  (before anything imports pycuda)
import numpy as np
import minitorch_cuda as mt
from minitorch_cuda import bench
from minitorch_cuda.data import one_hot

rng = np.random.default_rng(0)
data = type("Data", (), {{}})()
data.x_train = mt.tensor(rng.random((64 * 4, 784), dtype=np.float32), "cuda")
data.y_train = mt.tensor(one_hot(rng.integers(0, 10, 64 * 4)), "cuda")
print(json.dumps({{s: bench.profile_stage(s, data)["counters_per_step"] for s in {list(STAGES)}}}))
"""


@pytest.fixture(scope="module")
def host_counters() -> dict[int, dict]:
    done = subprocess.run([sys.executable, "-c", PROFILE_EVERY_STAGE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {int(stage): counters for stage, counters in json.loads(done.stdout.splitlines()[-1]).items()}


@pytest.mark.parametrize("stage", STAGES)
def test_counters_per_step_match_the_h200_record(host_counters, stage):
    recorded = results.load("profiles_beyond")
    assert recorded is not None, "book/results/profiles_beyond.json is missing"
    expected = next(p for p in recorded["stages"] if p["stage"] == stage)["counters_per_step"]
    got = host_counters[stage]
    compared = sorted(set(expected) - DATA_DEPENDENT.get(stage, set()))
    mismatched = {k: (got.get(k), expected[k]) for k in compared if got.get(k) != pytest.approx(expected[k])}
    assert not mismatched, f"stage {stage}: counter (stand-in, H200) {mismatched}"
