"""The blog's MNIST protocol end to end: accuracy on the CPU and on CUDA, and every
stage's losses against stage 8's and the CPU's from the same weights and batches."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import needs_mnist

import minitorch_cuda as mt
from minitorch_cuda.train import Protocol, Trainer, accuracy, load_to, make_net

pytestmark = needs_mnist

STEPS = 20


@functools.cache
def mnist(device: str):
    return load_to(device)


@pytest.mark.slow
def test_one_cpu_epoch_reaches_93_percent():
    data = mnist("cpu")
    trainer = Trainer(Protocol(), "cpu")
    loss = trainer.epoch(data.x_train, data.y_train)
    acc = accuracy(trainer.net, data.x_test, data.labels_test)
    assert np.isfinite(loss) and loss < 1.0, loss
    assert acc >= 0.93, f"test accuracy after one CPU epoch: {acc:.4f}"


@pytest.mark.gpu_only  # five epochs: hours on the CPU emulator
@pytest.mark.gpu
@pytest.mark.slow
def test_five_cuda_epochs_at_stage_8_reach_96_percent():
    with mt.use_stage(8):
        data = load_to("cuda")
        trainer = Trainer(Protocol(), "cuda")
        losses = [trainer.epoch(data.x_train, data.y_train) for _ in range(5)]
        acc = accuracy(trainer.net, data.x_test, data.labels_test)
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert acc >= 0.96, f"test accuracy after five stage-8 epochs: {acc:.4f} (losses {losses})"


def _losses_from(device: str, stage: int | None, order: np.ndarray) -> list[float]:
    """The first STEPS losses from the CPU net's initial weights on the batches ``order`` picks."""
    protocol = Protocol()
    reference = make_net(protocol, "cpu")
    context = mt.use_stage(stage) if stage is not None else mt.use_stage(mt.get_stage())
    with context:
        net = make_net(protocol, device)
        for mine, theirs in zip(net.parameters(), reference.parameters()):
            mine.assign(theirs.numpy())
        data = mnist("cpu")
        n = STEPS * protocol.batch_size
        x = mt.tensor(data.x_train[:n].numpy(), device)
        y = mt.tensor(data.y_train[:n].numpy(), device)
        trainer = Trainer(protocol, device, net=net)
        losses: list[float] = []
        trainer.epoch(x, y, max_batches=STEPS, order=order, on_step=losses.append)
    assert len(losses) == STEPS
    return losses


@functools.cache
def _losses(device: str, stage: int | None) -> np.ndarray:
    """The first STEPS losses on one fixed order of the batches (computed once per module)."""
    order = np.random.default_rng(1).permutation(STEPS * Protocol().batch_size)
    return np.array(_losses_from(device, stage, order))


@pytest.mark.gpu
def test_stage_8_trains_like_the_cpu_within_1e4():
    """20 steps at stage 8 agree with the CPU backend within 1e-4 relative (on the CPU emulator
    the largest difference measured was about 5e-6): same weights, same batches."""
    cpu, top = _losses("cpu", None), _losses("cuda", 8)
    assert cpu[-1] < cpu[0], f"the CPU reference does not learn: {cpu}"
    np.testing.assert_allclose(top, cpu, rtol=1e-4, atol=0, err_msg="stage 8 vs the CPU backend")


@pytest.mark.gpu
def test_stage_12_trains_like_the_cpu_within_tf32_error():
    """20 steps at stage 12 (TF32 tensor cores in the backward's products; the forward's fused
    linear stays FP32, so the first loss is the CPU's) learn, and stay within 3e-2 relative of
    the CPU's losses: TF32's 1e-3 per product grows as the weights drift apart (the CPU emulator's
    tensor cores gave 1.0e-2 at most, step 19)."""
    cpu, tf32 = _losses("cpu", None), _losses("cuda", 12)
    assert tf32[-1] < tf32[0], f"stage 12 does not learn: {tf32}"
    np.testing.assert_allclose(tf32[0], cpu[0], rtol=1e-5, err_msg="the first forward is FP32")
    np.testing.assert_allclose(tf32, cpu, rtol=3e-2, atol=0, err_msg="stage 12 vs the CPU backend")


@pytest.mark.gpu
@pytest.mark.slow
def test_every_stage_trains_like_stage_8_and_the_cpu():
    order = np.random.default_rng(1).permutation(STEPS * Protocol().batch_size)
    cpu, top = _losses("cpu", None), _losses("cuda", 8)
    for stage in range(8):
        losses = np.array(_losses_from("cuda", stage, order))
        np.testing.assert_allclose(losses, top, rtol=1e-3, err_msg=f"stage {stage} vs stage 8")
        np.testing.assert_allclose(losses, cpu, rtol=1e-3, err_msg=f"stage {stage} vs the CPU backend")


def test_cpu_steps_learn_and_are_reproducible():
    order = np.random.default_rng(1).permutation(STEPS * Protocol().batch_size)
    first = _losses_from("cpu", None, order)
    assert first == _losses_from("cpu", None, order)
    assert np.mean(first[-5:]) < np.mean(first[:5]), first


def test_an_epoch_slices_the_next_batch_while_the_step_before_it_runs(monkeypatch):
    """Trainer.epoch queues a step, slices the next batch, then reads the step's loss back: the
    host's slicing is off the path from one step to the next, and every loss is still read before
    the next step is queued (the protocol's read-back every step). The losses are those of
    stepping through the batches one by one."""
    from minitorch_cuda.tensor import Tensor

    protocol = Protocol(hidden=(8,), batch_size=4)
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.random((10, 784), dtype=np.float32), "cpu")
    y = mt.tensor(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 10)], "cpu")
    by_hand = Trainer(protocol, "cpu")
    expected = [by_hand.step(x[s : s + 4], y[s : s + 4]) for s in (0, 4, 8)]

    trainer, log, losses = Trainer(protocol, "cpu"), [], []
    getitem, queue = Tensor.__getitem__, trainer.queue_step

    def logged_getitem(self, index):
        if isinstance(index, slice) and self.shape[1] == 784:
            log.append(f"slice {index.start}")
        return getitem(self, index)

    def logged_queue(xb, yb):
        log.append("queue")
        read = queue(xb, yb)
        return lambda: (log.append("read"), read())[1]

    monkeypatch.setattr(Tensor, "__getitem__", logged_getitem)
    trainer.queue_step = logged_queue
    mean = trainer.epoch(x, y, order=np.arange(10), on_step=losses.append)
    assert log == ["slice 0", "queue", "slice 4", "read", "queue", "slice 8", "read", "queue", "read"], log
    assert losses == expected and mean == pytest.approx(sum(expected) / 3)
