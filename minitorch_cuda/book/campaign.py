"""The book's recording campaign: every record a page reads, the command that makes it with today's
code, and the groups those commands run in, each within one call of the lent GPU machine.

    python3 -m minitorch_cuda.book.campaign --list                  # the plan, with each group's estimate
    bash .ci/gpu_run.sh bash .ci/record_book.sh --parallel ladder chapters matmul tile grading wide  # one call, 6+ GPUs
    bash .ci/gpu_run.sh bash .ci/record_book.sh ladder              # or one group a call, on one GPU

A group runs its steps in order, in a scratch copy of ``book/results`` (the steps read earlier
records beside the ones they write), and stops before a step whose estimate no longer fits the
call (``CALL_LIMIT_S``), naming what it left for the next call. It returns the records it wrote
as one archive, ``$OUT/records_<group>.tar.gz`` (unpack into ``book/results/``), and what each step
took as ``$OUT/campaign_<group>.json``: the estimates below are to be replaced by those seconds.
With ``--parallel`` each group runs on a GPU of its own (as ``.ci/gpu_check.sh --parallel`` runs its
timing parts), so one call on a host with as many GPUs as groups records the whole book on one GPU
kind. Records a page reads that no command of today's code makes are ``KEPT``, each with why.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALL_LIMIT_S = 540  # a device call may run 10 minutes; this leaves one for the start and the archive
PAGES = ("chapters/*.md", "exercises/*.md", "book/*.md", "book/lab_notes/*.md")


@dataclasses.dataclass(frozen=True)
class Step:
    command: tuple[str, ...]  # run from the repository root; "{results}" is the scratch results folder
    makes: tuple[str, ...]  # the records it writes (book/results/<name>.json)
    estimate_s: int  # seconds on an H100 or H200, from the records' own timings where they hold them
    basis: str  # where the estimate comes from


def chapter(name: str, makes: tuple[str, ...], estimate_s: int, basis: str) -> Step:
    """A chapter's `gpu` cells, run by executing the whole page (they save the records)."""
    return Step(("python3", ".ci/execute_chapters.py", f"chapters/{name}.md"), makes, estimate_s, basis)


def module(name: str, *args: str, makes: tuple[str, ...], estimate_s: int, basis: str) -> Step:
    return Step(("python3", "-m", f"minitorch_cuda.{name}", *args), makes, estimate_s, basis)


_EPOCHS = "the record's epoch seconds, plus the matmul table, the profiles and the cold compiles"
_CELL = "its gpu cell's epochs and matmul table (bench_beyond.json's epoch times), plus the page's start"

GROUPS: dict[str, tuple[Step, ...]] = {
    # the MNIST step, stage by stage, beside PyTorch: chapters 1-21 and the introduction read these
    "ladder": (
        module("bench", "--record", makes=("bench_stages", "profiles"), estimate_s=180, basis=_EPOCHS),
        # last to write matmul.json (both ladder runs time the matmul table)
        module(
            "bench",
            "--record",
            "--stages",
            "0-13",
            makes=("bench_beyond", "profiles_beyond", "matmul"),
            estimate_s=200,
            basis=_EPOCHS,
        ),
        module("experiments.step_split", makes=("step_split",), estimate_s=40, basis="8 rounds of 1 epoch, 2 stages"),
        module("experiments.torch_profile", makes=("torch_profile",), estimate_s=30, basis="200 profiled steps"),
        module("experiments.latency_floor", makes=("ch21_floor",), estimate_s=45, basis="its docstring: 42 s (H100)"),
    ),
    # the chapters' own gpu cells, chapters 2-13, and the sanitizer's run over every stage (chapter 18)
    "chapters": (
        chapter("02_floating_point", ("fp_exp",), 20, "exp variants over 2^24 values, 20 repeats"),
        chapter("04_memory", ("memory_copies",), 25, "copies of 10 sizes, 20 repeats"),
        chapter("06_opt1_memcopies", ("ch06_opt1",), 26, _CELL),
        chapter("07_opt2_gather", ("ch07_gather",), 24, _CELL),
        chapter("08_opt3_transpose_fusion", ("ch08_transpose",), 27, _CELL),
        chapter("09_opt4_init_and_pool", ("ch09_pool",), 24, _CELL),
        chapter("10_opt5_batched_matmul", ("ch10_batched",), 21, _CELL),
        chapter("11_opt6_tiled_matmul", ("ch11_tiled",), 60, _CELL),
        chapter("12_opt7_syncs", ("ch12_syncs",), 21, _CELL),
        chapter("13_opt8_warp_shuffle", ("ch13_shuffle",), 20, _CELL),
        module(
            "sanitize",
            "--stages",
            "0-13",
            "--json",
            "{results}/sanitize.json",
            makes=("sanitize",),
            estimate_s=200,
            basis="sanitize.json: 157 s of runs, plus the builds",
        ),
    ),
    # the matmul chapters' gpu cells and the tensor-core experiments (chapters 14-20, lab notes 19)
    "matmul": (
        chapter("14_cublas", ("ch14_cublas",), 50, _CELL),
        chapter("15_roofline", ("ch15_roofline",), 50, _CELL),
        chapter("16_regtiled_matmul", ("ch16_regtiled",), 58, _CELL),
        chapter("17_fusion", ("ch17_fusion",), 24, _CELL),
        chapter("18_cuda_graphs", ("ch18_graphs",), 30, _CELL),
        chapter("19_tensor_cores", ("ch19_tensor_cores",), 53, _CELL),
        chapter("20_tile_programming", ("tile_eval_live",), 75, "tile_eval_live.json: 63 s, plus the page"),
        module(
            "experiments.tf32_wgmma",
            "--json",
            "{results}/tf32_wgmma.json",
            makes=("tf32_wgmma",),
            estimate_s=45,
            basis="9 rows at 3 sizes, 10 samples each, and their builds",
        ),
        module(
            "experiments.tf32_variants",
            "--json",
            "{results}/ch19_async_variants.json",
            makes=("ch19_async_variants",),
            estimate_s=90,
            basis="its shapes' builds and timings (a guess)",
        ),
        module(
            "experiments.tma_ablation",
            makes=("ch19_tma_ablation",),
            estimate_s=40,
            basis="5 builds, 3 rounds of 5 variants at 2 sizes",
        ),
    ),
    # chapter 20's whole tile evaluation (most of it Triton's cold compile of heavy64) and Nsight Compute
    "tile": (
        module(
            "tile_eval",
            "--record",
            "--json",
            "{results}/tile_eval_run.json",
            makes=("tile_eval",),
            estimate_s=340,
            basis="tile_eval.json: 325 s",
        ),
        module(
            "experiments.ncu",
            "--out",
            "{results}",
            makes=(
                "ncu_ch07",
                "ncu_ch10",
                "ncu_ch11",
                "ncu_ch13",
                "ncu_ch14_16",
                "ncu_ch14_small",
                "ncu_ch15",
                "ncu_ch16_cluster",
                "ncu_ch16_pipelined",
                "ncu_ch19",
                "ncu_ch21",
            ),
            estimate_s=110,
            basis="the ncu records: 87 s of runs, plus the children's starts",
        ),
        Step(
            ("python3", ".ci/access_vs_ncu.py", "--out", "{results}"),
            makes=("access_vs_ncu",),
            estimate_s=70,
            basis="access_vs_ncu.json: 64 s",
        ),
    ),
    # the instructor guide's grading time: one full student, cold and warm (grade_one.json: 82 + 74 s)
    "grading": (
        Step(
            ("python3", ".ci/grade_one.py", "--out", "{results}"),
            makes=("grade_one",),
            estimate_s=200,
            basis="the guide's last timing: 82 s cold, 74 s warm, plus the start",
        ),
    ),
    # stage 13 on models wider than the protocol's, beside stages 11, 12 and PyTorch's graph (chapter 21)
    "wide": (
        module(
            "experiments.wide_models",
            "--record",
            makes=("ch21_wide_models",),
            estimate_s=300,
            basis="not yet run: 4 models, 3 stages and PyTorch's graph over 3 rounds each, 2 x 55 clocked steps",
        ),
    ),
}

_PROBE = "a one-off script run on the lent GPU, not in the repository: the lab note's provenance, not re-made"
_EARLIER_KERNEL = "a run of an earlier stage-13 kernel that no longer exists: the lab note's provenance"
KEPT: dict[str, str] = {
    "ch16_cluster_probe": _PROBE,
    "ch16_cluster_variants_probe": _PROBE,
    "ch16_inner_loop_diagnosis": _PROBE,
    "ch16_tuner_diagnosis": _PROBE,
    "ch19_as_stored_probe": _PROBE,
    "ch19_pipelined_probe": _PROBE,
    "ch19_raster_probe": _PROBE,
    "ch19_raster_probe_second": _PROBE,
    "ch21_rows_diagnosis": _PROBE,
    "ch21_staging_diagnosis": _PROBE,
    "ch21_floor_first_kernel": _EARLIER_KERNEL,
    "ch21_floor_static_inputs": _EARLIER_KERNEL,
    "ch21_floor_copy_read_back": _EARLIER_KERNEL,
    "ch21_floor_four_phase_first": _EARLIER_KERNEL,
    "matmul_power": "nvidia-smi's clocks and power sampled beside one earlier run: the lab note's provenance",
    "tf32_wgmma_h100": "tf32_wgmma.py on an H100 beside the H200's tf32_wgmma.json; once the campaign has made "
    "tf32_wgmma.json on one GPU kind, the lab note's H100 section is to read that instead",
}


def made() -> dict[str, str]:
    """Each record a step makes, and its group."""
    return {record: group for group, steps in GROUPS.items() for step in steps for record in step.makes}


def records_read(root: Path = ROOT) -> dict[str, list[str]]:
    """The records (book/results/*.json, and every record a step makes) that each page reads or
    cites: by its name as a string ("tile_eval"), as a file (tile_eval.json), or as the topic of
    an ncu_records call (ncu_records.shown("ch07") reads ncu_ch07)."""
    names = {p.stem for p in (root / "book" / "results").glob("*.json")} | set(made())
    found: dict[str, list[str]] = {}
    for pattern in PAGES:
        for page in sorted(root.glob(pattern)):
            text = page.read_text()
            used = set(re.findall(r"[\"'`/]([a-z0-9_]+)(?:\.json)?[\"'`]", text))
            used |= set(re.findall(r"\b([a-z0-9_]+)\.json\b", text))
            used |= {f"ncu_{t}" for t in re.findall(r"ncu_records\.\w+\(\s*[\"']([a-z0-9_]+)[\"']", text)}
            for name in sorted(used & names):
                found.setdefault(name, []).append(str(page.relative_to(root)))
    return found


def plan_text() -> str:
    lines = []
    for group, steps in GROUPS.items():
        lines.append(f"{group}: about {sum(s.estimate_s for s in steps)} s (limit {CALL_LIMIT_S} s a call)")
        for s in steps:
            lines.append(f"  {s.estimate_s:4d} s  {' '.join(s.command)}  -> {', '.join(s.makes)}")
    lines.append(f"kept, not re-made: {', '.join(KEPT)}")
    return "\n".join(lines)


def run_group(group: str, steps, out: Path, root: Path = ROOT, limit_s: float | None = CALL_LIMIT_S) -> dict:
    """Run ``steps`` in a scratch copy of book/results, within ``limit_s`` by their estimates (None:
    no limit); archive the records they wrote into ``out/records_<group>.tar.gz`` and say what ran in
    ``out/campaign_<group>.json``."""
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    report = {"group": group, "commit": _commit(root), "steps": [], "left": []}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for record in (root / "book" / "results").glob("*.json"):
            shutil.copy2(record, scratch)
        before = _contents(scratch)
        env = os.environ | {"MINITORCH_CUDA_RESULTS_DIR": str(scratch)}
        for step in steps:
            left = None if limit_s is None else limit_s - (time.monotonic() - start)
            command = [part.replace("{results}", str(scratch)) for part in step.command]
            if left is not None and step.estimate_s > left:
                report["left"].append({"command": " ".join(step.command), "makes": list(step.makes)})
                continue
            began, snapshot = time.monotonic(), _contents(scratch)
            try:
                done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=left)
                status, tail = done.returncode, (done.stdout + done.stderr)[-2000:]
            except subprocess.TimeoutExpired as exc:
                status, tail = "timeout", str(exc)[-2000:]
            written = [name[:-5] for name, data in _contents(scratch).items() if snapshot.get(name) != data]
            report["steps"].append(
                {
                    "command": " ".join(step.command),
                    "status": status,
                    "seconds": round(time.monotonic() - began, 1),
                    "estimate_s": step.estimate_s,
                    "makes": list(step.makes),
                    "missing": sorted(set(step.makes) - set(written)),
                    "output_tail": tail,
                }
            )
            print(
                f"[{group}] {report['steps'][-1]['seconds']:7.1f} s  status {status}  {' '.join(step.command)}",
                flush=True,
            )
        # the records the group makes go back; any other file a step wrote is only named
        changed = sorted(p for p in scratch.glob("*.json") if before.get(p.name) != p.read_bytes())
        makes = {record for step in steps for record in step.makes}
        with tarfile.open(out / f"records_{group}.tar.gz", "w:gz") as archive:
            for path in changed:
                if path.stem in makes:
                    archive.add(path, arcname=path.name)
        report["records_written"] = [p.stem for p in changed if p.stem in makes]
        report["other_files_written"] = [p.name for p in changed if p.stem not in makes]
    report["seconds"] = round(time.monotonic() - start, 1)
    (out / f"campaign_{group}.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.glob("*.json")}


def _commit(root: Path) -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m minitorch_cuda.book.campaign", description=__doc__.split("\n")[0])
    parser.add_argument("groups", nargs="*", help=f"which groups: {', '.join(GROUPS)}")
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    parser.add_argument("--parallel", action="store_true", help="each group on a GPU of its own, at the same time")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "_build" / "records")))
    parser.add_argument(
        "--limit",
        type=float,
        default=CALL_LIMIT_S,
        help=f"seconds a group may take by its estimates (default {CALL_LIMIT_S}; 0: no limit)",
    )
    parser.add_argument("--into", type=Path, help="also unpack the records into this folder (book/results)")
    args = parser.parse_args(argv)
    if args.list or not args.groups:
        print(plan_text())
        return 0
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; the groups are {', '.join(GROUPS)}")
    if not args.parallel:
        reports = [run_group(g, GROUPS[g], args.out, limit_s=args.limit or None) for g in args.groups]
        if args.into:
            for g in args.groups:
                with tarfile.open(args.out / f"records_{g}.tar.gz") as archive:
                    archive.extractall(args.into, filter="data")
        return 0 if all(_clean(r) for r in reports) else 1
    gpus = _gpu_count()
    if gpus < len(args.groups):  # two groups on one GPU would time each other
        print(f"--parallel needs a GPU per group: {len(args.groups)} groups, {gpus} GPU(s) here", file=sys.stderr)
        return 2
    again = ["--out", str(args.out), "--limit", str(args.limit), *(["--into", str(args.into)] if args.into else [])]
    children = [  # one process a group, each seeing one GPU
        subprocess.Popen(
            [sys.executable, "-m", "minitorch_cuda.book.campaign", g, *again],
            cwd=ROOT,
            env=os.environ | {"CUDA_VISIBLE_DEVICES": str(i)},
        )
        for i, g in enumerate(args.groups)
    ]
    return max(child.wait() for child in children)


def _gpu_count() -> int:
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


def _clean(report: dict) -> bool:
    return not report["left"] and all(s["status"] == 0 and not s["missing"] for s in report["steps"])


if __name__ == "__main__":
    sys.exit(main())
