"""The grader: isolation, reasons, outputs, resume, the known cheats, shards.

CPU tests grade the Python exercises (launch configuration 1.2, BF16 2.1,
memory pool 4.1, timing 5.1, roofline bound 14.1, graphed step 18.1, TF32 19.1,
mma fragment layout 19.2, fibonacci tile 20.1, Triton kernel 20.2) of the known-wrong students and the known cheats that
tests/submissions.py builds, run the sandbox (bubblewrap where it is installed,
the partial fallback otherwise), the command line, shards and merge, and, on
the CPU emulator, every kernel exercise and the kernel cheats. The GPU tests
grade every kernel exercise on the GPU, compute-sanitizer included:
    bash .ci/gpu_run.sh python3 -m pytest -m gpu tests/test_grader.py
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_bwrap, needs_nvcc
from submissions import (
    CHEATS,
    FENCE_13,
    HIDDEN_SHAPE_CHEATS,
    KERNEL_CHEATS,
    MARKER,
    STUDENTS,
    SWAPPED_A_REGISTERS,
    TENSOR_CORE_STUDENTS,
    build,
    handing_in,
    vandal,
)

import minitorch_cuda as mt
from minitorch_cuda import grade
from minitorch_cuda.grade import exercises, notebook, runner, sandbox, similarity, verdict

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
# Exercises whose checks need a module this machine lacks (Triton without the grade extra) are
# left out of the CPU runs: test_a_missing_extra_is_not_a_students_zero grades them instead.
UNMET = {i: why for i in exercises.EXERCISES if (why := exercises.missing_dependency(exercises.get(i)))}
CPU_IDS = [i for i in ["1.2", "2.1", "4.1", "5.1", "14.1", "18.1", "19.1", "19.2", "20.1", "20.2"] if i not in UNMET]
gpu = pytest.mark.skipif(not mt.cuda_available(), reason=f"needs a GPU: {mt.cuda_unavailable_reason()}")


def run_grader(subs: Path, out: Path, ids: list[str] | None, *extra: str, expect: int = 0, execute=False) -> dict:
    argv = [str(subs), "--out", str(out), "--no-progress", *extra] + ([] if execute else ["--no-execute"])
    for i in ids or []:
        argv += ["--exercise", i]
    assert grade.main(argv) == expect
    data = json.loads(out.with_suffix(".json").read_text())
    return {(r["student"], r["exercise"]): r for r in data["results"]}


@pytest.fixture(scope="module")
def students(tmp_path_factory) -> Path:
    """Every student of tests/submissions.py, one folder each."""
    return build(tmp_path_factory.mktemp("students"))


@pytest.fixture(scope="module")
def cpu_grades(students, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("grades") / "grades.csv"
    return out, run_grader(students, out, CPU_IDS, "--timeout", "10", "--jobs", "4")


EXPECTED_CPU = {
    ("full_solutions", "1.2"): "passed",
    ("full_solutions", "2.1"): "passed",
    ("full_solutions", "4.1"): "passed",
    ("full_solutions", "5.1"): "passed",
    ("full_solutions", "14.1"): "passed",
    ("full_solutions", "18.1"): "passed",
    ("full_solutions", "19.1"): "passed",
    ("full_solutions", "20.1"): "passed",
    ("full_solutions", "19.2"): "passed",
    ("full_solutions", "20.2"): "passed",
    ("empty_kernels", "19.2"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "20.1"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "20.2"): verdict.NOT_IMPLEMENTED,
    ("off_by_one", "19.2"): verdict.WRONG_RESULT,
    ("off_by_one", "20.2"): verdict.BOUNDARY,
    ("host_cheat", "19.2"): verdict.FORBIDDEN,
    ("host_cheat", "20.2"): verdict.HOST_SIDE,
    ("infinite_loop", "19.2"): verdict.TIMEOUT,
    ("infinite_loop", "20.1"): verdict.TIMEOUT,
    ("infinite_loop", "20.2"): verdict.TIMEOUT,
    ("empty_kernels", "1.2"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "2.1"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "4.1"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "5.1"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "14.1"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "18.1"): verdict.NOT_IMPLEMENTED,
    ("empty_kernels", "19.1"): verdict.NOT_IMPLEMENTED,
    ("off_by_one", "1.2"): verdict.BOUNDARY,
    ("off_by_one", "5.1"): verdict.BOUNDARY,
    ("off_by_one", "18.1"): verdict.WRONG_RESULT,
    ("off_by_one", "19.1"): verdict.WRONG_RESULT,
    ("host_cheat", "2.1"): verdict.FORBIDDEN,
    ("host_cheat", "18.1"): verdict.HOST_SIDE,
    ("host_cheat", "19.1"): verdict.FORBIDDEN,
    ("infinite_loop", "1.2"): verdict.TIMEOUT,
    ("infinite_loop", "2.1"): verdict.TIMEOUT,
    ("infinite_loop", "4.1"): verdict.TIMEOUT,
    ("infinite_loop", "5.1"): verdict.TIMEOUT,
    ("infinite_loop", "14.1"): verdict.TIMEOUT,
    ("infinite_loop", "18.1"): verdict.TIMEOUT,
    ("infinite_loop", "19.1"): verdict.TIMEOUT,
    ("renamed_notebooks", "1.2"): verdict.MISSING_NOTEBOOK,
    ("renamed_notebooks", "2.1"): verdict.MISSING_NOTEBOOK,
    ("renamed_notebooks", "4.1"): "passed",
    ("renamed_notebooks", "5.1"): verdict.MISSING_NOTEBOOK,
    ("renamed_notebooks", "19.1"): verdict.MISSING_NOTEBOOK,
}


@pytest.mark.parametrize(
    "key",
    [pytest.param(k, marks=pytest.mark.skipif(k[1] in UNMET, reason=UNMET.get(k[1], ""))) for k in EXPECTED_CPU],
    ids=[f"{s}-{e}" for s, e in EXPECTED_CPU],
)
def test_cpu_reason(cpu_grades, key) -> None:
    _, results = cpu_grades
    assert results[key]["reason"] == EXPECTED_CPU[key], results[key]


def test_csv_and_feedback(cpu_grades) -> None:
    out, results = cpu_grades
    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    assert set(rows) == set(STUDENTS)
    rubric = runner.load_rubric(None)["points"]
    full = sum(rubric[i] for i in CPU_IDS)
    assert float(rows["full_solutions"]["total"]) == full == float(rows["full_solutions"]["max"])
    assert float(rows["empty_kernels"]["total"]) == 0
    assert float(rows["renamed_notebooks"]["4.1"]) == rubric["4.1"]
    feedback = (out.parent / "feedback" / "renamed_notebooks.md").read_text()
    assert "missing_notebook" in feedback and "my_cuda_setup.md" in feedback
    assert "Exercise 4.1" in (out.parent / "feedback" / "full_solutions.md").read_text()


def test_resume_does_not_regrade(students, cpu_grades, tmp_path, monkeypatch) -> None:
    out, results = cpu_grades
    copy = tmp_path / "grades.csv"
    shutil.copy(out.with_suffix(".json"), copy.with_suffix(".json"))

    def boom(*args, **kwargs):
        raise AssertionError("a finished (student, exercise) pair was graded again")

    monkeypatch.setattr(runner, "check_exercise", boom)
    again = run_grader(students, copy, CPU_IDS)
    assert {k: r["graded_at"] for k, r in again.items()} == {k: r["graded_at"] for k, r in results.items()}
    assert copy.exists() and (tmp_path / "feedback" / "full_solutions.md").exists()


def _student(tmp_path: Path, name: str, stem: str, text: str) -> Path:
    subs = tmp_path / "subs"
    (subs / name).mkdir(parents=True)
    (subs / name / f"{stem}.md").write_text(text)
    return subs


def _beside_honest(tmp_path: Path, name: str, stem: str, exercise: str, code: str) -> Path:
    """Submissions of two students: ``name``, whose exercise cell starts with ``code`` (the rest is the
    solution's), and ``honest``, the solution itself."""
    sol = (SOLUTIONS / f"{stem}.md").read_text()
    marker = f":exercise: '{exercise}'\n\n"
    assert marker in sol
    subs = _student(tmp_path, name, stem, sol.replace(marker, marker + code))
    (subs / "honest").mkdir()
    (subs / "honest" / f"{stem}.md").write_text(sol)
    return subs


def test_missing_exercise_cell_and_tampering(tmp_path) -> None:
    sol = (SOLUTIONS / "02_floating_point.md").read_text()
    subs = _student(tmp_path, "renamed_variable", "02_floating_point", sol.replace("round_to_bf16", "to_bf16"))
    tampered = sol.replace(
        "def round_to_bf16",
        "import minitorch_cuda.stages\nminitorch_cuda.stages.set_stage = print\n\n\ndef round_to_bf16",
    )
    (subs / "tamper").mkdir()
    (subs / "tamper" / "02_floating_point.md").write_text(tampered)
    results = run_grader(subs, tmp_path / "g.csv", ["2.1"])
    assert results[("renamed_variable", "2.1")]["reason"] == verdict.MISSING
    assert results[("tamper", "2.1")]["reason"] == verdict.HOST_SIDE


def test_no_metadata_falls_back_to_the_defining_cell(tmp_path) -> None:
    sol = (SOLUTIONS / "02_floating_point.md").read_text()
    subs = _student(tmp_path, "lost_metadata", "02_floating_point", sol.replace(":exercise: '2.1'\n", ""))
    assert run_grader(subs, tmp_path / "g.csv", ["2.1"])[("lost_metadata", "2.1")]["passed"]


def test_exception_in_cell(tmp_path) -> None:
    sol = (SOLUTIONS / "01_cuda_setup.md").read_text()
    subs = _student(tmp_path, "raises", "01_cuda_setup", sol.replace("    if n <= 0:", "    1 / 0\n    if n <= 0:"))
    result = run_grader(subs, tmp_path / "g.csv", ["1.2"])[("raises", "1.2")]
    assert result["reason"] == verdict.EXCEPTION and "ZeroDivisionError" in result["message"]


@pytest.mark.skipif(mt.cuda_available(), reason="checks the behaviour without a GPU")
def test_kernel_exercises_without_gpu_are_not_graded(tmp_path, capsys) -> None:
    """Not 0 points: blank in the CSV, status not_graded, counted apart, a warning first and a
    non-zero exit unless --allow-partial; a later run grades them again."""
    out = tmp_path / "g.csv"
    subs = build(tmp_path / "subs", {"full_solutions": STUDENTS["full_solutions"]})
    results = run_grader(subs, out, ["3.1", "1.2"], expect=grade.EXIT_PARTIAL)
    result = results[("full_solutions", "3.1")]
    assert (result["reason"], result["status"], result["points"]) == (verdict.NO_GPU, verdict.NOT_GRADED, None)
    assert not runner.Ledger(out.with_suffix(".json"), runner.load_rubric(None)).done("full_solutions", "3.1")
    row = next(csv.DictReader(out.open()))
    assert row["3.1"] == "" and float(row["1.2"]) == 1 and float(row["total"]) == 1
    captured = capsys.readouterr()
    assert "warning: no GPU visible" in captured.err and "1 not graded (need a GPU)" in captured.out
    assert "not graded: needs a GPU" in (tmp_path / "feedback" / "full_solutions.md").read_text()
    run_grader(subs, out, ["3.1"], "--allow-partial", expect=0)


def test_a_missing_extra_is_not_a_students_zero(tmp_path, capsys) -> None:
    """Where the grading machine lacks what an exercise's checks import (Triton without the grade
    extra), the exercise is not graded: said once at the start, blank in the CSV, a non-zero exit
    unless --allow-partial, the feedback naming the extra; never a student's failure."""
    if not UNMET:
        pytest.skip("every optional module is installed here (test_a_missing_module_is_reported_by_the_check runs)")
    out = tmp_path / "g.csv"
    subs = build(tmp_path / "subs", {"full_solutions": STUDENTS["full_solutions"]})
    ids = sorted(UNMET)
    results = run_grader(subs, out, ids, expect=grade.EXIT_PARTIAL)
    for i in ids:
        r = results[("full_solutions", i)]
        assert (r["reason"], r["status"], r["points"]) == (verdict.NO_DEPENDENCY, verdict.NOT_GRADED, None), r
        assert row_of(out)[i] == "" and "install the `grade` extra" in r["message"]
    captured = capsys.readouterr()
    for why in UNMET.values():
        assert captured.err.count(why) == 1, captured.err
    assert "not graded: a missing extra" in (tmp_path / "feedback" / "full_solutions.md").read_text()
    run_grader(subs, out, ids, "--allow-partial", expect=0)


def row_of(out: Path) -> dict:
    (row,) = csv.DictReader(out.open())
    return row


def test_a_missing_module_is_reported_by_the_check(tmp_path, monkeypatch) -> None:
    """The check itself (the worker, here in-process) turns a missing module into 'not graded',
    whatever this machine has installed: an exercise made to need a module that does not exist."""
    from minitorch_cuda.grade import worker

    lacking = dataclasses.replace(exercises.get("20.1"), needs=("no_such_module_of_the_course",))
    monkeypatch.setitem(exercises.EXERCISES, "20.1", lacking)
    payload, result = tmp_path / "payload.json", tmp_path / "result.json"
    payload.write_text(json.dumps({"source": "fib_tile = None", "timeout": 30}))
    assert worker.check("20.1", str(payload), str(result)) == 0
    got = json.loads(result.read_text())
    assert (got["passed"], got["reason"]) == (False, verdict.NO_DEPENDENCY), got
    assert got["message"].startswith("No_such_module_of_the_course is not installed: exercise 20.1 will not be graded")


def test_notebook_execution_feeds_feedback(students, tmp_path) -> None:
    subs = tmp_path / "subs"
    for student in ("full_solutions", "empty_kernels"):
        (subs / student).mkdir(parents=True)
        shutil.copy(students / student / "02_floating_point.md", subs / student)
    out = tmp_path / "g.csv"
    assert grade.main([str(subs), "--out", str(out), "--exercise", "2.1", "--cell-timeout", "60"]) == 0
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["executions"]["full_solutions/02_floating_point"]["errors"] == []
    errors = data["executions"]["empty_kernels/02_floating_point"]["errors"]
    assert errors and all("ExerciseNotDone: Exercise 2.1 is not done yet" in e for e in errors)
    assert "ExerciseNotDone" in (tmp_path / "feedback" / "empty_kernels.md").read_text()


def test_rubric_covers_every_exercise() -> None:
    assert set(runner.load_rubric(None)["points"]) == set(exercises.EXERCISES)


def test_one_table_maps_every_exercise_to_its_check() -> None:
    from minitorch_cuda.grade import checks

    assert set(checks.CHECKS) == set(exercises.EXERCISES)
    assert all(checks.CHECKS[i] is checks.PYTHON_CHECKS[i] for i in checks.PYTHON_CHECKS)


@pytest.mark.parametrize(("gpus", "cores", "jobs"), [(1, 32, 4), (2, 32, 8), (2, 6, 6), (0, 2, 2), (0, 1, 1)])
def test_default_jobs_is_four_per_gpu_at_most_one_per_core(monkeypatch, gpus, cores, jobs) -> None:
    monkeypatch.setattr(runner.os, "cpu_count", lambda: cores)
    assert runner.default_jobs(gpus) == jobs


def test_jobs_below_one_is_refused(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path), "--jobs", "0"])
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err


# --- the command --------------------------------------------------------------------------------


def test_cli_errors_are_one_line_with_exit_2(tmp_path, capsys) -> None:
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "01_cuda_setup.md").write_text((SOLUTIONS / "01_cuda_setup.md").read_text())
    for argv, message in [
        ([str(tmp_path / "nowhere")], "is not a folder"),
        ([str(tmp_path), "--shard", "3/2"], "K/N needs 1 <= K <= N"),
        ([str(tmp_path), "--shard", "x"], "expected K/N"),
        ([str(tmp_path), "--exercise", "99.9"], "no exercise '99.9'"),
        ([str(tmp_path), "--out", str(tmp_path / "alice" / "g.csv")], "must not be inside the submissions"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            grade.main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith("minitorch-cuda grade: error: ") and message in err, err


def test_help_names_the_command_and_its_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        grade.main(["--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: minitorch-cuda grade ") and "(default: grades.csv)" in text
    assert "--shard K/N" in text and "--allow-partial" in text and "--emulate" in text


def test_a_check_on_the_emulator_gets_the_rubrics_longer_limit() -> None:
    """Graded beside other students on two cores, the emulated check of 11.1's solution ran past
    the GPU's 120 s (alone it takes 52): under --emulate a check has the rubric's 300 s."""
    conf = runner.load_rubric(None)["settings"]
    assert (grade.check_timeout(conf, False), grade.check_timeout(conf, True)) == (120.0, 300.0)
    assert grade.check_timeout({}, True) == 300.0 and grade.check_timeout({"check_timeout": 60}, False) == 60.0


def test_folders_without_notebooks_are_not_students(tmp_path, capsys) -> None:
    subs = build(tmp_path / "subs", {"full_solutions": STUDENTS["full_solutions"]})
    (subs / "__MACOSX").mkdir()
    (subs / "empty").mkdir()
    (subs / "empty" / "notes.txt").write_text("no notebook here")
    (subs / "linked").symlink_to(subs / "full_solutions")  # another student's work, handed in as a link
    results = run_grader(subs, tmp_path / "g.csv", ["1.2"])
    assert {s for s, _ in results} == {"full_solutions"}
    assert "skipped 3 folder(s) without notebooks, or links: __MACOSX, empty, linked" in capsys.readouterr().err
    rows = list(csv.DictReader((tmp_path / "g.csv").open()))
    assert [r["student"] for r in rows] == ["full_solutions"]
    with pytest.raises(SystemExit) as exit_:
        grade.main([str(subs / "empty"), "--out", str(tmp_path / "h.csv")])
    assert exit_.value.code == 2 and "has no student folder" in capsys.readouterr().err


def test_a_relative_submissions_dir_is_resolved_before_anything_runs(tmp_path, monkeypatch) -> None:
    """The guide's form, `grade SUBMISSIONS_DIR` relative to the working directory, with execution."""
    subs = tmp_path / "subs" / "full_solutions"
    subs.mkdir(parents=True)
    shutil.copy(SOLUTIONS / "02_floating_point.md", subs)
    monkeypatch.chdir(tmp_path)
    results = run_grader(Path("subs"), Path("out/g.csv"), ["2.1"], "--cell-timeout", "60", execute=True)
    assert results[("full_solutions", "2.1")]["passed"]
    data = json.loads((tmp_path / "out" / "g.json").read_text())
    assert data["executions"]["full_solutions/02_floating_point"]["errors"] == []


def test_shards_merge_into_the_single_run(students, cpu_grades, tmp_path, capsys) -> None:
    """Two shards, merged (first with one shard missing, then again when it is there), give the
    results of grading everyone at once. Two of the exercises suffice: a shard splits the students,
    never an exercise (all of them took 80 s of CI's time here)."""
    ids = ["1.2", "14.1"]
    single = {key: r for key, r in cpu_grades[1].items() if key[1] in ids}
    outs = [tmp_path / f"shard{k}" / "grades.csv" for k in (1, 2)]
    run_grader(students, outs[0], ids, "--shard", "1/2", "--timeout", "10", "--jobs", "2")
    merged = tmp_path / "merged" / "grades.csv"
    assert grade.main(["merge", *map(str, outs), "--out", str(merged)]) == 1
    assert "no grades.json yet" in capsys.readouterr().err
    part = json.loads(merged.with_suffix(".json").read_text())
    first_half = {s for s, _ in single if sorted(STUDENTS).index(s) % 2 == 0}
    assert {r["student"] for r in part["results"]} == first_half
    run_grader(students, outs[1], ids, "--shard", "2/2", "--timeout", "10", "--jobs", "2")
    assert grade.main(["merge", *map(str, outs), "--out", str(merged)]) == 0
    data = json.loads(merged.with_suffix(".json").read_text())
    got = {(r["student"], r["exercise"]): (r["status"], r["reason"]) for r in data["results"]}
    assert got == {k: (r["status"], r["reason"]) for k, r in single.items()}
    rows = {r["student"]: r for r in csv.DictReader(merged.open())}
    assert set(rows) == set(STUDENTS) and (merged.parent / "feedback" / "full_solutions.md").exists()


# --- the known cheats ---------------------------------------------------------------------------


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftover_processes() -> list[str]:
    """Processes whose command line carries a cheat's marker."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and any(str(m) in cmdline for m in (MARKER, MARKER + 1)):
            found.append(f"{entry.name}: {cmdline}")
    return found


@pytest.fixture(scope="module")
def cheat_grades(tmp_path_factory) -> tuple[dict, Path, dict]:
    subs = build(
        tmp_path_factory.mktemp("cheats"),
        {"full_solutions": STUDENTS["full_solutions"]} | {n: c[0] for n, c in CHEATS.items()},
    )
    before = tree_bytes(subs)
    out = tmp_path_factory.mktemp("cheat_grades") / "grades.csv"
    # 3.1's kernel cheats on the GPU, or where there is none on the CPU emulator (class 3 needs it)
    emulate = ["--emulate"] if not runner.visible_gpus() and _emulator_usable() else []
    results = run_grader(subs, out, [*CPU_IDS, "3.1"], "--timeout", "20", "--jobs", "3", "--allow-partial", *emulate)
    return results, subs, before


@pytest.mark.parametrize("name", list(CHEATS))
def test_a_cheat_loses_exactly_its_exercise(cheat_grades, name) -> None:
    results, _, _ = cheat_grades
    _, attacked, reasons = CHEATS[name]
    if attacked in UNMET:
        pytest.skip(UNMET[attacked])
    assert not results[(name, attacked)]["passed"] and results[(name, attacked)]["reason"] in reasons, results[
        (name, attacked)
    ]
    for exercise_id in CPU_IDS:
        if exercise_id != attacked:  # every other exercise exactly as the honest student's
            mine, honest = results[(name, exercise_id)], results[("full_solutions", exercise_id)]
            assert (
                (mine["passed"], mine["points"]) == (honest["passed"], honest["points"]) == (True, honest["max_points"])
            )


# class 3's cheats (tests/submissions.py) and the words the refusal of each must use
LIBC_CALLS = {
    "libc_forges_verdict": "open a file",
    "libc_runs_a_program": "a system call",
    "libc_kills_its_checker": "send a signal",
}


@pytest.mark.skipif(bool(runner.visible_gpus()), reason="on a GPU the cheats' emulator-only branch is not compiled")
def test_a_kernel_reaching_the_c_library_is_stopped_and_named_on_the_emulator(cheat_grades) -> None:
    """Each call reached through puts's address is stopped by the device process's filter before it
    happens: host code, with the call named for the student; the checker gave its verdict."""
    if not _emulator_usable():
        pytest.skip("the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing")
    results, _, _ = cheat_grades
    for name, named in LIBC_CALLS.items():
        result = results[(name, "3.1")]
        assert result["reason"] == verdict.HOST_SIDE and result.get("emulated"), result
        assert "which device code cannot do" in result["message"] and named in result["message"], result


def test_cheats_change_no_file_and_leave_no_process(cheat_grades) -> None:
    _, subs, before = cheat_grades
    assert tree_bytes(subs) == before
    assert leftover_processes() == []


@needs_bwrap
def test_a_vandal_notebook_changes_nothing_in_the_bwrap_sandbox(tmp_path) -> None:
    subs = tmp_path / "subs"
    build(subs, {"full_solutions": STUDENTS["full_solutions"], "vandal": vandal(subs)})
    before = tree_bytes(subs)
    out = tmp_path / "g.csv"
    results = run_grader(subs, out, ["2.1", "1.2"], "--cell-timeout", "60", execute=True)
    assert tree_bytes(subs) == before
    assert leftover_processes() == []
    assert results[("vandal", "2.1")]["passed"] and results[("full_solutions", "2.1")]["passed"]
    record = json.loads(out.with_suffix(".json").read_text())["executions"]["vandal/02_floating_point"]
    assert record["sandbox"] == "bwrap" and record["errors"] == [], record
    assert "Sandbox: bwrap" in (tmp_path / "feedback" / "vandal.md").read_text()


def test_without_bwrap_the_processes_are_swept_and_the_isolation_called_partial(tmp_path, monkeypatch, capsys) -> None:
    """The fallback: a private copy, a process sweep, and a warning (the vandal is left out: without
    namespaces it could reach the submissions by absolute path, which is why bwrap is the default)."""
    monkeypatch.setattr(sandbox, "bwrap", lambda: None)
    student = STUDENTS["full_solutions"]
    subs = build(tmp_path / "subs", {"leaves_processes": CHEATS["leaves_processes"][0], "full_solutions": student})
    for name in ("leaves_processes", "full_solutions"):
        for p in (subs / name).iterdir():
            if not p.name.startswith("19_"):
                p.unlink()
    before = tree_bytes(subs)
    results = run_grader(subs, tmp_path / "g.csv", ["19.1"], "--cell-timeout", "60", execute=True)
    assert "isolation is partial" in capsys.readouterr().err
    assert results[("leaves_processes", "19.1")]["reason"] == verdict.FORBIDDEN  # its check refuses the processes
    assert results[("full_solutions", "19.1")]["passed"]
    assert tree_bytes(subs) == before and leftover_processes() == []
    assert "Sandbox: partial" in (tmp_path / "feedback" / "leaves_processes.md").read_text()


def test_printed_outputs_never_grade(tmp_path) -> None:
    """A notebook handed in with outputs that claim PASSED, over a wrong answer, fails."""
    import jupytext
    import nbformat

    nb = jupytext.read(SOLUTIONS / "01_cuda_setup.md")
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = cell.source.replace("    if n <= 0:\n", "    return (1, 1, 1), (1, 1, 1)\n    if n <= 0:\n")
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Exercise 1.2: PASSED\n")]
    (tmp_path / "subs" / "forger").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "subs" / "forger" / "01_cuda_setup.ipynb")
    result = run_grader(tmp_path / "subs", tmp_path / "g.csv", ["1.2"])[("forger", "1.2")]
    assert result["reason"] == verdict.WRONG_RESULT and result["points"] == 0


def test_the_sandbox_binds_no_working_directory(tmp_path, monkeypatch) -> None:
    """`python -m` puts the working directory on sys.path: it must not be bound into the sandbox
    (from /tmp or the submissions' parent it would show them, read-only, over the private /tmp)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend("/tmp")
    bound = sandbox._read_only_paths()
    assert str(tmp_path) not in bound and "/tmp" not in bound and "/" not in bound
    assert str(sandbox.PACKAGE_ROOT) in bound


def test_the_sandbox_binds_the_packages_the_instructor_put_on_pythonpath(tmp_path, monkeypatch) -> None:
    """Packages installed with ``pip --target`` into a folder on PYTHONPATH (not named site-packages)
    are bound read-only, so sandboxed code imports them; the working directory still is not."""
    target = tmp_path / "gpu-site"
    target.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(target))
    monkeypatch.setenv("PYTHONPATH", f"{target}{os.pathsep}{tmp_path}")
    bound = sandbox._read_only_paths()
    assert str(target.resolve()) in bound and str(tmp_path.resolve()) not in bound


def test_a_subject_cannot_reach_the_checkers_internals() -> None:
    """The checker's policy: no private attributes, no modules or classes, nothing set."""
    from minitorch_cuda.grade import fakes, worker

    device = fakes.FakeDevice(1024)
    assert worker.shareable(device) and worker.shareable(device.allocate)
    assert not worker.shareable(os) and not worker.shareable(fakes.FakeDevice) and not worker.shareable(print)
    assert not worker.shareable(runner.grade) and not worker.shareable(sys.modules)


# --- GPU ------------------------------------------------------------------------------------

KERNEL_IDS = [e.id for e in exercises.ordered() if e.gpu]
# 21.1's known-wrong students. A slot read before the barrier is a race between blocks that the
# emulator's race checking names (its poison would show it too: the blocks take turns at the barrier);
# on a GPU it is a race that the checks' large grids and repeated launches lose with high probability,
# but not with certainty.
GRID_PHASE_MISTAKES = {
    "partials_before_barrier": {"21.1": {verdict.WRONG_RESULT, verdict.RACE, verdict.RACECHECK}},
    "no_grid_barrier": {"21.1": {verdict.FORBIDDEN}},
    "atomic_norm": {"21.1": {verdict.FORBIDDEN}},
    "norm_without_tail": {"21.1": {verdict.BOUNDARY}},
    "grid_covers_the_data": {"21.1": {verdict.WRONG_RESULT}},
}
FIRST_EXPECTED = {
    # An empty tiled, warp-shuffle or vectorized kernel already lacks the construct the exercise
    # asks for (__shared__ tiles, __shfl_*_sync, float4): the check of its compiled code names that
    # before any launch (16.1's unused tile arrays are gone from the PTX, still in the emulator's source).
    "empty_kernels": {i: {verdict.NO_WRITES} for i in KERNEL_IDS}
    | {i: {verdict.NO_WRITES, verdict.FORBIDDEN} for i in ("11.1", "13.1", "15.1", "16.1", "21.1")}
    | {"12.1": {verdict.NOT_IMPLEMENTED}},
    "host_cheat": {i: {verdict.HOST_SIDE} for i in KERNEL_IDS}
    | {i: {verdict.NOT_A_KERNEL} for i in ("1.1", "13.2", "14.2", "21.1")},
    # on the emulator a bound one too far that writes a neighbour's element (the next row's first, the
    # vector tail's) is a write-write race, which race checking names during the launch (racecheck)
    "off_by_one": {
        i: {verdict.BOUNDARY, verdict.WRONG_RESULT, verdict.CUDA_ERROR, verdict.RACECHECK}
        for i in KERNEL_IDS
        if i != "12.1"
    }
    | {i: {verdict.BOUNDARY} for i in ("1.1", "3.1", "3.2", "7.1", "14.2", "21.1")}
    | {"15.1": {verdict.BOUNDARY, verdict.RACECHECK}},
    "missing_syncthreads": {  # on the emulator its race checking names the race (racecheck)
        i: {verdict.RACE, verdict.WRONG_RESULT, verdict.SANITIZER, verdict.RACECHECK}
        for i in ("3.3", "6.1", "11.1", "13.1", "13.2", "16.1", "17.1")
    },
    "race_with_right_answer": {"6.1": {verdict.RACE, verdict.WRONG_RESULT, verdict.SANITIZER, verdict.RACECHECK}},
    # on a GPU the race fails as above; on the emulator the attribute itself is refused
    "race_hidden_from_the_check": {
        "6.1": {verdict.RACE, verdict.WRONG_RESULT, verdict.SANITIZER, verdict.RACECHECK, verdict.FORBIDDEN}
    },
    # a memcpy of the slots: race-checked on the emulator; x86 assembly: refused there (not PTX it models)
    "race_hidden_in_a_memcpy": {"6.1": {verdict.RACE, verdict.WRONG_RESULT, verdict.SANITIZER, verdict.RACECHECK}},
    "race_hidden_in_x86_asm": {
        "6.1": {verdict.RACE, verdict.WRONG_RESULT, verdict.SANITIZER, verdict.RACECHECK, verdict.COMPILE_ERROR}
    },
    "infinite_loop": {i: {verdict.TIMEOUT} for i in ("3.1", "11.1", "13.1", "12.1", "14.2", "15.1", "16.1", "17.1")},
    "hidden_syncs": {"12.1": {verdict.SYNCS}},
    **{student: {"12.1": {verdict.SYNCS}} for student in ("sync_by_getattr", "extra_item", "numpy_read_back")},
    "blocking_copy": {"12.1": {verdict.SYNCS}},
    "float_of_loss": {"12.1": {verdict.SYNCS}},
    **GRID_PHASE_MISTAKES,
}


# What every GPU grading case expects: the solutions pass, each known-wrong student fails for its reason.
GPU_EXPECTED = {"full_solutions": {i: {"passed"} for i in KERNEL_IDS}, **FIRST_EXPECTED}
HALF = len(KERNEL_IDS) // 2


class GpuGrading:
    """One grader run over a group of students and exercises, shared by its cases. Each group is a
    class, so `pytest -n N --dist loadscope` grades the groups side by side (one run of them all,
    four at a time, took more than 540 s on one GPU: the sanitizer runs of the solutions alone
    are most of it)."""

    students: tuple[str, ...]
    ids: list[str] = KERNEL_IDS
    timeout, jobs = "60", "2"

    @pytest.fixture(scope="class")
    def grades(self, tmp_path_factory) -> dict:
        subs = build(tmp_path_factory.mktemp("subs"), {s: STUDENTS[s] for s in self.students})
        out = tmp_path_factory.mktemp("gpu") / "grades.csv"
        return run_grader(subs, out, self.ids, "--timeout", self.timeout, "--jobs", self.jobs)

    @classmethod
    def cases(cls) -> list[tuple[str, str]]:
        return [(s, i) for s in cls.students for i in GPU_EXPECTED[s] if i in cls.ids]

    @gpu
    @pytest.mark.gpu
    @pytest.mark.timeout(520)  # the first case pays for the whole group's grading
    def test_reason(self, grades, student, exercise_id) -> None:
        result = grades.get((student, exercise_id))
        if result is None:
            pytest.skip(f"{student} has no notebook for {exercise_id}")
        got = "passed" if result["passed"] else result["reason"]
        assert got in GPU_EXPECTED[student][exercise_id], result


def pytest_generate_tests(metafunc) -> None:
    if metafunc.cls is not None and issubclass(metafunc.cls, GpuGrading):
        metafunc.parametrize("student,exercise_id", metafunc.cls.cases())


class TestGpuSolutionsFirstHalf(GpuGrading):
    students, ids = ("full_solutions",), KERNEL_IDS[:HALF]


class TestGpuSolutionsSecondHalf(GpuGrading):
    students, ids = ("full_solutions",), KERNEL_IDS[HALF:]


class TestGpuOffByOne(GpuGrading):
    students = ("off_by_one",)


class TestGpuEmptyKernelsAndHostCheats(GpuGrading):
    students = ("empty_kernels", "host_cheat")


class TestGpuOtherMistakes(GpuGrading):
    students = tuple(
        s for s in FIRST_EXPECTED if s not in {"empty_kernels", "host_cheat", "off_by_one", "infinite_loop"}
    )


class TestGpuEndlessLoops(GpuGrading):
    """Only where listed: each costs its timeout (three at a time, since every one is expected to time out)."""

    students, ids = ("infinite_loop",), list(FIRST_EXPECTED["infinite_loop"])
    timeout, jobs = "20", "3"


@gpu
@pytest.mark.gpu
def test_gpu_illegal_memory_access(tmp_path) -> None:
    sol = (SOLUTIONS / "03_building_the_backend.md").read_text()
    bad = sol.replace("out[i] = x > 0.0f ? x : 0.0f;", "out[i + 400000000] = x > 0.0f ? x : 0.0f;")
    subs = _student(tmp_path, "wild_pointer", "03_building_the_backend", bad)
    result = run_grader(subs, tmp_path / "g.csv", ["3.1", "3.2"], "--timeout", "60")
    assert result[("wild_pointer", "3.1")]["reason"] in {verdict.CUDA_ERROR, verdict.CRASHED}
    assert result[("wild_pointer", "3.2")]["passed"]  # the broken context cost only 3.1


GPU_CHEATS = {
    # undefined behaviour that happens to sum right on a converged warp: lanes 16-31 execute the
    # shuffle without being in its mask
    "shuffle_mask": (
        "13_opt8_warp_shuffle",
        "__shfl_down_sync(0xffffffffu, v, offset)",
        "__shfl_down_sync(0x0000ffffu, v, offset)",
        "13.1",
    ),
    # one past the end of the __shared__ array (its last thread writes a value nobody reads)
    "shared_overflow": (
        "03_building_the_backend",
        "    smem[t] = m;\n",
        "    smem[t] = m;\n    if (t == blockDim.x - 1) smem[1024 + t] = m;\n",
        "3.3",
    ),
}


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GPU_CHEATS))
def test_gpu_kernel_cheats_fail(tmp_path, name) -> None:
    stem, find, replace, exercise_id = GPU_CHEATS[name]
    sol = (SOLUTIONS / f"{stem}.md").read_text()
    assert find in sol
    subs = _student(tmp_path, name, stem, sol.replace(find, replace))
    result = run_grader(subs, tmp_path / "g.csv", [exercise_id], "--timeout", "120")[(name, exercise_id)]
    assert not result["passed"] and result["reason"] in {verdict.SANITIZER, verdict.CUDA_ERROR, verdict.WRONG_RESULT}, (
        result
    )


def _emulator_usable() -> bool:
    try:
        import minitorch_cuda.emulator  # noqa: F401
    except ImportError:
        return False
    return shutil.which("c++") is not None or shutil.which("g++") is not None


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_kernel_cheats_fail_on_the_emulator(tmp_path) -> None:
    """`grade --emulate`: the kernel cheats fail on the CPU (the emulator names the lane or the index),
    the honest kernels pass, and every result says it was emulated."""
    subs = tmp_path / "subs"
    for name, (stem, find, replace, _) in GPU_CHEATS.items():
        (subs / name).mkdir(parents=True)
        (subs / name / f"{stem}.md").write_text((SOLUTIONS / f"{stem}.md").read_text().replace(find, replace))
        (subs / "honest").mkdir(exist_ok=True)
        shutil.copy(SOLUTIONS / f"{stem}.md", subs / "honest")
    before = tree_bytes(subs)
    ids = [exercise_id for *_, exercise_id in GPU_CHEATS.values()]
    results = run_grader(subs, tmp_path / "g.csv", ids, "--emulate", "--timeout", "300")
    for name, (*_, exercise_id) in GPU_CHEATS.items():
        result = results[(name, exercise_id)]
        assert result["reason"] == verdict.CUDA_ERROR and "emulated on the CPU" in result["message"], result
        assert results[("honest", exercise_id)]["passed"], results[("honest", exercise_id)]
    assert all(r.get("emulated") for k, r in results.items() if r["reason"] != verdict.MISSING_NOTEBOOK)
    assert tree_bytes(subs) == before


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_a_training_step_is_counted_in_the_checker_on_the_emulator(tmp_path) -> None:
    """12.1 runs in the subject, but every tensor operation it asks for runs (and is counted) in the
    checker: reading the gradients back to clip them on the host is seen there."""
    subs = build(tmp_path / "subs", {s: STUDENTS[s] for s in ("full_solutions", "host_cheat", "empty_kernels")})
    for folder in subs.iterdir():
        for p in folder.iterdir():
            if not p.name.startswith("12_"):
                p.unlink()
    results = run_grader(subs, tmp_path / "g.csv", ["12.1"], "--emulate", "--timeout", "300")
    assert results[("full_solutions", "12.1")]["passed"], results[("full_solutions", "12.1")]
    assert results[("host_cheat", "12.1")]["reason"] == verdict.HOST_SIDE
    assert "device-to-host" in results[("host_cheat", "12.1")]["message"]
    assert results[("empty_kernels", "12.1")]["reason"] == verdict.NOT_IMPLEMENTED


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_the_epilogue_kernel_and_a_hidden_sync_on_the_emulator(tmp_path) -> None:
    """Exercise 14.2's kernel on the CPU emulator: the solution passes, the known-wrong versions fail
    for their reasons; and 12.1's slow step, whose mt.synchronize() runs in the subject (where it has
    no device to wait for), still fails as a sync."""
    names = ("full_solutions", "empty_kernels", "off_by_one", "host_cheat", "hidden_syncs")
    subs = build(tmp_path / "subs", {s: STUDENTS[s] for s in names})
    for folder in subs.iterdir():
        for p in folder.iterdir():
            if not p.name.startswith(("12_", "14_")):
                p.unlink()
    results = run_grader(subs, tmp_path / "g.csv", ["12.1", "14.2"], "--emulate", "--timeout", "300", "--jobs", "2")
    assert results[("full_solutions", "14.2")]["passed"], results[("full_solutions", "14.2")]
    for student, reason in (
        ("empty_kernels", verdict.NO_WRITES),
        ("off_by_one", verdict.BOUNDARY),
        ("host_cheat", verdict.NOT_A_KERNEL),
    ):
        assert results[(student, "14.2")]["reason"] == reason, results[(student, "14.2")]
    assert results[("hidden_syncs", "12.1")]["reason"] == verdict.SYNCS, results[("hidden_syncs", "12.1")]


# what each of 21.1's students is told (on the emulator; a GPU's race may show differently)
GRID_PHASE_MESSAGES = {
    "partials_before_barrier": "data race (racecheck) on partials[",
    "no_grid_barrier": "call grid_barrier(barrier)",
    "atomic_norm": "use no atomics",
    "norm_without_tail": "(n + 255) / 256 chunks",
    "grid_covers_the_data": "at most one block per multiprocessor",
    "off_by_one": "wrote after the end",
}


@pytest.mark.gpu
@pytest.mark.emulated
def test_21_1_grades_each_mistake_for_its_reason(tmp_path) -> None:
    """Exercise 21.1 through the grader, on the GPU (with compute-sanitizer) or, under
    MINITORCH_CUDA_EMULATE=1, with --emulate: the solution passes and each known-wrong student
    fails for its reason, told what went wrong."""
    from minitorch_cuda import emulator

    names = ("full_solutions", "empty_kernels", "off_by_one", "host_cheat", *GRID_PHASE_MISTAKES)
    subs = build(tmp_path / "subs", {s: STUDENTS[s] for s in names})
    for folder in subs.iterdir():
        for p in folder.iterdir():
            if not p.name.startswith("21_"):
                p.unlink()
    extra = ["--emulate"] if emulator.selected() else []
    results = run_grader(subs, tmp_path / "g.csv", ["21.1"], *extra, "--timeout", "300", "--jobs", "2")
    assert results[("full_solutions", "21.1")]["passed"], results[("full_solutions", "21.1")]
    for student in names[1:]:
        result = results[(student, "21.1")]
        assert result["reason"] in FIRST_EXPECTED[student]["21.1"], result
        if emulator.selected() and student in GRID_PHASE_MESSAGES:
            assert GRID_PHASE_MESSAGES[student] in result["message"], result


# 12.1's students whose step makes the host wait more than once, and the wait the message must name
# (the loss's own read-back, Tensor.item(), is named beside it)
WAITING_STEPS = {
    "hidden_syncs": ("mt.synchronize() ×1", "Tensor.numpy() ×1", "waits for the device 3 times"),
    "sync_by_getattr": ("mt.synchronize() ×1", "Tensor.item() ×1", "waits for the device 2 times"),
    "extra_item": ("Tensor.item() ×2", "waits for the device 2 times"),
    "numpy_read_back": ("Tensor.numpy() ×1", "Tensor.item() ×1", "waits for the device 2 times"),
    "blocking_copy": ("Tensor.to() ×1", "Tensor.item() ×1", "waits for the device 2 times"),
    "float_of_loss": ("Tensor.__float__() ×1", "Tensor.item() ×1", "waits for the device 2 times"),
}


def _chapter_12(names) -> dict:
    return {s: STUDENTS[s] for s in ("full_solutions", *names)}


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_every_wait_of_a_training_step_fails_12_1_in_the_grader_on_the_emulator(tmp_path) -> None:
    """`grade --emulate`: the step runs in the subject process, yet a sync spelled through getattr, a
    second .item(), a float(loss), a .numpy() or a .to("cpu") of a device tensor each fail 12.1 as a
    sync that names the call and its count; the solution passes."""
    subs = build(tmp_path / "subs", _chapter_12(WAITING_STEPS))
    for folder in subs.iterdir():
        for p in folder.iterdir():
            if not p.name.startswith("12_"):
                p.unlink()
    results = run_grader(subs, tmp_path / "g.csv", ["12.1"], "--emulate", "--timeout", "300", "--jobs", "2")
    assert results[("full_solutions", "12.1")]["passed"], results[("full_solutions", "12.1")]
    for student, named in WAITING_STEPS.items():
        result = results[(student, "12.1")]
        assert result["reason"] == verdict.SYNCS and all(n in result["message"] for n in named), result


IN_ONE_PROCESS = """
import json, sys
import numpy as np
import minitorch_cuda as mt
from minitorch_cuda.grade import checks, exercises, notebook
ex = exercises.get("12.1")
out = {}
for path in sys.argv[1:]:
    cell = notebook.exercise_source(notebook.read(path), ex)
    namespace = {"np": np, "mt": mt}
    exec(notebook.python_source(cell), namespace)
    result = checks.run_check("12.1", namespace["train_step"], cell)
    out[path] = [result.passed, result.reason, result.message]
print(json.dumps(out))
"""


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_every_wait_of_a_training_step_fails_12_1_in_one_process_on_the_emulator(tmp_path) -> None:
    """The notebook's check (report) runs the step in its own process: the same waits fail the same way."""
    import subprocess

    subs = build(tmp_path / "subs", _chapter_12(WAITING_STEPS))
    paths = {s: str(subs / s / "12_opt7_syncs.md") for s in ("full_solutions", *WAITING_STEPS)}
    env = dict(os.environ, MINITORCH_CUDA_EMULATE="1")
    run = subprocess.run(
        [sys.executable, "-c", IN_ONE_PROCESS, *paths.values()], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert results[paths["full_solutions"]][0], results[paths["full_solutions"]]
    for student, named in WAITING_STEPS.items():
        passed, reason, message = results[paths[student]]
        assert reason == verdict.SYNCS and all(n in message for n in named), (student, reason, message)


@pytest.fixture(scope="module")
def emulated_grades(tmp_path_factory) -> dict:
    """Every kernel exercise of the solutions, and each known-wrong student's (but the endless loops')
    exercises it must fail, on the emulator: each student hands in only those notebooks (the rest
    would be the solutions' kernels graded again, three quarters of the run)."""
    expected = {"full_solutions": KERNEL_IDS} | {s: ids for s, ids in FIRST_EXPECTED.items() if s != "infinite_loop"}
    subs = build(tmp_path_factory.mktemp("emulated"), {s: handing_in(STUDENTS[s], ids) for s, ids in expected.items()})
    out = tmp_path_factory.mktemp("emulated_grades") / "grades.csv"
    return run_grader(subs, out, KERNEL_IDS, "--emulate", "--timeout", "300", "--jobs", "2")


@pytest.mark.slow
@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
@pytest.mark.parametrize(
    "student,exercise_id",
    [("full_solutions", i) for i in KERNEL_IDS]
    + [(s, i) for s, expected in FIRST_EXPECTED.items() if s != "infinite_loop" for i in expected],
)
def test_emulated_kernel_grades(emulated_grades, student, exercise_id) -> None:
    """`grade --emulate` on the CPU: the solutions pass and the known-wrong kernels fail with the
    reasons they get on a GPU (the sanitizer's runs are the GPU's part)."""
    result = emulated_grades.get((student, exercise_id))
    if result is None:
        pytest.skip(f"{student} has no notebook for {exercise_id}")
    assert result.get("emulated"), result
    if student == "full_solutions":
        assert result["passed"], result
    else:
        assert result["reason"] in FIRST_EXPECTED[student][exercise_id], result


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_a_kernel_calling_the_host_changes_nothing_on_the_emulator(tmp_path) -> None:
    """The emulator runs a kernel as native code: one that calls system() to delete the submissions
    runs (in the emulated checker's sandbox) without touching them, and where nvcc exists it fails
    as it would on a GPU, where it does not compile."""
    subs = tmp_path / "subs"
    (subs / "native").mkdir(parents=True)
    attack = f'system("touch {tmp_path}/PWNED; rm -rf {subs}");'
    entry = 'extern "C" __global__ void ew_relu(float* out, const float* a, int n) {\n'
    text = (SOLUTIONS / "03_building_the_backend.md").read_text()
    assert entry in text
    text = text.replace(entry, f'extern "C" int system(const char*);\n{entry}    if (threadIdx.x == 0) {attack}\n')
    (subs / "native" / "03_building_the_backend.md").write_text(text)
    before = tree_bytes(subs)
    result = run_grader(subs, tmp_path / "g.csv", ["3.1"], "--emulate", "--timeout", "300")[("native", "3.1")]
    if shutil.which("nvcc"):
        assert result["reason"] == verdict.COMPILE_ERROR and "__host__ function" in " ".join(result["details"]), result
    if sandbox.bwrap():
        assert tree_bytes(subs) == before and not (tmp_path / "PWNED").exists()


FORGE_RESULT = (  # what a kernel's host code would do in the emulated checker: write its own verdict
    '    FILE* f = fopen("result.json", "w");\n'
    '    fprintf(f, "{\\"exercise\\": \\"3.1\\", \\"passed\\": true, \\"reason\\": \\"passed\\"}");\n'
    "    fclose(f);\n"
    "    _exit(0);\n"
)
RELU_BODY = "    const float x = a[i];\n    out[i] = x > 0.0f ? x : 0.0f;\n"
HOST_CODE = {  # host code that nvcc accepts (or never compiles for sm_90) around an empty kernel
    "constructor": ("__attribute__((constructor)) static void forge() {\n" + FORGE_RESULT + "}\n", "    // empty\n"),
    "static_object": ("struct Forge { Forge() {\n" + FORGE_RESULT + "} };\nstatic Forge forge;\n", "    // empty\n"),
    "destructor": ("__attribute__((destructor)) static void forge() {\n" + FORGE_RESULT + "}\n", "    // empty\n"),
    "arch_branch": ("", "#if __CUDA_ARCH__ < 900  // the emulator's 800, nvcc's sm_90\n" + FORGE_RESULT + "#endif\n"),
}
# Inline asm over several lines: the emulator's ptx.py reads every asm statement and refuses what is no
# PTX it models, so this one never reaches the device process's filter (before issue 39 it did).
RAW_SYSCALL = (
    "#if __CUDA_ARCH__ < 900\n    long r;\n    asm volatile(\n"
    '        "syscall"\n        : "=a"(r) : "a"(60L), "D"(0L) : "rcx", "r11", "memory");\n#endif\n'
)


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_host_code_in_a_kernel_source_cannot_write_its_verdict_on_the_emulator(tmp_path) -> None:
    """On the emulator the kernel's library is loaded into the checker: a constructor, a static object,
    a destructor or a branch for another __CUDA_ARCH__ that writes result.json and exits would grade
    an empty kernel as passed; each fails as host code. A raw system call in inline asm (which could do
    the same without the C library) is refused at build as PTX the emulator does not model. The
    honest kernel passes."""
    entry = 'extern "C" __global__ void ew_relu(float* out, const float* a, int n) {\n'
    text = (SOLUTIONS / "03_building_the_backend.md").read_text()
    assert entry in text and RELU_BODY in text
    subs = tmp_path / "subs"
    (subs / "honest").mkdir(parents=True)
    (subs / "honest" / "03_building_the_backend.md").write_text(text)
    for name, (before, body) in [*HOST_CODE.items(), ("raw_syscall", ("", RAW_SYSCALL))]:
        (subs / name).mkdir()
        forged = text.replace(entry, "#include <stdio.h>\n#include <unistd.h>\n" + before + entry)
        (subs / name / "03_building_the_backend.md").write_text(forged.replace(RELU_BODY, body))
    results = run_grader(subs, tmp_path / "g.csv", ["3.1"], "--emulate", "--timeout", "300", "--jobs", "2")
    assert results[("honest", "3.1")]["passed"], results[("honest", "3.1")]
    for name in HOST_CODE:
        result = results[(name, "3.1")]
        assert result["reason"] == verdict.HOST_SIDE and "host code" in result["message"], result
    result = results[("raw_syscall", "3.1")]
    assert result["reason"] == verdict.COMPILE_ERROR and "does not model the PTX instruction syscall" in str(result)


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_chapter_19_is_graded_on_the_emulator(tmp_path) -> None:
    """Issue 39: with --emulate, chapter 19's notebook executes and its exercises are graded on the CPU:
    the solutions get every point of 19.1 and 19.2, a wrong mma.sync fragment layout none of 19.2's,
    named at its first wrong register."""
    subs = build(tmp_path / "subs", {"full_solutions": STUDENTS["full_solutions"]} | TENSOR_CORE_STUDENTS)
    out = tmp_path / "g.csv"
    results = run_grader(subs, out, ["19.1", "19.2"], "--emulate", "--timeout", "300", execute=True)
    rubric = runner.load_rubric(None)["points"]
    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    assert float(rows["full_solutions"]["total"]) == rubric["19.1"] + rubric["19.2"], rows["full_solutions"]
    wrong = results[(SWAPPED_A_REGISTERS, "19.2")]
    assert wrong["reason"] == verdict.WRONG_RESULT and float(rows[SWAPPED_A_REGISTERS]["19.2"]) == 0, wrong
    assert "A, lane 0, register a1: yours (0, 4), the instruction's (8, 0)" in wrong["message"], wrong


# An #include in each spelling the preprocessor accepts is judged where the kernel compiles, by the
# files the preprocessor opened: tests/test_kernel_build.py (test_an_include_is_judged_by_what_the_
# preprocessor_opened), and through the grader by the known cheats of KERNEL_CHEATS below.


@pytest.fixture(scope="module")
def kernel_cheat_grades(tmp_path_factory) -> tuple[dict, Path]:
    """KERNEL_CHEATS and the honest student, graded on the GPU where there is one (nvcc's PTX is read),
    else on the emulator (--emulate: its build is read)."""
    subs = build(
        tmp_path_factory.mktemp("kernel_cheats"),
        {"full_solutions": STUDENTS["full_solutions"]} | {n: c[0] for n, c in KERNEL_CHEATS.items()},
    )
    out = tmp_path_factory.mktemp("kernel_cheat_grades") / "grades.csv"
    ids = sorted({c[1] for c in KERNEL_CHEATS.values()}, key=lambda i: exercises.get(i).sort_key)
    on_cpu = [] if mt.cuda_available() and not emulator_selected() else ["--emulate"]
    results = run_grader(subs, out, ids, *on_cpu, "--timeout", "300", "--jobs", "2", "--allow-partial")
    return results, out.parent


def emulator_selected() -> bool:
    from minitorch_cuda import emulator

    return emulator.selected()


@pytest.mark.skipif(
    not _emulator_usable() and not mt.cuda_available(), reason="needs a GPU, or the CPU emulator and a C++ compiler"
)
@pytest.mark.parametrize("name", list(KERNEL_CHEATS))
def test_a_kernel_cheat_loses_its_exercise(kernel_cheat_grades, name) -> None:
    """Issue 36, classes 1 and 2: an answer included from the framework (by name, through a macro, past
    a digit separator), a file quoted into a compile error, and a requirement met or a prohibition dodged
    only in the text (an #if 0 block, a comment, a pasted macro) each lose exactly their exercise, for
    the rule's reason in words; the honest student keeps every point, and no feedback quotes a file."""
    results, out = kernel_cheat_grades
    _, attacked, reasons = KERNEL_CHEATS[name]
    result = results[(name, attacked)]
    assert not result["passed"] and result["reason"] in reasons, result
    assert results[("full_solutions", attacked)]["passed"], results[("full_solutions", attacked)]
    for (student, exercise_id), other in results.items():
        if student == name and exercise_id != attacked and other["reason"] != verdict.MISSING_NOTEBOOK:
            assert other["passed"], other
    feedback = (out / "feedback" / f"{name}.md").read_text()
    assert "root:x:0" not in feedback and "/bin/bash" not in feedback


KERNEL_CHEAT_MESSAGES = {  # what each kernel cheat is told
    "includes_the_answer": "includes the framework's `elementwise.cu`, which holds the answer",
    "includes_through_a_macro": "includes the framework's `elementwise.cu`, which holds the answer",
    "quotes_a_file_in_a_compile_error": "includes `/etc/passwd`, a file outside the course's headers",
    "shared_only_in_a_dead_block": "your compiled kernel never uses shared memory",
    "shuffle_only_in_a_comment": "your compiled kernel has none",
    "atomic_through_a_macro": "use no atomics",
}


@pytest.mark.skipif(
    not _emulator_usable() and not mt.cuda_available(), reason="needs a GPU, or the CPU emulator and a C++ compiler"
)
def test_each_kernel_cheat_is_told_its_rule(kernel_cheat_grades) -> None:
    results, _ = kernel_cheat_grades
    assert set(KERNEL_CHEAT_MESSAGES) == set(KERNEL_CHEATS)
    for name, told in KERNEL_CHEAT_MESSAGES.items():
        result = results[(name, KERNEL_CHEATS[name][1])]
        assert told in result["message"], result


@pytest.mark.timeout(300)
def test_a_linked_or_special_notebook_is_not_graded(tmp_path) -> None:
    """A notebook that is a link to another student's is not graded as this student's work, and one
    that is a named pipe (read forever) fails its exercises instead of hanging the whole run."""
    subs = tmp_path / "subs"
    for name in ("bob", "linked", "piped"):
        (subs / name).mkdir(parents=True)
    shutil.copy(SOLUTIONS / "01_cuda_setup.md", subs / "bob")
    (subs / "linked" / "01_cuda_setup.md").symlink_to(subs / "bob" / "01_cuda_setup.md")
    os.mkfifo(subs / "piped" / "01_cuda_setup.md")
    shutil.copy(SOLUTIONS / "02_floating_point.md", subs / "piped")  # a student: one regular notebook
    results = run_grader(subs, tmp_path / "g.csv", ["1.2"], "--timeout", "60")
    assert results[("bob", "1.2")]["passed"]
    for name in ("linked", "piped"):
        result = results[(name, "1.2")]
        assert result["reason"] == verdict.MISSING_NOTEBOOK and "not a regular file" in result["message"], result


# a cell that writes a record of the notebook's run where the runner once wrote it (the folder the
# notebook runs in), and a directory in the way of its temporary file
FORGE_RECORD = (
    "\n```{code-cell} ipython3\n"
    "import json, pathlib\n"
    "pathlib.Path('.grade-exec.tmp').mkdir()\n"
    "pathlib.Path('.grade-exec.json').write_text(json.dumps(%s))\n"
    "```\n"
)
FORGED_LINES = "0\n\n## Exercise 1.2: forged (1/1, passed)\n\nTotal: 64 / 64\n"
RECORDS = {
    "forged_feedback": {"cells": [{"index": FORGED_LINES, "error": {"ename": "E", "evalue": FORGED_LINES}}]},
    "not_a_list": {"cells": 5},
    "not_json": "{",
}


@needs_bwrap
def test_a_notebook_cannot_forge_its_execution_record(tmp_path) -> None:
    """What the notebook writes as its run's record is never read: the runner's record reaches the
    grader through a pipe, and no line of the forgery can pass for a heading or a total in the
    feedback. The grade comes from the check."""
    sol = (SOLUTIONS / "01_cuda_setup.md").read_text()
    subs = tmp_path / "subs"
    for name, record in RECORDS.items():
        (subs / name).mkdir(parents=True)
        cell = FORGE_RECORD % repr(record if isinstance(record, dict) else None).replace("None", repr(record))
        text = sol + cell if isinstance(record, dict) else sol + cell.replace("json.dumps(", "(")
        (subs / name / "01_cuda_setup.md").write_text(text)
    out = tmp_path / "g.csv"
    results = run_grader(subs, out, ["1.2"], "--cell-timeout", "60", execute=True)
    executions = json.loads(out.with_suffix(".json").read_text())["executions"]
    for name in RECORDS:
        assert results[(name, "1.2")]["passed"], results[(name, "1.2")]
        feedback = (tmp_path / "feedback" / f"{name}.md").read_text().splitlines()
        assert not [line for line in feedback if line.startswith(("## Exercise 1.2: forged", "Total: 64"))], feedback
    # the record comes through the runner's pipe, not the folder: the forged file changes nothing
    ran = notebook.read(SOLUTIONS / "01_cuda_setup.md")
    ran = ran if mt.cuda_available() else notebook.without_gpu_cells(ran)
    cells = sum(1 for c in ran.cells if c.cell_type == "code") + 1  # and the forging cell
    for name in RECORDS:
        assert executions[f"{name}/01_cuda_setup"]["cells"] == cells, executions[f"{name}/01_cuda_setup"]
        assert not executions[f"{name}/01_cuda_setup"]["errors"], executions[f"{name}/01_cuda_setup"]


def test_an_exception_message_cannot_pass_for_a_grade_in_the_feedback(tmp_path) -> None:
    """The feedback quotes the student's own words (an exception's message) where no line of them
    can pass for a heading or the total."""
    sol = (SOLUTIONS / "01_cuda_setup.md").read_text()
    raises = f"    raise ValueError({FORGED_LINES!r})\n    if n <= 0:"
    subs = _student(tmp_path, "forger", "01_cuda_setup", sol.replace("    if n <= 0:", raises))
    result = run_grader(subs, tmp_path / "g.csv", ["1.2"])[("forger", "1.2")]
    assert result["reason"] == verdict.EXCEPTION and "forged" in result["message"]
    feedback = (tmp_path / "feedback" / "forger.md").read_text().splitlines()
    assert not [line for line in feedback if line.startswith(("## Exercise 1.2: forged", "Total: 64"))], feedback
    assert feedback[2] == "Total: 0 / 1"


def test_the_private_copy_leaves_out_what_would_fill_the_disk(tmp_path, monkeypatch) -> None:
    """One copy of the folder per notebook's run: files past the budget and files that cannot be read
    (a PermissionError stopped every student's grading) are left out and named; links and named
    pipes are never followed."""
    monkeypatch.setattr(sandbox, "MAX_COPIED", 1 << 20)
    folder = tmp_path / "student"
    (folder / "data").mkdir(parents=True)
    (folder / "01_cuda_setup.md").write_text("notebook")
    with (folder / "data" / "huge.bin").open("wb") as f:  # sparse: no disk used here
        f.truncate(2 << 20)
    (folder / "other.md").symlink_to(tmp_path)
    os.mkfifo(folder / "pipe.md")
    (folder / "data" / "unreadable.bin").write_text("its mode is 000")
    copyfile = shutil.copyfile

    def refuse(source, target, **options):  # a chmod 000 file, which root (as in CI) could still read
        if Path(source).name == "unreadable.bin":
            raise PermissionError(13, "Permission denied", str(source))
        return copyfile(source, target, **options)

    monkeypatch.setattr(shutil, "copyfile", refuse)
    copy, left_out = sandbox.private_copy(folder, tmp_path / "copy")
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == ["01_cuda_setup.md", "data"]
    assert left_out == ["data/huge.bin", "data/unreadable.bin"]


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_host_code_cannot_report_the_sanitizers_emulator_launch_clean() -> None:
    """On a GPU the sanitizer's step also launches the kernel on the emulator, which names what a GPU
    leaves undefined; a constructor that exits 0 before that launch made it report no errors."""
    from minitorch_cuda.grade import sanitizer

    kernel = (
        'extern "C" __global__ void ew_relu(float* out, const float* a, int n) {\n'
        "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) out[i] = a[i] > 0.0f ? a[i] : 0.0f;\n"
        "}\n"
    )
    exits = "#include <unistd.h>\n__attribute__((constructor)) static void clean() { _exit(0); }\n"
    ex = exercises.get("3.1")
    failure, notes = sanitizer.run(ex, kernel, timeout=120, emulator=True)
    assert failure is None and "the CPU emulator" in notes[0], (failure, notes)
    failure, _ = sanitizer.run(ex, exits + kernel, timeout=120, emulator=True)
    assert failure is not None and "host code" in failure, failure


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_an_emulated_kernel_cannot_fill_the_disk_or_the_memory(tmp_path, monkeypatch) -> None:
    """On the emulator a kernel's printf writes to the checker's log and its __device__ arrays are
    the checker's memory (a GPU bounds both): a printf loop stops growing the log at 256 MB and a
    2 GB array fails its exercise instead of filling the grading machine; the honest kernel passes
    under the same limits."""
    monkeypatch.setenv("MINITORCH_CUDA_GRADE_EMULATED_MEMORY", str(1 << 30))
    logs = []

    def run(argv, timeout, cwd, env, **kwargs):
        done = run.original(argv, timeout, cwd, env, **kwargs)
        logs.append(Path(cwd, "output.log").stat().st_size)
        return done

    run.original = runner._run
    monkeypatch.setattr(runner, "_run", run)
    text = (SOLUTIONS / "03_building_the_backend.md").read_text()
    entry = 'extern "C" __global__ void ew_relu(float* out, const float* a, int n) {\n'
    hog = "__device__ char hog[1u << 31];\n" + entry + "    for (unsigned k = 0; k < 1u << 31; k += 4096) hog[k] = 1;\n"
    flood = entry + '    while (true) printf("%s\\n", "flood flood flood flood flood flood flood flood");\n'
    subs = tmp_path / "subs"
    for name, edited in (("honest", text), ("hog", text.replace(entry, hog)), ("flood", text.replace(entry, flood))):
        (subs / name).mkdir(parents=True)
        (subs / name / "03_building_the_backend.md").write_text(edited)
    results = run_grader(subs, tmp_path / "g.csv", ["3.1"], "--emulate", "--timeout", "30", "--jobs", "2")
    assert results[("honest", "3.1")]["passed"], results[("honest", "3.1")]
    assert not results[("hog", "3.1")]["passed"] and results[("hog", "3.1")]["reason"] != verdict.TIMEOUT
    assert results[("flood", "3.1")]["reason"] == verdict.TIMEOUT, results[("flood", "3.1")]
    assert len(logs) == 3 and max(logs) <= 256 << 20, logs


def test_a_cell_nested_past_the_parsers_depth_costs_only_its_exercise(tmp_path) -> None:
    """A kernel source of 20000 joined literals, or a cell nested past Python's parser, raised
    RecursionError in the grader itself and stopped every student's grading."""
    deep = " + ".join(['"x"'] * 20000)
    kernel = (SOLUTIONS / "03_building_the_backend.md").read_text().replace('e = r"""', f'e = {deep} + r"""')
    subs = _student(tmp_path, "deep", "03_building_the_backend", kernel)
    bf16 = (SOLUTIONS / "02_floating_point.md").read_text().replace(":exercise: '2.1'\n", "")  # found by parsing
    (subs / "deep" / "02_floating_point.md").write_text(bf16 + f"\n```{{code-cell}} ipython3\ny = {deep}\n```\n")
    results = run_grader(subs, tmp_path / "g.csv", ["3.1", "2.1"], "--allow-partial")
    assert results[("deep", "3.1")]["reason"] == verdict.EXCEPTION, results[("deep", "3.1")]
    assert "cannot be read" in results[("deep", "3.1")]["message"]
    assert results[("deep", "2.1")]["passed"], results[("deep", "2.1")]


def test_code_that_fills_the_disk_is_stopped(tmp_path, monkeypatch) -> None:
    """A per-file limit does not bound many files: a cell that writes file after file (into its
    sandbox's folder) would fill the disk every other student's checks write to; its folder is a
    file system of a fixed size (or, without bwrap's --size, the run is stopped), and it costs its
    exercise only."""
    monkeypatch.setattr(sandbox, "MAX_WRITTEN", 200 << 20)
    monkeypatch.setenv("MINITORCH_CUDA_GRADE_DISK_BYTES", str(200 << 20))
    fill = (
        "import itertools, time\n"
        "for k in itertools.count():\n"
        "    if k < 8:\n"
        "        open(f'fill{k}', 'wb').write(bytes(64 << 20))\n"
        "    time.sleep(0.1)\n"
    )
    subs = _beside_honest(tmp_path, "filler", "04_memory", "4.1", fill)
    results = run_grader(subs, tmp_path / "g.csv", ["4.1"], "--timeout", "60")
    assert results[("honest", "4.1")]["passed"]
    result = results[("filler", "4.1")]
    if sandbox.own_disk():  # its folder is a file system of 200 MB: the write that would pass it fails
        assert result["reason"] == verdict.EXCEPTION and "No space left on device" in result["message"], result
    else:  # what it writes is polled
        assert result["reason"] == verdict.CRASHED and "wrote more than 200 MB" in result["message"], result


def _python_in_sandbox(code: str, folder: Path) -> subprocess.CompletedProcess:
    """``python -c code`` as the grader runs a student's code: in the sandbox, in ``folder``."""
    argv = sandbox.command([sys.executable, "-c", code], folder)
    return subprocess.run(argv, capture_output=True, text=True, cwd=folder, env=sandbox.environment(folder))


@needs_bwrap
def test_the_sandboxs_memory_backed_folders_are_bounded(tmp_path, monkeypatch) -> None:
    """/tmp and /dev/shm are in memory, which no process limit counts (the OOM killer would take
    other processes for them): each has a size, and /dev takes no file; the folder stays writable."""
    monkeypatch.setattr(sandbox, "TMPFS_BYTES", 1 << 20)
    code = (
        "for where in ('/tmp/x', '/dev/shm/x', '/dev/x', 'here'):\n"
        "    try:\n"
        "        open(where, 'wb').write(bytes(2 << 20))\n"
        "        print(where, 'written')\n"
        "    except OSError as exc:\n"
        "        print(where, 'refused', exc.errno)\n"
        "open('/dev/null', 'wb').write(b'device nodes still work')\n"
    )
    out = _python_in_sandbox(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == [
        f"/tmp/x refused {errno.ENOSPC}",
        f"/dev/shm/x refused {errno.ENOSPC}",
        f"/dev/x refused {errno.EROFS}",
        "here written",
    ], out.stdout


def test_a_subject_writing_a_huge_frame_out_of_turn_is_cut_off(tmp_path) -> None:
    """The subject's cell writes its own frame on the channel before any answer: 38 MB of empty JSON
    lists, which the checker would decode into a gigabyte of objects. The frame's size is refused
    before anything is read, and only that exercise is lost."""
    flood = (
        "import os, sys\n"
        "_body = b'[' + b'[],' * (12 << 20) + b'[]]'\n"
        "os.write(int(sys.argv[2]), len(_body).to_bytes(4, 'big'))\n"
        "os.write(int(sys.argv[2]), _body)\n"
    )
    subs = _beside_honest(tmp_path, "flooder", "01_cuda_setup", "1.2", flood)
    results = run_grader(subs, tmp_path / "g.csv", ["1.2"], "--timeout", "60")
    assert results[("honest", "1.2")]["passed"]
    result = results[("flooder", "1.2")]
    assert result["reason"] == verdict.CRASHED and "over the channel's limit" in result["message"], result


def test_a_huge_or_broken_notebook_fails_its_exercises(tmp_path) -> None:
    """A notebook past 64 MB is not read at all; one that is not JSON, or JSON nested past the
    parser's depth, fails its exercises with the reason, and the other students are graded."""
    subs = tmp_path / "subs"
    for name in ("honest", "huge", "not_json", "nested"):
        (subs / name).mkdir(parents=True)
    shutil.copy(SOLUTIONS / "01_cuda_setup.md", subs / "honest")
    with (subs / "huge" / "01_cuda_setup.ipynb").open("wb") as f:  # sparse: no disk used here
        f.truncate(runner.MAX_NOTEBOOK + 1)
    (subs / "not_json" / "01_cuda_setup.ipynb").write_text('{"cells": [')
    (subs / "nested" / "01_cuda_setup.ipynb").write_text("[" * 200_000)
    results = run_grader(subs, tmp_path / "g.csv", ["1.2"])
    assert results[("honest", "1.2")]["passed"]
    for name in ("huge", "not_json", "nested"):
        result = results[(name, "1.2")]
        assert result["reason"] == verdict.MISSING_NOTEBOOK and "cannot be read" in result["message"], result
    assert "larger than 64 MB" in results[("huge", "1.2")]["message"]


@pytest.mark.skipif(sandbox.task_groups() is None, reason="no pids cgroup this process may make groups in")
def test_a_fork_bomb_is_bounded_by_its_task_group_and_nothing_of_it_outlives_the_run(tmp_path, monkeypatch) -> None:
    """RLIMIT_NPROC does not hold for root: a run's processes are bounded by a pids cgroup of its own
    instead (forks past MAX_TASKS fail), and finish() kills what is left in it and removes it, the
    children that left the run's session included."""
    monkeypatch.setattr(sandbox, "MAX_TASKS", 24)
    code = (
        "import os, time\n"
        "made = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()  # out of the run's session: only the group still holds it\n"
        "            time.sleep(600)\n"
        "            os._exit(0)\n"
        "        made += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print(made, flush=True)\n"
        "time.sleep(600)\n"
    )
    argv = sandbox.command([sys.executable, "-c", code], tmp_path)
    proc = sandbox.popen(argv, cwd=tmp_path, env=sandbox.environment(tmp_path), stdout=subprocess.PIPE, text=True)
    group = sandbox._groups[proc.pid]
    made = int(proc.stdout.readline())
    assert 0 < made < 24, made  # bwrap, its init and Python's own threads hold some of the 24
    tasks = [int(t) for t in (group / "cgroup.procs").read_text().split()]
    assert len(tasks) > made
    sandbox.finish(proc)
    assert not group.exists()
    assert not any(_alive(t) for t in tasks)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (dead, not yet reaped by its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@needs_bwrap
def test_sandboxed_code_has_no_capabilities_even_when_the_grader_is_root(tmp_path) -> None:
    """bwrap started by root (a container, a CI runner) keeps every capability: the student's code
    could remount the read-only system writable, or make a disk's device node and mount it."""
    code = (
        "import os, subprocess\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "print(subprocess.run(['mount', '-o', 'remount,rw', '/usr']).returncode != 0)\n"
        "try:\n"
        "    os.mknod('/tmp/disk', 0o600 | 0o060000, os.makedev(8, 0))\n"
        "    print(False)\n"
        "except OSError:\n"
        "    print(True)\n"
    )
    out = _python_in_sandbox(code, tmp_path)
    assert out.stdout.split() == ["0000000000000000", "True", "True"], (out.stdout, out.stderr)


DOUBLINGS = "".join(f"#define A{k} A{k - 1} A{k - 1}\n" for k in range(1, 41))
BOMB = "#define A0 x\n" + DOUBLINGS + "int bomb = sizeof(A40);\n"


@needs_nvcc
def test_nvcc_on_a_preprocessor_bomb_runs_out_of_its_own_memory(monkeypatch) -> None:
    """A macro doubled forty times expands to 2^40 tokens: nvcc's preprocessor would take the grading
    machine's memory (on a GPU the checker, holding a CUDA context, has no cap of its own). The
    sandboxed compile of a student's kernel (kernel_build, sandbox.run_compiler) has one, and says
    so in its own words; an honest kernel still compiles."""
    from minitorch_cuda.grade import kernel_build

    monkeypatch.setattr(sandbox, "COMPILER_MEMORY", 1 << 30)
    honest = 'extern "C" __global__ void ew_relu(float* out, const float* a, int n) { }\n'
    assert kernel_build.gpu_errors(honest) == []
    refused = kernel_build.gpu_errors(BOMB + honest)
    assert refused and "memory" in " ".join(refused), refused


# --- issue 36, classes 2, 5 and 6: rules by behaviour, references first, hidden shapes -----------


import numpy as np  # noqa: E402 -- (this block's own imports, kept with it for merging)


def test_hidden_shapes_are_a_function_of_the_seed(monkeypatch) -> None:
    """The same seed draws the same shapes (a grade can be reproduced); another seed others; every
    size is past the bound, ragged, and the last near the largest; the emulator's are smaller."""
    from minitorch_cuda import emulator
    from minitorch_cuda.grade import hidden

    monkeypatch.delenv(emulator.ENV, raising=False)

    def draw(seed, exercise_id="6.1"):
        hidden.use(seed, exercise_id)
        return hidden.sizes("n", 200_704, 4_000_000, 3, 1024), hidden.between("M", 71, 400, 2)

    first = draw(5)
    assert draw(5) == first and draw(6) != first and draw(5, "3.1") != first
    sizes = first[0]
    assert all(200_704 < n <= 4_000_001 and n % 1024 for n in sizes) and sizes[-1] > 4_000_000 * 15 // 16
    monkeypatch.setenv(emulator.ENV, "1")
    assert all(200_704 < n <= 200_704 * 1.5 + 0.1 * 4_000_000 for n in draw(5)[0])
    hidden.use(None, "6.1")
    assert hidden.sizes("n", 10, 10**9, 1) != hidden.sizes("n", 10, 10**9, 1)  # no seed: fresh shapes


def test_the_seed_is_recorded_and_a_resumed_run_keeps_it(tmp_path) -> None:
    subs = _student(tmp_path, "honest", "01_cuda_setup", (SOLUTIONS / "01_cuda_setup.md").read_text())
    out = tmp_path / "g.csv"
    results = run_grader(subs, out, ["1.2"], "--seed", "1234")
    assert results[("honest", "1.2")]["seed"] == 1234
    assert json.loads(out.with_suffix(".json").read_text())["meta"]["seed"] == 1234
    json_path = out.with_suffix(".json")
    data = json.loads(json_path.read_text())
    data["results"] = []  # as if interrupted before its first result: the rerun resumes with the seed
    json_path.write_text(json.dumps(data))
    assert run_grader(subs, out, ["1.2"])[("honest", "1.2")]["seed"] == 1234
    with pytest.raises(SystemExit):
        grade.main([str(subs), "--out", str(out), "--seed", "minus one"])


RULES_PROBE = """
import importlib, json, os, sys
import numpy as np
import minitorch_cuda.exercise  # what the subject loads before the cell
from minitorch_cuda.grade import fakes, python_work, subject_rules
subject_rules.install(sys.argv[1], library_dirs=python_work.library_dirs())
root = os.path.dirname(os.path.dirname(subject_rules.__file__))
attempts = {
    "import": lambda: __import__("ml_dtypes"),
    "importlib, concatenated": lambda: importlib.import_module("ml_" + "dtypes"),
    "builtins by a key": lambda: vars(__import__("builtins"))["__imp" + "ort__"]("ml_dtypes"),
    "answer key": lambda: importlib.import_module("minitorch_cuda.grade.mma_" + "fragments"),
    "answer key's file": lambda: exec(open(os.path.join(root, "numerics.py")).read(), {}),
    "a checkout's solutions": lambda: open(os.path.join(os.path.dirname(root), "solutions", "x.md")),
    "a second Python": lambda: __import__("subprocess").run([sys.executable, "-c", "1"]),
    "ctypes": lambda: __import__("ctypes").string_at(id(1), 8),
    "gc's objects": lambda: __import__("gc").get_objects(),
    "the framework's own pool": lambda: importlib.import_module("minitorch_cuda.cuda.memory"),
    "the framework's graphed step, as a file": lambda: open(os.path.join(root, "cuda", "graphs.py")).read(),
}
refused = {}
for what, attempt in attempts.items():
    try:
        attempt()
        refused[what] = False
    except PermissionError:
        refused[what] = True
still = float(np.linalg.norm(np.ones(4))) == 2.0 and importlib.import_module("minitorch_cuda.grade.fakes") is fakes
print(json.dumps({"refused": refused, "numpy and the fakes still work": still, "log": subject_rules.refusals}))
"""


@pytest.mark.parametrize("exercise_id", ["2.1", "19.1"])
def test_the_subject_refuses_what_the_exercise_rules_out_whatever_the_spelling(exercise_id) -> None:
    """In a fresh process (the audit hook stays for its life): every spelling of a forbidden import,
    an answer key as a module or as a file, a program, ctypes and gc are refused and recorded; numpy
    and the modules the subject runs on are not."""
    run = subprocess.run([sys.executable, "-c", RULES_PROBE, exercise_id], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(data["refused"].values()), data["refused"]
    assert data["numpy and the fakes still work"]
    assert len(data["log"]) >= len(data["refused"]) and all("refused" in line for line in data["log"])


PACKAGE_CTYPES_PROBE = """
import ctypes, json, os, site, sys
from minitorch_cuda.grade import python_work, subject_rules
# a package's function (compiled before the rules, under a site-packages name), as Triton's driver probe
package = os.path.join(site.getsitepackages()[0], "a_package", "driver.py")
space = {}
exec(compile("def probe(name):\\n    import ctypes\\n    return ctypes.CDLL(name)\\n", package, "exec"), space)
subject_rules.install(sys.argv[1], library_dirs=python_work.library_dirs())
outcome = {}
for what, attempt in {
    "the package opens the C library": lambda: space["probe"]("libc.so.6"),
    "the package opens a file the student wrote": lambda: space["probe"]("/tmp/student/libmine.so"),
    "the student opens the C library": lambda: ctypes.CDLL("libc.so.6"),
    "the student reads memory": lambda: ctypes.string_at(id(1), 8),
}.items():
    try:
        attempt()
        outcome[what] = "ran"
    except PermissionError:
        outcome[what] = "refused"
    except OSError:
        outcome[what] = "not found"
print(json.dumps({"outcome": outcome, "log": subject_rules.refusals}))
"""


@pytest.mark.parametrize("exercise_id", ["20.2", "19.1"])
def test_ctypes_is_refused_to_the_student_not_to_an_installed_packages_own_probe(exercise_id) -> None:
    """On the GPU machine Triton's driver probe opens libcuda through ctypes during 20.2's launch,
    after the subject's rules are in place (the shipped solution was graded forbidden there): in
    20.2 an installed package's own ctypes use passes, of a library the system holds; the same
    package opening a file outside the system's folders (one the student's code could have
    written) and the student's own ctypes are refused. In any other exercise, all of it."""
    run = subprocess.run(
        [sys.executable, "-c", PACKAGE_CTYPES_PROBE, exercise_id], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads(run.stdout.strip().splitlines()[-1])
    package_may = exercise_id == "20.2"
    assert data["outcome"] == {
        "the package opens the C library": "ran" if package_may else "refused",
        "the package opens a file the student wrote": "refused",
        "the student opens the C library": "refused",
        "the student reads memory": "refused",
    }, data
    assert len(data["log"]) == (3 if package_may else 4) and all("ctypes" in line for line in data["log"])


def test_module_and_path_rules() -> None:
    from minitorch_cuda.grade import subject_rules as rules

    assert rules.module_rule("minitorch_cuda.grade.mma_fragments", "19.2") == rules.WHY_GRADER
    assert rules.module_rule("minitorch_cuda.grade.host_checks", "1.2") == rules.WHY_GRADER
    assert rules.module_rule("minitorch_cuda.grade.fakes", "4.1") is None  # the subject's own
    assert rules.module_rule("minitorch_cuda.profiler", "4.1") is None  # 4.1 counts with it
    assert rules.module_rule("minitorch_cuda.tile_eval.interop", "20.2") is None  # 20.2's launcher needs it
    assert rules.module_rule("minitorch_cuda.tile_eval.cases", "20.1") is not None  # 20.1's answer
    assert rules.module_rule("ml_dtypes", "2.1") and rules.module_rule("ml_dtypes", "20.2") is None
    assert rules.module_rule("tests.submissions", "1.2") == rules.WHY_CHECKOUT
    package = rules.PACKAGE_DIR
    assert rules.path_rule(package / "grade" / "__pycache__" / "mma_fragments.cpython-311.pyc", "19.2")
    assert rules.path_rule(package / "numerics.py", "19.1") and rules.path_rule(package / "kernels" / "x.cu", "19.2")
    assert rules.path_rule(package / "grade" / "fakes.py", "4.1") is None and rules.path_rule(3, "4.1") is None


def test_per_element_python_is_counted_not_spelt() -> None:
    """A whole-array function runs as many lines for 8,000 values as for 500; a while loop over the
    elements runs more, and fails however it is written. Counted in this process by the subject's
    counter, as the subject does (python_work.Counter), its records read as the checker reads them:
    one a return, with the lines since the start and the result's digest, under the checker's secret."""
    import sys as _sys

    from minitorch_cuda.grade import python_work

    namespace: dict = {"np": np}
    exec(
        compile(
            "def whole(x):\n    return np.where(x > 0, x, 0)\n"
            "def each(x):\n    out, i = np.empty_like(x), 0\n    while i < x.size:\n"
            "        out[i] = max(x[i], 0)\n        i += 1\n    return out\n",
            "<cell>",
            "exec",
        ),
        namespace,
    )
    gettrace = _sys.gettrace

    def lines(fn, n):
        """The lines of fn's second call on n values, and whether the result's digest came with them."""
        reading, writing = os.pipe()
        records = python_work.Records(reading, b"s" * python_work.SECRET_BYTES)
        counter = python_work.Counter(python_work.library_dirs(), records.secret, writing)
        watch = counter.install()  # (as the subject does before the cell: sys.gettrace then answers None)
        try:
            assert _sys.gettrace() is None and watch(fn)
            x = np.arange(n) - n // 2
            start = records.next(fn(x), "f")
            got = fn(x)
            return records.next(got, "f") - start
        finally:
            _sys.settrace(None)
            _sys.gettrace = gettrace
            os.close(reading), os.close(writing)

    assert lines(namespace["whole"], 500) == lines(namespace["whole"], 8000) > 0
    assert lines(namespace["each"], 8000) - lines(namespace["each"], 500) >= 7500 * 2
    assert python_work.require_whole_array(namespace["whole"], np.ones(5), np.ones(50), "f") is None  # no subject
    # a record of another result, or without the secret, fails the check
    reading, writing = os.pipe()
    records = python_work.Records(reading, b"s" * python_work.SECRET_BYTES)
    os.write(writing, b"s" * python_work.SECRET_BYTES + (3).to_bytes(8, "big") + python_work.digester()(np.ones(2)))
    with pytest.raises(verdict.CheckFailed, match="not the one your function returned"):
        records.next(np.zeros(2), "f")
    os.write(writing, b"x" * python_work.SECRET_BYTES + (3).to_bytes(8, "big") + python_work.digester()(np.ones(2)))
    with pytest.raises(verdict.CheckFailed, match="did not come from the grader's counter"):
        records.next(np.ones(2), "f")
    os.close(reading), os.close(writing)


def test_the_checkers_arrays_never_take_a_subjects_writes() -> None:
    """A subject that writes into the arrays it was handed changes its own copies: the checker's
    stay as they were (its references come from them), and the checker learns which were changed."""
    import threading

    from minitorch_cuda.grade import channel, worker

    to_subject, from_checker = os.pipe()
    to_checker, from_subject = os.pipe()
    checker = channel.Peer(to_checker, from_checker, shareable=worker.shareable)
    subject = channel.Peer(to_subject, from_subject, private=False)

    def vandal(a, b):
        a[:] = -1
        return a.sum()

    def reader(a, b):
        return a.sum() + b.sum()

    proxy, read = (channel.Proxy(checker, subject.encode(f)["H"]) for f in (vandal, reader))

    def serve():
        with __import__("contextlib").suppress(channel.SubjectGone):
            while True:
                subject.serve_one(subject.receive())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    a, b = np.arange(4.0), np.ones(3)
    assert checker.call(proxy, a, b) == -4.0
    assert np.array_equal(a, np.arange(4.0)) and channel.changed_arguments(proxy) == [0]
    assert checker.call(read, a, b) == 9.0 and channel.changed_arguments(read) == []
    os.close(from_checker)  # the checker's end first: the subject reads the end of its input and stops
    thread.join(timeout=10)
    assert not thread.is_alive()
    for fd in (to_subject, to_checker, from_subject):
        os.close(fd)


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
@pytest.mark.parametrize("name", list(HIDDEN_SHAPE_CHEATS))
def test_a_kernel_fitted_to_the_fixed_shapes_fails_on_the_hidden_ones_on_the_emulator(tmp_path, name) -> None:
    """A kernel that covers the fixed shapes and nothing more passes the notebook's checks and fails
    the grader's hidden shapes, on every seed; the honest kernel passes on the same seed."""
    stem, find, replace, exercise_id, reason = HIDDEN_SHAPE_CHEATS[name]
    sol = (SOLUTIONS / f"{stem}.md").read_text()
    assert find in sol
    subs = _student(tmp_path, name, stem, sol.replace(find, replace))
    (subs / "honest").mkdir()
    shutil.copy(SOLUTIONS / f"{stem}.md", subs / "honest")
    for seed in ("1", "2"):
        results = run_grader(subs, tmp_path / f"g{seed}.csv", [exercise_id], "--emulate", "--seed", seed)
        assert results[(name, exercise_id)]["reason"] == reason and "n=" in results[(name, exercise_id)]["message"]
        assert results[("honest", exercise_id)]["passed"], results[("honest", exercise_id)]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", list(HIDDEN_SHAPE_CHEATS))
def test_a_kernel_fitted_to_the_fixed_shapes_fails_on_the_hidden_ones_on_a_gpu(tmp_path, name) -> None:
    stem, find, replace, exercise_id, reason = HIDDEN_SHAPE_CHEATS[name]
    sol = (SOLUTIONS / f"{stem}.md").read_text()
    subs = _student(tmp_path, name, stem, sol.replace(find, replace))
    result = run_grader(subs, tmp_path / "g.csv", [exercise_id], "--timeout", "120")[(name, exercise_id)]
    assert result["reason"] == reason, result


@needs_bwrap
def test_a_subjects_sandbox_holds_no_answer_key_to_read(tmp_path) -> None:
    """What subject_rules.unseen names (numerics.py, the grader's checks, ml_dtypes for 2.1) reads as
    nothing in a subject's sandbox, by any spelling, while the framework still imports: a hook got
    around finds no file behind it (opens_the_package_folder, switches_the_hook_off)."""
    from minitorch_cuda.grade import subject_rules

    package = subject_rules.PACKAGE_DIR
    covered = subject_rules.unseen("2.1")
    assert package / "numerics.py" in covered and package / "grade" / "mma_fragments.py" in covered
    assert not {package / "grade" / f"{m}.py" for m in ("channel", "subject", "python_work")} & set(covered)
    tiles = package / "tile_eval"  # 20.2 may use some of chapter 20's code: the rest stays covered
    assert tiles in subject_rules.unseen("20.1") and tiles / "triton_kernels.py" in subject_rules.unseen("20.2")
    assert not {tiles / "__init__.py", tiles / "interop.py", tiles / "cases.py"} & set(subject_rules.unseen("20.2"))
    probe = f"""
import os, minitorch_cuda, minitorch_cuda.exercise
folder = os.open({str(package)!r}, os.O_RDONLY)
for name in ("numerics.py", "grade/mma_fragments.py"):
    try:
        fd = os.open(name, os.O_RDONLY, dir_fd=folder)
        print(len(os.read(fd, 1 << 20)))
    except OSError:
        print(0)
try:
    import ml_dtypes  # (its folder is empty there: at most a namespace package)
    print(hasattr(ml_dtypes, "bfloat16"))
except ImportError:
    print(False)
"""
    argv = sandbox.command([sys.executable, "-c", probe], tmp_path, cover=covered)
    done = subprocess.run(argv, capture_output=True, text=True, env=sandbox.environment(tmp_path), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "False"], done.stdout


@needs_bwrap
def test_the_sandbox_shows_the_package_and_nothing_else_of_a_checkout(tmp_path) -> None:
    """Installed editable, the package lies in the course's repository: sandboxed code imports it, reads
    the MNIST data beside it, and sees nothing of solutions/, exercises/, tests/ or chapters/."""
    root = sandbox.PACKAGE_ROOT
    if not (root / "solutions").is_dir():
        pytest.skip("the package is not installed from a checkout")
    probe = f"""
import os, minitorch_cuda
print(minitorch_cuda.__file__)
print(sorted(os.listdir({str(root / "data")!r})))
print([n for n in ("solutions", "exercises", "tests", "chapters") if os.listdir({str(root)!r} + "/" + n)])
try:
    print(len(open({str(root / "README.md")!r}).read()))
except OSError:
    print(0)
"""
    argv = sandbox.command([sys.executable, "-c", probe], tmp_path)
    done = subprocess.run(argv, capture_output=True, text=True, env=sandbox.environment(tmp_path), timeout=60)
    assert done.returncode == 0, done.stderr
    package, data, shown, readme = done.stdout.splitlines()
    assert package == str(root / "minitorch_cuda" / "__init__.py")
    assert data != "[]" and shown == "[]" and readme == "0", done.stdout


# --- class 7 of issue 36: untrusted input (what the grader parses, walks, writes and shows) ---------

CLEAR_REASONS = {  # the cheat (tests/submissions.py) -> words of the message its exercise gets
    "yaml_alias_bomb": "anchors or aliases",
    "tiny_cells": "cells, more than",
    "fallocates_gigabytes": "No space left on device",
    "forges_markdown": "Total: 64",
}


@pytest.mark.parametrize("name", list(CLEAR_REASONS))
def test_untrusted_input_cheats_get_a_clear_reason(cheat_grades, name) -> None:
    if name == "fallocates_gigabytes" and not sandbox.own_disk():
        pytest.skip("needs bwrap with --size (a disk of its own per run)")
    results, _, _ = cheat_grades
    _, attacked, _ = CHEATS[name]
    assert CLEAR_REASONS[name] in results[(name, attacked)]["message"], results[(name, attacked)]


def test_student_text_in_the_feedback_is_plain_text() -> None:
    """A message, a detail, a notebook's error or a name a student controls renders as the characters
    typed: no heading, total, table, HTML, link or code fence of theirs reaches the Markdown."""
    forged = "x\n# Feedback for you\n\nTotal: 64 / 64\n| a | b |\n<h2>passed</h2> [ok](http://x) ``` *"
    reason = verdict.EXCEPTION
    result = verdict.CheckResult("1.2", False, reason, "## Exercise 1.2 (1/1, passed) " + forged, [forged])
    results = {("m#llory <b>", "1.2"): dict(result.to_dict(), points=0.0, max_points=1.0, status=verdict.GRADED)}
    executions = {"m#llory <b>/01_cuda_setup": {"errors": [forged], "sandbox": "bwrap"}}
    text = runner._feedback("m#llory <b>", ["1.2"], results, executions, {"points": {"1.2": 1.0}})
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("#")] == [
        "# Feedback for m\\#llory \\<b\\>",
        f"## Exercise 1.2: {exercises.get('1.2').title} (0/1, failed: exception)",
        "## When your notebooks ran",
    ]
    assert [line for line in lines if line.startswith("Total")] == ["Total: 0 / 1"]
    outside_code = [line for line in lines if not line.startswith("    ")]
    assert not [line for line in outside_code if re.search(r"(?<!\\)[<|`\[]", line)], outside_code
    # a reason forged by code that runs in the checker's process (a kernel on the emulator)
    results[("m#llory <b>", "1.2")]["reason"] = "x)\n\nTotal: 64 / 64\n# ok"
    text = runner._feedback("m#llory <b>", ["1.2"], results, executions, {"points": {"1.2": 1.0}})
    assert [line for line in text.splitlines() if line.startswith(("#", "Total"))][:3] == [
        "# Feedback for m\\#llory \\<b\\>",
        "Total: 0 / 1",
        f"## Exercise 1.2: {exercises.get('1.2').title} (0/1, failed: x) Total: 64 / 64 \\# ok)",
    ]


def test_control_characters_reach_no_feedback_and_no_terminal() -> None:
    """A message, a detail or a name with terminal control codes (ESC, BEL, a carriage return, C1's CSI)
    reaches the feedback, the CSV and the grader's warnings as visible escapes: a terminal that shows
    them clears, retitles or rewrites nothing (sends_terminal_codes is the known cheat)."""
    codes = "\x1b]0;graded\x07\x1b[2J\x1bcTotal: 64 / 64\r\x9b31m\x00"
    result = verdict.CheckResult("1.2", False, verdict.EXCEPTION, "x " + codes + "\nsecond " + codes, [codes])
    results = {("ann" + codes, "1.2"): dict(result.to_dict(), points=0.0, max_points=1.0, status=verdict.GRADED)}
    executions = {"ann" + codes + "/01_cuda_setup": {"errors": [codes], "sandbox": "bwrap"}}
    text = runner._feedback("ann" + codes, ["1.2"], results, executions, {"points": {"1.2": 1.0}})
    text += runner._csv_text(codes) + verdict.shown(codes)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), text
    assert "\\x1b]0" in verdict.shown(codes) and "\\x9b31m" in verdict.shown(codes)


def test_a_deep_folder_and_undecodable_names_cost_no_one_anything(tmp_path) -> None:
    """A folder nested past the recursion limit beside a notebook, a student folder and a file whose
    names are not UTF-8: every student is graded, the feedback names them escaped, a rerun resumes."""
    subs = tmp_path / "subs"
    for name in ("honest", "deep"):
        (subs / name).mkdir(parents=True)
        shutil.copy(SOLUTIONS / "01_cuda_setup.md", subs / name)
    fd = os.open(subs / "deep", os.O_RDONLY)
    for _ in range(sys.getrecursionlimit() + 500):  # one level at a time: no path is too long to make
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    odd = os.path.join(os.fsencode(subs), b"caf\xe9")
    os.mkdir(odd)
    shutil.copy(SOLUTIONS / "01_cuda_setup.md", os.fsdecode(odd))
    open(os.path.join(odd, b"notes-\xff.txt"), "wb").close()
    try:
        _grade_deep_and_undecodable(subs, tmp_path, os.fsdecode(odd).rsplit("/", 1)[1])
    finally:  # pytest's own clean-up recurses
        sandbox.remove_tree(subs / "deep" / "d")


def _grade_deep_and_undecodable(subs: Path, tmp_path: Path, student: str) -> None:
    out = tmp_path / "g.csv"
    results = run_grader(subs, out, ["1.2"], "--cell-timeout", "60", execute=True)
    for name in ("honest", "deep", student):
        assert results[(name, "1.2")]["passed"], results[(name, "1.2")]
    assert "caf\\xe9" in (tmp_path / "g.csv").read_text()
    # the byte shown as \xe9, its backslash escaped for Markdown
    assert (tmp_path / "feedback" / f"{student}.md").read_text().startswith("# Feedback for caf\\\\xe9\n")
    executions = json.loads(out.with_suffix(".json").read_text())["executions"]
    assert any("not copied" in e for e in executions["deep/01_cuda_setup"]["errors"]), executions
    again = run_grader(subs, out, ["1.2"])  # resumes: nothing to grade again, nothing stops
    assert {k: r["graded_at"] for k, r in again.items()} == {k: r["graded_at"] for k, r in results.items()}


def test_the_ledger_appends_and_resume_ignores_a_torn_line(tmp_path) -> None:
    """A result costs one line of grades.journal (grades.json is not rewritten); a rerun reads both,
    and a last line torn by a kill is ignored (that result is graded again)."""
    rubric = runner.load_rubric(None)
    ledger = runner.Ledger(tmp_path / "grades.json", rubric)
    ledger.students = ["ann", "bob"]
    ledger.compact()
    compacted = (tmp_path / "grades.json").read_bytes()
    ledger.add("ann", verdict.CheckResult("1.2", True, verdict.PASSED).to_dict())
    ledger.add("bob", verdict.CheckResult("1.2", False, verdict.WRONG_RESULT, "no").to_dict())
    assert (tmp_path / "grades.json").read_bytes() == compacted
    journal = tmp_path / "grades.journal"
    assert len(journal.read_text().splitlines()) == 2
    journal.write_bytes(journal.read_bytes()[:-20])  # killed mid-line
    again = runner.Ledger(tmp_path / "grades.json", rubric)
    assert again.done("ann", "1.2") and not again.done("bob", "1.2")
    again.compact()
    assert not journal.exists() and runner.Ledger(tmp_path / "grades.json", rubric).done("ann", "1.2")
    (tmp_path / "grades.json").write_text("{")
    with pytest.raises(ValueError, match="move it away"):
        runner.Ledger(tmp_path / "grades.json", rubric)


def test_the_csv_says_what_was_emulated_and_leaves_an_ungraded_row_blank(tmp_path) -> None:
    rubric = runner.load_rubric(None)
    ledger = runner.Ledger(tmp_path / "g.json", rubric)
    emulated = dict(verdict.CheckResult("3.1", True, verdict.PASSED).to_dict(), emulated=True)
    ledger.add("ann", emulated)
    ledger.add("ann", verdict.CheckResult("3.2", False, verdict.NO_GPU, "no GPU").to_dict())
    runner.write_outputs(ledger, ["ann", "bob", "=2+5"], ["3.1", "3.2"], tmp_path / "g.csv")
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "g.csv").open())}
    assert "'=2+5" in rows  # a spreadsheet shows that folder's name, it does not compute it
    assert rows["ann"]["notes"] == "emulated: 3.1; not graded (needs a GPU): 3.2"
    assert (rows["bob"]["3.1"], rows["bob"]["total"]) == ("", "")
    assert "not run under compute-sanitizer" in (tmp_path / "feedback" / "ann.md").read_text()


def test_without_a_terminal_progress_is_a_line_now_and_then(monkeypatch, capsys) -> None:
    monkeypatch.setattr(runner, "PROGRESS_EVERY", 0.0)
    bar = runner._progress(2, True)
    bar.update(1)
    bar.update(1)
    assert capsys.readouterr().err.splitlines() == [
        "grading: 1 of 2 exercises done",
        "grading: 2 of 2 exercises done",
    ]


def test_the_similarity_report_flags_a_copied_built_in_kernel_and_a_shared_kernel(tmp_path, capsys) -> None:
    """similarity.csv and the instructor's files name two students handing in the same kernel and a
    kernel copied from the framework; the grades and the students' own feedback do not change."""
    sol = (SOLUTIONS / "03_building_the_backend.md").read_text()
    gather = similarity.global_functions((similarity.KERNELS / "gather.cu").read_text())["gather_rows"]
    entry = 'ew_relu_source = r"""\n'
    copied = sol.replace(entry, entry + "// mine\n" + gather.replace("gather_rows", "my_kernel") + "\n")
    subs = tmp_path / "subs"
    for name, text in (("ann", sol), ("bob", sol), ("cy", copied)):
        (subs / name).mkdir(parents=True)
        (subs / name / "03_building_the_backend.md").write_text(text)
    out = tmp_path / "g.csv"
    results = run_grader(subs, out, ["3.1", "3.3"], "--allow-partial")
    rows = [r for r in csv.DictReader((tmp_path / "similarity.csv").open()) if r["flagged"] == "yes"]
    assert ("3.3", "ann", "bob") in {(r["exercise"], r["student"], r["matches"]) for r in rows}, rows
    assert ("3.1", "cy", "built-in gather.cu:gather_rows") in {
        (r["exercise"], r["student"], r["matches"]) for r in rows
    }
    assert "bob" in (tmp_path / "instructor" / "ann.md").read_text()
    assert "gather_rows" in (tmp_path / "instructor" / "cy.md").read_text()
    assert "bob" not in (tmp_path / "feedback" / "ann.md").read_text()
    assert "gather_rows" not in (tmp_path / "feedback" / "cy.md").read_text()
    assert results[("ann", "3.3")]["reason"] == results[("bob", "3.3")]["reason"]  # a flag, never a grade
    summary = capsys.readouterr().out
    assert re.search(r"similarity: \d+ flagged \(1 of a built-in kernel", summary), summary


def test_the_notebook_reader_refuses_aliases_anywhere_jupytext_reads_yaml(tmp_path) -> None:
    """Anchors and aliases in the header or in a cell's options are refused before jupytext parses
    anything; an honest notebook's prose (``*emphasis*`` between two rules) is not YAML; bytes that
    are not UTF-8 are named."""
    sol = (SOLUTIONS / "01_cuda_setup.md").read_text()
    cell = "```{code-cell} ipython3\n"
    cases = {
        "header": sol.replace("kernelspec:\n", "x: &x [1]\ny: *x\nkernelspec:\n", 1),
        "options": sol.replace(cell, cell + "---\nx: &x [1]\ny: [*x, *x]\n---\n", 1),
        "short_options": sol.replace(cell, cell + ":x: &x [1]\n:y: [*x]\n", 1),
    }
    for name, text in cases.items():
        (tmp_path / f"{name}.md").write_text(text)
        with pytest.raises(ValueError, match="anchors or aliases"):
            notebook.read(tmp_path / f"{name}.md")
    (tmp_path / "prose.md").write_text(sol + "\n---\n\nSome *emphasis* and **bold** &amp; more.\n\n---\n")
    assert notebook.read(tmp_path / "prose.md").cells
    (tmp_path / "latin1.md").write_bytes(sol.encode() + b"\n# caf\xe9\n")
    with pytest.raises(ValueError, match="not UTF-8"):
        notebook.read(tmp_path / "latin1.md")


# a cell that writes a record of its own into every file its runner process holds open
FORGE_THROUGH_PROC = (
    "\n```{code-cell} ipython3\n"
    "import glob, os\n"
    "for held in glob.glob(f'/proc/{os.getppid()}/fd/*'):\n"
    "    try:\n"
    "        with open(held, 'a') as f:\n"
    "            f.write('{\"cells\": []}')\n"
    "        print('wrote', held)\n"
    "    except OSError as exc:\n"
    "        print('refused', held, exc)\n"
    "```\n"
)


@needs_bwrap
def test_a_notebook_cannot_write_into_its_runners_pipe(tmp_path) -> None:
    """The runner makes itself non-dumpable and does not hand its end of the pipe to the kernel: the
    kernel cannot open the runner's files through /proc, so the record is the runner's own."""
    sol = (SOLUTIONS / "01_cuda_setup.md").read_text()
    subs = _student(tmp_path, "prober", "01_cuda_setup", sol + FORGE_THROUGH_PROC)
    out = tmp_path / "g.csv"
    run_grader(subs, out, ["1.2"], "--cell-timeout", "60", execute=True)
    record = json.loads(out.with_suffix(".json").read_text())["executions"]["prober/01_cuda_setup"]
    assert record["cells"] > 1 and not record["errors"], record


NO_EXEC_PROBE = """
import _posixsubprocess, os, subprocess, sys, threading
from minitorch_cuda.grade import no_exec
assert subprocess.run(["true"]).returncode == 0  # before: a program runs
assert no_exec.forbid() is None
try:
    subprocess.run(["true"])
    print("ran a program")
except PermissionError:
    print("refused")
errors, error_end = os.pipe()
pid = _posixsubprocess.fork_exec([b"/bin/true"], [b"/bin/true"], True, (), None, None, -1, -1, -1, -1, -1, -1,
                                 errors, error_end, True, False, 0, None, None, None, -1, None, False)
os.close(error_end)
ran = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0  # /bin/true's status, if it ran
print("the fork ran a program" if ran else "the fork's exec failed")
found = []
worker = threading.Thread(target=lambda: found.append(sum(range(10))))
worker.start(); worker.join()
print("threads", found)
"""


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="the filter is x86-64 Linux's")
def test_the_subject_starts_no_program_however_it_asks() -> None:
    """After ``no_exec.forbid()`` no program starts, by subprocess or by ``_posixsubprocess.fork_exec``
    (which raises no audit event), in the process or in a fork; threads still start."""
    run = subprocess.run([sys.executable, "-c", NO_EXEC_PROBE], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:3] == ["refused", "the fork's exec failed", "threads [45]"], run.stdout


def test_a_virtual_environment_kept_in_the_checkout_stays_visible(tmp_path, monkeypatch) -> None:
    """A newcomer's venv inside the clone (python -m venv .venv) holds the Python the sandbox runs:
    of a checkout only it, the package and its data stay; the answers and everything else are hidden."""
    for folder in ("minitorch_cuda", "data", "solutions", "tests", ".venv"):
        (tmp_path / folder).mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.setattr(sandbox, "PACKAGE_ROOT", tmp_path)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / ".venv"))
    hidden = [p.name for p in sandbox._course_content()]
    assert hidden == ["pyproject.toml", "solutions", "tests"], hidden


# --- issue 39: the emulator's race checking in the grader ------------------------------------------


def _grade_emulated(tmp_path: Path, names: tuple[str, ...], exercise_id: str) -> dict:
    """``grade --emulate`` of the students ``names`` on one exercise, each with only its chapter's notebook."""
    subs = build(tmp_path / "subs", {s: STUDENTS[s] for s in names})
    chapter = f"{int(exercise_id.split('.')[0]):02d}_"
    for folder in subs.iterdir():
        for p in folder.iterdir():
            if not p.name.startswith(chapter):
                p.unlink()
    return run_grader(subs, tmp_path / "g.csv", [exercise_id], "--emulate", "--timeout", "300")


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_a_race_with_the_right_answer_fails_as_a_race_on_the_emulator(tmp_path) -> None:
    """6.1's last thread sums every slot with no barrier after the stores: in the emulator's order the
    sum is right and every run agrees, yet `grade --emulate` fails it as a race, naming both threads
    and both lines; read through a memcpy too; and hidden from the checks' calls it is refused."""
    names = ("full_solutions", "race_with_right_answer", "race_hidden_from_the_check", "race_hidden_in_a_memcpy")
    names += ("race_hidden_in_x86_asm",)
    results = _grade_emulated(tmp_path, names, "6.1")
    assert results[("full_solutions", "6.1")]["passed"], results[("full_solutions", "6.1")]
    result = results[("race_with_right_answer", "6.1")]
    assert result["reason"] == verdict.RACECHECK and result["emulated"], result
    message = result["message"]
    assert "thread (1023, 0, 0): data race (racecheck)" in message, message
    assert "reads it at line" in message and "total += smem[i]" in message, message
    assert "thread (0, 0, 0) of the same block wrote it at line" in message and "smem[t] = acc;" in message, message
    hidden = results[("race_hidden_from_the_check", "6.1")]  # the attribute that would hide it is refused
    assert hidden["reason"] == verdict.FORBIDDEN and "no_sanitize_thread" in hidden["message"], hidden
    copied = results[("race_hidden_in_a_memcpy", "6.1")]  # the memcpy's bytes are checked, at its line
    assert copied["reason"] == verdict.RACECHECK and "reads it at line" in copied["message"], copied
    assert "memcpy(copy, smem, blockDim.x * sizeof(float));" in copied["message"], copied
    assembled = results[("race_hidden_in_x86_asm", "6.1")]  # assembly the emulator does not model: refused
    assert (
        assembled["reason"] == verdict.COMPILE_ERROR
        and "does not model the PTX instruction movss" in (assembled["message"])
    ), assembled


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_race_checking_cannot_be_switched_off_by_name_on_the_emulator(tmp_path) -> None:
    """The runtime exports only its C calls: a kernel that asks dlsym (found from puts's address) for
    emu::racecheck::launch_end() finds nothing, and its race fails as one (red team, session 27)."""
    results = _grade_emulated(tmp_path, ("full_solutions", "race_switched_off_by_dlsym"), "6.1")
    assert results[("full_solutions", "6.1")]["passed"], results[("full_solutions", "6.1")]
    result = results[("race_switched_off_by_dlsym", "6.1")]
    assert result["reason"] == verdict.RACECHECK and result["emulated"], result


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_a_bank_conflict_with_the_right_answer_fails_on_the_emulator(tmp_path) -> None:
    """11.1 with its A tile stored transposed in an unpadded tile: the product is right, and `grade
    --emulate` fails it as a bank conflict, naming the line and the degree; the solution passes with
    its own numbers in the feedback."""
    results = _grade_emulated(tmp_path, ("full_solutions", "conflicted_tile"), "11.1")
    solution = results[("full_solutions", "11.1")]
    assert solution["passed"], solution
    assert any("1.00 wavefronts a request (0 bank conflicts)" in d for d in solution["details"]), solution
    result = results[("conflicted_tile", "11.1")]
    assert result["reason"] == verdict.BANK_CONFLICT and result["emulated"], result
    assert "`tile_a[tx][ty] = x;` is a 32-way bank conflict" in result["message"], result


@pytest.mark.skipif(
    not _emulator_usable(), reason="the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing"
)
def test_a_missing_fence_fails_on_the_emulator(tmp_path) -> None:
    """13.2 without the __threadfence() between a block's partial and the atomic that counts it in: the
    sum is right in the emulator's order, yet `grade --emulate` fails it as a missing fence, naming the
    partial's store and the atomic by line; a block that adds the partials without waiting to be the
    last fails as a race."""
    results = _grade_emulated(
        tmp_path, ("full_solutions", "last_block_without_fence", "last_block_reads_early"), "13.2"
    )
    assert results[("full_solutions", "13.2")]["passed"], results[("full_solutions", "13.2")]
    result = results[("last_block_without_fence", "13.2")]
    assert result["reason"] == verdict.MISSING_FENCE and result["emulated"], result
    kernel = re.search(r'sumsq_last_block_source = r"""(.*?)"""', (SOLUTIONS / "13_opt8_warp_shuffle.md").read_text(),
                       re.S)[1].replace(FENCE_13, "")  # fmt: skip
    lines = kernel.splitlines()
    store = 1 + next(i for i, line in enumerate(lines) if "partials[blockIdx.x] = block_sum;" in line)
    atomic = 1 + next(i for i, line in enumerate(lines) if "atomicAdd(count, 1u)" in line)
    message = result["message"]
    assert "missing __threadfence() (racecheck)" in message, message
    assert f"wrote at line {store}: `partials[blockIdx.x] = block_sum;`" in message, message
    assert f"store at line {atomic}: `if (atomicAdd(count, 1u) == gridDim.x - 1)" in message, message
    early = results[("last_block_reads_early", "13.2")]
    assert early["reason"] == verdict.RACECHECK and "data race (racecheck) on partials[" in early["message"], early


def test_the_emulate_switch_in_the_environment_grades_as_emulate(tmp_path, monkeypatch, capsys) -> None:
    """MINITORCH_CUDA_EMULATE=1 in the instructor's shell: the checks inherit it, so the run says it
    grades on the emulator and marks the results so, instead of warning that no GPU is visible."""
    sol = (SOLUTIONS / "01_cuda_setup.md").read_text()
    subs = _student(tmp_path, "someone", "01_cuda_setup", sol)
    monkeypatch.setenv("MINITORCH_CUDA_EMULATE", "1")
    run_grader(subs, tmp_path / "g.csv", ["1.2"], "--timeout", "60")
    err = capsys.readouterr().err
    assert "MINITORCH_CUDA_EMULATE=1 is set: grading on the CPU emulator, as with --emulate" in err, err
    assert "no GPU visible" not in err, err
