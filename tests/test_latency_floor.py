"""Chapter 21's latency-floor experiment (minitorch_cuda/experiments/latency_floor.py) and its
kernels (floor.cu). The command refuses the CPU emulator; the kernels launch through the
framework on the emulator too (marked ``emulated``: ``MINITORCH_CUDA_EMULATE=1 python3 -m pytest
-m emulated tests/test_latency_floor.py``); the whole experiment, with tiny counts, needs a GPU.
That floor.cu compiles with nvcc is tests/test_kernels_compile.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from minitorch_cuda import emulator
from minitorch_cuda.experiments import latency_floor

EMULATED_TOO = [pytest.mark.gpu, pytest.mark.emulated]


def test_the_command_refuses_the_emulator(tmp_path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "minitorch_cuda.experiments.latency_floor"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {emulator.ENV: "1", "MINITORCH_CUDA_RESULTS_DIR": str(results)},
    )
    assert run.returncode == 2, (run.stdout, run.stderr[-3000:])
    message = run.stderr.strip()
    assert "\n" not in message and "Traceback" not in message, run.stderr
    assert message.startswith("python3 -m minitorch_cuda.experiments.latency_floor: not run: kernels run on the CPU")
    assert "its timings would be the CPU's, not GPU timings" in message
    assert run.stdout == "" and not any(results.iterdir())


class _Recorder:
    """A stand-in for torch, its network and its optimizer: each call appends its name to ``calls``
    (torch is not installed where these tests run; the GPU run is the lead's)."""

    def __init__(self, calls, name=""):
        self._calls, self._name = calls, name

    def __getattr__(self, attr):
        return _Recorder(self._calls, f"{self._name}.{attr}".lstrip("."))

    def __call__(self, *args, **kwargs):
        self._calls.append((self._name, args, kwargs))
        return _Recorder(self._calls, f"{self._name}()")


def test_torch_compile_gets_the_whole_step_with_nothing_that_waits_for_the_host() -> None:
    calls = []
    torch, net, optim = _Recorder(calls, "torch"), _Recorder(calls, "net"), _Recorder(calls, "optim")
    step = latency_floor.whole_step(torch, net, optim, max_norm=5.0)
    step("xb", "yb")
    names = [name for name, _, _ in calls]
    assert names == [
        "net", "torch.nn.functional.cross_entropy", "torch.nn.functional.cross_entropy().backward",
        "net.parameters", "torch.nn.utils.clip_grad_norm_", "optim.step", "optim.zero_grad",
        "torch.nn.functional.cross_entropy().detach",
    ]  # fmt: skip
    assert not any(n.endswith((".item", ".cpu", ".tolist", "synchronize")) for n in names), "no read-back inside"
    assert calls[4][2] == {"foreach": True} and calls[4][1][1] == 5.0


def test_the_compiled_peer_compiles_that_step_with_a_capturable_optimizer(monkeypatch) -> None:
    """CompiledTrainer on the stand-in: RmsProp capturable, the step compiled with
    mode="reduce-overhead" for fixed shapes, and a step is a new cudagraph iteration, the compiled
    call and one read-back of its loss."""
    from minitorch_cuda import train
    from minitorch_cuda.torch_reference import TorchTrainer

    calls = []

    def fake_init(self, protocol, data, seed=0):
        self.torch, self.protocol, self.net = _Recorder(calls, "torch"), protocol, _Recorder(calls, "net")

    monkeypatch.setattr(TorchTrainer, "__init__", fake_init)
    trainer = latency_floor.CompiledTrainer(train.Protocol(), data=None)
    (optimizer,) = [c for c in calls if c[0] == "torch.optim.RMSprop"]
    assert optimizer[2]["capturable"] is True
    (compiled,) = [c for c in calls if c[0] == "torch.compile"]
    assert compiled[2] == {"mode": "reduce-overhead", "dynamic": False}
    assert compiled[1][0].__qualname__ == "whole_step.<locals>.step"
    del calls[:]
    trainer.step("xb", "yb")
    assert [name for name, _, _ in calls] == [
        "torch.compiler.cudagraph_mark_step_begin", "torch.compile()", "torch.compile()().item"
    ]  # fmt: skip
    assert calls[1][1] == ("xb", "yb")


def test_one_step_is_the_events_between_two_read_backs() -> None:
    read = "[CUDA memcpy DTOH]"
    timeline = [
        ["a", "kernel", 0.0, 5.0], [read, "memcpy", 6.0, 1.0],
        ["a", "kernel", 10.0, 5.5], ["b", "kernel", 16.0, 2.0], [read, "memcpy", 19.0, 1.5],
        ["a", "kernel", 30.0, 5.0], [read, "memcpy", 36.0, 1.0],
    ]  # fmt: skip
    step = latency_floor.one_step({"timeline": timeline})
    assert step == [["a", "kernel", 5.5], ["b", "kernel", 2.0], [read, "memcpy", 1.5]]


def test_spread_is_in_microseconds() -> None:
    times = [1e-6 * t for t in (4.0, 1.0, 3.0, 2.0, 5.0)]
    got = latency_floor.spread_us(times)
    assert got["median_us"] == pytest.approx(3.0) and got["q1_us"] == pytest.approx(2.0)
    assert got["q3_us"] == pytest.approx(4.0) and got["min_us"] == pytest.approx(1.0)
    assert got["max_us"] == pytest.approx(5.0) and got["samples"] == 5


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize("blocks", [1, 3, 4])
def test_floor_barriers_crosses_the_grid_barrier_count_times(blocks) -> None:
    from minitorch_cuda.cuda import launchers, runtime
    from minitorch_cuda.cuda.ops_tensor import full

    barrier = full((2,), 0.0)
    counters = np.empty(2, np.uint32)
    # GridBarrier {count, generation}: every barrier bumps generation once and leaves count 0,
    # so the same barrier serves the next launch without being zeroed again.
    for count, generation in ((7, 7), (5, 12)):
        launchers.floor("floor_barriers", barrier, count, blocks=min(blocks, runtime.multiprocessors()))
        runtime.copy_dtoh(counters, barrier.ptr)
        assert list(counters) == [0, generation]


@pytest.mark.gpu
@pytest.mark.emulated
def test_floor_barriers_refuses_more_blocks_than_multiprocessors() -> None:
    from minitorch_cuda.cuda import launchers, runtime
    from minitorch_cuda.cuda.ops_tensor import full

    most = runtime.multiprocessors()
    with pytest.raises(ValueError, match=f"floor_barriers needs 1..{most} blocks .* not {most + 1}"):
        launchers.floor("floor_barriers", full((2,), 0.0), 1, blocks=most + 1)


@pytest.mark.gpu
@pytest.mark.emulated
def test_a_graph_of_empty_kernels_replays_with_one_launch_and_one_read_back() -> None:
    from minitorch_cuda import profiler

    replays, warmup, kernels = 7, 50, 3  # host_timed's warm-up calls count too
    with profiler.count() as counts:
        got = latency_floor.graph_floor(kernels, replays)
        plain = latency_floor.launch_floor(replays)
    calls = replays + warmup
    # one eager launch that loads the kernel, K recorded by the capture, then one per replay
    # (the whole graph) and one per plain launch
    assert counts.launches == 1 + kernels + calls + calls
    assert counts.dtoh_copies == 2 * calls and counts.dtoh_bytes == 4 * 2 * calls
    for row in (got, plain):
        assert row["samples"] == replays and 0 < row["min_us"] <= row["median_us"] <= row["max_us"]
    assert got["kernels"] == kernels


@pytest.mark.gpu
@pytest.mark.emulated
def test_a_graph_of_one_reporting_kernel_hands_its_loss_over_without_a_copy() -> None:
    from minitorch_cuda import profiler
    from minitorch_cuda.cuda import launchers
    from minitorch_cuda.cuda.step_report import StepReport

    replays, warmup = 7, 50
    with profiler.count() as counts:
        got = latency_floor.report_floor(replays)
    assert counts.launches == 1 + 1 + replays + warmup and counts.dtoh_copies == 0
    assert got["samples"] == replays and 0 < got["min_us"] <= got["median_us"] <= got["max_us"]
    report = StepReport()
    report.arm()
    launchers.floor("floor_report", report.ptr)
    assert report.wait() == 0.5


@pytest.mark.gpu
def test_the_experiment_records_every_part(tmp_path, monkeypatch) -> None:
    """The whole run with tiny counts (one round of full epochs): ch21_floor.json has every part."""
    if emulator.selected():
        pytest.skip("the experiment refuses the CPU emulator (test_the_command_refuses_the_emulator)")
    monkeypatch.setattr("minitorch_cuda.results.RESULTS_DIR", tmp_path)
    args = ["--replays", "30", "--rounds", "1", "--warmup", "2", "--barrier-repeats", "3", "--phase-steps", "20"]
    assert latency_floor.main(args) == 0
    record = json.loads((tmp_path / "ch21_floor.json").read_text())
    assert [r["kernels"] for r in record["graph"]] == list(latency_floor.GRAPH_KERNELS)
    rows = record["graph"] + [record["launch"], record["report"]]
    assert all(r["samples"] == 30 and r["median_us"] > 0 for r in rows)
    assert [b["blocks"] for b in record["barrier"]][1] == 1 and record["barrier"][0]["median_us"] > 0
    assert [r["stage"] for r in record["stages"]] == list(latency_floor.STAGES)
    assert all(r["test_accuracy"] > 0.8 for r in record["stages"])
    assert record["stages"][-1]["counters_per_step"]["launches"] < 1.1  # stage 13: one launch a step
    for stage in map(str, latency_floor.TIMELINE_STAGES):
        assert record["timelines"][stage][-1][0] == "[CUDA memcpy DTOH]"
    assert [e[0] for e in record["timelines"]["13"]] == ["persistent_step", "[CUDA memcpy DTOH]"]
    phases = record["phases"]
    assert phases["split"]["k_splits"] == [8, 1, 1] and phases["unsplit"]["k_splits"] == [1, 1, 1]
    assert phases["split"]["grid_barriers"] == phases["unsplit"]["grid_barriers"] == 3
    assert set(phases) == set(latency_floor.PHASE_VARIANTS)
    assert all(500 < run["sm_clock_mhz"]["median"] < 5000 for run in phases.values())  # any GPU's clock
    # Block 0's start to its end lies within one step of stage 13 as the rounds timed it (a factor 2
    # of slack), and above what the grid barriers alone cost (each at least an L2 round trip: 1.85 us
    # on the H200, 0.3 us far below any GPU's). One profiled launch is no yardstick: pytest's workers
    # share the GPU, and on the H200 one launch's event spanned 7.3 ms beside a 79 us median.
    step_us = record["stages"][-1]["s_per_step"] * 1e6
    for run in phases.values():
        assert run["steps"] == 20 and all(r["median_us"] > 0 for r in run["phases"])
        assert 0.3 * run["grid_barriers"] < run["total"]["median_us"] < 2 * step_us, (run["total"], step_us)
    if record["torch_missing"] is None:
        assert "graph" in record["torch_graph"]["name"] and record["torch"]["s_per_step"] > 0
        assert "skipped" in record["torch_compile"] or record["torch_compile"]["s_per_step"] > 0


@pytest.mark.gpu
@pytest.mark.emulated
def test_phase_times_clocks_stage_13_split_unsplit_and_unstaged() -> None:
    import minitorch_cuda as mt
    from minitorch_cuda.data import one_hot
    from minitorch_cuda.train import Protocol

    protocol = Protocol(hidden=(37, 19), batch_size=21, max_norm=0.5)
    rng = np.random.default_rng(0)
    x, y = mt.tensor(rng.random((21, 784), np.float32), "cuda"), mt.tensor(one_hot(rng.integers(0, 10, 21)), "cuda")
    got = latency_floor.phase_times(protocol, x, y, steps=2, warmup=1)
    split, unsplit, unstaged = got["split"], got["unsplit"], got["unstaged"]
    assert [r["phase"] for r in split["phases"]] == [r["phase"] for r in unsplit["phases"]]
    assert [r["phase"] for r in split["phases"]] == [r["phase"] for r in unstaged["phases"]]
    assert [r["phase"] for r in split["phases"]] == ["forward 1", "rows", "gradients", "update"]
    assert split["k_splits"] == unstaged["k_splits"] == [24, 1, 1] and unsplit["k_splits"] == [1, 1, 1]
    assert split["steps"] == unsplit["steps"] == unstaged["steps"] == 2 and split["rows"] == 21
    assert [r["step"] for r in split["row_steps"]][::4] == ["first layer's sum", "backward 3"]
    assert all(r["median_us"] > 0 for r in split["phases"] + unsplit["phases"] + unstaged["phases"])


def test_step_timelines_lays_one_step_back_to_back() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from minitorch_cuda.book import figures

    read = "[CUDA memcpy DTOH]"
    steps = {
        "stage 11": {"events": [["a", "kernel", 10.0], ["b", "kernel", 20.0], [read, "memcpy", 5.0]], "step_us": 30.0},
        "stage 13": {"events": [["persistent_step", "kernel", 25.0], [read, "memcpy", 8.0]], "step_us": 40.0},
    }
    ax = figures.step_timelines(steps)

    def spans(y: float) -> list[tuple[float, float]]:  # (start, width) of every bar on row y
        out = []
        for bars in ax.collections:
            for path in bars.get_paths():
                xs, ys = path.vertices[:, 0], path.vertices[:, 1]
                if ys.min() < y < ys.max():
                    out.append((float(xs.min()), float(xs.max() - xs.min())))
        return sorted(out)

    # rows bottom-up in reverse order: stage 13 at y = 0, stage 11 at y = 1
    assert spans(1) == [(0.0, 10.0), (10.0, 20.0), (30.0, 5.0)]  # 35 us of events in a 30 us step: no grey
    assert spans(0) == [(0.0, 25.0), (25.0, 8.0), (33.0, 7.0)]  # grey: 7 us that no event covers
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 13", "stage 11"]
    assert ax.get_xlim()[1] == 1.25 * 40.0


def test_phase_bars_lay_the_phases_back_to_back_and_keep_a_phase_color() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from minitorch_cuda.book import figures

    def run(pairs, total):
        rows = [{"phase": p, "median_us": us, "mean_us": us} for p, us in pairs]
        return {"phases": rows, "total": {"median_us": total}}

    phases = {
        "split": run([("forward 1 slices", 10.0), ("forward 1 sum", 2.0), ("update", 8.0)], 20.0),
        "unsplit": run([("forward 1", 16.0), ("update", 9.0)], 25.0),
    }
    ax = figures.phase_bars(phases)
    rows: dict[int, list] = {0: [], 1: []}  # y = 0: unsplit (drawn bottom-up), y = 1: split
    for bars in ax.collections:
        (path,) = bars.get_paths()
        xs, ys = path.vertices[:, 0], path.vertices[:, 1]
        rows[round(float(ys.mean()))].append((float(xs.min()), float(xs.max() - xs.min()), bars.get_facecolor()[0]))
    assert [(x, w) for x, w, _ in sorted(rows[1])] == [(0.0, 10.0), (10.0, 2.0), (12.0, 8.0)]
    assert [(x, w) for x, w, _ in sorted(rows[0])] == [(0.0, 16.0), (16.0, 9.0)]
    assert tuple(sorted(rows[1])[2][2]) == tuple(sorted(rows[0])[1][2])  # "update" has one color in both rows
    assert tuple(sorted(rows[1])[0][2]) != tuple(sorted(rows[0])[0][2])  # different phases, different colors
    # a phase is named where its name fits its segment at the page's size (book/style.py's minimum):
    # 10 of 20 us is wide enough, 2 of 20 us is not (named, it would run over its neighbours)
    texts = [t.get_text() for t in ax.texts]
    assert "fwd 1 slices" in texts and "fwd 1" in texts and "fwd 1 sum" not in texts
    ax.figure.canvas.draw()
    for text in ax.texts:
        if text.get_text().endswith(" us"):
            continue
        box, (x, y) = text.get_window_extent(), text.get_position()
        (segment,) = [(s, w) for s, w, _ in rows[round(y)] if s < x < s + w]
        left, right = ax.transData.transform((segment[0], y))[0], ax.transData.transform((sum(segment), y))[0]
        assert left <= box.x0 and box.x1 <= right, f"{text.get_text()!r} runs out of its segment"
    assert {"20 us", "25 us"} <= {t.get_text() for t in ax.texts}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["unsplit", "split"]
