"""Stage 11's graphed step on the stand-in driver: what it launches, captures and replays.

The GPU test (``test_stages_beyond.test_graph_replay_equals_eager_steps``) compares
the numbers; ``test_host_path`` profiles, and a profiled step never goes through a
graph. Here a subprocess trains at stage 11 on ``standin_pycuda`` (whose
``cuda.bindings`` stand-in accepts every capture) and logs every launch, copy and
graph call: the first batch of a shape runs the step eagerly and captures the
same kernels; every later one is one graph launch and one read-back (the lean step's
graph fetches its batch through a cursor), or two copies before them (the graph alone,
without the lean step, as chapter 18 builds it).
The framework's ``GraphedStep`` also passes exercise 18.1's check, on the fake
device the exercise is written against. On a GPU, a capture survives garbage whose
collection would free device memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

TRACE = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401  (before anything imports pycuda)
import numpy as np
import pycuda.driver as drv
from cuda.bindings import driver as cu
import minitorch_cuda as mt
from minitorch_cuda import profiler
from minitorch_cuda.cuda import graphs, runtime
from minitorch_cuda.grade import checks
from minitorch_cuda.train import Protocol, Trainer

log, counted = [], [0]
launch_async = runtime.Kernel.launch_async
program = profiler.counters  # the program's counters (measuring the machine counts apart: profiler.uncounted)


def logged_launch(self, grid, block, stream, *args):
    # runtime.launch counts; the autotuner's timing does not
    if profiler.counters is program and program.launches > counted[0]:
        counted[0] = profiler.counters.launches
        log.append(["launch", self.name, list(grid), list(block), runtime.capturing()])
    return launch_async(self, grid, block, stream, *args)


runtime.Kernel.launch_async = logged_launch
drv.memcpy_dtod = lambda dst, src, nbytes: log.append(["dtod", nbytes])
drv.memcpy_dtoh = lambda host, src: (log.append(["dtoh", host.nbytes]), host.fill(0.5))
graph_launch = cu.cuGraphLaunch
# Graph.launch counts a launch too: note it, so that the next logged launch is a counted one
cu.cuGraphLaunch = lambda *args: (log.append(["graph launch"]), counted.__setitem__(0, profiler.counters.launches),
                                  graph_launch(*args))[2]

rng = np.random.default_rng(0)
rows = 64 * 3 + 48
x = mt.tensor(rng.random((rows, 784), dtype=np.float32), "cuda")
y = mt.tensor(np.eye(10, dtype=np.float32)[rng.integers(0, 10, rows)], "cuda")
steps = {{}}
for key, stage, without in (("10", 10, ()), ("11", 11, ()), ("11 graph only", 11, ("lean_step",))):
    with mt.use_stage(stage, without=without):
        trainer = Trainer(Protocol(), "cuda")
        for start in (0, 64, 128, 192, 0, 192):
            log.clear()
            with profiler.count() as c:
                trainer.step(x[start : start + 64], y[start : start + 64])
            steps.setdefault(key, []).append({{"rows": min(64, rows - start), "log": list(log),
                                               "counters": c.snapshot()}})
result = checks.run_check("18.1", graphs.GraphedStep)
print(json.dumps({{"steps": steps, "check": [result.passed, str(result)]}}))
"""


@pytest.fixture(scope="module")
def traced() -> dict:
    done = subprocess.run([sys.executable, "-c", TRACE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def kernels(log: list, capturing: bool) -> list:
    return [entry[1:4] for entry in log if entry[0] == "launch" and entry[4] == capturing]


def test_the_framework_passes_exercise_18_1(traced) -> None:
    passed, report = traced["check"]
    assert passed, report


# What stage 10 launches per MNIST step that the lean step (stage 11) folds into other launches.
FOLDED = {"sum_axis", "ew_relu_backward", "xent_backward", "ew_fill", "multi_sumsq", "multi_clip_rmsprop"}


def test_a_new_shape_runs_eagerly_then_captures_the_same_kernels(traced) -> None:
    stage10, stage11 = traced["steps"]["10"], traced["steps"]["11"]
    for new, first_use in ((0, 4), (3, 0)):  # the first 64-row batch, the first 48-row one
        log = stage11[new]["log"]
        eager, captured = kernels(log, False), kernels(log, True)
        # the first step zeroes (fills) the lean step's resident buffers once: the fetch's counter,
        # the backward seed, the split-K tile counters, the optimizer's grid barrier
        fills = [k for k in eager if k[0].startswith("ew_fill")]
        assert len(fills) == first_use, (new, eager)
        assert [k for k in eager if k not in fills] == captured and captured, (new, eager, captured)
        assert [e[0] for e in log if e[0] != "launch"] == ["dtod", "dtod", "dtoh"], log
        names = [k[0] for k in captured]  # the graph fetches its batch, then the lean step's 10 kernels
        assert names[0] == "fetch_batch" and len(names) == 11, names
        assert not [n for n in names if n.removesuffix("_vec4") in FOLDED], names
        tuned10 = [k[0] for k in kernels(stage10[new + 1 if new == 0 else 5]["log"], False)]  # a tuned stage 10 step
        assert len(tuned10) == 19 and sum(n.removesuffix("_vec4") in FOLDED for n in tuned10) == 9, tuned10


def test_every_later_batch_is_a_replay(traced) -> None:
    # batches 0, 64, 128, (192: a new shape), 0, 192: the lean graph fetches its own, and the host
    # writes the cursor (16 bytes) only at the two jumps; the graph alone (chapter 18) copies each
    for step, jump in ((1, False), (2, False), (4, True), (5, True)):
        entry = traced["steps"]["11"][step]
        assert [e[0] for e in entry["log"]] == ["graph launch", "dtoh"], entry["log"]
        c = entry["counters"]
        assert (c["launches"], c["syncs"], c["allocations"]) == (1, 0, 0), c
        assert (c["htod_copies"], c["htod_bytes"]) == ((1, 16) if jump else (0, 0)), (step, c)
        assert c["pool_hits"] + c["pool_misses"] == 0, c
        entry = traced["steps"]["11 graph only"][step]
        rows = entry["rows"]
        assert [e[0] for e in entry["log"]] == ["dtod", "dtod", "graph launch", "dtoh"], entry["log"]
        assert [e[1] for e in entry["log"] if e[0] == "dtod"] == [4 * rows * 784, 4 * rows * 10]
        c = entry["counters"]
        assert (c["launches"], c["syncs"], c["htod_copies"], c["allocations"]) == (1, 0, 0, 0), c


@pytest.mark.gpu
def test_a_capture_survives_garbage_that_frees_device_memory() -> None:
    """A cycle holding a buffer outside the pool (stage 3 frees with cuMemFree, which synchronizes)
    becomes garbage during a capture, with the collector set to run at every allocation: collected
    then, its free would invalidate the capture. The capture keeps the collector off until it ends
    (a step's capture failed so on the H100, depending on which tests ran before it in the process)."""
    import gc

    import minitorch_cuda as mt
    from minitorch_cuda.cuda import graphs, launchers
    from minitorch_cuda.cuda.array import DeviceArray

    with mt.use_stage(3):  # no pool: the buffer's collection is a cuMemFree
        cycle = [DeviceArray.empty((1 << 16,))]
    cycle.append(cycle)
    holder = [cycle]
    del cycle
    threshold = gc.get_threshold()
    try:
        with mt.use_stage(11):
            graph = graphs.Graph()
            with graph.capture():
                gc.set_threshold(1, 1, 1)  # a full collection at every allocation of a container
                holder.clear()  # the cycle is garbage now
                for _ in range(4):
                    launchers.floor("floor_empty")
                    [[] for _ in range(4)]
            gc.set_threshold(*threshold)
            graph.launch()
            graph.stream.synchronize()
    finally:
        gc.set_threshold(*threshold)
    assert gc.isenabled()
