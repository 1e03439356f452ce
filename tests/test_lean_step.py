"""Stage 11's lean step (stages.lean_step): fewer, fuller kernels for the graphed MNIST step.

Each new kernel against float64 numpy through its launcher: the backward products with the
ReLU mask in the epilogue and the bias gradient beside the weight gradient (matmul_grad), the
split-K forward reduced by its last block with the bias+ReLU epilogue (its tile counters left
zeroed, the same bits every run), the loss kernel that writes the logits' gradient, clipping
and RmsProp across a grid barrier. Then the framework: FusedLinear's backward where a fusion
applies and where it does not (an input that needs its gradient, a ReLU output used twice, an
upstream gradient other than 1), 20 training steps against stage 10 and float64, and the
launches of one step: 19 at stage 10, 10 at stage 11. The CUDA tests run on the CPU emulator
too (marked ``emulated``), on small shapes; the protocol's own model is GPU-only.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    NARROW,
    assert_close,
    assert_close_by_norm,
    assert_same_training,
    mnist_shaped,
    train_steps,
    training_reference,
)

import minitorch_cuda as mt
from minitorch_cuda import nn
from minitorch_cuda.train import Protocol, Trainer

pytestmark = pytest.mark.gpu


def _cuda():
    from minitorch_cuda.cuda import backend, launch_core, launchers, matmul_launchers

    return backend, launchers, launch_core, matmul_launchers


def _op(x: np.ndarray, t: bool) -> np.ndarray:
    return x.T if t else x


@pytest.mark.emulated
@pytest.mark.parametrize("tile", ["32x32x8", "64x64x16"])
@pytest.mark.parametrize(("M", "N", "K", "ta", "tb"), [(37, 19, 21, 1, 0), (21, 37, 19, 0, 1), (70, 33, 9, 0, 0)])
def test_matmul_grad_masks_and_sums_columns(tile, M, N, K, ta, tb):
    backend, launchers, launch_core, matmul_launchers = _cuda()
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
    mask = np.maximum(rng.standard_normal((M, N)), 0).astype(np.float32)  # a ReLU output: zeros and positives
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    g = launch_core.Gemm.of(da, db, bool(ta), bool(tb))
    ref = _op(a, ta).astype(np.float64) @ _op(b, tb).astype(np.float64)
    scale = np.abs(_op(a, ta)).astype(np.float64) @ np.abs(_op(b, tb))
    out, sums = (
        backend.from_numpy(np.full((M, N), np.nan, np.float32)),
        backend.from_numpy(np.full(N, np.nan, np.float32)),
    )
    matmul_launchers.matmul_grad(out, da, db, g, colsum=sums, tile=tile)
    assert np.all(np.abs(backend.to_numpy(out) - ref) <= 1e-5 * scale + 1e-6), "dW = op(a) op(b)"
    col = _op(b, tb).astype(np.float64).sum(0)
    assert_close(backend.to_numpy(sums), col, 1e-5, 1e-4, "db = column sums of op(b)")
    masked = backend.from_numpy(np.full((M, N), np.nan, np.float32))
    matmul_launchers.matmul_grad(masked, da, db, g, mask=backend.from_numpy(mask), tile=tile)
    got = backend.to_numpy(masked)
    assert np.all(got[mask == 0] == 0), "zeroed where the ReLU output is 0"
    assert np.all(np.abs(got - ref * (mask > 0)) <= 1e-5 * scale + 1e-6), "dX = op(a) op(b) * (mask > 0)"


@pytest.mark.emulated
@pytest.mark.parametrize(("tile", "splits"), [("32x32x16", 2), ("32x32x16", 3), ("64x64x16", 4)])
@pytest.mark.parametrize(("bias", "relu"), [(True, True), (False, False)])
def test_splitk_bias_act_reduces_in_its_last_block(tile, splits, bias, relu):
    backend, launchers, launch_core, matmul_launchers = _cuda()
    from minitorch_cuda.cuda.ops_matmul import _splitk_counters

    M, N, K = 21, 37, 300  # ragged tiles, K-slices of unequal length
    rng = np.random.default_rng(splits)
    x, w = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    ref = x.astype(np.float64) @ w + (b if bias else 0)
    ref = np.maximum(ref, 0) if relu else ref
    scale = np.abs(x).astype(np.float64) @ np.abs(w) + np.abs(b)
    dx, dw, counters = backend.from_numpy(x), backend.from_numpy(w), _splitk_counters()
    g = launch_core.Gemm.of(dx, dw)
    runs = []
    for _ in range(2):  # the second launch finds the counters the first left behind
        out = backend.from_numpy(np.full((M, N), np.nan, np.float32))
        bias_arg = backend.from_numpy(b) if bias else None
        matmul_launchers.matmul_splitk_bias_act(out, dx, dw, bias_arg, counters, g, relu, tile=tile, splits=splits)
        runs.append(backend.to_numpy(out))
        assert not backend.to_numpy(counters).any(), "every tile counter back at zero"
    assert np.all(np.abs(runs[0] - ref) <= 1e-5 * scale + 1e-6), "act(x @ w + b) over the K-slices"
    assert np.array_equal(runs[0], runs[1]), "the slices summed in one order, whichever block came last"


@pytest.mark.emulated
def test_softmax_xent_grad_writes_the_logits_gradient():
    backend, launchers, launch_core, matmul_launchers = _cuda()
    rng = np.random.default_rng(3)
    rows, cols = 37, 10
    logits = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    target = np.eye(cols, dtype=np.float32)[rng.integers(0, cols, rows)]
    grad, loss = backend.from_numpy(np.full((rows, cols), np.nan, np.float32)), backend.from_numpy(np.float32(np.nan))
    launchers.softmax_xent_grad(
        grad, loss, backend.from_numpy(logits), backend.from_numpy(target), rows, cols, 1 / rows
    )
    z = logits.astype(np.float64) - logits.max(1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(1, keepdims=True))
    assert_close(backend.to_numpy(grad), (np.exp(log_p) - target) / rows, 1e-7, 1e-5, "d loss / d logits")
    assert_close(backend.to_numpy(loss), -(target * log_p).sum(1).mean(), 0.0, 1e-5, "loss")


@pytest.mark.emulated
@pytest.mark.parametrize("blocks", [1, 3])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])  # clipped, not clipped
def test_clip_rmsprop_across_a_grid_barrier(blocks, max_norm):
    backend, launchers, launch_core, matmul_launchers = _cuda()
    from minitorch_cuda.cuda.ops_optim import _grid_barrier

    rng = np.random.default_rng(blocks)
    sizes = [784 * 7, 7, 301, 1, 10 * 7, 10]
    p = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    g = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in sizes]
    v = [rng.random(n).astype(np.float32) * 1e-3 for n in sizes]
    lr, decay, eps = 1e-3, 0.9, 1e-8
    runs = []
    for _ in range(2):
        dp, dg, dv = ([backend.from_numpy(a) for a in arrays] for arrays in (p, g, v))
        partials = backend.from_numpy(np.full(blocks, np.nan, np.float32))
        launchers.multi_clip_rmsprop_grid(partials, _grid_barrier(), max_norm, lr, decay, eps, dp, dg, dv, sizes,
                                          blocks=blocks)  # fmt: skip
        runs.append([backend.to_numpy(a) for a in dp + dg + dv])
        assert not backend.to_numpy(_grid_barrier())[0], "the barrier's count back at zero"
    norm = np.sqrt(sum((x.astype(np.float64) ** 2).sum() for x in g))
    factor = max_norm / (norm + 1e-6) if norm > max_norm else 1.0
    for i in range(len(sizes)):
        g64 = g[i] * factor
        v64 = decay * v[i] + (1 - decay) * g64 * g64
        assert_close(runs[0][len(sizes) + i], g64, 1e-7, 1e-5, f"clipped gradient {i}")
        assert_close(runs[0][2 * len(sizes) + i], v64, 1e-9, 1e-5, f"state {i}")
        assert_close(runs[0][i], p[i] - lr * g64 / (np.sqrt(v64) + eps), 1e-6, 1e-5, f"parameter {i}")
    assert all(np.array_equal(a, b) for a, b in zip(*runs)), "the same bits every run"


def _graph_grads(device: str, stage: int, twice: bool, scale: float, input_grad: bool) -> list[np.ndarray]:
    """Gradients of a small MLP (the CPU's initial weights) whose ReLU output may feed two layers."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((13, 29)).astype(np.float32)
    target = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 13)]
    shapes = [(29, 17, 1), (17, 10, 2), (17, 10, 3)]
    with mt.use_stage(stage):
        layers = [nn.FeedForward(n_in, n_out, device=device) for n_in, n_out, _ in shapes]
        for layer, (n_in, n_out, seed) in zip(layers, shapes):
            for mine, cpu in zip(layer.parameters(), nn.FeedForward(n_in, n_out, seed=seed).parameters()):
                mine.assign(cpu.numpy() + 0.05)  # biases off 0: their gradients differ from their inputs'
        x = mt.tensor(x_np, device, requires_grad=input_grad)
        h = layers[0].forward(x, relu=True)
        logits = layers[1](h) + layers[2](h) if twice else layers[1](h)
        loss = nn.cross_entropy_with_softmax(logits, mt.tensor(target, device))
        (loss * scale if scale != 1 else loss).backward()
        grads = [p.grad.numpy() for layer in layers[: 3 if twice else 2] for p in layer.parameters()]
        return grads + ([x.grad.numpy()] if input_grad else [])


@pytest.mark.emulated
@pytest.mark.parametrize(
    ("twice", "scale", "input_grad"),
    [(False, 1.0, False), (True, 1.0, False), (False, 3.0, True)],
    ids=["masked-in-the-product", "relu-output-used-twice", "upstream-3-input-grad"],
)
def test_fused_linear_backward_where_fusions_apply_and_where_not(twice, scale, input_grad):
    want = _graph_grads("cpu", 10, twice, scale, input_grad)
    for stage in (10, 11):
        got = _graph_grads("cuda", stage, twice, scale, input_grad)
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want)):
            assert_close(a, b, 1e-6, 1e-4, f"stage {stage}: gradient {i}")


@pytest.mark.emulated
def test_stage_11_trains_like_stage_10_and_float64():
    losses, params = train_steps(NARROW, 11)
    assert_same_training((losses, params), train_steps(NARROW, 10), "stage 11 vs stage 10")
    ref_losses, ref_params, clipped = training_reference(NARROW)
    assert 0 < clipped, "no step was clipped: the test would not see the clipping"
    assert_close(losses, ref_losses, 0.0, 1e-4, "stage 11 vs float64: losses")
    for i, (p, q) in enumerate(zip(params, ref_params)):
        assert_close_by_norm(p, q, 1e-4, f"parameter {i} vs float64")


def _launches_per_step(stage: int, protocol: Protocol) -> int:
    x, y = mnist_shaped(protocol.batch_size)
    with mt.use_stage(stage, without={"cuda_graphs"}):  # direct launches, counted one by one
        trainer = Trainer(protocol, "cuda")
        xb, yb = mt.tensor(x, "cuda"), mt.tensor(y, "cuda")
        trainer.step(xb, yb)  # compiles, tunes, fills the resident buffers
        with mt.profiler.count() as counts:
            trainer.step(xb, yb)
        return counts.launches


@pytest.mark.emulated
def test_a_step_launches_10_kernels_at_stage_11_and_19_at_stage_10():
    protocol = Protocol(hidden=(40, 24))  # the protocol's batch of 64 and its layers, narrower
    # stage 10's backward products may be tuned to split-K (two launches each) on a GPU
    stage10, stage11 = _launches_per_step(10, protocol), _launches_per_step(11, protocol)
    assert stage11 == 10 and stage10 >= 19, (stage10, stage11)


def test_stage_11_trains_the_protocol_model_like_stage_10():  # GPU only: the emulator would take minutes
    """The losses element by element, each parameter as a whole (1e-4 relative). Not each weight: the
    split-K forward and the fused backward sum in another order than stage 10, and RmsProp divides a
    weight's gradient by the root of its own running square, so where that square is tiny (the
    border pixels' weights, nearly always multiplied by 0) a rounding difference of the gradient
    passes into the update nearly whole. On the H200 one weight of W1's 200,704 differed by 1% of
    itself after 20 steps (3.3e-6) while every other element agreed within 1e-4."""
    (losses, params), (ref_losses, ref_params) = train_steps(Protocol(), 11), train_steps(Protocol(), 10)
    assert_close(losses, ref_losses, 0.0, 1e-4, "784-256-128-10, stage 11 vs 10: losses")
    for i, (p, q) in enumerate(zip(params, ref_params, strict=True)):
        assert_close_by_norm(p, q, 1e-4, f"784-256-128-10, stage 11 vs 10: parameter {i}")


@pytest.mark.emulated
def test_the_lean_graph_fetches_each_batch_through_its_cursor():
    """Stage 11's graph fetches its batch itself (graphs.FetchingGraphedStep): over consecutive
    batches, a jump back, another array and a last partial batch, the same losses and parameters
    bit for bit as the same lean kernels launched directly, and a replay writes the cursor (16
    bytes) only where the batch does not follow the one before."""
    x, y = mnist_shaped(4 * NARROW.batch_size + 9)
    rows = NARROW.batch_size
    starts = [0, rows, 2 * rows, 0, 3 * rows, 4 * rows, None]  # None: batch 0's rows in another array
    runs = {}
    for without in ((), ("cuda_graphs",)):
        with mt.use_stage(11, without=without):
            trainer = Trainer(NARROW, "cuda")
            tx, ty = mt.tensor(x, "cuda"), mt.tensor(y, "cuda")
            other_x, other_y = mt.tensor(x[:rows], "cuda"), mt.tensor(y[:rows], "cuda")
            losses, writes = [], []
            for start in starts:
                xb, yb = (other_x, other_y) if start is None else (tx[start : start + rows], ty[start : start + rows])
                with mt.profiler.count() as counts:
                    losses.append(trainer.step(xb, yb))
                writes.append((counts.htod_copies, counts.dtod_copies))
            runs[without] = losses, [p.numpy() for p in trainer.net.parameters()], writes
    (losses, params, writes), (eager_losses, eager_params, _) = runs[()], runs[("cuda_graphs",)]
    assert losses == eager_losses
    assert all(np.array_equal(a, b) for a, b in zip(params, eager_params, strict=True))
    # steps 0 and 5 capture (a new shape: GraphedStep's copies, then the eager step); 1, 2 follow
    # the batch before; 3 jumps back, 4 jumps ahead, 6 is another array
    assert [writes[i] for i in (1, 2)] == [(0, 0), (0, 0)], writes
    assert [writes[i] for i in (3, 4, 6)] == [(1, 0), (1, 0), (1, 0)], writes
    assert len(set(losses)) == len(losses), "each step saw its own batch"
