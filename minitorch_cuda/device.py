"""Devices and the op namespace (backend) of each. Whether CUDA can be used is the CUDA probe's
to say (``cuda/probe.py``); its answers are part of this module's API.
"""

from __future__ import annotations

from .cuda.probe import (  # noqa: F401  (the public API: minitorch_cuda.cuda_available and friends)
    CudaUnavailableError,
    cuda_available,
    cuda_unavailable_reason,
    gpu_for_timing,
    require_cuda,
)


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
