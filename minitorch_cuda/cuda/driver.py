"""Which driver the CUDA backend talks to: PyCUDA, or the CPU emulator; and the driver API
that PyCUDA lacks (graphs, tensor maps, launches of structures by value), through NVIDIA's
cuda-bindings.

The emulator is chosen explicitly, never as a fallback: ``MINITORCH_CUDA_EMULATE=1``.
It implements the part of ``pycuda.driver`` and ``pycuda.compiler`` that the
framework uses (see ``minitorch_cuda/emulator``), and its device calls itself
"emulated on the CPU" wherever the device is reported.
"""

from __future__ import annotations

import functools

from ..emulator import selected

EMULATED = selected()

if EMULATED:
    from ..emulator import driver as drv
    from ..emulator.compiler import SourceModule
else:
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule

__all__ = ["EMULATED", "KernelError", "SourceModule", "attach", "bindings", "check", "drv"]


class KernelError(RuntimeError):
    """A CUDA kernel failed to launch or to run."""


def attach() -> None:
    """Use the device's primary context (shared with CuPy and PyTorch); the emulator has none."""
    if not EMULATED:
        import pycuda.autoprimaryctx  # noqa: F401


@functools.cache  # every launch of a kernel taking a structure asks for it
def bindings():
    """``cuda.bindings.driver`` (on the CPU emulator, its stand-in), imported on first use."""
    if EMULATED:
        from ..emulator import graphs

        return graphs
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:
        raise ImportError(
            "stage 11 captures the training step in a CUDA graph through NVIDIA's cuda-bindings, "
            "which is not installed: pip install 'minitorch-cuda[cuda]' (or pip install cuda-bindings)"
        ) from exc
    return cu


def check(result, what: str):
    """cuda-bindings returns (CUresult, *values): raise KernelError on an error, else the values."""
    cu = bindings()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise KernelError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return values[0] if len(values) == 1 else values
