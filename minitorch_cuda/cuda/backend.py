"""The CUDA backend: the same op names as ``backend_cpu``, on ``DeviceArray``s.

This module is the op namespace ``Tensor`` calls into; the ops live by concept
in ``ops_tensor`` (creation, transfer, layout, gathers), ``ops_math``
(elementwise, reductions, softmax, cross-entropy), ``ops_matmul`` and
``ops_optim``. Each op is a thin launcher: check the layout, allocate the
output, pick the kernel the current stage asks for, launch. The stage decides
only *how* an op runs, never *what* it computes.
"""

from __future__ import annotations

from .. import stages
from . import graphs
from .ops_math import (  # noqa: F401
    affine,
    backward_seed,
    binary,
    rdiv,
    relu_backward,
    sigmoid_backward,
    softmax,
    softmax_xent,
    sum,
    unary,
    xent_backward,
)
from .ops_matmul import linear, linear_backward, matmul  # noqa: F401
from .ops_optim import clip_gradients, rmsprop_multi, rmsprop_step, sgd_step  # noqa: F401
from .ops_tensor import (  # noqa: F401
    assign,
    broadcast_to,
    contiguous,
    copy,
    empty,
    fill_,
    from_numpy,
    full,
    item,
    randn,
    reshape,
    scatter_add_rows,
    shares_memory,
    slice_rows,
    take_rows,
    to_numpy,
    transpose,
)
from .runtime import synchronize as _synchronize


def fusion_enabled() -> bool:
    """Whether ``nn`` should build its layers from the fused ops (stage 10 on)."""
    return stages.fused_kernels()


def lean_backward_enabled() -> bool:
    """Whether ``FusedLinear`` should take its gradients from ``linear_backward`` (the lean
    step, stage 11 on; stage 12 runs its products on tensor cores where faster)."""
    return stages.lean_step()


def graphs_enabled() -> bool:
    """Whether a training step should go through a CUDA graph now (stage 11 on)."""
    return stages.cuda_graphs() and graphs.usable_now()


def persistent_step_enabled() -> bool:
    """Whether a trainer should run its whole step as one kernel (stage 13: persistent_model
    builds it for a model that fits)."""
    return stages.persistent_step()


def graphed_step(body):
    """``body(x, y) -> loss`` over device arrays, captured and replayed per batch shape; with the
    lean step, the graph fetches each batch itself (graphs.FetchingGraphedStep)."""
    step = graphs.FetchingGraphedStep if stages.lean_step() else graphs.GraphedStep
    return step(body, graphs.CudaGraphDevice())


def synchronize_device() -> None:
    _synchronize("an explicit synchronize()")
