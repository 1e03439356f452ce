"""Grading exercise notebooks: ``python -m minitorch_cuda.grade SUBMISSIONS --out grades.csv``.

SUBMISSIONS holds one folder per student with that student's notebooks
(``01_cuda_setup.ipynb`` or ``.md``, ...). Each notebook is executed (for the
feedback), then each exercise is extracted from the notebook source and
checked in its own process with a timeout. See ``runner`` for the outputs.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from . import runner

    parser = argparse.ArgumentParser(prog="minitorch-cuda grade", description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder with one subfolder per student")
    parser.add_argument(
        "--out", type=Path, default=Path("grades.csv"), help="the CSV (grades.json and feedback/ go next to it)"
    )
    parser.add_argument(
        "--rubric", type=Path, default=None, help="points per exercise (default: the packaged rubric.toml)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="parallel workers; the visible GPUs are dealt out in turn (default: four per GPU, at most one per core)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds per exercise check")
    parser.add_argument("--cell-timeout", type=float, default=None, help="seconds per notebook cell")
    parser.add_argument("--no-execute", action="store_true", help="skip running the notebooks (checks only)")
    parser.add_argument("--exercise", action="append", help="grade only this exercise id (repeatable)")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    rubric = runner.load_rubric(args.rubric)
    conf = rubric["settings"]
    settings = runner.Settings(
        submissions=args.submissions,
        out=args.out,
        rubric=rubric,
        jobs=args.jobs,
        check_timeout=args.timeout or float(conf.get("check_timeout", 120)),
        cell_timeout=args.cell_timeout or float(conf.get("cell_timeout", 120)),
        execute=not args.no_execute,
        only=args.exercise,
    )
    ledger = runner.grade(settings)
    passed = sum(r["passed"] for r in ledger.results.values())
    print(
        f"graded {len(ledger.results)} exercise results ({passed} passed): {args.out}, "
        f"{args.out.with_suffix('.json')}, {args.out.parent / 'feedback'}/"
    )
    return 0
