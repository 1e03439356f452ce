"""minitorch_cuda: a small PyTorch-like framework with a CPU and a PyCUDA backend.

import minitorch_cuda as mt
x = mt.randn((64, 784), device="cuda")
with mt.use_stage(0):      # the blog's naive backend
    ...
"""

from . import data, nn, optim, profiler
from .autograd import is_grad_enabled, no_grad
from .device import (
    CudaUnavailableError,
    Device,
    cuda_available,
    cuda_unavailable_reason,
    gpu_for_timing,
)
from .nn import cross_entropy_with_softmax
from .stages import DEFAULT_STAGE, MAX_STAGE, get_stage, set_stage, use_stage
from .tensor import (
    Tensor,
    from_numpy,
    full,
    manual_seed,
    ones,
    randn,
    tensor,
    zeros,
)


def override(name: str, source: str | None = None, *, entry: str | None = None, path=None):
    """Replace the CUDA kernel ``name`` with your own (see ``minitorch_cuda.cuda.registry``)."""
    from .cuda.registry import override as _override

    return _override(name, source, entry=entry, path=path)


def synchronize() -> None:
    """Wait for all queued GPU work (a no-op without CUDA work)."""
    from .device import _backends

    if "cuda" in _backends:
        _backends["cuda"].synchronize_device()


__all__ = [
    "DEFAULT_STAGE",
    "MAX_STAGE",
    "CudaUnavailableError",
    "Device",
    "Tensor",
    "cross_entropy_with_softmax",
    "cuda_available",
    "cuda_unavailable_reason",
    "data",
    "from_numpy",
    "full",
    "get_stage",
    "gpu_for_timing",
    "is_grad_enabled",
    "manual_seed",
    "nn",
    "no_grad",
    "ones",
    "optim",
    "override",
    "profiler",
    "randn",
    "set_stage",
    "synchronize",
    "tensor",
    "use_stage",
    "zeros",
]
