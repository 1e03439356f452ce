"""The CUDA backend's Python at every stage, on a stand-in driver, against the GPU's record.

CI has no GPU, so the GPU tests skip there; but most of what a stage changes is
decided in Python: which kernels launch, when the host syncs, what is copied
and allocated. A subprocess runs the benchmark's own ``profile_stage`` (20
training steps after a short epoch, as recorded in ``book/results/
profiles_beyond.json``) on ``standin_pycuda``, whose driver does nothing, and
the counters per step must equal those recorded on the GPU (an H100 on 6 December). A stage that
launches, syncs, copies or allocates differently from what was measured fails
here, without a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minitorch_cuda import bench, results

TESTS = Path(__file__).resolve().parent
STAGES = range(0, 11)  # a profiled step goes through no graph; test_graphs.py traces stage 11's replays
# Stage 0 copies gradients back to the device only on steps that clip: data-dependent,
# and the stand-in's data are not MNIST.
DATA_DEPENDENT = {0: {"htod_copies", "htod_bytes"}}
# Stage 9's autotuner keeps, per product, the variant the GPU timed fastest; a split-K variant adds
# its reduction's launch and a scratch buffer from the pool. The stand-in times nothing, so it keeps
# the register-tiled variant: the GPU may count up to one more of each per product of the step.
# Stage 10 keeps the tuner (on the H200 of 2026-12-01 it chose split-K for one of its products, on the
# H100 of 2026-12-06 for none).
TUNER_DEPENDENT = {9: {"launches", "pool_hits"}, 10: {"launches", "pool_hits"}}
PRODUCTS_PER_STEP = 9  # 3 forward, 2 per layer backward (an upper bound: the images' gradient is one)

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
data.x_test, data.labels_test = data.x_train, rng.integers(0, 10, 64 * 4)
profiles = {{s: bench.profile_stage(s, data)["counters_per_step"] for s in {list(STAGES)}}}
quiet = type("Quiet", (), {{"update": lambda self, n: None}})()
timed = bench.run_stage(8, data, epochs=2, warmup=2, progress=quiet)
unfused = bench.run_stage(10, data, epochs=1, warmup=2, progress=quiet, without={{"fused_kernels"}})
print(json.dumps({{"profiles": profiles, "run_stage": timed, "unfused": unfused}}))
"""


@pytest.fixture(scope="module")
def host_run() -> dict:
    done = subprocess.run([sys.executable, "-c", PROFILE_EVERY_STAGE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def host_counters(host_run) -> dict[int, dict]:
    return {int(stage): counters for stage, counters in host_run["profiles"].items()}


@pytest.mark.parametrize("stage", STAGES)
def test_counters_per_step_match_the_gpus_record(host_counters, stage):
    recorded = results.load("profiles_beyond")
    assert recorded is not None, "book/results/profiles_beyond.json is missing"
    expected = next(p for p in recorded["stages"] if p["stage"] == stage)["counters_per_step"]
    got = host_counters[stage]
    tuned = TUNER_DEPENDENT.get(stage, set())
    compared = sorted(set(expected) - DATA_DEPENDENT.get(stage, set()) - tuned)
    mismatched = {k: (got.get(k), expected[k]) for k in compared if got.get(k) != pytest.approx(expected[k])}
    mismatched |= {k: (got[k], expected[k]) for k in tuned if not got[k] <= expected[k] <= got[k] + PRODUCTS_PER_STEP}
    assert not mismatched, f"stage {stage}: counter (stand-in, GPU) {mismatched}"


def test_benchmark_epochs_record_where_the_time_went(host_run):
    row = host_run["run_stage"]
    assert row["stage"] == 8 and len(row["epoch_seconds"]) == 2
    assert all(t > 0 for t in row["epoch_cpu_seconds"]), "the process's CPU time per epoch"
    assert all(s is None or s >= 0 for s in row["epoch_host_steal_seconds"])
    # 41 launches per step, and per epoch the shuffle's two gathers (images, labels) over 4 steps
    assert row["batches_per_epoch"] == 4 and row["counters_per_step"]["launches"] == pytest.approx(41 + 2 / 4)


def test_a_stage_is_timed_without_the_steps_named(host_run):
    """run_stage(10, without={"fused_kernels"}) trains with stage 9's kernels and says so: chapter
    18 times stage 11's graph this way, without stage 11's lean step."""
    row, stage_9 = host_run["unfused"], host_run["profiles"]["9"]
    assert row["description"].endswith(", without fused_kernels")
    # per epoch, the shuffle's two gathers (images, labels) over 4 steps
    assert row["counters_per_step"]["launches"] == pytest.approx(stage_9["launches"] + 2 / 4)


def test_ladder_notes_explain_each_stage_that_did_not_get_faster():
    per_step = {7: 1.0, 8: 1.05, 9: 1.05 * 1.36, 10: 1.05 * 1.36 * 1.2, 11: 0.2}
    notes = bench.ladder_notes([{"stage": s, "s_per_step": t} for s, t in per_step.items()])
    assert [n.split(":")[0] for n in notes] == [
        "stage 8 is 1.050x the time per step of stage 7",
        "stage 9 is 1.360x the time per step of stage 8",
        "stage 10 is 1.200x the time per step of stage 9",
    ]
    assert "bound by the host" in notes[1] and "step_split" in notes[1]
    assert "slower by more than run-to-run noise" in notes[2]


GRAPHED_STEPS_WITH_A_HELD_BUFFER = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401
import numpy as np
import minitorch_cuda as mt
from minitorch_cuda.data import one_hot
from minitorch_cuda.train import Protocol, Trainer

mt.set_stage(int(sys.argv[1]))
rng = np.random.default_rng(0)
trainer = Trainer(Protocol(hidden=(31,), batch_size=17), "cuda")
held, step = [], trainer.device_step

def holding_step(xb, yb):  # the eager step's first activation outlives it, as if a cycle held it
    if not held:
        held.append(trainer.net(xb))
    return step(xb, yb)

trainer.device_step = holding_step
x = mt.tensor(rng.random((17 * 3, 784), dtype=np.float32), "cuda")
y = mt.tensor(one_hot(rng.integers(0, 10, 17 * 3)), "cuda")
with mt.profiler.count() as c:
    trainer.epoch(x, y, max_batches=3)
print(c.launches, c.syncs)
"""


@pytest.mark.parametrize("stage", [11, 12])
def test_graph_capture_does_not_rely_on_the_eager_buffers_coming_back(stage):
    """A capture must not allocate. Buffers of the eager step that something still holds are
    made up for before the capture (pool.reserve); without that, the capture's first request of
    such a size raises."""
    script = [sys.executable, "-c", GRAPHED_STEPS_WITH_A_HELD_BUFFER, str(stage)]
    done = subprocess.run(script, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    launches, syncs = map(int, done.stdout.split()[-2:])
    assert launches > 2 and syncs == 0, done.stdout


WGMMA_LAUNCHES = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401  (before anything imports pycuda)
from minitorch_cuda.cuda import launch_core, matmul_launchers
from minitorch_cuda.cuda.array import DeviceArray

calls = []  # name, grid, block and the arguments after the pointers (2 for a transpose, 3 for wgmma)
def launch(kernel, grid, block, *args, shapes=()):
    calls.append([kernel.name, grid, block, args[2 if kernel.name == "transpose_2d" else 3:]])
launch_core.launch = launch
M, N, K, batch = 70, 300, 36, 3
for ta in (False, True):
    for tb in (False, True):
        a = DeviceArray.empty((batch, K, M) if ta else (batch, M, K))
        b = DeviceArray.empty((K, N) if not tb else (N, K))  # shared by the batch
        g = launch_core.Gemm(M, N, K, ta, tb, M * K, 0, batch)
        matmul_launchers.matmul_tf32_wgmma(DeviceArray.empty((batch, M, N)), a, b, g)
print(json.dumps(calls))
"""


def test_matmul_wgmma_transposes_what_wgmma_cannot_read():
    """wgmma takes TF32 operands K-contiguous only: A stored K x M and B stored K x N are
    transposed first (a batch of A each, the shared B once), with the strides that follow."""
    done = subprocess.run([sys.executable, "-c", WGMMA_LAUNCHES], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = [(name, tuple(grid), tuple(block), tuple(args)) for name, grid, block, args in json.loads(done.stdout)]
    M, N, K, batch = 70, 300, 36, 3
    transpose_a = ("transpose_2d", (2, 1, batch), (32, 8, 1), (K, M, M * K))  # (R, C, in_stride) of A
    transpose_b = ("transpose_2d", (5, 1, 1), (32, 8, 1), (K, N, 0))
    wgmma = ("matmul_tf32_wgmma", (2, 1, batch), (256, 1, 1))
    assert calls == [
        transpose_b,
        (*wgmma, (M, N, K, M * K, 0)),  # ta=0, tb=0
        (*wgmma, (M, N, K, M * K, 0)),  # ta=0, tb=1: nothing to transpose
        transpose_a,
        transpose_b,
        (*wgmma, (M, N, K, M * K, 0)),  # ta=1, tb=0
        transpose_a,
        (*wgmma, (M, N, K, M * K, 0)),  # ta=1, tb=1
    ]


STAGE_12_ROUTES = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401  (before anything imports pycuda; it answers sm_90)
from minitorch_cuda import stages
from minitorch_cuda.cuda import launch_core, ops_matmul
from minitorch_cuda.cuda.array import DeviceArray
from minitorch_cuda.cuda.autotune import tuner

tuner.enabled = False  # the stand-in times nothing: each tuned choice is its first candidate
routes = []  # the kernels each product launches
launch_core.launch = lambda kernel, *args, shapes=(): routes[-1].append(kernel.name)
with stages.use_stage(12):
    for M, N, K in ((1024, 1024, 1024), (1024, 1024, 1022), (64, 256, 784), (2048, 10, 128)):
        routes.append([])
        ops_matmul.matmul(DeviceArray.empty((M, K)), DeviceArray.empty((K, N)))
print(json.dumps(routes))
"""


def test_stage_12_takes_wgmma_for_large_products_on_hopper():
    """From WGMMA_MIN_PRODUCT multiply-adds up with K in quads: the TMA-fed wgmma, reading b as stored (its
    N-major build); smaller products stay on mma.sync. Where an extent is not a multiple of 4, mma.sync
    copies a float at a time, timed against WMMA on a GPU; untimed (the tuner off here), mma.sync."""
    done = subprocess.run([sys.executable, "-c", STAGE_12_ROUTES], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == [
        ["matmul_tf32_wgmma_tma"],
        ["matmul_tf32_async"],  # K = 1022 is not whole quads: not for wgmma
        ["matmul_tf32_async"],
        ["matmul_tf32_async"],  # N = 10
    ]


STAGE_12_ON_A_T4 = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401  (before anything imports pycuda)
standin_pycuda._Device.compute_capability = lambda self: (7, 5)  # a T4: FP16 tensor cores only
standin_pycuda._Device.name = lambda self: "Tesla T4"
from minitorch_cuda import stages
from minitorch_cuda.cuda import launch_core, ops_matmul
from minitorch_cuda.cuda.array import DeviceArray

from minitorch_cuda import profiler

launched, program = [], profiler.counters  # not the tuner's measure of the host (profiler.uncounted)
launch_core.launch = lambda kernel, *args, shapes=(): profiler.counters is program and launched.append(kernel.name)
with stages.use_stage(11):
    ops_matmul.matmul(DeviceArray.empty((64, 784)), DeviceArray.empty((784, 256)))
try:
    with stages.use_stage(12):
        ops_matmul.matmul(DeviceArray.empty((64, 784)), DeviceArray.empty((784, 256)))
except ValueError as exc:
    print(launched, exc)
"""


def test_stage_12_on_a_gpu_without_tf32_tensor_cores_says_so_before_compiling():
    """A T4 (sm_75) has no TF32 tensor cores: stage 12 is refused with what to do, before
    mma.cu is compiled (its TF32 instructions would not assemble for sm_75); stage 11 runs."""
    done = subprocess.run([sys.executable, "-c", STAGE_12_ON_A_T4], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.strip()
    assert out.startswith("['matmul_regtiled_"), out  # stage 11's product launched, stage 12's did not
    assert "needs TF32 tensor cores (compute capability 8.0 or newer); Tesla T4 is sm_75" in out
    assert "use stage 11 or below" in out
