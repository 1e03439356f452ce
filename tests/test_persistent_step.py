"""Stage 13: the protocol's whole training step as one persistent kernel.

Its losses and parameters after 20 steps against stage 10's (1e-4 relative) and against a
float64 numpy model of the same steps; ReLU and Sigmoid, RmsProp and SGD; one layer to four,
one tile of rows and two; grids of 1, 2 and 3 blocks giving the same bits; the first layer's
forward split along k (NARROW's 784 -> 37 at 21 rows into 24 slices, the protocol's 784 -> 256
into 8) and not; the later layers' weights staged in shared memory (4 and 16 bytes a copy) and
read from global memory, the same bits; the phase clock's build, which trains the same bits; the
models that do not fit, named; the sm_90 builds without spills. The
CUDA tests run on the CPU emulator too (marked ``emulated`` here), on a narrow MNIST-shaped
model with odd sizes; the protocol's own 784-256-128-10 model is GPU-only, as it
takes the emulator a minute.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import needs_nvcc
from helpers import (
    NARROW,
    assert_close,
    assert_close_by_norm,
    assert_same_training,
    mnist_shaped,
    sm90_build,
    train_steps,
    training_reference,
)

import minitorch_cuda as mt
from minitorch_cuda import nn, optim
from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
from minitorch_cuda.train import Protocol, Trainer, make_net

SHAPES = {
    "narrow": NARROW,
    "one layer, two tiles of rows": Protocol(hidden=(), batch_size=70, max_norm=0.5),
    "four layers": Protocol(hidden=(37, 19, 23), batch_size=21, max_norm=0.5),
    "widths of 16-byte rows": Protocol(hidden=(40, 24), batch_size=21, max_norm=0.5),  # staged 16 bytes a copy
    # W_2 (300 x 200) does not fit in shared memory: layers 1 and 2 run as tiles (rows_from: 2)
    "wide layers": Protocol(hidden=(300, 200, 40), batch_size=21, max_norm=0.5),
}


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize(
    ("shape", "activation", "optimizer"),
    [("narrow", "relu", "rmsprop"), ("narrow", "sigmoid", "sgd"), ("one layer, two tiles of rows", "relu", "rmsprop"),
     ("four layers", "sigmoid", "rmsprop"), ("widths of 16-byte rows", "relu", "sgd"),
     ("wide layers", "sigmoid", "rmsprop"), ("wide layers", "relu", "sgd")],
)  # fmt: skip
def test_stage_13_trains_like_stage_10_and_float64(shape, activation, optimizer):
    protocol = dataclasses.replace(SHAPES[shape], activation=activation)
    losses, params = train_steps(protocol, 13, optimizer)
    assert_same_training((losses, params), train_steps(protocol, 10, optimizer), "stage 13 vs stage 10")
    ref_losses, ref_params, clipped = training_reference(protocol, optimizer)
    assert 0 < clipped, "no step was clipped: the test would not see the clipping"
    assert_close(losses, ref_losses, 0.0, 1e-4, "stage 13 vs float64: losses")
    for i, (p, q) in enumerate(zip(params, ref_params)):
        # RmsProp moves every weight by about lr * sign(g) at first: a gradient within rounding of 0
        # may take either sign, so the float64 comparison of parameters is by norm.
        assert_close_by_norm(p, q, 1e-4, f"parameter {i} vs float64")
    assert losses[-1] != losses[0] and not np.array_equal(params[0], make_net(protocol, "cpu").parameters()[0].numpy())


@pytest.mark.gpu
def test_stage_13_trains_the_protocol_model_like_stage_10():
    # Parameters by norm: RmsProp divides by sqrt(v), which is small for a weight of small gradients,
    # and enlarges any rounding difference there (with the forward split along k, on the emulator 1 of
    # W1's 200,704 elements was 2.6e-6 from stage 10's, the norms 2.9e-7 apart).
    assert_same_training(
        train_steps(Protocol(), 13), train_steps(Protocol(), 10), "784-256-128-10, stage 13 vs 10", params_by_norm=True
    )


@pytest.mark.gpu
@pytest.mark.emulated
def test_graph_replay_and_direct_launches_agree_bit_for_bit():
    graphed = train_steps(NARROW, 13)
    direct = train_steps(NARROW, 13, without={"cuda_graphs"})
    assert np.array_equal(graphed[0], direct[0])
    assert all(np.array_equal(a, b) for a, b in zip(graphed[1], direct[1]))


@pytest.mark.gpu
@pytest.mark.emulated
def test_a_report_that_never_comes_is_an_error_after_the_device_is_asked(monkeypatch):
    """StepReport: a kernel that fails before writing its loss leaves the word zero; the host
    polls, then synchronizes (which raises a kernel's fault) and, the word still zero, says so.
    Arming twice without a wait synchronizes first: the first launch may still write the word."""
    from minitorch_cuda.cuda import step_report
    from minitorch_cuda.cuda.runtime import KernelError

    synced = []
    monkeypatch.setattr(step_report, "synchronize", synced.append)
    monkeypatch.setattr(step_report, "POLLS", 3)
    report = step_report.StepReport()
    report.arm()
    with pytest.raises(KernelError, match="finished without reporting its loss"):
        report.wait()
    assert len(synced) == 1
    report.arm()
    report.arm()  # the first arm's launch was never waited for
    assert len(synced) == 2
    report.word[0] = (1 << 32) | int(np.float32(2.5).view(np.uint32))  # what step_report.cuh stores
    assert report.wait() == 2.5 and len(synced) == 2


@pytest.mark.gpu
@pytest.mark.emulated
def test_the_batch_cursor_follows_consecutive_batches_and_is_rewritten_for_any_other():
    """The kernel moves its cursor past each batch: consecutive batches of one array (an epoch's)
    cost no write from the host; a batch anywhere else (a jump back, another array) is written.
    Either way each step trains on its own rows: the losses and parameters are those of steps
    whose cursor is written every time, bit for bit."""
    from minitorch_cuda.persistent_model import persistent_step

    x, y = mnist_shaped(4 * NARROW.batch_size)
    order = [0, 1, 2, 3, 1, 0, 2]  # in order, then jumps back and forward

    def run(write_every_step: bool):
        with mt.use_stage(13):
            net = make_net(NARROW, "cuda")
            step = persistent_step(net, nn.CrossEntropyWithSoftmax(), optim.RmsProp(net.parameters(), NARROW.lr,
                                  NARROW.decay), NARROW.max_norm, NARROW.batch_size)  # fmt: skip
            xs, ys = mt.tensor(x, "cuda").data, mt.tensor(y, "cuda").data
            other = mt.tensor(x[: NARROW.batch_size], "cuda").data  # batch 0's rows in another array
            writes, losses = [], []
            rows = NARROW.batch_size
            for i in [*order, None]:  # None: batch 0's rows, in another array
                xb = other if i is None else xs.view((rows, 784), (784, 1), i * rows * 784)
                yb = ys.view((rows, 10), (10, 1), (i or 0) * rows * 10)
                if write_every_step:
                    step.batch.forget()
                with mt.profiler.count() as counts:
                    losses.append(step.step(xb, yb))
                writes.append(counts.htod_copies)
            return np.array(losses), [p.numpy() for p in net.parameters()], writes

    losses, params, writes = run(write_every_step=False)
    ref_losses, ref_params, _ = run(write_every_step=True)
    assert writes[1:4] == [0, 0, 0], f"consecutive batches wrote the cursor: {writes}"
    assert writes[0] == 1 and all(w == 1 for w in writes[4:]), f"a jump did not write the cursor: {writes}"
    assert np.array_equal(losses, ref_losses)
    assert all(np.array_equal(a, b) for a, b in zip(params, ref_params))
    assert len(set(losses[:4])) == 4 and losses[5] != losses[0]  # each step saw its own batch, trained on


@pytest.mark.gpu
@pytest.mark.emulated
def test_grids_of_1_2_and_3_blocks_compute_the_same_bits():
    from minitorch_cuda.persistent_model import persistent_step

    x, y = mnist_shaped(3 * NARROW.batch_size)
    results = []
    for blocks in (1, 2, 3):
        with mt.use_stage(13, without={"cuda_graphs"}):
            net = make_net(NARROW, "cuda")
            opt = optim.RmsProp(net.parameters(), NARROW.lr, NARROW.decay)
            step = persistent_step(net, nn.CrossEntropyWithSoftmax(), opt, NARROW.max_norm, NARROW.batch_size, blocks,
                                  split=True)  # fmt: skip
            assert step.k_splits == [24, 1, 1]
            rows = [slice(i, i + NARROW.batch_size) for i in range(0, len(x), NARROW.batch_size)]
            losses = [step.step(mt.tensor(x[r], "cuda").data, mt.tensor(y[r], "cuda").data) for r in rows]
            results.append((losses, [p.numpy() for p in net.parameters()]))
    for blocks, (losses, params) in zip((2, 3), results[1:]):
        assert losses == results[0][0], f"{blocks} blocks"
        assert all(np.array_equal(a, b) for a, b in zip(params, results[0][1])), f"{blocks} blocks"


@pytest.mark.gpu
@pytest.mark.emulated  # pure arithmetic, but its module needs a CUDA runtime to import
def test_forward_splits_follow_the_shapes():
    from minitorch_cuda.cuda.persistent_step import forward_splits

    # the protocol's first layer at 64 rows: 8 tiles of 64 x 32, so 8 slices (64 jobs), each 6 or 7 of
    # the 49 chunks of 16; NARROW's 784 -> 37 at 21 rows (2 tiles): 24, its 49 chunks 2 a slice at least
    assert forward_splits(64, 784, 256) == 8 and forward_splits(21, 784, 37) == 24
    assert forward_splits(256, 784, 256) == 2  # 32 tiles
    assert forward_splits(512, 784, 256) == 1  # 64 tiles: enough jobs without a split
    assert forward_splits(64, 20, 256) == 1  # 2 chunks of k: too short to split


def _fresh_step(protocol: Protocol, **options):
    """(net, its stage 13 step) for ``protocol``'s model from the CPU net's initial weights, RmsProp
    (``options``: persistent_step's blocks, split, stage)."""
    from minitorch_cuda.persistent_model import persistent_step

    net = make_net(protocol, "cuda")
    for mine, cpu in zip(net.parameters(), make_net(protocol, "cpu").parameters()):
        mine.assign(cpu.numpy())
    opt = optim.RmsProp(net.parameters(), protocol.lr, protocol.decay)
    return net, persistent_step(net, nn.CrossEntropyWithSoftmax(), opt, protocol.max_norm, protocol.batch_size,
                                **options)  # fmt: skip


def _one_step(split: bool, clocked: bool = False, steps: int = 1, stage: bool = True):
    """``steps`` steps of NARROW's model on one batch (the kernel with the phase clock where
    ``clocked``; the later layers' weights read from global memory unless ``stage``): the step,
    its first layer's activations (of the last step), losses, parameters."""
    from minitorch_cuda.cuda.runtime import copy_dtoh

    x, y = mnist_shaped(NARROW.batch_size, seed=3)
    with mt.use_stage(13, without={"cuda_graphs"}):
        net, step = _fresh_step(NARROW, split=split, stage=stage)
        xd, yd = mt.tensor(x, "cuda").data, mt.tensor(y, "cuda").data
        if clocked:
            losses = [None] * steps
            times = step.phase_times(xd, yd, steps)
        else:
            losses, times = [step.step(xd, yd) for _ in range(steps)], None
        out = np.empty((NARROW.batch_size, NARROW.hidden[0]), np.float32)
        copy_dtoh(out, step.buffers[2].ptr)  # layer 1's out: act(x W + b)
        return step, out, losses, [p.numpy() for p in net.parameters()], times


@pytest.mark.gpu
@pytest.mark.emulated
def test_the_split_forward_agrees_with_the_unsplit_one_and_float64():
    x, _ = mnist_shaped(NARROW.batch_size, seed=3)
    w, b = (p.numpy().astype(np.float64) for p in make_net(NARROW, "cpu").parameters()[:2])
    ref = np.maximum(x.astype(np.float64) @ w + b, 0)
    split, unsplit = _one_step(True), _one_step(False)
    assert split[0].k_splits == [24, 1, 1] and unsplit[0].k_splits == [1, 1, 1]
    assert split[0].phases == unsplit[0].phases == ["forward 1", "rows", "gradients", "update"]
    for what, out in (("split", split[1]), ("unsplit", unsplit[1])):
        assert_close(out, ref, 1e-6, 1e-5, f"{what}: layer 1's activations vs float64")
    assert_close(np.array(split[2]), np.array(unsplit[2]), 0.0, 1e-5, "split vs unsplit: the loss")
    for i, (p, q) in enumerate(zip(split[3], unsplit[3])):
        assert_close(p, q, 1e-6, 1e-4, f"split vs unsplit: parameter {i}")


@pytest.mark.gpu
@pytest.mark.emulated
def test_the_phase_clock_times_every_phase_and_trains_the_same_bits():
    step, out, _, params, times = _one_step(True, clocked=True, steps=3)
    _, plain_out, _, plain_params, _ = _one_step(True, steps=3)
    assert np.array_equal(out, plain_out) and all(np.array_equal(a, b) for a, b in zip(params, plain_params))
    assert [r["phase"] for r in times["phases"]] == ["forward 1", "rows", "gradients", "update"]
    assert times["grid_barriers"] == 3 and times["steps"] == 3 and times["k_splits"] == [24, 1, 1]
    steps = ["first layer's sum", "forward 2", "forward 3", "loss", "backward 3", "backward 2"]
    assert [r["step"] for r in times["row_steps"]] == steps and all(r["median_us"] > 0 for r in times["row_steps"])
    assert all(r["median_us"] > 0 and r["mean_us"] > 0 for r in times["phases"])
    assert times["total"]["mean_us"] == pytest.approx(sum(r["mean_us"] for r in times["phases"]))
    assert times["sm_clock_mhz"]["median"] > 0  # cycles counted over the kernel's time


@pytest.mark.gpu
@pytest.mark.emulated
def test_staged_weights_train_the_same_bits_as_weights_read_from_global_memory():
    staged, out, losses, params, _ = _one_step(True, steps=3)
    unstaged, plain_out, plain_losses, plain_params, _ = _one_step(True, steps=3, stage=False)
    # NARROW's later layers: W_2 and b_2, 38 rows of 20 floats; W_3 and b_3, 20 rows of 12
    assert staged.staged_bytes == 4 * (38 * 20 + 20 * 12) and unstaged.staged_bytes == 0
    assert losses == plain_losses and np.array_equal(out, plain_out)
    assert all(np.array_equal(a, b) for a, b in zip(params, plain_params))


@pytest.mark.gpu
@pytest.mark.emulated  # pure arithmetic, but its module needs a CUDA runtime to import
def test_the_later_layers_are_staged_all_together_or_not_at_all():
    from minitorch_cuda.cuda.persistent_step import staged_ld, staging
    from minitorch_cuda.persistent_model import layer_chain

    # row strides of 4 q floats, q odd: 16-byte rows whose chunks fall in distinct banks, 8 rows at a time
    assert [staged_ld(n) for n in (1, 4, 5, 8, 10, 19, 128, 129)] == [4, 4, 12, 12, 12, 20, 132, 132]
    chain = [
        layer.weight.shape for layer, _ in layer_chain(make_net(Protocol(hidden=(256, 128)), "cpu"))
    ]  # 784-256-128-10
    layout = [(-1, 0), (0, 132), (257 * 132, 12)]  # W_2 and b_2: 257 rows of 132; W_3 and b_3: 129 rows of 12
    size = 4 * (257 * 132 + 129 * 12)
    assert staging(chain, 1 << 20) == (layout, size)
    assert staging(chain, size) == (layout, size)
    assert staging(chain, size - 1) == ([(-1, 0)] * 3, 0)  # one byte short: none staged
    one = [layer.weight.shape for layer, _ in layer_chain(make_net(Protocol(hidden=()), "cpu"))]
    assert staging(one, 1 << 20) == ([(-1, 0)], 0)  # nothing after the first layer


@pytest.mark.gpu
@pytest.mark.emulated  # pure arithmetic, but its module needs a CUDA runtime to import
def test_the_layers_whose_weights_do_not_fit_run_as_tiles():
    from minitorch_cuda.cuda.persistent_step import rows_from, staging

    protocol = [(784, 256), (256, 128), (128, 10)]
    wide = [(784, 512), (512, 512), (512, 512), (512, 10)]  # issue 41's model
    h100 = 227 * 1024 - 48 * 1024  # about what the kernel's static shared memory leaves of an H100's
    assert rows_from(protocol, h100) == 1  # the later layers fit: every row carries them (142 KB)
    assert rows_from(wide, h100) == 3  # W_2, W_3 (1 MB each) do not; W_4 and b_4 do (513 rows of 12 floats)
    assert staging(wide, h100, 3) == ([(-1, 0)] * 3 + [(0, 12)], 4 * 513 * 12)
    assert rows_from(wide, 0) == 3 and rows_from([(784, 10)], 0) == 1  # none fit: the last layer's rows read W_4


def _wide_step(blocks: int = 0, clocked: bool = False, steps: int = 2):
    """``steps`` steps of SHAPES["wide layers"]'s model on one batch: the step, losses, parameters, phase times."""
    protocol = SHAPES["wide layers"]
    x, y = mnist_shaped(protocol.batch_size, seed=5)
    with mt.use_stage(13, without={"cuda_graphs"}):
        net, step = _fresh_step(protocol, blocks=blocks)
        xd, yd = mt.tensor(x, "cuda").data, mt.tensor(y, "cuda").data
        times = step.phase_times(xd, yd, steps) if clocked else None
        losses = None if clocked else [step.step(xd, yd) for _ in range(steps)]
        return step, losses, [p.numpy() for p in net.parameters()], times


@pytest.mark.gpu
@pytest.mark.emulated
def test_wide_layers_compute_the_same_bits_on_every_grid_and_with_the_phase_clock():
    step, losses, params, _ = _wide_step()
    assert step.row_from == 2 and step.k_splits == [1, 1, 1, 1]  # a wide first layer is not sliced
    assert step.phases == ["forward 1", "forward 2", "rows", "backward 2", "gradients", "update"]
    assert step.staged_bytes == 4 * (201 * 44 + 41 * 12)  # W_3, b_3 and W_4, b_4 only
    for blocks in (1, 3):
        _, other_losses, other_params, _ = _wide_step(blocks)
        assert other_losses == losses and all(np.array_equal(a, b) for a, b in zip(other_params, params)), blocks
    _, _, clocked_params, times = _wide_step(clocked=True)
    assert all(np.array_equal(a, b) for a, b in zip(clocked_params, params))
    assert [r["phase"] for r in times["phases"]] == step.phases and times["grid_barriers"] == 5
    steps = ["layer 2's input", "forward 3", "forward 4", "loss", "backward 4", "backward 3"]
    assert [r["step"] for r in times["row_steps"]] == steps and all(r["median_us"] > 0 for r in times["row_steps"])
    assert all(r["median_us"] > 0 for r in times["phases"]) and times["row_from"] == 2
    assert times["sm_clock_mhz"]["median"] > 0


def _misfits() -> list:
    ff = lambda a, b, **kw: nn.FeedForward(a, b, device="cuda", seed=1, **kw)  # noqa: E731
    return [
        (lambda: nn.Sequential(ff(784, 10, bias=False)), None, r"layer 0 \(FeedForward\) has no bias"),
        (lambda: nn.Sequential(ff(784, 12), nn.Softmax(), ff(12, 10)), None, r"layer 1 \(Softmax\)"),
        (lambda: nn.Sequential(ff(784, 12), nn.ReLU(), nn.ReLU(), ff(12, 10)), None, r"layer 2 \(ReLU\)"),
        (lambda: nn.Sequential(ff(784, 10), nn.Sigmoid()), None, r"the last layer \(Sigmoid\)"),
        (lambda: ff(784, 10), None, "the model is a FeedForward"),
        (lambda: nn.Sequential(ff(784, 10)), "sgd-reversed", "exactly the model.s parameters, in their order"),
        (
            lambda: nn.Sequential(ff(784, 2040), nn.ReLU(), ff(2040, 10)),
            None,
            "the layers' outputs sum to 2050 values a row, more than the 2048 that the kernel keeps",
        ),
        (
            lambda: nn.Sequential(ff(784, 8), *[m for _ in range(16) for m in (nn.ReLU(), ff(8, 8))][:-1], ff(8, 10)),
            None,
            "the model has 17 FeedForward layers, more than the 16 of the kernel's layer table",
        ),
    ]


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize("index", range(len(_misfits())))
def test_a_model_that_does_not_fit_is_named_and_trains_on_stage_12s_kernels(index):
    from minitorch_cuda.persistent_model import DoesNotFit, persistent_step

    with mt.use_stage(13):  # stage 12's TF32 kernels: on a GPU, or on the emulator's tensor cores
        build, optimizer, message = _misfits()[index]
        net = build()
        trainer = Trainer(NARROW, "cuda", net=net)
        if optimizer == "sgd-reversed":
            trainer.optim = optim.SGD(net.parameters()[::-1], lr=0.1)
        with pytest.raises(DoesNotFit, match=message):
            persistent_step(net, trainer.loss_fn, trainer.optim, 1.0, NARROW.batch_size)
        x, y = mnist_shaped(NARROW.batch_size)
        with pytest.warns(UserWarning, match=message) as warned:
            loss = trainer.step(mt.tensor(x, "cuda"), mt.tensor(y, "cuda"))
        assert "stage 13 cannot run this step as one kernel" in str(warned[0].message)
        assert np.isfinite(loss) and trainer._persistent is False


@pytest.mark.gpu
@pytest.mark.emulated
def test_the_loss_and_the_optimizer_must_be_the_protocols():
    from minitorch_cuda.persistent_model import DoesNotFit, persistent_step

    with mt.use_stage(13):
        net = make_net(NARROW, "cuda")
        sgd = optim.SGD(net.parameters(), lr=0.1)
        with pytest.raises(DoesNotFit, match="the loss is a Softmax, not CrossEntropyWithSoftmax"):
            persistent_step(net, nn.Softmax(), sgd, 1.0, 8)
        with pytest.raises(DoesNotFit, match="the optimizer is a Optimizer, not RmsProp or SGD"):
            persistent_step(net, nn.CrossEntropyWithSoftmax(), optim.Optimizer(net.parameters(), 0.1), 1.0, 8)
        step = persistent_step(net, nn.CrossEntropyWithSoftmax(), sgd, 1.0, 8)
        x, y = mnist_shaped(9)
        with pytest.raises(ValueError, match=r"1..8 rows of 784 inputs and 10 targets, got inputs \(9, 784\)"):
            step.step(mt.tensor(x, "cuda").data, mt.tensor(y, "cuda").data)


@needs_nvcc
@pytest.mark.parametrize("defines", [[], ["-DPS_PHASE_CLOCK"]], ids=["plain", "phase_clock"])
def test_the_sm_90_build_keeps_everything_in_registers(tmp_path, defines):
    kernel = sm90_build(KERNEL_DIR / "persistent_step.cu", tmp_path, *defines)["persistent_step"]
    assert kernel.stack_bytes == kernel.spill_stores == kernel.spill_loads == 0, kernel
    assert kernel.registers <= 255, kernel


@pytest.mark.gpu
@pytest.mark.emulated  # its module needs a CUDA runtime to import
def test_the_layer_table_is_packed_as_the_c_struct_declares_it(tmp_path, monkeypatch):
    """The numpy row is read from persistent_step.cu's PersistentLayer (whose static_assert checks
    the C size against PS_LAYER_BYTES); a field the reader cannot size is refused."""
    from minitorch_cuda.cuda import persistent_step as ps
    from minitorch_cuda.cuda.kernel_table import PERSISTENT

    pointers = ["w", "b", "gw", "gb", "vw", "vb", "out", "delta", "split"]
    ints = ["n_in", "n_out", "act", "partial0", "k_splits", "staged", "staged_ld", "pad"]
    assert list(ps.LAYER.names) == pointers + ints
    assert ps.LAYER.itemsize == PERSISTENT["LAYER_BYTES"] == 8 * len(pointers) + 4 * len(ints) == 104
    assert [ps.LAYER.fields[n][1] for n in ("split", "n_in")] == [64, 72]
    (tmp_path / "k.cu").write_text("struct S {\n    float *p;  // a pointer\n    int a, b;\n    double d;\n};\n")
    monkeypatch.setattr(ps, "KERNEL_DIR", tmp_path)
    with pytest.raises(TypeError, match="field d of type double is not a pointer or int"):
        ps.struct_dtype("k.cu", "S")
    with pytest.raises(KeyError, match="no struct T in k.cu"):
        ps.struct_dtype("k.cu", "T")
