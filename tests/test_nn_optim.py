"""Layers and optimizers against the numpy expressions of their formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import DEVICE_STAGES, assert_close, on

import minitorch_cuda as mt
from minitorch_cuda import nn, optim


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_feedforward_and_sequential(device, stage):
    with on(device, stage):
        layer = nn.FeedForward(73, 5, device=device, seed=3)
        assert layer.weight.shape == (73, 5) and layer.bias.shape == (5,)
        assert all(p.requires_grad and p.device == mt.Device(device) for p in layer.parameters())
        assert_close(layer.bias, np.zeros(5), 0, 0, "bias starts at zero")
        w = layer.weight.numpy().astype(np.float64)
        assert 0.5 * math.sqrt(2 / 78) < w.std() < 1.5 * math.sqrt(2 / 78)  # Xavier-normal
        net = nn.Sequential(layer, nn.ReLU(), nn.FeedForward(5, 3, bias=False, device=device, seed=4), nn.Sigmoid())
        assert len(net.parameters()) == 3
        x = np.random.default_rng(0).standard_normal((7, 73)).astype(np.float32)
        ref = 1 / (1 + np.exp(-(np.maximum(x @ w, 0) @ net.layers[2].weight.numpy().astype(np.float64))))
        assert_close(net(mt.tensor(x, device)), ref, 1e-6, 1e-4, "MLP forward")
        assert_close(nn.Softmax()(mt.tensor(x, device)).sum(1), np.ones(7), 1e-5, 0, "softmax rows")
        loss = nn.CrossEntropyWithSoftmax()(
            net(mt.tensor(x, device)), mt.tensor(np.eye(3)[[0, 1, 2, 0, 1, 2, 0]], device)
        )
        loss.backward()
        assert all(p.grad is not None and p.grad.shape == p.shape for p in net.parameters())


def _params(device, rng, shapes=((4, 3), (3,))):
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    params = [mt.tensor(v, device, requires_grad=True) for v in values]
    for p, g in zip(params, grads):
        p.grad = mt.tensor(g, device)
    return values, grads, params


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_rmsprop_matches_its_formula(device, stage):
    rng = np.random.default_rng(1)
    with on(device, stage):
        values, grads, params = _params(device, rng)
        opt = optim.RmsProp(params, lr=1e-2, decay=0.9, eps=1e-8)
        v = [np.zeros_like(g, dtype=np.float64) for g in grads]
        p_ref = [x.astype(np.float64) for x in values]
        for _ in range(3):
            opt.step()
            for i, g in enumerate(grads):
                v[i] = 0.9 * v[i] + 0.1 * g.astype(np.float64) ** 2
                p_ref[i] -= 1e-2 * g / (np.sqrt(v[i]) + 1e-8)
        for p, ref in zip(params, p_ref):
            assert_close(p, ref, 1e-6, 1e-4, "rmsprop")
        opt.zero_grad()
        assert all(p.grad is None for p in params)
        opt.step()  # no gradients: nothing moves
        for p, ref in zip(params, p_ref):
            assert_close(p, ref, 1e-6, 1e-4, "rmsprop without grads")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
def test_sgd_matches_its_formula(device, stage):
    rng = np.random.default_rng(2)
    with on(device, stage):
        values, grads, params = _params(device, rng)
        optim.SGD(params, lr=0.5).step()
        for p, v, g in zip(params, values, grads):
            assert_close(p, v.astype(np.float64) - 0.5 * g, 1e-6, 1e-5, "sgd")


@pytest.mark.parametrize(("device", "stage"), DEVICE_STAGES)
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_gradients(device, stage, max_norm):
    rng = np.random.default_rng(3)
    with on(device, stage):
        _, grads, params = _params(device, rng, ((5, 7), (7,), (1,)))
        optim.SGD(params, lr=0.1).clip_gradients(max_norm)
        norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
        factor = max_norm / (norm + 1e-6) if norm > max_norm else 1.0
        for p, g in zip(params, grads):
            assert_close(p.grad, g * factor, 1e-7, 1e-5, f"clipped (norm {norm:.3f}, max {max_norm})")
        clipped = math.sqrt(sum(float((p.grad.numpy().astype(np.float64) ** 2).sum()) for p in params))
        assert clipped <= max_norm * (1 + 1e-5)
