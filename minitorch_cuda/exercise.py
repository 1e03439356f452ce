"""Helpers for the exercise notebooks.

A kernel exercise is a Python string of CUDA C in a cell tagged with the
exercise id; the cell ends with ``cuda_exercise("N.k", source)``, which

- raises ``NotImplementedError("Exercise N.k")`` while the source still holds
  the ``// TODO: Exercise N.k`` placeholder,
- checks that the source defines ``__global__ void <kernel>(...)`` with the
  parameters the framework launches it with, and
- with a GPU, compiles it, so that nvcc's errors show up in that cell.

The check cell after it runs ``minitorch_cuda.grade.checks.report``, the very
checks the grader runs. (A string, not a ``%%cuda`` cell magic: a string can be
passed around, diffed and extracted by the grader without IPython.)
"""

from __future__ import annotations

from .grade import exercises


def cuda_exercise(exercise_id: str, source: str) -> str:
    """Validate a kernel exercise's source early; returns it unchanged."""
    ex = exercises.get(exercise_id)
    if "TODO: Exercise" in source:
        raise NotImplementedError(f"Exercise {ex.id}")
    exercises.check_entry(ex, source)
    from .device import cuda_available

    if cuda_available():
        from .cuda.runtime import compile_module

        compile_module(source, f"your kernel {ex.kernel!r} (exercise {ex.id})")
    return source
