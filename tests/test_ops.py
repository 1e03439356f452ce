"""Every op, forward and backward, on every device and stage, against float64 numpy.

Forward: the op on float32 tensors against the same expression in float64
numpy. Backward: ``out.backward(W)`` for a random upstream ``W`` against the
gradient of ``sum(ref(inputs) * W)``, analytic or by central differences in
float64. Shapes come from hypothesis (values from a seeded numpy generator, so
that no input sits on a kink such as relu's 0); the odd sizes 72x73x74 are
tested on purpose. Where torch imports, a few ops are checked against it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
from helpers import DEVICE_STAGES, assert_close, numeric_grad, on
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minitorch_cuda as mt

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
dims = st.integers(1, 9)


def _softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # stable in float64 for any x


def _xent(z, t):
    zs = z - z.max(axis=-1, keepdims=True)
    log_s = zs - np.log(np.exp(zs).sum(axis=-1, keepdims=True))
    return np.asarray(-(t * log_s).sum() / z.shape[0])


@dataclasses.dataclass
class Op:
    name: str
    shapes: Callable  # (r, c, b) -> list of input shapes
    fn: Callable  # minitorch tensors -> tensor
    ref: Callable  # float64 arrays -> array
    domain: str = "any"  # any | positive | nonzero
    atol: float = 1e-5
    rtol: float = 1e-4

    def __repr__(self) -> str:
        return self.name


def _binary_ops():
    ops = []
    exprs = {
        "add": (lambda a, b: a + b, np.add),
        "sub": (lambda a, b: a - b, np.subtract),
        "mul": (lambda a, b: a * b, np.multiply),
        "div": (lambda a, b: a / b, np.divide),
    }
    patterns = {
        "same": lambda r, c, b: [(r, c), (r, c)],
        "row": lambda r, c, b: [(r, c), (c,)],
        "row2d": lambda r, c, b: [(r, c), (1, c)],
        "col": lambda r, c, b: [(r, c), (r, 1)],
        "scalar": lambda r, c, b: [(r, c), (1,)],
        "scalar0d": lambda r, c, b: [(r, c), ()],
        "same3d": lambda r, c, b: [(b, r, c), (b, r, c)],
        "row3d": lambda r, c, b: [(b, r, c), (c,)],
        "col3d": lambda r, c, b: [(b, r, c), (b, r, 1)],
    }
    for op, (fn, ref) in exprs.items():
        for pattern, shapes in patterns.items():
            ops.append(Op(f"{op}-{pattern}", shapes, fn, ref, domain="nonzero" if op == "div" else "any"))
        # the broadcast operand first: b (op) a
        domain = "nonzero" if op == "div" else "any"
        ops.append(Op(f"{op}-row-first", lambda r, c, b: [(c,), (r, c)], fn, ref, domain=domain))
        ops.append(Op(f"{op}-scalar-first", lambda r, c, b: [(1,), (r, c)], fn, ref, domain=domain))
    return ops


SCALAR_OPS = [
    Op("add-scalar", lambda r, c, b: [(r, c)], lambda x: x + 2.5, lambda x: x + 2.5),
    Op("radd-scalar", lambda r, c, b: [(r, c)], lambda x: 2.5 + x, lambda x: 2.5 + x),
    Op("sub-scalar", lambda r, c, b: [(r, c)], lambda x: x - 1.5, lambda x: x - 1.5),
    Op("rsub-scalar", lambda r, c, b: [(r, c)], lambda x: 1.5 - x, lambda x: 1.5 - x),
    Op("mul-scalar", lambda r, c, b: [(r, c)], lambda x: x * -3.0, lambda x: x * -3.0),
    Op("rmul-scalar", lambda r, c, b: [(r, c)], lambda x: -3 * x, lambda x: -3.0 * x),
    Op("div-scalar", lambda r, c, b: [(r, c)], lambda x: x / 3.0, lambda x: x / 3.0),
    Op("rdiv-scalar", lambda r, c, b: [(r, c)], lambda x: 4.0 / x, lambda x: 4.0 / x, domain="nonzero"),
    Op("neg", lambda r, c, b: [(b, r, c)], lambda x: -x, lambda x: -x),
]

UNARY_OPS = [
    Op("exp", lambda r, c, b: [(r, c)], lambda x: x.exp(), np.exp),
    Op("log", lambda r, c, b: [(r, c)], lambda x: x.log(), np.log, domain="positive"),
    Op("relu", lambda r, c, b: [(b, r, c)], lambda x: x.relu(), lambda x: np.maximum(x, 0)),
    Op("sigmoid", lambda r, c, b: [(r, c)], lambda x: x.sigmoid(), _sigmoid),
    Op("softmax", lambda r, c, b: [(r, c)], lambda x: x.softmax(), _softmax),
    Op("softmax3d", lambda r, c, b: [(b, r, c)], lambda x: x.softmax(), _softmax),
    Op("softmax-wide", lambda r, c, b: [(r, 1000 + c)], lambda x: x.softmax(), _softmax),
]

REDUCE_OPS = [
    Op("sum-all", lambda r, c, b: [(r, c)], lambda x: x.sum(), lambda x: np.asarray(x.sum())),
    Op("sum-all3d", lambda r, c, b: [(b, r, c)], lambda x: x.sum(), lambda x: np.asarray(x.sum())),
    Op("sum-0", lambda r, c, b: [(r, c)], lambda x: x.sum(0), lambda x: x.sum(0)),
    Op("sum-1", lambda r, c, b: [(r, c)], lambda x: x.sum(1), lambda x: x.sum(1)),
    Op("sum-neg1-keep", lambda r, c, b: [(r, c)], lambda x: x.sum(-1, True), lambda x: x.sum(-1, keepdims=True)),
    Op("sum-0-keep", lambda r, c, b: [(r, c)], lambda x: x.sum(0, keepdims=True), lambda x: x.sum(0, keepdims=True)),
    Op("sum-mid3d", lambda r, c, b: [(b, r, c)], lambda x: x.sum(1), lambda x: x.sum(1)),
    Op("sum-long", lambda r, c, b: [(r, 3000 + c)], lambda x: x.sum(1), lambda x: x.sum(1), atol=1e-4),
    Op("mean-all", lambda r, c, b: [(r, c)], lambda x: x.mean(), lambda x: np.asarray(x.mean())),
    Op("mean-0", lambda r, c, b: [(r, c)], lambda x: x.mean(0), lambda x: x.mean(0)),
    Op("mean-1-keep", lambda r, c, b: [(r, c)], lambda x: x.mean(1, keepdims=True), lambda x: x.mean(1, keepdims=True)),
    Op("mean-0-3d", lambda r, c, b: [(b, r, c)], lambda x: x.mean(0), lambda x: x.mean(0)),
]


def _mm(ta, tb):
    def fn(a, b):
        return a.matmul(b, transpose_a=ta, transpose_b=tb)

    def ref(a, b):
        a = np.swapaxes(a, -1, -2) if ta else a
        b = np.swapaxes(b, -1, -2) if tb else b
        return np.matmul(a, b)

    return fn, ref


def _matmul_ops():
    ops = []
    for ta in (False, True):
        for tb in (False, True):
            fn, ref = _mm(ta, tb)
            flags = f"{'T' if ta else 'N'}{'T' if tb else 'N'}"

            def a_shape(m, k, batch=(), ta=ta):
                return (*batch, k, m) if ta else (*batch, m, k)

            def b_shape(k, n, batch=(), tb=tb):
                return (*batch, n, k) if tb else (*batch, k, n)

            ops += [
                Op(f"matmul-{flags}", lambda r, c, b, A=a_shape, B=b_shape: [A(r, c), B(c, b)], fn, ref),
                Op(
                    f"matmul-batched-{flags}",
                    lambda r, c, b, A=a_shape, B=b_shape: [A(r, c, (b,)), B(c, r, (b,))],
                    fn,
                    ref,
                ),
                Op(
                    f"matmul-batched@2d-{flags}",
                    lambda r, c, b, A=a_shape, B=b_shape: [A(r, c, (b,)), B(c, b)],
                    fn,
                    ref,
                ),
                Op(
                    f"matmul-2d@batched-{flags}",
                    lambda r, c, b, A=a_shape, B=b_shape: [A(r, c), B(c, b, (2,))],
                    fn,
                    ref,
                ),
            ]
    fn, ref = _mm(False, False)
    ops.append(Op("matmul-4d", lambda r, c, b: [(2, b, r, c), (2, b, c, 3)], fn, ref))
    ops.append(Op("matmul-@", lambda r, c, b: [(r, c), (c, b)], lambda a, b: a @ b, np.matmul))
    ops.append(Op("matmul-a@bT-view", lambda r, c, b: [(r, c), (b, c)], lambda a, b: a @ b.T, lambda a, b: a @ b.T))
    ops.append(Op("matmul-aT@b-view", lambda r, c, b: [(c, r), (c, b)], lambda a, b: a.T @ b, lambda a, b: a.T @ b))
    return ops


def _take(x, idx):
    return x[idx]


LAYOUT_OPS = [
    Op(
        "reshape",
        lambda r, c, b: [(r, c)],
        lambda x: x.reshape(x.shape[1], -1) * 1.0,
        lambda x: x.reshape(x.shape[1], -1),
    ),
    Op("reshape-flat", lambda r, c, b: [(b, r, c)], lambda x: x.reshape(-1), lambda x: x.reshape(-1)),
    Op("T", lambda r, c, b: [(r, c)], lambda x: x.T * 2.0, lambda x: x.T * 2.0),
    Op("T3d", lambda r, c, b: [(b, r, c)], lambda x: x.transpose().contiguous(), lambda x: np.swapaxes(x, -1, -2)),
    Op("T-reshape", lambda r, c, b: [(r, c)], lambda x: x.T.reshape(-1), lambda x: x.T.reshape(-1)),
    Op("T-sum0", lambda r, c, b: [(r, c)], lambda x: x.T.sum(0), lambda x: x.T.sum(0)),
    Op("T-softmax", lambda r, c, b: [(r, c)], lambda x: x.T.softmax(), lambda x: _softmax(x.T)),
    Op("contiguous", lambda r, c, b: [(r, c)], lambda x: x.T.contiguous(), lambda x: x.T.copy()),
    Op("row-int", lambda r, c, b: [(r, c)], lambda x: x[x.shape[0] - 1], lambda x: x[-1]),
    Op("row-neg", lambda r, c, b: [(r, c)], lambda x: x[-1] * 3.0, lambda x: x[-1] * 3.0),
    Op("slice", lambda r, c, b: [(r + 1, c)], lambda x: x[1:] + 0.0, lambda x: x[1:]),
    Op("slice-mm", lambda r, c, b: [(r + 1, c), (c, b)], lambda x, w: x[1:] @ w, lambda x, w: x[1:] @ w),
    Op("gather", lambda r, c, b: [(r, c)], lambda x: x[[0, x.shape[0] - 1, 0]], lambda x: x[[0, -1, 0]]),
    Op("gather-np", lambda r, c, b: [(r, c, b)], lambda x: x[np.array([-1, 0])], lambda x: x[[-1, 0]]),
]

XENT_OPS = [
    Op(
        "xent-onehot",
        lambda r, c, b: [(r, c + 1)],
        lambda z: mt.cross_entropy_with_softmax(z, _onehot_like(z)),
        lambda z: _xent(z, np.eye(z.shape[1])[np.arange(z.shape[0]) % z.shape[1]]),
    ),
]


def _onehot_like(z: mt.Tensor) -> mt.Tensor:
    r, c = z.shape
    return mt.tensor(np.eye(c)[np.arange(r) % c], z.device)


ALL_OPS = _binary_ops() + SCALAR_OPS + UNARY_OPS + REDUCE_OPS + _matmul_ops() + LAYOUT_OPS + XENT_OPS


def _inputs(shapes, domain, rng) -> list[np.ndarray]:
    arrays = []
    for i, shape in enumerate(shapes):
        x = rng.standard_normal(shape)
        # the numeric gradient's central differences (h = 1e-6) straddle a kink (relu's at 0) lying
        # within h of an input: keep inputs 1e-3 away from 0, where every op here is smooth
        x = np.where(np.abs(x) < 1e-3, np.copysign(1e-3, x), x)
        if domain == "positive" or (domain == "nonzero" and i == len(shapes) - 1):
            x = np.abs(x) + 0.5
            if domain == "nonzero":
                x *= rng.choice([-1.0, 1.0], size=shape)
        arrays.append(x.astype(np.float32))
    return arrays


def check_op(op: Op, device: str, stage, shapes, seed: int, backward: bool = True) -> None:
    rng = np.random.default_rng(seed)
    arrays = _inputs(shapes, op.domain, rng)
    with on(device, stage):
        tensors = [mt.tensor(a, device, requires_grad=True) for a in arrays]
        out = op.fn(*tensors)
        ref = op.ref(*(a.astype(np.float64) for a in arrays))
        assert out.device == mt.Device(device)
        assert_close(out, ref, op.atol, op.rtol, f"{op.name} forward {shapes}")
        if not backward:
            return
        weight = rng.standard_normal(out.shape).astype(np.float32)
        out.backward(mt.tensor(weight, device))
        grads = numeric_grad(op.ref, arrays, weight)
        for i, (t, g) in enumerate(zip(tensors, grads)):
            assert t.grad is not None, f"{op.name}: input {i} got no gradient"
            assert t.grad.shape == t.shape
            assert_close(t.grad, g, 1e-4, 1e-3, f"{op.name} grad of input {i} {shapes}")


@pytest.mark.parametrize("op", ALL_OPS, ids=repr)
@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
@SETTINGS
@given(r=dims, c=dims, b=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_op(op, device, stage, r, c, b, seed):
    check_op(op, device, stage, op.shapes(r, c, b), seed)


# --- odd sizes on purpose: 72 x 73 x 74 ------------------------------------------------


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch", [(), (2,), "2d-rhs"])
@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_matmul_odd_sizes(device, stage, ta, tb, batch):
    m, k, n = 72, 73, 74
    rng = np.random.default_rng(7)
    lead_a = (2,) if batch else ()
    lead_b = (2,) if batch == (2,) else ()
    a = rng.standard_normal((*lead_a, *((k, m) if ta else (m, k)))).astype(np.float32)
    b = rng.standard_normal((*lead_b, *((n, k) if tb else (k, n)))).astype(np.float32)
    a64 = np.swapaxes(a, -1, -2).astype(np.float64) if ta else a.astype(np.float64)
    b64 = np.swapaxes(b, -1, -2).astype(np.float64) if tb else b.astype(np.float64)
    ref = a64 @ b64
    w = rng.standard_normal(ref.shape)
    ga = w @ np.swapaxes(b64, -1, -2)  # d sum(w * (A @ B)) / dA
    gb = np.swapaxes(a64, -1, -2) @ w
    if not lead_b:
        gb = gb.sum(0) if gb.ndim == 3 else gb
    ga = np.swapaxes(ga, -1, -2) if ta else ga
    gb = np.swapaxes(gb, -1, -2) if tb else gb
    with on(device, stage):
        ta_t = mt.tensor(a, device, requires_grad=True)
        tb_t = mt.tensor(b, device, requires_grad=True)
        out = ta_t.matmul(tb_t, transpose_a=ta, transpose_b=tb)
        assert_close(out, ref, 1e-4, 1e-4, "matmul forward")
        out.backward(mt.tensor(w, device))
        assert_close(ta_t.grad, ga, 1e-3, 1e-4, "matmul grad a")
        assert_close(tb_t.grad, gb, 1e-3, 1e-4, "matmul grad b")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_odd_sizes_elementwise_and_reductions(device, stage):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 72, 73)).astype(np.float32)
    bias = rng.standard_normal(73).astype(np.float32)
    x64 = x.astype(np.float64)
    with on(device, stage):
        t = mt.tensor(x, device, requires_grad=True)
        b = mt.tensor(bias, device, requires_grad=True)
        y = ((t + b).relu() * 0.5).softmax()
        ref = _softmax(np.maximum(x64 + bias, 0) * 0.5)
        assert_close(y, ref, 1e-6, 1e-4, "softmax(relu(x + b) / 2)")
        assert_close(t.sum(), x64.sum(), 1e-2, 1e-4, "sum all")
        assert_close(t.sum(1), x64.sum(1), 1e-4, 1e-4, "sum axis 1")
        assert_close(t.mean(2, keepdims=True), x64.mean(2, keepdims=True), 1e-5, 1e-4, "mean axis 2")
        w = rng.standard_normal(y.shape)
        y.backward(mt.tensor(w, device))
        s = _softmax(np.maximum(x64 + bias, 0) * 0.5)
        gz = s * (w - (w * s).sum(-1, keepdims=True)) * 0.5 * (x64 + bias > 0)
        assert_close(t.grad, gz, 1e-5, 1e-3, "grad x")
        assert_close(b.grad, gz.sum((0, 1)), 1e-4, 1e-3, "grad bias")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_cross_entropy_matches_reference(device, stage):
    rng = np.random.default_rng(5)
    z = rng.standard_normal((73, 10)).astype(np.float32) * 3
    soft = _softmax(rng.standard_normal((73, 10)))  # soft targets, rows sum to 1
    with on(device, stage):
        logits = mt.tensor(z, device, requires_grad=True)
        target = mt.tensor(soft, device)
        loss = mt.cross_entropy_with_softmax(logits, target)
        assert loss.shape == ()
        assert_close(loss, _xent(z.astype(np.float64), soft), 1e-5, 1e-4, "loss")
        loss.backward()
        ref = (_softmax(z.astype(np.float64)) - soft) / 73
        assert_close(logits.grad, ref, 1e-6, 1e-3, "grad logits")
        assert target.grad is None


# --- numerical stability --------------------------------------------------------------


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_sigmoid_is_stable_for_large_inputs(device, stage):
    x = np.array([[-100.0, -30.0, -1.0, 0.0, 1.0, 30.0, 100.0]], dtype=np.float32)
    with on(device, stage):
        t = mt.tensor(x, device, requires_grad=True)
        y = t.sigmoid()
        y.sum().backward()
        out, grad = y.numpy(), t.grad.numpy()
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(grad))
    assert_close(out, _sigmoid(x.astype(np.float64)), 1e-7, 1e-5, "sigmoid")
    s = _sigmoid(x.astype(np.float64))
    assert_close(grad, s * (1 - s), 1e-7, 1e-4, "sigmoid grad")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_softmax_and_xent_are_stable_for_large_logits(device, stage):
    x = np.array([[1000.0, 0.0, -1000.0], [-500.0, -500.0, -499.0]], dtype=np.float32)
    target = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], dtype=np.float32)
    with on(device, stage):
        s = mt.tensor(x, device).softmax().numpy()
        logits = mt.tensor(x, device, requires_grad=True)
        loss = mt.cross_entropy_with_softmax(logits, mt.tensor(target, device))
        loss.backward()
        value, grad = loss.item(), logits.grad.numpy()
    assert np.all(np.isfinite(s)) and np.all(np.isfinite(grad)) and np.isfinite(value)
    assert_close(s, _softmax(x.astype(np.float64)), 1e-7, 1e-5, "softmax")
    assert_close(value, _xent(x.astype(np.float64), target), 1e-3, 1e-5, "loss")


# --- creation, transfer, item access -----------------------------------------------------


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_creation(device, stage):
    with on(device, stage):
        assert_close(mt.zeros((3, 5), device), np.zeros((3, 5)), 0, 0, "zeros")
        assert_close(mt.ones(7, device), np.ones(7), 0, 0, "ones")
        assert_close(mt.full((2, 3, 4), -2.5, device), np.full((2, 3, 4), -2.5), 0, 0, "full")
        data = np.arange(12, dtype=np.int64).reshape(3, 4)
        t = mt.tensor(data, device)
        assert t.shape == (3, 4) and t.ndim == 2 and t.size == 12 and len(t) == 3
        assert t.numpy().dtype == np.float32
        assert_close(t, data, 0, 0, "tensor from ints")
        assert_close(mt.from_numpy(data.astype(np.float64) / 7), data / 7, 1e-7, 1e-6, "from_numpy")
        assert_close(mt.tensor([[1.5, 2], [3, 4]], device), [[1.5, 2], [3, 4]], 0, 0, "from lists")
        assert mt.tensor(3.0, device).item() == 3.0
        # numpy() is a copy: changing it leaves the tensor alone
        host = t.numpy()
        host[:] = 99
        assert_close(t, data, 0, 0, "after editing numpy()")
        t.fill_(4.25)
        assert_close(t, np.full((3, 4), 4.25), 0, 0, "fill_")
        assert t.tolist() == [[4.25] * 4] * 3


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_randn_statistics_and_seeds(device, stage):
    with on(device, stage):
        x = mt.randn((400, 500), std=0.5, seed=123, device=device).numpy().astype(np.float64)
        again = mt.randn((400, 500), std=0.5, seed=123, device=device).numpy()
        other = mt.randn((400, 500), std=0.5, seed=124, device=device).numpy()
    assert np.all(np.isfinite(x))
    assert abs(x.mean()) < 0.01, x.mean()
    assert abs(x.std() - 0.5) < 0.01, x.std()
    assert abs(((x / 0.5) ** 4).mean() - 3.0) < 0.1  # Gaussian kurtosis
    assert np.array_equal(x.astype(np.float32), again), "the same seed must give the same values"
    assert not np.array_equal(again, other)


def test_manual_seed_makes_randn_reproducible():
    mt.manual_seed(11)
    a = mt.randn((4, 4)).numpy()
    mt.manual_seed(11)
    assert np.array_equal(a, mt.randn((4, 4)).numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("stage", range(4))
def test_host_init_stages_draw_what_the_cpu_draws(stage):
    with mt.use_stage(stage):
        gpu = mt.randn((33, 17), std=2.0, seed=9, device="cuda").numpy()
    assert np.array_equal(gpu, mt.randn((33, 17), std=2.0, seed=9).numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("stage", range(mt.MAX_STAGE + 1))
def test_to_device_round_trip(stage):
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    with mt.use_stage(stage):
        t = mt.tensor(x)
        g = t.to("cuda")
        assert g.device == mt.Device("cuda") and t.to("cpu") is t
        assert np.array_equal(g.numpy(), x)
        assert np.array_equal(g.to(mt.Device("cpu")).numpy(), x)
        assert np.array_equal(g.T.to("cpu").numpy(), x.T)  # a view copies out in its own layout


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_item_access(device, stage):
    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 3
    with on(device, stage):
        t = mt.tensor(x, device)
        assert_close(t[1], x[1], 0, 0, "t[1]")
        assert_close(t[-1], x[-1], 0, 0, "t[-1]")
        assert_close(t[1:3], x[1:3], 0, 0, "t[1:3]")
        assert_close(t[:2], x[:2], 0, 0, "t[:2]")
        assert_close(t[-2:], x[-2:], 0, 0, "t[-2:]")
        assert_close(t[[3, 0, 3]], x[[3, 0, 3]], 0, 0, "t[[3, 0, 3]]")
        assert_close(t[[-1]], x[[-1]], 0, 0, "t[[-1]]")
        for i, j in [(0, 0), (2, 5), (-1, -1), (3, 0)]:
            value = t[i, j]
            assert isinstance(value, float) and value == float(x[i, j]), (i, j, value)
        assert t.T[5, 3] == float(x[3, 5])  # through a transposed view
        assert t[1:3][1, 2] == float(x[2, 2])  # through a row range
        assert mt.tensor([[7.5]], device).item() == 7.5
        assert float(mt.tensor([[7.5]], device)) == 7.5
        with pytest.raises(ValueError, match="one element"):
            float(t)
        assert t.sum().item() == pytest.approx(float(x.sum()), rel=1e-6)
        assert t[2][3].item() == float(x[2, 3])
        vec = mt.tensor(x[0], device)
        assert vec[2].shape == () and vec[2].item() == float(x[0, 2])
        t3 = mt.tensor(x.reshape(2, 3, 4), device)
        assert t3[1, 2, 3] == float(x.reshape(2, 3, 4)[1, 2, 3])
        assert_close(t3[1], x.reshape(2, 3, 4)[1], 0, 0, "3-D t[1]")


# --- torch as a second reference, where it imports ---------------------------------------


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_against_torch(device, stage):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((72, 73)).astype(np.float32)
    w = rng.standard_normal((74, 73)).astype(np.float32)
    bias = rng.standard_normal(74).astype(np.float32)
    labels = rng.integers(0, 74, 72)
    target = np.eye(74, dtype=np.float32)[labels]
    tx, tw, tbias = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, bias))
    t_logits = (tx @ tw.T + tbias).sigmoid() * 4
    t_loss = torch.nn.functional.cross_entropy(t_logits, torch.tensor(labels))
    t_loss.backward()
    with on(device, stage):
        mx, mw, mb = (mt.tensor(a, device, requires_grad=True) for a in (x, w, bias))
        logits = (mx.matmul(mw, transpose_b=True) + mb).sigmoid() * 4
        loss = mt.cross_entropy_with_softmax(logits, mt.tensor(target, device))
        loss.backward()
        assert_close(logits, t_logits.detach().numpy(), 1e-5, 1e-4, "logits vs torch")
        assert_close(loss, t_loss.detach().numpy(), 1e-5, 1e-4, "loss vs torch")
        for name, mine, theirs in (("x", mx, tx), ("w", mw, tw), ("bias", mb, tbias)):
            assert_close(mine.grad, theirs.grad.numpy(), 1e-6, 1e-3, f"grad {name} vs torch")


@pytest.mark.gpu
def test_stage_12_ops_other_than_matmul_are_exact_fp32():
    """The op suite's non-matmul ops at stage 12, with the suite's own tolerances."""
    for op in ALL_OPS:
        if "mm" in op.name or "matmul" in op.name:
            continue
        check_op(op, "cuda", 12, op.shapes(3, 5, 2), seed=0)
