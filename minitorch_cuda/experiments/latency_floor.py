"""The training step at its latency floor (chapter 21): what a step costs before any arithmetic,
and the step of stages 10, 11 and 13 beside PyTorch's, all in one run on the GPU at hand.

    python3 -m minitorch_cuda.experiments.latency_floor      (records book/results/ch21_floor.json)
    bash .ci/gpu_run.sh bash .ci/gpu_check.sh floor

(a) graph: a CUDA graph of K empty kernels (floor.cu), replayed, then the 4-byte loss
    read-back that the protocol makes every step, for each K in GRAPH_KERNELS; microseconds
    per replay on the host's clock, as a training step is timed.
(a') report: a CUDA graph of one kernel that writes a loss into the host's memory itself
    (floor_report, cuda/step_report.py), replayed, the host polling for it: stage 13's read-back.
(b) launch: one plain launch of the empty kernel, then the read-back.
(c) barrier: floor.cu's floor_barriers, one block per multiprocessor (and one block alone)
    crossing grid_barrier B times; microseconds per barrier from the difference of two B, so
    that the launch and its end drop out.
(d) steps: stages 10, 11 and 13, PyTorch eager and PyTorch's step in one CUDA graph, full
    epochs in interleaved rounds (bench.run_rounds), and one profiled step of stages 11 and 13
    (each kernel's event time) for the chapter's timeline.
(e) torch.compile(mode="reduce-overhead") of the whole step (``whole_step``: a capturable
    RmsProp, nothing in it waiting for the host) on the same protocol, where it compiles here;
    where not, the reason is recorded instead.
(f) phases: stage 13's kernel built with PS_PHASE_CLOCK, each phase's microseconds between grid
    barriers (%globaltimer, block 0), and each step of row 0 in the rows phase (in its block),
    over PHASE_STEPS steps on one batch of the protocol, and block 0's SM clock over the kernel:
    as stage 13 runs it, without the first forward's split along k (persistent_step.forward_splits)
    and without the later layers' weights staged in shared memory (PHASE_VARIANTS).
Every launch goes through cuda/launchers.py and every graph through cuda/graphs.py, as the
framework's own. It took 42 s on an H100 (6 December), most of it the epochs, compiling the
kernels and torch.compile.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from minitorch_cuda import bench, train
from minitorch_cuda.needs_gpu import refuse_emulated
from minitorch_cuda.torch_reference import TorchTrainer

GRAPH_KERNELS = (1, 6, 19, 25, 41)  # 19: a stage 10/11 step's kernels; 41: stage 8's; 6, 25: the issue's
STAGES = (10, 11, 13)
TIMELINE_STAGES = (11, 13)
BARRIER_COUNTS = (200, 2200)  # two counts: the difference is barriers alone
PHASE_STEPS = 200
# (f)'s variants of stage 13's kernel: PersistentStep's options for each
PHASE_VARIANTS = {"split": {}, "unsplit": {"split": False}, "unstaged": {"stage": False}}


def spread_us(seconds: list[float]) -> dict:
    """Median, quartiles and extremes of per-call times, in microseconds."""
    q1, median, q3 = (float(q) * 1e6 for q in np.percentile(seconds, [25, 50, 75]))
    return {"median_us": median, "q1_us": q1, "q3_us": q3, "min_us": min(seconds) * 1e6,
            "max_us": max(seconds) * 1e6, "samples": len(seconds)}  # fmt: skip


def host_timed(call, repeats: int, warmup: int = 50) -> dict:
    """Each call timed alone on the host's clock (it ends with a read-back, so the GPU is done)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return spread_us(times)


def read_back(loss, host: np.ndarray):
    """The protocol's per-step read-back: 4 bytes, which waits for everything queued before."""
    from minitorch_cuda.cuda.runtime import copy_dtoh

    return lambda: copy_dtoh(host, loss.ptr)


def graph_floor(kernels: int, replays: int) -> dict:
    """(a) K empty kernels captured in one graph; per replay, the launch and the read-back."""
    from minitorch_cuda.cuda import graphs, launchers
    from minitorch_cuda.cuda.array import DeviceArray

    loss, host = DeviceArray.empty(()), np.empty(1, np.float32)
    launchers.floor("floor_empty")  # compiled and loaded outside the capture, as GraphedStep's eager step does
    graph = graphs.Graph()
    with graph.capture():
        for _ in range(kernels):
            launchers.floor("floor_empty")
    read = read_back(loss, host)

    def replay():
        graph.launch()
        read()

    return {"kernels": kernels, **host_timed(replay, replays)}


def report_floor(replays: int) -> dict:
    """(a') one kernel in a graph that hands a loss to the host through a StepReport (stage 13's
    read-back, with no copy); per replay, the arming, the launch and the wait for the report."""
    from minitorch_cuda.cuda import graphs, launchers
    from minitorch_cuda.cuda.step_report import StepReport

    report = StepReport()
    launchers.floor("floor_report", report.ptr)  # compiled and loaded outside the capture
    graph = graphs.Graph()
    with graph.capture():
        launchers.floor("floor_report", report.ptr)

    def replay():
        report.arm()
        graph.launch()
        report.wait()

    return host_timed(replay, replays)


def launch_floor(repeats: int) -> dict:
    """(b) one empty kernel launched from Python through the framework, then the read-back."""
    from minitorch_cuda.cuda import launchers
    from minitorch_cuda.cuda.array import DeviceArray

    loss, host = DeviceArray.empty(()), np.empty(1, np.float32)
    read = read_back(loss, host)

    def step():
        launchers.floor("floor_empty")
        read()

    return host_timed(step, repeats)


def barrier_floor(blocks: int, repeats: int) -> dict:
    """(c) microseconds per grid barrier on ``blocks`` blocks: each sample times a launch of
    each count in BARRIER_COUNTS (GPU events) and divides their difference by the counts'."""
    from minitorch_cuda.cuda import launchers
    from minitorch_cuda.cuda.kernel_table import PERSISTENT
    from minitorch_cuda.cuda.ops_tensor import full

    barrier = full((2,), 0.0)  # GridBarrier {count, generation}: zero bits, once
    few, many = BARRIER_COUNTS
    launchers.floor("floor_barriers", barrier, few, blocks=blocks, timed=1)  # warm-up: module load
    per_barrier, launch_ms = [], {few: [], many: []}
    for _ in range(repeats):
        for count in (few, many):
            launch_ms[count].append(launchers.floor("floor_barriers", barrier, count, blocks=blocks, timed=1))
        per_barrier.append((launch_ms[many][-1] - launch_ms[few][-1]) / 1e3 / (many - few))
    return {
        "blocks": blocks,
        "threads": PERSISTENT["THREADS"],
        "counts": list(BARRIER_COUNTS),
        "launch_ms_median": {str(c): float(np.median(t)) for c, t in launch_ms.items()},
        **spread_us(per_barrier),
    }


def one_step(entry: dict) -> list[list]:
    """The events of one profiled step (name, kind, event microseconds), in the order queued:
    those after the first read-back up to and including the second."""
    events = entry["timeline"]
    reads = [i for i, e in enumerate(events) if e[0] == "[CUDA memcpy DTOH]"]
    return [[name, kind, duration] for name, kind, _, duration in events[reads[0] + 1 : reads[1] + 1]]


# How (e) compiles the step: recorded with its row, so that the chapter describes the run it shows.
COMPILED_HARNESS = (
    "the whole step (forward, loss, backward, clipping, a capturable RmsProp and zeroing the gradients) "
    'in one function under torch.compile(mode="reduce-overhead"), with nothing in it that waits for the '
    "host; the loss read back once a step, after it, as every peer does"
)


def whole_step(torch, net, optim, max_norm: float):
    """The protocol's step as one function for torch.compile: forward, loss, backward, clipping,
    RmsProp, and the gradients zeroed. Nothing in it reads a value back to the host (the optimizer
    is capturable: its step count stays on the device; clipping scales by a clamped factor on the
    device), so ``mode="reduce-overhead"`` replays all of it as CUDA graphs; Dynamo splits it at
    ``backward``, and AOTAutograd's compiled backward is graphed too. Returns the loss, on the device."""

    def step(xb, yb):
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm, foreach=True)
        optim.step()
        optim.zero_grad(set_to_none=True)
        return loss.detach()

    return step


class CompiledTrainer(TorchTrainer):
    """The protocol's step under torch.compile(mode="reduce-overhead"): ``whole_step`` compiled
    once per batch shape (64 rows and the epoch's last), replayed as CUDA graphs; the host launches
    the replays and reads the loss back once a step, as the protocol asks of every peer."""

    def __init__(self, protocol, data, seed: int = 0):
        super().__init__(protocol, data, seed)
        self.optim = self.rmsprop(capturable=True)
        step = whole_step(self.torch, self.net, self.optim, protocol.max_norm)
        self.train_step = self.torch.compile(step, mode="reduce-overhead", dynamic=False)

    def step(self, xb, yb) -> float:
        self.torch.compiler.cudagraph_mark_step_begin()  # a new iteration: the last one's outputs may be reused
        return self.train_step(xb, yb).item()  # the protocol's read-back, the step's one synchronization

    def epoch(self, max_batches: int | None = None) -> float:
        batch = self.protocol.batch_size
        order = self.torch.randperm(len(self.x), device="cuda")
        x, y = self.x[order], self.y[order]
        losses = []
        for start in range(0, len(x), batch):
            losses.append(self.step(x[start : start + batch], y[start : start + batch]))
            if len(losses) == max_batches:
                break
        return sum(losses) / len(losses)


class CompiledRun(bench.TorchRun):
    """(e) CompiledTrainer with bench.TorchRun's interface. ``start`` compiles both batch shapes
    (64 rows and the epoch's last, shorter one) before any epoch is timed; where compiling
    fails here, the run is skipped and its row says why."""

    skipped: str | None = None

    def label(self) -> str:
        return "torch.compile"

    def start(self) -> None:
        try:
            self.trainer = CompiledTrainer(train.Protocol(), self.data)
            batch = self.trainer.protocol.batch_size
            last = len(self.trainer.x) % batch or batch
            for rows in (batch, last):
                for _ in range(3):  # reduce-overhead records its graph on a later call than the first
                    self.trainer.step(self.trainer.x[:rows], self.trainer.y[:rows])
            self.trainer.epoch(self.warmup)
        except Exception as exc:  # any failure to compile or run it here is the result to record
            self.skipped = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def epoch(self) -> None:
        if self.skipped is None:
            super().epoch()

    def row(self) -> dict:
        name = 'torch.compile(mode="reduce-overhead")'
        if self.skipped is not None:
            return {"name": name, "skipped": self.skipped}
        return super().row() | {"name": f"PyTorch {self.trainer.torch.__version__} {name}", "harness": COMPILED_HARNESS}


def steps(data, rounds: int, warmup: int, use_torch: bool, progress) -> dict:
    """(d) and (e): every step in interleaved rounds, then one profiled step per timeline stage."""
    peers = [bench.TorchRun(data, warmup), bench.TorchRun(data, warmup, graphed=True), CompiledRun(data, warmup)]
    runs = [bench.StageRun(s, data, warmup) for s in STAGES] + (peers if use_torch else [])
    rows = bench.run_rounds(runs, rounds, progress)
    torch_rows = dict(zip(("eager", "graph", "compile"), rows[len(STAGES) :]))
    return {
        "stages": rows[: len(STAGES)],
        "torch": torch_rows.get("eager"),
        "torch_graph": torch_rows.get("graph"),
        "torch_compile": torch_rows.get("compile"),
        "timelines": {str(s): one_step(bench.profile_stage(s, data, steps=5)) for s in TIMELINE_STAGES},
    }


def phase_times(protocol: train.Protocol, x, y, steps: int, warmup: int = 5, variants: dict | None = None) -> dict:
    """(f) stage 13's phases on the batch (x, y) (tensors of ``protocol.batch_size`` rows or fewer),
    for each of ``variants`` (name: persistent_step's options; PHASE_VARIANTS) on a fresh model of
    the protocol: PersistentStep.phase_times after
    ``warmup`` clocked steps (module load, caches); %globaltimer ticks are coarse on some GPUs, so
    means are kept beside the medians."""
    from minitorch_cuda import nn, optim, stages
    from minitorch_cuda.persistent_model import persistent_step

    result = {}
    for name, options in (variants or PHASE_VARIANTS).items():
        with stages.use_stage(13):
            net = train.make_net(protocol, "cuda")
            opt = optim.RmsProp(net.parameters(), protocol.lr, protocol.decay)
            step = persistent_step(net, nn.CrossEntropyWithSoftmax(), opt, protocol.max_norm, protocol.batch_size,
                                  **options)  # fmt: skip
            step.phase_times(x.data, y.data, warmup)
            result[name] = step.phase_times(x.data, y.data, steps)
    return result


def measure(
    replays: int, rounds: int, warmup: int, barrier_repeats: int, progress, phase_steps: int = PHASE_STEPS
) -> dict:
    from minitorch_cuda import torch_reference
    from minitorch_cuda.cuda.runtime import device_properties, multiprocessors

    result = {
        "device": device_properties(),
        "graph": [graph_floor(k, replays) for k in GRAPH_KERNELS],
        "report": report_floor(replays),
        "launch": launch_floor(replays),
        "barrier": [barrier_floor(b, barrier_repeats) for b in (multiprocessors(), 1)],
    }
    use_torch = torch_reference.available()
    data = train.load_to("cuda")
    result |= steps(data, rounds, warmup, use_torch, progress)
    protocol = train.Protocol()
    batch = slice(0, protocol.batch_size)
    result["phases"] = phase_times(protocol, data.x_train[batch], data.y_train[batch], phase_steps)
    result["torch_missing"] = None if use_torch else "PyTorch with CUDA is not installed here"
    result["protocol"] = vars(train.Protocol()) | {
        "rounds": rounds, "interleaved": bench.ROUNDS_NOTE, "warmup_batches": warmup, "replays": replays,
    }  # fmt: skip
    return result


def summary(result: dict) -> str:
    lines = [f"{'graph of K empty kernels + read-back':40s} median us (q1-q3)"]
    for r in result["graph"]:
        lines.append(f"{'  K = ' + str(r['kernels']):40s} {r['median_us']:8.1f} ({r['q1_us']:.1f}-{r['q3_us']:.1f})")
    report = result["report"]
    lines.append(f"{'graph of 1 kernel + its report (no copy)':40s} {report['median_us']:8.1f}")
    launch = result["launch"]
    lines.append(f"{'one plain launch + read-back':40s} {launch['median_us']:8.1f}")
    for b in result["barrier"]:
        lines.append(f"{'grid barrier, ' + str(b['blocks']) + ' blocks':40s} {b['median_us']:8.2f} per barrier")
    for name, run in result.get("phases", {}).items():
        phases = ", ".join(f"{r['phase']} {r['median_us']:.1f}" for r in run["phases"])
        lines.append(f"{'stage 13 phases, ' + name:40s} {run['total']['median_us']:8.1f} us: {phases}")
        steps = ", ".join(f"{r['step']} {r['median_us']:.1f}" for r in run.get("row_steps", []))
        lines.append(f"{'  row 0, step by step':40s} {steps}")
        if "sm_clock_mhz" in run:
            lines.append(f"{'  block 0, SM clock':40s} {run['sm_clock_mhz']['median']:8.0f} MHz")
    peers = [result[k] for k in ("torch", "torch_graph", "torch_compile") if result.get(k)]
    for row in result["stages"] + peers:
        name = row.get("name") or f"stage {row['stage']}"
        if "skipped" in row:
            lines.append(f"{name:40s} skipped: {row['skipped']}")
        else:
            lines.append(f"{name:40s} {row['s_per_step'] * 1e6:8.1f} us per step, epoch {row['median_s']:.4f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    prog = "python3 -m minitorch_cuda.experiments.latency_floor"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--replays", type=int, default=2000, help="timed replays per graph (default: 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of full epochs (default: 5)")
    parser.add_argument("--warmup", type=int, default=10, help="batches in each run's warm-up (default: 10)")
    parser.add_argument("--barrier-repeats", type=int, default=20, help="samples per barrier grid (default: 20)")
    parser.add_argument("--phase-steps", type=int, default=PHASE_STEPS,
                        help=f"clocked steps of stage 13 per variant (default: {PHASE_STEPS})")  # fmt: skip
    args = parser.parse_args(argv)
    refuse_emulated(prog)
    from tqdm.auto import tqdm

    from minitorch_cuda import results, torch_reference

    runs = len(STAGES) + (3 if torch_reference.available() else 0)  # measure() asks the same
    with tqdm(total=args.rounds * runs, desc="epochs", unit="epoch", file=sys.stderr) as progress:
        result = measure(args.replays, args.rounds, args.warmup, args.barrier_repeats, progress, args.phase_steps)
    print(summary(result))
    command = " ".join([prog, *(argv if argv is not None else sys.argv[1:])])
    print(results.save("ch21_floor", result, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
