"""The subject process: the one place where the grader runs a student's Python.

    python -m minitorch_cuda.grade.subject READ_FD WRITE_FD SECRET_FD RECORD_FD

The checker (``worker check``) starts it, sandboxed and without a GPU, and
talks to it over ``channel``: the first message carries the exercise cell's
source; the subject runs it in a fresh namespace (``np``, ``mt`` and
``cuda_exercise``, as the notebook's setup cell provides), answers with the
outcome and a handle on the exercise's variable, then serves the checker's
calls on it until the checker hangs up. Whatever the cell does to this process
(patching numpy, the framework or the checks' own code, forking, exiting) stays
here: the checker only reads the data this process sends back.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback


def framework_snapshot(packages: tuple[str, ...] = ("minitorch_cuda",)) -> dict:
    """Every attribute of every loaded module of ``packages`` (and of its classes), by identity, and
    each function's code: a function rewritten in place (``f.__code__ = ...``) keeps its identity."""
    snapshot = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith(packages) or module is None or name.startswith("minitorch_cuda.exercise"):
            continue
        for attr, value in list(vars(module).items()):
            snapshot[(name, attr)] = id(value), id(getattr(value, "__code__", None))
            if isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in list(vars(value).items()):
                    snapshot[(name, f"{attr}.{cattr}")] = id(cvalue), id(getattr(cvalue, "__code__", None))
    return snapshot


def tampered(before: dict, after: dict) -> list[str]:
    changed = [f"{m}.{a}" for (m, a), i in before.items() if after.get((m, a)) != i]
    return [c for c in changed if not c.endswith(("._overrides", "._builtin", ".counters", "._current", "._active"))]


def _raised(exc: BaseException) -> dict:
    return {"status": "raised", "type": type(exc).__name__, "message": traceback.format_exception_only(exc)[-1]}


def load(exercise_id: str, source: str, peer, secret: bytes = b"", record_fd: int = -1) -> tuple[dict, object]:
    """Run the exercise cell; (the outcome, the exercise's object or None). From the cell on, no program
    can be started (``no_exec``), what the exercise rules out is refused (``subject_rules``) and, where
    Python per element is ruled out, the student's lines are counted (``python_work``: its records,
    with ``secret``, go to ``record_fd``)."""
    import numpy as np

    import minitorch_cuda as mt

    from ..exercise import cuda_exercise
    from . import exercises, no_exec, python_work, subject_rules
    from .notebook import python_source

    ex = exercises.get(exercise_id)
    packages = ("minitorch_cuda",)
    if ex.launched:  # the grader launches the kernel through Triton: Triton and numpy must stay as installed
        from ..tile_eval import triton_launch

        triton_launch.load_triton()
        packages += ("triton", "numpy")
    before = framework_snapshot(packages)
    namespace: dict = {"__name__": "__exercise__", "np": np, "mt": mt, "cuda_exercise": cuda_exercise}
    try:
        code = compile(python_source(source), f"<exercise {ex.id} cell>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return _raised(exc), None
    peer.services["refusals"] = lambda: list(subject_rules.refusals)
    counted = ex.id in python_work.EXERCISES
    counter = python_work.Counter(python_work.library_dirs(), secret, record_fd)
    watch = counter.install() if counted else None
    no_exec.forbid()  # where it cannot (not x86-64 Linux), the audit hook below still refuses Python's spellings
    subject_rules.install(ex.id, counted, python_work.library_dirs(), counter.student_files)
    del counter  # (the set stays the hook's and the counter's closures' only)
    try:
        exec(code, namespace)
    except NotImplementedError:
        return {"status": "not_implemented"}, None
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a cell are its outcome too
        outcome: dict | None = _raised(exc)
    else:
        outcome = None
    if subject_rules.refusals:  # tried what the exercise rules out, whether it caught the refusal or not
        return {"status": "refused", "message": subject_rules.refusals[0]}, None
    if outcome is not None:
        return outcome, None
    changed = tampered(before, framework_snapshot(packages))
    if changed:
        return {"status": "tampered", "changed": changed[:5]}, None
    if ex.name not in namespace:
        return {"status": "missing"}, None
    if watch is not None and not watch(namespace[ex.name]):
        return {"status": "uncounted"}, None
    if ex.launched:  # the artifact is the cell's function and the grader's launch of the cell's kernel
        if ex.launched not in namespace:
            return {"status": "missing", "name": ex.launched}, None
        return {"status": "ready"}, (namespace[ex.name], triton_launch.launcher(namespace[ex.launched]))
    return {"status": "ready"}, namespace[ex.name]


def forward_synchronize(peer) -> None:
    """``mt.synchronize()`` here asks the checker to synchronize: this process has no device, the
    checker's holds the tensors the student's code works on, and 12.1 counts the sync there. Where the
    checker offers no device (the fakes' exercises) it stays what it was here, a no-op."""
    import minitorch_cuda

    from . import channel

    def synchronize() -> None:
        with contextlib.suppress(channel.ChannelRefused):
            peer.request({"op": "service", "name": "synchronize"})

    minitorch_cuda.synchronize = synchronize


def main(argv: list[str]) -> int:
    from .. import emulator, profiler
    from . import channel, fakes, python_work, sandbox, subject_rules

    secret = os.read(int(argv[2]), python_work.SECRET_BYTES)  # (what signs python_work's records)
    os.close(int(argv[2]))

    sandbox.limit_resources(memory_bytes=16 << 30)
    os.environ.pop(emulator.ENV, None)  # no device here under --emulate either, as on a GPU machine

    known = {"CaptureError": fakes.CaptureError, "ChannelRefused": channel.ChannelRefused}
    peer = channel.Peer(int(argv[0]), int(argv[1]), known=known, private=False)
    peer.services["pool_counters"] = lambda: (profiler.counters.pool_hits, profiler.counters.pool_misses)
    first = peer.receive()
    # (its closure holds the peer: not where lines count, nor where the peer hands out the grader's launcher)
    if str(first.get("exercise")) not in python_work.EXERCISES | subject_rules.FRAMES_GUARDED:
        forward_synchronize(peer)
    outcome, artifact = load(str(first.get("exercise")), str(first.get("source", "")), peer, secret, int(argv[3]))
    del secret
    if artifact is not None:
        outcome["artifact"] = artifact
    peer.send({"reply": first.get("id"), "value": peer.encode(outcome)})
    try:
        while True:
            peer.serve_one(peer.receive())
    except channel.SubjectGone:  # the checker hung up: done
        return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
