"""Grading exercise notebooks: ``minitorch-cuda grade SUBMISSIONS --out grades.csv``.

SUBMISSIONS holds one folder per student with that student's notebooks
(``01_cuda_setup.ipynb`` or ``.md``, ...). Each notebook is executed in a sandbox
(for the feedback), then each exercise is read from the notebook source and
checked in its own process with a timeout; a student's Python runs only in a
sandboxed subject process, kernels are compiled and launched by the checker.
``minitorch-cuda grade merge SHARD_OUT... --out grades.csv`` merges shards.
See ``runner`` for the outputs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from .. import emulator
from ..cli_parser import Parser

EXIT_PARTIAL = 3  # some exercises could not be graded here (no GPU, a missing extra) and --allow-partial was not given


# What the grader imports from the grade extra (pyproject.toml); Triton, which one exercise
# needs, is checked per exercise (exercises.missing_dependency).
EXTRA_MODULES = ("nbformat", "nbclient", "jupytext", "ipykernel", "ml_dtypes")


def missing_extra(prog: str) -> str | None:
    """One line naming the extra to install where a module the grader imports is missing, or None."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (
        f"{prog}: error: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: install the "
        "`grade` extra (in the checkout: pip install -e '.[grade]'; elsewhere: pip install 'minitorch-cuda[grade]')"
    )


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N (for example 2/8), got {text!r}") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"K/N needs 1 <= K <= N, got {text!r}")
    return k, n


def _seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= seed < 2**63:
        raise argparse.ArgumentTypeError(f"the seed must be in 0 .. 2**63 - 1, got {seed}")
    return seed


def _parser(prog: str) -> Parser:
    parser = Parser(
        prog=prog,
        description="Grade a folder of submissions (one subfolder of notebooks per student): a CSV of points, "
        "grades.json and one feedback file per student.",
        epilog=f"{prog} merge SHARD_OUT... --out OUT merges the outputs of --shard runs.",
    )
    parser.add_argument("submissions", type=Path, help="folder with one subfolder of notebooks per student")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("grades.csv"),
        help="the CSV; grades.json and feedback/ go next to it (default: grades.csv)",
    )
    parser.add_argument(
        "--rubric", type=Path, default=None, help="points per exercise (default: the packaged rubric.toml)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="parallel workers, GPUs dealt out in turn (default: four per GPU, at most one per core)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds per exercise check (default: the rubric's, 120; 300 with --emulate)",
    )
    parser.add_argument(
        "--cell-timeout", type=float, default=None, help="seconds per notebook cell (default: the rubric's, 120)"
    )
    parser.add_argument("--no-execute", action="store_true", help="skip running the notebooks (checks only)")
    parser.add_argument(
        "--exercise",
        action="append",
        metavar="ID",
        help="grade only this exercise id (repeatable; default: every exercise)",
    )
    parser.add_argument(
        "--shard",
        type=_shard,
        default=None,
        metavar="K/N",
        help="grade the K-th of N fixed slices of the students (default: all of them)",
    )
    parser.add_argument(
        "--emulate",
        action="store_true",
        help=f"grade kernel exercises on the CPU emulator ({emulator.SWITCH}); marked emulated",
    )
    parser.add_argument("--no-sanitize", action="store_true", help="skip compute-sanitizer on the kernel exercises")
    parser.add_argument(
        "--seed",
        type=_seed,
        default=None,
        metavar="N",
        help="draw the checks' hidden shapes from N, recorded in grades.json: the same N grades on the same shapes "
        "(default: a resumed run's seed, else a fresh random one)",
    )
    parser.add_argument(
        "--allow-partial", action="store_true", help="exit 0 even if exercises were not graded (no GPU on this machine)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on a terminal)")
    return parser


def merge_main(argv: list[str], prog: str = "minitorch-cuda grade merge") -> int:
    from . import runner

    parser = Parser(
        prog=prog,
        description="Merge the outputs of 'minitorch-cuda grade --shard K/N' runs (again as shards finish).",
    )
    parser.add_argument("shards", nargs="+", type=Path, help="each shard's --out (its grades.json sits next to it)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("grades.csv"),
        help="the merged CSV; grades.json and feedback/ next to it (default: grades.csv)",
    )
    parser.add_argument(
        "--rubric", type=Path, default=None, help="points per exercise (default: the packaged rubric.toml)"
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    shards = [s.resolve() for s in args.shards]
    if out.with_suffix(".json") in [s.with_suffix(".json") for s in shards]:
        parser.error("--out must not be one of the shards")
    try:
        rubric = runner.load_rubric(args.rubric)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    ledger, missing = runner.merge(shards, out, rubric)
    for shard in missing:
        print(f"warning: {shard}: no grades.json yet (merge again when that shard is done)", file=sys.stderr)
    counts = runner.summary(ledger, ledger.students, [i for i in rubric["points"]])
    print(
        f"merged {len(shards) - len(missing)} of {len(shards)} shards, {len(ledger.students)} students: "
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['not_graded']} not graded -> {out}"
    )
    return 1 if missing else 0


def main(argv: list[str] | None = None, prog: str = "minitorch-cuda grade") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    no_extra = missing_extra(prog)
    if no_extra:
        print(no_extra, file=sys.stderr)
        return 2
    if argv and argv[0] == "merge":
        return merge_main(argv[1:], f"{prog} merge")
    from . import exercises, runner, sandbox, verdict

    parser = _parser(prog)
    args = parser.parse_args(argv)
    if emulator.selected() and not args.emulate:  # the checks inherit the switch: say so, mark them so
        print(f"{emulator.SWITCH} is set: grading on the CPU emulator, as with --emulate", file=sys.stderr)
        args.emulate = True
    submissions = args.submissions.resolve()  # before anything changes directory
    out = args.out.resolve()
    if not submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    for i in args.exercise or []:
        if i not in exercises.EXERCISES:
            parser.error(f"no exercise {i!r}; known: {', '.join(exercises.EXERCISES)}")
    try:
        rubric = runner.load_rubric(args.rubric.resolve() if args.rubric else None)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    students, skipped = runner.find_students(submissions)
    if skipped:
        names = ", ".join(verdict.shown(s) for s in skipped)
        print(f"warning: skipped {len(skipped)} folder(s) without notebooks, or links: {names}", file=sys.stderr)
    if not students:
        parser.error(f"{args.submissions} has no student folder (a folder holding .ipynb or .md notebooks)")
    if submissions == out.parent or submissions in out.parents:
        parser.error("--out must not be inside the submissions folder")
    conf = rubric["settings"]
    settings = runner.Settings(
        submissions=submissions,
        out=out,
        rubric=rubric,
        jobs=args.jobs,
        check_timeout=args.timeout or check_timeout(conf, args.emulate),
        cell_timeout=args.cell_timeout or float(conf.get("cell_timeout", 120)),
        execute=not args.no_execute,
        only=args.exercise,
        emulate=args.emulate,
        sanitize=not args.no_sanitize,
        shard=args.shard,
        progress=not args.no_progress,
        seed=args.seed,
    )
    ids = [
        e.id for e in exercises.ordered() if e.id in rubric["points"] and (not args.exercise or e.id in args.exercise)
    ]
    needs_gpu = [i for i in ids if exercises.get(i).gpu]
    if needs_gpu and not args.emulate and not runner.visible_gpus():
        print(
            f"warning: no GPU visible: {len(needs_gpu)} exercise(s) that need one ({', '.join(needs_gpu)}) will be "
            "'not graded (needs a GPU)' (blank in the CSV); grade them on a GPU machine, or with --emulate",
            file=sys.stderr,
        )
    unmet = [why for why in map(exercises.missing_dependency, map(exercises.get, ids)) if why]
    for why in unmet:  # the grading machine's problem, said once here, never a student's zero
        print(f"warning: {why}", file=sys.stderr)
    if settings.execute and sandbox.kind() != "bwrap":
        print(f"warning: notebooks run with {sandbox.describe()}", file=sys.stderr)
    elif settings.execute and needs_gpu and runner.visible_gpus() and not args.emulate:
        why = sandbox.gpu_reachable(runner.visible_gpus()[0])
        if why:
            print(
                f"warning: CUDA does not start inside the sandbox ({why}): notebooks' GPU cells will fail "
                "there (the feedback says so; grades come from the checks)",
                file=sys.stderr,
            )
    try:
        ledger = runner.grade(settings, warn=lambda line: print(line, file=sys.stderr))
    except ValueError as exc:  # a grades.json to resume from that cannot be read
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    graded = runner.shard_of(students, args.shard)
    counts = runner.summary(ledger, graded, ids)
    emulated = f", {counts['emulated']} on the CPU emulator" if counts["emulated"] else ""
    flagged = [m for m in ledger.similar if m.flagged]
    copies = sum(1 for m in flagged if m.other.startswith("built-in "))
    lacking = "need a GPU or an extra" if unmet else "need a GPU"
    print(
        f"graded {len(graded)} student{'' if len(graded) == 1 else 's'}: {counts['passed']} "
        f"exercise{'' if counts['passed'] == 1 else 's'} passed, {counts['failed']} failed, "
        f"{counts['not_graded']} not graded ({lacking}){emulated}; similarity: {len(flagged)} flagged "
        f"({copies} of a built-in kernel, {len(flagged) - copies} between students): {out}, "
        f"{out.with_suffix('.json')}, {out.parent / 'feedback'}/, {out.with_name('similarity.csv')}, "
        f"{out.parent / 'instructor'}/"
    )
    if counts["not_graded"] and not args.allow_partial:
        print(
            "error: some exercises were not graded (no GPU or a missing extra, see the warnings above); "
            "rerun where they can be, or pass --allow-partial",
            file=sys.stderr,
        )
        return EXIT_PARTIAL
    return 0


def check_timeout(conf: dict, emulate: bool) -> float:
    """The rubric's seconds per exercise check: longer on the CPU emulator, where a check runs the
    kernel with race checking on cores that the parallel checks share (graded beside other
    students on two cores, the solution of 11.1 ran past 120 s; alone it takes 52)."""
    return float(conf.get("emulated_check_timeout", 300) if emulate else conf.get("check_timeout", 120))
