"""The grader: every student's notebooks, every exercise, each check in its own process.

Results are written as they come: ``grades.json`` (every result, rewritten
atomically after each one), the CSV (one row per student) and
``feedback/<student>.md``. A rerun reads ``grades.json`` and grades only the
(student, exercise) pairs that have no final result yet.
"""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import datetime
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from . import exercises, notebook, verdict

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding minitorch_cuda/
DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")


@dataclasses.dataclass
class Settings:
    submissions: Path
    out: Path
    rubric: dict
    jobs: int | None = None  # parallel workers; None: default_jobs for the visible GPUs
    check_timeout: float = 120.0
    cell_timeout: float = 120.0
    execute: bool = True
    only: list[str] | None = None  # exercise ids to grade (default: every one in the rubric)


def load_rubric(path: str | Path | None) -> dict:
    data = tomllib.loads(Path(path or DEFAULT_RUBRIC).read_text())
    points = {str(k): float(v) for k, v in data.get("points", {}).items()}
    unknown = sorted(set(points) - set(exercises.EXERCISES))
    if unknown:
        raise ValueError(f"the rubric names unknown exercises: {unknown}")
    return {"points": points, "settings": data.get("settings", {})}


def visible_gpus() -> list[str]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d for d in env.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


# Grading is mostly process start-up (a Jupyter kernel, then a check process, per notebook),
# so several workers can share a GPU: four on one H200 graded a full set 3.4x faster than one.
WORKERS_PER_GPU = 4


def default_jobs(gpus: int) -> int:
    """Four workers per GPU (one GPU counted where none is seen), at most one per core."""
    return max(1, min(WORKERS_PER_GPU * max(1, gpus), os.cpu_count() or 1))


def run_isolated(args: list[str], timeout: float, gpu: str | None, cwd: str) -> tuple[int | None, str]:
    """Run ``python -m minitorch_cuda.grade.worker ARGS`` in a new session; kill the
    whole process group on timeout. Returns (return code or None on timeout, output tail)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    proc = subprocess.Popen(
        [sys.executable, "-m", "minitorch_cuda.grade.worker", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace")[-3000:]
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        return None, out.decode(errors="replace")[-3000:]


def check_exercise(ex: exercises.Exercise, source: str, settings: Settings, gpu: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"grade-{ex.id}-") as tmp:
        cell, result = Path(tmp, "cell.py"), Path(tmp, "result.json")
        cell.write_text(source)
        code, tail = run_isolated(["check", ex.id, str(cell), str(result)], settings.check_timeout, gpu, tmp)
        if result.exists():
            return json.loads(result.read_text())
    if code is None:
        reason, message = verdict.TIMEOUT, f"no result after {settings.check_timeout:g} s (an endless loop or a hang?)"
    elif code < 0:
        reason, message = verdict.CRASHED, f"the checking process died with signal {-code}"
    else:
        reason, message = verdict.CRASHED, f"the checking process exited with code {code} and no result"
    lowered = tail.lower()
    if "illegal memory access" in lowered or "cuda_error" in lowered:
        reason = verdict.CUDA_ERROR
    lines = [line for line in tail.strip().splitlines()[-3:] if line.strip()]
    return verdict.CheckResult(ex.id, False, reason, message, lines).to_dict()


class Ledger:
    """grades.json: every result so far; rewritten atomically after each new one."""

    def __init__(self, path: Path, rubric: dict):
        self.path, self.rubric, self.lock = path, rubric, threading.Lock()
        self.results: dict[tuple[str, str], dict] = {}
        self.executions: dict[str, dict] = {}
        if path.exists():
            data = json.loads(path.read_text())
            for r in data.get("results", []):
                if r.get("reason") not in verdict.ENVIRONMENT_REASONS:
                    self.results[(r["student"], r["exercise"])] = r
            self.executions = data.get("executions", {})

    def done(self, student: str, exercise_id: str) -> bool:
        return (student, exercise_id) in self.results

    def add(self, student: str, result: dict, points: float) -> None:
        result = dict(result, student=student, points=points, max_points=self.rubric["points"][result["exercise"]])
        result["graded_at"] = datetime.datetime.now().isoformat(timespec="seconds")
        with self.lock:
            self.results[(student, result["exercise"])] = result
            self._save()

    def add_execution(self, student: str, stem: str, record: dict) -> None:
        with self.lock:
            self.executions[f"{student}/{stem}"] = record
            self._save()

    def _save(self) -> None:
        data = {
            "rubric": self.rubric["points"],
            "results": sorted(
                self.results.values(), key=lambda r: (r["student"], exercises.get(r["exercise"]).sort_key)
            ),
            "executions": self.executions,
        }
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)


def write_outputs(ledger: Ledger, students: list[str], ids: list[str], out: Path) -> None:
    # Workers and the notebook thread call this concurrently: one writer at a time, or two
    # of them race on the same temporary file.
    with ledger.lock:
        tmp = out.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["student", *ids, "total", "max"])
            maximum = sum(ledger.rubric["points"][i] for i in ids)
            for student in students:
                row = [ledger.results.get((student, i), {}).get("points", "") for i in ids]
                total = sum(p for p in row if p != "")
                writer.writerow([student, *[_fmt(p) for p in row], _fmt(total), _fmt(maximum)])
        os.replace(tmp, out)
        feedback = out.parent / "feedback"
        feedback.mkdir(exist_ok=True)
        for student in students:
            text = _feedback(student, ids, ledger.results, ledger.executions, ledger.rubric)
            (feedback / f"{student}.md").write_text(text)


def _fmt(value) -> str:
    return "" if value == "" else (f"{value:g}" if isinstance(value, float) else str(value))


def _feedback(student: str, ids: list[str], results: dict, executions: dict, rubric: dict) -> str:
    lines = [f"# Feedback for {student}", ""]
    total = maximum = 0.0
    for i in ids:
        ex = exercises.get(i)
        r = results.get((student, i))
        maximum += rubric["points"][i]
        if r is None:
            lines += [f"## Exercise {i}: {ex.title} (not graded yet)", ""]
            continue
        total += r["points"]
        verdict = "passed" if r["passed"] else f"failed: {r['reason']}"
        lines.append(f"## Exercise {i}: {ex.title} ({_fmt(r['points'])}/{_fmt(r['max_points'])}, {verdict})")
        lines.append("")
        if r.get("message"):
            lines += [r["message"], ""]
        lines += [f"- {d}" for d in r.get("details", [])]
        lines.append("")
    errors = []
    for key, record in sorted(executions.items()):
        if key.startswith(f"{student}/"):
            errors += [f"- {key.split('/', 1)[1]}: {e}" for e in record.get("errors", [])]
    if errors:
        lines += ["## When your notebooks ran", "", "(for your information; grades come from the checks above)", ""]
        lines += errors + [""]
    lines.insert(1, f"\nTotal: {_fmt(total)} / {_fmt(maximum)}\n")
    return "\n".join(lines)


def execute_notebook(path: Path, settings: Settings, gpu: str | None) -> dict:
    """Run a submitted notebook end to end (for the feedback); a hang costs at most its budget."""
    budget = max(60.0, settings.cell_timeout * 4)
    with tempfile.TemporaryDirectory(prefix="grade-exec-") as tmp:
        result = Path(tmp, "exec.json")
        code, tail = run_isolated(["execute", str(path), str(result), str(settings.cell_timeout)], budget, gpu, tmp)
        if not result.exists():
            why = f"stopped after {budget:g} s" if code is None else f"the runner exited with code {code}"
            return {"errors": [f"the notebook could not be executed to the end ({why})"]}
        data = json.loads(result.read_text())
    errors = [
        f"cell {c['index']}"
        + (f" (exercise {c['exercise']})" if c.get("exercise") else "")
        + f" raised {c['error']['ename']}: {c['error']['evalue'][:200]}"
        for c in data["cells"]
        if "error" in c
    ]
    return {"errors": errors, "cells": len(data["cells"]), "skipped_gpu_cells": data["skipped_gpu_cells"]}


def grade_notebook(student: str, stem: str, ids: list[str], settings: Settings, ledger: Ledger, gpu) -> None:
    todo = [exercises.get(i) for i in ids if not ledger.done(student, i)]
    if not todo:
        return
    path = notebook.find(settings.submissions / student, stem)
    if path is None:
        found = sorted(p.name for p in (settings.submissions / student).iterdir() if p.is_file())
        for ex in todo:
            message = f"no {stem}.ipynb or {stem}.md in the submission (found: {', '.join(found) or 'nothing'})"
            ledger.add(student, verdict.CheckResult(ex.id, False, verdict.MISSING_NOTEBOOK, message).to_dict(), 0.0)
        return
    try:
        nb = notebook.read(path)
    except Exception as exc:
        for ex in todo:
            result = verdict.CheckResult(ex.id, False, verdict.MISSING_NOTEBOOK, f"{path.name} cannot be read: {exc}")
            ledger.add(student, result.to_dict(), 0.0)
        return
    if settings.execute:
        ledger.add_execution(student, stem, execute_notebook(path, settings, gpu))
    for ex in todo:
        source = notebook.exercise_source(nb, ex)
        if source is None:
            message = f"no cell with metadata exercise: '{ex.id}' or defining {ex.name!r} in {path.name}"
            result = verdict.CheckResult(ex.id, False, verdict.MISSING, message).to_dict()
        else:
            result = check_exercise(ex, source, settings, gpu)
        points = settings.rubric["points"][ex.id] if result["passed"] else 0.0
        ledger.add(student, result, points)


def grade(settings: Settings) -> Ledger:
    ids = [e.id for e in exercises.ordered() if e.id in settings.rubric["points"]]
    if settings.only:
        ids = [i for i in ids if i in settings.only]
    students = sorted(p.name for p in settings.submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    settings.out.parent.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(settings.out.with_suffix(".json"), settings.rubric)
    by_notebook: dict[str, list[str]] = {}
    for i in ids:
        by_notebook.setdefault(exercises.get(i).notebook, []).append(i)
    units = [(s, stem, nb_ids) for s in students for stem, nb_ids in sorted(by_notebook.items())]
    gpus = visible_gpus()
    jobs = default_jobs(len(gpus)) if settings.jobs is None else max(1, settings.jobs)
    slots: queue.Queue = queue.Queue()
    for j in range(jobs):
        slots.put(gpus[j % len(gpus)] if gpus else None)

    def work(unit):
        gpu = slots.get()
        try:
            grade_notebook(*unit, settings, ledger, gpu)
        finally:
            slots.put(gpu)
        write_outputs(ledger, students, ids, settings.out)

    write_outputs(ledger, students, ids, settings.out)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(work, u) for u in units]:
            future.result()
    write_outputs(ledger, students, ids, settings.out)
    return ledger
