"""One table from exercise id to its check, and the check cell of the notebooks.

``run_check(exercise_id, artifact, source)`` returns a ``CheckResult``: the
artifact is a kernel's CUDA source (``kernel_checks``, on a GPU) or the
student's Python object (``host_checks``; in the grader a proxy of it in the
subject process). Inputs are drawn fresh on every call, so a submission cannot
pass by returning numbers it saw before. ``report`` runs the same check in a
notebook and prints what passed and what failed (students import it from
``minitorch_cuda.exercise``).

The grader's modules, along their seams: ``verdict`` (reasons, results,
comparisons), ``fakes`` (the fake devices of chapters 4, 5 and 18),
``host_checks`` (the Python exercises), ``harness`` (guarded GPU buffers,
counted launches), ``kernel_checks`` (the kernel exercises and 12.1, whose
waits for the device ``waits`` names),
``channel`` and ``subject`` (the student's Python in its own process),
``source`` (kernel sources read from a notebook without running it),
``sandbox`` and ``sanitizer``; ``checks`` only dispatches.
"""

from __future__ import annotations

from .. import emulator
from ..emulator.device_process import REFUSED_CALL
from . import channel, exercises, host_checks, kernel_checks, mma_fragments, python_work
from .verdict import (
    COMPILE_ERROR,
    CUDA_ERROR,
    EXCEPTION,
    FORBIDDEN,
    HOST_SIDE,
    MISSING_FENCE,
    NO_GPU,
    PASSED,
    RACECHECK,
    TIMEOUT,
    CheckFailed,
    CheckResult,
)


def _fib_tile(fib_tile, source: str = "") -> list[str]:
    import numpy as np

    from ..tile_eval.cases import MAX_FIB_N
    from ..tile_eval.exercise import check_fib_tile  # chapter 20's check lives with its code

    rng = np.random.default_rng()
    small, large = (rng.integers(0, MAX_FIB_N + 1, n, dtype=np.int64) for n in (500, 8000))
    whole = python_work.require_whole_array(fib_tile, small, large, "fib_tile")
    return check_fib_tile(fib_tile, source) + ([whole] if whole else [])


def _bias_relu_triton(bias_relu_triton, source: str = "") -> list[str]:
    from ..tile_eval.triton_exercise import check_bias_relu_triton  # with chapter 20's code, as 20.1

    return check_bias_relu_triton(bias_relu_triton, source)


def _on_gpu(exercise_id: str):
    """The check of a kernel exercise (or 12.1): ``kernel_checks.run`` for that exercise."""

    def check(artifact, source: str = "") -> list[str]:
        return kernel_checks.run(exercises.get(exercise_id), artifact, source)

    check.__name__ = f"check_{exercise_id.replace('.', '_')}"
    return check


PYTHON_CHECKS = {
    "1.2": host_checks.check_launch_config,
    "2.1": host_checks.check_bf16,
    "4.1": host_checks.check_memory_pool,
    "5.1": host_checks.check_time_median,
    "14.1": host_checks.check_matmul_roofline,
    "18.1": host_checks.check_graphed_step,
    "19.1": host_checks.check_tf32,
    "19.2": mma_fragments.check_mma_fragments,
    "20.1": _fib_tile,
    "20.2": _bias_relu_triton,
}

# exercise id -> check(artifact, cell source) -> what passed; every exercise has exactly one
CHECKS = {e.id: PYTHON_CHECKS.get(e.id) or _on_gpu(e.id) for e in exercises.ordered()}


def run_check(exercise_id: str, artifact, source: str = "") -> CheckResult:
    """Run the hidden checks of one exercise on ``artifact`` (a kernel source or a Python object).

    NotImplementedError propagates (the exercise is still a stub); every
    other failure becomes a failed ``CheckResult``.
    """
    ex = exercises.get(exercise_id)
    try:
        done = CHECKS[ex.id](artifact, source)
    except CheckFailed as failure:
        result = CheckResult(ex.id, False, failure.reason, failure.message, failure.details)
    except NotImplementedError:
        raise
    except Exception as exc:
        result = CheckResult(ex.id, False, classify_exception(exc), f"{type(exc).__name__}: {exc}")
    else:
        result = CheckResult(ex.id, True, PASSED, "", done)
    refused = _refusals(artifact)
    if refused:  # the student's code tried what the exercise rules out, caught or not
        return CheckResult(ex.id, False, FORBIDDEN, f"your code: {refused[0]}", refused[1:3])
    return result


def _refusals(artifact) -> list[str]:
    """What the subject refused the student's code during the check (``subject_rules``); [] in a notebook."""
    remote = channel.subject_object(artifact)
    if remote is None:
        return []
    try:
        refused = remote._peer.request({"op": "service", "name": "refusals"})
    except channel.SubjectGone:  # gone after the check: the check's own result stands
        return []
    return [str(r)[:500] for r in refused] if isinstance(refused, list) else []


def classify_exception(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "KernelCompileError":
        return COMPILE_ERROR
    if name == "CudaUnavailableError":
        return NO_GPU
    if REFUSED_CALL in str(exc):  # the emulator's device process stopped a call into the C library
        return HOST_SIDE
    if "missing __threadfence() (racecheck)" in text:  # the emulator's race checking (racecheck.cpp)
        return MISSING_FENCE
    if "data race (racecheck)" in text:
        return RACECHECK
    if "ran past the time limit" in text:  # the emulator stopped it (a notebook's check cell: driver.time_limit)
        return TIMEOUT
    if any(
        s in text
        for s in (
            "illegal memory access",
            "misaligned address",
            "unspecified launch failure",
            "illegal address",
            "launch timed out",
            "context is destroyed",
            "illegal instruction",
        )
    ):
        return CUDA_ERROR
    if name == "KernelError":
        return CUDA_ERROR
    return EXCEPTION


# What a student without a GPU can do instead (the detail says why CUDA did not start).
EMULATOR_ADVICE = (
    f"no usable GPU here: check kernels on the CPU emulator instead (make `%env {emulator.SWITCH}` the "
    f"notebook's first cell, then Kernel > Restart and run all; or start Jupyter with {emulator.SWITCH})"
)


def report(exercise_id: str, artifact) -> CheckResult:
    """The notebook's check cell: run the grader's checks here and print the outcome."""
    if exercises.holds_stub(artifact):
        raise exercises.not_done(exercise_id)
    result = run_check(exercise_id, artifact)
    if result.reason == NO_GPU:  # what to do first, then why
        result.message, result.details = EMULATOR_ADVICE, [result.message, *result.details]
    print(result)
    if exercises.get(exercise_id).kind == "cuda" and emulator.selected():
        print("  (checked on the CPU emulator: correctness and memory accesses, no speed measured)")
    return result
