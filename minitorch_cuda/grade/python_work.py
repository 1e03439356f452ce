"""The rule "no Python code per element", enforced by what the code does, not how it is spelt.

A whole-array function runs the same Python lines for a tile of 1,000 values as for one
of 8,000; a function that loops in Python over the elements (``for``, ``while``, a
comprehension, ``np.vectorize`` or ``map`` with a function of its own) runs more lines the
more values it gets. The subject counts the lines its student code executes during one
call (``Counter``, a trace function set before the cell runs: the cell may not set one of
its own, ``subject_rules``); the checker calls the student's function on a small and a
large input and fails it when the count grows with the input (``require_whole_array``).

Student code is code whose file is not an installed module's (the cell, strings it
executes), or whose file name the student's code compiled after the cell began (``compile``
with the name of a numpy file: the counter's ``student_files``); library code (numpy, the
framework) is not counted. So that no code can pass for a library's, ``subject_rules``
refuses in these exercises what would make code objects or reach this counter other than by
``compile``: frames, ``code.replace``, ``marshal``.
"""

from __future__ import annotations

import sys

from . import channel, subject_rules
from .verdict import HOST_SIDE, call, fail

EXERCISES = {"2.1", "19.1", "20.1"}  # the exercises whose rules rule out Python per element
# more lines than this per 100 extra elements means per-element Python (a loop over chunks of
# 100 or more elements, or over the steps of an algorithm, stays under it)
LINES_PER_100 = 1


class Counter:
    """Counts the line events of student code while a check asks (the subject's side). Its state lives
    in the closures ``install`` makes, which nothing the student's code can reach holds: not this
    object, not a module (``sys.gettrace`` answers None from then on), so that code reaching this
    module or the trace function changes no count."""

    def __init__(self, library_dirs: list[str]):
        self.library_dirs = tuple(d.rstrip("/") + "/" for d in library_dirs if d)
        self.student_files: set[str] = set()  # for subject_rules.install: the file names student code compiled

    def install(self, peer) -> None:
        library_dirs, student_files, student_code = self.library_dirs, self.student_files, {}
        state = [False, 0]  # active, lines
        settrace, startswith = sys.settrace, str.startswith

        def is_student(code) -> bool:
            known = student_code.get(code)
            if known is None:
                name = code.co_filename
                known = name in student_files or not startswith(name, library_dirs)
                student_code[code] = known
            return known

        def line(frame, event, arg):
            if event == "line" and state[0]:
                state[1] += 1
            return line

        def trace(frame, event, arg):
            """The global trace function: line tracing for student frames only."""
            return line if state[0] and is_student(frame.f_code) else None

        def start() -> None:
            state[:] = [True, 0]

        def stop() -> int:
            state[0] = False
            return state[1]

        peer.services["python_lines_start"], peer.services["python_lines_stop"] = start, stop
        settrace(trace)
        sys.gettrace = lambda: None  # the trace function's closures hold the count


def library_dirs() -> list[str]:
    """Where installed code lives: the interpreter's prefixes and site-packages (never the cell)."""
    import os
    import site
    import sysconfig

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), sysconfig.get_paths()["stdlib"]}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the framework itself
    return sorted(os.path.realpath(d) for d in dirs) + sorted(dirs)


def lines_of_call(fn, x, what: str) -> int:
    """The student code's line count during ``fn(x)`` in the subject; -1 outside the grader."""
    if not isinstance(fn, channel.Proxy):
        call(what, fn, x)
        return -1
    peer = fn._peer
    peer.request({"op": "service", "name": "python_lines_start"})
    try:
        call(what, fn, x)
    finally:
        lines = peer.request({"op": "service", "name": "python_lines_stop"})
    return int(lines)


def require_whole_array(fn, small, large, what: str) -> str | None:
    """Fail with HOST_SIDE if ``fn`` runs more Python lines on ``large`` than on ``small`` in
    proportion to their sizes; a line for the feedback when it passed (None outside the grader)."""
    few = lines_of_call(fn, small, f"{what} on {small.size} values")
    many = lines_of_call(fn, large, f"{what} on {large.size} values")
    if few < 0:
        return None
    grown = many - few
    allowed = LINES_PER_100 * (large.size - small.size) // 100
    if grown > allowed:
        fail(
            HOST_SIDE,
            f"{what} runs Python for each element: {few} lines of your code for {small.size} values, "
            f"{many} for {large.size}. Work on the whole array at once (numpy operations on the array, "
            "a loop only over steps or bits, never over the elements)",
        )
    return f"whole-array code: {few} lines of Python for {small.size} values, {many} for {large.size}"
