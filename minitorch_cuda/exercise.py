"""Helpers for the exercise notebooks.

A kernel exercise is a Python string of CUDA C in a cell tagged with the
exercise id; the cell ends with ``cuda_exercise("N.k", source)``, which

- raises ``ExerciseNotDone`` (a ``NotImplementedError`` that a notebook shows as
  one line of what to do) while the source still holds the ``// TODO: Exercise N.k``
  placeholder,
- checks that the source defines ``__global__ void <kernel>(...)`` with the
  parameters the framework launches it with, and
- with a GPU, compiles it, so that nvcc's errors show up in that cell; on the
  CPU emulator (``MINITORCH_CUDA_EMULATE=1``) it first compiles it with nvcc for
  a real GPU where nvcc is on PATH (nvcc's and ptxas's messages with line
  numbers; registers, spills and shared memory per kernel), then for the
  emulator.

The check cell after it runs ``report(id, artifact)``, the very checks the
grader runs (on the CPU emulator within ``CHECK_SECONDS``, the grader's limit).
(A string, not a ``%%cuda`` cell magic: a string can be passed around, diffed
and read by the grader without running the cell: the grader takes the kernel
from the cell's string literal and never runs the cell.)

This is the one module the notebooks import from the course's tooling:
``cuda_exercise``, ``report``, ``device_line`` (the setup cell's first line),
and the fake devices chapters 4, 5 and 18 teach with (``FakeDevice``,
``QueueingDevice``, ``GraphDevice``, ``FakeArray``, ``TinyStep``).
"""

from __future__ import annotations

import contextlib

from . import emulator
from .grade import exercises
from .grade.fakes import FakeArray, FakeDevice, GraphDevice, QueueingDevice, TinyStep

__all__ = [
    "ExerciseNotDone", "FakeArray", "FakeDevice", "GraphDevice", "QueueingDevice", "TinyStep", "cuda_exercise",
    "device_line", "report", "say_if_missing",
]  # fmt: skip

# A check cell's time limit on the CPU emulator, the grader's default per exercise (rubric.toml):
# an endless loop in a kernel stops there with a message instead of hanging the notebook.
CHECK_SECONDS = 120


class _OneLine:
    """An error a notebook shows as one line saying what to do: IPython prints what
    ``_render_traceback_`` returns instead of the traceback (whose frames would be the course's)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class ExerciseNotDone(_OneLine, NotImplementedError):
    """An exercise that still holds its stub."""

    def __init__(self, exercise_id: str, then: str):
        ex = exercises.get(exercise_id)
        if ex.kind == "cuda":
            stub = f"its kernel still holds `{exercises.kernel_stub(ex.id)}`"
        else:
            stub = f"`{ex.name}` still raises NotImplementedError"
        super().__init__(f"Exercise {ex.id} is not done yet: {stub}; {then}")


class KernelNotCompiled(_OneLine, RuntimeError):
    """A check cell run on a kernel whose own cell failed to compile it: the compiler's error is
    shown once, in that cell, not again here by another compiler (the emulator's g++)."""

    def __init__(self, exercise_id: str):
        super().__init__(
            f"Exercise {exercise_id}'s kernel did not compile: its cell above shows the compiler's error; "
            "fix the kernel there, run that cell, then this one"
        )


# Exercise id -> the kernel source its cell last failed to compile (cleared when one compiles).
_NOT_COMPILED: dict[str, str] = {}


def device_line() -> str:
    """The setup cell's line: where kernels run here, and what to do without a GPU. The way on
    comes first; why there is no GPU (whose fix, the `cuda` extra, needs one) comes last."""
    from .device import cuda_available, cuda_unavailable_reason, gpu_for_timing

    if gpu_for_timing():
        return "GPU available: True"
    if cuda_available():
        return (
            f"GPU available: False; kernels run on the CPU emulator ({emulator.SWITCH}) instead: "
            "checked for correctness, and timings there are the CPU's, not a GPU's"
        )
    return f"GPU available: False. {_EMULATOR_WAY} (Why no GPU: {cuda_unavailable_reason()}.)"


# What a student without a GPU does, in the setup line and in a kernel cell's note.
_EMULATOR_WAY = (
    f"The kernel exercises run on the CPU emulator: make `%env {emulator.SWITCH}` the first cell, "
    "then Kernel > Restart and run all."
)


def _missing(module: str, extra: str, needed_by: str) -> str:
    """What to do about an optional package an exercise needs, or "" where it is installed."""
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        return ""
    return (
        f"{module} is not installed: {needed_by} needs it (its cells stop at `import {module}`); install the "
        f"`{extra}` extra (pip install -e '.[{extra}]'), then Kernel > Restart. The rest runs without it."
    )


def say_if_missing(module: str, extra: str, needed_by: str) -> None:
    """The setup cell's line for an optional package an exercise needs, printed only where it is
    missing: said once at the start, not first met as a traceback."""
    if line := _missing(module, extra, needed_by):
        print(line)


class PackageMissing(_OneLine, ModuleNotFoundError):
    """A check cell whose exercise needs a package that is not installed: one line, not the
    NameError of a function its exercise cell could not define."""


def require(module: str, extra: str, needed_by: str) -> None:
    """Raise PackageMissing, saying which extra to install, where ``module`` is not installed."""
    if line := _missing(module, extra, needed_by):
        raise PackageMissing(line, name=module)


class Outcome:
    """What ``report`` returns: the check's result, which the report already printed,
    so a notebook cell that ends with ``report(...)`` shows it once, not again as a repr."""

    def __init__(self, result):
        self.result = result

    def __getattr__(self, name):  # .passed, .reason, .message, ... of the CheckResult
        return getattr(self.result, name)

    def __bool__(self) -> bool:
        return bool(self.result.passed)

    def __repr__(self) -> str:
        return f"Outcome({self.result!r})"

    def _ipython_display_(self) -> None:
        """Printed by the report already: IPython shows nothing more."""


def report(exercise_id: str, artifact) -> Outcome:
    """Run the grader's checks of an exercise here and print what passed and what failed; on the
    CPU emulator within CHECK_SECONDS (Kernel > Interrupt stops a kernel there too)."""
    from .grade.checks import report as run

    limit = contextlib.nullcontext()
    if emulator.selected():
        from .emulator.driver import time_limit

        limit = time_limit(CHECK_SECONDS)
    if isinstance(artifact, str) and _NOT_COMPILED.get(exercises.get(exercise_id).id) == artifact:
        raise KernelNotCompiled(exercises.get(exercise_id).id)
    try:
        with limit:
            return Outcome(run(exercise_id, artifact))
    except NotImplementedError:
        raise ExerciseNotDone(exercise_id, "write it in its cell, run that cell, then this one") from None


def cuda_exercise(exercise_id: str, source: str) -> None:
    """Validate a kernel exercise's source early. Returns nothing, so that the cell
    that ends with it does not echo the kernel's source back."""
    ex = exercises.get(exercise_id)
    if exercises.holds_stub(source):
        raise ExerciseNotDone(ex.id, "write the kernel in this cell and run it again")
    exercises.check_source_entry(ex, source)
    from .device import cuda_available, cuda_unavailable_reason

    if not cuda_available():
        print(
            f"Name and parameters checked, not compiled: no usable GPU here. {_EMULATOR_WAY} "
            f"(Why no GPU: {cuda_unavailable_reason()}.)"
        )
        return
    from .cuda.driver import EMULATED
    from .cuda.runtime import KernelCompileError, compile_module

    label = f"your kernel {ex.kernel!r} (exercise {ex.id})"
    try:
        if EMULATED:
            _nvcc_report(source, label)
        compile_module(source, label)
    except KernelCompileError:
        _NOT_COMPILED[ex.id] = source
        raise
    _NOT_COMPILED.pop(ex.id, None)


def _nvcc_report(source: str, label: str) -> None:
    """Under emulation: what nvcc says about the source for a real GPU, one line per kernel."""
    from .cuda import nvcc_check

    if not nvcc_check.available():
        print("nvcc is not on PATH: compiled for the CPU emulator only, without the GPU's register and spill counts.")
        return
    for kernel in nvcc_check.compile_cubin(source, label):
        print(f"nvcc ({nvcc_check.ARCH}) {kernel.line()}")
