"""The CUDA backend: the same op names as ``backend_cpu``, on ``DeviceArray``s.

Each op is a thin launcher: check the layout, allocate the output, pick the
kernel the current stage asks for, launch. The stage decides only *how* an op
runs, never *what* it computes.
"""

from __future__ import annotations

import math

import numpy as np

from .. import stages
from . import registry
from .array import ITEMSIZE, DeviceArray
from .autotune import fits, tuner
from .memory import DeviceBuffer
from .runtime import copy_dtod, copy_dtoh, copy_htod, launch, multiprocessors, synchronize, time_launch_ms
from .signature import MMA_TILE, MULTI_TENSOR_SLOTS, REGTILED_TILES, SPECS

BLOCK = 256  # threads per block for one-thread-per-element kernels


def _grid(n: int) -> tuple[int, int, int]:
    return ((n + BLOCK - 1) // BLOCK, 1, 1)


def _elementwise(name: str, n: int, *args, shapes=()) -> None:
    launch(registry.get(name), _grid(n), (BLOCK, 1, 1), *args, shapes=shapes)


def _elementwise_vec(name: str, n: int, pointers: tuple[int, ...], *args, shapes=()) -> None:
    """Stage 9 on: the 16-byte vectorized, grid-stride variant where every pointer is
    16-byte aligned (fresh buffers are; row slices of odd widths may not be)."""
    vec = f"{name}_vec4"
    if stages.vectorized_kernels() and vec in SPECS and all(p % 16 == 0 for p in pointers):
        blocks = max(1, min(-(-(n // 4) // BLOCK), 8 * multiprocessors()))
        launch(registry.get(vec), (blocks, 1, 1), (BLOCK, 1, 1), *args, shapes=shapes)
    else:
        _elementwise(name, n, *args, shapes=shapes)


def _reduce_block(length: int) -> int:
    """A power of two in 64..1024: block-reduction kernels need one."""
    return min(1024, max(64, 1 << (max(length, 1) - 1).bit_length()))


def _variant(base: str) -> str:
    return f"{base}_shuffle" if stages.warp_shuffle() else f"{base}_volatile"


# --- creation and transfer -------------------------------------------------------


def empty(shape: tuple[int, ...]) -> DeviceArray:
    return DeviceArray.empty(shape)


def full(shape: tuple[int, ...], value: float) -> DeviceArray:
    out = DeviceArray.empty(shape)
    fill_(out, value)
    return out


def from_numpy(array: np.ndarray) -> DeviceArray:
    # ascontiguousarray makes a 0-d array 1-d: keep the shape, e.g. () for a scalar tensor
    host = np.ascontiguousarray(array, dtype=np.float32).reshape(np.shape(array))
    out = DeviceArray.empty(host.shape)
    copy_htod(out.ptr, host)
    return out


def to_numpy(x: DeviceArray) -> np.ndarray:
    x = contiguous(x)
    host = np.empty(x.shape, dtype=np.float32)
    copy_dtoh(host, x.ptr)
    return host


def assign(dst: DeviceArray, src: np.ndarray) -> None:
    """Overwrite a contiguous array with host data of the same shape."""
    if not dst.is_contiguous():
        raise ValueError(f"assign needs a contiguous tensor; this view has strides {dst.strides}")
    copy_htod(dst.ptr, np.ascontiguousarray(src, dtype=np.float32))


def item(x: DeviceArray, flat_index: int) -> float:
    """One element read back to the host (a blocking 4-byte copy)."""
    coords = np.unravel_index(flat_index, x.shape) if x.shape else ()
    element = x.offset + int(np.dot(coords, x.strides)) if x.shape else x.offset
    host = np.empty(1, dtype=np.float32)
    copy_dtoh(host, x.buffer.ptr + ITEMSIZE * element)
    return float(host[0])


def randn(shape: tuple[int, ...], std: float, seed: int) -> DeviceArray:
    if not stages.device_init():
        # Stages 0-3: the host draws and copies, exactly as the CPU backend draws.
        return from_numpy(np.random.default_rng(seed).standard_normal(shape) * std)
    out = DeviceArray.empty(shape)
    _elementwise("init_normal", out.size, out.ptr, out.size, float(std), seed & 0xFFFFFFFF, shapes=(shape,))
    return out


def fill_(x: DeviceArray, value: float) -> None:
    if not x.is_contiguous():
        raise ValueError("fill_ needs a contiguous tensor")
    _elementwise_vec("ew_fill", x.size, (x.ptr,), x.ptr, float(value), x.size, shapes=(x.shape,))


# --- layout ------------------------------------------------------------------------


def contiguous(x: DeviceArray) -> DeviceArray:
    if x.is_contiguous():
        return x
    if x.ndim > 4:
        raise ValueError(f"cannot copy a non-contiguous view with {x.ndim} > 4 dimensions on CUDA")
    shape = (1,) * (4 - x.ndim) + x.shape
    strides = (0,) * (4 - x.ndim) + x.strides
    out = DeviceArray.empty(x.shape)
    _elementwise("strided_copy", out.size, out.ptr, x.ptr, out.size, *shape[1:], *strides, shapes=(x.shape,))
    return out


def copy(x: DeviceArray) -> DeviceArray:
    if not x.is_contiguous():
        return contiguous(x)
    out = DeviceArray.empty(x.shape)
    copy_dtod(out.ptr, x.ptr, ITEMSIZE * x.size)
    return out


def shares_memory(a: DeviceArray, b: DeviceArray) -> bool:
    return a.buffer is b.buffer


def reshape(x: DeviceArray, shape: tuple[int, ...]) -> DeviceArray:
    x = contiguous(x)
    return DeviceArray(x.buffer, shape, None, x.offset)


def transpose(x: DeviceArray) -> DeviceArray:
    shape, strides = list(x.shape), list(x.strides)
    shape[-1], shape[-2] = shape[-2], shape[-1]
    strides[-1], strides[-2] = strides[-2], strides[-1]
    return x.view(tuple(shape), tuple(strides))


def broadcast_to(x: DeviceArray, shape: tuple[int, ...]) -> DeviceArray:
    """A contiguous copy of ``x`` repeated along its size-1 (or missing) leading axes."""
    padded_shape = (1,) * (len(shape) - x.ndim) + x.shape
    padded_strides = (0,) * (len(shape) - x.ndim) + x.strides
    strides = tuple(0 if d == 1 and t != 1 else s for d, s, t in zip(padded_shape, padded_strides, shape))
    return contiguous(x.view(tuple(shape), strides))


def slice_rows(x: DeviceArray, start: int, stop: int) -> DeviceArray:
    return x.view((stop - start,) + x.shape[1:], x.strides, x.offset + start * x.strides[0])


def take_rows(x: DeviceArray, indices: np.ndarray) -> DeviceArray:
    """Rows ``x[indices]``: one gather launch (stage 2 on) or one blocking copy per row."""
    x = contiguous(x)
    rows = len(indices)
    row_len = x.size // x.shape[0]
    out = DeviceArray.empty((rows,) + x.shape[1:])
    if not stages.gather_kernel():
        row_bytes = ITEMSIZE * row_len
        for r, index in enumerate(indices.tolist()):
            copy_dtod(out.ptr + r * row_bytes, x.ptr + index * row_bytes, row_bytes)
            synchronize("a row copy")  # cudaMemcpy semantics: the host waits for each row
        return out
    d_idx = _upload_indices(indices)
    _elementwise("gather_rows", out.size, out.ptr, x.ptr, d_idx.ptr, rows, row_len, shapes=(x.shape, (rows,)))
    return out


def scatter_add_rows(grad: DeviceArray, indices: np.ndarray, n_rows: int) -> DeviceArray:
    """The backward of ``take_rows``: zeros with ``grad``'s rows added at ``indices``."""
    grad = contiguous(grad)
    row_len = grad.size // grad.shape[0]
    out = full((n_rows,) + grad.shape[1:], 0.0)
    d_idx = _upload_indices(indices)
    _elementwise(
        "scatter_add_rows",
        grad.size,
        out.ptr,
        grad.ptr,
        d_idx.ptr,
        len(indices),
        row_len,
        shapes=(grad.shape, (n_rows,)),
    )
    return out


def _upload_indices(indices: np.ndarray) -> DeviceBuffer:
    host = np.ascontiguousarray(indices, dtype=np.int32)
    buffer = DeviceBuffer(host.nbytes)
    copy_htod(buffer.ptr, host)
    return buffer


# --- elementwise -------------------------------------------------------------------


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


# --- reductions and softmax --------------------------------------------------------


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
    launch(
        registry.get(_variant("sum_rows")),
        (rows, 1, 1),
        (_reduce_block(cols), 1, 1),
        out.ptr,
        x.ptr,
        rows,
        cols,
        float(scale),
        shapes=(x.shape,),
    )
    return out


def softmax(x: DeviceArray) -> DeviceArray:
    x = contiguous(x)
    cols = x.shape[-1]
    rows = x.size // cols
    out = DeviceArray.empty(x.shape)
    if stages.vectorized_kernels():  # one read of the row: in registers, or online (max, sum)
        if cols <= 1024:
            launch(registry.get("softmax_rows_warp"), (-(-rows // 8), 1, 1), (256, 1, 1), out.ptr, x.ptr, rows, cols)
        else:
            launch(registry.get("softmax_rows_online"), (rows, 1, 1), (256, 1, 1), out.ptr, x.ptr, rows, cols)
        return out
    launch(
        registry.get(_variant("softmax_rows")),
        (rows, 1, 1),
        (_reduce_block(cols), 1, 1),
        out.ptr,
        x.ptr,
        rows,
        cols,
        shapes=(x.shape,),
    )
    return out


def softmax_xent(logits: DeviceArray, target: DeviceArray) -> tuple[DeviceArray, DeviceArray]:
    """Softmax probabilities and the mean cross-entropy over rows, from the logits."""
    logits, target = contiguous(logits), contiguous(target)
    rows, cols = logits.shape
    probs = DeviceArray.empty(logits.shape)
    if stages.fused_kernels() and cols <= 1024:  # probabilities and the mean loss in one launch
        loss = DeviceArray.empty(())
        threads = min(1024, 32 * rows)
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
    launch(
        registry.get(_variant("softmax_xent")),
        (rows, 1, 1),
        (_reduce_block(cols), 1, 1),
        probs.ptr,
        row_loss.ptr,
        logits.ptr,
        target.ptr,
        rows,
        cols,
        shapes=(logits.shape, target.shape),
    )
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


# --- matmul ------------------------------------------------------------------------


def _operand(x: DeviceArray, flag: bool) -> tuple[DeviceArray, bool]:
    """Contiguous storage for a matmul operand and whether to read it transposed."""
    if x.is_contiguous():
        return x, flag
    flipped = transpose(x)
    if flipped.is_contiguous():  # a transposed view: read the storage with the flag flipped
        return flipped, not flag
    return contiguous(x), flag


def matmul(a: DeviceArray, b: DeviceArray, ta: bool = False, tb: bool = False) -> DeviceArray:
    """``op(a) @ op(b)`` over the last two axes; leading axes are a batch (or broadcast)."""
    a, ta = _operand(a, ta)
    b, tb = _operand(b, tb)
    if not stages.fused_transpose():  # stages 0-2 materialize every transposed operand
        if ta:
            a, ta = contiguous(transpose(a)), False
        if tb:
            b, tb = contiguous(transpose(b)), False
    M, K = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
    N = b.shape[-2] if tb else b.shape[-1]
    batch_shape = a.shape[:-2] if a.ndim > b.ndim else b.shape[:-2]
    batch = math.prod(batch_shape)
    stride_a = M * K if a.ndim > 2 else 0
    stride_b = K * N if b.ndim > 2 else 0
    out = DeviceArray.empty(batch_shape + (M, N))
    shapes = (a.shape, b.shape, (ta, tb))
    if stages.regtiled_matmul():
        _matmul_beyond(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch, shapes)
        return out
    if stages.tiled_matmul() or stages.batched_matmul():
        tile = 32 if stages.tiled_matmul() else 16
        name = "matmul_tiled" if stages.tiled_matmul() else "matmul_batched"
        grid = ((N + tile - 1) // tile, (M + tile - 1) // tile, batch)
        launch(
            registry.get(name),
            grid,
            (tile, tile, 1),
            out.ptr,
            a.ptr,
            b.ptr,
            M,
            N,
            K,
            int(ta),
            int(tb),
            stride_a,
            stride_b,
            shapes=shapes,
        )
        return out
    grid = ((N + 15) // 16, (M + 15) // 16, 1)
    for z in range(batch):  # stages 0-4: one launch per 2-D matrix of the batch
        pa, pb, pc = a.ptr + ITEMSIZE * z * stride_a, b.ptr + ITEMSIZE * z * stride_b, out.ptr + ITEMSIZE * z * M * N
        if stages.fused_transpose():
            launch(
                registry.get("matmul_transposed"),
                grid,
                (16, 16, 1),
                pc,
                pa,
                pb,
                M,
                N,
                K,
                int(ta),
                int(tb),
                shapes=shapes,
            )
        else:
            launch(registry.get("matmul_naive"), grid, (16, 16, 1), pc, pa, pb, M, N, K, shapes=shapes)
    return out


def _matmul_beyond(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch, shapes, bias=None, relu=False) -> None:
    """Stages 9-12: the tensor-core kernel (12) or the autotuned register-tiled variant;
    with ``bias`` the fused bias (+ ReLU) epilogue of stage 10."""
    flags = (M, N, K, int(ta), int(tb), stride_a, stride_b)
    if stages.tensor_cores() and bias is None:
        bm, bn, threads = MMA_TILE
        grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, batch)
        launch(registry.get("matmul_tf32"), grid, (threads, 1, 1), out.ptr, a.ptr, b.ptr, *flags, shapes=shapes)
        return
    tile = _regtiled_tile(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch)
    bm, bn, _, threads = REGTILED_TILES[tile]
    grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, batch)
    if bias is None:
        args = (out.ptr, a.ptr, b.ptr, *flags)
        launch(registry.get(f"matmul_regtiled_{tile}"), grid, (threads, 1, 1), *args, shapes=shapes)
    else:
        args = (out.ptr, a.ptr, b.ptr, bias.ptr, *flags, int(relu))
        launch(registry.get(f"matmul_bias_act_{tile}"), grid, (threads, 1, 1), *args, shapes=shapes)


def _regtiled_tile(out, a, b, M, N, K, ta, tb, stride_a, stride_b, batch) -> str:
    """The register-tiled variant for this problem: timed on first use (autotune.tuner)."""
    key = (M, N, K, int(ta), int(tb), batch, a.ptr % 16 == 0, b.ptr % 16 == 0)
    tiles = [t for t, (bm, bn, _, _) in REGTILED_TILES.items() if fits(bm, bn, M, N)]
    args = (out.ptr, a.ptr, b.ptr, M, N, K, int(ta), int(tb), stride_a, stride_b)

    def time_ms(tile: str) -> float:
        bm, bn, _, threads = REGTILED_TILES[tile]
        grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, batch)
        return time_launch_ms(registry.get(f"matmul_regtiled_{tile}"), grid, (threads, 1, 1), *args)

    return tuner.pick("matmul_regtiled", key, tiles, time_ms)


def linear(x: DeviceArray, w: DeviceArray, bias: DeviceArray | None, relu: bool) -> DeviceArray:
    """``act(x @ w + bias)`` for a 2-D ``x`` in one launch (stage 10's fused epilogue)."""
    x, tx = _operand(x, False)
    w, tw = _operand(w, False)
    M, K = (x.shape[-1], x.shape[-2]) if tx else x.shape
    N = w.shape[-2] if tw else w.shape[-1]
    out = DeviceArray.empty((M, N))
    bias = contiguous(bias) if bias is not None else _NO_BIAS
    _matmul_beyond(out, x, w, M, N, K, tx, tw, 0, 0, 1, (x.shape, w.shape, (tx, tw)), bias=bias, relu=relu)
    return out


class _NullPointer:
    ptr = 0  # the kernel skips the bias add for a null pointer


_NO_BIAS = _NullPointer()


def fusion_enabled() -> bool:
    """Whether ``nn`` should build its layers from the fused ops (stage 10 on)."""
    return stages.fused_kernels()


def graphs_enabled() -> bool:
    """Whether a training step should go through a CUDA graph now (stage 11 on)."""
    if not stages.cuda_graphs():
        return False
    from . import graphs

    return graphs.usable_now()


def graphed_step(body):
    from . import graphs

    return graphs.GraphedStep(body)


# --- optimizer -------------------------------------------------------------------


def clip_gradients(grads: list[DeviceArray], max_norm: float) -> None:
    """Scale all gradients in place so that their global L2 norm is at most ``max_norm``."""
    if not stages.device_clipping():
        _clip_on_host(grads, max_norm)
        return
    if stages.fused_kernels():  # two launches for all gradients together
        partials, n_partials = _multi_sumsq(grads)
        for group in _groups(grads):
            launch(
                registry.get("multi_clip_scale"),
                (_multi_chunks(grads), len(group), 1),
                (BLOCK, 1, 1),
                partials.ptr,
                n_partials,
                float(max_norm),
                *_slot_ptrs(group),
                *_slot_sizes(group),
            )
        return
    partials = DeviceArray.empty((len(grads),))
    sumsq = registry.get(_variant("sumsq"))
    for i, g in enumerate(grads):
        launch(sumsq, (1, 1, 1), (1024, 1, 1), partials.ptr + ITEMSIZE * i, g.ptr, g.size, shapes=(g.shape,))
    for g in grads:
        _elementwise("clip_scale", g.size, g.ptr, partials.ptr, len(grads), float(max_norm), g.size, shapes=(g.shape,))


def _clip_on_host(grads: list[DeviceArray], max_norm: float) -> None:
    """Stage 0, as the blog's first version did it: every gradient crosses the bus
    twice and the host touches each element in a Python loop."""
    host = [to_numpy(g) for g in grads]
    total = 0.0
    for h in host:
        for value in h.ravel().tolist():
            total += value * value
    norm = math.sqrt(total)
    if norm <= max_norm:
        return
    factor = max_norm / (norm + 1e-6)
    for g, h in zip(grads, host):
        scaled = np.array([value * factor for value in h.ravel().tolist()], dtype=np.float32)
        assign(g, scaled.reshape(h.shape))


def rmsprop_step(p: DeviceArray, g: DeviceArray, v: DeviceArray, lr: float, decay: float, eps: float) -> None:
    _elementwise(
        "rmsprop_step", p.size, p.ptr, g.ptr, v.ptr, float(lr), float(decay), float(eps), p.size, shapes=(p.shape,)
    )


def rmsprop_multi(
    params: list[DeviceArray],
    grads: list[DeviceArray],
    states: list[DeviceArray],
    lr: float,
    decay: float,
    eps: float,
    max_norm: float | None = None,
) -> None:
    """Clip all gradients to a global norm (if ``max_norm``) and take an RmsProp step for
    every parameter: two launches (one without clipping) for up to 8 tensors."""
    if max_norm is not None:
        partials, n_partials = _multi_sumsq(grads)
    else:
        partials, n_partials = _NO_BIAS, 0
    chunks = _multi_chunks(grads)
    for start in range(0, len(params), MULTI_TENSOR_SLOTS):
        end = start + MULTI_TENSOR_SLOTS
        launch(
            registry.get("multi_clip_rmsprop"),
            (chunks, len(params[start:end]), 1),
            (BLOCK, 1, 1),
            partials.ptr,
            n_partials,
            float(max_norm or 0.0),
            float(lr),
            float(decay),
            float(eps),
            *_slot_ptrs(params[start:end]),
            *_slot_ptrs(grads[start:end]),
            *_slot_ptrs(states[start:end]),
            *_slot_sizes(params[start:end]),
        )


def _groups(arrays: list) -> list[list]:
    return [arrays[i : i + MULTI_TENSOR_SLOTS] for i in range(0, len(arrays), MULTI_TENSOR_SLOTS)]


def _multi_chunks(arrays: list[DeviceArray]) -> int:
    """Blocks per tensor: enough for the largest at 4 elements a thread, at most 128."""
    return max(1, min(128, -(-max(x.size for x in arrays) // (4 * BLOCK))))


def _slot_ptrs(arrays: list[DeviceArray]) -> list[int]:
    for x in arrays:
        if not x.is_contiguous():
            raise ValueError("multi-tensor kernels need contiguous tensors")
    return [x.ptr for x in arrays] + [0] * (MULTI_TENSOR_SLOTS - len(arrays))


def _slot_sizes(arrays: list[DeviceArray]) -> list[int]:
    return [x.size for x in arrays] + [0] * (MULTI_TENSOR_SLOTS - len(arrays))


def _multi_sumsq(grads: list[DeviceArray]) -> tuple[DeviceArray, int]:
    """Partial sums of squares of all gradients: one launch per 8 tensors."""
    chunks = _multi_chunks(grads)
    partials = DeviceArray.empty((chunks * len(grads),))
    for g, group in enumerate(_groups(grads)):
        launch(
            registry.get("multi_sumsq"),
            (chunks, len(group), 1),
            (BLOCK, 1, 1),
            partials.ptr + ITEMSIZE * g * MULTI_TENSOR_SLOTS * chunks,
            *_slot_ptrs(group),
            *_slot_sizes(group),
        )
    return partials, chunks * len(grads)


def sgd_step(p: DeviceArray, g: DeviceArray, lr: float) -> None:
    _elementwise("sgd_step", p.size, p.ptr, g.ptr, float(lr), p.size, shapes=(p.shape,))


def synchronize_device() -> None:
    synchronize("an explicit synchronize()")
