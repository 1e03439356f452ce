"""The CPU emulator's access counts against Nsight Compute's, on the GPU machine (2-3 minutes).

    bash .ci/gpu_run.sh python .ci/access_vs_ncu.py [--out DIR] [WORKLOAD ...]   (DIR, else $OUT: where the JSON goes)

Each workload below runs twice in a child process: once under ncu on the GPU (every launch profiled,
with the counters emulator/access.py names), once on the CPU emulator with every launch traced
(MINITORCH_CUDA_EMULATE=1, access.tracing()). The k-th launch of a kernel in one is compared with
its k-th launch in the other, counter by counter. Writes $OUT/access_vs_ncu.json: per launch the two
counts of each counter and whether they are equal, then the share of equal counters in all and by
counter, and the seconds each part took. Equal to the unit is the target; where nvcc merges a
thread's neighbouring accesses into one wider instruction (the tiled matmul's tile_a reads) the
counts differ by design, and the record lists those counters apart (KNOWN).

The probes are the kernels of tests/test_emulator_access.py and more shared-memory patterns of 8- and
16-byte words (the phase and pair rules of trace.cpp); the others are experiments/ncu_workloads.py's
workloads of chapters 7, 11, 13 and 14, at sizes the emulator traces in seconds.

Those workloads launch every kernel twice, the same way (ncu_workloads._twice). Where the GPU's two
counts of one counter differ, the counter is not deterministic there (the shared-store wavefronts and
bank conflicts of some kernels vary from launch to launch by a few percent, above the address
pattern's count that the emulator gives): it is listed apart (VARIES), not scored.
    python .ci/access_vs_ncu.py --summarize RECORD.json   (the summary again, in place, from its workloads)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
import access_probes  # noqa: E402  (the probe kernels the CPU test counts too)

OUT = Path(os.environ.get("OUT", "/tmp/access_vs_ncu"))
SIZES = {"gather": (1024, 784), "matmul": 256}  # ncu_workloads.SIZES for both runs
METRICS = [
    f"l1tex__t_{what}_pipe_lsu_mem_global_op_{op}.sum" for what in ("requests", "sectors") for op in ("ld", "st")
] + [
    f"{name}_{op}.sum"
    for name in (
        "smsp__sass_inst_executed_op_shared",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op",
    )
    for op in ("ld", "st")
]
# (kernel, counter) pairs that differ by design: nvcc loads four of a thread's tile_a[ty][k] at once
KNOWN = {
    ("matmul_tiled", f"{m}_ld.sum")
    for m in (
        "smsp__sass_inst_executed_op_shared",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op",
    )
}

# the workloads whose launches come in identical pairs (ncu_workloads._twice); the probes' do not
TWICE = {"ch07", "ch11", "ch13", "ch14_ours"}

PROBES = (
    access_probes.COPY
    + r"""
#define TRANSPOSE(NAME, WIDTH)                                  \
extern "C" __global__ void NAME(float* out, const float* x) {   \
    __shared__ float tile[32][WIDTH];                           \
    const int tx = threadIdx.x, ty = threadIdx.y;               \
    tile[ty][tx] = x[ty * 32 + tx];                             \
    __syncthreads();                                            \
    out[ty * 32 + tx] = tile[tx][ty];                           \
}
TRANSPOSE(transpose32, 32)
TRANSPOSE(transpose33, 33)
extern "C" __global__ void broadcast(float* out, const float* x) {
    __shared__ float s[32];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[0] + s[threadIdx.x / 4];
}
// 8- and 16-byte shared words: lane l reads word (l * mul) / div of the array
extern "C" __global__ void doubles(double* out, const double* x, int mul, int div) {
    __shared__ double s[32 * 32];
    for (int i = threadIdx.x; i < 32 * 32; i += 32) s[i] = x[i];
    __syncwarp();
    out[threadIdx.x] = s[threadIdx.x * mul / div];
}
extern "C" __global__ void quads(float4* out, const float4* x, int mul, int div) {
    __shared__ float4 s[32 * 16];
    for (int i = threadIdx.x; i < 32 * 16; i += 32) s[i] = x[i];
    __syncwarp();
    out[threadIdx.x] = s[threadIdx.x * mul / div];
}
"""
)
WORD_PATTERNS = [(1, 1), (0, 1), (1, 2), (2, 1), (1, 4), (16, 1), (7, 1)]  # (mul, div) of the probes above


def probes() -> None:
    import numpy as np

    from minitorch_cuda.cuda import runtime
    from minitorch_cuda.cuda.driver import drv

    module = runtime.compile_module(PROBES, "access probes")

    def launch(name, signature, grid, block, *args):
        runtime.launch(runtime.Kernel(name, module, name, signature), grid, block, *args)

    n = 4096
    x = drv.to_device(np.arange(32 * n, dtype=np.float32))
    out = drv.mem_alloc(4 * 4 * n)
    for stride in (1, 2, 32):
        launch("copy", "PPii", (n // 256, 1, 1), (256, 1, 1), out, x, n, stride)
    launch("copy4", "PPi", (n // 128, 1, 1), (128, 1, 1), out, x, n)
    launch("transpose32", "PP", (1, 1, 1), (32, 32, 1), out, x)
    launch("transpose33", "PP", (1, 1, 1), (32, 32, 1), out, x)
    launch("broadcast", "PP", (1, 1, 1), (32, 1, 1), out, x)
    for mul, div in WORD_PATTERNS:
        launch("doubles", "PPii", (1, 1, 1), (32, 1, 1), out, x, mul, div)
        launch("quads", "PPii", (1, 1, 1), (32, 1, 1), out, x, mul, div)
    runtime.synchronize()


def workload(name: str):
    from minitorch_cuda.experiments import ncu_workloads

    ncu_workloads.SIZES.update(SIZES)
    return probes if name == "probes" else getattr(ncu_workloads, f"workload_{name}")


WORKLOADS = ["probes", "ch07", "ch11", "ch13", "ch14_ours"]


def child(name: str, emulate: bool) -> None:
    """Run one workload; on the emulator, traced, printing each launch's counters as JSON."""
    run = workload(name)
    if not emulate:
        run()
        return
    from minitorch_cuda.emulator.access import tracing

    with tracing() as reports:
        run()
    print(json.dumps([[r.kernel, r.metrics()] for r in reports]))


def by_launch(launches: list[tuple[str, dict]]) -> dict[tuple[str, int], dict]:
    """{(kernel, k): counters} of the k-th launch of each kernel."""
    out, seen = {}, {}
    for kernel, counters in launches:
        seen[kernel] = seen.get(kernel, 0) + 1
        out[(kernel, seen[kernel])] = counters
    return out


def compare(name: str) -> dict:
    from minitorch_cuda.experiments.ncu import tool
    from minitorch_cuda.experiments.ncu_counters import parse_csv

    me = [sys.executable, str(Path(__file__).resolve()), "--workload", name]
    started = time.monotonic()
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1"}
    emulated = subprocess.run([*me, "--emulate"], env=env, capture_output=True, text=True, timeout=240)
    emulator_seconds = time.monotonic() - started
    started = time.monotonic()
    ncu = [tool("ncu") or "ncu", "--csv", "--print-units", "base", "--metrics", ",".join(METRICS)]
    profiled = subprocess.run([*ncu, *me], capture_output=True, text=True, timeout=240)
    ncu_seconds = time.monotonic() - started
    record = {"workload": name, "emulator_seconds": round(emulator_seconds, 1), "ncu_seconds": round(ncu_seconds, 1)}
    if emulated.returncode != 0:
        return {**record, "error": "emulator: " + emulated.stderr[-2000:]}
    gpu = by_launch([(x["kernel"], x["metrics"]) for x in parse_csv(profiled.stdout)])
    if not gpu:
        return {**record, "error": f"ncu (exit {profiled.returncode}): " + (profiled.stderr + profiled.stdout)[-2000:]}
    emu = by_launch([tuple(x) for x in json.loads(emulated.stdout.splitlines()[-1])])
    launches = []
    for key in sorted(set(emu) | set(gpu), key=str):
        e, g = emu.get(key), gpu.get(key)
        if e is None or g is None:
            launches.append({"kernel": key[0], "launch": key[1], "error": f"only {'ncu' if e is None else 'emulator'}"})
            continue
        counters = {}
        for metric in METRICS:
            want, got = float(g.get(metric) or 0), float(e.get(metric, 0))
            if metric in g and (want or got):  # a counter neither side counts anything on is not compared
                counters[metric] = {"emulator": got, "ncu": want, "equal": got == want,
                                    "known": (key[0], metric) in KNOWN}  # fmt: skip
        launches.append({"kernel": key[0], "launch": key[1], "counters": counters})
    return {**record, "launches": launches}


def device() -> str:
    """The GPU's name and driver, as nvidia-smi gives them."""
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"


def row(kernel: str, metric: str, counts: dict) -> dict:
    return {"kernel": kernel, "metric": metric, "emulator": counts["emulator"], "ncu": counts["ncu"]}


def varying(results: list[dict]) -> set[tuple[str, str, str]]:
    """(workload, kernel, counter) whose GPU counts differ between identical launches (absent: 0)."""
    counts: dict[tuple[str, str, str], set[float]] = {}
    for r in results:
        if r["workload"] not in TWICE:
            continue
        for launch in r.get("launches", []):
            for metric in METRICS:
                c = launch.get("counters", {}).get(metric)
                counts.setdefault((r["workload"], launch["kernel"], metric), set()).add(c["ncu"] if c else 0.0)
    return {key for key, seen in counts.items() if len(seen) > 1}


def summarize(results: list[dict]) -> dict:
    """The share of equal counters among those the GPU counts the same in every identical launch."""
    varies = varying(results)
    compared = [
        (launch["kernel"], metric, c, (r["workload"], launch["kernel"], metric) in varies)
        for r in results
        for launch in r.get("launches", [])
        for metric, c in launch.get("counters", {}).items()
    ]
    scored = [(k, m, c) for k, m, c, v in compared if not c["known"] and not v]
    by_counter: dict[str, list[int]] = {}
    for _, metric, c in scored:
        by_counter.setdefault(metric, [0, 0])
        by_counter[metric][0] += c["equal"]
        by_counter[metric][1] += 1
    equal = sum(c["equal"] for _, _, c in scored)
    return {
        "compared": len(scored),
        "equal": equal,
        "share_equal": round(equal / max(1, len(scored)), 4),
        "by_counter": {m: {"equal": e, "compared": n} for m, (e, n) in sorted(by_counter.items())},
        "different": [row(k, m, c) for k, m, c in scored if not c["equal"]],
        "varies_on_the_gpu": [row(k, m, c) for k, m, c, v in compared if v],
        "known_differences": [row(k, m, c) for k, m, c, _ in compared if c["known"]],
        "errors": [r["error"] for r in results if "error" in r],
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--workload"]:
        child(argv[1], "--emulate" in argv)
        return 0
    if argv[:1] == ["--summarize"]:
        path = Path(argv[1])
        record = json.loads(path.read_text())
        summary = {**record, **summarize(record["workloads"])}
    else:
        out = OUT
        if argv[:1] == ["--out"]:
            out, argv = Path(argv[1]), argv[2:]
        path = out / "access_vs_ncu.json"
        out.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        results = [compare(name) for name in argv or WORKLOADS]
        summary = {
            "command": "python .ci/access_vs_ncu.py",
            "device": device(),
            "sizes": SIZES,
            **summarize(results),
            "seconds": round(time.monotonic() - started, 1),
            "workloads": results,
        }
    path.write_text(json.dumps(summary, indent=1))
    varies, errors = len(summary["varies_on_the_gpu"]), len(summary["errors"])
    print(f"{summary['equal']} of {summary['compared']} counters equal ({summary['share_equal']:.1%}), "
          f"{varies} that vary on the GPU apart; {errors} errors: {path}")  # fmt: skip
    return 0 if not summary["errors"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
