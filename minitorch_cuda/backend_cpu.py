"""The CPU backend: numpy float32 arrays, the same op names as the CUDA backend.

This is also the reference implementation the course compares against: every
op here is the plain numpy expression of what the CUDA kernel computes.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def empty(shape):
    return np.empty(shape, dtype=F32)


def full(shape, value):
    return np.full(shape, value, dtype=F32)


def from_numpy(array):
    return np.array(array, dtype=F32, copy=True)


def to_numpy(x):
    return np.array(x, dtype=F32, copy=True)


def assign(dst, src):
    dst[...] = src


def item(x, flat_index):
    return float(x.reshape(-1)[flat_index]) if x.flags.c_contiguous else float(x.flat[flat_index])


def randn(shape, std, seed):
    return (np.random.default_rng(seed).standard_normal(shape) * std).astype(F32)


def fill_(x, value):
    x[...] = value


def copy(x):
    return np.array(x, dtype=F32, copy=True)


def shares_memory(a, b):
    return np.may_share_memory(a, b)


def contiguous(x):
    return np.ascontiguousarray(x)


def reshape(x, shape):
    return np.ascontiguousarray(x).reshape(shape)


def transpose(x):
    return np.swapaxes(x, -1, -2)


def broadcast_to(x, shape):
    return np.ascontiguousarray(np.broadcast_to(x, shape))


def slice_rows(x, start, stop):
    return x[start:stop]


def take_rows(x, indices):
    return x[indices]


def scatter_add_rows(grad, indices, n_rows):
    out = np.zeros((n_rows,) + grad.shape[1:], dtype=F32)
    np.add.at(out, indices, grad)
    return out


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def binary(op, a, b, pattern):
    if pattern == "col":
        b = b.reshape(a.shape[:-1] + (1,))
    elif pattern == "row":
        b = b.reshape(a.shape[-1])
    elif pattern == "scalar":
        b = b.reshape(())
    return _BINARY[op](a, b).astype(F32, copy=False)


def affine(x, alpha, beta):
    return (F32(alpha) * x + F32(beta)).astype(F32, copy=False)


def rdiv(x, s):
    return (F32(s) / x).astype(F32, copy=False)


def _sigmoid(x):
    # Never exponentiate a positive number: exp(-x) for x >= 0, exp(x) otherwise.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(F32)


def _relu(x):
    return np.maximum(x, F32(0))


_UNARY = {"exp": np.exp, "log": np.log, "relu": _relu, "sigmoid": _sigmoid}


def unary(op, x):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _UNARY[op](x).astype(F32, copy=False)


def relu_backward(grad, x):
    return np.where(x > 0, grad, F32(0)).astype(F32)


def sigmoid_backward(grad, y):
    return (grad * y * (1 - y)).astype(F32)


def sum(x, axis=None, scale=1.0):
    return (np.sum(x, axis=axis, dtype=F32) * F32(scale)).astype(F32)


def softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(F32)


def softmax_xent(logits, target):
    z = logits - logits.max(axis=-1, keepdims=True)
    log_s = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    probs = np.exp(z - log_s).astype(F32)
    loss = -(target * (z - log_s)).sum() / logits.shape[0]
    return probs, np.asarray(loss, dtype=F32)


def xent_backward(probs, target, upstream):
    return (upstream * (probs - target) / F32(probs.shape[0])).astype(F32)


def matmul(a, b, ta=False, tb=False):
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    return np.matmul(a, b).astype(F32, copy=False)


def linear(x, w, bias, relu):
    y = matmul(x, w)
    if bias is not None:
        y = y + bias
    return _relu(y) if relu else y


def backward_seed(shape):
    return np.ones(shape, dtype=F32)


def fusion_enabled():
    return False  # the fused ops exist here for parity; nn builds from them on CUDA only


def graphs_enabled():
    return False


def lean_backward_enabled():
    return False


def persistent_step_enabled():
    return False


def clip_gradients(grads, max_norm):
    norm = float(np.sqrt(np.sum([np.sum(g.astype(np.float64) ** 2) for g in grads])))
    if norm > max_norm:
        factor = F32(max_norm / (norm + 1e-6))
        for g in grads:
            g *= factor


def rmsprop_step(p, g, v, lr, decay, eps):
    v *= F32(decay)
    v += F32(1 - decay) * g * g
    p -= F32(lr) * g / (np.sqrt(v) + F32(eps))


def rmsprop_multi(params, grads, states, lr, decay, eps, max_norm=None):
    if max_norm is not None:
        clip_gradients(grads, max_norm)
    for p, g, v in zip(params, grads, states):
        rmsprop_step(p, g, v, lr, decay, eps)


def sgd_step(p, g, lr):
    p -= F32(lr) * g


def synchronize_device():
    pass
