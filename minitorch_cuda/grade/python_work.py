"""The rule "no Python code per element", enforced by what the code does, not how it is spelt.

A whole-array function runs the same Python lines for a tile of 1,000 values as for one
of 8,000; a function that loops in Python over the elements (``for``, ``while``, a
comprehension, ``np.vectorize`` or ``map`` with a function of its own) runs more lines the
more values it gets. The subject counts every line its student code executes (``Counter``,
a trace function set before the cell runs: the cell may not set one of its own,
``subject_rules``); the checker calls the student's function on a small and a large input and
fails it when the count grows with the input, or passes a bound (``require_whole_array``).

The count does not travel over the channel, whose Python (and the standard library it runs on)
the student's code could rewrite in its process. At each return of the exercise's function the
trace function itself writes a ``Record`` to a pipe of its own: a secret the checker gave the
subject before the cell ran, the count of student lines run since the subject started, and a
digest of the value the function returned. The checker takes the lines between two records (so
student code run before the call, in a patched channel, counts too) and requires the digest of
the value it received (so no code after the return can put another result in its place).

Student code is code whose file is not an installed module's (the cell, strings it
executes), or whose file name the student's code compiled after the cell began (``compile``
with the name of a numpy file: the counter's ``student_files``); library code (numpy, the
framework) is not counted. So that no code can pass for a library's, ``subject_rules``
refuses in these exercises what would make code objects or reach this counter other than by
``compile``: frames, ``code.replace``, ``marshal``.
"""

from __future__ import annotations

import hashlib
import os
import select
import sys
import time

import numpy as np

from . import channel
from .verdict import HOST_SIDE, call, fail

EXERCISES = {"2.1", "19.1", "20.1"}  # the exercises whose rules rule out Python per element
# more lines than this per 100 extra elements means per-element Python (a loop over chunks of
# 100 or more elements, or over the steps of an algorithm, stays under it)
LINES_PER_100 = 1
# and no call may run more lines than a quarter of its elements (a loop over the elements runs one
# at least, however many the small input's call was made to run: a whole-array function runs tens)
ELEMENTS_PER_LINE = 4
SECRET_BYTES = 16
RECORD_BYTES = SECRET_BYTES + 8 + 32  # the secret, the count, the result's digest
RECORD_WAIT = 10.0  # seconds for a record after the call's reply


def digester():
    """``digest(value)``: sha256 of an array's dtype, shape and bytes (32 zero bytes for anything else),
    made of functions taken now, so that code that later patches a module changes none of them."""
    sha256, ndarray, is_instance, text, tobytes = hashlib.sha256, np.ndarray, isinstance, repr, np.ndarray.tobytes

    def digest(value) -> bytes:
        if not is_instance(value, ndarray):
            return bytes(32)
        return sha256(text((value.dtype.str, value.shape)).encode() + tobytes(value)).digest()

    return digest


class Counter:
    """Counts the line events of student code (the subject's side). Its state lives in the closures
    ``install`` makes, which nothing the student's code can reach holds (``sys.gettrace`` answers
    None from then on); its records leave through ``record_fd`` alone."""

    def __init__(self, library_dirs: list[str], secret: bytes, record_fd: int):
        self.library_dirs = tuple(d.rstrip("/") + "/" for d in library_dirs if d)
        self.secret, self.record_fd = secret, record_fd
        self.student_files: set[str] = set()  # for subject_rules.install: the file names student code compiled

    def install(self):
        """Trace from now on; returns ``watch(function)``, which names the exercise's function (after the
        cell ran) and says whether it is one whose returns can be recorded (a plain Python function)."""
        library_dirs, student_files, student_code = self.library_dirs, self.student_files, {}
        secret, record_fd, digest = self.secret, self.record_fd, digester()
        write, to_bytes, startswith, function_code = os.write, int.to_bytes, str.startswith, type(digester).__code__
        state = {"lines": 0, "code": None, "depth": 0}
        os.set_blocking(record_fd, False)  # a record nobody reads is lost, never a hang

        def is_student(code) -> bool:
            known = student_code.get(code)
            if known is None:
                name = code.co_filename
                known = name in student_files or not startswith(name, library_dirs)
                student_code[code] = known
            return known

        def line(frame, event, arg):
            if event == "line":
                state["lines"] += 1
            elif event == "return" and frame.f_code is state["code"]:
                state["depth"] -= 1
                if state["depth"] == 0:  # the exercise's function returns to its caller: a record
                    try:
                        write(record_fd, secret + to_bytes(state["lines"], 8, "big") + digest(arg))
                    except OSError:
                        pass
            return line

        def trace(frame, event, arg):
            """The global trace function: line tracing for student frames only."""
            if frame.f_code is state["code"]:
                state["depth"] += 1
            return line if is_student(frame.f_code) else None

        def watch(function) -> bool:
            code = function_code.__get__(function) if callable(function) else None
            try:
                state["code"] = code if code is not None and is_student(code) else None
            except TypeError:  # not a Python function: nothing to record
                state["code"] = None
            return state["code"] is not None

        sys.settrace(trace)
        sys.gettrace = lambda: None  # the trace function's closures hold the count
        return watch


class Records:
    """The checker's end of the records' pipe, and the secret only the subject's counter knows."""

    def __init__(self, fd: int, secret: bytes):
        self.fd, self.secret, self.pending = fd, secret, b""
        os.set_blocking(fd, False)

    def _read_some(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return True
        self.pending += chunk
        return bool(chunk)

    def drain(self) -> None:
        """Forget every record written so far (those of calls whose lines were not asked for)."""
        while self._read_some(0):
            pass
        self.pending = self.pending[len(self.pending) - len(self.pending) % RECORD_BYTES :]

    def next(self, result, what: str) -> int:
        """The count of the record the call that returned ``result`` wrote; fails (HOST_SIDE) where there
        is none, or it is not the counter's, or it is of another result."""
        deadline = time.monotonic() + RECORD_WAIT
        while len(self.pending) < RECORD_BYTES and self._read_some(deadline - time.monotonic()):
            pass
        if len(self.pending) < RECORD_BYTES:
            fail(HOST_SIDE, f"{what}: the lines of Python it ran could not be counted (write it as a def of "
                 "your own that returns the numpy array)")  # fmt: skip
        record, self.pending = self.pending[:RECORD_BYTES], self.pending[RECORD_BYTES:]
        if record[:SECRET_BYTES] != self.secret or record[-32:] != digester()(result):
            fail(
                HOST_SIDE,
                f"{what}: the result the checker received is not the one your function returned, or its line "
                "count did not come from the grader's counter: code of yours rewrote what the subject sends",
            )
        return int.from_bytes(record[SECRET_BYTES : SECRET_BYTES + 8], "big")


def library_dirs() -> list[str]:
    """Where installed code lives: the interpreter's prefixes and site-packages (never the cell)."""
    import site
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), sysconfig.get_paths()["stdlib"]}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the framework itself
    return sorted(os.path.realpath(d) for d in dirs) + sorted(dirs)


def lines_of_call(fn, x, what: str) -> int:
    """The student code's line count, since the subject started, at the end of ``fn(x)`` in the subject;
    -1 outside the grader."""
    records = getattr(getattr(fn, "_peer", None), "records", None) if isinstance(fn, channel.Proxy) else None
    if records is None:
        call(what, fn, x)
        return -1
    records.drain()
    return records.next(call(what, fn, x), what)


def require_whole_array(fn, small, large, what: str) -> str | None:
    """Fail with HOST_SIDE if ``fn`` runs more Python lines on ``large`` than on ``small`` in
    proportion to their sizes, or more than one per ``ELEMENTS_PER_LINE`` elements of ``large``; a line
    for the feedback when it passed (None outside the grader). Lines are counted between the records
    of consecutive calls: whatever student code ran in between (the call, and code of its own before
    it) is the later call's."""
    start = lines_of_call(fn, small, f"{what} on {small.size} values")
    if start < 0:
        call(what, fn, large)
        return None
    few = lines_of_call(fn, small, f"{what} on {small.size} values") - start
    many = lines_of_call(fn, large, f"{what} on {large.size} values") - start - few
    allowed = LINES_PER_100 * (large.size - small.size) // 100
    if many - few > allowed or many > large.size // ELEMENTS_PER_LINE:
        fail(
            HOST_SIDE,
            f"{what} runs Python for each element: {few} lines of your code for {small.size} values, "
            f"{many} for {large.size}. Work on the whole array at once (numpy operations on the array, "
            "a loop only over steps or bits, never over the elements)",
        )
    return f"whole-array code: {few} lines of Python for {small.size} values, {many} for {large.size}"
