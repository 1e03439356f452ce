"""Whether CUDA can be used here, decided once per process, and what a GPU of an architecture can run.

PyCUDA is an optional dependency: importing the package never touches the GPU. The first CUDA
request imports PyCUDA (or the CPU emulator), attaches to the device's primary context (shared
with CuPy and PyTorch) and caches the outcome, so that a machine without CUDA answers every later
request with the same clear error. The capability tests are pure: they take the architecture
(``runtime.arch()``) and say whether a kernel family can run on it.
"""

from __future__ import annotations

import functools
import re

from ..emulator import selected


class CudaUnavailableError(RuntimeError):
    """Raised when a CUDA device is asked for where none can be used."""


@functools.cache
def _probe() -> str | None:
    """Try to start CUDA once; return None on success or the reason it failed."""
    try:
        from .driver import drv
    except ImportError as exc:
        return (
            f"PyCUDA is not installed ({exc}); install the 'cuda' extra "
            "(in the checkout: pip install -e '.[cuda]'; elsewhere: pip install 'minitorch-cuda[cuda]')"
        )
    except Exception as exc:  # a broken driver library raises OSError and friends
        return f"PyCUDA could not load the CUDA driver: {exc}"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "the CUDA driver reports no GPU on this machine"
        from .driver import attach

        attach()  # shares the primary context
    except Exception as exc:
        return f"CUDA could not start: {exc}"
    return None


def cuda_available() -> bool:
    """True when PyCUDA imports and a GPU is present (probed once per process)."""
    return _probe() is None


def gpu_for_timing() -> bool:
    """True where CUDA runs on an actual GPU: not on the CPU emulator, where kernels are
    checked but timings would be the CPU's (the chapters' `gpu` cells measure only here)."""
    return cuda_available() and not selected()


def cuda_unavailable_reason() -> str:
    """Why CUDA cannot be used here, or an empty string when it can."""
    return _probe() or ""


def require_cuda() -> None:
    reason = _probe()
    if reason is not None:
        raise CudaUnavailableError(f"CUDA was requested but cannot be used: {reason}")


# --- what a GPU of this architecture runs -------------------------------------------------


def clusters_fit(arch: str) -> bool:
    """Whether a GPU of this ``sm_XY`` runs thread block clusters (compute capability 9.0 on)."""
    return int(arch.removeprefix("sm_")) >= 90


def tensor_cores_fit(arch: str) -> bool:
    """Whether a GPU of this architecture (``sm_75``, ``sm_90a``) has TF32 and BF16 tensor
    cores: compute capability 8.0 (Ampere) or newer. A T4 (sm_75) has FP16 ones only."""
    return int(re.sub(r"\D", "", arch)) >= 80


def wgmma_fits(K: int, arch: str) -> bool:
    """Whether matmul_tf32_wgmma can run: a Hopper GPU, and K in whole 16-byte quads."""
    return K % 4 == 0 and arch == "sm_90"
