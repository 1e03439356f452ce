"""Nsight Compute (and the compiled SASS) behind the causes the chapters name.

    python -m minitorch_cuda.experiments.ncu --out DIR [TOPIC ...]    (default: every topic)
    bash .ci/gpu_run.sh bash .ci/gpu_check.sh ncu                     (records into the archive)

Each topic runs a tiny workload, launched through the launchers (cuda/launchers.py,
cuda/matmul_launchers.py) as the backend launches it
(PyTorch for cuBLAS), in a child process under ``ncu --clock-control none --csv`` restricted by
``--kernel-name`` and ``--launch-skip``/``--launch-count`` to the launches after a warm-up, and
writes ``ncu_<topic>.json`` (results.save: the command, then per run the ncu command line and
per kernel its metrics in base units). Chapter 10's topic reads no counters: it disassembles
matmul.cu's cubin (``cuobjdump -sass``) and compares the two kernels' inner loops. Metric names
are checked against ``ncu --query-metrics`` first; a name this ncu does not offer is dropped and
listed, so one unknown name never costs a topic. A topic that fails records its error, and the
others still run. The workloads run in about a second each; the whole run took 53 s on the H200
before ch16_pipelined and ch21 joined (those two not yet timed there). Chapter 21's workloads
train a few steps first (compiling, autotuning, capturing), whose launches vary in number: they
bracket the one profiled step with cuProfilerStart/Stop, and ncu keeps only that range
(``--profile-from-start off``) instead of counting launches to skip.

This module holds the topics and runs them; ``ncu_counters`` parses what ncu and cuobjdump
print, ``ncu_workloads`` is what the child runs, and the chapters show the records through
``book/ncu_records.py``.
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
import tempfile
import time
from pathlib import Path

from minitorch_cuda import results
from minitorch_cuda.experiments.ncu_counters import (
    BUSY,
    DOMINANT_STALL,
    FMA,
    ISSUE,
    MEMORY,
    SECTORS,
    SHARED,
    STALLS,
    STALLS_MORE,
    TENSOR,
    TIME,
    WAVES,
    by_kernel,
    offered_metrics,
    parse_csv,
    rejected,
    resource_usage,
    sass_functions,
    sass_summary,
    usable,
)
from minitorch_cuda.experiments.ncu_workloads import STEP_WARMUP, WORKLOADS
from minitorch_cuda.needs_gpu import refuse_emulated

# --- what each topic measures ---------------------------------------------------------------

CUBLAS = r"gemm|nvjet|xmma|cutlass|sgemm"  # cuBLAS's kernel names on recent GPUs, demangled
RANGED = ("--profile-from-start", "off")  # only what the workload brackets with cuProfilerStart/Stop
STEP_LAUNCHES = 16  # a ranged run's cap: stage 11's step is 10 launches (profiles_beyond.json), stage 13's 1


@dataclasses.dataclass(frozen=True)
class Run:
    """One ncu invocation: ``workload`` launches warm-ups, then the launches ncu keeps."""

    variant: str
    workload: str
    kernels: str  # --kernel-name regex
    skip: int
    count: int
    metrics: tuple[str, ...]
    name_base: str = "function"  # --kernel-name-base; "demangled" for cuBLAS's templated names
    options: tuple[str, ...] = ()  # more ncu options: RANGED (then skip is 0), --graph-profiling

    @property
    def ranged(self) -> bool:
        return self.options[: len(RANGED)] == RANGED


@dataclasses.dataclass(frozen=True)
class Topic:
    question: str
    runs: tuple[Run, ...] = ()
    sass: tuple[str, ...] = ()  # kernels of matmul.cu to disassemble instead of profiling
    notes: tuple[str, ...] = ()


TOPICS: dict[str, Topic] = {
    "ch07": Topic(
        "Sectors per request of gather_rows (a warp reads neighbouring floats of one row) against "
        "strided_copy of a transposed view (a warp reads 32 floats a row apart), 8192 x 784 floats",
        (Run("gather vs strided", "ch07", "regex:^(gather_rows|strided_copy)$", 2, 2, TIME + SECTORS + MEMORY[:2]),),
        notes=(
            "Stages 0-1 copy rows with cuMemcpyDtoD on the copy engine, not with kernels: ncu profiles "
            "kernels only, so the per-row copies have no sector counts; strided_copy of a transposed view "
            "is the uncoalesced kernel shown beside the gather.",
            "gather_rows's loads include idx[r], one address per warp (one or two sectors a request).",
        ),
    ),
    "ch10": Topic(
        "The SASS of matmul_transposed against matmul_batched: instructions in the inner loop",
        sass=("matmul_transposed", "matmul_batched"),
    ),
    "ch11": Topic(
        "L2 hit rate and DRAM bytes of the naive, batched and tiled matmuls at 1024^3",
        (
            Run(
                "1024^3",
                "ch11",
                "regex:^matmul_(naive|batched|tiled)$",
                3,
                3,
                TIME + MEMORY + SECTORS[:2] + ("lts__t_bytes.sum", "l1tex__t_bytes.sum"),
            ),
        ),
        notes=("A and B are 4 MiB each at 1024^3; DRAM bytes near 12 MiB mean every repeated load hit a cache.",),
    ),
    "ch13": Topic(
        "The reduction kernels alone: sumsq over 200,704 floats in one block of 1024 threads and "
        "sum_rows over 256 rows of 64, volatile shared memory against warp shuffles",
        (
            Run(
                "MNIST shapes",
                "ch13",
                "regex:^(sumsq|sum_rows)_(volatile|shuffle)$",
                4,
                4,
                TIME + SHARED + FMA[2:3] + STALLS,
            ),
        ),
    ),
    "ch14_16": Topic(
        "Shared-memory wavefronts per FMA of the tiled and register-tiled matmuls, and cuBLAS's "
        "kernel, grid and waves at 1024^3 (and 4096^3) in FP32",
        (
            Run("ours 1024^3", "ch14_ours", "regex:^matmul_(tiled|regtiled_.*)$", 3, 3, TIME + SHARED + FMA + WAVES),
            Run(
                "cuBLAS FP32 1024^3",
                "cublas_fp32_1024",
                f"regex:{CUBLAS}",
                2,
                2,
                TIME + WAVES + FMA + SHARED[:1],
                "demangled",
            ),
            Run("cuBLAS FP32 4096^3", "cublas_fp32_4096", f"regex:{CUBLAS}", 1, 1, TIME + WAVES + FMA, "demangled"),
        ),
        notes=(
            "wavefronts per FMA = shared-load wavefronts / (thread FFMAs / 32): the ratio chapter 16's model predicts.",
        ),
    ),
    "ch15": Topic(
        "DRAM bytes read by the three-pass, online and block softmax over an 8192 x 8192 matrix "
        "(256 MiB, more than the L2 holds): does the online kernel's second read come from DRAM?",
        (Run("8192 x 8192", "ch15", "regex:^softmax_rows_(shuffle|online|block)$", 3, 3, TIME + MEMORY),),
        notes=("dram_reads_of_matrix = DRAM bytes read / 256 MiB: 1 means one pass from DRAM, 2 two.",),
    ),
    "ch19": Topic(
        "Tensor-pipe utilization and stalls of the WMMA, mma.sync and wgmma kernels at 4096^3, and "
        "the kernel cuBLAS TF32 picks",
        (
            Run(
                "ours 4096^3",
                "ch19_ours",
                "regex:^matmul_tf32(_async|_wgmma)?$",
                3,
                3,
                TIME + TENSOR + WAVES[:1] + STALLS + MEMORY[:1],
            ),
            Run(
                "cuBLAS TF32 4096^3",
                "cublas_tf32_4096",
                f"regex:{CUBLAS}",
                1,
                1,
                TIME + TENSOR + WAVES[:1] + STALLS,
                "demangled",
            ),
        ),
        notes=("wgmma is issued to the GMMA pipe on Hopper and mma.sync to the HMMA pipe: both candidates are kept.",),
    ),
    "ch14_small": Topic(  # after the chapters' older topics: skipped before them should the budget run out
        "The GPU's own time for the smallest products (transposed, batched and tiled, and cuBLAS): 64^3 and the MNIST "
        "first layer's 64 x 256 x 784, where matmul.json's event timing may include host gaps",
        (
            Run("ours, small", "ch14_small_ours", "regex:^matmul_(transposed|batched|tiled)$", 6, 6, TIME),
            Run("cuBLAS FP32, small", "cublas_small", f"regex:{CUBLAS}", 4, 4, TIME, "demangled"),
        ),
        notes=("A kernel profiled at two shapes appears once per grid ('name @ grid').",),
    ),
    "ch16_pipelined": Topic(
        "Why stage 9's product stays under cuBLAS FP32 at 4096^3 (0.88 in matmul.json of 2 December) and how "
        "it drew level at 1024^3 (1.01): "
        "the register-tiled kernel the autotuner keeps at 4096^3 (128x128x8, its exact twin and the plain "
        "kernel), the three-stage cp.async "
        "pipeline (128x128x16s3) and cuBLAS at 4096^3; at 1024^3 the split-K product the autotuner keeps "
        "(128x128x16s3, 4 slices, and matmul_splitk_reduce4), the register-tiled runner-up (64x64x16) and cuBLAS",
        (
            Run(
                "ours 4096^3 and 1024^3",
                "ch16_ours",
                "regex:^matmul_(regtiled_((exact_)?128x128x8|64x64x16)|pipelined_128x128x16s3|pipelined_splitk_128x128x16s3"
                "|splitk_reduce4?)$",
                6,
                6,
                TIME + FMA + ISSUE + STALLS + STALLS_MORE + WAVES + SHARED,
            ),
            Run(
                "cuBLAS FP32 4096^3 and 1024^3",
                "cublas_fp32_4096_1024",
                f"regex:{CUBLAS}",
                2,
                2,
                TIME + FMA + ISSUE + STALLS + STALLS_MORE + WAVES + SHARED,
                "demangled",
            ),
        ),
        notes=(
            "ffma_gflops = 2 x thread FFMAs / gpu__time_duration: GFLOP/s under ncu (clocks not locked), to set "
            "beside matmul.json's event-timed ratios; the split-K product's time is its two kernels' together.",
            "ffma_per_warp_instruction = warp FFMAs / warp instructions issued and fma_pipe_share = FMA-pipe "
            "instructions / instructions issued: what is not an FFMA is the loads, address arithmetic and "
            "branches that feed them.",
            "dominant_stall: the reason with the most warps stalled per issue cycle; dominant_stall_share: its "
            "share of all the reasons listed (STALLS and STALLS_MORE).",
            "The tiles are matmul.json's autotuner choices (matmul_regtiled at 4096^3: 128x128x8; matmul_sgemm "
            "at 1024^3: pipelined_128x128x16s3_splitk4), fixed here so that no timing runs under ncu.",
        ),
    ),
    "ch21": Topic(
        "Why stage 11's lean kernels and stage 13's persistent kernel take 14-31 us each for tiny work "
        "(profiles_beyond.json, ch21_floor.json): every kernel of one training step of the protocol's model "
        "(batch 64 of random MNIST-shaped data) at stage 11, and stage 13's persistent_step: grids, waves, "
        "SM activity and stalls",
        (
            Run(
                "stage 11 step, graph off",
                "ch21_stage11",
                "regex:.",
                0,
                STEP_LAUNCHES,
                TIME + WAVES + STALLS + STALLS_MORE + BUSY,
                options=RANGED,
            ),
            Run(
                "stage 11 step, graphed (time only)",
                "ch21_stage11_graphed",
                "regex:.",
                0,
                STEP_LAUNCHES,
                TIME,
                options=RANGED + ("--graph-profiling", "node"),
            ),
            Run(
                "stage 13 step, graph off",
                "ch21_stage13",
                "regex:.",
                0,
                STEP_LAUNCHES,
                TIME + WAVES + STALLS + STALLS_MORE + BUSY,
                options=RANGED,
            ),
        ),
        notes=(
            f"Each workload trains {STEP_WARMUP} steps (compiling, autotuning, capturing the graph), then brackets "
            "one step with cuProfilerStart/Stop; ncu profiles that range only (--profile-from-start off), every "
            "kernel in it, each launch listed in step order ('01 name').",
            "The measured steps run with cuda_graphs off (stages.use_stage(s, without={'cuda_graphs'})): the same "
            "kernels launched one by one. ncu serializes and replays each kernel alone, so a graph changes none of "
            "their counters, only the launch overhead and the gaps between kernels, which ncu does not measure. "
            "The graphed run profiles the replayed graph's kernel nodes (--graph-profiling node) for their time "
            "only: its kernels, the same as the first run's, show whether this ncu sees graph-launched kernels.",
            "sm_active_share = sm__cycles_active.avg / sm__cycles_elapsed.avg: the share of the kernel's cycles "
            "an average SM had a block; warps_per_sm = warps launched / SMs; gpu__time_duration is one kernel "
            "alone on an idle GPU, its caches flushed between ncu's passes (ncu's default --cache-control all).",
            "dominant_stall: the reason with the most warps stalled per issue cycle; dominant_stall_share: its "
            "share of all the reasons listed.",
        ),
    ),
    "ch16_cluster": Topic(
        "What stage 9's split-K in one cluster saves at 1024^3 against the same split in two launches: "
        "128 x 64 tiles in 2 K-slices, summed in distributed shared memory (matmul_cluster_splitk2) or "
        "written to scratch and summed by matmul_splitk_reduce4",
        (
            Run(
                "ours 1024^3",
                "ch16_cluster",
                "regex:^matmul_(cluster_splitk2_128x64x8t128|regtiled_splitk_exact_128x64x8t128|splitk_reduce4)$",
                3,
                3,
                TIME
                + WAVES
                + (
                    "dram__bytes_read.sum",
                    "dram__bytes_write.sum",
                    "lts__t_sectors_op_read.sum",
                    "lts__t_sectors_op_write.sum",
                ),
            ),
        ),
        notes=(
            "lts__t_sectors_op_write.sum: 32-byte sectors written to L2, where the two-launch product's slices "
            "go; the cluster writes C alone.",
        ),
    ),
}

DERIVED_FOR = {  # the derived ratios each topic's kernels get
    "ch07": ("sectors_per_request_ld", "sectors_per_request_st"),
    "ch14_16": ("shared_ld_wavefronts_per_warp_ffma", "shared_wavefronts_per_warp_ffma", "grid_blocks_per_sm"),
    "ch15": ("dram_reads_of_matrix",),
    "ch19": ("grid_blocks_per_sm",),
    "ch16_pipelined": ("ffma_gflops", "ffma_per_warp_instruction", "fma_pipe_share", "shared_wavefronts_per_warp_ffma",
                       "shared_ld_wavefronts_per_warp_ffma", "grid_blocks_per_sm", *DOMINANT_STALL),
    "ch21": ("grid_blocks_per_sm", "warps_per_sm", "sm_active_share", *DOMINANT_STALL),
}  # fmt: skip

# --- running ------------------------------------------------------------------------------------


def run_command(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return 124, out, f"timed out after {timeout:.0f} s"
    return done.returncode, done.stdout, done.stderr


def tool(name: str) -> str | None:
    cuda_root = os.environ.get("CUDA_ROOT", "/usr/local/cuda")
    for candidate in (shutil.which(name), f"{cuda_root}/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def ncu_command(ncu: str, run: Run, metrics: list[str]) -> list[str]:
    return [
        ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--print-units", "base",
        "--kernel-name-base", run.name_base, "--kernel-name", run.kernels,
        "--launch-skip", str(run.skip), "--launch-count", str(run.count), *run.options,
        "--metrics", ",".join(metrics),
        sys.executable, "-m", "minitorch_cuda.experiments.ncu", "--workload", run.workload,
    ]  # fmt: skip


def profile(run: Run, topic: str, ncu: str, offered: set[str] | None, runner, deadline: float) -> dict:
    """One ncu invocation; retried without the metrics ncu rejected, and, where a name filter
    for cuBLAS matched nothing, once more with every kernel of the run (to see its names)."""
    metrics, dropped = usable(run.metrics, offered)
    out: dict = {"variant": run.variant, "workload": run.workload, "dropped_metrics": dropped, "attempts": []}
    tried_all = False
    for _attempt in range(3):
        cmd = ncu_command(ncu, run, metrics)
        start = time.monotonic()
        code, stdout, stderr = runner(cmd, max(5.0, min(120.0, deadline - time.monotonic())))
        launches = parse_csv(stdout)
        out.update(ncu_command=cmd, returncode=code, seconds=round(time.monotonic() - start, 2))
        out["kernels"] = by_kernel(launches, DERIVED_FOR.get(topic, ()), every=run.ranged)
        out["attempts"].append({"returncode": code, "launches": len(launches), "stderr_tail": stderr[-1500:]})
        if launches:
            if code != 0:
                out["error"] = f"ncu exited {code} after profiling {len(launches)} launches"
            return out
        if time.monotonic() > deadline:
            break
        bad = rejected(stdout + stderr, metrics)
        if bad:
            out["dropped_metrics"] += bad
            metrics = [m for m in metrics if m not in bad]
        elif run.name_base == "demangled" and not tried_all:  # cuBLAS's names matched no pattern
            tried_all = True
            run = dataclasses.replace(run, kernels="regex:.", skip=0, count=8)
            out["note"] = f"no kernel matched {CUBLAS!r}: every kernel of the run was profiled instead"
        else:
            break
    out["error"] = f"ncu profiled no launch (exit {code}): " + (stderr.strip().splitlines() or ["no output"])[-1][:300]
    out["stdout_tail"] = stdout[-1500:]
    return out


def sass_topic(names: tuple[str, ...], runner, deadline: float) -> dict:
    """Compile matmul.cu as the runtime does (``kernel_table.nvcc_command``) and disassemble it."""
    from minitorch_cuda.cuda.kernel_table import KERNEL_DIR, nvcc_command

    nvcc, cuobjdump = tool("nvcc"), tool("cuobjdump")
    if nvcc is None or cuobjdump is None:
        return {"error": f"needs nvcc and cuobjdump (found nvcc={nvcc}, cuobjdump={cuobjdump})"}
    arch = gpu_arch(runner)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "matmul.cubin"
        compile_cmd = [*nvcc_command(arch, nvcc), "-o", str(cubin), str(KERNEL_DIR / "matmul.cu")]
        code, _, err = runner(compile_cmd, max(5.0, deadline - time.monotonic()))
        if code != 0:
            return {"compile_command": compile_cmd, "error": f"nvcc failed: {err[-800:]}"}
        code, listing, err = runner([cuobjdump, "-sass", str(cubin)], 60)
        _, usage, _ = runner([cuobjdump, "-res-usage", str(cubin)], 60)
    if code != 0:
        return {"compile_command": compile_cmd, "error": f"cuobjdump failed: {err[-800:]}"}
    functions, resources = sass_functions(listing), resource_usage(usage)
    kernels = {}
    for name in names:
        if name not in functions:
            kernels[name] = {"error": f"not in the cubin (functions: {sorted(functions)})"}
            continue
        kernels[name] = sass_summary(functions[name]) | {"resources": resources.get(name, {})}
    return {"compile_command": compile_cmd, "arch": arch, "disassembler": "cuobjdump -sass", "kernels": kernels}


def gpu_arch(runner) -> str:
    code, out, _ = runner(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], 20)
    m = re.match(r"\s*(\d+)\.(\d+)", out) if code == 0 else None
    return f"sm_{m.group(1)}{m.group(2)}" if m else "sm_90"


def machine(runner, ncu: str | None) -> dict:
    code, gpu, _ = runner(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], 20)
    version = runner([ncu, "--version"], 20)[1].strip().splitlines()[-1:] if ncu else []
    return {"gpu": gpu.strip() if code == 0 else None, "ncu_version": version[0] if version else None}


def record_topic(name: str, ncu: str | None, offered, runner, deadline: float, about: dict, command: str) -> Path:
    topic = TOPICS[name]
    data: dict = {"topic": name, "question": topic.question, "notes": list(topic.notes), **about}
    try:
        if time.monotonic() > deadline:
            raise TimeoutError("skipped: the run's time budget was spent before this topic")
        if topic.sass:
            data["sass"] = sass_topic(topic.sass, runner, deadline)
        if topic.runs and ncu is None:
            raise FileNotFoundError("ncu is not on PATH (nor in $CUDA_ROOT/bin)")
        data["runs"] = [profile(run, name, ncu, offered, runner, deadline) for run in topic.runs]
    except Exception as exc:  # one topic's failure is recorded; the others still run
        data["error"] = f"{type(exc).__name__}: {exc}"[:600]
    return results.save(f"ncu_{name}", data, command)


def main(argv: list[str] | None = None, runner=run_command) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topics", nargs="*", help=f"default: all of {', '.join(TOPICS)}")
    parser.add_argument("--out", help="directory for ncu_<topic>.json (default: $MINITORCH_CUDA_RESULTS_DIR)")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run (default 300)")
    parser.add_argument("--workload", help=argparse.SUPPRESS)  # the child that ncu profiles
    args = parser.parse_args(argv)
    refuse_emulated("python -m minitorch_cuda.experiments.ncu", "Nsight Compute would find no GPU kernels to profile")
    if args.workload:
        WORKLOADS[args.workload]()
        return 0
    unknown = [t for t in args.topics if t not in TOPICS]
    if unknown:
        parser.error(f"unknown topic(s) {', '.join(unknown)}; known: {', '.join(TOPICS)}")
    if args.out:
        results.RESULTS_DIR = Path(args.out)
    deadline = time.monotonic() + args.budget
    ncu = tool("ncu")
    offered = None
    if ncu:
        code, listing, _ = runner([ncu, "--query-metrics", "--devices", "0"], 60)
        offered = offered_metrics(listing) if code == 0 else None
    about = machine(runner, ncu) | {"metrics_checked_against_query": offered is not None}
    command = "python -m minitorch_cuda.experiments.ncu " + " ".join(argv if argv is not None else sys.argv[1:])
    for name in args.topics or list(TOPICS):
        path = record_topic(name, ncu, offered, runner, deadline, about, command.strip())
        saved = json.loads(path.read_text())
        problems = [saved.get("error")] + [r.get("error") for r in saved.get("runs", [])]
        print(f"{path}: {'; '.join(p for p in problems if p) or 'ok'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
