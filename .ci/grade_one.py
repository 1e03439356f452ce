"""On a GPU: how long grading one full student takes, the instructor guide's number (2-4 minutes).

    bash .ci/gpu_run.sh python3 .ci/grade_one.py [--out DIR] [--jobs N ...]

The known-good submission (the notebooks of ``solutions/``, copied as one student) is graded with
the default command twice: with an empty kernel cache (the first student on a fresh machine), then
with the cache it left (every student after the first); with ``--jobs``, once more per value.
Writes ``grade_one.json`` (the device, each run's seconds and score, the submission's size) into DIR,
else ``$MINITORCH_CUDA_RESULTS_DIR``, else ``book/results``. The guide's limit: 120 s a student.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from minitorch_cuda import results  # noqa: E402
from minitorch_cuda.device import require_cuda  # noqa: E402


def grade(submissions: Path, out: Path, cache: Path, jobs: str | None) -> dict:
    """One run of ``minitorch-cuda grade`` (in a child, as an instructor runs it), timed."""
    command = [sys.executable, "-m", "minitorch_cuda.grade", str(submissions), "--out", str(out / "grades.csv")]
    command += ["--jobs", jobs] if jobs else []
    started = time.monotonic()
    env = {**os.environ, "MINITORCH_CUDA_CACHE": str(cache)}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"grading failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    graded = json.loads((out / "grades.json").read_text())["results"]
    return {
        "jobs": jobs or "default",
        "seconds": round(seconds, 1),
        "points": sum(r["points"] or 0 for r in graded),
        "max_points": sum(r["max_points"] for r in graded),
        "exercises": len(graded),
        "passed": sum(bool(r["passed"]) for r in graded),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 .ci/grade_one.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where grade_one.json goes (default: the results folder)")
    parser.add_argument("--jobs", nargs="*", default=[], help="--jobs values timed after the default command")
    args = parser.parse_args(argv)
    require_cuda()
    from minitorch_cuda.cuda.runtime import device_name

    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        shutil.copytree(ROOT / "solutions", work / "class" / "student")
        for jobs in [None, *args.jobs]:
            cache = work / f"cache-{jobs or 'default'}"  # empty: the first student on a fresh machine
            for when in ("cold", "warm"):
                out = work / f"out-{jobs or 'default'}-{when}"
                runs.append({"cache": when, **grade(work / "class", out, cache, jobs)})
                print(f"jobs {runs[-1]['jobs']}, {when} cache: {runs[-1]['seconds']} s, "
                      f"{runs[-1]['points']:g} of {runs[-1]['max_points']:g} points", flush=True)  # fmt: skip
    notebooks = len(list((ROOT / "solutions").glob("*.md")))
    data = {"device": device_name(), "notebooks": notebooks, "limit_s": 120, "runs": runs}
    if args.out:
        results.RESULTS_DIR = args.out
    print(results.save("grade_one", data, "python3 .ci/grade_one.py " + " ".join(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
