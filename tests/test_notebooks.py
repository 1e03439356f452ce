"""Every notebook end to end with nbclient: chapters, solutions, exercises as
shipped (they may fail only in exercise cells, with ExerciseNotDone) and
exercises with the solutions swapped in. Without a GPU, cells tagged `gpu` are
removed first. Per-cell times go to the report (record_property) and stdout.
"""

from __future__ import annotations

import os
from pathlib import Path

import jupytext
import pytest
from conftest import needs_triton

import minitorch_cuda as mt
from minitorch_cuda.grade import notebook

pytestmark = pytest.mark.notebooks
ROOT = Path(__file__).resolve().parents[1]
GPU = mt.cuda_available()


def run(nb, cwd: Path, record_property, label: str) -> list[dict]:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if not GPU:
        nb = notebook.without_gpu_cells(nb)
    records = notebook.execute(nb, cwd, cell_timeout=600)
    table = [f"{label}: {sum(r['seconds'] for r in records):.1f} s"] + [
        f"  cell {r['index']:3d} {r['seconds']:7.2f} s  {r['first_line']}" for r in records
    ]
    print("\n".join(table))
    record_property("cell_seconds", [(r["index"], round(r["seconds"], 3)) for r in records])
    return records


def errors(records):
    return [r for r in records if "error" in r]


def notebooks(folder: str) -> list:
    """The numbered notebooks of a folder; one that imports Triton skips where it is not installed."""
    paths = sorted((ROOT / folder).glob("[0-9][0-9]_*.md"))
    return [pytest.param(p, marks=needs_triton) if "import triton" in p.read_text() else p for p in paths]


CHAPTERS = notebooks("chapters") + notebooks("book/lab_notes")
SOLUTIONS = notebooks("solutions")


def _id(param) -> str:
    path = getattr(param, "values", [param])[0]
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", CHAPTERS + SOLUTIONS, ids=_id)
def test_runs_clean(path, record_property, tmp_path, monkeypatch) -> None:
    # the notebook's kernel writes its records here, unless the run keeps them elsewhere (a GPU run's);
    # monkeypatch, not os.environ: a later test in this process (the book's build) reads the real ones
    if "MINITORCH_CUDA_RESULTS_DIR" not in os.environ:
        monkeypatch.setenv("MINITORCH_CUDA_RESULTS_DIR", str(tmp_path))
    records = run(jupytext.read(path), path.parent, record_property, path.name)
    assert not errors(records), errors(records)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: _id(p).split("/")[1])
def test_exercises_as_shipped_fail_only_in_exercises(path, record_property) -> None:
    shipped = ROOT / "exercises" / path.name
    records = run(jupytext.read(shipped), shipped.parent, record_property, f"exercises/{path.name}")
    nb = jupytext.read(shipped) if GPU else notebook.without_gpu_cells(jupytext.read(shipped))
    exercise_cells = {
        i for i, c in enumerate(nb.cells) if c.metadata.get("exercise") or c.metadata.get("exercise_check")
    }
    for r in errors(records):
        assert r["index"] in exercise_cells and r["error"]["ename"] == "ExerciseNotDone", r  # one line to the student


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: _id(p).split("/")[1])
def test_exercises_with_solutions_swapped_in(path, record_property) -> None:
    solved = {str(c.metadata["exercise"]): c.source for c in jupytext.read(path).cells if c.metadata.get("exercise")}
    nb = jupytext.read(ROOT / "exercises" / path.name)
    for cell in nb.cells:
        if cell.metadata.get("exercise"):
            cell.source = solved[str(cell.metadata["exercise"])]
    records = run(nb, path.parent, record_property, f"exercises/{path.name} + solutions")
    assert not errors(records), errors(records)
