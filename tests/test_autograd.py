"""The backward pass: graph order, accumulation, no_grad, errors, aliasing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import DEVICE_STAGES, assert_close, on

import minitorch_cuda as mt


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_diamond_graph(device, stage):
    """x feeds two branches that meet again: x's gradient is the sum over both paths,
    and each node runs its backward once, after all its consumers."""
    x = np.array([[0.5, -1.0, 2.0]], dtype=np.float32)
    x64 = x.astype(np.float64)
    with on(device, stage):
        t = mt.tensor(x, device, requires_grad=True)
        a = t * 2.0
        b = t.exp()
        c = a * b + a  # a is used twice, b once
        loss = c.sum()
        loss.backward()
        assert_close(t.grad, 2 * np.exp(x64) + 2 * x64 * np.exp(x64) + 2, 1e-5, 1e-5, "diamond")
        assert a.grad is None and b.grad is None, "only leaves keep a gradient"


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_leaf_used_twice(device, stage):
    x = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    with on(device, stage):
        t = mt.tensor(x, device, requires_grad=True)
        (t * t).sum().backward()
        assert_close(t.grad, 2 * x, 0, 1e-6, "d sum(x*x)")
        u = mt.tensor(x, device, requires_grad=True)
        (u + u).sum().backward()
        assert_close(u.grad, np.full(3, 2.0), 0, 0, "d sum(x+x)")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_gradients_accumulate_across_backward_calls(device, stage):
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    with on(device, stage):
        t = mt.tensor(x, device, requires_grad=True)
        (t * 3.0).sum().backward()
        first = t.grad.numpy()
        (t * 3.0).sum().backward()
        assert_close(first, np.full((2, 2), 3.0), 0, 0, "first")
        assert_close(t.grad, np.full((2, 2), 6.0), 0, 0, "accumulated")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_no_grad_records_nothing(device, stage):
    with on(device, stage):
        t = mt.ones((2, 3), device, requires_grad=True)
        assert mt.is_grad_enabled()
        with mt.no_grad():
            assert not mt.is_grad_enabled()
            y = (t * 2.0).relu().sum()
        assert mt.is_grad_enabled()
        assert not y.requires_grad and y._node is None
        with pytest.raises(RuntimeError, match="does not require grad"):
            y.backward()
        assert t.grad is None


def test_no_grad_restores_on_error():
    with pytest.raises(KeyError), mt.no_grad():
        raise KeyError("inside")
    assert mt.is_grad_enabled()


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_backward_on_non_scalar_needs_a_gradient(device, stage):
    with on(device, stage):
        t = mt.ones((2, 3), device, requires_grad=True)
        y = t * 2.0
        with pytest.raises(ValueError, match="single-element"):
            y.backward()
        with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
            y.backward(mt.ones((3, 2), device))
        y.backward(mt.ones((2, 3), device))  # still usable
        assert_close(t.grad, np.full((2, 3), 2.0), 0, 0, "after the errors")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_grads_are_not_aliased(device, stage):
    """a + b hands the same upstream array to both leaves; each must own its gradient,
    or scaling one in place (gradient clipping) scales the other twice."""
    with on(device, stage):
        a = mt.full((4,), 3.0, device, requires_grad=True)
        b = mt.full((4,), 3.0, device, requires_grad=True)
        c = mt.full((4,), 1.0, device, requires_grad=True)
        ((a + b) + c.reshape(4)).sum().backward()
        assert a.grad is not b.grad and a.grad.data is not b.grad.data
        assert not a.backend.shares_memory(a.grad.data, b.grad.data)
        assert not a.backend.shares_memory(a.grad.data, c.grad.data)
        opt = mt.optim.SGD([a, b, c], lr=1.0)
        opt.clip_gradients(1.0)  # norm = sqrt(12 * 1) > 1: each grad scaled by 1/sqrt(12) once
        expected = np.full(4, 1.0 / np.sqrt(12.0))
        for name, p in (("a", a), ("b", b), ("c", c)):
            assert_close(p.grad, expected, 1e-6, 1e-4, f"clipped grad of {name}")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_user_gradient_is_not_aliased(device, stage):
    with on(device, stage):
        t = mt.ones((3,), device, requires_grad=True)
        seed = mt.full((3,), 2.0, device)
        t.backward(seed)  # a leaf as the root
        t.grad.fill_(0.0)
        assert_close(seed, np.full(3, 2.0), 0, 0, "the caller's gradient (leaf root)")
        u = mt.ones((3,), device, requires_grad=True)
        u.reshape(1, 3).backward(seed.reshape(1, 3))  # a view of the seed flows back
        u.grad.fill_(0.0)
        assert_close(seed, np.full(3, 2.0), 0, 0, "the caller's gradient (through reshape)")
        w = mt.ones((3,), device, requires_grad=True)
        (w + 0.0).contiguous().backward(seed)
        w.grad.fill_(0.0)
        assert_close(seed, np.full(3, 2.0), 0, 0, "the caller's gradient (through contiguous)")


def test_long_chain_has_no_recursion_limit():
    t = mt.ones((2,), requires_grad=True)
    y = t
    for _ in range(3000):
        y = y * 1.0
    y.sum().backward()
    assert_close(t.grad, np.ones(2), 0, 0, "chain of 3000")


def test_detach_and_requires_grad_propagation():
    t = mt.ones((2, 2), requires_grad=True)
    c = mt.ones((2, 2))
    assert (t * c).requires_grad and not (c * 2.0).requires_grad
    d = t.detach()
    assert not d.requires_grad and d._node is None
    assert_close(d, t.numpy(), 0, 0, "detached")
