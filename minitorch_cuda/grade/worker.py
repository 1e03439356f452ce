"""One isolated job of the grader, in its own process (a hang, a crash or a broken CUDA
context costs only that job):

    python -m minitorch_cuda.grade.worker check EXERCISE_ID PAYLOAD_JSON RESULT_JSON
    python -m minitorch_cuda.grade.worker execute NOTEBOOK RESULT_JSON CELL_TIMEOUT
    python -m minitorch_cuda.grade.worker launch EXERCISE_ID KERNEL_CU
    python -m minitorch_cuda.grade.worker read NOTEBOOK EXERCISE_IDS

``check`` is the checker: it decides the verdict and never runs student Python.
A kernel exercise's CUDA source (read from the notebook by ``source``) is
compiled and launched here through the framework's launchers, then run under
compute-sanitizer; a Python exercise's cell runs in a subject process
(``subject``, sandboxed, without a GPU) that this process drives over
``channel``, holding the references, the fakes and the comparisons.
``execute`` runs a whole notebook with nbclient, inside the sandbox, for the
feedback only: nothing it prints is trusted. ``launch`` is the small launch that
compute-sanitizer watches. ``read`` reads a notebook's exercise cells (and the
kernel sources they name) for the grader, under a cap on memory, and prints them
as JSON: a parser bomb costs this process, not the grader.

A RESULT_JSON of the form ``fd:N`` is the pipe the grader reads the record from
(``runner._run``); this process then makes itself non-dumpable, so that nothing
it starts (a notebook's kernel, the same user) can open the pipe through
``/proc/PID/fd``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

# instances of these modules' classes (and their bound methods) may be shared with a subject
SHAREABLE_MODULES = {
    "minitorch_cuda.grade.fakes",
    "minitorch_cuda.tensor",
    "minitorch_cuda.nn",
    "minitorch_cuda.optim",
    "minitorch_cuda.autograd",
    "minitorch_cuda.functions",
    "minitorch_cuda.cuda.memory",
    "minitorch_cuda.device",
}


EMULATED_MEMORY = int(os.environ.get("MINITORCH_CUDA_GRADE_EMULATED_MEMORY", 8 << 30))  # address space, bytes


def _write(path: str, data: dict) -> None:
    if path.startswith("fd:"):
        with open(int(path[3:]), "w") as pipe:
            pipe.write(json.dumps(data, default=str))
        return
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def shareable(obj) -> bool:
    """What the checker may hand a subject: the fakes' and the framework's objects, their bound
    methods, the checks' lambdas, a fake's context manager; never a module, a class or a function
    with its globals."""
    if isinstance(obj, (types.ModuleType, type)):
        return False
    if isinstance(obj, types.MethodType):
        return shareable(obj.__self__)
    if isinstance(obj, types.FunctionType):
        return obj.__name__ == "<lambda>" and obj.__module__.startswith("minitorch_cuda.grade.")
    if isinstance(obj, contextlib._GeneratorContextManager):
        return obj.func.__module__ in SHAREABLE_MODULES
    return type(obj).__module__ in SHAREABLE_MODULES


class Subject:
    """The student's Python in its own process (sandboxed, no GPU), behind the channel."""

    def __init__(self, deadline: float, hide: list[str], exercise_id: str):
        from . import channel, fakes, python_work, sandbox, subject_rules
        from .verdict import CheckFailed

        self.workdir = tempfile.mkdtemp(prefix="grade-subject-")
        to_subject, from_checker = os.pipe()
        to_checker, from_subject = os.pipe()
        secret_in, secret_out = os.pipe()  # python_work's secret, read by the subject before the cell runs
        records_in, records_out = os.pipe()  # its line counter's records (python_work.Records)
        secret = os.urandom(python_work.SECRET_BYTES)
        os.write(secret_out, secret)
        os.close(secret_out)
        fds = (to_subject, from_subject, secret_in, records_out)
        argv = [sys.executable, "-m", "minitorch_cuda.grade.subject", *map(str, fds)]
        self.log = open(Path(self.workdir, "subject.log"), "wb")  # noqa: SIM115 -- closed in close()
        self.proc = sandbox.popen(
            sandbox.command(
                argv,
                Path(self.workdir),
                gpu=False,
                hide=[Path(p) for p in hide],
                own_disk=True,
                cover=subject_rules.unseen(exercise_id),  # not even a file to read: the answer keys
            ),
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            env=sandbox.environment(Path(self.workdir), no_gpu=True),
        )
        for fd in fds:
            os.close(fd)
        self.peer = channel.Peer(
            to_checker,
            from_checker,
            shareable=shareable,
            known={"CaptureError": fakes.CaptureError},
            fatal=(CheckFailed,),
        )
        self.peer.deadline = deadline
        self.peer.records = python_work.Records(records_in, secret)  # (python_work.lines_of_call reads them)

    def load(self, exercise_id: str, cell: str) -> dict:
        return self.peer.request({"op": "load", "exercise": exercise_id, "source": cell})

    def log_tail(self) -> list[str]:
        self.log.flush()
        text = Path(self.workdir, "subject.log").read_text(errors="replace")
        return [line[:200] for line in text.strip().splitlines()[-3:] if line.strip()]

    def close(self) -> None:
        import shutil

        from . import sandbox

        for fd in (self.peer.rfd, self.peer.wfd, self.peer.records.fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        sandbox.finish(self.proc)
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _still_the_stub(ex):
    from . import verdict

    return verdict.CheckResult(ex.id, False, verdict.NOT_IMPLEMENTED, f"Exercise {ex.id} is still the stub")


def check_python(ex, cell: str, subject: Subject):
    """The verdict on a Python exercise whose code runs in the subject process."""
    from . import channel, checks, python_work, verdict
    from .verdict import CheckResult

    try:
        outcome = subject.load(ex.id, cell)
        status = outcome.get("status") if isinstance(outcome, dict) else None
        if status == "not_implemented":
            return _still_the_stub(ex)
        if status == "raised":
            return CheckResult(ex.id, False, verdict.EXCEPTION, f"the exercise cell raised {outcome.get('message')}")
        if status == "refused":  # subject_rules: what the exercise rules out, tried by the cell
            return CheckResult(ex.id, False, verdict.FORBIDDEN, f"your exercise cell: {outcome.get('message')}")
        if status == "tampered":
            changed = ", ".join(str(c) for c in outcome.get("changed", []))
            message = (
                "the exercise cell modifies the framework (or a package the check runs on) instead of implementing "
                f"the exercise: {changed}"
            )
            return CheckResult(ex.id, False, verdict.HOST_SIDE, message)
        if status == "missing":
            name = str(outcome.get("name", ex.name))
            return CheckResult(ex.id, False, verdict.MISSING, f"the exercise cell does not define {name!r}")
        if status == "uncounted":  # python_work counts the lines of a function's calls
            message = f"{ex.name} must be a function of your own (def {ex.name}(...)): the check counts its Python"
            return CheckResult(ex.id, False, verdict.HOST_SIDE, message)
        handed = outcome.get("artifact")  # the exercise's object; with a launched kernel, the grader's launch too
        parts = list(handed) if isinstance(handed, (list, tuple)) and ex.launched else [handed]
        if (
            status != "ready"
            or len(parts) != (2 if ex.launched else 1)
            or not all(isinstance(p, channel.Proxy) for p in parts)
        ):
            return CheckResult(ex.id, False, verdict.CRASHED, "the subject process answered out of protocol")
        if ex.id in python_work.EXERCISES:  # its Python is counted during each call: what comes back is data
            subject.peer.new_object = lambda: verdict.fail(
                verdict.HOST_SIDE,
                f"{ex.name} returned an object of your own instead of a numpy array: its methods would run your "
                "Python for each element after the call. Return the array itself",
            )
        try:
            return checks.run_check(ex.id, outcome["artifact"], cell)
        except NotImplementedError:
            return _still_the_stub(ex)
    except channel.SubjectGone as gone:
        if gone.why == "timeout":
            left = "an endless loop or a hang?"
            return CheckResult(ex.id, False, verdict.TIMEOUT, f"your code gave no answer in time ({left})")
        message = f"the process running your code ended without an answer: {gone.message}"
        return CheckResult(ex.id, False, verdict.CRASHED, message, subject.log_tail())
    finally:
        subject.close()


def check_kernel(ex, kernel_source: str, sanitize: bool, sanitize_timeout: float, check_timeout: float):
    """The verdict on a kernel exercise: launched here (within ``check_timeout``), then under
    compute-sanitizer (the runner allows for ``sanitize_timeout`` more)."""
    import minitorch_cuda as mt

    from .. import emulator
    from ..emulator import device_process
    from . import checks, kernel_build, native, sanitizer, verdict
    from .verdict import CheckResult

    start = time.monotonic()
    if emulator.selected():
        try:  # nvcc in the sandbox, against the course's headers (kernel_build), as on a GPU
            refused = kernel_build.gpu_errors(kernel_source)
        except verdict.CheckFailed as exc:
            return CheckResult(ex.id, False, exc.reason, exc.message, exc.details)
        if refused:  # the emulator would run, as C++, what nvcc refuses (a call to a host function)
            return CheckResult(ex.id, False, verdict.COMPILE_ERROR, "nvcc refuses the kernel for the GPU", refused)
        native.guard()  # and host code that nvcc accepts but never runs on a GPU (a constructor)
        os.environ[emulator.RACECHECK_ENV] = "1"  # a race or a missing fence fails the check, right answer or not
        try:
            device_process.isolate()  # the kernel runs in a filtered process of its own, never in this one
        except device_process.Error as exc:  # the machine's lack, not the student's: graded elsewhere
            return CheckResult(ex.id, False, verdict.NO_GPU, f"{exc}; grade this exercise on a GPU")
    try:
        result = checks.run_check(ex.id, kernel_source)
    except NotImplementedError:
        return _still_the_stub(ex)
    if time.monotonic() - start > check_timeout:
        message = f"the checks took more than {check_timeout:g} s (an endless loop or a very slow kernel?)"
        return CheckResult(ex.id, False, verdict.TIMEOUT, message)
    if not result.passed or not sanitize or emulator.selected() or not mt.cuda_available():
        return result
    failure, notes = sanitizer.run(ex, kernel_source, sanitize_timeout)
    if failure is not None:
        return CheckResult(ex.id, False, verdict.SANITIZER, failure, notes)
    result.details += notes
    return result


def check(exercise_id: str, payload_file: str, result_file: str) -> int:
    from .. import emulator
    from . import exercises, hidden, sandbox, verdict

    sandbox.become_subreaper()  # what a subject leaves behind is re-parented here and swept
    ex = exercises.get(exercise_id)
    payload = json.loads(Path(payload_file).read_text())
    hidden.use(payload.get("seed"), ex.id)  # the instructor's seed draws this check's hidden shapes
    deadline = time.monotonic() + float(payload.get("timeout", 120)) - 3
    # the subject starts first, so that its imports and this process's overlap
    subject = Subject(deadline, payload.get("hide", []), ex.id) if ex.kind == "python" else None
    import minitorch_cuda as mt

    unmet = exercises.missing_dependency(ex)
    if unmet or (ex.gpu and not mt.cuda_available()):
        result = verdict.CheckResult(
            ex.id, False, verdict.NO_DEPENDENCY if unmet else verdict.NO_GPU, unmet or mt.cuda_unavailable_reason()
        )
        if subject is not None:
            subject.close()
    elif ex.kind == "cuda":
        if emulator.selected():  # limits the device process inherits
            sandbox.limit_resources(memory_bytes=EMULATED_MEMORY)  # a printf loop, a memory bomb
        timeouts = float(payload.get("sanitize_timeout", 90)), float(payload.get("timeout", 120))
        result = check_kernel(ex, payload["source"], bool(payload.get("sanitize")), *timeouts)
    else:
        result = check_python(ex, payload["source"], subject)
    _write(result_file, result.to_dict())
    sandbox.sweep()
    return 0


def execute(notebook: str, result_file: str, cell_timeout: str) -> int:
    import minitorch_cuda as mt

    from . import notebook as nbtools
    from . import sandbox

    sandbox.limit_resources()  # the kernel inherits the cap on file sizes
    nb = nbtools.read(notebook)
    skipped_gpu = not mt.cuda_available()
    if skipped_gpu:
        nb = nbtools.without_gpu_cells(nb)
    records = nbtools.execute(nb, Path(notebook).parent, float(cell_timeout))
    _write(result_file, {"cells": records, "skipped_gpu_cells": skipped_gpu})
    return 0


def launch(exercise_id: str, kernel_file: str) -> int:
    """The small launch the sanitizer (or the emulator) watches; a fault prints ``fault: ...``."""
    from .. import emulator
    from ..emulator import device_process
    from . import checks, exercises, kernel_checks, native, sanitizer, verdict

    if emulator.selected():
        native.guard()  # a constructor's _exit(0) would report the emulator's launch clean
        os.environ[emulator.RACECHECK_ENV] = "1"  # with race checking, as the check ran it
        device_process.isolate()  # and the launch runs in a filtered process of its own
    try:
        kernel_checks.small_launch(exercises.get(exercise_id), Path(kernel_file).read_text())
    except Exception as exc:
        host = isinstance(exc, verdict.CheckFailed) and exc.reason == verdict.HOST_SIDE
        # a fault, or a call into the C library that the device process stopped (host code)
        faulted = host or checks.classify_exception(exc) in (verdict.CUDA_ERROR, verdict.HOST_SIDE)
        text = exc.message if host else f"{type(exc).__name__}: {exc}"
        print(f"{'fault' if faulted else 'error'}: {text}"[:2000], flush=True)
        return sanitizer.EMULATOR_FAULT if faulted else 4
    return 0


def read(notebook: str, ids: str) -> int:
    from . import exercises, runner, sandbox
    from . import notebook as nbtools

    sandbox.limit_resources(memory_bytes=runner.READ_MEMORY)
    try:
        nb = nbtools.read(notebook)
    except MemoryError:
        print(json.dumps({"unreadable": f"reading it took more than {runner.READ_MEMORY >> 30} GB of memory"}))
        return 0
    except Exception as exc:  # noqa: BLE001 -- every way a file fails to parse is the student's to fix
        print(json.dumps({"unreadable": (str(exc) or type(exc).__name__)[:300]}))
        return 0
    todo = [exercises.get(i) for i in ids.split(",") if i]
    print(json.dumps(runner.payloads(nb, todo, Path(notebook))))
    return 0


def _keep_private(argv: list[str]) -> None:
    """Where the record goes to a pipe: that end not inherited by what this process starts, and this
    process not dumpable (its /proc/PID/fd then belongs to root: a child cannot open the pipe there)."""
    import ctypes

    for arg in argv:
        if arg.startswith("fd:"):
            os.set_inheritable(int(arg[3:]), False)
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def main(argv: list[str]) -> int:
    commands = {"check": check, "execute": execute, "launch": launch, "read": read}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    from . import sandbox

    _keep_private(argv)
    sandbox.unpack_input()  # a run on a disk of its own: its files, before anything of the student's runs
    return commands[argv[0]](*argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
