"""Stage 13: the protocol's whole training step as one persistent kernel.

Its losses and parameters after 20 steps against stage 10's (1e-4 relative) and against a
float64 numpy model of the same steps; ReLU and Sigmoid, RmsProp and SGD; grids of 1, 2 and 3
blocks giving the same bits; the models that do not fit, named; the sm_90 build without
spills. The CUDA tests run on the CPU emulator too (marked ``emulated`` here), on a narrow
MNIST-shaped model with odd sizes; the protocol's own 784-256-128-10 model is GPU-only, as it
takes the emulator a minute.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

import numpy as np
import pytest
from conftest import assert_close

import minitorch_cuda as mt
from minitorch_cuda import nn, optim
from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
from minitorch_cuda.data import one_hot
from minitorch_cuda.train import Protocol, Trainer, make_net

STEPS = 20
NARROW = Protocol(hidden=(37, 19), batch_size=21, max_norm=0.5)  # partial tiles, a last batch of 16, clipping


def mnist_shaped(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images of 784 pixels in [0, 1), four in five of them 0 as in MNIST, and one-hot labels."""
    rng = np.random.default_rng(seed)
    x = rng.random((rows, 784)) * (rng.random((rows, 784)) < 0.2)
    return x.astype(np.float32), one_hot(rng.integers(0, 10, rows))


def _train(protocol: Protocol, stage: int, optimizer: str = "rmsprop", without=()) -> tuple[np.ndarray, list]:
    """STEPS steps of the Trainer from the CPU net's initial weights: losses and parameters."""
    x, y = mnist_shaped(STEPS * protocol.batch_size - 5)
    with mt.use_stage(stage, without=without):
        trainer = Trainer(protocol, "cuda")
        for mine, cpu in zip(trainer.net.parameters(), make_net(protocol, "cpu").parameters()):
            mine.assign(cpu.numpy())
        if optimizer == "sgd":
            trainer.optim = optim.SGD(trainer.net.parameters(), lr=0.05)
        losses = []
        with mt.profiler.count() as counts:
            for start in range(0, len(x), protocol.batch_size):
                rows = slice(start, start + protocol.batch_size)
                losses.append(trainer.step(mt.tensor(x[rows], "cuda"), mt.tensor(y[rows], "cuda")))
        if stage == 13:  # a launch a step; once the barrier's zeroing; per batch shape the graph's capture
            assert counts.launches <= len(losses) + 3, f"{counts.launches} launches in {len(losses)} steps"
        return np.array(losses), [p.numpy() for p in trainer.net.parameters()]


def _reference(protocol: Protocol, optimizer: str = "rmsprop") -> tuple[np.ndarray, list, int]:
    """The same steps in float64 numpy: losses, parameters and how many steps were clipped."""
    x, y = (a.astype(np.float64) for a in mnist_shaped(STEPS * protocol.batch_size - 5))
    params = [p.numpy().astype(np.float64) for p in make_net(protocol, "cpu").parameters()]
    weights, biases = params[0::2], params[1::2]
    state = [np.zeros_like(p) for p in params]
    sigmoid = protocol.activation == "sigmoid"
    losses, clipped = [], 0
    for start in range(0, len(x), protocol.batch_size):
        xb, yb = x[start : start + protocol.batch_size], y[start : start + protocol.batch_size]
        acts = [xb]
        for i, (w, b) in enumerate(zip(weights, biases)):
            z = acts[-1] @ w + b
            acts.append(z if i == len(weights) - 1 else 1 / (1 + np.exp(-z)) if sigmoid else np.maximum(z, 0))
        z = acts[-1] - acts[-1].max(1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
        losses.append(-(yb * log_p).sum(1).mean())
        delta = (np.exp(log_p) - yb) / len(xb)
        grads = []
        for i in reversed(range(len(weights))):
            grads[:0] = [acts[i].T @ delta, delta.sum(0)]
            a = acts[i]
            delta = (delta @ weights[i].T) * (a * (1 - a) if sigmoid else a > 0)
        norm = np.sqrt(sum((g * g).sum() for g in grads))
        factor = protocol.max_norm / (norm + 1e-6) if norm > protocol.max_norm else 1.0
        clipped += factor < 1
        for p, g, v in zip(params, grads, state):
            g = g * factor
            if optimizer == "sgd":
                p -= 0.05 * g
            else:
                v[:] = protocol.decay * v + (1 - protocol.decay) * g * g
                p -= protocol.lr * g / (np.sqrt(v) + 1e-8)
    return np.array(losses), params, clipped


def _assert_same_training(got, ref, what: str, rtol: float = 1e-4) -> None:
    (losses, params), (ref_losses, ref_params) = got, ref[:2]
    assert_close(losses, ref_losses, 0.0, rtol, f"{what}: losses")
    for i, (p, q) in enumerate(zip(params, ref_params)):
        assert_close(p, q, 1e-6, rtol, f"{what}: parameter {i}")


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize(("activation", "optimizer"), [("relu", "rmsprop"), ("sigmoid", "sgd")])
def test_stage_13_trains_like_stage_10_and_float64(activation, optimizer):
    protocol = dataclasses.replace(NARROW, activation=activation)
    losses, params = _train(protocol, 13, optimizer)
    _assert_same_training((losses, params), _train(protocol, 10, optimizer), "stage 13 vs stage 10")
    ref_losses, ref_params, clipped = _reference(protocol, optimizer)
    assert 0 < clipped, "no step was clipped: the test would not see the clipping"
    assert_close(losses, ref_losses, 0.0, 1e-4, "stage 13 vs float64: losses")
    for i, (p, q) in enumerate(zip(params, ref_params)):
        # RmsProp moves every weight by about lr * sign(g) at first: a gradient within rounding of 0
        # may take either sign, so the float64 comparison of parameters is by norm.
        assert np.linalg.norm(p - q) <= 1e-4 * np.linalg.norm(q), f"parameter {i} vs float64"
    assert losses[-1] != losses[0] and not np.array_equal(params[0], make_net(protocol, "cpu").parameters()[0].numpy())


@pytest.mark.gpu
def test_stage_13_trains_the_protocol_model_like_stage_10():
    _assert_same_training(_train(Protocol(), 13), _train(Protocol(), 10), "784-256-128-10, stage 13 vs 10")


@pytest.mark.gpu
@pytest.mark.emulated
def test_graph_replay_and_direct_launches_agree_bit_for_bit():
    graphed = _train(NARROW, 13)
    direct = _train(NARROW, 13, without={"cuda_graphs"})
    assert np.array_equal(graphed[0], direct[0])
    assert all(np.array_equal(a, b) for a, b in zip(graphed[1], direct[1]))


@pytest.mark.gpu
@pytest.mark.emulated
def test_grids_of_1_2_and_3_blocks_compute_the_same_bits():
    from minitorch_cuda.cuda.persistent_step import PersistentStep

    x, y = mnist_shaped(3 * NARROW.batch_size)
    results = []
    for blocks in (1, 2, 3):
        with mt.use_stage(13, without={"cuda_graphs"}):
            net = make_net(NARROW, "cuda")
            opt = optim.RmsProp(net.parameters(), NARROW.lr, NARROW.decay)
            step = PersistentStep(net, nn.CrossEntropyWithSoftmax(), opt, NARROW.max_norm, NARROW.batch_size, blocks)
            rows = [slice(i, i + NARROW.batch_size) for i in range(0, len(x), NARROW.batch_size)]
            losses = [step.step(mt.tensor(x[r], "cuda").data, mt.tensor(y[r], "cuda").data) for r in rows]
            results.append((losses, [p.numpy() for p in net.parameters()]))
    for blocks, (losses, params) in zip((2, 3), results[1:]):
        assert losses == results[0][0], f"{blocks} blocks"
        assert all(np.array_equal(a, b) for a, b in zip(params, results[0][1])), f"{blocks} blocks"


def _misfits() -> list:
    ff = lambda a, b, **kw: nn.FeedForward(a, b, device="cuda", seed=1, **kw)  # noqa: E731
    return [
        (lambda: nn.Sequential(ff(784, 10, bias=False)), None, r"layer 0 \(FeedForward\) has no bias"),
        (lambda: nn.Sequential(ff(784, 12), nn.Softmax(), ff(12, 10)), None, r"layer 1 \(Softmax\)"),
        (lambda: nn.Sequential(ff(784, 12), nn.ReLU(), nn.ReLU(), ff(12, 10)), None, r"layer 2 \(ReLU\)"),
        (lambda: nn.Sequential(ff(784, 10), nn.Sigmoid()), None, r"the last layer \(Sigmoid\)"),
        (lambda: ff(784, 10), None, "the model is a FeedForward"),
        (lambda: nn.Sequential(ff(784, 10)), "sgd-reversed", "exactly the model.s parameters, in their order"),
    ]


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize("index", range(len(_misfits())))
def test_a_model_that_does_not_fit_is_named_and_trains_on_stage_12s_kernels(index):
    from minitorch_cuda.cuda.persistent_step import DoesNotFit, PersistentStep

    with mt.use_stage(13, without={"tensor_cores"}):  # the emulator has no tensor cores
        build, optimizer, message = _misfits()[index]
        net = build()
        trainer = Trainer(NARROW, "cuda", net=net)
        if optimizer == "sgd-reversed":
            trainer.optim = optim.SGD(net.parameters()[::-1], lr=0.1)
        with pytest.raises(DoesNotFit, match=message):
            PersistentStep(net, trainer.loss_fn, trainer.optim, 1.0, NARROW.batch_size)
        x, y = mnist_shaped(NARROW.batch_size)
        with pytest.warns(UserWarning, match=message) as warned:
            loss = trainer.step(mt.tensor(x, "cuda"), mt.tensor(y, "cuda"))
        assert "stage 13 cannot run this step as one kernel" in str(warned[0].message)
        assert np.isfinite(loss) and trainer._persistent is False


@pytest.mark.gpu
@pytest.mark.emulated
def test_the_loss_and_the_optimizer_must_be_the_protocols():
    from minitorch_cuda.cuda.persistent_step import DoesNotFit, PersistentStep

    with mt.use_stage(13):
        net = make_net(NARROW, "cuda")
        sgd = optim.SGD(net.parameters(), lr=0.1)
        with pytest.raises(DoesNotFit, match="the loss is a Softmax, not CrossEntropyWithSoftmax"):
            PersistentStep(net, nn.Softmax(), sgd, 1.0, 8)
        with pytest.raises(DoesNotFit, match="the optimizer is a Optimizer, not RmsProp or SGD"):
            PersistentStep(net, nn.CrossEntropyWithSoftmax(), optim.Optimizer(net.parameters(), 0.1), 1.0, 8)
        step = PersistentStep(net, nn.CrossEntropyWithSoftmax(), sgd, 1.0, 8)
        x, y = mnist_shaped(9)
        with pytest.raises(ValueError, match=r"1..8 rows of 784 inputs and 10 targets, got inputs \(9, 784\)"):
            step.step(mt.tensor(x, "cuda").data, mt.tensor(y, "cuda").data)


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
def test_the_sm_90_build_keeps_everything_in_registers(tmp_path):
    result = subprocess.run(
        [NVCC, "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-I", str(KERNEL_DIR), "-o", str(tmp_path / "ps.cubin"),
         str(KERNEL_DIR / "persistent_step.cu")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = result.stderr + result.stdout
    assert result.returncode == 0, log
    kernel = log[log.index("Function properties for persistent_step") :]
    assert re.search(r"0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", kernel), kernel
    assert int(re.search(r"Used (\d+) registers", kernel)[1]) <= 255, kernel
