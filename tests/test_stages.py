"""The profiler's counters prove what each optimization stage changed.

Each test runs the same work at the stages on both sides of a step and checks
the counters (``mt.profiler.count()``) or the kernel names that
``mt.profiler.profile()`` recorded (GPU); the ladder itself, its named steps and
``stages.parse``, are checked on the CPU first.
"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

import minitorch_cuda as mt
from minitorch_cuda import optim, stages
from minitorch_cuda.data import one_hot
from minitorch_cuda.train import Protocol, Trainer

ALL = range(mt.MAX_STAGE + 1)


def matmul_tol(stage: int) -> float:
    """Stage 12 rounds matmul inputs to TF32 (10-bit mantissa): ~1e-3 relative per product."""
    return 3e-2 if stage >= 12 else 1e-4


def kernel_names(prof) -> set[str]:
    return {row["name"] for row in prof.stats("kernel")}


def synthetic_batches(steps: int, batch: int = 64):
    rng = np.random.default_rng(0)
    x = rng.random((steps * batch, 784), dtype=np.float32)
    y = one_hot(rng.integers(0, 10, steps * batch))
    return mt.tensor(x, "cuda"), mt.tensor(y, "cuda")


def trainer_and_batches(steps: int):
    trainer = Trainer(Protocol(), "cuda")
    x, y = synthetic_batches(steps)
    batches = [(x[i * 64 : (i + 1) * 64], y[i * 64 : (i + 1) * 64]) for i in range(steps)]
    return trainer, batches


# --- CPU: the ladder as a table of named steps ---------------------------------------------


def test_every_step_has_its_predicate_and_a_stage_on_the_ladder():
    assert len(stages.BY_NAME) == len(stages.STEPS), "step names are unique"
    for step in stages.STEPS:
        assert stages.MIN_STAGE < step.stage <= stages.MAX_STAGE, step
        assert step.description and "\n" not in step.description, step
        predicate = getattr(stages, step.name)
        assert predicate.__name__ == step.name
        for s in ALL:
            with stages.use_stage(s):
                assert predicate() == (s >= step.stage) == stages.is_on(step.name), (step.name, s)
                assert stages.is_on(step.name, s) == (s >= step.stage)


def test_every_stage_above_0_introduces_a_step_and_says_what_it_adds():
    assert {step.stage for step in stages.STEPS} == set(range(1, stages.MAX_STAGE + 1))
    assert set(stages.DESCRIPTIONS) == set(ALL)
    assert stages.DESCRIPTIONS[0] == "naive CUDA backend"
    assert stages.DESCRIPTIONS[9] == "register-tiled matmul, vectorized kernels"


def test_without_switches_one_step_off_and_restores_it():
    with stages.use_stage(9, without={"regtiled_matmul"}):
        assert stages.get_stage() == 9 and stages.switched_off() == {"regtiled_matmul"}
        assert not stages.regtiled_matmul() and not stages.is_on("regtiled_matmul")
        assert stages.vectorized_kernels() and stages.tiled_matmul(), "the other steps stay on"
        assert stages.is_on("regtiled_matmul", 9), "an explicit stage reads the full ladder"
        with stages.use_stage(10):  # a nested setting is set anew...
            assert stages.regtiled_matmul() and stages.switched_off() == frozenset()
        assert not stages.regtiled_matmul()  # ...and the outer one comes back
    assert stages.get_stage() == stages.DEFAULT_STAGE and stages.switched_off() == frozenset()


def test_without_a_sync_step_or_tensor_cores():
    with stages.use_stage(9, without=["async_launches"]):
        assert stages.sync_after_launch()
    with stages.use_stage(9):
        assert not stages.sync_after_launch()
    with stages.use_stage(12, without="tensor_cores"):  # one name as a string
        assert stages.full_fp32() and not stages.tensor_cores()
        assert not stages.full_fp32(12)
    with stages.use_stage(12):
        assert not stages.full_fp32()


def test_without_an_unknown_step_names_it_and_the_valid_ones():
    with pytest.raises(ValueError, match="unknown step.*regtiled_matmal, warp_shufle") as info:
        stages.set_stage(9, without={"warp_shufle", "regtiled_matmal"})
    assert all(step.name in str(info.value) for step in stages.STEPS)
    with pytest.raises(ValueError, match="unknown step"), stages.use_stage(9, without={"nope"}):
        pass
    with pytest.raises(ValueError, match="unknown step"):
        stages.is_on("nope")
    assert stages.get_stage() == stages.DEFAULT_STAGE and stages.switched_off() == frozenset()


def test_set_stage_clears_what_was_switched_off():
    stages.set_stage(9, without={"vectorized_kernels"})
    assert not stages.vectorized_kernels()
    stages.set_stage(9)
    assert stages.vectorized_kernels()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-8", list(range(9))),
        ("8,0, 2-3", [0, 2, 3, 8]),
        ("0-8,12", [*range(9), 12]),
        ("5", [5]),
        ("3-3,3", [3]),
        (f"0-{mt.MAX_STAGE}", list(ALL)),
    ],
)
def test_parse_reads_stage_lists(text, expected):
    assert stages.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("abc", "abc"),
        ("0-8,x", "x"),
        ("", ""),
        ("3-1", "3-1"),
        (str(mt.MAX_STAGE + 1), str(mt.MAX_STAGE + 1)),
        (f"0-{mt.MAX_STAGE + 1}", f"0-{mt.MAX_STAGE + 1}"),
        ("-1", "-1"),
        ("1,,2", ""),
        ("1.5", "1.5"),
    ],
)
def test_parse_names_the_bad_token(text, token):
    with pytest.raises(ValueError, match=re.escape(f"bad stage {token!r}")):
        stages.parse(text)


@pytest.mark.parametrize("module", ["bench", "sanitize"])
def test_the_clis_reject_a_bad_stage_list_in_one_line(module, capsys):
    cli = importlib.import_module(f"minitorch_cuda.{module}")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--stages", "0-8,abc"])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert errors == [
        f"python -m minitorch_cuda.{module}: error: argument --stages: bad stage 'abc' in "
        "'0-8,abc': use e.g. 0-8, 6,8 or 0-8,12 (see --help)"
    ]


# --- GPU: what each step changes -----------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("stage", [0, 1])
def test_stage_1_clips_on_the_device(stage):
    with mt.use_stage(stage):
        params = [mt.randn(s, device="cuda", requires_grad=True) for s in ((300, 20), (20,), (20, 10))]
        for p in params:
            p.grad = mt.randn(p.shape, std=10.0, device="cuda")
        grad_bytes = sum(4 * p.size for p in params)
        opt = optim.SGD(params, lr=0.1)
        with mt.profiler.count() as c:
            opt.clip_gradients(1.0)
            mt.synchronize()
        norm = np.sqrt(sum(float((p.grad.numpy().astype(np.float64) ** 2).sum()) for p in params))
    assert norm == pytest.approx(1.0, rel=1e-4)
    if stage == 0:
        assert c.dtoh_bytes >= grad_bytes, f"stage 0 reads every gradient back: {c}"
    else:
        assert c.dtoh_copies == 0 and c.dtoh_bytes == 0 and c.htod_bytes == 0, f"stage 1 keeps clipping on the GPU: {c}"


@pytest.mark.gpu
@pytest.mark.parametrize("stage", ALL)
def test_stage_2_gathers_rows_in_one_launch(stage):
    rows = [5, 0, 49, 17, 17, 3, 8, 22, 41, 30]
    with mt.use_stage(stage):
        x = mt.tensor(np.arange(50 * 7, dtype=np.float32).reshape(50, 7), "cuda")
        mt.synchronize()
        with mt.profiler.count() as c:
            out = x[rows]
        assert np.array_equal(out.numpy(), x.numpy()[rows])
    if stage < 2:
        assert c.dtod_copies == len(rows) and c.launches == 0, f"stage {stage}: one copy per row: {c}"
    else:
        assert c.dtod_copies == 0 and c.launches == 1, f"stage {stage}: one gather launch: {c}"


@pytest.mark.gpu
@pytest.mark.parametrize("stage", ALL)
def test_stage_3_fuses_transposes_into_matmul(stage):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
    with mt.use_stage(stage):
        ta, tb = mt.tensor(a, "cuda"), mt.tensor(b, "cuda")
        mt.synchronize()
        with mt.profiler.count() as c, mt.profiler.profile() as prof:
            out = ta.matmul(tb, transpose_b=True)
            out2 = ta @ tb.T
        tol = matmul_tol(stage)
        np.testing.assert_allclose(out.numpy(), a @ b.T, rtol=tol, atol=tol)
        np.testing.assert_allclose(out2.numpy(), a @ b.T, rtol=tol, atol=tol)
    names = kernel_names(prof)
    if stage < 3:
        assert "strided_copy" in names and c.launches == 4, f"stage {stage}: {names}, {c}"
    else:
        assert "strided_copy" not in names and c.launches == 2, f"stage {stage}: {names}, {c}"


@pytest.mark.gpu
@pytest.mark.parametrize("stage", ALL)
def test_stage_4_pools_memory(stage):
    with mt.use_stage(stage):
        trainer, batches = trainer_and_batches(6)
        trainer.step(*batches[0])
        per_step = []
        with mt.profiler.count() as total:
            for xb, yb in batches[1:]:
                with mt.profiler.count() as c:
                    trainer.step(xb, yb)
                per_step.append(c)
    if stage < 4:
        assert all(c.allocations > 0 for c in per_step), f"stage {stage}: {[c.allocations for c in per_step]}"
        assert total.pool_hits == 0
    elif stage >= 11:  # the captured step owns its buffers: a replay asks the pool for nothing
        assert total.allocations == 0 and total.pool_misses == 0, f"stage {stage}: {total}"
    else:
        assert total.pool_hit_rate() > 0.99, f"stage {stage}: pool hit rate {total.pool_hit_rate():.4f}, {total}"
        assert total.allocations <= 0.01 * (total.pool_hits + total.pool_misses)


@pytest.mark.gpu
@pytest.mark.parametrize("stage", ALL)
def test_stage_5_batches_matmul_into_one_launch(stage):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((8, 64, 64)).astype(np.float32) for _ in range(2))
    with mt.use_stage(stage):
        ta, tb = mt.tensor(a, "cuda"), mt.tensor(b, "cuda")
        mt.synchronize()
        with mt.profiler.count() as c, mt.profiler.profile() as prof:
            out = ta @ tb
        np.testing.assert_allclose(out.numpy(), a @ b, rtol=matmul_tol(stage), atol=matmul_tol(stage) * 8)
    names = kernel_names(prof)
    expected = {
        0: "matmul_naive",
        3: "matmul_transposed",
        5: "matmul_batched",
        6: "matmul_tiled",
        9: ("matmul_regtiled_", "matmul_pipelined_"),  # the autotuned variant: a prefix
        12: "matmul_tf32",
    }
    expected_name = expected[max(s for s in expected if s <= stage)]
    assert len(names) == 1 and next(iter(names)).startswith(expected_name), f"stage {stage}: {names}"
    assert c.launches == (8 if stage < 5 else 1), f"stage {stage}: {c}"


@pytest.mark.gpu
@pytest.mark.parametrize("stage", ALL)
def test_stage_7_drops_syncs(stage):
    with mt.use_stage(stage):
        trainer, batches = trainer_and_batches(3)
        trainer.step(*batches[0])  # compiles what the step needs
        with mt.profiler.count() as c:
            loss = trainer.step(*batches[1])
    assert np.isfinite(loss)
    if stage <= 6:
        assert c.launches > 0 and c.syncs == c.launches, f"stage {stage}: a sync after every launch: {c}"
    else:
        assert c.syncs == 0, f"stage {stage}: a training step must not sync: {c}"
        # Only the loss comes back: a 4-byte copy, or at stage 13 the kernel's own report (no copy).
        copies = (0, 0) if stage == 13 else (1, 4)
        assert (c.dtoh_copies, c.dtoh_bytes) == copies, f"stage {stage}: only the loss is read back: {c}"


@pytest.mark.gpu
@pytest.mark.parametrize("stage", ALL)
def test_stage_8_uses_warp_shuffle_reductions(stage):
    with mt.use_stage(stage):
        trainer, batches = trainer_and_batches(2)
        trainer.step(*batches[0])
        x = mt.randn((5, 300), device="cuda")
        with mt.profiler.profile() as prof:
            trainer.step(*batches[1])
            x.softmax().sum(1)
            x.sum()
    reductions = {n for n in kernel_names(prof) if n.startswith(("sum_rows", "sumsq", "softmax_rows", "softmax_xent"))}
    if stage >= 9:  # stage 9's softmax and 10's fused loss and clipping reduce with shuffles only
        assert not any(n.endswith("_volatile") for n in reductions), f"stage {stage}: {reductions}"
        assert "sum_rows_shuffle" in reductions and "softmax_rows_warp" in reductions, reductions
        return
    kind = "_shuffle" if stage >= 8 else "_volatile"
    assert {n.rsplit("_", 1)[0] for n in reductions} == {"sum_rows", "softmax_rows", "softmax_xent"} | (
        {"sumsq"} if stage >= 1 else set()
    ), reductions
    assert all(n.endswith(kind) for n in reductions), f"stage {stage}: {reductions}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("without", "kernel"),
    [(set(), ("matmul_regtiled_", "matmul_pipelined_")), ({"regtiled_matmul"}, "matmul_tiled")],  # 9: autotuned
)
def test_stage_9_without_regtiled_matmul_runs_the_tiled_kernel(without, kernel):
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((72, 73), (73, 74)))
    with mt.use_stage(9, without=without), mt.profiler.profile() as prof:
        out = mt.tensor(a, "cuda") @ mt.tensor(b, "cuda")
        np.testing.assert_allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert {name.startswith(kernel) for name in kernel_names(prof)} == {True}, kernel_names(prof)
