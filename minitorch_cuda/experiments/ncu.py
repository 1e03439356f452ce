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
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from minitorch_cuda import results
from minitorch_cuda.needs_gpu import refuse_emulated

# --- what each topic measures ---------------------------------------------------------------

TIME = ("gpu__time_duration.sum", "launch__grid_size", "launch__block_size", "launch__registers_per_thread")
SECTORS = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
)
MEMORY = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "lts__t_sector_op_read_hit_rate.pct",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "l1tex__t_sector_hit_rate.pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
SHARED = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
)
FMA = (
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",  # thread-level FFMAs: / 32 per warp instruction
    "sm__inst_executed_pipe_fma.sum",
    "smsp__inst_executed.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
STALLS = tuple(
    f"smsp__average_warps_issue_stalled_{why}_per_issue_active.ratio"
    for why in (
        "barrier",
        "membar",
        "long_scoreboard",
        "short_scoreboard",
        "mio_throttle",
        "math_pipe_throttle",
        "wait",
    )
)
STALLS_MORE = tuple(  # the other reasons, so that the dominant one is found among them all
    f"smsp__average_warps_issue_stalled_{why}_per_issue_active.ratio"
    for why in ("not_selected", "dispatch_stall", "lg_throttle", "no_instruction", "imc_miss", "branch_resolving",
                "drain", "sleeping", "misc")
)  # fmt: skip
ISSUE = ("smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__warps_eligible.avg.per_cycle_active")
BUSY = (  # how much of a tiny kernel's time the SMs had work
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "smsp__warps_launched.sum",
    "smsp__inst_executed.sum",
)
WAVES = (
    "launch__waves_per_multiprocessor",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__shared_mem_per_block_dynamic",
    "launch__shared_mem_per_block_static",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "device__attribute_multiprocessor_count",
)
TENSOR = (  # candidates: mma.sync/WMMA run on the HMMA pipe, wgmma on Hopper's GMMA pipe
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_hmma.sum",
    "sm__inst_executed_pipe_tensor_op_gmma.sum",
)
CUBLAS = r"gemm|nvjet|xmma|cutlass|sgemm"  # cuBLAS's kernel names on recent GPUs, demangled
RANGED = ("--profile-from-start", "off")  # only what the workload brackets with cuProfilerStart/Stop
STEP_LAUNCHES = 16  # a ranged run's cap: stage 11's step is 10 launches (profiles_beyond.json), stage 13's 1
STEP_WARMUP = 3  # steps before the profiled one: the first compiles, autotunes and captures; then replays


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

DERIVED = {  # name: (numerator, denominator metric or constant, scale)
    "sectors_per_request_ld": (SECTORS[0], SECTORS[1], 1.0),
    "sectors_per_request_st": (SECTORS[2], SECTORS[3], 1.0),
    "shared_ld_wavefronts_per_warp_ffma": (SHARED[1], FMA[0], 32.0),
    "shared_wavefronts_per_warp_ffma": (SHARED[0], FMA[0], 32.0),
    "dram_reads_of_matrix": ("dram__bytes_read.sum", 8192 * 8192 * 4, 1.0),
    "grid_blocks_per_sm": ("launch__grid_size", "device__attribute_multiprocessor_count", 1.0),
    "warps_per_sm": ("smsp__warps_launched.sum", "device__attribute_multiprocessor_count", 1.0),
    "ffma_gflops": (FMA[0], TIME[0], 2.0),  # 2 flops per thread FFMA, per ns: GFLOP/s
    "ffma_per_warp_instruction": (FMA[0], FMA[2], 1 / 32),
    "fma_pipe_share": (FMA[1], FMA[2], 1.0),
    "sm_active_share": ("sm__cycles_active.avg", "sm__cycles_elapsed.avg", 1.0),
}
DOMINANT_STALL = ("dominant_stall", "dominant_stall_share")  # derived from STALLS + STALLS_MORE, not a ratio
DERIVED_FOR = {  # the derived ratios each topic's kernels get
    "ch07": ("sectors_per_request_ld", "sectors_per_request_st"),
    "ch14_16": ("shared_ld_wavefronts_per_warp_ffma", "shared_wavefronts_per_warp_ffma", "grid_blocks_per_sm"),
    "ch15": ("dram_reads_of_matrix",),
    "ch19": ("grid_blocks_per_sm",),
    "ch16_pipelined": ("ffma_gflops", "ffma_per_warp_instruction", "fma_pipe_share", "shared_wavefronts_per_warp_ffma",
                       "shared_ld_wavefronts_per_warp_ffma", "grid_blocks_per_sm", *DOMINANT_STALL),
    "ch21": ("grid_blocks_per_sm", "warps_per_sm", "sm_active_share", *DOMINANT_STALL),
}  # fmt: skip

# --- parsing ncu's CSV -------------------------------------------------------------------------

SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "k": 1e3}
TIME_SCALE = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def number(text: str, unit: str = "") -> float | int | str | None:
    """A metric value in base units: '45,408' -> 45408, 'n/a' -> None; 'Mbyte' scales to bytes,
    'usecond' to ns (ncu's defaults when --print-units base was not given). Text stays text."""
    text = text.strip()
    if text in ("", "n/a", "N/A", "-"):
        return None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return text
    if unit in TIME_SCALE:
        value *= TIME_SCALE[unit]
    else:
        m = re.fullmatch(r"([KMGTk]?)(byte|sector|B)(/s|/second)?", unit)
        if m:
            value *= SCALE[m.group(1)]
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def _rows(text: str) -> list[list[str]]:
    """The CSV lines of ncu's output (they start with a quote; ==PROF== lines and the
    workload's own output do not)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def parse_csv(text: str) -> list[dict]:
    """Profiled launches in ID order, each {id, kernel, block, grid, metrics, units}, from
    ncu's long format (a row per metric: the details page with --metrics) or the raw page's
    wide one (a row per launch, a units row under the header)."""
    rows = _rows(text)
    if not rows:
        return []
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}
    launches: dict[int, dict] = {}

    def launch(row: list[str]) -> dict:
        key = int(row[col["ID"]])
        return launches.setdefault(
            key,
            {
                "id": key,
                "kernel": row[col["Kernel Name"]],
                "block": row[col["Block Size"]] if "Block Size" in col else None,
                "grid": row[col["Grid Size"]] if "Grid Size" in col else None,
                "metrics": {},
                "units": {},
            },
        )

    if "Metric Name" in col:
        for row in rows[1:]:
            if len(row) != len(head):
                continue
            name, unit = row[col["Metric Name"]], row[col["Metric Unit"]]
            entry = launch(row)
            entry["metrics"][name] = number(row[col["Metric Value"]], unit)
            entry["units"][name] = unit
    else:
        metric_cols = [i for i, name in enumerate(head) if "__" in name]
        units = rows[1] if len(rows) > 1 and not rows[1][col["ID"]].strip().isdigit() else [""] * len(head)
        for row in rows[1:]:
            if len(row) != len(head) or not row[col["ID"]].strip().isdigit():
                continue
            entry = launch(row)
            for i in metric_cols:
                entry["metrics"][head[i]] = number(row[i], units[i])
                entry["units"][head[i]] = units[i]
    return [launches[k] for k in sorted(launches)]


def dominant_stall(metrics: dict) -> tuple[str, float] | None:
    """The stall reason with the most warps per issue cycle, and its share of all those reported."""
    stalls = {m: metrics.get(m) for m in STALLS + STALLS_MORE}
    stalls = {m: v for m, v in stalls.items() if isinstance(v, (int, float))}
    total = sum(stalls.values())
    if not total:
        return None
    top = max(stalls, key=stalls.get)
    return re.search(r"stalled_(\w+?)_per_issue", top).group(1), stalls[top] / total


def derive(metrics: dict, names: tuple[str, ...]) -> dict:
    out = {}
    for name in names:
        if name in DOMINANT_STALL:
            found = dominant_stall(metrics)
            if found:
                out[name] = found[DOMINANT_STALL.index(name)]
            continue
        top, bottom, scale = DERIVED[name]
        a = metrics.get(top)
        b = bottom if isinstance(bottom, (int, float)) else metrics.get(bottom)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
            out[name] = scale * a / b
    return out


def by_kernel(launches: list[dict], derived: tuple[str, ...] = (), every: bool = False) -> dict:
    """The last profiled launch of each kernel (the warm-ups were skipped), with derived ratios;
    ``every``: each launch, named in launch order ('01 name'), as a ranged run's step is."""
    out: dict[str, dict] = {}
    for i, entry in enumerate(launches):
        kept = {k: entry[k] for k in ("id", "block", "grid", "metrics", "units")}
        kept["derived"] = derive(entry["metrics"], derived)
        name = f"{i + 1:02d} {entry['kernel']}" if every else entry["kernel"]
        if name in out and out[name]["grid"] != entry["grid"]:  # the same kernel at another shape
            name = f"{name} @ {entry['grid']}"
        kept["launches_profiled"] = out.get(name, {}).get("launches_profiled", 0) + 1
        out[name] = kept
    return out


def offered_metrics(listing: str) -> set[str]:
    """Base metric names in ``ncu --query-metrics`` output (first column)."""
    return set(re.findall(r"^([a-z0-9]+__[A-Za-z0-9_]+)\s", listing, re.MULTILINE))


def usable(metrics: tuple[str, ...], offered: set[str] | None) -> tuple[list[str], list[str]]:
    """(kept, dropped): a metric is dropped when the listing has its unit (e.g. ``sm``) but not
    its base name; with no listing, or a unit the listing never names (``launch``), it is kept."""
    if not offered:
        return list(dict.fromkeys(metrics)), []
    units = {name.split("__")[0] for name in offered}
    kept, dropped = [], []
    for m in dict.fromkeys(metrics):
        base = m.split(".")[0]
        (kept if base in offered or m.split("__")[0] not in units else dropped).append(m)
    return kept, dropped


def rejected(output: str, metrics: list[str]) -> list[str]:
    """Metrics that ncu's error lines name (an unknown metric fails the whole run)."""
    errors = "\n".join(line for line in output.splitlines() if "ERROR" in line or "rror" in line)
    return [m for m in metrics if m in errors or m.split(".")[0] in errors]


# --- SASS (chapter 10) --------------------------------------------------------------------------

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;")


def sass_functions(listing: str) -> dict[str, list[tuple[int, str]]]:
    """cuobjdump -sass output split by function: [(address, instruction text)]; a label line
    (``.L_x_3:``) is kept as an entry with text ``.L_x_3:`` at the next address."""
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in listing.splitlines():
        m = re.search(r"Function\s*:\s*(\S+)", line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        if current is None:
            continue
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            current.append((-1, label.group(1) + ":"))
            continue
        m = INSTRUCTION.search(line)
        if m:
            current.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(text: str) -> str:
    """The base opcode: '@!P0 LDG.E.128 R4, ...' -> 'LDG'."""
    parts = text.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def loops(code: list[tuple[int, str]]) -> list[list[str]]:
    """Bodies of backward branches (a BRA to an address or label at or before itself)."""
    labels, addresses, instructions = {}, [], []
    pending = []
    for address, text in code:
        if address < 0:
            pending.append(text[:-1])
            continue
        for name in pending:
            labels[name] = address
        pending = []
        addresses.append(address)
        instructions.append(text)
    bodies = []
    for i, text in enumerate(instructions):
        if opcode(text) != "BRA":
            continue
        m = re.search(r"`?\(?(\.L_x_\d+)\)?`?", text)
        target = labels.get(m.group(1)) if m else None
        if target is None:
            m = re.search(r"0x([0-9a-f]+)", text)
            target = int(m.group(1), 16) if m else None
        if target is not None and target <= addresses[i]:
            start = addresses.index(target) if target in addresses else None
            if start is not None:
                bodies.append(instructions[start : i + 1])
    return bodies


def histogram(instructions: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for text in instructions:
        op = opcode(text)
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def sass_summary(code: list[tuple[int, str]]) -> dict:
    """Instruction counts of one function and of its inner loop (the loop with the most FFMAs)."""
    instructions = [text for address, text in code if address >= 0]
    bodies = loops(code)
    inner = max(bodies, key=lambda b: (histogram(b).get("FFMA", 0), len(b)), default=[])
    ops = histogram(inner)
    return {
        "instructions": len(instructions),
        "opcodes": histogram(instructions),
        "inner_loop": {
            "instructions": len(inner),
            "ffma": ops.get("FFMA", 0),
            "instructions_per_ffma": len(inner) / ops["FFMA"] if ops.get("FFMA") else None,
            "opcodes": ops,
            "code": inner[:240],
        },
    }


def resource_usage(listing: str) -> dict[str, dict]:
    """``cuobjdump -res-usage``: {function: {REG: 40, SHARED: 0, ...}}."""
    out, current = {}, None
    for line in listing.splitlines():
        m = re.search(r"Function\s+(\S+?):", line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        if current is not None:
            for key, value in re.findall(r"([A-Z]+):(\d+)", line):
                current[key] = int(value)
    return out


# --- what the chapters show ----------------------------------------------------------------------

PENDING = "Nsight Compute measurement pending: book/results/ncu_{topic}.json is not recorded yet ({how})."


def _how(topic: str) -> str:
    return f"python -m minitorch_cuda.experiments.ncu {topic} on a GPU"


def shown(topic: str, columns: list[tuple[str, str, float, str]], record: dict | None = None) -> str:
    """A chapter's view of ``ncu_<topic>.json``: a line per run and kernel with ``columns``
    (label, metric or derived name, scale, format); '-' where ncu did not report it; one
    line saying the measurement is pending where nothing was recorded."""
    record = results.load(f"ncu_{topic}") if record is None else record
    if record is None:
        return PENDING.format(topic=topic, how=_how(topic))
    if "error" in record:
        return f"ncu_{topic}.json recorded no measurement: {record['error']}"
    lines = [f"Nsight Compute ({record.get('ncu_version') or 'ncu'}) on {record.get('gpu') or 'the GPU'}, "
             f"{record.get('recorded', '')[:10]} (ncu_{topic}.json):"]  # fmt: skip
    width = max([len(k) for run in record.get("runs", []) for k in run.get("kernels", {})] + [12])
    width = min(width, 48)
    lines.append(f"{'kernel':<{width}} " + " ".join(f"{label:>{max(10, len(label))}}" for label, *_ in columns))
    for run in record.get("runs", []):
        lines.append(f"[{run['variant']}]" + (f" error: {run['error']}" if run.get("error") else ""))
        for name, kernel in run.get("kernels", {}).items():
            cells = []
            for label, key, scale, fmt in columns:
                value = kernel["metrics"].get(key, kernel.get("derived", {}).get(key))
                if key == "grid":
                    value = kernel.get("grid")
                text = fmt.format(value * scale) if isinstance(value, (int, float)) else (value or "-")
                cells.append(f"{text:>{max(10, len(label))}}")
            short = name if len(name) <= width else name[: width - 3] + "..."
            lines.append(f"{short:<{width}} " + " ".join(cells))
    return "\n".join(lines)


def kernel_names(topic: str, record: dict | None = None) -> list[str]:
    """The full names of the kernels a topic's record profiled (cuBLAS's are long)."""
    record = results.load(f"ncu_{topic}") if record is None else record
    return [k for run in (record or {}).get("runs", []) for k in run.get("kernels", {})]


def shown_sass(topic: str = "ch10", record: dict | None = None) -> str:
    """Chapter 10's view: per kernel its instructions, its inner loop's, and the loop's opcodes."""
    record = results.load(f"ncu_{topic}") if record is None else record
    if record is None:
        return PENDING.format(topic=topic, how=_how(topic)).replace("Nsight Compute measurement", "SASS comparison")
    sass = record.get("sass", {})
    if "error" in record or "error" in sass:
        return f"ncu_{topic}.json holds no SASS: {record.get('error') or sass.get('error')}"
    lines = [f"{' '.join(sass.get('compile_command', [])[1:4])}; cuobjdump -sass (ncu_{topic}.json):"]
    for name, k in sass.get("kernels", {}).items():
        if "error" in k:
            lines.append(f"{name}: {k['error']}")
            continue
        loop = k["inner_loop"]
        per = loop["instructions_per_ffma"]
        lines.append(
            f"{name}: {k['instructions']} instructions, {k.get('resources', {}).get('REG', '?')} registers; "
            f"inner loop {loop['instructions']} instructions for {loop['ffma']} FFMA"
            + (f" ({per:.2f} per FFMA)" if per else "")
        )
        lines.append("    " + ", ".join(f"{op} {n}" for op, n in loop["opcodes"].items()))
    return "\n".join(lines)


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


# --- workloads: run in the child under ncu; stdout stays quiet (ncu's CSV goes there) -------------


def _device():
    from minitorch_cuda.cuda.driver import attach

    attach()
    from minitorch_cuda.cuda import launchers, ops_tensor, runtime
    from minitorch_cuda.cuda.array import DeviceArray

    return launchers, ops_tensor, runtime, DeviceArray


def _random(ops_tensor, *shape, seed: int = 0):
    return ops_tensor.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _twice(launches) -> None:
    """Every launch once as a warm-up, then every launch again: --launch-skip len(launches)."""
    for _ in range(2):
        for launch in launches:
            launch()


# The problem sizes the topics' questions name (a CPU check runs the same code at small sizes).
SIZES = {
    "gather": (8192, 784),
    "sumsq": 784 * 256,
    "sum_rows": (256, 64),
    "matmul": 1024,
    "softmax": 8192,
    "tf32": 4096,
    "pipelined": 4096,
    "splitk": 1024,
    "protocol": {},  # train.Protocol's fields that differ from the protocol's (none: its 784-256-128-10 model)
}


def workload_ch07() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    rows, cols = SIZES["gather"]
    x = _random(ops, rows, cols)
    idx = ops._upload_indices(np.random.default_rng(1).permutation(rows))
    out, out_t = DeviceArray.empty((rows, cols)), DeviceArray.empty((cols, rows))
    # strided_copy makes x's transpose (cols x rows, strides (1, cols), padded to 4-D) contiguous
    _twice([
        lambda: launchers.elementwise("gather_rows", rows * cols, out, x, idx, rows, cols),
        lambda: launchers.elementwise("strided_copy", rows * cols, out_t, x, rows * cols, 1, cols, rows, 0, 0, 1, cols),
    ])  # fmt: skip
    runtime.synchronize()


def _gemm_operands(ops, DeviceArray, n: int):
    a, b = _random(ops, n, n, seed=0), _random(ops, n, n, seed=1)
    return DeviceArray.empty((n, n)), a, b


def workload_ch11() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["matmul"]
    c, a, b = _gemm_operands(ops, DeviceArray, n)
    g = launch_core.Gemm(n, n, n)
    kernels = (matmul_launchers.matmul_naive, matmul_launchers.matmul_batched, matmul_launchers.matmul_tiled)
    _twice([lambda f=f: f(c, a, b, g) for f in kernels])
    runtime.synchronize()


def workload_ch13() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    n, (rows, cols) = SIZES["sumsq"], SIZES["sum_rows"]
    grad, x, out = _random(ops, n), _random(ops, rows, cols), DeviceArray.empty((rows,))
    _twice([
        lambda: launchers.sumsq("sumsq_volatile", out, grad, n),
        lambda: launchers.sumsq("sumsq_shuffle", out, grad, n),
        lambda: launchers.sum_rows("sum_rows_volatile", out, x, rows, cols, 1.0),
        lambda: launchers.sum_rows("sum_rows_shuffle", out, x, rows, cols, 1.0),
    ])  # fmt: skip
    runtime.synchronize()


REGTILED_AT_1024 = ("128x128x8", "64x64x16")  # the largest tile, and the one matmul.json's autotuner kept


def workload_ch14_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["matmul"]
    c, a, b = _gemm_operands(ops, DeviceArray, n)
    g = launch_core.Gemm(n, n, n)
    _twice([
        lambda: matmul_launchers.matmul_tiled(c, a, b, g),
        *[lambda t=t: matmul_launchers.matmul_regtiled(c, a, b, g, tile=t) for t in REGTILED_AT_1024],
    ])  # fmt: skip
    runtime.synchronize()


def workload_ch15() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    n = SIZES["softmax"]
    x, out = _random(ops, n, n), DeviceArray.empty((n, n))
    kernels = ("softmax_rows_shuffle", "softmax_rows_online", "softmax_rows_block")
    _twice([lambda k=k: launchers.softmax_rows(k, out, x, n, n) for k in kernels])
    runtime.synchronize()


def workload_ch19_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["tf32"]
    c, a, b = _gemm_operands(ops, DeviceArray, n)
    g, g_t = launch_core.Gemm(n, n, n), launch_core.Gemm(n, n, n, tb=True)  # b read as B^T: no transpose launch
    _twice([
        lambda: matmul_launchers.matmul_tf32(c, a, b, g),
        lambda: matmul_launchers.matmul_tf32_async(c, a, b, g),
        lambda: matmul_launchers.matmul_tf32_wgmma(c, a, b, g_t),
    ])  # fmt: skip
    runtime.synchronize()


# matmul.json's autotuner choices, fixed so that nothing is timed under ncu: matmul_regtiled at 4096^3,
# and matmul_sgemm at 1024^3 (pipelined_128x128x16s3_splitk4), whose register-tiled runner-up is 64x64x16
REGTILED_AT_4096, PIPELINED_AT_4096, SPLITK_AT_1024 = "128x128x8", "128x128x16s3", ("128x128x16s3", 4)


def workload_ch16_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import kernel_table, launch_core, matmul_launchers

    big, small = SIZES["pipelined"], SIZES["splitk"]
    (c, a, b), g = _gemm_operands(ops, DeviceArray, big), launch_core.Gemm(big, big, big)
    (c1, a1, b1), g1 = _gemm_operands(ops, DeviceArray, small), launch_core.Gemm(small, small, small)
    tile, splits = SPLITK_AT_1024
    bm, bn, _, threads = kernel_table.REGTILED_TILES[REGTILED_AT_4096]
    _twice([
        lambda: matmul_launchers.matmul_regtiled(c, a, b, g, tile=REGTILED_AT_4096),  # its exact twin at 4096^3
        # and the plain kernel on the same product, launched as is: the checks the twin drops
        lambda: launch_core.dispatch(f"matmul_regtiled_{REGTILED_AT_4096}", g.grid(bm, bn), (threads, 1, 1),
                                     (c, a, b, *g.args), 0),
        lambda: matmul_launchers.matmul_pipelined(c, a, b, g, tile=PIPELINED_AT_4096),
        lambda: matmul_launchers.matmul_regtiled(c1, a1, b1, g1, tile=REGTILED_AT_1024[1]),
        # and matmul_splitk_reduce4
        lambda: matmul_launchers.matmul_pipelined(c1, a1, b1, g1, tile=tile, splits=splits),
    ])  # fmt: skip
    runtime.synchronize()


def workload_ch16_cluster() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["splitk"]
    (c, a, b), g = _gemm_operands(ops, DeviceArray, n), launch_core.Gemm(n, n, n)
    _twice([
        lambda: matmul_launchers.matmul_sgemm(c, a, b, g, variant="128x64x8t128_cluster2"),
        lambda: matmul_launchers.matmul_sgemm(c, a, b, g, variant="128x64x8t128_splitk2"),  # and matmul_splitk_reduce4
    ])  # fmt: skip
    runtime.synchronize()


def profiled_step(stage: int, without: tuple[str, ...] = ()) -> None:
    """A train.Trainer on the protocol's model at ``stage`` (minus ``without``): STEP_WARMUP steps on a
    random MNIST-shaped batch, then one more between cuProfilerStart and cuProfilerStop, the range a
    ranged run profiles. The step reads its loss back, so its kernels are done when the range closes."""
    _device()
    from minitorch_cuda import stages, train
    from minitorch_cuda.cuda.driver import drv
    from minitorch_cuda.data import one_hot
    from minitorch_cuda.tensor import tensor

    protocol = train.Protocol(**SIZES["protocol"])
    rng = np.random.default_rng(0)
    x = tensor(rng.random((protocol.batch_size, 784), dtype=np.float32), "cuda")
    y = tensor(one_hot(rng.integers(0, 10, protocol.batch_size)), "cuda")
    with stages.use_stage(stage, without=without):
        trainer = train.Trainer(protocol, "cuda")
        for _ in range(STEP_WARMUP):
            trainer.step(x, y)
        drv.start_profiler()
        trainer.step(x, y)
        drv.stop_profiler()


SMALL = ((64, 64, 64), (64, 256, 784))  # M, N, K: the smallest cube and the MNIST first layer


def workload_ch14_small_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    launches = []
    for M, N, K in SMALL:
        c, a, b = DeviceArray.empty((M, N)), _random(ops, M, K), _random(ops, K, N, seed=1)
        g = launch_core.Gemm(M, N, K)
        launches += [
            lambda f=f, c=c, a=a, b=b, g=g: f(c, a, b, g)
            for f in (
                matmul_launchers.matmul_transposed,
                matmul_launchers.matmul_batched,
                matmul_launchers.matmul_tiled,
            )
        ]
    _twice(launches)
    runtime.synchronize()


def cublas(n: int, tf32: bool, repeats: int, shapes: tuple = ()) -> None:
    """torch.matmul, ``repeats`` times per shape (n x n x n unless ``shapes`` are given): warm-ups first."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = tf32
    pairs = [(torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")) for M, N, K in shapes or [(n, n, n)]]
    for _ in range(repeats):
        for a, b in pairs:
            torch.matmul(a, b)
    torch.cuda.synchronize()


WORKLOADS = {
    "ch07": workload_ch07,
    "ch11": workload_ch11,
    "ch13": workload_ch13,
    "ch14_ours": workload_ch14_ours,
    "ch15": workload_ch15,
    "ch19_ours": workload_ch19_ours,
    "cublas_fp32_1024": lambda: cublas(1024, False, 4),
    "cublas_fp32_4096": lambda: cublas(4096, False, 2),
    "cublas_tf32_4096": lambda: cublas(4096, True, 2),
    "ch14_small_ours": workload_ch14_small_ours,
    "cublas_small": lambda: cublas(0, False, 3, SMALL),  # two warm-ups per shape, then one each
    "ch16_ours": workload_ch16_ours,
    "ch16_cluster": workload_ch16_cluster,
    "cublas_fp32_4096_1024": lambda: cublas(0, False, 2, ((4096, 4096, 4096), (1024, 1024, 1024))),
    "ch21_stage11": lambda: profiled_step(11, without=("cuda_graphs",)),
    "ch21_stage11_graphed": lambda: profiled_step(11),
    "ch21_stage13": lambda: profiled_step(13, without=("cuda_graphs",)),
}


if __name__ == "__main__":
    sys.exit(main())
