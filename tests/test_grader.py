"""The grader: isolation, reasons, outputs, resume.

CPU tests grade the Python exercises (launch configuration 1.2, BF16 2.1,
memory pool 4.1, timing 5.1, roofline bound 14.1, graphed step 18.1, TF32 19.1,
fibonacci tile 20.1)
of the known-wrong students that tests/submissions.py builds; the GPU
tests grade every kernel exercise and need a GPU:
    bash .gpu/run.sh python3 -m pytest -m gpu tests/test_grader.py
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from submissions import STUDENTS, build

import minitorch_cuda as mt
from minitorch_cuda import grade
from minitorch_cuda.grade import exercises, runner, verdict

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
CPU_IDS = ["1.2", "2.1", "4.1", "5.1", "14.1", "18.1", "19.1", "20.1"]
gpu = pytest.mark.skipif(not mt.cuda_available(), reason=f"needs a GPU: {mt.cuda_unavailable_reason()}")


def run_grader(subs: Path, out: Path, ids: list[str] | None, *extra: str) -> dict:
    argv = [str(subs), "--out", str(out), "--no-execute", *extra]
    for i in ids or []:
        argv += ["--exercise", i]
    assert grade.main(argv) == 0
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


@pytest.mark.parametrize("key", list(EXPECTED_CPU), ids=[f"{s}-{e}" for s, e in EXPECTED_CPU])
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
def test_kernel_exercises_without_gpu_are_not_final(tmp_path) -> None:
    out = tmp_path / "g.csv"
    subs = build(tmp_path / "subs", {"full_solutions": STUDENTS["full_solutions"]})
    results = run_grader(subs, out, ["3.1"])
    assert results[("full_solutions", "3.1")]["reason"] == verdict.NO_GPU
    assert not runner.Ledger(out.with_suffix(".json"), runner.load_rubric(None)).done("full_solutions", "3.1")


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
    assert errors and all("NotImplementedError" in e for e in errors)
    assert "NotImplementedError" in (tmp_path / "feedback" / "empty_kernels.md").read_text()


def test_rubric_covers_every_exercise() -> None:
    assert set(runner.load_rubric(None)["points"]) == set(exercises.EXERCISES)


@pytest.mark.parametrize(("gpus", "cores", "jobs"), [(1, 32, 4), (2, 32, 8), (2, 6, 6), (0, 2, 2), (0, 1, 1)])
def test_default_jobs_is_four_per_gpu_at_most_one_per_core(monkeypatch, gpus, cores, jobs) -> None:
    monkeypatch.setattr(runner.os, "cpu_count", lambda: cores)
    assert runner.default_jobs(gpus) == jobs


def test_jobs_below_one_is_refused(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path), "--jobs", "0"])
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err


# --- GPU ------------------------------------------------------------------------------------

KERNEL_IDS = [e.id for e in exercises.ordered() if e.gpu]
FIRST_EXPECTED = {
    # An empty tiled, warp-shuffle or vectorized kernel already lacks the construct the exercise
    # asks for (__shared__ tiles, __shfl_*_sync, float4): the static check names that before any launch.
    "empty_kernels": {i: {verdict.NO_WRITES} for i in KERNEL_IDS}
    | {i: {verdict.NO_WRITES, verdict.FORBIDDEN} for i in ("11.1", "13.1", "15.1")}
    | {"12.1": {verdict.NOT_IMPLEMENTED}},
    "host_cheat": {i: {verdict.HOST_SIDE} for i in KERNEL_IDS} | {"1.1": {verdict.NOT_A_KERNEL}},
    "off_by_one": {i: {verdict.BOUNDARY, verdict.WRONG_RESULT, verdict.CUDA_ERROR} for i in KERNEL_IDS if i != "12.1"}
    | {i: {verdict.BOUNDARY} for i in ("1.1", "3.1", "3.2", "7.1", "15.1")},
    "missing_syncthreads": {
        i: {verdict.RACE, verdict.WRONG_RESULT} for i in ("3.3", "6.1", "11.1", "13.1", "16.1", "17.1")
    },
    "infinite_loop": {i: {verdict.TIMEOUT} for i in ("3.1", "11.1", "13.1", "12.1", "15.1", "16.1", "17.1")},
}


@pytest.fixture(scope="module")
def gpu_grades(tmp_path_factory) -> dict:
    """Every kernel exercise of every student; the endless loops only where listed (each costs its
    timeout: three at a time, since every one of them is expected to time out anyway)."""
    results = {}
    for students, ids, timeout, jobs in [
        ([s for s in ["full_solutions", *FIRST_EXPECTED] if s != "infinite_loop"], KERNEL_IDS, "60", "1"),
        (["infinite_loop"], list(FIRST_EXPECTED["infinite_loop"]), "20", "3"),
    ]:
        subs = build(tmp_path_factory.mktemp("subs"), {s: STUDENTS[s] for s in students})
        out = tmp_path_factory.mktemp("gpu") / "grades.csv"
        results |= run_grader(subs, out, ids, "--timeout", timeout, "--jobs", jobs)
    return results


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("exercise_id", KERNEL_IDS)
def test_gpu_solutions_pass(gpu_grades, exercise_id) -> None:
    result = gpu_grades[("full_solutions", exercise_id)]
    assert result["passed"], result


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "student,exercise_id",
    [(s, i) for s, expected in FIRST_EXPECTED.items() for i in expected],
)
def test_gpu_known_wrong(gpu_grades, student, exercise_id) -> None:
    result = gpu_grades.get((student, exercise_id))
    if result is None:
        pytest.skip(f"{student} has no notebook for {exercise_id}")
    assert result["reason"] in FIRST_EXPECTED[student][exercise_id], result


@gpu
@pytest.mark.gpu
def test_gpu_illegal_memory_access(tmp_path) -> None:
    sol = (SOLUTIONS / "03_building_the_backend.md").read_text()
    bad = sol.replace("out[i] = x > 0.0f ? x : 0.0f;", "out[i + 400000000] = x > 0.0f ? x : 0.0f;")
    subs = _student(tmp_path, "wild_pointer", "03_building_the_backend", bad)
    result = run_grader(subs, tmp_path / "g.csv", ["3.1", "3.2"], "--timeout", "60")
    assert result[("wild_pointer", "3.1")]["reason"] in {verdict.CUDA_ERROR, verdict.CRASHED}
    assert result[("wild_pointer", "3.2")]["passed"]  # the broken context cost only 3.1
