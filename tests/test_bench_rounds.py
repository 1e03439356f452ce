"""The benchmark's interleaved rounds (bench.run_rounds, StageRun) without a GPU: fake runs
and a fake trainer on a fake clock."""

from __future__ import annotations

import types

import numpy as np
import pytest

from minitorch_cuda import bench

QUIET = types.SimpleNamespace(update=lambda n: None, set_postfix_str=lambda s: None)


class FakeRun:
    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def label(self) -> str:
        return self.name

    def start(self) -> None:
        self.log.append(("start", self.name))

    def epoch(self) -> None:
        self.log.append(("epoch", self.name))

    def row(self) -> dict:
        return {"name": self.name, "epochs": sum(1 for e in self.log if e == ("epoch", self.name))}


def test_rounds_warm_every_run_up_first_then_rotate_the_order() -> None:
    log: list = []
    rows = bench.run_rounds([FakeRun(n, log) for n in "abc"], 3, QUIET)
    assert log[:3] == [("start", "a"), ("start", "b"), ("start", "c")]
    assert [name for kind, name in log[3:]] == list("abcbcacab")
    assert [r["epochs"] for r in rows] == [3, 3, 3] and [r["name"] for r in rows] == list("abc")


def test_spread_is_median_quartiles_and_extremes() -> None:
    s = bench.spread([3.0, 1.0, 2.0, 5.0, 4.0])
    assert s == {"median_s": 3.0, "q1_s": 2.0, "q3_s": 4.0, "min_s": 1.0, "max_s": 5.0}


class FakeTrainer:
    """Each epoch advances the fake clock by the next of ``durations``."""

    durations: list[float] = []
    clock = [0.0]

    def __init__(self, protocol, device):
        assert device == "cuda"
        self.protocol, self.net = protocol, object()

    def epoch(self, x, y, max_batches=None):
        if max_batches == 10:  # the warm-up is not timed
            return 9.0
        self.clock[0] += self.durations.pop(0)
        return 1.0


@pytest.fixture
def fake_training(monkeypatch):
    FakeTrainer.clock[0] = 0.0
    monkeypatch.setattr(bench.train, "Trainer", FakeTrainer)
    monkeypatch.setattr(bench.train, "accuracy", lambda net, x, labels: 0.97)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: FakeTrainer.clock[0])
    return types.SimpleNamespace(x_train=np.zeros((640, 1)), y_train=np.zeros((640, 1)), x_test=None, labels_test=None)


def test_stage_rows_carry_the_median_and_spread_over_rounds(fake_training) -> None:
    FakeTrainer.durations = [0.5, 0.7, 0.4, 0.9, 0.6, 0.5]  # rounds in the order 2,3 / 3,2 / 2,3
    rows = bench.run_rounds([bench.StageRun(s, fake_training, 10) for s in (2, 3)], 3, QUIET)
    two, three = rows
    assert two["stage"] == 2 and two["epoch_seconds"] == pytest.approx([0.5, 0.9, 0.6])
    assert three["epoch_seconds"] == pytest.approx([0.7, 0.4, 0.5])
    assert two["batches_per_epoch"] == 10  # 640 images, batches of 64
    assert two["median_s"] == pytest.approx(0.6) and two["s_per_step"] == pytest.approx(0.06)
    assert (two["min_s"], two["max_s"]) == pytest.approx((0.5, 0.9))
    assert (three["s_per_step_min"], three["s_per_step_max"]) == pytest.approx((0.04, 0.07))
    assert {"q1_s", "q3_s", "counters_per_step", "test_accuracy", "last_epoch_loss"} <= set(two)


def test_run_stage_alone_still_times_epochs_back_to_back(fake_training) -> None:
    FakeTrainer.durations = [0.2, 0.3]
    row = bench.run_stage(4, fake_training, 2, 10, QUIET)
    assert row["epoch_seconds"] == pytest.approx([0.2, 0.3]) and row["median_s"] == pytest.approx(0.25)


def row(stage: int, s_per_step: float, lo: float, hi: float) -> dict:
    return {
        "stage": stage,
        "description": f"stage {stage}",
        "batches_per_epoch": 844,
        "median_s": 844 * s_per_step,
        "min_s": 844 * lo,
        "max_s": 844 * hi,
        "s_per_step": s_per_step,
        "s_per_step_min": lo,
        "s_per_step_max": hi,
    }


def test_ladder_notes_say_whether_the_ranges_overlap() -> None:
    overlapping = bench.ladder_notes([row(3, 1.0e-3, 0.9e-3, 1.2e-3), row(4, 1.05e-3, 1.0e-3, 1.1e-3)])
    assert len(overlapping) == 1 and overlapping[0].endswith("their epoch ranges over the rounds overlap")
    apart = bench.ladder_notes([row(3, 1.0e-3, 0.9e-3, 1.0e-3), row(4, 1.3e-3, 1.2e-3, 1.4e-3)])
    assert apart[0].endswith("do not overlap")
    old = bench.ladder_notes([{"stage": 3, "s_per_step": 1.0}, {"stage": 4, "s_per_step": 1.05}])
    assert "rounds" not in old[0]  # records made before the rounds have no ranges


def test_format_table_shows_each_rows_range() -> None:
    table = bench.format_table([row(3, 1.0e-3, 0.9e-3, 1.2e-3)], None)
    assert "min-max s" in table and "0.7596-1.0128" in table


def test_format_table_compares_the_graphed_stages_with_pytorchs_graph() -> None:
    stages_ = [row(10, 4.0e-4, 3.9e-4, 4.1e-4), row(11, 2.0e-4, 1.9e-4, 2.1e-4), row(13, 4.0e-5, 3.9e-5, 4.1e-5)]
    eager = row(0, 1.6e-3, 1.5e-3, 1.7e-3) | {"name": "PyTorch eager"}
    graph = row(0, 2.0e-4, 1.9e-4, 2.1e-4) | {"name": "PyTorch CUDA graph"}
    table = bench.format_table(stages_, eager, graph)
    assert "stage 10 / PyTorch eager (full epoch median): 0.250" in table
    assert "stage 11 / PyTorch CUDA graph (full epoch median): 1.000" in table
    assert "stage 13 / PyTorch CUDA graph (full epoch median): 0.200" in table
    assert "stage 10 / PyTorch CUDA graph" not in table  # stage 10 launches eagerly: its peer is eager


def test_a_ladder_run_writes_the_records_its_chapters_read() -> None:
    """The blog's ladder and the whole ladder are separate records, named as the chapters load them
    (a run of stages 0-13 once wrote bench_stages_beyond.json, which no chapter reads)."""
    from minitorch_cuda.bench import record_names

    assert record_names([0, 1, 8]) == ("bench_stages", "profiles")
    assert record_names(list(range(14))) == ("bench_beyond", "profiles_beyond")
    assert record_names([9]) == ("bench_beyond", "profiles_beyond")


class FakeSampler:
    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def warm_up(self) -> None:
        self.log.append(("warm", self.name))

    def sample(self) -> None:
        self.log.append(("sample", self.name))


def test_user_matmul_systems_warm_up_first_then_take_turns() -> None:
    from minitorch_cuda import user_matmul

    log: list = []
    a, b, c = "stage 9", "cuBLAS FP32", "stage 12"
    user_matmul.interleave({n: FakeSampler(n, log) for n in (a, b, c)}, 3)
    assert log[:3] == [("warm", a), ("warm", b), ("warm", c)]
    assert [name for _, name in log[3:]] == [a, b, c, b, c, a, c, a, b]


def test_user_matmul_table_marks_each_ratio_below_its_target() -> None:
    from minitorch_cuda import user_matmul

    def row(label, kind, ratios):
        targets = {n: user_matmul.TARGETS[o, kind] for o in user_matmul.OURS if (o, kind) in user_matmul.TARGETS
                   for n in [user_matmul.ratio_name(o)]}  # fmt: skip
        wall = dict.fromkeys(user_matmul.SYSTEMS, 1e-5)
        return {"label": label, "M": 1000, "N": 1000, "K": 1000, "kind": kind, "ratios": ratios, "targets": targets,
                "wall_s": wall}  # fmt: skip

    table = {"rows": [row("1000^3", "square", {"stage 9 / cuBLAS FP32": 0.80, "stage 12 / cuBLAS TF32": 0.90}),
                      row("MNIST fwd 1", "mnist", {"stage 9 / cuBLAS FP32": 0.5})]}  # fmt: skip
    lines = user_matmul.format_table(table).splitlines()
    assert "0.800 (>= 0.95, below)" in lines[2] and "0.900 (>= 0.85)" in lines[2]
    assert "0.500" in lines[3] and ">=" not in lines[3]  # the MNIST shapes have no target


def test_a_stage_run_trains_the_model_it_is_given(fake_training) -> None:
    """--hidden, --activation and --batch-size reach the trainer; the batches per epoch follow the batch size."""
    FakeTrainer.durations = [0.2]
    wide = bench.train.Protocol(hidden=(512, 512, 512), activation="sigmoid", batch_size=128)
    run = bench.StageRun(13, fake_training, 10, protocol=wide)
    row = bench.run_rounds([run], 1, QUIET)[0]
    assert run.trainer.protocol == wide and row["batches_per_epoch"] == 5  # 640 images, batches of 128
    assert bench.StageRun(13, fake_training, 10).protocol == bench.train.Protocol()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hidden", "512,x"], "argument --hidden: expected widths such as 512,256 (positive integers), not '512,x'"),
        (["--hidden", "512,0"], "not '512,0'"),
        (["--batch-size", "0"], "--batch-size must be at least 1, not 0"),
        (["--record", "--hidden", "512"], "--record stores the protocol's model only"),
        (["--activation", "tanh"], "invalid choice: 'tanh'"),
    ],
)
def test_a_bad_model_is_one_line_and_exit_2(capsys, argv, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and err.count("\n") == 1, err
