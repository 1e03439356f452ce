"""CUDA ops that compute elementwise, reduce, and take softmax and cross-entropy."""

from __future__ import annotations

import math

from .. import stages
from . import launchers
from .array import DeviceArray
from .ops_tensor import contiguous, elementwise_at_stage, full


def reduction_variant(base: str) -> str:
    """The stage's reduction variant of a kernel family: warp shuffles from stage 8."""
    return f"{base}_shuffle" if stages.warp_shuffle() else f"{base}_volatile"


def binary(op: str, a: DeviceArray, b: DeviceArray, pattern: str) -> DeviceArray:
    """``a (op) b`` with b broadcast by ``pattern``: same, row, col or scalar."""
    a, b = contiguous(a), contiguous(b)
    n, cols = a.size, a.shape[-1] if a.shape else 1
    b_div, b_mod = {"same": (1, n), "row": (1, cols), "col": (cols, n // cols), "scalar": (1, 1)}[pattern]
    out = DeviceArray.empty(a.shape)
    elementwise_at_stage(f"ew_{op}", n, out, a, b, n, b_div, b_mod)
    return out


def affine(x: DeviceArray, alpha: float, beta: float) -> DeviceArray:
    x = contiguous(x)
    out = DeviceArray.empty(x.shape)
    elementwise_at_stage("ew_affine", x.size, out, x, float(alpha), float(beta), x.size)
    return out


def rdiv(x: DeviceArray, s: float) -> DeviceArray:
    x = contiguous(x)
    out = DeviceArray.empty(x.shape)
    launchers.elementwise("ew_rdiv", x.size, out, x, float(s), x.size)
    return out


def unary(op: str, x: DeviceArray) -> DeviceArray:
    x = contiguous(x)
    out = DeviceArray.empty(x.shape)
    elementwise_at_stage(f"ew_{op}", x.size, out, x, x.size)
    return out


def _with_saved(name: str, grad: DeviceArray, saved: DeviceArray) -> DeviceArray:
    grad, saved = contiguous(grad), contiguous(saved)
    out = DeviceArray.empty(grad.shape)
    elementwise_at_stage(name, grad.size, out, grad, saved, grad.size)
    return out


def relu_backward(grad: DeviceArray, x: DeviceArray) -> DeviceArray:
    if getattr(grad, "masked_by", None) is x:  # the lean step's product masked it already
        return grad
    return _with_saved("ew_relu_backward", grad, x)


def sigmoid_backward(grad: DeviceArray, y: DeviceArray) -> DeviceArray:
    return _with_saved("ew_sigmoid_backward", grad, y)


def sum(x: DeviceArray, axis: int | None = None, scale: float = 1.0) -> DeviceArray:
    """``scale * x.sum(axis)`` without keepdims (axis None: every element)."""
    x = contiguous(x)
    if axis is None:
        out = DeviceArray.empty(())
        rows, cols = 1, x.size
    elif axis == x.ndim - 1:
        out = DeviceArray.empty(x.shape[:-1])
        rows, cols = x.size // x.shape[-1], x.shape[-1]
    else:
        out = DeviceArray.empty(x.shape[:axis] + x.shape[axis + 1 :])
        outer, red, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1 :])
        launchers.elementwise("sum_axis", out.size, out, x, outer, red, inner, float(scale))
        return out
    launchers.sum_rows(reduction_variant("sum_rows"), out, x, rows, cols, scale)
    return out


def softmax(x: DeviceArray) -> DeviceArray:
    x = contiguous(x)
    cols = x.shape[-1]
    rows = x.size // cols
    out = DeviceArray.empty(x.shape)
    if not stages.vectorized_kernels():  # three passes over the row in a block
        launchers.softmax_rows(reduction_variant("softmax_rows"), out, x, rows, cols)
    elif cols <= 1024:  # from stage 9 one read of the row: in a warp's registers,
        launchers.softmax_rows("softmax_rows_warp", out, x, rows, cols)
    elif cols <= launchers.BLOCK_ROW_COLUMNS:  # in a block's registers,
        launchers.softmax_rows("softmax_rows_block", out, x, rows, cols)
    else:  # or online (max, sum)
        launchers.softmax_rows("softmax_rows_online", out, x, rows, cols)
    return out


class XentGradient:
    """What the lean step's softmax_xent saves instead of the probabilities: the logits' gradient
    for an upstream gradient of 1, written by the forward launch."""

    __slots__ = ("grad", "taken")

    def __init__(self, grad: DeviceArray):
        self.grad, self.taken = grad, False


def softmax_xent(logits: DeviceArray, target: DeviceArray) -> tuple[DeviceArray | XentGradient, DeviceArray]:
    """Softmax probabilities and the mean cross-entropy over rows, from the logits; from the lean
    step on (rows up to 1024 columns), the logits' gradient in place of the probabilities."""
    logits, target = contiguous(logits), contiguous(target)
    rows, cols = logits.shape
    probs = DeviceArray.empty(logits.shape)
    if stages.lean_step() and cols <= 1024:  # the backward pass's work done forward, in the same launch
        loss = DeviceArray.empty(())
        launchers.softmax_xent_grad(probs, loss, logits, target, rows, cols, 1.0 / rows)
        return XentGradient(probs), loss
    if stages.fused_kernels() and cols <= 1024:  # probabilities and the mean loss in one launch
        loss = DeviceArray.empty(())
        launchers.softmax_xent_fused(probs, loss, logits, target, rows, cols, 1.0 / rows)
        return probs, loss
    row_loss = DeviceArray.empty((rows,))
    launchers.softmax_xent(reduction_variant("softmax_xent"), probs, row_loss, logits, target, rows, cols)
    return probs, sum(row_loss, None, 1.0 / rows)


def xent_backward(probs: DeviceArray | XentGradient, target: DeviceArray, upstream: DeviceArray) -> DeviceArray:
    if isinstance(probs, XentGradient):
        if is_seed(upstream) and not probs.taken:  # d(loss)/d(loss) = 1: the gradient as written
            probs.taken = True  # handed out once: whoever gets it may keep it (a leaf's .grad)
            return probs.grad
        return binary("mul", probs.grad, upstream, "scalar")
    out = DeviceArray.empty(probs.shape)
    launchers.elementwise("xent_backward", probs.size, out, probs, target, upstream, probs.size, 1.0 / probs.shape[0])
    return out


_seeds: dict[tuple[int, ...], DeviceArray] = {}


def backward_seed(shape: tuple[int, ...]) -> DeviceArray:
    """The gradient a backward pass from a computed (non-leaf) tensor starts from: ones. Backward
    passes read it and never write it (autograd copies what a leaf would keep), so from the lean
    step on it is one buffer per shape, filled once: a step launches no fill."""
    if not stages.lean_step():
        return full(shape, 1.0)
    if shape not in _seeds:
        _seeds[shape] = full(shape, 1.0)
    return _seeds[shape]


def is_seed(x: DeviceArray) -> bool:
    """Whether ``x`` is the lean step's resident seed of ones (so a product with it is a no-op)."""
    return _seeds.get(x.shape) is x
