"""How a check reaches its verdict: the failure reasons, the result, and the comparisons.

Every check, Python or kernel, fails through ``fail`` with one of the reasons
below, which the grade sheet and the feedback show. ``compare`` holds arrays to
a reference within ``atol + rtol * |want|`` and tells an empty kernel (the
poison is still there) and an off-by-one (wrong only in the last partial block)
from a wrong result. Nothing here runs student code or needs a GPU.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np

from . import exercises

# Failure reasons, as they appear in the grade sheet and the feedback.
PASSED = "passed"
NOT_IMPLEMENTED = "not_implemented"  # still the stub
NO_WRITES = "no_writes"  # the output buffer still holds the poison: an empty kernel
WRONG_RESULT = "wrong_result"
BOUNDARY = "boundary"  # wrong only at the tail or writes past the end: an off-by-one
RACE = "race"  # the same inputs give different outputs from run to run
NOT_A_KERNEL = "not_a_kernel"  # no __global__ entry with the right name
SIGNATURE = "signature"
COMPILE_ERROR = "compile_error"
HOST_SIDE = "host_side"  # computes on the host, or bypasses the kernel being checked
NOT_LAUNCHED = "not_launched"
FORBIDDEN = "forbidden"  # uses what the exercise rules out (ml_dtypes, the built-in reduction)
MISSING = "missing"  # the exercise cell or its variable is not in the notebook
MISSING_NOTEBOOK = "missing_notebook"
EXCEPTION = "exception"
CUDA_ERROR = "cuda_error"  # illegal memory access and other faults of the CUDA context
TIMEOUT = "timeout"
CRASHED = "crashed"  # the checking process died without a result
SYNCS = "device_syncs"  # the training step synchronizes the device
NO_GPU = "no_gpu"  # the grading machine has none: not the student's fault, regraded on rerun
NO_DEPENDENCY = "missing_dependency"  # the grading machine lacks a module the check needs (Triton): as NO_GPU
SANITIZER = "sanitizer"  # compute-sanitizer (memcheck, racecheck, synccheck) reported an error
# The emulator's race checking (emulator/racecheck.cpp), whatever the result was:
RACECHECK = "racecheck"  # two threads touch one address with no barrier between them, one of them writing
MISSING_FENCE = "missing_fence"  # a block read what another block published with an atomic but never fenced
# The emulator's access analysis (emulator/trace.cpp), where the exercise's lesson is conflict-free shared memory:
BANK_CONFLICT = "bank_conflict"  # lanes of a warp reach different words of one shared-memory bank

ENVIRONMENT_REASONS = {NO_GPU, NO_DEPENDENCY}

# The status of a result in grades.json: graded (passed or failed), or not graded where the
# machine lacked what the exercise needs (blank in the CSV, never final).
GRADED, NOT_GRADED = "graded", "not_graded"


@dataclasses.dataclass
class CheckResult:
    exercise: str
    passed: bool
    reason: str
    message: str = ""
    details: list[str] = dataclasses.field(default_factory=list)

    def lines(self) -> list[str]:
        ex = exercises.EXERCISES.get(self.exercise)
        title = f"Exercise {self.exercise}" + (f" ({ex.title})" if ex else "")
        head = f"{title}: PASSED" if self.passed else f"{title}: FAILED [{self.reason}]"
        out = [head]
        if self.message:
            out.append("  " + self.message)
        out += ["  - " + d for d in self.details]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class CheckFailed(Exception):
    """Raised inside a check to stop at the first failed sub-check."""

    def __init__(self, reason: str, message: str, details: list[str] | None = None):
        super().__init__(message)
        self.reason, self.message, self.details = reason, message, details or []


def fail(reason: str, message: str, details: list[str] | None = None):
    raise CheckFailed(reason, message, details)


# --- comparing arrays ------------------------------------------------------------


# --- student text in the feedback (Markdown) -----------------------------------------

# C0 and C1 control characters but tab and newline, and DEL: what a terminal obeys instead of showing
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")
# what can make a heading, a table, a link or image, HTML, code or emphasis (an intraword _ cannot)
_MARKDOWN = re.compile(r"([\\`*<>\[\]|#~])")


def shown(value) -> str:
    """Text that may hold a name's undecodable bytes (kept as surrogates, ``os.fsdecode``) as text
    every file can hold: those bytes as ``\\xNN``, and so are control characters other than a tab or a
    newline (a terminal would run ``ESC c`` or ``ESC ]52`` in a feedback file it shows), the rest as it is."""
    try:
        raw = str(value).encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file name decodes to (from a JSON escape)
        raw = str(value).encode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", raw.decode("utf-8", "backslashreplace"))


def markdown_text(value, limit: int) -> str:
    """Text a student controls, for the Markdown feedback: one line of at most ``limit`` characters
    in which no character is Markdown or HTML (a forged "## Exercise 1.2 (10/10, passed)", a table,
    a link, a code fence or a ``<script>`` shows as the characters typed)."""
    return _MARKDOWN.sub(r"\\\1", _LINE_BREAKS.sub(" ", shown(value))[:limit])


def first_mismatches(got: np.ndarray, want: np.ndarray, bad: np.ndarray, limit: int = 5) -> list[str]:
    """``index: got x, want y`` for the first ``limit`` True entries of ``bad``."""
    out = []
    for index in np.argwhere(bad)[:limit]:
        key = tuple(int(i) for i in index)
        shown = key[0] if len(key) == 1 else key
        out.append(f"index {shown}: got {_number(got[key])}, want {_number(want[key])}")
    return out


def _number(value) -> str:
    """A value as a student reads it: 1.5, nan, -1.2345678e+30 (not np.float64(1.5))."""
    return repr(float(value)) if np.ndim(value) == 0 and np.isrealobj(value) else repr(value)


def compare(
    got: np.ndarray,
    want: np.ndarray,
    what: str,
    *,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    poison: float | None = None,
    tail: int | None = None,
) -> None:
    """Fail unless ``got`` matches ``want`` within ``atol + rtol * |want|``.

    ``poison``: the value the output held before the launch; all of it still
    there means nothing was written. ``tail``: flat length of the last partial
    block; mismatches only there are reported as an off-by-one.
    """
    got = np.asarray(got, dtype=np.float64).reshape(np.shape(want))
    want = np.asarray(want, dtype=np.float64)
    if poison is not None and got.size and np.all(got == np.float64(np.float32(poison))):
        fail(NO_WRITES, f"{what}: the output was never written (it still holds the poison value {poison:g})")
    bad = ~np.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    if not bad.any():
        return
    details = first_mismatches(got, want, bad)
    flat = bad.ravel()
    count = int(flat.sum())
    message = f"{what}: {count} of {flat.size} values differ (atol={atol:g}, rtol={rtol:g})"
    if tail and flat[: flat.size - tail].sum() == 0:
        fail(BOUNDARY, message + "; all of them in the last partial block: check the bounds test", details)
    if poison is not None:
        unwritten = int((got.ravel() == np.float64(np.float32(poison)))[flat].sum())
        if unwritten:
            message += f"; {unwritten} were never written"
            if unwritten == count and flat[-1]:
                fail(BOUNDARY, message + " (the last elements: check the bounds test)", details)
    unset = int((np.isnan(got) & ~np.isnan(want)).ravel()[flat].sum())
    if unset:  # the emulator fills shared memory with NaN: a value read before any thread wrote it
        message += (
            f"; {unset} are NaN: computed from memory no thread had written yet (a missing __syncthreads() "
            "between the writes and the reads? the CPU emulator starts shared memory as NaN)"
        )
    fail(WRONG_RESULT, message, details)


def source_of(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def notebook_hint(artifact, source: str, patterns: dict[str, str]) -> None:
    """An exercise's rules as read from its text, for the notebook's own check only, where nothing
    measures what the code does: fail if the source uses any of ``patterns`` (regex -> why it is ruled
    out). In the grader (``artifact`` is the subject's) nothing is decided by spelling: the subject
    refuses what the code may not reach and counts the Python it runs (subject_rules, python_work)."""
    from .channel import subject_object

    if subject_object(artifact) is not None:
        return
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    for pattern, why in patterns.items():
        if re.search(pattern, code):
            fail(FORBIDDEN, why)


def call(what: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``; any exception but a stub's NotImplementedError fails the
    check with the reason ``exception``, naming the call as ``what``."""
    try:
        return fn(*args, **kwargs)
    except (NotImplementedError, CheckFailed):  # (a verdict reached during the call stands)
        raise
    except Exception as exc:
        fail(EXCEPTION, f"{what} raised {type(exc).__name__}: {exc}")


def expect_value_error(what: str, fn, *args, why: str = "", **kwargs) -> None:
    """Fail unless ``fn(*args, **kwargs)`` raises ValueError (bad input must be refused);
    a stub's NotImplementedError propagates."""
    try:
        fn(*args, **kwargs)
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as exc:
        fail(WRONG_RESULT, f"{what} should raise ValueError, raised {type(exc).__name__}")
    fail(WRONG_RESULT, f"{what} should raise ValueError{why}")
