"""Generate the student notebooks in ``exercises/`` from ``solutions/``.

    python -m minitorch_cuda.grade.generate            # rewrite exercises/
    python -m minitorch_cuda.grade.generate --check    # exit 1 if out of date or outputs are committed

In a code cell with the metadata ``exercise: 'N.k'``, every block between
``# BEGIN SOLUTION`` and ``# END SOLUTION`` becomes
``raise NotImplementedError("Exercise N.k")``, and every block between
``// BEGIN SOLUTION`` and ``// END SOLUTION`` (inside a CUDA string) becomes
``// TODO: Exercise N.k``, at the indentation of the BEGIN marker.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import jupytext
import nbformat

from . import exercises

ROOT = Path(__file__).resolve().parents[2]
BEGIN = re.compile(r"^(\s*)(#|//) BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*(#|//) END SOLUTION\s*$")
JUPYTEXT_VERSION = re.compile(r"^\s*jupytext_version: .*$", re.M)  # a line of the notebook's header


class MarkerError(ValueError):
    pass


def stub_source(source: str, exercise_id: str | None, where: str) -> str:
    out: list[str] = []
    inside = None
    for number, line in enumerate(source.splitlines(), 1):
        begin, end = BEGIN.match(line), END.match(line)
        if begin:
            if inside is not None:
                raise MarkerError(f"{where}, line {number}: BEGIN SOLUTION inside another solution block")
            if exercise_id is None:
                raise MarkerError(f"{where}: solution markers in a cell without the metadata exercise: 'N.k'")
            indent, comment = begin.groups()
            inside = comment
            stub = exercises.python_stub(exercise_id) if comment == "#" else exercises.kernel_stub(exercise_id)
            out.append(indent + stub)
        elif end:
            if inside is None:
                raise MarkerError(f"{where}, line {number}: END SOLUTION without BEGIN")
            inside = None
        elif inside is None:
            out.append(line)
    if inside is not None:
        raise MarkerError(f"{where}: BEGIN SOLUTION without END")
    return "\n".join(out)


def student_notebook(solution: Path) -> str:
    nb = jupytext.read(solution)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        exercise_id = cell.metadata.get("exercise")
        cell.source = stub_source(
            cell.source, None if exercise_id is None else str(exercise_id), f"{solution.name} cell {index}"
        )
        cell.outputs, cell.execution_count = [], None
    text = jupytext.writes(nb, fmt="md:myst")
    # The header keeps the solution's jupytext_version, not the installed jupytext's: a new jupytext
    # release would otherwise make every exercise stale against unchanged solutions.
    stamp = JUPYTEXT_VERSION.search(solution.read_text())
    return JUPYTEXT_VERSION.sub(lambda _: stamp.group(0), text, count=1) if stamp else text


def has_outputs(path: Path) -> bool:
    if path.suffix != ".ipynb":
        return False
    nb = nbformat.read(path, as_version=4)
    return any(c.cell_type == "code" and (c.outputs or c.execution_count) for c in nb.cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify only; exit 1 on any difference")
    parser.add_argument("--solutions", type=Path, default=ROOT / "solutions")
    parser.add_argument("--exercises", type=Path, default=ROOT / "exercises")
    args = parser.parse_args(argv)
    problems: list[str] = []
    sources = sorted(args.solutions.glob("[0-9][0-9]_*.md"))
    expected = {}
    for solution in sources:
        try:
            expected[args.exercises / solution.name] = student_notebook(solution)
        except MarkerError as exc:
            problems.append(str(exc))
    for folder in (args.solutions, args.exercises):
        problems += [f"{p} carries outputs" for p in sorted(folder.glob("*.ipynb")) if has_outputs(p)]
    if args.check:
        for path, text in expected.items():
            if not path.exists():
                problems.append(f"{path} is missing: run `make exercises`")
            elif path.read_text() != text:
                problems.append(f"{path} is out of date: run `make exercises`")
        stale = sorted(set(args.exercises.glob("[0-9][0-9]_*.md")) - set(expected))
        problems += [f"{p} has no solution notebook" for p in stale]
    else:
        args.exercises.mkdir(parents=True, exist_ok=True)
        for path, text in expected.items():
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
