"""Stage 13 on models wider than the protocol's (issue 41, chapter 21): stages 11, 12 and 13 against
PyTorch's whole-step CUDA graph, model by model, and stage 13's phases.

    python3 -m minitorch_cuda.experiments.wide_models               # the protocol's model and three wider ones
    python3 -m minitorch_cuda.experiments.wide_models --models 1 2  # only those (0: the protocol's)
    python3 -m minitorch_cuda.experiments.wide_models --record      # book/results/ch21_wide_models.json
    bash .ci/gpu_run.sh python3 -m minitorch_cuda.experiments.wide_models --json '$OUT/wide_models.json'

Each model is one benchmark run (``bench --stages 11-13 --no-eager`` with the model's --hidden,
--activation and --batch-size: interleaved rounds, PyTorch in the same process), 3 rounds, then
stage 13's phases as chapter 21 times them (PersistentStep.phase_times), both for the kernel the
trainer builds and for the one whose rows phase carries every layer after the first (``wide=False``).
It prints, per model, each stage's step over PyTorch's graphed step next to issue 41's targets: stage
13 at most 0.15 of it on the protocol's model and 0.3 on the wider ones, stage 12 no slower than stage
11. A missed target is reported, not an error.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from minitorch_cuda import bench, results, train
from minitorch_cuda.cli_parser import Parser
from minitorch_cuda.experiments import latency_floor
from minitorch_cuda.needs_gpu import refuse_emulated

# (hidden widths, activation, batch size): the protocol's first, then MLPs up to 512 wide, batch up to 128
MODELS = [
    ((256, 128), "relu", 64),
    ((512, 512, 512), "sigmoid", 128),  # the model
    ((512, 256), "relu", 128),
    ((256, 512, 256), "relu", 64),
]
TARGET_PROTOCOL, TARGET_WIDE = 0.15, 0.3  # stage 13's step over PyTorch's graphed step


def measure(hidden, activation, batch) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "bench.json")
        model = ["--hidden", ",".join(map(str, hidden)), "--activation", activation, "--batch-size", str(batch)]
        argv = ["--stages", "11-13", "--epochs", "3", "--no-eager", "--json", str(out), *model]
        started = time.monotonic()
        code = bench.main(argv)
        if code != 0:
            raise SystemExit(f"bench {' '.join(argv)} exited with {code}")
        result = json.loads(out.read_text())
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def phases(data, hidden, activation, batch) -> dict:
    """Stage 13's phase by phase, on the first batch of the training split: the kernel as the trainer
    builds it, and with every layer after the first in its rows phase (``wide=False``)."""
    protocol = train.Protocol(hidden=hidden, activation=activation, batch_size=batch)
    x, y = data.x_train[:batch], data.y_train[:batch]
    variants = {"default": {}, "rows phase from layer 2": {"wide": False}}
    return latency_floor.phase_times(protocol, x, y, steps=50, variants=variants)


def summary(result: dict, protocol: bool) -> dict:
    graph = result["torch_graph"]["s_per_step"]
    steps = {row["stage"]: row["s_per_step"] for row in result["stages"]}
    target = TARGET_PROTOCOL if protocol else TARGET_WIDE
    return {
        "us_per_step": {**{str(s): t * 1e6 for s, t in steps.items()}, "torch_graph": graph * 1e6},
        "over_torch_graph": {str(s): t / graph for s, t in steps.items()},
        "stage_13_target": target,
        "stage_13_met": steps[13] / graph <= target,
        "stage_12_over_11": steps[12] / steps[11],
        "stage_12_met": steps[12] <= steps[11],
        "kernels_per_step": {str(r["stage"]): r["counters_per_step"].get("launches") for r in result["stages"]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m minitorch_cuda.experiments.wide_models",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--models", type=int, nargs="*", choices=range(len(MODELS)), default=list(range(len(MODELS))),
                        help="which models, by number (0: the protocol's; default: all)")  # fmt: skip
    parser.add_argument("--record", action="store_true", help="write book/results/ch21_wide_models.json")
    parser.add_argument("--json", help="also write the record to this file, after each model")
    args = parser.parse_args(argv)
    refuse_emulated(parser.prog)
    record = {"models": []}
    data = train.load_to("cuda")  # the phases' batches, once (each bench run loads its own)
    for n in args.models:
        hidden, activation, batch = MODELS[n]
        result = measure(hidden, activation, batch)
        entry = {"model": n, "hidden": hidden, "activation": activation, "batch_size": batch,
                 "summary": summary(result, n == 0), "phases": phases(data, hidden, activation, batch),
                 "bench": result}  # fmt: skip
        record["models"].append(entry)
        record["device"] = result["device"]
        print(report(entry), flush=True)
        if args.json:  # after each model: a call cut short keeps the models measured
            Path(args.json).write_text(json.dumps(record, indent=1, default=str) + "\n")
    if args.record:
        print(results.save("ch21_wide_models", record, "python3 -m minitorch_cuda.experiments.wide_models --record"))
    return 0


def report(entry: dict) -> str:
    """A model's lines: each stage over PyTorch's graph against the targets, then stage 13's phases."""
    s, hidden = entry["summary"], entry["hidden"]
    lines = [
        f"model {entry['model']}: 784-{'-'.join(map(str, hidden))}-10 {entry['activation']}, batch "
        f"{entry['batch_size']}: "
        + ", ".join(f"stage {k} {v:.2f}" for k, v in s["over_torch_graph"].items())
        + f" of PyTorch's graph ({s['us_per_step']['torch_graph']:.1f} us a step); stage 13 target <= "
        f"{s['stage_13_target']}: {'met' if s['stage_13_met'] else 'MISSED'}; stage 12 / 11 = "
        f"{s['stage_12_over_11']:.2f}: {'met' if s['stage_12_met'] else 'MISSED'}"
    ]
    for variant, times in entry["phases"].items():
        lines.append(
            f"  stage 13 ({variant}, rows from layer {times['row_from']}): "
            + ", ".join(f"{p['phase']} {p['median_us']:.1f}" for p in times["phases"])
            + f" us; total {times['total']['median_us']:.1f} us"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
