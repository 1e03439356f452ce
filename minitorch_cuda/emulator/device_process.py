"""Emulated kernels run in a device process that decides nothing (``isolate()``; the grader's choice).

Without it, a kernel library is loaded into the caller's process and its kernels run there as native
code: whatever the caller holds (a verdict, the references it compares with) is in reach of any C
library function, and every function is reachable from an address a kernel may compute. Inspecting
the library first cannot prevent that. With it, this process never loads a kernel library:

- device memory is shared memory: each allocation a memfd, mapped here at an address of its own
  range (``SharedMapping``) and, before the next launch, at the same address in the device process,
  so pointers mean the same in both; copies stay in this process;
- the device process (device_process.cpp, built once like the runtime) loads the runtime, installs
  a seccomp filter, then loads each kernel library from a descriptor sent to it and runs launches:
  buffers in, a status back. Its constructors and kernels alike run under the filter: no exec, no
  new file, no socket, no signal to another process; a call outside it ends the device process and
  fails the launch naming the call;
- everything the device process says is untrusted: one bounded message per reply, parsed with its
  sizes checked. After it failed (a fault, a refused call, a crash) every later launch fails, as a
  GPU's context does after an illegal access.

Notebooks and tests keep running kernels in their own process: the code is the student's own, in the
student's own process, and there it costs nothing. Through the device process (measured on 2 shared
cores, 2026-12-07) a launch costs a message each way (0.01-0.08 ms more, within the noise of a
256-thread launch), a new allocation a memfd and a mapping on both sides (about 1 ms with its first
launch), and the process 20-40 ms to start. Grading the solutions' 18 emulated exercises (2 jobs)
took 23.0 and 30.8 s with it, 21.3 and 40.4 s without, run in turns: within a shared machine's noise.
x86-64 Linux only, as the emulator itself; where the filter cannot be installed, ``isolate()``
refuses rather than run kernels unfiltered (the grader then leaves the exercise not graded, for a
GPU or another machine).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import mmap
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path

from . import toolchain
from .errors import Error, LaunchError, LogicError, MemoryError

SOURCE = Path(__file__).resolve().with_name("device_process.cpp")

# The protocol of device_process.cpp: requests, and the structs they carry
MAP, UNMAP, LOAD, LAUNCH, TRACE_ROWS = 1, 2, 3, 4, 5
OK, FAILED, SYSCALL = 0, 1, 2
REQUEST, REGION, SYMBOL, LAUNCH_HEAD, REPLY = (
    struct.Struct(f) for f in ("<IIQ", "<QQQ", "<QiIII", "<Q9I4xQiii4x", "<QiiI4x")
)
MAX_MESSAGE = 1 << 16
MAX_FDS = 200  # descriptors per MAP message (the kernel's limit is 253)

# Where shared device memory is mapped: far below the region where either process's libraries, heap
# and thread stacks go (0x7f..., and the executable's 0x55...), so that the same addresses are free
# in the device process. Addresses are never reused: a checking process is short-lived.
ADDRESS_BASE = 0x1000_0000_0000
ADDRESS_END = 0x5000_0000_0000

# What a system call the filter refused was for, in words a student knows (x86-64 numbers)
SYSCALLS = {
    2: ("open", "open a file, as fopen does"),
    257: ("openat", "open a file, as fopen or open do"),
    59: ("execve", "run a program, as system or exec do"),
    322: ("execveat", "run a program"),
    56: ("clone", "start a process, as fork or system do"),
    57: ("fork", "start a process"),
    58: ("vfork", "start a process"),
    62: ("kill", "send a signal to a process"),
    200: ("tkill", "send a signal to another thread"),
    234: ("tgkill", "send a signal to another process"),
    41: ("socket", "open a network connection"),
    42: ("connect", "open a network connection"),
    101: ("ptrace", "inspect another process"),
    110: ("getppid", "find the process that started it"),
    310: ("process_vm_readv", "read another process's memory"),
    311: ("process_vm_writev", "write another process's memory"),
    87: ("unlink", "delete a file"),
    263: ("unlinkat", "delete a file"),
    82: ("rename", "rename a file"),
    264: ("renameat", "rename a file"),
    316: ("renameat2", "rename a file"),
    83: ("mkdir", "create a folder"),
    258: ("mkdirat", "create a folder"),
    18: ("pwrite64", "write into a file at an offset"),
    77: ("ftruncate", "change a file's size"),
    285: ("fallocate", "change a file's size"),
    13: ("rt_sigaction", "replace the handler of the signal that stops forbidden calls"),
    72: ("fcntl", "change how a descriptor signals other processes"),
}


REFUSED_CALL = "which device code cannot do"  # in every refusal's message (the grader reads it: host code)


def refused_call(number: int | None) -> str:
    """The message for a kernel whose process made system call ``number`` (None: unknown, as when the
    call came with every signal blocked, so that the filter's signal ended the process at once)."""
    name, what = SYSCALLS.get(number, (f"number {number}", "do something outside device memory"))
    call = f" (system call {name})" if number is not None else " (a system call; the filter's signal ended it)"
    return (
        f"your kernel asked the operating system to {what}{call}, {REFUSED_CALL}: "
        "the CPU emulator's device process stopped it. A kernel computes on device memory only; "
        "it cannot reach the C library's files, processes or signals (host code, which a GPU never runs)"
    )


# --- shared device memory ------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FIXED_NOREPLACE = 0x100000
_next_address = ADDRESS_BASE
_address_lock = threading.Lock()


class SharedMapping:
    """``length`` bytes of a memfd mapped read-write at an address of the shared range, for a buffer of
    ``nbytes``; ``close()``
    unmaps it here (and, through ``process``, in the device process before its next launch)."""

    def __init__(self, length: int, nbytes: int, process: DeviceProcess):
        global _next_address
        self.length, self.nbytes, self.process = length, nbytes, process
        self.data = 0  # the buffer's start in the mapping: set once the runtime has placed it
        try:
            self.fd = os.memfd_create("minitorch-device-memory", os.MFD_CLOEXEC)
            os.ftruncate(self.fd, length)
        except OSError as exc:
            raise MemoryError(f"cuMemAlloc failed: out of memory ({length} bytes of shared memory: {exc})") from None
        with _address_lock:
            while True:
                at = _next_address
                _next_address += -(-length // (1 << 21)) * (1 << 21) + (1 << 21)  # 2 MB apart: never adjacent
                if _next_address > ADDRESS_END:
                    os.close(self.fd)
                    raise MemoryError("cuMemAlloc failed: the emulator's range of shared device addresses is used up")
                got = _libc.mmap(at, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | MAP_FIXED_NOREPLACE,
                                 self.fd, 0)  # fmt: skip
                if got == at:
                    break
                error = ctypes.get_errno()
                if got not in (None, ctypes.c_void_p(-1).value):  # a kernel without MAP_FIXED_NOREPLACE: elsewhere
                    _libc.munmap(got, length)
                elif error != errno.EEXIST:
                    os.close(self.fd)
                    raise MemoryError(f"cuMemAlloc failed: out of memory ({length} bytes: {os.strerror(error)})")
        self.address = at
        process.mapped(self)

    def __len__(self) -> int:
        return self.length

    def close(self) -> None:
        if self.address:
            _libc.munmap(self.address, self.length)
            self.process.unmapped(self)
            self.address = 0

    def release_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    __del__ = close


# --- the device process --------------------------------------------------------------------------


def binary() -> Path:
    """device_process.cpp built once per machine, in the emulator's cache beside the runtime."""
    source = SOURCE.read_text()
    key = hashlib.sha256((source + toolchain.compiler_version()).encode()).hexdigest()[:16]
    path = toolchain.cache_dir() / f"device-process-{key}"
    if not path.exists():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "device-process"
            toolchain.run([toolchain.CXX, "-std=c++17", "-O2", str(SOURCE), "-o", str(out), "-ldl"], tmp,
                          "building the emulator's device process")  # fmt: skip
            toolchain.install(out, path)
            path.chmod(0o755)
    return path


def _kernel_dependencies() -> list[str]:
    """What kernel libraries link against that the runtime may not: the compiler's own C++ runtime
    (a toolchain outside /usr, as a GPU machine's /opt/gcc, brings a libstdc++ and libgcc_s of its
    own) and UBSan's runtime (toolchain.CHECKS). The device process loads them before its filter, since
    it cannot open a file by name after; a later load of the same name finds them loaded."""
    found = []
    for name in ("libgcc_s.so.1", "libstdc++.so.6", "libubsan.so"):
        asked = [toolchain.CXX, f"-print-file-name={name}"]
        path = os.path.realpath(subprocess.run(asked, capture_output=True, text=True).stdout.strip())
        if os.path.isabs(path) and os.path.isfile(path) and _is_elf(path):  # not a linker script
            found.append(path)
    return found


def _is_elf(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


class DeviceProcess:
    """The device process of this process, started on the first load; see the module's docstring."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.failure: str | None = None  # why it stopped: every later request fails with it
        self.serial = 0  # of the last request: its reply must echo it
        self.to_map: list[SharedMapping] = []  # allocated here, not yet mapped there
        self.to_unmap: list[tuple[int, int, int]] = []  # (map, bytes, 0) freed here, still mapped there
        self.sent: weakref.WeakSet = weakref.WeakSet()
        self.lock = threading.RLock()

    # memory: recorded here, sent before the next launch
    def mapped(self, mapping: SharedMapping) -> None:
        with self.lock:
            self.to_map.append(mapping)

    def unmapped(self, mapping: SharedMapping) -> None:
        with self.lock:
            if mapping in self.to_map:
                self.to_map.remove(mapping)
            elif mapping in self.sent:
                self.to_unmap.append((mapping.address, mapping.length, mapping.data))
            mapping.release_fd()

    def _start(self) -> None:
        runtime = toolchain.runtime_library()._name
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = [str(binary()), str(theirs.fileno()), runtime, *_kernel_dependencies()]
            self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.sock = ours
        self._reply("starting the device process")

    def _fail(self, message: str) -> LaunchError:
        self.failure = self.failure or message
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        return LaunchError(message)

    def _reply(self, what: str, kind: int = 0) -> bytes:
        """The text of the device process's reply (OK), or LaunchError naming what went wrong."""
        try:
            data = self.sock.recv(MAX_MESSAGE + REPLY.size)
        except OSError as exc:
            data, error = b"", exc
        else:
            error = None
        if data and len(data) < REPLY.size:
            raise self._fail(f"{what}: the emulated device's process answered with a malformed reply")
        if not data:  # it ended, or closed its end (then it is ended here)
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
            code = self.proc.wait() if self.proc is not None else None
            if code == -signal.SIGSYS:
                raise self._fail(f"{what}: {refused_call(None)}")
            died = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            raise self._fail(
                f"{what}: the emulated device's process {died} without an answer" + (f" ({error})" if error else "")
            )
        serial, status, number, length = REPLY.unpack_from(data)
        if serial != self.serial:  # a reply the kernel wrote itself (to hide a fault), or a stale one
            raise self._fail(f"{what}: the emulated device's process answered out of turn (a reply the kernel forged?)")
        text = data[REPLY.size : REPLY.size + min(length, MAX_MESSAGE)]
        if status == OK:
            return text
        if status == SYSCALL:
            raise self._fail(f"{what}: {refused_call(number)}")
        message = re.sub(r"[^\x20-\x7e\n]", "?", text.decode("ascii", errors="replace"))[:4000]
        # The emulator's own error (an out-of-bounds access, a barrier divergence): the runtime abandoned
        # the launch and lives on, as it does in one process. Anything else leaves the device unusable.
        if status == FAILED and kind == LAUNCH:
            raise LaunchError(message)
        raise self._fail(f"{what}: {message}")

    def _request(self, kind: int, count: int, body: bytes, what: str, fds: list[int] = ()) -> bytes:
        with self.lock:
            if self.failure is not None:
                raise LaunchError(f"{what}: the emulated device stopped after an earlier error ({self.failure})")
            if self.proc is None:
                self._start()
            self._sync_memory(what)
            self._send(kind, count, body, what, fds)
            return self._reply(what, kind)

    def _send(self, kind: int, count: int, body: bytes, what: str, fds=()) -> None:
        try:
            self.serial += 1
            socket.send_fds(self.sock, [REQUEST.pack(kind, count, self.serial) + body], list(fds))
        except OSError as exc:
            raise self._fail(f"{what}: the emulated device's process is gone ({exc})") from None

    def _sync_memory(self, what: str) -> None:
        """Send what was freed and what was allocated here since the last request."""
        if self.to_unmap:
            freed, self.to_unmap = self.to_unmap, []
            self._send(UNMAP, len(freed), b"".join(REGION.pack(*r) for r in freed), what)
            self._reply(what)
        while self.to_map:
            batch, self.to_map = self.to_map[:MAX_FDS], self.to_map[MAX_FDS:]
            body = b"".join(REGION.pack(m.address, m.length, m.nbytes) for m in batch)
            self._send(MAP, len(batch), body, what, [m.fd for m in batch])
            for m in batch:
                self.sent.add(m)
                m.release_fd()
            self._reply(what)

    def load(self, path: Path, names: list[str]) -> dict[str, tuple[int, int, tuple[int, int, int]]]:
        """{kernel name: (its entry in the device process, __launch_bounds__' threads or 0, cluster dims)}."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            body = b"\0".join(n.encode() for n in names)
            text = self._request(LOAD, len(names), body, "loading the kernel library", [fd])
        finally:
            os.close(fd)
        if len(text) != SYMBOL.size * len(names):
            raise self._fail("loading the kernel library: the device process answered with a malformed reply")
        found = {}
        for i, name in enumerate(names):
            entry, bounds, *cluster = SYMBOL.unpack_from(text, i * SYMBOL.size)
            found[name] = (entry, max(0, min(bounds, 1 << 20)), tuple(max(1, min(c, 1 << 16)) for c in cluster))
        return found

    def launch(self, entry: int, name: str, grid, block, cluster, shared: int, workers: int, resident: int,
               instrument: int, slots: bytes) -> None:  # fmt: skip
        head = LAUNCH_HEAD.pack(entry, *grid, *block, *cluster, shared, workers, resident, instrument)
        self._request(LAUNCH, len(slots) // 8, head + slots + name.encode(), f"kernel '{name}'")

    def trace_rows(self, row_bytes: int) -> bytes:
        """The rows of the last traced launch (trace.h's Row, ``row_bytes`` each), a message's worth at a time."""
        rows, total = b"", None
        while total is None or len(rows) < total * row_bytes:
            text = self._request(TRACE_ROWS, row_bytes, struct.pack("<Q", len(rows) // row_bytes), "reading the trace")
            if len(text) < 8 or (len(text) - 8) % row_bytes or (total is not None and len(text) == 8):
                raise self._fail("reading the access trace: the device process answered with a malformed reply")
            total = min(struct.unpack_from("<Q", text)[0], 1 << 20)
            rows += text[8:]
        return rows[: total * row_bytes]


_process: DeviceProcess | None = None
allocations = 0  # device allocations so far, counted by driver.DeviceAllocation


def isolate() -> None:
    """Run every emulated launch of this process in a device process from now on (the grader's
    checks). Call it before the first device allocation; refuses where the filter cannot be built."""
    global _process
    if _process is not None:
        return
    if os.uname().machine != "x86_64" or not hasattr(os, "memfd_create") or not hasattr(socket, "send_fds"):
        raise Error(
            "the CPU emulator isolates kernels with a seccomp filter written for x86-64 Linux (Python 3.9 or "
            "later): on this machine it cannot run a kernel it must not trust; grade on x86-64 Linux or on a GPU"
        )
    if allocations:
        raise LogicError("isolate() must come before the first device allocation, which the device could not see")
    process = DeviceProcess()
    try:  # now, so that a machine where the filter cannot be installed is told apart from a kernel's fault
        with process.lock:
            process._start()
    except (Error, OSError) as exc:
        raise Error(f"the CPU emulator cannot run a kernel it must not trust on this machine: {exc}") from None
    _process = process


def current() -> DeviceProcess | None:
    """The device process that runs this process's launches, or None (they run in this process)."""
    return _process
