"""A kernel's memory accesses on the CPU emulator, counted as Nsight Compute counts them on a GPU.

Per source line of each global and shared load and store of one launch: the requests (one per
warp-level execution of the instruction), the 32-byte sectors a global request touches and the
shared-memory wavefronts a shared request takes (beyond one a phase: bank conflicts), with the totals
under the names of ncu's metrics. The counting rules are trace.cpp's, written once there with where
each comes from; a kernel is built for it with ThreadSanitizer's calls (compiler.py's trace flavour),
so only a traced launch pays.

    from minitorch_cuda.emulator.access import access_report, tracing

    report = access_report(source, "copy", grid=(8,), block=(256,), args=[out, x, np.int32(n)])
    print(report)                  # the table
    report.figure(5)               # one warp's accesses of line 5: lanes to sectors or banks
    with tracing() as reports:     # or: every launch inside, through the framework's own launchers
        ...

``access_report`` runs anywhere: in this process where the emulator is selected
(``MINITORCH_CUDA_EMULATE=1``), else in a child process that selects it (``python -m
minitorch_cuda.emulator.access``, the request and the report pickled through files), so a chapter's cell
draws the same figure on a GPU machine and on a CPU-only book build. ``tracing`` wraps this process's own
launches and so needs the emulator here. On a GPU, Nsight Compute reads the same counters from the
hardware. What the emulator cannot see: caches (hit rates, L2 and DRAM traffic) and
time; and it counts the accesses g++ makes of the source, which are nvcc's but where nvcc merges
neighbouring accesses into one wider instruction (four unrolled ``As[ty][k]`` reads into one 16-byte
load) or keeps a value in a register that g++ reloads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .. import emulator
from . import driver
from .errors import LogicError
from .toolchain import MAIN

KINDS, SPACES = ("load", "store", "atomic"), ("global", "shared")
SECTOR_BYTES, BANKS, BANK_BYTES = 32, 32, 4  # as trace.cpp counts them
OPS = {"load": "ld", "store": "st"}  # ncu's op_ld and op_st


@dataclasses.dataclass(frozen=True)
class Sample:
    """One warp's request of a line: the first one of the lowest warp of the first block that made it."""

    block: int  # linear in the grid
    warp: int
    bytes: int  # each lane's access
    offsets: tuple[int | None, ...]  # per lane, the byte offset in its buffer or shared variable; None: inactive
    buffer: str  # what the offsets are in: a parameter's name, or "shared memory"


@dataclasses.dataclass(frozen=True)
class Access:
    """One source line's loads or stores (or atomics) in one memory space, summed over the launch."""

    file: str  # the kernel's source (toolchain.MAIN), or a header it includes
    line: int  # 0: unknown
    code: str
    kind: str  # load, store, atomic
    space: str  # global, shared
    bytes: int  # each lane's access
    requests: int
    sectors: int  # global: 32-byte sectors
    wavefronts: int  # shared
    ideal: int  # shared: the wavefronts without bank conflicts
    sample: Sample  # of the line's first instruction
    samples: tuple[Sample, ...] = ()  # one per instruction of the line (a line may read two arrays), in code order

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def conflicts(self) -> int:
        """Shared: the wavefronts beyond the ideal (ncu's l1tex__data_bank_conflicts_...)."""
        return self.wavefronts - self.ideal

    @property
    def conflict_degree(self) -> float:
        """Shared: wavefronts per ideal wavefront: 1 without conflicts, 32 when every lane hits one bank."""
        return self.wavefronts / self.ideal if self.ideal else 0.0


@dataclasses.dataclass
class AccessReport:
    """The accesses of one traced launch of ``kernel``, by source line."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    accesses: list[Access]

    def metrics(self) -> dict[str, int]:
        """The launch's totals under Nsight Compute's metric names (each a ``.sum``), as ncu sums them."""
        out: dict[str, int] = {}
        for a in self.accesses:
            if a.kind not in OPS:
                continue
            op = OPS[a.kind]
            if a.space == "global":
                names = {f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum": a.requests,
                         f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum": a.sectors}  # fmt: skip
            else:
                names = {f"smsp__sass_inst_executed_op_shared_{op}.sum": a.requests,
                         f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum": a.wavefronts,
                         f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum": a.conflicts}  # fmt: skip
            for name, value in names.items():
                out[name] = out.get(name, 0) + value
        return dict(sorted(out.items()))

    def find(self, line: int | str, kind: str | None = None, space: str | None = None) -> Access:
        """The access of ``line`` (its number in the kernel's source, or text its code contains) of that
        kind and space."""
        found = [
            a
            for a in self.accesses
            if (a.line == line and a.file == MAIN if isinstance(line, int) else line in a.code)
            and kind in (None, a.kind)
            and space in (None, a.space)
        ]
        if not found:
            have = ", ".join(f"line {a.line} ({a.kind} {a.space})" for a in self.accesses)
            raise LookupError(f"no {kind or ''} {space or ''} access at {line!r} in {self.kernel}; it has: {have}")
        return found[0]

    def table(self) -> str:
        where = {a: str(a.line) if a.file == MAIN else f"{Path(a.file).name}:{a.line}" for a in self.accesses}
        width = max([4, *map(len, where.values())])
        head = f"{'line':>{width}}  {'kind':6} {'space':6} {'bytes':>5} {'requests':>10}  {'per request':<26} code"
        rows = [f"{self.kernel}: grid {self.grid}, block {self.block}", head]
        for a in self.accesses:
            if a.space == "global":
                per = f"{a.sectors_per_request:.2f} sectors"
            else:
                per = f"{a.conflict_degree:.2f}-way ({a.conflicts} conflicts)"
            rows.append(
                f"{where[a]:>{width}}  {a.kind:6} {a.space:6} {a.bytes:>5} {a.requests:>10}  {per:<26} {a.code}"
            )
        return "\n".join(rows)

    __str__ = table

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the table
        printer.text(self.table())

    def figure(self, line: int | str, kind: str | None = None, space: str | None = None, ax=None,
               instruction: int = 0):  # fmt: skip
        """One warp's request of ``line``: each lane (across) to the 32-byte sector (global) or the bank
        (shared) of its access (up), lanes that share a bank with a different word in red. ``instruction``:
        which of the line's loads (or stores), in code order, where it has several (``out[i] = x[idx[i]]``
        loads idx, then x)."""
        import matplotlib.pyplot as plt

        a = self.find(line, kind, space)
        samples = a.samples or (a.sample,)
        if not 0 <= instruction < len(samples):
            have = f"{len(samples)} {a.space} {a.kind} instruction(s)"
            raise IndexError(f"line {a.line} has {have}, not {instruction + 1}: instruction counts from 0")
        s = samples[instruction]
        if ax is None:
            _, ax = plt.subplots(figsize=(7.5, 3.2))
        lanes = [lane for lane, o in enumerate(s.offsets) if o is not None]
        if a.space == "global":
            sectors = [s.offsets[lane] // SECTOR_BYTES for lane in lanes]
            base = min(sectors)
            ax.scatter(lanes, [x - base for x in sectors], s=24, color="tab:blue")
            ax.set_ylim(-1, max(max(sectors) - base, 3) + 1)  # one sector still reads as a row of dots
            ax.set_ylabel(f"32-byte sector of {s.buffer}\n(from its sector {base})")
            here = len(set(sectors))
            summary = f"{here} sector{'s' * (here > 1)}; {a.sectors_per_request:.2f} a request in all"
        else:
            words = {lane: s.offsets[lane] // BANK_BYTES for lane in lanes}
            banks = {lane: w % BANKS for lane, w in words.items()}
            per_bank = {b: len({w for lane, w in words.items() if banks[lane] == b}) for b in set(banks.values())}
            colors = ["tab:red" if per_bank[banks[lane]] > 1 else "tab:blue" for lane in lanes]
            ax.scatter(lanes, [banks[lane] for lane in lanes], s=24, color=colors)
            ax.set_ylim(-1, BANKS)
            ax.set_ylabel("bank (red: shared with another word)")
            summary = f"{a.conflict_degree:.2f} wavefronts a request\n{a.conflicts} bank conflicts in all"
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_xlim(-1, 32)
        ax.set_xlabel(f"lane of warp {s.warp}, block {s.block}")
        where = f"line {a.line}" if a.file == MAIN else f"{Path(a.file).name} line {a.line}"
        if len(samples) > 1:
            where += f", {a.kind} {instruction + 1} of {len(samples)}"
        ax.set_title(f"{self.kernel}, {where}\n{a.space} {a.kind}, {s.bytes} bytes\n{summary}", fontsize="medium")
        return ax.figure


# --- tracing launches ---------------------------------------------------------------------------------


def _require_emulator() -> None:
    if not emulator.selected():
        raise LogicError(
            "access analysis counts on the CPU emulator: set MINITORCH_CUDA_EMULATE=1 before importing "
            "minitorch_cuda (in a notebook, %env MINITORCH_CUDA_EMULATE=1 in its first cell). On a GPU, "
            "Nsight Compute reads the same counters: python -m minitorch_cuda.experiments.ncu"
        )


@contextlib.contextmanager
def tracing() -> Iterator[list[AccessReport]]:
    """Every emulated launch inside the block is traced (built for tracing where it was not, by
    Library.traced); the list it gives fills with their reports, in launch order."""
    _require_emulator()
    reports: list[AccessReport] = []
    outer = driver.tracer

    def keep(function: driver.Function, grid, block, args, rows) -> None:
        reports.append(_report(function, grid, block, args, rows))

    driver.tracer = keep
    try:
        yield reports
    finally:
        driver.tracer = outer


def _report(function: driver.Function, grid, block, args, rows: list[driver.TraceRow]) -> AccessReport:
    """The rows of a traced launch by source line (every code address of a line summed)."""
    library = function.library
    lines = driver.source_lines(library, {row.pc for row in rows})
    buffers = {start: name for start, (name, _) in driver._buffer_names(library, function.name, args).items()}
    merged: dict[tuple[str, int, str, str], dict] = {}
    for row in sorted(rows, key=lambda r: (lines.get(r.pc, ("~", 0)), r.pc)):  # the kernel's own lines first
        file, line = lines.get(row.pc, ("", 0))
        key = (file, line, KINDS[row.kind], SPACES[row.space])
        if key not in merged:
            merged[key] = dict(file=file or MAIN, line=line, code=_code(library, file, line), kind=key[2],
                               space=key[3], bytes=int(row.bytes), requests=0, sectors=0, wavefronts=0, ideal=0,
                               samples=())  # fmt: skip
        m = merged[key]
        m["samples"] += (_sample(row, buffers),)
        for field in ("requests", "sectors", "wavefronts", "ideal"):
            m[field] += int(getattr(row, field))
    accesses = [Access(**m, sample=m["samples"][0]) for m in merged.values()]
    return AccessReport(function.name, tuple(grid), tuple(block), accesses)


def _sample(row: driver.TraceRow, buffers: dict[int, str]) -> Sample:
    """The warp's request a row (one code address) kept."""
    offsets = tuple(int(row.sample[i]) if row.sample_lanes >> i & 1 else None for i in range(32))
    name = "shared memory" if row.space == 1 else buffers.get(row.sample_region, "a device buffer")
    return Sample(int(row.sample_block), int(row.sample_warp), int(row.bytes), offsets, name)


def _code(library, file: str, line: int) -> str:
    """The text of ``line`` of the kernel's source (``file`` MAIN) or of a header on this machine."""
    if file == MAIN:
        text = library.source
    else:
        try:
            text = Path(file).read_text()
        except OSError:
            text = ""
    lines = text.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else "(no source line known)"


# --- one launch of a kernel's source ------------------------------------------------------------------

_CODES = {np.dtype(np.int32): "i", np.dtype(np.uint32): "I", np.dtype(np.float32): "f"}


def _argument(value, name: str, keep: list) -> tuple[str, object]:
    """(prepare()'s code, the value to pass) of one argument: an array becomes a device buffer."""
    if isinstance(value, driver.DeviceAllocation):
        return "P", value
    if isinstance(value, np.ndarray):
        buffer = driver.to_device(np.ascontiguousarray(value))
        keep.append((value, buffer))
        return "P", buffer
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: pass a kernel's flag as an int, not {value!r}")
    if isinstance(value, (int, np.integer)):
        code = _CODES.get(np.asarray(value).dtype, "i") if isinstance(value, np.integer) else "i"
        return code, int(value)
    if isinstance(value, (float, np.floating)):
        return "f", float(value)
    raise TypeError(
        f"{name} is a {type(value).__name__}: access_report takes numpy arrays (copied to the device and "
        "back), device buffers, ints and floats"
    )


def access_report(
    kernel,
    name: str,
    grid: Sequence[int],
    block: Sequence[int],
    args: Sequence,
    shared_bytes: int = 0,
    options: Sequence[str] = (),
) -> AccessReport:
    """Launch kernel ``name`` once on the emulator, traced, and return its accesses by source line.

    ``kernel``: CUDA C source (each ``__global__`` function ``extern "C"``, as the exercises write them)
    or a module compiled by the emulator's SourceModule. ``args``: the kernel's arguments in order; a
    numpy array is copied to a device buffer and back after the launch (so it holds what the kernel
    wrote), an int is an ``int`` parameter (np.uint32 an ``unsigned``), a float a ``float``.
    ``options``: nvcc's -D and -I options that mean something on the CPU.

    Where this process does not run CUDA on the emulator (a GPU machine, or no ``MINITORCH_CUDA_EMULATE``),
    the launch runs on the emulator in a child process (``_in_child``): the source and the numpy arrays go
    there, the report and the arrays as the kernel left them come back; what the kernel printed is
    printed here."""
    if not emulator.selected():
        return _in_child(kernel, name, grid, block, args, shared_bytes, options)
    from .compiler import SourceModule

    if not isinstance(kernel, str) and not hasattr(kernel, "library"):
        raise TypeError(
            f"access_report takes the kernel's CUDA C source or a module the emulator compiled, not a "
            f"{type(kernel).__name__} (a GPU's module runs on the GPU: Nsight Compute counts its accesses)"
        )
    module = kernel if hasattr(kernel, "library") else SourceModule(kernel, options=list(options), no_extern_c=True)
    function = module.get_function(name)
    keep: list = []
    codes, values = (
        zip(*(_argument(v, f"argument {i} of {name}", keep) for i, v in enumerate(args))) if args else ((), ())
    )
    function.prepare("".join(codes))
    with tracing() as reports:
        function.prepared_call(tuple(grid), tuple(block), *values, shared_size=shared_bytes)
    for array, buffer in keep:
        if array.flags.writeable and array.flags.c_contiguous:
            driver.memcpy_dtoh(array, buffer)
        buffer.free()
    return reports[0]


# --- the same, in a child process that runs CUDA on the emulator --------------------------------------


def _in_child(kernel, name, grid, block, args, shared_bytes, options) -> AccessReport:
    """access_report in ``python -m minitorch_cuda.emulator.access REQUEST REPLY`` with the emulator
    selected; the caller's arrays receive what the kernel wrote, as in this process."""
    if not isinstance(kernel, str):
        raise TypeError(
            f"access_report outside the emulator runs the kernel in a child process and takes its CUDA C "
            f"source there, not a {type(kernel).__name__} (a compiled module stays in the process that built it)"
        )
    for i, value in enumerate(args):
        if not isinstance(value, (np.ndarray, bool, np.bool_, int, float, np.integer, np.floating)):
            raise TypeError(
                f"argument {i} of {name} is a {type(value).__name__}: outside the emulator access_report takes "
                "numpy arrays (copied to the emulator's device and back), ints and floats"
            )
    request = dict(kernel=kernel, name=name, grid=tuple(grid), block=tuple(block), args=list(args),
                   shared_bytes=shared_bytes, options=list(options))  # fmt: skip
    root = str(Path(__file__).resolve().parents[2])  # this minitorch_cuda, installed or not
    env = {**os.environ, **emulator.switched_on(),
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="access_report_") as tmp:
        asked, answered = Path(tmp, "request.pickle"), Path(tmp, "reply.pickle")
        asked.write_bytes(pickle.dumps(request))
        done = subprocess.run([sys.executable, "-m", __name__, str(asked), str(answered)], env=env,
                              capture_output=True, text=True)  # fmt: skip
        print(done.stdout, end="")
        print(done.stderr, end="", file=sys.stderr)
        if not answered.exists():
            raise LogicError(f"the emulator's child process for {name} ended (exit {done.returncode}) with no report")
        reply = pickle.loads(answered.read_bytes())
    if "error" in reply:
        raise reply["error"]
    for i, array in enumerate(args):
        if isinstance(array, np.ndarray) and array.flags.writeable:
            array[...] = reply["args"][i]
    return reply["report"]


def _serve(asked: Path, answered: Path) -> None:
    """The child's side: one access_report on the emulator, its report (or its exception) pickled."""
    request = pickle.loads(asked.read_bytes())
    try:
        reply = {"report": access_report(**request), "args": request["args"]}
    except Exception as exc:  # noqa: BLE001  (any failure goes back to the caller, as its own)
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # noqa: BLE001  (an exception that does not survive pickling: its text does)
            exc = LogicError(f"{type(exc).__name__}: {exc}")
        reply = {"error": exc}
    answered.write_bytes(pickle.dumps(reply))


if __name__ == "__main__":
    if not emulator.selected():
        sys.exit(f"python -m {__spec__.name} REQUEST REPLY runs with {emulator.SWITCH}; access_report sets it")
    from minitorch_cuda.emulator import access  # the module by its name, so its report unpickles in the caller

    access._serve(Path(sys.argv[1]), Path(sys.argv[2]))
