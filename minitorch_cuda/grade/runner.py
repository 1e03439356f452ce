"""The grader: every student's notebooks, every exercise, each check in its own process.

Results are written as they come: ``grades.json`` (every result, rewritten
atomically after each one), the CSV (one row per student) and
``feedback/<student>.md``. A rerun reads ``grades.json`` and grades only the
(student, exercise) pairs that have no final result yet. An exercise that needs
a GPU on a machine without one is *not graded*: blank in the CSV, status
``not_graded`` in ``grades.json``, graded on the next run where a GPU (or the
emulator, ``--emulate``) is there.

Nothing of a student runs in this process: notebooks are read as files, kernel
sources taken from their syntax tree (``source``), and each check runs in a
``worker`` process that runs the student's Python, if any, in a sandboxed subject.
"""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import datetime
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from . import exercises, notebook, sandbox, verdict
from .verdict import GRADED, NOT_GRADED, CheckFailed, CheckResult

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding minitorch_cuda/
DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")
NOTEBOOK_SUFFIXES = (".ipynb", ".md")
MAX_NOTEBOOK = 64 << 20  # bytes: a larger file is not read (outputs never count, so none needs more)


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
    emulate: bool = False  # kernel exercises on the CPU emulator (MINITORCH_CUDA_EMULATE=1), marked emulated
    sanitize: bool = True  # compute-sanitizer on kernel exercises that pass, where a GPU and the tool exist
    sanitize_timeout: float = 90.0
    shard: tuple[int, int] | None = None  # (k, n): grade the k-th of n fixed slices of the students
    progress: bool = True


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


def find_students(root: Path) -> tuple[list[str], list[str]]:
    """(student folders, skipped folders): a student's folder holds at least one notebook."""
    students, skipped = [], []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if any(f.is_file() and f.suffix in NOTEBOOK_SUFFIXES for f in path.iterdir()):
            students.append(path.name)
        else:
            skipped.append(path.name)
    return students, skipped


def shard_of(students: list[str], shard: tuple[int, int] | None) -> list[str]:
    """The k-th of n slices (k from 1): every n-th student of the sorted list, from the k-th."""
    if shard is None:
        return students
    k, n = shard
    return [s for i, s in enumerate(sorted(students)) if i % n == k - 1]


def run_isolated(args: list[str], timeout: float, gpu: str | None, cwd: str, env_extra: dict | None = None):
    """Run ``python -m minitorch_cuda.grade.worker ARGS`` in a new session; kill the whole
    session on timeout, then sweep what it left. Returns (return code or None on timeout, output tail)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(env_extra or {})
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return _run([sys.executable, "-m", "minitorch_cuda.grade.worker", *args], timeout, cwd, env)


def _run(argv: list[str], timeout: float, cwd: str, env: dict) -> tuple[int | str | None, str]:
    """(return code, None on timeout, or why the run was stopped early; the output's tail)."""
    log_path = Path(cwd, "output.log")
    with log_path.open("wb") as log:
        proc = sandbox.popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        code, stopped = sandbox.wait(proc, timeout, Path(cwd))
        sandbox.finish(proc)
    with log_path.open("rb") as log:  # the tail only: a log may be 256 MB
        log.seek(max(0, log_path.stat().st_size - 3000))
        return stopped or code, log.read().decode(errors="replace")


def _emulation_env(settings: Settings) -> dict:
    return {"MINITORCH_CUDA_EMULATE": "1"} if settings.emulate else {}


def _hidden(settings: Settings) -> list[Path]:
    return [settings.submissions, settings.out.parent]


def check_exercise(ex: exercises.Exercise, payload: dict, settings: Settings, gpu: str | None) -> dict:
    payload = dict(
        payload,
        timeout=settings.check_timeout,
        sanitize=settings.sanitize,
        sanitize_timeout=settings.sanitize_timeout,
        hide=[str(settings.submissions), str(settings.out.parent)],
    )
    with tempfile.TemporaryDirectory(prefix=f"grade-{ex.id}-") as tmp:
        payload_file, result = Path(tmp, "payload.json"), Path(tmp, "result.json")
        payload_file.write_text(json.dumps(payload))
        args = ["check", ex.id, str(payload_file), str(result)]
        sanitized = settings.sanitize and ex.kind == "cuda" and not settings.emulate  # no sanitizer on the emulator
        budget = settings.check_timeout + 10 + (settings.sanitize_timeout if sanitized else 0)
        if settings.emulate and ex.kind == "cuda":
            # the emulator runs the student's kernel as native code in the checking process: sandbox it
            sandbox.seed_emulator_cache(Path(tmp))
            env = sandbox.environment(Path(tmp), no_gpu=True) | _emulation_env(settings)
            argv = [sys.executable, "-m", "minitorch_cuda.grade.worker", *args]
            code, tail = _run(sandbox.command(argv, Path(tmp), hide=_hidden(settings)), budget, tmp, env)
        else:  # the subject's folder inside this one (watched, removed with it); nvcc with a cap on memory
            tools = sandbox.limited_compilers(Path(tmp))
            extra = {"TMPDIR": tmp} | ({"PATH": os.pathsep.join([tools, os.environ.get("PATH", "")])} if tools else {})
            code, tail = run_isolated(args, budget, gpu, tmp, _emulation_env(settings) | extra)
        data = _check_record(result, ex)
        if data is not None:
            return data
    if code is None:
        reason, message = verdict.TIMEOUT, f"no result after {settings.check_timeout:g} s (an endless loop or a hang?)"
    elif isinstance(code, str):
        reason, message = verdict.CRASHED, f"stopped: {code}"
    elif code < 0:
        reason, message = verdict.CRASHED, f"the checking process died with signal {-code}"
    else:
        reason, message = verdict.CRASHED, f"the checking process exited with code {code} and no result"
    lowered = tail.lower()
    if "illegal memory access" in lowered or "cuda_error" in lowered:
        reason = verdict.CUDA_ERROR
    lines = [line for line in tail.strip().splitlines()[-3:] if line.strip()]
    return CheckResult(ex.id, False, reason, message, lines).to_dict()


def _check_record(path: Path, ex: exercises.Exercise) -> dict | None:
    """The checker's result for ``ex``, or None: on the emulator the student's kernel runs in the
    checker's sandbox, beside the file, so a file that is not a result of this exercise is none."""
    try:
        data = json.loads(path.read_text(errors="replace")) if path.is_file() and not path.is_symlink() else None
    except (OSError, ValueError, RecursionError):
        return None
    fields = isinstance(data, dict) and isinstance(data.get("passed"), bool) and isinstance(data.get("reason"), str)
    return data if fields and data.get("exercise") == ex.id else None


class Ledger:
    """grades.json: every result so far; rewritten atomically after each new one."""

    def __init__(self, path: Path, rubric: dict):
        self.path, self.rubric, self.lock = path, rubric, threading.Lock()
        self.results: dict[tuple[str, str], dict] = {}
        self.executions: dict[str, dict] = {}
        self.students: list[str] = []
        self.meta: dict = {}
        if path.exists():
            data = json.loads(path.read_text())
            for r in data.get("results", []):
                self.results[(r["student"], r["exercise"])] = r
            self.executions = data.get("executions", {})
            self.students = list(data.get("students", []))
            self.meta = data.get("meta", {})

    def done(self, student: str, exercise_id: str) -> bool:
        r = self.results.get((student, exercise_id))  # (a grades.json of an older grader has no status)
        return r is not None and r.get("status") != NOT_GRADED and r.get("reason") not in verdict.ENVIRONMENT_REASONS

    def add(self, student: str, result: dict, points: float | None = None) -> dict:
        graded = result.get("reason") not in verdict.ENVIRONMENT_REASONS
        if points is None and graded:
            points = self.rubric["points"][result["exercise"]] if result["passed"] else 0.0
        result = dict(
            result,
            student=student,
            points=points if graded else None,
            max_points=self.rubric["points"][result["exercise"]],
            status=GRADED if graded else NOT_GRADED,
        )
        result["graded_at"] = datetime.datetime.now().isoformat(timespec="seconds")
        with self.lock:
            self.results[(student, result["exercise"])] = result
            self._save()
        return result

    def add_execution(self, student: str, stem: str, record: dict) -> None:
        with self.lock:
            self.executions[f"{student}/{stem}"] = record
            self._save()

    def _save(self) -> None:
        data = {
            "rubric": self.rubric["points"],
            "students": self.students,
            "meta": self.meta,
            "results": sorted(
                self.results.values(), key=lambda r: (r["student"], exercises.get(r["exercise"]).sort_key)
            ),
            "executions": self.executions,
        }
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)

    def save(self) -> None:
        with self.lock:
            self._save()


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
                row = [ledger.results.get((student, i), {}).get("points") for i in ids]
                row = ["" if p is None else p for p in row]
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
    total = maximum = pending = 0.0
    for i in ids:
        ex = exercises.get(i)
        r = results.get((student, i))
        maximum += rubric["points"][i]
        if r is None:
            lines += [f"## Exercise {i}: {ex.title} (not graded yet)", ""]
            continue
        emulated = " on the CPU emulator" if r.get("emulated") else ""
        if r.get("status") == NOT_GRADED:
            pending += rubric["points"][i]
            why = "a missing extra" if r.get("reason") == verdict.NO_DEPENDENCY else "needs a GPU"
            lines += [f"## Exercise {i}: {ex.title} (not graded: {why})", "", *_quoted(r.get("message", ""))]
            continue
        total += r["points"]
        outcome = "passed" if r["passed"] else f"failed: {r['reason']}"
        lines.append(f"## Exercise {i}: {ex.title} ({_fmt(r['points'])}/{_fmt(r['max_points'])}, {outcome}{emulated})")
        lines.append("")
        if r.get("message"):
            lines += _quoted(str(r["message"]))
        lines += [f"- {_one_line(d, 2000)}" for d in r.get("details", [])]
        lines.append("")
    errors, sandboxes = [], set()
    for key, record in sorted(executions.items()):
        if key.startswith(f"{student}/"):
            errors += [f"- {key.split('/', 1)[1]}: {e}" for e in record.get("errors", [])]
            if record.get("sandbox"):
                sandboxes.add(record["sandbox"])
    if errors or sandboxes:
        lines += ["## When your notebooks ran", "", "(for your information; grades come from the checks above)", ""]
        lines += [f"Sandbox: {s}" for s in sorted(sandboxes)] + [""] if sandboxes else []
        lines += errors + [""]
    later = f" ({_fmt(pending)} of them not graded yet: those exercises need a GPU)" if pending else ""
    lines.insert(1, f"\nTotal: {_fmt(total)} / {_fmt(maximum)}{later}\n")
    return "\n".join(lines)


def _quoted(message: str) -> list[str]:
    """A result's message in the feedback: its first line as a paragraph, the rest (a compile log,
    the student's own text) as a code block, where no line can pass for a heading or a total."""
    first, *rest = message.splitlines() or [""]
    return [_one_line(first, 2000), "", *(["    " + line for line in rest] + [""] if rest else [])]


def execute_notebook(path: Path, settings: Settings, gpu: str | None) -> dict:
    """Run a submitted notebook end to end on a private copy of its folder, in the sandbox (for the
    feedback only); a hang costs at most its budget, and nothing it starts outlives it."""
    budget = max(60.0, settings.cell_timeout * 4)
    with tempfile.TemporaryDirectory(prefix="grade-exec-") as tmp:
        copy, left_out = sandbox.private_copy(path.parent, Path(tmp, "work"))
        result = Path(tmp, "work", ".grade-exec.json")
        argv = [sys.executable, "-m", "minitorch_cuda.grade.worker", "execute", str(copy / path.name)]
        argv += [str(result), str(settings.cell_timeout)]
        env = sandbox.environment(copy, gpu=gpu)
        env.update(_emulation_env(settings))
        wrapped = sandbox.command(argv, copy, gpu=True, hide=[settings.submissions, settings.out.parent])
        code, _ = _run(wrapped, budget, tmp, env)
        data = _execution_record(result)
        if data is None:
            if code is None:
                why = f"stopped after {budget:g} s"
            elif isinstance(code, str):  # sandbox.wait stopped it (what it wrote to disk)
                why = f"stopped: {code}"
            else:
                why = f"the runner exited with code {code}"
            return {"errors": [f"the notebook could not be executed to the end ({why})"], "sandbox": sandbox.kind()}
    cells = [c for c in data["cells"] if isinstance(c, dict)]
    errors = [
        f"not copied for the run (unreadable, or over {sandbox.MAX_COPIED >> 20} MB in all): {_one_line(name, 200)}"
        for name in left_out[:5]
    ]
    errors += [
        f"cell {_one_line(c.get('index'), 10)}"
        + (f" (exercise {_one_line(c['exercise'], 10)})" if c.get("exercise") else "")
        + f" raised {_one_line(c['error'].get('ename'), 80)}: {_one_line(c['error'].get('evalue'), 200)}"
        for c in cells
        if isinstance(c.get("error"), dict)
    ]
    return {
        "errors": errors,
        "cells": len(cells),
        "skipped_gpu_cells": bool(data.get("skipped_gpu_cells")),
        "sandbox": sandbox.kind(),
    }


def _execution_record(path: Path) -> dict | None:
    """The record the sandboxed runner wrote, or None. The notebook could write the file itself
    (it lies in the folder the notebook runs in): only a regular file with a list of cells is read."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_NOTEBOOK:
            return None
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("cells"), list) else None


def _one_line(value, limit: int) -> str:
    """Text a student controls, as one line of at most ``limit`` characters: in the feedback it
    cannot start a heading or a line of its own (a forged "## Exercise ... (10/10, passed)")."""
    return re.sub(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+", " ", str(value))[:limit]


def payload_for(ex: exercises.Exercise, cell: str, folder: Path) -> dict:
    """What the checker gets: a kernel's CUDA source (read statically here) or the cell's Python."""
    if ex.kind == "cuda":
        from .source import kernel_source

        return {"source": kernel_source(cell, ex, folder)}
    return {"source": cell}


def grade_notebook(student: str, stem: str, ids: list[str], settings: Settings, ledger: Ledger, gpu, tick) -> None:
    todo = [exercises.get(i) for i in ids if not ledger.done(student, i)]
    if not todo:
        return
    folder = settings.submissions / student
    path = notebook.find(folder, stem)

    def add(result: dict) -> None:
        ex = exercises.get(result["exercise"])
        if settings.emulate and ex.gpu and result.get("reason") != verdict.NO_GPU:
            result = dict(result, emulated=True)
        ledger.add(student, result)
        tick()

    if path is None:
        found = sorted(p.name for p in folder.iterdir() if p.is_file())
        for ex in todo:
            message = f"no {stem}.ipynb or {stem}.md in the submission (found: {', '.join(found) or 'nothing'})"
            add(CheckResult(ex.id, False, verdict.MISSING_NOTEBOOK, message).to_dict())
        return
    try:
        if path.is_symlink() or not path.is_file():  # another student's notebook, or a pipe that never ends
            raise ValueError("it is a link or not a regular file (hand in the notebook itself)")
        if path.stat().st_size > MAX_NOTEBOOK:
            raise ValueError(f"it is larger than {MAX_NOTEBOOK >> 20} MB")
        nb = notebook.read(path)
    except Exception as exc:
        for ex in todo:
            add(CheckResult(ex.id, False, verdict.MISSING_NOTEBOOK, f"{path.name} cannot be read: {exc}").to_dict())
        return
    payloads: dict[str, dict | CheckResult] = {}
    for ex in todo:  # read before the notebook runs; whatever a notebook holds costs only its exercises
        try:
            cell = notebook.exercise_source(nb, ex)
            if cell is None:
                message = f"no cell with metadata exercise: '{ex.id}' or defining {ex.name!r} in {path.name}"
                payloads[ex.id] = CheckResult(ex.id, False, verdict.MISSING, message)
                continue
            payloads[ex.id] = payload_for(ex, cell, folder)
        except CheckFailed as failure:
            payloads[ex.id] = CheckResult(ex.id, False, failure.reason, failure.message, failure.details)
        except Exception as exc:
            message = f"the exercise cell cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
            payloads[ex.id] = CheckResult(ex.id, False, verdict.EXCEPTION, message)
    if settings.execute:
        ledger.add_execution(student, stem, execute_notebook(path, settings, gpu))
    for ex in todo:
        payload = payloads[ex.id]
        if isinstance(payload, CheckResult):
            add(payload.to_dict())
        else:
            add(check_exercise(ex, payload, settings, gpu))


def _progress(total: int, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    # disable=None: a bar on a terminal, none in a log file (as `minitorch-cuda train` does)
    return tqdm(
        total=total, unit="exercise", desc="grading", file=sys.stderr, dynamic_ncols=True, smoothing=0.1, disable=None
    )


def grade(settings: Settings, warn=print) -> Ledger:
    ids = [e.id for e in exercises.ordered() if e.id in settings.rubric["points"]]
    if settings.only:
        ids = [i for i in ids if i in settings.only]
    everyone, _ = find_students(settings.submissions)
    students = shard_of(everyone, settings.shard)
    settings.out.parent.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(settings.out.with_suffix(".json"), settings.rubric)
    ledger.students = students
    ledger.meta = {
        "shard": list(settings.shard) if settings.shard else None,
        "sandbox": sandbox.kind(),
        "emulated": settings.emulate,
    }
    ledger.save()
    sandbox.become_subreaper()

    by_notebook: dict[str, list[str]] = {}
    for i in ids:
        by_notebook.setdefault(exercises.get(i).notebook, []).append(i)
    units = [(s, stem, nb_ids) for s in students for stem, nb_ids in sorted(by_notebook.items())]
    gpus = visible_gpus()
    if settings.emulate or (settings.sanitize and gpus):  # the emulated checks, or the sanitizer's extra launch
        from .sanitizer import emulator_usable

        if emulator_usable():
            sandbox.build_emulator_runtime()
    jobs = default_jobs(len(gpus)) if settings.jobs is None else max(1, settings.jobs)
    slots: queue.Queue = queue.Queue()
    for j in range(jobs):
        slots.put(gpus[j % len(gpus)] if gpus else None)
    todo = sum(1 for s, _, nb_ids in units for i in nb_ids if not ledger.done(s, i))
    bar = _progress(todo, settings.progress)
    bar_lock = threading.Lock()

    def tick() -> None:
        if bar is not None:
            with bar_lock:
                bar.update(1)

    def work(unit):
        gpu = slots.get()
        try:
            grade_notebook(*unit, settings, ledger, gpu, tick)
        finally:
            slots.put(gpu)
        write_outputs(ledger, students, ids, settings.out)

    write_outputs(ledger, students, ids, settings.out)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(work, u) for u in units]:
                future.result()
    finally:
        if bar is not None:
            bar.close()
        sandbox.sweep()
    write_outputs(ledger, students, ids, settings.out)
    return ledger


def summary(ledger: Ledger, students: list[str], ids: list[str]) -> dict:
    rows = [ledger.results.get((s, i)) for s in students for i in ids]
    rows = [r for r in rows if r is not None]
    return {
        "passed": sum(1 for r in rows if r.get("status") != NOT_GRADED and r["passed"]),
        "failed": sum(1 for r in rows if r.get("status") != NOT_GRADED and not r["passed"]),
        "not_graded": sum(1 for r in rows if r.get("status") == NOT_GRADED),
        "emulated": sum(1 for r in rows if r.get("emulated")),
    }


# --- merging shards ---------------------------------------------------------------------------


def merge(shard_outs: list[Path], out: Path, rubric: dict) -> tuple[Ledger, list[str]]:
    """Merge the shards' grades.json (and the merged output's own, if any: merging again after more
    shards finish adds them) into ``out``; a result graded beats one not graded, then the later one
    wins. Returns the ledger and the shards that had no grades.json yet."""
    out.parent.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(out.with_suffix(".json"), rubric)
    missing = []
    students = set(ledger.students)
    for shard in shard_outs:
        path = shard.with_suffix(".json")
        if not path.exists():
            missing.append(str(shard))
            continue
        data = json.loads(path.read_text())
        students.update(data.get("students", []))
        for r in data.get("results", []):
            key = (r["student"], r["exercise"])
            old = ledger.results.get(key)
            if old is None or _better(r, old):
                ledger.results[key] = r
            students.add(r["student"])
        ledger.executions.update(data.get("executions", {}))
    ledger.students = sorted(students)
    ledger.meta = {"merged_from": [str(s) for s in shard_outs], "missing": missing}
    ledger.save()
    ids = [e.id for e in exercises.ordered() if e.id in rubric["points"]]
    write_outputs(ledger, ledger.students, ids, out)
    return ledger, missing


def _better(new: dict, old: dict) -> bool:
    new_final, old_final = new.get("status") != NOT_GRADED, old.get("status") != NOT_GRADED
    if new_final != old_final:
        return new_final
    return str(new.get("graded_at", "")) >= str(old.get("graded_at", ""))
