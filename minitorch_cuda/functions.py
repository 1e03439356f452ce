"""The differentiable ops: what each computes forward and what flows back.

Every ``forward``/``backward`` calls backend ops only, so one definition
serves the CPU and the CUDA backend alike.
"""

from __future__ import annotations

import math

import numpy as np

from .autograd import Function


def broadcast_pattern(a_shape: tuple, b_shape: tuple) -> str | None:
    """How ``b`` stretches over ``a``: same, row (last axis), col (all but last), scalar."""
    if b_shape == a_shape:
        return "same"
    if len(b_shape) > len(a_shape):  # the result would have b's rank: broadcast a over b instead
        return None
    if math.prod(b_shape) == 1:
        return "scalar"
    if a_shape and b_shape and b_shape[-1] == a_shape[-1] and math.prod(b_shape) == a_shape[-1]:
        return "row"
    if len(b_shape) == len(a_shape) and b_shape[-1] == 1 and b_shape[:-1] == a_shape[:-1]:
        return "col"
    return None


def reduce_to(backend, grad, pattern: str, shape: tuple):
    """Sum a gradient of ``a``'s shape down to a broadcast operand's ``shape``."""
    if pattern == "same":
        return grad
    if pattern == "scalar":
        return backend.reshape(backend.sum(grad, None), shape)
    if pattern == "row":
        flat = backend.reshape(grad, (math.prod(grad.shape) // grad.shape[-1], grad.shape[-1]))
        return backend.reshape(backend.sum(flat, 0), shape)
    return backend.reshape(backend.sum(grad, len(grad.shape) - 1), shape)


class Binary(Function):
    __slots__ = ()

    def forward(self, backend, a, b, op: str, pattern: str):
        self.saved = (a, b, op, pattern)
        return backend.binary(op, a, b, pattern)

    def backward(self, backend, g):
        a, b, op, pattern = self.saved
        if op == "add":
            return g, reduce_to(backend, g, pattern, b.shape)
        if op == "sub":
            return g, backend.affine(reduce_to(backend, g, pattern, b.shape), -1.0, 0.0)
        if op == "mul":
            ga = backend.binary("mul", g, b, pattern)
            return ga, reduce_to(backend, backend.binary("mul", g, a, "same"), pattern, b.shape)
        ga = backend.binary("div", g, b, pattern)  # d(a/b)/db = -a / b^2
        gb = backend.binary("div", backend.binary("mul", ga, a, "same"), b, pattern)
        return ga, backend.affine(reduce_to(backend, gb, pattern, b.shape), -1.0, 0.0)


class Affine(Function):
    """alpha * x + beta: every scalar add, subtract, multiply and negation."""

    __slots__ = ()

    def forward(self, backend, x, alpha: float, beta: float):
        self.saved = alpha
        return backend.affine(x, alpha, beta)

    def backward(self, backend, g):
        return (backend.affine(g, self.saved, 0.0),)


class RDiv(Function):
    __slots__ = ()

    def forward(self, backend, x, s: float):
        y = backend.rdiv(x, s)
        self.saved = (x, y)
        return y

    def backward(self, backend, g):
        x, y = self.saved  # d(s/x)/dx = -y / x
        return (backend.affine(backend.binary("div", backend.binary("mul", g, y, "same"), x, "same"), -1.0, 0.0),)


class Exp(Function):
    __slots__ = ()

    def forward(self, backend, x):
        self.saved = backend.unary("exp", x)
        return self.saved

    def backward(self, backend, g):
        return (backend.binary("mul", g, self.saved, "same"),)


class Log(Function):
    __slots__ = ()

    def forward(self, backend, x):
        self.saved = x
        return backend.unary("log", x)

    def backward(self, backend, g):
        return (backend.binary("div", g, self.saved, "same"),)


class ReLU(Function):
    __slots__ = ()

    def forward(self, backend, x):
        self.saved = x
        return backend.unary("relu", x)

    def backward(self, backend, g):
        return (backend.relu_backward(g, self.saved),)


class Sigmoid(Function):
    __slots__ = ()

    def forward(self, backend, x):
        self.saved = backend.unary("sigmoid", x)
        return self.saved

    def backward(self, backend, g):
        return (backend.sigmoid_backward(g, self.saved),)


class Softmax(Function):
    __slots__ = ()

    def forward(self, backend, x):
        self.saved = backend.softmax(x)
        return self.saved

    def backward(self, backend, g):
        y = self.saved  # dx = y * (g - sum(g * y) over the last axis)
        dot = backend.sum(backend.binary("mul", g, y, "same"), len(y.shape) - 1)
        dot = backend.reshape(dot, y.shape[:-1] + (1,))
        return (backend.binary("mul", backend.binary("sub", g, dot, "col"), y, "same"),)


class Sum(Function):
    __slots__ = ()

    def forward(self, backend, x, axis: int | None, keepdims: bool, scale: float):
        out = backend.sum(x, axis, scale)
        kept = tuple(1 if axis is None or i == axis else d for i, d in enumerate(x.shape))
        self.saved = (x.shape, kept, scale)
        return backend.reshape(out, kept) if keepdims else out

    def backward(self, backend, g):
        shape, kept, scale = self.saved
        g = backend.broadcast_to(backend.reshape(g, kept), shape)
        return (g if scale == 1.0 else backend.affine(g, scale, 0.0),)


class MatMul(Function):
    """op(a) @ op(b); the transposes in backward become flags, not copies."""

    __slots__ = ()

    def forward(self, backend, a, b, ta: bool, tb: bool):
        self.saved = (a, b, ta, tb)
        return backend.matmul(a, b, ta, tb)

    def backward(self, backend, g):
        a, b, ta, tb = self.saved
        ga = backend.matmul(b, g, tb, True) if ta else backend.matmul(g, b, False, not tb)
        gb = backend.matmul(g, a, True, ta) if tb else backend.matmul(a, g, not ta, False)
        return _unbroadcast(backend, ga, a.shape), _unbroadcast(backend, gb, b.shape)


def _unbroadcast(backend, grad, shape):
    """Sum the batch axes a broadcast operand did not have."""
    while len(grad.shape) > len(shape):
        grad = backend.sum(grad, 0)
    return grad


class Reshape(Function):
    __slots__ = ()

    def forward(self, backend, x, shape: tuple):
        self.saved = x.shape
        return backend.reshape(x, shape)

    def backward(self, backend, g):
        return (backend.reshape(g, self.saved),)


class Transpose(Function):
    __slots__ = ()

    def forward(self, backend, x):
        return backend.transpose(x)

    def backward(self, backend, g):
        return (backend.transpose(g),)


class Contiguous(Function):
    __slots__ = ()

    def forward(self, backend, x):
        return backend.contiguous(x)

    def backward(self, backend, g):
        return (g,)


class SliceRows(Function):
    __slots__ = ()

    def forward(self, backend, x, start: int, stop: int):
        self.saved = (x.shape[0], start, stop)
        return backend.slice_rows(x, start, stop)

    def backward(self, backend, g):
        n_rows, start, stop = self.saved
        return (backend.scatter_add_rows(g, np.arange(start, stop), n_rows),)


class TakeRows(Function):
    __slots__ = ()

    def forward(self, backend, x, indices: np.ndarray):
        self.saved = (x.shape[0], indices)
        return backend.take_rows(x, indices)

    def backward(self, backend, g):
        n_rows, indices = self.saved
        return (backend.scatter_add_rows(g, indices, n_rows),)


class SoftmaxCrossEntropy(Function):
    """Mean over rows of -sum(target * log softmax(logits)); the target gets no gradient."""

    __slots__ = ()

    def forward(self, backend, logits, target):
        probs, loss = backend.softmax_xent(logits, target)
        self.saved = (probs, target)
        return loss

    def backward(self, backend, g):
        probs, target = self.saved
        return backend.xent_backward(probs, target, g), None


class FusedLinear(Function):
    """``act(x @ w + b)`` as one node (stage 10: one launch forward; ``nn.Linear`` uses it
    where the backend fuses). ReLU's derivative is
    read from the output (y > 0 exactly where x @ w + b > 0), so nothing else is saved."""

    __slots__ = ()

    def forward(self, backend, x, w, b=None, *, relu: bool):
        y = backend.linear(x, w, b, relu)
        self.saved = (x, w, y if relu else None, b is not None)
        return y

    def backward(self, backend, g):
        x, w, y, has_bias = self.saved
        if backend.lean_backward_enabled():
            return self._lean_backward(backend, g)
        gz = backend.relu_backward(g, y) if y is not None else g
        gx = backend.matmul(gz, w, False, True)
        gw = backend.matmul(x, gz, True, False)
        return (gx, gw, backend.sum(gz, 0)) if has_bias else (gx, gw)

    def _lean_backward(self, backend, g):
        """The same gradients in fewer launches (CUDA's lean step, stage 11), told whether x
        needs a gradient and whether x is another FusedLinear's ReLU output, whose mask the
        product for dx may then apply on the way."""
        x, w, y, has_bias = self.saved
        source = self.inputs[0]
        producer = source._node
        input_relu = isinstance(producer, FusedLinear) and producer.saved[2] is x
        gx, gw, gb = backend.linear_backward(g, x, w, y, has_bias, source.requires_grad, input_relu)
        return (gx, gw, gb) if has_bias else (gx, gw)
