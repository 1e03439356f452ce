"""The grader: every student's notebooks, every exercise, each check in its own process.

Results are written as they come: each one appended as a line to
``grades.journal``, folded into ``grades.json`` at the start and the end of a
run (``Ledger``), the CSV (one row per student), ``feedback/<student>.md``
(sent to the student) and, at the end, ``similarity.csv`` and
``instructor/<student>.md`` (the feedback and the similarity report's matches,
for the instructor only). A rerun reads ``grades.json`` and the journal and
grades only the (student, exercise) pairs that have no final result yet. An exercise that needs
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
import threading
import time
from pathlib import Path

from .. import emulator
from . import exercises, hidden, notebook, sandbox, verdict
from .verdict import GRADED, NOT_GRADED, CheckFailed, CheckResult, markdown_text, shown

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")
NOTEBOOK_SUFFIXES = (".ipynb", ".md")
MAX_NOTEBOOK = 64 << 20  # bytes: a larger file is not read (outputs never count, so none needs more)
MAX_RECORD = 4 << 20  # bytes of a worker's record read back (a notebook's run, a check's result)
MAX_ERRORS = 20  # a notebook run's errors kept for the feedback
READ_TIMEOUT = 60.0  # seconds to read one notebook (in a worker: a parser bomb costs this at most)
READ_MEMORY = 2 << 30  # address space of that worker


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
    emulate: bool = False  # kernel exercises on the CPU emulator (emulator.SWITCH), marked emulated
    sanitize: bool = True  # compute-sanitizer on kernel exercises that pass, where a GPU and the tool exist
    sanitize_timeout: float = 90.0
    shard: tuple[int, int] | None = None  # (k, n): grade the k-th of n fixed slices of the students
    progress: bool = True
    seed: int | None = None  # the hidden shapes' seed (hidden.py); None: a resumed run's, else a fresh one


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
    """(student folders, skipped folders): a student's folder holds at least one notebook and is no
    link (to another student's folder, or outside the submissions)."""
    students, skipped = [], []
    folders = (p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    for path in sorted(folders):  # names are kept as os.fsdecode gives them (bytes as surrogates)
        if path.is_symlink():
            skipped.append(path.name)
        elif any(
            f.is_file() and f.suffix in NOTEBOOK_SUFFIXES for f in path.iterdir()
        ):  # a link is refused later, named
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


def run_isolated(
    args: list[str], timeout: float, gpu: str | None, cwd: str, env_extra: dict | None = None, record=None
):
    """Run ``python -m minitorch_cuda.grade.worker ARGS`` in a new session; kill the whole
    session on timeout, then sweep what it left. Returns (return code or None on timeout, output tail)."""
    env = dict(os.environ)
    sandbox.package_first(env)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(env_extra or {})
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    argv = [sys.executable, "-m", "minitorch_cuda.grade.worker", *args]
    return _run(argv, timeout, cwd, env, watch=Path(cwd), record=record)


def _run(
    argv: list[str], timeout: float, cwd: str, env: dict, *, watch: Path | None = None, record: list | None = None
) -> tuple[int | str | None, str]:
    """(return code, None on timeout, or why the run was stopped early; the output's tail). ``watch``:
    the folder whose size is polled (a run without a disk of its own). ``record``: a list that gets
    the bytes (at most ``MAX_RECORD``) the process writes to the pipe whose end replaces ``{record}``
    in ``argv``: the worker's record reaches the grader there, never through a file the student's
    code could write."""
    log_path = Path(cwd, "output.log")
    pipe = os.pipe() if record is not None else None
    if pipe:
        argv = [a.replace("{record}", f"fd:{pipe[1]}") for a in argv]
    with log_path.open("wb") as log:
        proc = sandbox.popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(pipe[1],) if pipe else (),
        )
        reader = None
        if pipe:
            os.close(pipe[1])
            reader = threading.Thread(target=_read_pipe, args=(pipe[0], record), daemon=True)
            reader.start()
        code, stopped = sandbox.wait(proc, timeout, watch)
        sandbox.finish(proc)
        if reader is not None:
            reader.join(timeout=10)
    with log_path.open("rb") as log:  # the tail only: a log may be 256 MB
        log.seek(max(0, log_path.stat().st_size - 3000))
        return stopped or code, log.read().decode(errors="replace")


def _read_pipe(fd: int, into: list) -> None:
    """Read ``fd`` to its end, keeping the first ``MAX_RECORD`` bytes (the rest is drained, so that a
    writer of more never blocks); past the limit nothing is kept: the record is not whole."""
    chunks, size = [], 0
    with open(fd, "rb", buffering=0) as f:
        while chunk := f.read(1 << 16):
            size += len(chunk)
            if size <= MAX_RECORD:
                chunks.append(chunk)
    into.append(b"".join(chunks) if size <= MAX_RECORD else b"")


def _record(data: list) -> dict | None:
    """The JSON object a worker sent through its pipe, or None."""
    try:
        value = json.loads(data[0]) if data and data[0] else None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _emulation_env(settings: Settings) -> dict:
    return emulator.switched_on() if settings.emulate else {}


def _hidden(settings: Settings) -> list[Path]:
    return [settings.submissions, settings.out.parent]


def check_exercise(ex: exercises.Exercise, payload: dict, settings: Settings, gpu: str | None) -> dict:
    payload = dict(
        payload,
        timeout=settings.check_timeout,
        sanitize=settings.sanitize,
        sanitize_timeout=settings.sanitize_timeout,
        hide=[str(settings.submissions), str(settings.out.parent)],
        seed=settings.seed,
    )
    with sandbox.scratch(f"grade-{ex.id}-") as folder:
        tmp = str(folder)
        payload_file = Path(tmp, "payload.json")
        payload_file.write_text(json.dumps(payload))
        args = ["check", ex.id, str(payload_file), "{record}"]
        sanitized = settings.sanitize and ex.kind == "cuda" and not settings.emulate  # no sanitizer on the emulator
        budget = settings.check_timeout + 10 + (settings.sanitize_timeout if sanitized else 0)
        record: list = []
        if settings.emulate and ex.kind == "cuda":
            # the emulator runs the student's kernel as native code in the checking process: sandbox it,
            # on a disk of its own
            sandbox.seed_emulator_cache(Path(tmp))
            env = sandbox.environment(Path(tmp), no_gpu=True) | _emulation_env(settings)
            argv = [sys.executable, "-m", "minitorch_cuda.grade.worker", *args]
            wrapped = sandbox.command(argv, Path(tmp), hide=_hidden(settings), own_disk=True)
            watch = None if sandbox.own_disk() else Path(tmp)
            code, tail = _run(wrapped, budget, tmp, env, watch=watch, record=record)
        else:  # the subject's folder inside this one (watched, removed with it); nvcc with a cap on memory
            tools = sandbox.limited_compilers(Path(tmp))
            extra = {"TMPDIR": tmp} | ({"PATH": os.pathsep.join([tools, os.environ.get("PATH", "")])} if tools else {})
            code, tail = run_isolated(args, budget, gpu, tmp, _emulation_env(settings) | extra, record=record)
        data = _check_record(_record(record), ex)
        if data is not None:
            return dict(data, seed=settings.seed)  # the shapes it was graded on can be drawn again
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


def _check_record(data: dict | None, ex: exercises.Exercise) -> dict | None:
    """The checker's result for ``ex``, or None: on the emulator the student's kernel runs in the
    checker's process, which holds the pipe, so a record that is not a result of this exercise is none."""
    fields = isinstance(data, dict) and isinstance(data.get("passed"), bool) and isinstance(data.get("reason"), str)
    return data if fields and data.get("exercise") == ex.id else None


class Ledger:
    """Every result so far: ``grades.json`` (as the run last compacted it) and ``grades.journal``, one
    JSON line per result or notebook run since, appended as each comes (a result costs one line, not a
    rewrite of every result). Reading takes grades.json, then the journal's lines in order; a line that
    is not a whole record (the last one, torn by a kill) is ignored. ``compact`` folds the journal into
    grades.json (at the start and the end of a run)."""

    def __init__(self, path: Path, rubric: dict):
        self.path, self.rubric, self.lock = path, rubric, threading.Lock()
        self.journal = path.with_suffix(".journal")
        self.results: dict[tuple[str, str], dict] = {}
        self.executions: dict[str, dict] = {}
        self.students: list[str] = []
        self.meta: dict = {}
        self.similar: list = []  # the similarity report's matches, once the run has made it
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError, RecursionError) as exc:
                raise ValueError(
                    f"{path} cannot be read ({exc}): move it away to grade afresh, or restore it"
                ) from None
            if not isinstance(data, dict):
                raise ValueError(f"{path} is not a grades.json: move it away to grade afresh")
            for r in data.get("results", []):
                self._take_result(r)
            for key, record in dict(data.get("executions", {})).items():
                self._take_execution(key, record)
            self.students = [s for s in data.get("students", []) if isinstance(s, str)]
            self.meta = data.get("meta", {}) if isinstance(data.get("meta"), dict) else {}
        if self.journal.exists():
            with self.journal.open("rb") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                    except (ValueError, RecursionError):
                        continue  # torn (a run killed mid-line): that result is graded again
                    if isinstance(entry, dict) and "result" in entry:
                        self._take_result(entry["result"])
                    elif isinstance(entry, dict) and "execution" in entry:
                        self._take_execution(entry.get("key"), entry["execution"])

    def _take_result(self, r) -> None:
        if isinstance(r, dict) and isinstance(r.get("student"), str) and r.get("exercise") in exercises.EXERCISES:
            self.results[(r["student"], r["exercise"])] = r

    def _take_execution(self, key, record) -> None:
        if isinstance(key, str) and isinstance(record, dict):
            self.executions[key] = record

    def _append(self, entry: dict) -> None:
        with self.journal.open("a") as f:  # one write of one line: a kill tears at most the last line
            f.write(json.dumps(entry) + "\n")

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
            self._append({"result": result})
        return result

    def add_execution(self, student: str, stem: str, record: dict) -> None:
        with self.lock:
            self.executions[f"{student}/{stem}"] = record
            self._append({"key": f"{student}/{stem}", "execution": record})

    def compact(self) -> None:
        """Write grades.json whole (atomically) from what is known, then empty the journal."""
        with self.lock:
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
            self.journal.unlink(missing_ok=True)


def write_outputs(
    ledger: Ledger, students: list[str], ids: list[str], out: Path, feedback_for: list[str] | None = None
) -> None:
    """The CSV and the feedback files of ``feedback_for`` (default: every student)."""
    # Workers and the notebook thread call this concurrently: one writer at a time, or two
    # of them race on the same temporary file.
    with ledger.lock:
        tmp = out.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["student", *ids, "total", "max", "notes"])
            maximum = sum(ledger.rubric["points"][i] for i in ids)
            for student in students:
                results = [ledger.results.get((student, i), {}) for i in ids]
                row = ["" if r.get("points") is None else r["points"] for r in results]
                graded = [p for p in row if p != ""]
                total = sum(graded) if graded else ""  # nothing graded yet: blank, not 0
                cells = [_csv_text(student), *[_fmt(p) for p in row], _fmt(total), _fmt(maximum), _notes(results)]
                writer.writerow(cells)
        os.replace(tmp, out)
        feedback = out.parent / "feedback"
        feedback.mkdir(exist_ok=True)
        for student in students if feedback_for is None else feedback_for:
            text = _feedback(student, ids, ledger.results, ledger.executions, ledger.rubric)
            (feedback / f"{student}.md").write_text(text)  # the name as the folder's (undecodable bytes kept)


def _csv_text(name: str) -> str:
    """A name (a student's folder) as a CSV cell: undecodable bytes escaped, and one that a spreadsheet
    would run as a formula (``=HYPERLINK(...)``, ``+``, ``-``, ``@``) kept as text by a leading ``'``."""
    text = shown(name)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _notes(results: list[dict]) -> str:
    """The CSV's last column: which exercises ran on the CPU emulator, and which were not graded."""
    emulated = [r["exercise"] for r in results if r.get("emulated")]
    pending = [r["exercise"] for r in results if r.get("status") == NOT_GRADED]
    notes = [f"emulated: {' '.join(emulated)}"] if emulated else []
    return "; ".join(notes + ([f"not graded (needs a GPU): {' '.join(pending)}"] if pending else []))


def _fmt(value) -> str:
    return "" if value == "" else (f"{value:g}" if isinstance(value, float) else str(value))


def _feedback(student: str, ids: list[str], results: dict, executions: dict, rubric: dict) -> str:
    lines = [f"# Feedback for {markdown_text(student, 200)}", ""]
    total = maximum = pending = 0.0
    unsanitized = False
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
        unsanitized |= bool(r.get("emulated") and r["passed"])
        # (on the emulator the kernel runs in the checker's process, which reports the reason: escaped too)
        outcome = "passed" if r["passed"] else f"failed: {markdown_text(r['reason'], 40)}"
        lines.append(f"## Exercise {i}: {ex.title} ({_fmt(r['points'])}/{_fmt(r['max_points'])}, {outcome}{emulated})")
        lines.append("")
        if r.get("message"):
            lines += _quoted(str(r["message"]))
        lines += [f"- {markdown_text(d, 2000)}" for d in r.get("details", [])]
        lines.append("")
    if unsanitized:
        lines += [
            "Exercises graded on the CPU emulator were not run under compute-sanitizer (it needs a GPU): "
            "a race or an out-of-bounds access the emulator's order of threads hides is not caught here.",
            "",
        ]
    errors, sandboxes = [], set()
    for key, record in sorted(executions.items()):
        if key.startswith(f"{student}/"):
            errors += [
                f"- {markdown_text(key.split('/', 1)[1], 100)}: {markdown_text(e, 400)}"
                for e in record.get("errors", [])
            ]
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
    """A result's message in the feedback: its first line as a paragraph (escaped), the rest (a compile
    log, the student's own text) as an indented code block, where nothing is Markdown."""
    first, *rest = shown(message).splitlines() or [""]
    return [markdown_text(first, 2000), "", *(["    " + line for line in rest] + [""] if rest else [])]


def execute_notebook(path: Path, settings: Settings, gpu: str | None) -> dict:
    """Run a submitted notebook end to end on a private copy of its folder, in the sandbox (for the
    feedback only), on a disk of its own where bwrap gives one; a hang costs at most its budget, and
    nothing it starts outlives it. The run's record comes back through a pipe of the runner process,
    which the notebook's kernel (a child it does not hand the pipe to) cannot write."""
    budget = max(60.0, settings.cell_timeout * 4)
    with sandbox.scratch("grade-exec-") as tmp:
        copy, left_out = sandbox.private_copy(path.parent, Path(tmp, "work"))
        argv = [sys.executable, "-m", "minitorch_cuda.grade.worker", "execute", str(copy / path.name)]
        argv += ["{record}", str(settings.cell_timeout)]
        env = sandbox.environment(copy, gpu=gpu)
        env.update(_emulation_env(settings))
        wrapped = sandbox.command(argv, copy, gpu=True, hide=_hidden(settings), own_disk=True)
        record: list = []
        watch = None if sandbox.own_disk() else copy
        code, _ = _run(wrapped, budget, str(tmp), env, watch=watch, record=record)
        data = _execution_record(_record(record))
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
        f"not copied for the run (unreadable, deeper than {sandbox.MAX_DEPTH} folders, or over "
        f"{sandbox.MAX_COPIED >> 20} MB in all): {_one_line(shown(name), 200)}"
        for name in left_out[:5]
    ]
    errors += [
        f"cell {_one_line(c.get('index'), 10)}"
        + (f" (exercise {_one_line(c['exercise'], 10)})" if c.get("exercise") else "")
        + f" raised {_one_line(c['error'].get('ename'), 80)}: {_one_line(c['error'].get('evalue'), 200)}"
        for c in cells
        if isinstance(c.get("error"), dict)
    ]
    if len(errors) > MAX_ERRORS:  # a notebook of thousands of failing cells: grades.json stays small
        errors = errors[:MAX_ERRORS] + [f"... and {len(errors) - MAX_ERRORS} more"]
    return {
        "errors": errors,
        "cells": len(cells),
        "skipped_gpu_cells": bool(data.get("skipped_gpu_cells")),
        "sandbox": sandbox.kind(),
    }


def _execution_record(data: dict | None) -> dict | None:
    """The runner's record with its list of cells, or None (each cell is still read as untrusted)."""
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


def read_exercises(path: Path, todo: list[exercises.Exercise]) -> dict[str, dict]:
    """Exercise id -> what its check gets (``payload_for``) or ``{"failed": result}``, read from the
    notebook at ``path`` by a worker process with a cap on its memory and time (a YAML bomb in the
    header, megabytes of tiny cells, JSON nested past the parser's depth cost that process only).
    Raises ValueError, with the reason, where the notebook cannot be read."""
    argv = [sys.executable, "-m", "minitorch_cuda.grade.worker", "read", str(path), ",".join(e.id for e in todo)]
    # one BLAS thread: on a many-core machine each thread's arena would count against the memory cap
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    sandbox.package_first(env)
    # started as ours (sandbox.popen): the sweep of what students' runs leave behind spares it
    proc = sandbox.popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=READ_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ValueError(f"reading it took more than {READ_TIMEOUT:g} s (is it megabytes of tiny cells?)") from None
    finally:
        sandbox.finish(proc)
    try:
        data = json.loads(stdout)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        if "MemoryError" in tail[0]:
            tail = [f"reading it took more than {READ_MEMORY >> 30} GB of memory"]
        raise ValueError(tail[0][:300])
    if "unreadable" in data:
        raise ValueError(str(data["unreadable"])[:500])
    return {ex.id: data[ex.id] for ex in todo}


def payloads(nb, todo: list[exercises.Exercise], path: Path) -> dict[str, dict]:
    """Exercise id -> what its check gets, or ``{"failed": result}``: whatever a notebook holds costs
    only its exercises. Runs in the ``read`` worker."""
    out: dict[str, dict] = {}
    for ex in todo:
        try:
            cell = notebook.exercise_source(nb, ex)
            if cell is None:
                message = f"no cell with metadata exercise: '{ex.id}' or defining {ex.name!r} in {shown(path.name)}"
                out[ex.id] = {"failed": CheckResult(ex.id, False, verdict.MISSING, message).to_dict()}
                continue
            out[ex.id] = payload_for(ex, cell, path.parent)
        except CheckFailed as failure:
            out[ex.id] = {
                "failed": CheckResult(ex.id, False, failure.reason, failure.message, failure.details).to_dict()
            }
        except Exception as exc:
            message = f"the exercise cell cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
            out[ex.id] = {"failed": CheckResult(ex.id, False, verdict.EXCEPTION, message).to_dict()}
    return out


def grade_notebook(
    student: str, stem: str, ids: list[str], settings: Settings, ledger: Ledger, gpu, tick, kernels: dict
) -> None:
    todo = [exercises.get(i) for i in ids if not ledger.done(student, i)]
    if not todo:
        return
    folder = settings.submissions / student
    path = notebook.find(folder, stem)
    kernels.update({(student, ex.id): None for ex in todo if ex.kind == "cuda"})  # tried here, read or not

    def add(result: dict) -> None:
        ex = exercises.get(result["exercise"])
        ran = result.get("reason") not in (verdict.NO_GPU, verdict.MISSING_NOTEBOOK, verdict.MISSING)
        if settings.emulate and ex.gpu and ran:
            result = dict(result, emulated=True)
        ledger.add(student, result)
        tick()

    if path is None:
        found = sorted(shown(p.name) for p in folder.iterdir() if p.is_file() and not p.is_symlink())[:20]
        for ex in todo:
            message = f"no {stem}.ipynb or {stem}.md in the submission (found: {', '.join(found) or 'nothing'})"
            add(CheckResult(ex.id, False, verdict.MISSING_NOTEBOOK, message).to_dict())
        return
    try:
        if path.is_symlink() or not path.is_file():  # another student's notebook, or a pipe that never ends
            raise ValueError("it is a link or not a regular file (hand in the notebook itself)")
        if path.stat().st_size > MAX_NOTEBOOK:
            raise ValueError(f"it is larger than {MAX_NOTEBOOK >> 20} MB")
        given = read_exercises(path, todo)
    except ValueError as exc:
        for ex in todo:
            message = f"{shown(path.name)} cannot be read: {exc}"
            add(CheckResult(ex.id, False, verdict.MISSING_NOTEBOOK, message).to_dict())
        return
    if settings.execute:
        ledger.add_execution(student, stem, execute_notebook(path, settings, gpu))
    for ex in todo:
        payload = given[ex.id]
        if "failed" in payload:
            add(payload["failed"])
        else:
            if ex.kind == "cuda":
                kernels[(student, ex.id)] = payload["source"]
            add(check_exercise(ex, payload, settings, gpu))


PROGRESS_EVERY = 10.0  # seconds between progress lines where stderr is no terminal (a log file)


class _Lines:
    """Progress as a line at most every ``PROGRESS_EVERY`` s, for a log (where a bar would be noise)."""

    def __init__(self, total: int):
        self.total, self.n, self.last = total, 0, time.monotonic()

    def update(self, n: int) -> None:
        self.n += n
        if time.monotonic() - self.last >= PROGRESS_EVERY or self.n == self.total:
            self.last = time.monotonic()
            print(
                f"grading: {self.n} of {self.total} {_plural(self.total, 'exercise')} done", file=sys.stderr, flush=True
            )

    def close(self) -> None:
        pass


def _plural(n: int, word: str) -> str:
    return word if n == 1 else f"{word}s"


def _progress(total: int, enabled: bool):
    if not enabled or total == 0:
        return None
    if not sys.stderr.isatty():
        return _Lines(total)
    from tqdm import tqdm

    return tqdm(total=total, unit="exercise", desc="grading", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)


def grade(settings: Settings, warn=print) -> Ledger:
    ids = [e.id for e in exercises.ordered() if e.id in settings.rubric["points"]]
    if settings.only:
        ids = [i for i in ids if i in settings.only]
    everyone, _ = find_students(settings.submissions)
    students = shard_of(everyone, settings.shard)
    settings.out.parent.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(settings.out.with_suffix(".json"), settings.rubric)
    ledger.students = students
    if settings.seed is None:  # a resumed run keeps the shapes its first part was graded on
        settings.seed = ledger.meta.get("seed") if isinstance(ledger.meta.get("seed"), int) else hidden.fresh_seed()
    ledger.meta = {
        "seed": settings.seed,
        "shard": list(settings.shard) if settings.shard else None,
        "sandbox": sandbox.kind(),
        "emulated": settings.emulate,
    }
    ledger.compact()
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
    kernels: dict[tuple[str, str], str] = {}

    def tick() -> None:
        if bar is not None:
            with bar_lock:
                bar.update(1)

    def work(unit):
        gpu = slots.get()
        try:
            grade_notebook(*unit, settings, ledger, gpu, tick, kernels)
        except Exception as exc:  # a fault of the grader on one student's notebook costs that notebook only
            warn(f"warning: grading {shown(unit[0])}/{unit[1]} stopped: {type(exc).__name__}: {shown(exc)}")
        finally:
            slots.put(gpu)
        write_outputs(ledger, students, ids, settings.out, feedback_for=[unit[0]])

    write_outputs(ledger, students, ids, settings.out)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(work, u) for u in units]:
                future.result()
    finally:
        if bar is not None:
            bar.close()
        sandbox.sweep()
        ledger.compact()
    ledger.similar = similarity_report(settings, students, ids, kernels)
    write_outputs(ledger, students, ids, settings.out)
    write_instructor_files(ledger, students, ids, settings.out)
    return ledger


def similarity_report(settings: Settings, students: list[str], ids: list[str], kernels: dict) -> list:
    """similarity.csv next to the CSV: every kernel exercise's submissions against the built-in kernels
    and each other (``similarity``). Kernels not read in this run (graded in an earlier one) are read
    now. Returns the matches."""
    from . import similarity

    cuda = [exercises.get(i) for i in ids if exercises.get(i).kind == "cuda"]
    for student in students:
        for stem in sorted({ex.notebook for ex in cuda}):
            missing = [ex for ex in cuda if ex.notebook == stem and (student, ex.id) not in kernels]
            path = notebook.find(settings.submissions / student, stem) if missing else None
            if path is None or path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_NOTEBOOK:
                continue
            try:
                given = read_exercises(path, missing)
            except ValueError:
                continue
            kernels.update({(student, i): p["source"] for i, p in given.items() if "source" in p})
    builtins = similarity.builtin_kernels()
    matches = []
    for ex in cuda:
        submitted = {s: src for (s, i), src in kernels.items() if i == ex.id and s in students and src}
        matches += similarity.compare(ex.id, submitted, builtins, starter=_starter(ex))
    path = settings.out.with_name("similarity.csv")
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([[_csv_text(c) for c in row] for row in similarity.rows(matches)])
    return matches


def _starter(ex: exercises.Exercise) -> str:
    """The kernel every student was handed for ``ex`` (the exercise notebook's cell), or "" where the
    course's exercises/ folder is not beside the package (an installed grader)."""
    path = notebook.find(sandbox.PACKAGE_ROOT / "exercises", ex.notebook)
    if path is None:
        return ""
    try:
        given = payloads(notebook.read(path), [ex], path)
    except Exception:  # a starter that cannot be read only makes the report less precise
        return ""
    return given[ex.id].get("source", "")


def write_instructor_files(ledger: Ledger, students: list[str], ids: list[str], out: Path) -> None:
    """``instructor/<student>.md``: the student's feedback and the similarity report's matches of that
    student (the feedback sent to students never names another student)."""
    folder = out.parent / "instructor"
    folder.mkdir(exist_ok=True)
    for student in students:
        mine = [m for m in ledger.similar if student in (m.student, m.other)]
        lines = [_feedback(student, ids, ledger.results, ledger.executions, ledger.rubric), ""]
        lines += ["## Similarity (for the instructor only: flags, never grades)", ""]
        if not mine:
            lines.append("No kernel of this student matches a built-in kernel or another student's.")
        for m in mine:
            other = m.other if m.student == student else m.student
            flag = " **flagged**" if m.flagged else ""
            lines.append(
                f"- {m.exercise}: {m.score:.0%} of the smaller kernel's fingerprints in {markdown_text(other, 200)}"
                f" ({m.shared} shared){flag}"
            )
        (folder / f"{student}.md").write_text("\n".join(lines) + "\n")


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
        try:
            shard_ledger = Ledger(path, rubric)  # its journal too, should the shard have been stopped
        except ValueError as exc:
            missing.append(f"{shard} ({exc})")
            continue
        students.update(shard_ledger.students)
        for r in shard_ledger.results.values():
            key = (r["student"], r["exercise"])
            old = ledger.results.get(key)
            if old is None or _better(r, old):
                ledger.results[key] = r
            students.add(r["student"])
        ledger.executions.update(shard_ledger.executions)
    ledger.students = sorted(students)
    ledger.meta = {"merged_from": [str(s) for s in shard_outs], "missing": missing}
    ledger.compact()
    ids = [e.id for e in exercises.ordered() if e.id in rubric["points"]]
    write_outputs(ledger, ledger.students, ids, out)
    return ledger, missing


def _better(new: dict, old: dict) -> bool:
    new_final, old_final = new.get("status") != NOT_GRADED, old.get("status") != NOT_GRADED
    if new_final != old_final:
        return new_final
    return str(new.get("graded_at", "")) >= str(old.get("graded_at", ""))
