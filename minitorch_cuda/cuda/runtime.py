"""The CUDA layer under the backend: compile, launch, allocate, copy, synchronize.

Every call the framework makes into the driver goes through this module (allocations,
copies, launches, events, synchronizations, device queries), so that each one is checked,
counted and (inside ``profiler.profile()``) timed, and so that the stage decides in one
place whether a launch is followed by a device sync. The objects it hands out are used
through their own methods: ``memory.py`` frees allocations, ``profiler.py`` reads the
events' times. Outside it, on purpose, PyCUDA is called directly by
``probe.py`` (which runs before this module may be imported), ``graphs.py`` and ``tensor_map.py``
(through cuda-bindings, ``driver.bindings``, the graph and tensor-map API PyCUDA lacks), and the measuring
tools that work beside the framework rather than in it: ``timing.py`` (the events that
time the benchmark's tables and the tuner's candidates), ``tile_eval/`` (raw buffers shared with Triton,
cuTile and CuPy) and the ``experiments/`` scripts.

Launches and device-to-device copies go to the *current stream*: the legacy
default stream unless ``on_stream(stream)`` chose another (CUDA graph capture,
stage 11, needs every launch of the step on one non-default stream). While a
capture is running, host copies and synchronizations are refused loudly: they
would invalidate the capture.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re

import numpy as np

from .. import kernel_cache, profiler, stages
from . import timing
from .kernel_table import KERNEL_DIR, NVCC_OPTIONS, source_define
from .probe import require_cuda

CACHE_DIR = kernel_cache.folder()
# MINITORCH_CUDA_SYNC=1 syncs after every launch at every stage, so that an
# asynchronous fault is reported against the kernel that caused it.
DEBUG_SYNC = os.environ.get("MINITORCH_CUDA_SYNC") == "1"

require_cuda()  # importing this module means CUDA is wanted: fail here, clearly
from .driver import EMULATED, KernelError, SourceModule, bindings, check, drv  # noqa: E402  (PyCUDA, or the emulator)

_stream = None  # a pycuda Stream, or None for the legacy default stream
_capturing = False


@contextlib.contextmanager
def on_stream(stream, capturing: bool = False):
    """Send launches and device copies of the block to ``stream`` (``capturing``: a
    CUDA graph capture is running on it, so nothing may wait for the device)."""
    global _stream, _capturing
    previous = _stream, _capturing
    _stream, _capturing = stream, capturing
    try:
        yield stream
    finally:
        _stream, _capturing = previous


def current_stream():
    return _stream


def capturing() -> bool:
    return _capturing


def _refuse_during_capture(what: str) -> None:
    if _capturing:
        raise KernelError(
            f"{what} while a CUDA graph is being captured: the captured step must stay on the "
            "device (no host copies, no synchronization)"
        )


class KernelCompileError(KernelError):
    """nvcc rejected a kernel source; the message carries its log and the lines. A notebook shows
    the message alone (IPython prints ``_render_traceback_``): the frames would be the course's."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


@functools.cache
def arch() -> str:
    major, minor = drv.Context.get_device().compute_capability()
    return f"sm_{major}{minor}"


@functools.cache
def device_name() -> str:
    return drv.Context.get_device().name()


def device_properties() -> dict:
    dev = drv.Context.get_device()
    attrs = dev.get_attributes()
    a = drv.device_attribute
    return {
        "name": dev.name(),
        "compute_capability": dev.compute_capability(),
        "multiprocessors": attrs[a.MULTIPROCESSOR_COUNT],
        "total_memory_bytes": dev.total_memory(),
        "clock_khz": attrs[a.CLOCK_RATE],
        "memory_clock_khz": attrs[a.MEMORY_CLOCK_RATE],
        "memory_bus_width_bits": attrs[a.GLOBAL_MEMORY_BUS_WIDTH],
        "max_threads_per_block": attrs[a.MAX_THREADS_PER_BLOCK],
        "warp_size": attrs[a.WARP_SIZE],
        "shared_memory_per_block_bytes": attrs[a.MAX_SHARED_MEMORY_PER_BLOCK],
        "l2_cache_bytes": attrs[a.L2_CACHE_SIZE],
    }


def _numbered_excerpt(source: str, log: str, context: int = 2) -> str:
    """The source lines that the compiler log points at, with line numbers: its errors where it has
    any (the warnings after a syntax error are its echoes), else its warnings."""
    lines = source.splitlines()
    points = {kind: {int(m) for m in re.findall(rf"\((\d+)\): {kind}", log)} for kind in ("error", "warning")}
    wanted = sorted(points["error"] or points["warning"])
    shown: list[str] = []
    for number in wanted:
        for i in range(max(1, number - context), min(len(lines), number + context) + 1):
            marker = ">>" if i == number else "  "
            shown.append(f"{marker} {i:4d} | {lines[i - 1]}")
        shown.append("")
    return "\n".join(shown)


def _build_options(source: str, arch_specific: bool) -> dict:
    """nvcc's options through PyCUDA: the one build every kernel of the framework gets (its disk
    cache told apart by the source's own digest: kernel_table.source_define)."""
    return {
        "no_extern_c": True,
        "arch": arch() + ("a" if arch_specific else ""),
        "include_dirs": [str(KERNEL_DIR)],
        "options": [*NVCC_OPTIONS, source_define(source)],
        "cache_dir": str(CACHE_DIR),
    }


@functools.cache
def compile_module(source: str, label: str, arch_specific: bool = False):
    """Compile once per process (and once per machine: nvcc's output is cached on disk).
    ``arch_specific`` builds for this GPU alone (sm_90a on an H100/H200), which instructions
    such as wgmma need; such code runs on no other GPU."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        return SourceModule(source, **_build_options(source, arch_specific))
    except drv.CompileError as exc:
        log = (exc.stderr or "") + (exc.stdout or "")
        compiler = "g++ (the CPU emulator)" if EMULATED else "nvcc"
        raise KernelCompileError(
            f"{compiler} could not compile {label}:\n{log.strip()}\n\n{_numbered_excerpt(source, log)}"
        ) from None


class Kernel:
    """A compiled ``__global__`` function, prepared for cheap repeated launches, with the
    dynamic shared memory every launch of it gets."""

    __slots__ = ("name", "function", "shared_bytes")

    def __init__(self, name: str, module, entry: str, signature: str, shared_bytes: int = 0):
        try:
            self.function = module.get_function(entry)
        except drv.Error as exc:
            raise KernelError(f"kernel {entry!r} not found in the compiled module ({exc})") from None
        self.function.prepare(signature)
        if shared_bytes > 48 * 1024:  # beyond the default a function must opt in
            self.function.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes)
        self.name = name
        self.shared_bytes = shared_bytes

    def launch_async(self, grid: tuple, block: tuple, stream, *args) -> None:
        self.function.prepared_async_call(grid, block, stream, *args, shared_size=self.shared_bytes)

    def dynamic_shared_limit(self) -> int:
        """The most dynamic shared memory a launch of this kernel can have on this GPU: a block's
        opt-in maximum less the kernel's static shared memory."""
        optin = drv.Context.get_device().get_attribute(drv.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        return optin - self.function.get_attribute(drv.function_attribute.SHARED_SIZE_BYTES)

    def with_shared_bytes(self, shared_bytes: int) -> Kernel:
        """The same function, every launch with ``shared_bytes`` of dynamic shared memory: for a
        kernel whose need follows its problem (stage 13's staged weights)."""
        if not 0 <= shared_bytes <= self.dynamic_shared_limit():
            raise ValueError(
                f"{self.name} can have 0..{self.dynamic_shared_limit()} bytes of dynamic shared memory on this GPU, "
                f"not {shared_bytes}"
            )
        attribute = drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES
        if shared_bytes > self.function.get_attribute(attribute):  # raised, never lowered: other sizes stay valid
            self.function.set_attribute(attribute, shared_bytes)
        sized = Kernel.__new__(Kernel)
        sized.name, sized.function, sized.shared_bytes = self.name, self.function, shared_bytes
        return sized


class DriverKernel(Kernel):
    """A kernel that takes a structure by value (a 128-byte TMA descriptor, ``128s`` in its
    signature), launched with one pointer per argument (cuLaunchKernel's ``kernelParams``), from
    which the driver lays each argument out as the kernel's image says. PyCUDA's launch packs every
    argument into one buffer instead, and wgmma_tma.cu's kernel read that buffer as zeros, tensor
    maps and sizes alike (H200, driver 580, CUDA 13: it then computed nothing, silently). ``source``
    is compiled again at the first launch, for the bytes the driver loads (nvcc's cache answers)."""

    __slots__ = ("_entry", "_source", "_codes", "_module", "_handle", "_packed")
    PACKED_KEPT = 16  # argument lists kept packed: a product launched again costs one driver call

    def __init__(self, name: str, module, entry: str, signature: str, shared_bytes: int, source: str):
        super().__init__(name, module, entry, signature, shared_bytes)  # PyCUDA's: its attributes
        self._entry, self._source = entry, source
        self._codes = re.findall(r"\d*[A-Za-z]", signature)
        self._module = self._handle = None
        self._packed: dict[tuple, tuple] = {}

    def _load(self) -> None:
        from pycuda.compiler import compile as nvcc

        cu = bindings()
        cubin = nvcc(self._source, **_build_options(self._source, arch_specific=True))
        self._module = check(cu.cuModuleLoadData(cubin), f"loading {self.name}")
        self._handle = check(cu.cuModuleGetFunction(self._module, self._entry.encode()), self.name)
        if self.shared_bytes > 48 * 1024:
            attribute = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(self._handle, attribute, self.shared_bytes), f"{self.name}'s shared memory")

    def _pack(self, args: tuple) -> tuple:
        """The arguments as the driver reads them: each value's bytes and an array of pointers to them
        (kept together, alive for as long as they are cached)."""
        packed = self._packed.get(args)
        if packed is None:
            values = [_by_value(code, arg) for code, arg in zip(self._codes, args, strict=True)]
            packed = values, (ctypes.c_void_p * len(values))(*map(ctypes.addressof, values))
            if len(self._packed) >= self.PACKED_KEPT:
                self._packed.pop(next(iter(self._packed)))  # the oldest
            self._packed[args] = packed
        return packed

    def launch_async(self, grid: tuple, block: tuple, stream, *args) -> None:
        if self._handle is None:
            self._load()
        _, pointers = self._pack(args)
        grid, block = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
        handle = stream.handle if stream is not None else 0
        check(bindings().cuLaunchKernel(self._handle, *grid, *block, self.shared_bytes, handle,
                                      ctypes.addressof(pointers), 0), f"launch of {self.name}")  # fmt: skip


def _by_value(code: str, arg):
    """One argument as the C value the driver copies, for its prepare() code."""
    if code.endswith("s"):
        return (ctypes.c_ubyte * int(code[:-1])).from_buffer_copy(arg)
    return {"P": ctypes.c_uint64, "i": ctypes.c_int32, "I": ctypes.c_uint32, "f": ctypes.c_float}[code](arg)


def launch(kernel: Kernel, grid: tuple, block: tuple, *args, shapes=()) -> None:
    """Launch on the current stream; sync afterwards where the stage says so."""
    counters = profiler.counters
    counters.launches += 1
    prof = None if _capturing else profiler.active()  # events on the legacy stream would break a capture
    start = record_event() if prof else None
    try:
        kernel.launch_async(grid, block, _stream, *args)
    except drv.Error as exc:
        raise KernelError(
            f"launch of {kernel.name} failed (grid={grid}, block={block}, shapes={shapes}): {exc}"
        ) from None
    if prof:
        prof.add(kernel.name, "kernel", start, record_event())
    if DEBUG_SYNC or stages.sync_after_launch():
        synchronize(f"{kernel.name} (grid={grid}, block={block}, shapes={shapes})")


def time_launch_ms(kernel: Kernel, grid: tuple, block: tuple, *args, repeats: int = 1) -> float:
    """Milliseconds per launch of ``repeats`` back-to-back launches between two events on the
    legacy stream, waited for: the kernel alone, its arguments prepared once (the autotuner's
    and the benchmark's measurement: not counted, not profiled, never during a capture)."""
    _refuse_during_capture(f"timing {kernel.name}")

    def launches() -> None:
        try:
            for _ in range(repeats):
                kernel.launch_async(grid, block, None, *args)
        except drv.Error as exc:
            raise KernelError(f"launch of {kernel.name} failed (grid={grid}, block={block}): {exc}") from None

    return timing.elapsed_ms(launches) / repeats


@functools.cache
def multiprocessors() -> int:
    return drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)


def synchronize(after: str = "the last launch") -> None:
    _refuse_during_capture(f"a device synchronization after {after}")
    profiler.counters.syncs += 1
    try:
        drv.Context.synchronize()
    except drv.Error as exc:
        raise KernelError(
            f"a kernel failed while the device ran {after}: {exc}. The CUDA context may be "
            "unusable now; set MINITORCH_CUDA_SYNC=1 to find the failing launch."
        ) from None


def _copy(kind: str, nbytes: int, action) -> None:
    c = profiler.counters
    setattr(c, f"{kind}_copies", getattr(c, f"{kind}_copies") + 1)
    setattr(c, f"{kind}_bytes", getattr(c, f"{kind}_bytes") + nbytes)
    prof = profiler.active()
    start = record_event() if prof else None
    try:
        action()
    except drv.Error as exc:
        raise KernelError(f"{kind} copy of {nbytes} bytes failed: {exc}") from None
    if prof:
        prof.add(f"[CUDA memcpy {kind.upper()}]", "memcpy", start, record_event())


def copy_htod(dst_ptr: int, host: np.ndarray) -> None:
    """Blocking host-to-device copy (the host array is pageable)."""
    _refuse_during_capture(f"a host-to-device copy of {host.nbytes} bytes")
    _copy("htod", host.nbytes, lambda: drv.memcpy_htod(dst_ptr, host))


def copy_dtoh(host: np.ndarray, src_ptr: int) -> None:
    """Blocking device-to-host copy: waits for all earlier work on the device."""
    _refuse_during_capture(f"a device-to-host copy of {host.nbytes} bytes")
    _copy("dtoh", host.nbytes, lambda: drv.memcpy_dtoh(host, src_ptr))


class DeviceMemoryError(MemoryError):
    """The device has no room left for an allocation."""


def allocate(nbytes: int):
    """``nbytes`` of device memory (cuMemAlloc): a pycuda allocation, freed by its ``free()``."""
    try:
        return drv.mem_alloc(nbytes)
    except drv.MemoryError as exc:
        raise DeviceMemoryError(f"cuMemAlloc of {nbytes} bytes failed: {exc}") from None


def mapped_host(count: int, dtype) -> tuple[np.ndarray, int]:
    """``count`` zeroed values of pinned host memory mapped into the device's address space
    (zero-copy): the array the host reads, and the address at which kernels write it."""
    try:
        host = drv.pagelocked_zeros(count, dtype, mem_flags=drv.host_alloc_flags.DEVICEMAP)
    except drv.Error as exc:
        raise DeviceMemoryError(f"cuMemHostAlloc of {count} x {np.dtype(dtype)} (mapped) failed: {exc}") from None
    return host, int(host.base.get_device_pointer())


def record_event():
    """A CUDA event recorded now on the legacy stream (the profiler's timestamps)."""
    event = drv.Event()
    event.record()
    return event


def copy_dtod(dst_ptr: int, src_ptr: int, nbytes: int) -> None:
    """Device-to-device copy; cuMemcpyDtoD returns once the copy is queued (on the
    current stream when one is chosen)."""
    if _stream is not None:
        _copy("dtod", nbytes, lambda: drv.memcpy_dtod_async(dst_ptr, src_ptr, nbytes, _stream))
    else:
        _copy("dtod", nbytes, lambda: drv.memcpy_dtod(dst_ptr, src_ptr, nbytes))
