"""CUDA matmul per stage: the blog's ladder (naive, flags, batched, tiled), then register tiles,
the fused bias epilogue, the lean step's split-K forward and fused backward, and tensor cores.
Each stage picks a family; the tuner (matmul_choice) picks its variant for the shape, and the
family's launcher (matmul_launchers) launches it: this module only decides which family. A
product's route (family, variant, launch) is decided on the first product of its shape at a
stage and kept (``route``): every later one costs the host an allocation and a launch."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from .. import stages
from . import launchers, matmul_launchers
from . import matmul_choice as choice
from .array import DeviceArray
from .autotune import tuner
from .launch_core import Gemm
from .ops_math import relu_backward
from .ops_tensor import contiguous, full, transpose
from .probe import wgmma_fits
from .runtime import arch


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
        a, ta = (contiguous(transpose(a)), False) if ta else (a, ta)
        b, tb = (contiguous(transpose(b)), False) if tb else (b, tb)
    found = route(a, b, ta, tb)
    out = DeviceArray.empty(found.out_shape)
    found.queue(out, a, b)
    return out


Queue = Callable[[DeviceArray, DeviceArray, DeviceArray], object]  # (c, a, b): the product's launches


@dataclasses.dataclass(frozen=True)
class Route:
    """What a product of one shape runs: its output's shape, and ``queue(c, a, b)``, which queues
    its launches (a prepared Launch, or the family's launcher at the variant chosen)."""

    gemm: Gemm
    out_shape: tuple[int, ...]
    queue: Queue


_routes: dict[tuple, Route] = {}


def route(a: DeviceArray, b: DeviceArray, ta: bool, tb: bool) -> Route:
    """The route of ``op(a) @ op(b)`` (contiguous operands), chosen on the first product with its
    key and kept: the stage setting, the shapes, the flags and whether each operand starts a
    16-byte vector (the launchers' and the tuner's conditions), and the tuner's generation (a
    ``tuner.clear()`` chooses again). Kernels are looked up by name at every launch, so that an
    override still counts."""
    key = (stages.setting(), tuner.generation, a.shape, b.shape, ta, tb, a.ptr % 16 == 0, b.ptr % 16 == 0)
    found = _routes.get(key)
    if found is None:
        g = Gemm.of(a, b, ta, tb)
        shape = (a.shape[:-2] if a.ndim > b.ndim else b.shape[:-2]) + (g.M, g.N)
        found = _routes[key] = Route(g, shape, choose(DeviceArray.empty(shape), a, b, g))
    return found


def choose(out: DeviceArray, a: DeviceArray, b: DeviceArray, g: Gemm) -> Queue:
    """The stage's family for this problem, at the variant the tuner keeps for it (timed on
    ``out``, ``a`` and ``b`` where the tuner has not seen the problem)."""
    if stages.tensor_cores():  # stage 12
        return tensor_core_matmul(out, a, b, g)
    if stages.regtiled_matmul():  # stage 9: register tiles, fed by cp.async where faster, autotuned
        variant = choice.sgemm_variant(out, a, b, g)
        prepared = matmul_launchers.sgemm_launch(a, b, g, variant)
        return prepared.queue if prepared else functools.partial(matmul_launchers.matmul_sgemm, g=g, variant=variant)
    if stages.tiled_matmul():  # Opt. 6: shared-memory tiles
        return functools.partial(matmul_launchers.matmul_tiled, g=g)
    if stages.batched_matmul():  # Opt. 5: the batch in one launch
        return functools.partial(matmul_launchers.matmul_batched, g=g)
    if stages.fused_transpose():  # Opt. 3: transposes read through flags
        return functools.partial(matmul_launchers.matmul_transposed, g=g)
    return functools.partial(matmul_launchers.matmul_naive, g=g)  # stages 0-2: a naive launch per matrix


# From 1024^3 up the TMA-fed wgmma kernel is 0.85-1.01x cuBLAS's TF32 on the H200, against
# 0.60-0.70x for wgmma.cu (book/results/tf32_wgmma.json). From WGMMA_TIMED_PRODUCT up to there
# (1000^3 is just below) it is timed against mma.sync (matmul_choice.tf32_variant): few tiles of
# either leave SMs idle, and which loses less was not measured.
WGMMA_MIN_PRODUCT = 1024**3
WGMMA_TIMED_PRODUCT = 256**3


def tensor_core_matmul(out: DeviceArray, a: DeviceArray, b: DeviceArray, g: Gemm) -> Queue:
    """Stage 12's TF32 route: warpgroup MMA fed by TMA for large products on Hopper; below them
    mma.sync fed by cp.async, timed against WMMA where cp.async copies a float at a time and
    against wgmma on Hopper from WGMMA_TIMED_PRODUCT up (matmul_choice.tf32_variant). A GPU
    without TF32 tensor cores (a T4) is refused here, with what to do, before anything compiles."""
    matmul_launchers.require_tensor_cores("stage 12 (TF32 tensor-core matmul)")
    product = g.batch * g.M * g.N * g.K
    wgmma = product >= WGMMA_TIMED_PRODUCT and wgmma_fits(g.K, arch())
    if wgmma and product >= WGMMA_MIN_PRODUCT:
        kernel = choice.WGMMA_TMA
    else:
        kernel = choice.tf32_variant(out, a, b, g, wgmma=wgmma)
    if kernel == choice.WGMMA_TMA:
        return matmul_launchers.wgmma_tma_launch(a, b, g, **choice.wgmma_tma_variant(out, a, b, g)).queue
    if kernel == choice.MMA_SYNC:
        return matmul_launchers.tf32_async_launch(g).queue
    return matmul_launchers.tf32_launch(g).queue


def linear(x: DeviceArray, w: DeviceArray, bias: DeviceArray | None, relu: bool) -> DeviceArray:
    """``act(x @ w + bias)`` for a 2-D ``x`` in one launch (stage 10's fused epilogue; from the
    lean step on, split over K where the output has too few tiles to fill the GPU; at stage 12,
    on tensor cores with the epilogue after where that is faster)."""
    x, tx = _operand(x, False)
    w, tw = _operand(w, False)
    g = Gemm.of(x, w, tx, tw)
    out = DeviceArray.empty((g.M, g.N))
    bias = contiguous(bias) if bias is not None else None
    if not stages.lean_step():
        matmul_launchers.matmul_bias_act(out, x, w, bias, g, relu, tile=choice.regtiled_tile(out, x, w, g))
        return out
    counters = _splitk_counters()
    variant = choice.linear_variant(out, x, w, bias, counters, g, relu)
    fused = functools.partial(matmul_launchers.matmul_linear, out, x, w, bias, counters, g, relu, variant=variant)

    def tensor_cores() -> None:
        route(x, w, tx, tw).queue(out, x, w)
        if bias is not None:
            launchers.elementwise("ew_add_relu" if relu else "ew_add", out.size, out, out, bias, out.size, 1, g.N)
        elif relu:
            launchers.elementwise("ew_relu", out.size, out, out, out.size)

    (tensor_cores if choice.lean_tensor_cores_faster("linear", x, w, g, fused, tensor_cores) else fused)()
    return out


_counters: list[DeviceArray] = []


def _splitk_counters() -> DeviceArray:
    """The split-K reductions' tile counters: zeroed once (zero bits), left zeroed by every
    launch, so one buffer serves every launch and graph replay of the process."""
    if not _counters:
        _counters.append(full((matmul_launchers.SPLITK_COUNTERS,), 0.0))
    return _counters[0]


def linear_backward(
    g: DeviceArray, x: DeviceArray, w: DeviceArray, relu_out: DeviceArray | None, has_bias: bool,
    input_grad: bool, input_relu: bool,
) -> tuple[DeviceArray | None, DeviceArray, DeviceArray | None]:  # fmt: skip
    """The lean step's gradients of ``y = act(x @ w + b)`` (FusedLinear): (dx, dw, db) in two
    launches where stage 10 has four (ReLU's backward, two products, the bias sum): dw with db
    beside it, and dx (None where not ``input_grad``: no launch) with x's ReLU mask in the
    epilogue where ``input_relu`` (x a ReLU output, whose own backward would mask it: masking
    twice is exact, and the mark on dx makes the second a no-op). ``relu_out``: y where act is
    ReLU; its mask was applied by the consumer's product where that was marked."""
    gz = contiguous(relu_backward(g, relu_out) if relu_out is not None else g)
    if x.ndim != 2:
        raise ValueError(f"linear_backward takes a 2-D input, not one of shape {x.shape}")
    gx = _masked_product(gz, w, x if input_relu else None) if input_grad else None
    a, ta = _operand(x, True)
    gw = DeviceArray.empty(w.shape)
    gb = DeviceArray.empty((w.shape[1],)) if has_bias else None
    problem = Gemm.of(a, gz, ta, False)
    tile = choice.regtiled_tile(gw, a, gz, problem)
    fused = functools.partial(matmul_launchers.matmul_grad, gw, a, gz, problem, colsum=gb, tile=tile)

    def tensor_cores() -> None:
        route(a, gz, ta, False).queue(gw, a, gz)
        if gb is not None:  # the column sums of gz (rows summed per column)
            launchers.elementwise("sum_axis", gb.size, gb, gz, 1, gz.shape[0], gz.shape[1], 1.0)

    (tensor_cores if choice.lean_tensor_cores_faster("weight grad", a, gz, problem, fused, tensor_cores) else fused)()
    return gx, gw, gb


def _masked_product(gz: DeviceArray, w: DeviceArray, mask: DeviceArray | None) -> DeviceArray:
    """gz @ w^T, times (mask > 0) where ``mask`` is given (then marked as masked by it)."""
    b, tb = _operand(w, True)
    g = Gemm.of(gz, b, False, tb)
    out = DeviceArray.empty((g.M, g.N))
    mask = contiguous(mask) if mask is not None else None
    fused = functools.partial(matmul_launchers.matmul_grad, out, gz, b, g, mask=mask,
                              tile=choice.regtiled_tile(out, gz, b, g))  # fmt: skip

    def tensor_cores() -> None:
        route(gz, b, False, tb).queue(out, gz, b)
        if mask is not None:
            launchers.elementwise("ew_relu_backward", out.size, out, out, mask, out.size)

    (tensor_cores if choice.lean_tensor_cores_faster("input grad", gz, b, g, fused, tensor_cores) else fused)()
    out.masked_by = mask
    return out
