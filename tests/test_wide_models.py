"""experiments/wide_models.py without a GPU: its summary of a benchmark run against issue 41's
targets and its report lines, on made-up runs (the GPU measures; this checks the arithmetic)."""

from __future__ import annotations

import pytest

from minitorch_cuda.experiments import wide_models


def bench_result(us: dict[int, float], graph_us: float) -> dict:
    stages = [{"stage": s, "s_per_step": t * 1e-6, "counters_per_step": {"launches": 1.0}} for s, t in us.items()]
    return {"stages": stages, "torch_graph": {"s_per_step": graph_us * 1e-6}}


def phases(row_from: int) -> dict:
    names = [f"forward {i}" for i in range(1, row_from + 1)] + ["rows", "gradients", "update"]
    return {"phases": [{"phase": n, "median_us": 2.0} for n in names], "total": {"median_us": 2.0 * len(names)},
            "row_from": row_from}  # fmt: skip


def test_the_summary_sets_each_stage_against_pytorchs_graph_and_the_targets() -> None:
    s = wide_models.summary(bench_result({11: 60.0, 12: 50.0, 13: 25.0}, 100.0), protocol=False)
    assert s["over_torch_graph"] == pytest.approx({"11": 0.6, "12": 0.5, "13": 0.25})
    assert s["stage_13_target"] == 0.3 and s["stage_13_met"] and s["stage_12_met"]
    assert s["us_per_step"]["torch_graph"] == pytest.approx(100.0)
    protocol = wide_models.summary(bench_result({11: 60.0, 12: 61.0, 13: 20.0}, 100.0), protocol=True)
    assert protocol["stage_13_target"] == 0.15 and not protocol["stage_13_met"] and not protocol["stage_12_met"]
    assert protocol["stage_12_over_11"] == pytest.approx(61 / 60)


def test_the_report_names_the_model_each_ratio_and_each_phase() -> None:
    entry = {"model": 1, "hidden": (512, 512, 512), "activation": "sigmoid", "batch_size": 128,
             "summary": wide_models.summary(bench_result({11: 60.0, 12: 70.0, 13: 40.0}, 100.0), protocol=False),
             "phases": {"default": phases(3), "rows phase from layer 2": phases(1)}}  # fmt: skip
    lines = wide_models.report(entry).splitlines()
    assert lines[0].startswith("model 1: 784-512-512-512-10 sigmoid, batch 128: stage 11 0.60, stage 12 0.70")
    assert "stage 13 target <= 0.3: MISSED" in lines[0] and "stage 12 / 11 = 1.17: MISSED" in lines[0]
    assert lines[1].startswith("  stage 13 (default, rows from layer 3): forward 1 2.0, forward 2 2.0")
    assert "rows from layer 1" in lines[2] and len(lines) == 3


def test_the_models_are_the_protocols_then_wider_ones_up_to_512_and_batch_128() -> None:
    assert wide_models.MODELS[0] == ((256, 128), "relu", 64)
    wider = wide_models.MODELS[1:]
    assert len(wider) >= 3 and all(max(h) <= 512 and b <= 128 for h, _, b in wider)
    assert {a for _, a, _ in wider} == {"relu", "sigmoid"}


def test_a_bad_model_number_is_one_line_and_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        wide_models.main(["--models", "7"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "invalid choice: 7" in err and err.count("\n") == 1, err
