"""One isolated job of the grader, run in its own process (so that a hang, a
crash or a broken CUDA context costs only that job):

    python -m minitorch_cuda.grade.worker check EXERCISE_ID CELL_FILE RESULT_JSON
    python -m minitorch_cuda.grade.worker execute NOTEBOOK RESULT_JSON CELL_TIMEOUT

``check`` executes the exercise cell's source in a fresh namespace, takes the
exercise's variable from it and runs the hidden checks on it. It refuses a
cell that changes the framework (monkey-patching the backend to compute on the
host, for example). ``execute`` runs a whole notebook with nbclient, for the
feedback only: nothing it prints is trusted.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path


def _write(path: str, data: dict) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _framework_snapshot() -> dict:
    """Every attribute of every loaded minitorch_cuda module (and its classes), by identity."""
    snapshot = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("minitorch_cuda") or module is None or name.startswith("minitorch_cuda.exercise"):
            continue
        for attr, value in list(vars(module).items()):
            snapshot[(name, attr)] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in list(vars(value).items()):
                    snapshot[(name, f"{attr}.{cattr}")] = id(cvalue)
    return snapshot


def _tampered(before: dict, after: dict) -> list[str]:
    changed = [f"{m}.{a}" for (m, a), i in before.items() if after.get((m, a)) != i]
    return [c for c in changed if not c.endswith(("._overrides", "._builtin", ".counters", "._current", "._active"))]


def check(exercise_id: str, cell_file: str, result_file: str) -> int:
    from . import checks, exercises, verdict
    from .notebook import python_source

    ex = exercises.get(exercise_id)
    source = Path(cell_file).read_text()

    def done(result: verdict.CheckResult) -> int:
        _write(result_file, result.to_dict())
        return 0

    import minitorch_cuda as mt

    if ex.gpu and not mt.cuda_available():
        return done(verdict.CheckResult(ex.id, False, verdict.NO_GPU, mt.cuda_unavailable_reason()))
    if ex.gpu:  # load what the checks use before the student's code runs, to see what it changes
        from minitorch_cuda.cuda import backend, registry, runtime  # noqa: F401

        from . import kernel_checks  # noqa: F401
    before = _framework_snapshot()
    import numpy as np

    from ..exercise import cuda_exercise

    # What the notebook's setup cell provides; everything else must be in the cell.
    namespace: dict = {"__name__": "__exercise__", "np": np, "mt": mt, "cuda_exercise": cuda_exercise}
    try:
        exec(compile(python_source(source), f"<exercise {ex.id} cell>", "exec"), namespace)
    except NotImplementedError:
        return done(verdict.CheckResult(ex.id, False, verdict.NOT_IMPLEMENTED, f"Exercise {ex.id} is still the stub"))
    except Exception as exc:
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        reason = checks.classify_exception(exc)
        if reason == verdict.EXCEPTION and isinstance(exc, (TypeError, ValueError)) and ex.kind == "cuda":
            reason = verdict.SIGNATURE if isinstance(exc, TypeError) else verdict.NOT_A_KERNEL
        return done(verdict.CheckResult(ex.id, False, reason, f"the exercise cell raised {tb}"))
    changed = _tampered(before, _framework_snapshot())
    if changed:
        return done(
            verdict.CheckResult(
                ex.id,
                False,
                verdict.HOST_SIDE,
                "the exercise cell modifies the framework instead of implementing the exercise: "
                + ", ".join(changed[:5]),
            )
        )
    if ex.name not in namespace:
        missing = f"the exercise cell does not define {ex.name!r}"
        return done(verdict.CheckResult(ex.id, False, verdict.MISSING, missing))
    try:
        result = checks.run_check(ex.id, namespace[ex.name], source)
    except NotImplementedError:
        result = verdict.CheckResult(ex.id, False, verdict.NOT_IMPLEMENTED, f"Exercise {ex.id} is still the stub")
    return done(result)


def execute(notebook: str, result_file: str, cell_timeout: str) -> int:
    import minitorch_cuda as mt

    from . import notebook as nbtools

    nb = nbtools.read(notebook)
    skipped_gpu = not mt.cuda_available()
    if skipped_gpu:
        nb = nbtools.without_gpu_cells(nb)
    with tempfile.TemporaryDirectory(prefix="grade-run-") as cwd:
        records = nbtools.execute(nb, cwd, float(cell_timeout))
    _write(result_file, {"cells": records, "skipped_gpu_cells": skipped_gpu})
    return 0


def main(argv: list[str]) -> int:
    commands = {"check": check, "execute": execute}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]](*argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
