"""The students that tests/submissions.py builds for the grader tests: every edit applies, and
every notebook is still a MyST notebook with the cells of the one it was built from."""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest
from submissions import ROOT, STUDENTS, Edit, EditError, Student, build, chapters


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("students"))


def handed_in(student: Student) -> dict[str, Path]:
    """The file each notebook is handed in as -> the notebook it is built from."""
    return {f"{student.renamed.get(Path(s).stem, Path(s).stem)}.md": ROOT / s for s in student.notebooks}


@pytest.mark.parametrize("name", list(STUDENTS))
def test_every_edit_applies(built, name) -> None:
    student = STUDENTS[name]
    files = handed_in(student)
    assert sorted(p.name for p in (built / name).iterdir()) == sorted(files)
    for file, source in files.items():
        text, original = (built / name / file).read_text(), source.read_text()
        edits = [e for e in student.edits if e.notebook == source.stem]
        assert (text != original) == bool(edits), f"{name}/{file}"
        for edit in edits:
            if edit.replace.strip():
                assert text.count(edit.replace) >= edit.count, f"{name}/{file}: {edit.replace!r}"


def test_the_known_good_student_is_the_solutions_folder(built) -> None:
    """It must hand in every shipped solution unchanged, so that it scores full points."""
    assert STUDENTS["full_solutions"].edits == ()
    shipped = {p.name: p.read_text() for p in (ROOT / "solutions").glob("*.md")}
    assert {p.name: p.read_text() for p in (built / "full_solutions").iterdir()} == shipped


@pytest.mark.parametrize("name", [n for n, s in STUDENTS.items() if s.edits])
def test_the_notebooks_stay_myst_notebooks(built, name) -> None:
    for file, source in handed_in(STUDENTS[name]).items():
        nb, original = jupytext.read(built / name / file), jupytext.read(source)
        nbformat.validate(nb)
        assert nb.metadata == original.metadata, f"{name}/{file}: the jupytext header changed"
        cells = [(c.cell_type, c.metadata) for c in nb.cells]
        assert cells == [(c.cell_type, c.metadata) for c in original.cells], f"{name}/{file}: the cells changed"


def test_a_text_not_found_names_the_edit(tmp_path) -> None:
    edits = (Edit("01_cuda_setup", "launch", "LAUNCH", count=0), Edit("01_cuda_setup", "x", "y"))
    student = Student("", chapters("solutions", 1), edits)
    with pytest.raises(EditError, match=r"^bad/01_cuda_setup \(from solutions/01_cuda_setup.md\), edit 1 of 2: "):
        build(tmp_path, {"bad": student})
    student = Student("", chapters("solutions", 1), (Edit("01_cuda_setup", "no such text anywhere", ""),))
    with pytest.raises(EditError, match="edit 1 of 1: expected 1 occurrence.*'no such text anywhere', found 0"):
        build(tmp_path, {"bad": student})


def test_an_edit_names_a_notebook_handed_in(tmp_path) -> None:
    student = Student("", chapters("solutions", 1), (Edit("02_floating_point", "x", "y"),))
    with pytest.raises(EditError, match="02_floating_point, which bad does not hand in"):
        build(tmp_path, {"bad": student})


def test_never_builds_inside_the_repository() -> None:
    with pytest.raises(EditError, match="inside the repository"):
        build(ROOT / "tests" / "built", {})
    assert not (ROOT / "tests" / "built").exists()
