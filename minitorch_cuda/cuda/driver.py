"""Which driver the CUDA backend talks to: PyCUDA, or the CPU emulator.

The emulator is chosen explicitly, never as a fallback: ``MINITORCH_CUDA_EMULATE=1``.
It implements the part of ``pycuda.driver`` and ``pycuda.compiler`` that the
framework uses (see ``minitorch_cuda/emulator``), and its device calls itself
"emulated on the CPU" wherever the device is reported.
"""

from __future__ import annotations

from ..emulator import selected

EMULATED = selected()

if EMULATED:
    from ..emulator import driver as drv
    from ..emulator.compiler import SourceModule
else:
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule

__all__ = ["EMULATED", "SourceModule", "attach", "drv"]


def attach() -> None:
    """Use the device's primary context (shared with CuPy and PyTorch); the emulator has none."""
    if not EMULATED:
        import pycuda.autoprimaryctx  # noqa: F401
