"""Devices, the op namespace (backend) of each, and the one place that decides
whether CUDA can be used.

PyCUDA is an optional dependency: importing this package never touches the
GPU. The first CUDA request imports PyCUDA, attaches to the device's primary
context (shared with CuPy and PyTorch) and caches the outcome, so that a
machine without CUDA answers every later request with the same clear error.
"""

from __future__ import annotations

import functools


class CudaUnavailableError(RuntimeError):
    """Raised when a CUDA device is asked for where none can be used."""


class Device:
    """A place where tensor storage lives: ``Device("cpu")`` or ``Device("cuda")``."""

    __slots__ = ("kind",)

    def __init__(self, kind: str | Device = "cpu"):
        if isinstance(kind, Device):
            kind = kind.kind
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {kind!r}: expected 'cpu' or 'cuda'")
        self.kind = kind

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.kind == self.kind

    def __hash__(self) -> int:
        return hash(self.kind)

    def __repr__(self) -> str:
        return f"Device({self.kind!r})"

    def __str__(self) -> str:
        return self.kind


cpu = Device("cpu")
cuda = Device("cuda")


def as_device(device: str | Device | None) -> Device:
    return cpu if device is None else Device(device)


_backends: dict[str, object] = {}


def backend_for(device: Device):
    """The op namespace for a device (the CUDA one is imported on first use)."""
    backend = _backends.get(device.kind)
    if backend is None:
        if device.kind == "cpu":
            from . import backend_cpu as backend
        else:
            require_cuda()
            from .cuda import backend
        _backends[device.kind] = backend
    return backend


@functools.cache
def _probe() -> str | None:
    """Try to start CUDA once; return None on success or the reason it failed."""
    try:
        from .cuda.driver import drv
    except ImportError as exc:
        return f"PyCUDA is not installed ({exc}); install the 'cuda' extra: pip install -e '.[cuda]'"
    except Exception as exc:  # a broken driver library raises OSError and friends
        return f"PyCUDA could not load the CUDA driver: {exc}"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "the CUDA driver reports no GPU on this machine"
        from .cuda.driver import attach

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
    from .emulator import selected

    return cuda_available() and not selected()


def cuda_unavailable_reason() -> str:
    """Why CUDA cannot be used here, or an empty string when it can."""
    return _probe() or ""


def require_cuda() -> None:
    reason = _probe()
    if reason is not None:
        raise CudaUnavailableError(f"CUDA was requested but cannot be used: {reason}")
