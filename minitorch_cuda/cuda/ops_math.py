"""CUDA ops that compute elementwise, reduce, and take softmax and cross-entropy."""

from __future__ import annotations

import math

from .. import stages
from . import registry
from .array import DeviceArray
from .launchers import _elementwise, _elementwise_vec, _reduce_block, _variant
from .ops_tensor import contiguous
from .runtime import launch

XENT_THREADS = 512  # fused.cu: softmax_xent_fused's __launch_bounds__
BLOCK_ROW_COLUMNS = 512 * 32  # vectorized.cu: softmax_rows_block, 512 threads of 32 values at most


def block_row_threads(cols: int) -> int:
    """Threads for softmax_rows_block: 32 columns each, rounded up to whole warps."""
    return 32 * -(-cols // (32 * 32))


def _per_row(base: str, rows: int, cols: int, *args, shapes=()) -> None:
    """One block per row, in the stage's reduction variant (volatile or shuffle)."""
    launch(registry.get(_variant(base)), (rows, 1, 1), (_reduce_block(cols), 1, 1), *args, shapes=shapes)


def binary(op: str, a: DeviceArray, b: DeviceArray, pattern: str) -> DeviceArray:
    """``a (op) b`` with b broadcast by ``pattern``: same, row, col or scalar."""
    a, b = contiguous(a), contiguous(b)
    n, cols = a.size, a.shape[-1] if a.shape else 1
    b_div, b_mod = {"same": (1, n), "row": (1, cols), "col": (cols, n // cols), "scalar": (1, 1)}[pattern]
    out = DeviceArray.empty(a.shape)
    _elementwise_vec(
        f"ew_{op}", n, (out.ptr, a.ptr, b.ptr), out.ptr, a.ptr, b.ptr, n, b_div, b_mod, shapes=(a.shape, b.shape)
    )
    return out


def affine(x: DeviceArray, alpha: float, beta: float) -> DeviceArray:
    x = contiguous(x)
    out = DeviceArray.empty(x.shape)
    _elementwise_vec(
        "ew_affine", x.size, (out.ptr, x.ptr), out.ptr, x.ptr, float(alpha), float(beta), x.size, shapes=(x.shape,)
    )
    return out


def rdiv(x: DeviceArray, s: float) -> DeviceArray:
    x = contiguous(x)
    out = DeviceArray.empty(x.shape)
    _elementwise("ew_rdiv", x.size, out.ptr, x.ptr, float(s), x.size, shapes=(x.shape,))
    return out


def unary(op: str, x: DeviceArray) -> DeviceArray:
    x = contiguous(x)
    out = DeviceArray.empty(x.shape)
    _elementwise_vec(f"ew_{op}", x.size, (out.ptr, x.ptr), out.ptr, x.ptr, x.size, shapes=(x.shape,))
    return out


def _with_saved(name: str, grad: DeviceArray, saved: DeviceArray) -> DeviceArray:
    grad, saved = contiguous(grad), contiguous(saved)
    out = DeviceArray.empty(grad.shape)
    ptrs = (out.ptr, grad.ptr, saved.ptr)
    _elementwise_vec(name, grad.size, ptrs, out.ptr, grad.ptr, saved.ptr, grad.size, shapes=(grad.shape,))
    return out


def relu_backward(grad: DeviceArray, x: DeviceArray) -> DeviceArray:
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
        _elementwise("sum_axis", out.size, out.ptr, x.ptr, outer, red, inner, float(scale), shapes=(x.shape,))
        return out
    _per_row("sum_rows", rows, cols, out.ptr, x.ptr, rows, cols, float(scale), shapes=(x.shape,))
    return out


def softmax(x: DeviceArray) -> DeviceArray:
    x = contiguous(x)
    cols = x.shape[-1]
    rows = x.size // cols
    out = DeviceArray.empty(x.shape)
    if stages.vectorized_kernels():  # one read of the row: in registers, or online (max, sum)
        if cols <= 1024:
            launch(registry.get("softmax_rows_warp"), (-(-rows // 8), 1, 1), (256, 1, 1), out.ptr, x.ptr, rows, cols)
        elif cols <= BLOCK_ROW_COLUMNS:
            block = (block_row_threads(cols), 1, 1)
            launch(registry.get("softmax_rows_block"), (rows, 1, 1), block, out.ptr, x.ptr, rows, cols)
        else:
            launch(registry.get("softmax_rows_online"), (rows, 1, 1), (256, 1, 1), out.ptr, x.ptr, rows, cols)
        return out
    _per_row("softmax_rows", rows, cols, out.ptr, x.ptr, rows, cols, shapes=(x.shape,))
    return out


def softmax_xent(logits: DeviceArray, target: DeviceArray) -> tuple[DeviceArray, DeviceArray]:
    """Softmax probabilities and the mean cross-entropy over rows, from the logits."""
    logits, target = contiguous(logits), contiguous(target)
    rows, cols = logits.shape
    probs = DeviceArray.empty(logits.shape)
    if stages.fused_kernels() and cols <= 1024:  # probabilities and the mean loss in one launch
        loss = DeviceArray.empty(())
        threads = min(XENT_THREADS, 32 * rows)
        launch(
            registry.get("softmax_xent_fused"),
            (1, 1, 1),
            (threads, 1, 1),
            probs.ptr,
            loss.ptr,
            logits.ptr,
            target.ptr,
            rows,
            cols,
            1.0 / rows,
            shapes=(logits.shape, target.shape),
        )
        return probs, loss
    row_loss = DeviceArray.empty((rows,))
    args = (probs.ptr, row_loss.ptr, logits.ptr, target.ptr, rows, cols)
    _per_row("softmax_xent", rows, cols, *args, shapes=(logits.shape, target.shape))
    return probs, sum(row_loss, None, 1.0 / rows)


def xent_backward(probs: DeviceArray, target: DeviceArray, upstream: DeviceArray) -> DeviceArray:
    out = DeviceArray.empty(probs.shape)
    _elementwise(
        "xent_backward",
        probs.size,
        out.ptr,
        probs.ptr,
        target.ptr,
        upstream.ptr,
        probs.size,
        1.0 / probs.shape[0],
        shapes=(probs.shape,),
    )
    return out
