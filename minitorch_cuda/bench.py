"""The blog's benchmark, for any set of stages, with PyTorch in the same run.

    python -m minitorch_cuda.bench                      # stages 0-8, PyTorch, table
    python -m minitorch_cuda.bench --stages 6-8 --json out.json
    python -m minitorch_cuda.bench --record             # refresh book/results/ (stages 0-8)
    python -m minitorch_cuda.bench --record --stages 0-13   # the whole ladder: *_beyond.json
    python -m minitorch_cuda.bench --only-kernels --json k.json   # matmul + bandwidth tables only
    python -m minitorch_cuda.bench --user-matmul --json u.json    # a user's a @ b against cuBLAS only
    python -m minitorch_cuda.bench --stages 11-13 --hidden 512,512,512 --activation sigmoid --batch-size 128

The blog's protocol (chapter 5, "How to benchmark"; the model and optimizer are
``train.Protocol``): one warm-up call of 10 batches, then 5 timed epochs, the median
reported. PyTorch runs eagerly, and where the stages reach 11 (the step replayed as one
CUDA graph) also with its whole step in one CUDA graph, the peer of those stages. The
epochs are taken in interleaved rounds (run_rounds): each round times one
epoch of every stage and of PyTorch, so that drift in the host's speed reaches every stage,
and each row records its spread over the rounds (quartiles, min and max). Stages 0 and 1
time fewer batches per epoch, as the blog did (every epoch still shuffles the whole
training split); seconds per step make those rows comparable with the full-epoch ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from . import profiler, stages, synchronize, train
from .cli_parser import Parser
from .cuda.kernel_table import MATMUL_STAGES
from .device import cuda_available, cuda_unavailable_reason
from .needs_gpu import TIMINGS, refuse_emulated

BATCHES = {0: 10, 1: 50}  # per timed epoch; None = full epoch
MATMUL_SIZES = [
    ("64^3", 64, 64, 64),
    ("128^3", 128, 128, 128),
    ("256^3", 256, 256, 256),
    ("512^3", 512, 512, 512),
    ("1024^3", 1024, 1024, 1024),
    ("MNIST fwd 1", 64, 256, 784),
    ("MNIST fwd 2", 64, 128, 256),
    ("MNIST fwd 3", 64, 10, 128),
    ("MNIST dW1", 784, 256, 64),
    ("2048^3", 2048, 2048, 2048),
    ("4096^3", 4096, 4096, 4096),
]
ROUNDS_NOTE = (
    "each round times one epoch of every stage and of PyTorch, in an order rotated by one each round; "
    "a stage's median and spread (quartiles, min, max) are over the rounds"
)
BLOG_LAST_STAGE = 8  # the blog's ladder ends with Opt. 8; later stages are this course's own
GRAPHED_FROM = 11  # stages 11-13 replay the step as a CUDA graph; a run reaching them times PyTorch's graph too
SLOW_KERNELS = {"matmul_naive", "matmul_transposed", "matmul_batched"}  # skipped above 1024^3


def host_steal_seconds() -> float | None:
    """CPU time the hypervisor gave to other guests so far (Linux /proc/stat, all CPUs), or
    None. Host-bound steps slow down when it grows: the benchmark records it per epoch."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def spread(times: list[float]) -> dict:
    """Median, quartiles and extremes of a stage's epoch times (seconds)."""
    q1, median, q3 = (float(q) for q in np.percentile(times, [25, 50, 75]))
    return {"median_s": median, "q1_s": q1, "q3_s": q3, "min_s": float(min(times)), "max_s": float(max(times))}


class StageRun:
    """One stage measured an epoch at a time, so that stages can take turns (run_rounds):
    ``start`` builds the trainer and runs the warm-up, each ``epoch`` times one epoch inside
    the stage, ``row`` summarizes them. ``without`` names steps of the stage switched off (as
    stages.use_stage takes them): chapter 18 times stage 11's graph without stage 11's lean step."""

    def __init__(self, stage: int, data, warmup: int, without: frozenset[str] = frozenset(),
                 protocol: train.Protocol | None = None):  # fmt: skip
        self.stage, self.data, self.warmup, self.without = stage, data, warmup, frozenset(without)
        self.protocol = protocol or train.Protocol()
        self.limit = BATCHES.get(stage)
        self.times, self.cpu_times, self.steals, self.losses = [], [], [], []
        self.counts: dict[str, float] = {}

    def label(self) -> str:
        return f"stage {self.stage}"

    def start(self) -> None:
        with stages.use_stage(self.stage, self.without):
            self.trainer = train.Trainer(self.protocol, "cuda")
            self.trainer.epoch(self.data.x_train, self.data.y_train, max_batches=self.warmup)

    def epoch(self) -> None:
        data = self.data
        with stages.use_stage(self.stage, self.without), profiler.count() as counts:
            start, cpu_start, steal_start = time.perf_counter(), time.process_time(), host_steal_seconds()
            self.losses.append(self.trainer.epoch(data.x_train, data.y_train, max_batches=self.limit))
            synchronize()  # stage 13 has each loss before its step's update is done: the epoch ends here
            self.times.append(time.perf_counter() - start)
            self.cpu_times.append(time.process_time() - cpu_start)
            steal_end = host_steal_seconds()
        self.steals.append(None if steal_start is None or steal_end is None else steal_end - steal_start)
        for name, value in counts.snapshot().items():
            self.counts[name] = self.counts.get(name, 0) + value

    def row(self) -> dict:
        batches = self.limit or -(-len(self.data.x_train) // self.trainer.protocol.batch_size)
        epochs = len(self.times)
        with stages.use_stage(self.stage, self.without):
            accuracy = train.accuracy(self.trainer.net, self.data.x_test, self.data.labels_test)
        summary = spread(self.times)
        return {
            "stage": self.stage,
            "description": stages.DESCRIPTIONS[self.stage]
            + "".join(f", without {name}" for name in sorted(self.without)),
            "batches_per_epoch": batches,
            "epoch_seconds": self.times,
            # Where a host-bound epoch's time went: this process's CPU time, and time the VM's
            # CPUs were given to other guests (run-to-run differences of up to 2x were seen).
            "epoch_cpu_seconds": self.cpu_times,
            "epoch_host_steal_seconds": self.steals,
            **summary,
            "s_per_step": summary["median_s"] / batches,
            "s_per_step_min": summary["min_s"] / batches,
            "s_per_step_max": summary["max_s"] / batches,
            "last_epoch_loss": self.losses[-1],
            "counters_per_step": {k: v / (epochs * batches) for k, v in self.counts.items()},
            "test_accuracy": accuracy,
        }


class TorchRun:
    """PyTorch on the same protocol, with StageRun's interface: eager (torch_reference's
    TorchTrainer), or with ``graphed`` the whole step replayed as one CUDA graph
    (TorchGraphTrainer), the peer of the stages that replay theirs (11-13)."""

    def __init__(self, data, warmup: int, graphed: bool = False, protocol: train.Protocol | None = None):
        self.data, self.warmup, self.graphed, self.times = data, warmup, graphed, []
        self.protocol = protocol or train.Protocol()

    def label(self) -> str:
        return "PyTorch CUDA graph" if self.graphed else "PyTorch eager"

    def start(self) -> None:
        from .torch_reference import TorchGraphTrainer, TorchTrainer

        self.trainer = (TorchGraphTrainer if self.graphed else TorchTrainer)(self.protocol, self.data)
        self.trainer.epoch(self.warmup)

    def epoch(self) -> None:
        sync = self.trainer.torch.cuda.synchronize
        sync()
        start = time.perf_counter()
        self.trainer.epoch()
        sync()
        self.times.append(time.perf_counter() - start)

    def row(self) -> dict:
        batches = -(-len(self.trainer.x) // self.trainer.protocol.batch_size)
        summary = spread(self.times)
        how = "the whole step in one CUDA graph" if self.graphed else "eager"
        return {
            "name": f"PyTorch {self.trainer.torch.__version__} {how}",
            "batches_per_epoch": batches,
            "epoch_seconds": self.times,
            **summary,
            "s_per_step": summary["median_s"] / batches,
            "s_per_step_min": summary["min_s"] / batches,
            "s_per_step_max": summary["max_s"] / batches,
            "test_accuracy": self.trainer.accuracy(),
        }


def run_rounds(runs: list, rounds: int, progress) -> list[dict]:
    """Every run's warm-up, then ``rounds`` rounds that time one epoch of every run, the order
    rotated by one each round: drift in the host's speed (chapter 16 measured it) then reaches
    every stage alike instead of whichever ran last, and each row's spread is across rounds."""
    for run in runs:
        run.start()
    for r in range(rounds):
        for run in runs[r % len(runs) :] + runs[: r % len(runs)]:
            progress.set_postfix_str(f"round {r + 1}, {run.label()}")
            run.epoch()
            progress.update(1)
    return [run.row() for run in runs]


def run_stage(stage: int, data, epochs: int, warmup: int, progress, without: frozenset[str] = frozenset()) -> dict:
    """One stage alone (``without`` some of its steps): warm-up, then ``epochs`` timed epochs back
    to back (the chapters' cells)."""
    run = StageRun(stage, data, warmup, without)
    run.start()
    for _ in range(epochs):
        run.epoch()
        progress.update(1)
    return run.row()


def profile_stage(stage: int, data, steps: int = 20, keep: int = 400, protocol: train.Protocol | None = None) -> dict:
    """Per-kernel time shares, counters and a timeline over ``steps`` training steps."""
    with stages.use_stage(stage):
        trainer = train.Trainer(protocol or train.Protocol(), "cuda")
        trainer.epoch(data.x_train, data.y_train, max_batches=3)
        rows = trainer.protocol.batch_size
        # consecutive batches, as an epoch hands them out (stage 13 reads the next one in place),
        # from the first again where the split has fewer than steps + 1
        starts = [i % (len(data.x_train) // rows) * rows for i in range(steps + 1)]
        batches = [(data.x_train[s : s + rows], data.y_train[s : s + rows]) for s in starts]
        trainer.step(*batches[0])
        with profiler.count() as counts, profiler.profile() as prof:
            for xb, yb in batches[1:]:
                trainer.step(xb, yb)
        return {
            "stage": stage,
            "steps": steps,
            "stats": prof.stats(),
            "counters_per_step": {k: v / steps for k, v in counts.snapshot().items()},
            "timeline": [[r.name, r.kind, r.start_ms * 1e3, r.duration_ms * 1e3] for r in prof.records[:keep]],
        }


def matmul_gflops(repeats: int = 20) -> dict:
    """GFLOP/s of each matmul kernel (matmul_choice.MATMULS, as the backend launches it) and of
    cuBLAS (through PyTorch, FP32 and TF32) on the same shapes, in one run; and under
    ``user_path`` what a user's ``a @ b`` gets at stages 9 and 12 against cuBLAS (user_matmul)."""
    from . import torch_reference, user_matmul
    from .cuda import launch_core, matmul_choice, timing
    from .cuda.array import DeviceArray
    from .cuda.autotune import tuner
    from .cuda.backend import from_numpy

    rng = np.random.default_rng(0)
    rows = []
    for label, M, N, K in MATMUL_SIZES:
        a = from_numpy(rng.standard_normal((M, K), dtype=np.float32))
        b = from_numpy(rng.standard_normal((K, N), dtype=np.float32))
        c = DeviceArray.empty((M, N))
        g = launch_core.Gemm(M, N, K)
        row = {"label": label, "M": M, "N": N, "K": K, "gflops": {}, "skipped": {}}
        for name in MATMUL_STAGES:
            if name in SLOW_KERNELS and M * N * K > 1024**3:
                continue
            try:
                seconds = timing.launcher_seconds(functools.partial(matmul_choice.MATMULS[name], c, a, b, g), repeats)
            except ValueError as exc:  # the kernel cannot take this problem (or this GPU)
                row["skipped"][name] = str(exc)
                continue
            row["gflops"][name] = g.flops / 1e9 / seconds
        row["regtiled_variant"] = matmul_choice.regtiled_tile(c, a, b, g)
        for key, tf32 in (("cublas", False), ("cublas_tf32", True)):
            seconds = torch_reference.cublas_seconds(M, N, K, repeats, tf32)
            if seconds:
                row["gflops"][key] = g.flops / 1e9 / seconds
        rows.append(row)
    user_path = user_matmul.table()
    return {"rows": rows, "repeats": repeats, "user_path": user_path, "autotune": tuner.choices()}


def bandwidth_table(repeats: int = 10) -> dict:
    """GB/s of the bandwidth-bound kernels next to cuMemcpyDtoD's, measured in the same run:
    elementwise ops on 2^28 floats (scalar stage-8 kernels and stage 9's float4 ones),
    softmax over 8192 x 8192 (stage 8's three-pass kernel, stage 9's online one and the one that
    holds the row in registers)."""
    from .cuda import launchers, timing
    from .cuda.array import DeviceArray
    from .cuda.runtime import copy_dtod

    n = 1 << 28
    x, y, out = DeviceArray.empty((n,)), DeviceArray.empty((n,)), DeviceArray.empty((n,))
    launchers.elementwise("ew_fill", n, x, 1.0, n)
    launchers.elementwise("ew_fill", n, y, 2.0, n)
    rows, cols = 8192, 8192
    softmax_share = 2 * rows * cols / n  # arrays of n floats a softmax pass moves
    partial = functools.partial
    cases = {  # name: (arrays of n floats moved, a launcher taking timed=)
        "ew_add": (3, partial(launchers.elementwise, "ew_add", n, out, x, y, n, 1, n)),
        "ew_add_vec4": (3, partial(launchers.elementwise_vec4, "ew_add_vec4", n, out, x, y, n, 1, n)),
        "ew_relu": (2, partial(launchers.elementwise, "ew_relu", n, out, x, n)),
        "ew_relu_vec4": (2, partial(launchers.elementwise_vec4, "ew_relu_vec4", n, out, x, n)),
        **{
            name: (softmax_share, partial(launchers.softmax_rows, name, out, x, rows, cols))
            for name in ("softmax_rows_shuffle", "softmax_rows_online", "softmax_rows_block")
        },
    }
    copy_seconds = timing.seconds_per_call(lambda: copy_dtod(out.ptr, x.ptr, 4 * n), repeats)
    table = {"memcpy_dtod": {"bytes": 2 * 4 * n, "seconds": copy_seconds, "gb_per_s": 2 * 4 * n / copy_seconds / 1e9}}
    for name, (arrays, launch) in cases.items():
        seconds = timing.launcher_seconds(launch, repeats)
        table[name] = {"bytes": arrays * 4 * n, "seconds": seconds, "gb_per_s": arrays * 4 * n / seconds / 1e9}
    copy = table["memcpy_dtod"]["gb_per_s"]
    for row in table.values():
        row["share_of_copy"] = row["gb_per_s"] / copy
    return {"n": n, "softmax_shape": [rows, cols], "kernels": table}


def format_bandwidth(table: dict) -> str:
    lines = [f"{'kernel':>22}  {'GB/s':>8}  {'of copy':>8}"]
    for name, row in table["kernels"].items():
        lines.append(f"{name:>22}  {row['gb_per_s']:8.1f}  {row['share_of_copy']:8.1%}")
    return "\n".join(lines)


def ladder_notes(rows: list[dict]) -> list[str]:
    """Explain every stage that did not get faster per step than the one before."""
    known = {
        5: "the MNIST model multiplies only 2-D matrices, so batching the launch changes nothing here "
        "(the blog saw no gain either)",
        6: "at batch 64 the matmuls are tiny; shared-memory tiling pays off on larger shapes (see matmul table)",
        8: "warp shuffles shorten reductions by microseconds; the step is bound by launch overhead",
        9: "the step is bound by the host issuing it; stage 9 leaves the GPU's time per step unchanged, "
        "and the host's speed drifts between stages run one after another (minitorch_cuda/experiments/step_split.py)",
        12: "in a graph the step is bound by kernel time, and at the MNIST shapes the TF32 kernel alone "
        "is slower than the FP32 one it replaces (see the matmul table)",
    }
    notes = []
    for prev, row in zip(rows, rows[1:]):
        ratio = row["s_per_step"] / prev["s_per_step"]
        if ratio > 1.02:
            unknown = (
                "within run-to-run noise of launch-bound steps"
                if ratio <= 1.10
                else "slower by more than run-to-run noise, for a reason this benchmark does not show"
            )
            reason = known.get(row["stage"], unknown)
            if "s_per_step_min" in row and "s_per_step_max" in prev:  # interleaved rounds: ranges comparable
                apart = row["s_per_step_min"] > prev["s_per_step_max"]
                reason += "; their epoch ranges over the rounds " + ("do not overlap" if apart else "overlap")
            notes.append(f"stage {row['stage']} is {ratio:.3f}x the time per step of stage {prev['stage']}: {reason}")
    return notes


def _range(row: dict) -> str:
    return f"{row['min_s']:.4f}-{row['max_s']:.4f}" if "min_s" in row else "-"


def format_table(rows: list[dict], torch_row: dict | None, graph_row: dict | None = None) -> str:
    head = f"{'stage':>5}  {'batches/epoch':>13}  {'median s':>9}  {'min-max s':>15}  {'s/step':>9}  {'vs prev':>7}  "
    head += f"{'vs stage 0':>10}  "
    head += "what changed"
    lines = [head, "-" * len(head)]
    for i, row in enumerate(rows):
        prev = rows[i - 1]["s_per_step"] / row["s_per_step"] if i else float("nan")
        first = rows[0]["s_per_step"] / row["s_per_step"]
        partial = "" if row["batches_per_epoch"] > 100 else " (partial epoch)"
        lines.append(
            f"{row['stage']:>5}  {row['batches_per_epoch']:>13}  {row['median_s']:9.4f}  {_range(row):>15}  "
            f"{row['s_per_step']:9.2e}  {prev:7.2f}  {first:10.1f}  {row['description']}{partial}"
        )
    for peer, short, first_stage in ((torch_row, "eager", 0), (graph_row, "CUDA graph", GRAPHED_FROM)):
        if not peer:
            continue
        lines.append(
            f"{'torch':>5}  {peer['batches_per_epoch']:>13}  {peer['median_s']:9.4f}  "
            f"{_range(peer):>15}  {peer['s_per_step']:9.2e}  {'':7}  {'':10}  {peer['name']}"
        )
        for row in rows:
            if row["stage"] >= first_stage and row["batches_per_epoch"] == peer["batches_per_epoch"]:
                lines.append(
                    f"stage {row['stage']} / PyTorch {short} (full epoch median): "
                    f"{row['median_s'] / peer['median_s']:.3f}"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m minitorch_cuda.bench") -> int:
    parser = Parser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument(
        "--stages",
        type=stages.parse,
        default=list(range(stages.DEFAULT_STAGE + 1)),
        help=f"e.g. 0-8 or 6,8 (default 0-{stages.DEFAULT_STAGE}, the stages verified on a GPU)",
    )
    parser.add_argument(
        "--epochs",
        "--rounds",
        dest="epochs",
        type=int,
        default=5,
        help="rounds, each timing one epoch of every stage and PyTorch; per stage the median and spread "
        "are reported (default: 5)",
    )
    parser.add_argument("--warmup", type=int, default=10, help="batches in the warm-up call (default: 10)")
    parser.add_argument(
        "--hidden", type=hidden_sizes, default=train.Protocol.hidden,
        help="another model: its hidden layers' widths, e.g. 512,512,512 (default: the protocol's 256,128)",
    )  # fmt: skip
    parser.add_argument(
        "--activation", choices=("relu", "sigmoid"), default=train.Protocol.activation,
        help="the hidden layers' activation (default: relu)",
    )  # fmt: skip
    parser.add_argument(
        "--batch-size", type=int, default=train.Protocol.batch_size, help="rows a step (default: the protocol's 64)"
    )
    parser.add_argument(
        "--no-torch", action="store_true", help="skip the PyTorch peers (eager, CUDA graph) even where PyTorch imports"
    )
    parser.add_argument(
        "--no-eager", action="store_true", help="skip PyTorch eager (keep its CUDA graph, the peer of stages 11-13)"
    )
    parser.add_argument("--matmul", action="store_true", help="also time each matmul kernel against cuBLAS")
    parser.add_argument(
        "--user-matmul",
        action="store_true",
        help="only a user's a @ b at stages 9 and 12 against torch.matmul (cuBLAS FP32, TF32), shape by shape "
        "(--matmul records it beside the kernels)",
    )
    parser.add_argument("--profiles", action="store_true", help="also profile 20 steps of every stage")
    parser.add_argument("--json", help="write every result to this JSON file")
    parser.add_argument(
        "--only-kernels", action="store_true", help="only the matmul and bandwidth tables, no MNIST training"
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="write book/results/*.json (implies --matmul --profiles); a run past stage 8 writes "
        "bench_beyond.json and profiles_beyond.json, which chapters 15-19 read; with --only-kernels, "
        "matmul.json alone",
    )
    args = parser.parse_args(argv)
    protocol = dataclasses.replace(train.Protocol(), hidden=args.hidden, activation=args.activation,
                                   batch_size=args.batch_size)  # fmt: skip
    if args.record and protocol != train.Protocol():
        parser.error("--record stores the protocol's model only: leave out --hidden, --activation and --batch-size")
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, not {args.batch_size}")
    refuse_emulated(prog, TIMINGS + ("; --record would store them as GPU results" if args.record else ""))
    if not cuda_available():
        print(
            f"{prog}: error: the benchmark needs a CUDA GPU: {cuda_unavailable_reason()}; "
            "without one, train on the CPU instead: minitorch-cuda train --device cpu",
            file=sys.stderr,
        )
        return 2
    from tqdm.auto import tqdm

    from . import torch_reference
    from .cuda.runtime import device_properties

    command = "python -m minitorch_cuda.bench " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.user_matmul:
        return user_matmul_main(args, command, device_properties)
    if args.only_kernels:
        return kernels_main(args, command, device_properties)
    data = train.load_to("cuda")
    use_torch = not args.no_torch and torch_reference.available()
    peers = [TorchRun(data, args.warmup, protocol=protocol)] if use_torch and not args.no_eager else []
    if use_torch and max(args.stages) >= GRAPHED_FROM:  # their peer: PyTorch's step in a graph too
        peers.append(TorchRun(data, args.warmup, graphed=True, protocol=protocol))
    with tqdm(total=args.epochs * (len(args.stages) + len(peers)), desc="epochs", unit="epoch", file=sys.stderr) as bar:
        runs = [StageRun(stage, data, args.warmup, protocol=protocol) for stage in args.stages]
        measured = run_rounds(runs + peers, args.epochs, bar)
    rows, peer_rows = measured[: len(runs)], dict(zip((peer.graphed for peer in peers), measured[len(runs) :]))
    torch_row, graph_row = peer_rows.get(False), peer_rows.get(True)
    result = {
        "device": device_properties(),
        "protocol": dataclasses.asdict(protocol)
        | {"epochs": args.epochs, "rounds": args.epochs, "interleaved": ROUNDS_NOTE, "warmup_batches": args.warmup},
        "stages": rows,
        "torch": torch_row,
        "torch_graph": graph_row,
        "notes": ladder_notes(rows),
    }
    print(format_table(rows, torch_row, graph_row))
    for note in result["notes"]:
        print("note:", note)
    if args.matmul or args.record:
        result["matmul"] = matmul_gflops()
        print(format_matmul(result["matmul"]))
    if args.profiles or args.record:
        result["profiles"] = [profile_stage(s, data, protocol=protocol) for s in args.stages]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if args.record:
        from . import results

        bench_name, profiles_name = record_names(args.stages)
        results.save(
            bench_name,
            {k: result[k] for k in ("device", "protocol", "stages", "torch", "torch_graph", "notes")},
            command,
        )
        # every record names the GPU that made it (the book names its GPU from the records)
        results.save("matmul", {"device": result["device"], **result["matmul"]}, command)
        results.save(profiles_name, {"device": result["device"], "stages": result["profiles"]}, command)
    return 0


def hidden_sizes(text: str) -> tuple[int, ...]:
    """``--hidden``'s widths: comma-separated positive integers."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected widths such as 512,256 (positive integers), not {text!r}")
    return sizes


def record_names(stages: list[int]) -> tuple[str, str]:
    """The records a ladder run writes: the blog's ladder (chapters 1-14 read it) and the whole
    ladder (chapters 15-21) apart, so that re-measuring one never changes the numbers the other's
    prose discusses."""
    if max(stages) > BLOG_LAST_STAGE:
        return "bench_beyond", "profiles_beyond"
    return "bench_stages", "profiles"


def kernels_main(args, command: str, device_properties) -> int:
    result = {"device": device_properties(), "command": command}
    result["matmul"] = matmul_gflops()
    print(format_matmul(result["matmul"]))
    result["bandwidth"] = bandwidth_table()
    print(format_bandwidth(result["bandwidth"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if args.record:  # the matmul table alone, without re-running the ladder
        from . import results

        results.save("matmul", {"device": result["device"], **result["matmul"]}, command)
    return 0


def user_matmul_main(args, command: str, device_properties) -> int:
    """``--user-matmul``: user_matmul's table alone, printed shape by shape as it is measured."""
    from . import user_matmul

    result = {"device": device_properties(), "command": command}
    result["user_path"] = user_matmul.table(progress=lambda row: print(f"measured {row['label']}", file=sys.stderr))
    print(user_matmul.format_table(result["user_path"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0


def format_matmul(table: dict) -> str:
    names = list(dict.fromkeys(n for row in table["rows"] for n in row["gflops"]))
    lines = [f"{'GFLOP/s':>12}  " + "  ".join(f"{n:>17}" for n in names)]
    for row in table["rows"]:
        lines.append(f"{row['label']:>12}  " + "  ".join(f"{row['gflops'].get(n, float('nan')):17.1f}" for n in names))
    for label in ("1024^3", "4096^3"):
        big = next((r["gflops"] for r in table["rows"] if r["label"] == label), {})
        if "cublas" in big and "matmul_regtiled" in big:
            lines.append(f"{label}: regtiled / cuBLAS = {big['matmul_regtiled'] / big['cublas']:.1%}")
        for name in ("matmul_tf32", "matmul_tf32_async", "matmul_tf32_wgmma", "matmul_tf32_wgmma_tma"):
            if "cublas_tf32" in big and name in big:
                lines.append(f"{label}: {name} / cuBLAS TF32 = {big[name] / big['cublas_tf32']:.1%}")
    big = next(r for r in table["rows"] if r["label"] == "1024^3")["gflops"]
    lines.append(
        f"1024^3: tiled / batched = {big['matmul_tiled'] / big['matmul_batched']:.2f}x"
        + (f", tiled / cuBLAS = {big['matmul_tiled'] / big['cublas']:.1%}" if "cublas" in big else "")
    )
    if "user_path" in table:
        from . import user_matmul

        lines += ["", "a user's a @ b, our speed / cuBLAS's:", user_matmul.format_table(table["user_path"])]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
