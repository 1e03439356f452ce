"""A CPU emulator of the CUDA device, for machines without a GPU (MINITORCH_CUDA_EMULATE=1).

``driver`` and ``compiler`` stand in for ``pycuda.driver`` and ``pycuda.compiler``
(the part of them the framework uses); kernels are the same ``.cu`` sources, built
by g++ against ``cuda_emu.h`` and run by ``runtime.cpp``: each GPU thread a fiber,
blocks spread over the cores, with the errors a GPU would report.
"""

from __future__ import annotations

import os

ENV = "MINITORCH_CUDA_EMULATE"


def selected() -> bool:
    """Whether this process runs CUDA on the emulator: ``MINITORCH_CUDA_EMULATE=1``, never by default."""
    return os.environ.get(ENV) == "1"
