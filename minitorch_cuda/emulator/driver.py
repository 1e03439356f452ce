"""The part of ``pycuda.driver`` that minitorch_cuda uses, on the CPU.

Device pointers are host addresses of buffers the runtime maps (each between guard
pages); copies are ``memmove`` after a check that the range lies in one allocation,
as the driver checks. There is one stream of work and it runs as it is issued:
a launch returns when the kernel has finished, streams and events are in order by
construction, and an event's time is the host's clock when it was recorded (the
callers label such times as emulated).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import mmap
import os
import re
import shutil
import struct
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import device_process, toolchain
from .errors import CompileError, Error, LaunchError, LaunchTimeout, LogicError, MemoryError

if TYPE_CHECKING:  # annotations only: compiler builds what this module runs
    from .compiler import Library

__all__ = ["CompileError", "Error", "LaunchError", "LaunchTimeout", "LogicError", "MemoryError", "time_limit"]

NAME = "CPU emulator (emulated on the CPU)"
WARP_SIZE, MAX_THREADS, DEFAULT_DYNAMIC_SHARED, MAX_DYNAMIC_SHARED = 32, 1024, 48 << 10, 227 << 10
MAX_BLOCK, MAX_GRID = (1024, 1024, 64), (2**31 - 1, 65535, 65535)
# The device's multiprocessors, each holding one block at a time: a launch of at most this many
# blocks runs them all at once (so a grid barrier works), each on its own OS thread. Few, and the
# same on every machine, so that a kernel sized one block per SM gets the same small grid everywhere.
MULTIPROCESSORS = 4
MAX_CLUSTER = 8  # blocks in a thread block cluster: the portable limit (__cluster_dims__)
RACECHECK, TRACE = 1, 2  # how a launch is instrumented (runtime.cpp's emu_launch)


# Each worker maps a guarded stack per thread of a block (2,048 memory maps): past about 30 of them
# a process meets Linux's default limit of 65,530 maps and the next thread cannot start.
MAX_WORKERS = 16


def _workers() -> int:
    """OS threads that run blocks: MINITORCH_CUDA_EMULATE_THREADS, else the cores this process may use
    (at most MAX_WORKERS either way)."""
    text = os.environ.get("MINITORCH_CUDA_EMULATE_THREADS")
    try:
        asked = int(text) if text else len(os.sched_getaffinity(0))
    except ValueError:
        raise ValueError(
            f"MINITORCH_CUDA_EMULATE_THREADS={text!r}: set it to a whole number of threads (1 runs the blocks "
            "in order), or unset it for one per core"
        ) from None
    return max(1, min(asked, MAX_WORKERS))


def _runtime() -> ctypes.CDLL:
    lib = toolchain.runtime_library()
    if not hasattr(lib, "_prototyped"):
        lib.emu_register.restype = ctypes.c_size_t
        lib.emu_register.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t]
        lib.emu_unregister.argtypes = [ctypes.c_size_t]
        lib.emu_check_range.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
        c = ctypes
        lib.emu_launch.argtypes = [c.c_void_p, c.c_void_p, c.c_char_p, c.c_void_p, c.c_void_p, c.c_void_p,
                                   c.c_size_t, c.c_int, c.c_int, c.c_int, c.c_char_p, c.c_size_t]  # fmt: skip
        lib.emu_stop.argtypes = [ctypes.c_char_p]
        lib.emu_trace_rows.restype = ctypes.c_size_t
        lib.emu_trace_rows.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib._prototyped = True
    return lib


# --- what a fault says: the source line, the array and the index ------------------------------

ELEMENT_BYTES = {"char": 1, "bool": 1, "short": 2, "half": 2, "__half": 2, "__nv_bfloat16": 2, "int": 4,
                 "unsigned": 4, "float": 4, "uint32_t": 4, "int32_t": 4, "long": 8, "double": 8, "size_t": 8,
                 "int64_t": 8, "uint64_t": 8, "float2": 8, "float4": 16, "int4": 16}  # fmt: skip


def fault_line(library: Library, offset: int) -> str:
    """``line N: `code``` of the kernel's source for an address in its library, or "" (addr2line
    reads the line table the emulator's build keeps; the innermost frame in the kernel's own file)."""
    file, number = source_lines(library, [offset]).get(offset, ("", 0))
    if file != toolchain.MAIN:
        return ""
    lines = library.source.splitlines()
    code = lines[number - 1].strip() if 0 < number <= len(lines) else ""
    return f"line {number}: `{code}`" if code else f"line {number}"


def source_lines(library: Library, offsets) -> dict[int, tuple[str, int]]:
    """{offset: (file, line)} for addresses in a kernel library, where its line table knows them: the
    innermost frame in the kernel's own source (file toolchain.MAIN), else the innermost one (a header's
    path). One addr2line for them all."""
    tool, offsets = shutil.which("addr2line"), list(offsets)
    if tool is None or not offsets:
        return {}
    import subprocess

    found = subprocess.run([tool, "-a", "-i", "-e", str(library.path), *map(hex, offsets)],
                           capture_output=True, text=True)  # fmt: skip
    lines: dict[int, tuple[str, int]] = {}
    at = None
    for frame in found.stdout.splitlines():
        if frame.startswith("0x"):  # -a: each address before its frames, innermost first
            at = int(frame, 16)
            continue
        file, _, line = frame.partition(":")
        number = line.split()[0] if line else ""
        if at is None or not number.isdigit() or number == "0":
            continue
        ours = Path(file).name == toolchain.MAIN
        if ours and library.source and lines.get(at, ("", 0))[0] != toolchain.MAIN:
            lines[at] = (toolchain.MAIN, int(number))
        elif not ours and at not in lines:
            lines[at] = (file, int(number))
    return lines


def _buffer_names(library: Library, name: str, args) -> dict[int, tuple[str, int]]:
    """Device address -> (the kernel's parameter name, its element size) for the pointer arguments."""
    from ..cuda.kernel_table import entry_params

    try:
        params = [p.strip() for p in entry_params(library.source, name).split(",")]
    except ValueError:
        return {}
    out = {}
    for param, value in zip(params, args):
        match = re.fullmatch(r"(?:const\s+)?(\w+)\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?(\w+)", param)
        if match and isinstance(value, (int, DeviceAllocation)):
            out[int(value)] = (match.group(2), ELEMENT_BYTES.get(match.group(1), 1))
    return out


def explain_fault(message: str, library: Library, name: str, args) -> str:
    """The runtime's fault message with the source line for its code address, and, where the
    address lies past a buffer passed as an argument, the parameter and the index for the raw
    addresses: "out-of-bounds read of a[300] (a holds 255 elements) at line 4: `...`"; a race
    checking report (racecheck.cpp), its lines and its array and index: see ``explain_race``."""
    if "(racecheck)" in message:
        return explain_race(message, library, name, args)
    pc = re.search(r" \[pc (\S+)\+0x([0-9a-f]+)\]", message)
    if pc is None:
        return message
    message = message.replace(pc.group(0), "")
    near = re.search(
        r"out-of-bounds (read|write) at 0x([0-9a-f]+), \d+ bytes (?:past the end|before the start) of a "
        r"(\d+)-byte device buffer at 0x([0-9a-f]+)",
        message,
    )
    if near:
        buffers = _buffer_names(library, name, args)
        base = int(near.group(4), 16)
        if base in buffers:
            param, size = buffers[base]
            index = (int(near.group(2), 16) - base) // size
            held = int(near.group(3)) // size
            plain = f"out-of-bounds {near.group(1)} of {param}[{index}] ({param} holds {held} elements)"
            message = message.replace(near.group(0), plain)
        else:  # past a buffer the kernel was not given: named by the argument it came from, as a wild access
            address = int(near.group(2), 16)
            message = message.replace(near.group(0), _far_access(near.group(1), address, buffers))
    far = re.search(r"invalid (read|write) at 0x([0-9a-f]+): no device memory is there", message)
    if far:
        message = message.replace(far.group(0), _far_access(far.group(1), int(far.group(2), 16),
                                                            _buffer_names(library, name, args)))  # fmt: skip
    # the device process (device_process.py) loads the library from a descriptor: /proc/self/fd/N/...
    ours = Path(pc.group(1)) == Path(library.path) or pc.group(1).startswith("/proc/self/fd/")
    line = fault_line(library, int(pc.group(2), 16)) if ours else ""
    return f"{message}, at {line}" if line else message


def _far_access(kind: str, address: int, buffers: dict[int, tuple[str, int]]) -> str:
    """An access that no allocation holds, named by the pointer argument nearest to it ("invalid
    write of out[1000000], far past the end of out: no device memory is there"); near zero, a null
    pointer's."""
    if address < 1 << 16:
        return f"invalid {kind} through a null pointer (address {address:#x}, a pointer that was never set)"
    if not buffers:
        return f"invalid {kind} at {address:#x}: no device memory is there"
    base = min(buffers, key=lambda b: abs(address - b))
    param, size = buffers[base]
    side = "past the end of" if address >= base else "before the start of"
    return f"invalid {kind} of {param}[{(address - base) // size}], far {side} {param}: no device memory is there"


_IN_BUFFER = re.compile(r"0x[0-9a-f]+, (\d+) bytes into a (\d+)-byte device buffer at 0x([0-9a-f]+)")
_CODE = re.compile(r"\{pc (\S+)\+0x([0-9a-f]+)\}")


def explain_race(message: str, library: Library, name: str, args) -> str:
    """A race checking report in a reader's words: each code address as its source line, each
    address in a buffer passed as an argument as the parameter and its index ("partial[3]")."""
    buffers = _buffer_names(library, name, args)

    def element(m: re.Match) -> str:
        base, offset, length = int(m.group(3), 16), int(m.group(1)), int(m.group(2))
        address = base + offset  # in the argument that points nearest below it, in this buffer
        inside = [p for p in buffers if base <= p <= address < base + length]
        if not inside:
            return f"byte {offset} of a {length}-byte device buffer"
        param, size = buffers[max(inside)]
        return f"{param}[{(address - max(inside)) // size}]"

    def line(m: re.Match) -> str:
        ours = Path(m.group(1)) == Path(library.path) or m.group(1).startswith("/proc/self/fd/")
        found = fault_line(library, int(m.group(2), 16)) if ours else ""
        return found or "a line outside the kernel's file"

    return _CODE.sub(line, _IN_BUFFER.sub(element, message))


# --- stopping a launch: a time limit, Kernel > Interrupt -------------------------------------
# The launch runs on a helper thread while the calling thread waits in short joins, so that a
# KeyboardInterrupt (Kernel > Interrupt in a notebook) arrives there; the runtime then stops the
# kernel's block threads (emu_stop) and the launch returns. A notebook's check cell on the
# emulator also sets a time limit (time_limit): an endless loop ends there, as in the grader.

_limit: tuple[float, float] | None = None  # (the deadline on time.monotonic(), the limit in seconds)
_stuck = ""  # set when a stopped launch did not return: the runtime cannot take another


@contextlib.contextmanager
def time_limit(seconds: float):
    """Launches inside the block stop with LaunchTimeout once ``seconds`` have passed in all."""
    global _limit
    outer, _limit = _limit, (time.monotonic() + seconds, seconds)
    try:
        yield
    finally:
        _limit = outer


def _stop(done: threading.Event, why: str) -> None:
    """Stop the launch in progress and wait until it has returned (``done``); the runtime is asked
    again and again: a block thread between two fibers ignores one request."""
    global _stuck
    give_up = time.monotonic() + 10
    while not done.is_set() and time.monotonic() < give_up:
        _runtime().emu_stop(why.encode())
        done.wait(0.05)
    if not done.is_set():
        _stuck = why


def _stoppable(launch, name: str) -> int:
    """``launch()`` (the runtime's emu_launch) run so that it can be stopped; returns its status."""
    if _stuck:
        raise LaunchError(
            f"the CPU emulator is still running an earlier kernel that could not be stopped ({_stuck}): "
            "restart the Python kernel (Kernel > Restart in Jupyter)"
        )
    if _limit is None and threading.current_thread() is not threading.main_thread():
        return launch()  # nothing can interrupt it here anyway
    outcome: list = []  # the status, or what the call raised
    done = threading.Event()  # not Thread.join: a join that a KeyboardInterrupt broke may report the thread ended

    def run() -> None:
        try:
            outcome.append(launch())
        except BaseException as exc:  # raised again on the calling thread
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"emulated {name}", daemon=True).start()
    try:
        while not done.wait(0.05):
            if _limit is not None and time.monotonic() > _limit[0]:
                why = f"kernel '{name}' ran past the time limit of {_limit[1]:g} s and was stopped"
                _stop(done, why)
                restart = "; it could not be stopped: restart the Python kernel" if _stuck else ""
                raise LaunchTimeout(
                    f"{why}: an endless loop, or a launch far too big for the CPU emulator? "
                    f"(on a GPU it would hang the same way){restart}"
                )
    except KeyboardInterrupt:
        _stop(done, f"kernel '{name}' was interrupted")
        raise
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def init(flags: int = 0) -> None:
    if shutil.which(toolchain.CXX) is None:
        raise Error(f"the CPU emulator compiles kernels with {toolchain.CXX}, which is not on PATH")
    _runtime()


# --- the device ------------------------------------------------------------------------------


class device_attribute(enum.Enum):  # noqa: N801  (PyCUDA's name)
    MULTIPROCESSOR_COUNT = enum.auto()
    CLOCK_RATE = enum.auto()
    MEMORY_CLOCK_RATE = enum.auto()
    GLOBAL_MEMORY_BUS_WIDTH = enum.auto()
    MAX_THREADS_PER_BLOCK = enum.auto()
    WARP_SIZE = enum.auto()
    MAX_SHARED_MEMORY_PER_BLOCK = enum.auto()
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = enum.auto()
    L2_CACHE_SIZE = enum.auto()


class function_attribute(enum.Enum):  # noqa: N801
    MAX_THREADS_PER_BLOCK = enum.auto()
    MAX_DYNAMIC_SHARED_SIZE_BYTES = enum.auto()
    NUM_REGS = enum.auto()
    LOCAL_SIZE_BYTES = enum.auto()
    SHARED_SIZE_BYTES = enum.auto()


class Device:
    """The emulated device: MULTIPROCESSORS "multiprocessors"; no clock or memory bus to report."""

    def __init__(self, ordinal: int = 0):
        if ordinal != 0:
            raise LogicError(f"the CPU emulator has one device, not device {ordinal}")

    @staticmethod
    def count() -> int:
        return 1

    def name(self) -> str:
        return NAME

    def compute_capability(self) -> tuple[int, int]:
        # Ampere's: Volta's independent thread scheduling, and the TF32 and BF16 tensor cores that
        # tensor_core.h models (mma.sync, wmma); Hopper's wgmma and TMA are refused (ptx.py)
        return (8, 0)

    def total_memory(self) -> int:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def get_attributes(self) -> dict:
        a = device_attribute
        return {
            a.MULTIPROCESSOR_COUNT: MULTIPROCESSORS,
            a.CLOCK_RATE: 0,
            a.MEMORY_CLOCK_RATE: 0,
            a.GLOBAL_MEMORY_BUS_WIDTH: 0,
            a.MAX_THREADS_PER_BLOCK: MAX_THREADS,
            a.WARP_SIZE: WARP_SIZE,
            a.MAX_SHARED_MEMORY_PER_BLOCK: DEFAULT_DYNAMIC_SHARED,
            a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: MAX_DYNAMIC_SHARED,
            a.L2_CACHE_SIZE: 0,
        }

    def get_attribute(self, attribute: device_attribute) -> int:
        return self.get_attributes()[attribute]


class Context:
    @staticmethod
    def get_device() -> Device:
        return Device()

    @staticmethod
    def synchronize() -> None:
        """Every launch and copy has finished when it returns: nothing to wait for."""


def get_driver_version() -> int:
    return 0


# --- memory ------------------------------------------------------------------------------------


class DeviceAllocation:
    """``nbytes`` of emulated device memory between guard pages; the mapping is a Python ``mmap``,
    unmapped by ``free()`` or when the object is gone (never earlier: a reference cycle's other
    finalizers may hand it back to a pool, as they may a PyCUDA allocation)."""

    def __init__(self, nbytes: int):
        device_process.allocations += 1  # isolate() must come before the first
        self.nbytes = nbytes
        data = -(-max(nbytes, 1) // 16) * 16
        length = -(-data // mmap.PAGESIZE) * mmap.PAGESIZE + 2 * mmap.PAGESIZE
        process = device_process.current()
        if process is not None:  # shared with the device process that runs the launches
            self._map = device_process.SharedMapping(length, nbytes, process)
            base = self._map.address
        else:
            try:
                self._map = mmap.mmap(-1, length, mmap.MAP_PRIVATE)
            except OSError as exc:
                raise MemoryError(f"cuMemAlloc failed: out of memory ({nbytes} bytes: {exc})") from None
            view = ctypes.c_char.from_buffer(self._map)
            base = ctypes.addressof(view)
            del view  # the mapping may be closed only once nothing exports it
        self.ptr = _runtime().emu_register(base, len(self._map), nbytes)
        if process is not None:
            self._map.data = self.ptr

    def __int__(self) -> int:
        return self.ptr

    __index__ = __int__

    def free(self) -> None:
        if self.ptr:
            _runtime().emu_unregister(self.ptr)
            self._map.close()
            self.ptr = 0


def mem_alloc(nbytes: int) -> DeviceAllocation:
    return DeviceAllocation(int(nbytes))


class host_alloc_flags(enum.IntFlag):  # noqa: N801  (PyCUDA's name)
    PORTABLE = 1
    DEVICEMAP = 2
    WRITECOMBINED = 4


class HostAllocation:
    """Pinned host memory mapped into the device (``pagelocked_*`` with DEVICEMAP): here emulated
    device memory, which is host memory already. Arrays made from it keep it as their ``base``."""

    def __init__(self, shape, dtype, mem_flags: int):
        if not mem_flags & host_alloc_flags.DEVICEMAP:
            raise LogicError("the emulator pins host memory only to map it into the device (DEVICEMAP)")
        dtype = np.dtype(dtype)
        shape = tuple(np.atleast_1d(shape).tolist())
        self._device = DeviceAllocation(int(np.prod(shape)) * dtype.itemsize)
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (self._device.ptr, False),
                                    "version": 3}  # fmt: skip

    def get_device_pointer(self) -> int:
        return self._device.ptr


def pagelocked_empty(shape, dtype, order: str = "C", mem_flags: int = 0) -> np.ndarray:
    return np.asarray(HostAllocation(shape, dtype, mem_flags))


pagelocked_zeros = pagelocked_empty  # emulated device memory starts zeroed (an anonymous mapping)


def _check(ptr, nbytes: int, what: str) -> int:
    address = int(ptr)
    if _runtime().emu_check_range(address, nbytes) != 0:
        raise LogicError(f"{what} failed: invalid argument ({nbytes} bytes at 0x{address:x} are not one allocation)")
    return address


def _host(array, writable: bool = False) -> np.ndarray:
    host = np.asarray(array)
    if not host.flags.c_contiguous or (writable and not host.flags.writeable):
        raise LogicError(
            "the host buffer of a copy must be a contiguous" + (" writable" if writable else "") + " array"
        )
    return host


def memcpy_htod(dest, src) -> None:
    host = _host(src)
    ctypes.memmove(_check(dest, host.nbytes, "cuMemcpyHtoD"), host.ctypes.data, host.nbytes)


def memcpy_dtoh(dest, src) -> None:
    host = _host(dest, writable=True)
    ctypes.memmove(host.ctypes.data, _check(src, host.nbytes, "cuMemcpyDtoH"), host.nbytes)


def memcpy_dtod(dest, src, size: int) -> None:
    ctypes.memmove(_check(dest, size, "cuMemcpyDtoD"), _check(src, size, "cuMemcpyDtoD"), size)


def memcpy_dtod_async(dest, src, size: int, stream: Stream | None = None) -> None:
    _issue(stream, functools.partial(memcpy_dtod, int(dest), int(src), size))


def to_device(array) -> DeviceAllocation:
    host = _host(array)
    allocation = mem_alloc(host.nbytes)
    memcpy_htod(allocation, host)
    return allocation


# --- streams and events --------------------------------------------------------------------------


class Stream:
    """Work is done when it is issued, so a stream is only a name for an order, except while it
    is captured into a graph (emulator/graphs.py): then its work is recorded in ``captured``."""

    _handles = iter(range(1, 2**62))
    _live: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def __init__(self, flags: int = 0):
        self.handle = next(self._handles)
        self.captured: list | None = None
        Stream._live[self.handle] = self

    @classmethod
    def by_handle(cls, handle: int) -> Stream | None:
        return cls._live.get(handle)

    def synchronize(self) -> None:
        pass

    def is_done(self) -> bool:
        return True


def _issue(stream: Stream | None, work) -> None:
    """Run ``work`` now, or record it when ``stream`` is being captured."""
    if stream is not None and stream.captured is not None:
        stream.captured.append(work)
    else:
        work()


class Event:
    """A point in the host's time (ms): what finished before it was recorded, finished before it."""

    def __init__(self, flags: int = 0):
        self.time: float | None = None

    def record(self, stream: Stream | None = None) -> Event:
        self.time = time.perf_counter()
        return self

    def synchronize(self) -> Event:
        return self

    def query(self) -> bool:
        return True

    def time_since(self, start: Event) -> float:
        if self.time is None or start.time is None:
            raise LogicError("cuEventElapsedTime failed: an event was never recorded")
        return (self.time - start.time) * 1e3

    def time_till(self, end: Event) -> float:
        return end.time_since(self)


# --- access tracing (trace.cpp; access.py reads what it counts) -----------------------------------------

# Set by access.tracing(): every launch runs built for tracing (its library's twin, Library.traced, where it
# was built without) and is handed over with its rows: tracer(function, grid, block, args, rows).
tracer = None


class TraceRow(ctypes.Structure):
    """trace.h's Row: one code address and memory space of a traced launch."""

    _fields_ = [("pc", ctypes.c_uint64), ("kind", ctypes.c_uint32), ("space", ctypes.c_uint32),
                ("bytes", ctypes.c_uint32), ("sample_lanes", ctypes.c_uint32), ("requests", ctypes.c_uint64),
                ("sectors", ctypes.c_uint64), ("wavefronts", ctypes.c_uint64), ("ideal", ctypes.c_uint64),
                ("lanes", ctypes.c_uint64), ("sample_region", ctypes.c_uint64), ("sample_block", ctypes.c_uint64),
                ("sample_warp", ctypes.c_uint64), ("sample", ctypes.c_uint64 * 32)]  # fmt: skip


def _trace_rows() -> list[TraceRow]:
    """The rows of the last traced launch (trace.cpp's emu_trace_rows), here or in the device process."""
    process = device_process.current()
    if process is not None:
        raw = process.trace_rows(ctypes.sizeof(TraceRow))
        return [TraceRow.from_buffer_copy(raw, i) for i in range(0, len(raw), ctypes.sizeof(TraceRow))]
    runtime = _runtime()
    count = runtime.emu_trace_rows(None, 0)
    rows = (TraceRow * count)()
    runtime.emu_trace_rows(rows, count)
    return list(rows)


# --- kernels ---------------------------------------------------------------------------------------

_SLOTS = {"P": "Q", "i": "i4x", "I": "I4x", "f": "f4x"}  # each argument in an 8-byte slot


def _dims(value, limits: tuple[int, int, int], what: str, name: str) -> tuple[int, int, int]:
    dims = tuple(int(v) for v in value) + (1,) * (3 - len(value))
    if len(dims) != 3 or any(d < 1 or d > m for d, m in zip(dims, limits)):
        raise LaunchError(f"cuLaunchKernel failed for kernel '{name}': invalid configuration argument ({what} {dims})")
    return dims


class Function:
    """A kernel of a compiled module; PyCUDA's prepared-call interface."""

    def __init__(self, library: Library, name: str):
        self._entry = library.entry(name)
        self.library, self.name = library, name
        self.max_threads_per_block = min(MAX_THREADS, library.max_threads[name])
        self.cluster = library.cluster[name]  # __cluster_dims__, (1, 1, 1) without
        self.max_dynamic_shared = DEFAULT_DYNAMIC_SHARED
        self.num_regs = self.local_size_bytes = self.shared_size_bytes = 0  # nothing is allocated in registers
        self._format: str | None = None

    def prepare(self, arg_types: str) -> Function:
        if any(code not in _SLOTS for code in arg_types):
            raise LogicError(f"prepare({arg_types!r}): the emulator takes the codes P, i, I and f")
        self._format = "<" + "".join(_SLOTS[c] for c in arg_types)
        self._count = len(arg_types)
        return self

    def set_attribute(self, attribute: function_attribute, value: int) -> None:
        if attribute is not function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES or value > MAX_DYNAMIC_SHARED:
            raise LogicError(f"cuFuncSetAttribute({attribute}, {value}) failed: invalid value")
        self.max_dynamic_shared = value

    def get_attribute(self, attribute: function_attribute) -> int:
        a = function_attribute
        return {
            a.MAX_THREADS_PER_BLOCK: self.max_threads_per_block,
            a.MAX_DYNAMIC_SHARED_SIZE_BYTES: self.max_dynamic_shared,
            a.NUM_REGS: self.num_regs,
            a.LOCAL_SIZE_BYTES: self.local_size_bytes,
            a.SHARED_SIZE_BYTES: self.shared_size_bytes,
        }[attribute]

    def prepared_call(self, grid, block, *args, shared_size: int = 0) -> None:
        self._launch(grid, block, args, shared_size)

    def prepared_async_call(self, grid, block, stream, *args, shared_size: int = 0) -> None:
        _issue(stream, functools.partial(self._launch, grid, block, args, shared_size))

    def _launch(self, grid, block, args, shared_size: int) -> None:
        if tracer is not None and not self.library.trace:  # run its twin built for tracing instead
            twin = Function(self.library.traced(), self.name)
            twin._format, twin._count, twin.max_dynamic_shared = self._format, self._count, self.max_dynamic_shared
            twin._launch(grid, block, args, shared_size)
            return
        if self._format is None:
            raise LogicError(f"kernel '{self.name}' was launched before prepare()")
        if len(args) != self._count:
            raise LogicError(f"kernel '{self.name}' takes {self._count} arguments, got {len(args)}")
        grid = _dims(grid, MAX_GRID, "grid", self.name)
        block = _dims(block, MAX_BLOCK, "block", self.name)
        if any(g % c for g, c in zip(grid, self.cluster)) or np.prod(self.cluster) > MAX_CLUSTER:
            raise LaunchError(
                f"cuLaunchKernel failed for kernel '{self.name}': invalid cluster size (grid {grid} in clusters of "
                f"{self.cluster} blocks: a cluster's extents must divide the grid's, and hold at most {MAX_CLUSTER} "
                "blocks)"
            )
        threads = block[0] * block[1] * block[2]
        if threads > self.max_threads_per_block:
            raise LaunchError(
                f"cuLaunchKernel failed for kernel '{self.name}': too many resources requested for launch "
                f"({threads} threads a block; at most {self.max_threads_per_block})"
            )
        if shared_size > self.max_dynamic_shared:
            raise LaunchError(
                f"cuLaunchKernel failed for kernel '{self.name}': invalid argument ({shared_size} bytes of dynamic "
                f"shared memory; at most {self.max_dynamic_shared} without raising MAX_DYNAMIC_SHARED_SIZE_BYTES)"
            )
        try:
            packed = ctypes.create_string_buffer(
                struct.pack(self._format, *(int(a) if isinstance(a, DeviceAllocation) else a for a in args))
            )
        except struct.error as exc:
            raise LogicError(f"kernel '{self.name}': an argument does not fit its parameter type ({exc})") from None
        base = ctypes.addressof(packed)
        pointers = (ctypes.c_void_p * max(1, self._count))(*(base + 8 * i for i in range(self._count)))
        process = device_process.current()
        # the runtime's `instrument`: tracing runs the blocks one at a time, race checking on every worker
        instrument = RACECHECK if self.library.racecheck else TRACE if self.library.trace else 0
        workers = 1 if instrument == TRACE else _workers()
        if process is not None:
            try:
                process.launch(self._entry, self.name, grid, block, self.cluster, shared_size, workers,
                               MULTIPROCESSORS, instrument, packed.raw[: 8 * self._count])  # fmt: skip
            except LaunchError as exc:
                raise LaunchError(self._fault(str(exc), args)) from None
        else:
            self._run(grid, block, args, shared_size, pointers, workers, instrument)
        if instrument == TRACE and tracer is not None:
            tracer(self, grid, block, args, _trace_rows())

    def _run(self, grid, block, args, shared_size: int, pointers, workers: int, instrument: int) -> None:
        """The launch, in this process."""
        error = ctypes.create_string_buffer(4096)
        dims = ctypes.c_uint * 3
        rc = _stoppable(lambda: _runtime().emu_launch(
            ctypes.cast(self._entry, ctypes.c_void_p), pointers, self.name.encode(), dims(*grid), dims(*block),
            dims(*self.cluster), shared_size, workers, MULTIPROCESSORS, instrument, error, len(error),
        ), self.name)  # fmt: skip
        if rc != 0:
            raise LaunchError(self._fault(error.value.decode(errors="replace"), args))

    def _fault(self, report: str, args) -> str:
        """The runtime's report of a fault in a reader's words: its source line and array, a file's
        name for its path (the build's temporary folder means nothing to a reader)."""
        message = explain_fault(report, self.library, self.name, args)
        return re.sub(r"/[^\s:'\"]*/([^/\s:'\"]+)", r"\1", message) + " (emulated on the CPU)"
