"""On a GPU: issue 41's step table, stages 11, 12 and 13 against PyTorch's whole-step CUDA graph on
models wider than the protocol's.

    bash .ci/gpu_run.sh python3 .ci/wide_models.py            # the protocol's model and three wider ones
    bash .ci/gpu_run.sh python3 .ci/wide_models.py 1 2        # only the models numbered (0: the protocol's)

Each model is one ``python -m minitorch_cuda.bench --stages 11-13 --no-eager ...`` run (interleaved
rounds, PyTorch in the same process), 3 rounds, then stage 13's phases as chapter 21 times them
(PersistentStep.phase_times, the default kernel and the one whose rows phase carries every layer
after the first, ``wide=False``). Writes $OUT/wide_models.json (each run's bench result, the
phases, and a summary) and prints, per model, each stage's step time over PyTorch's graph next to
issue 41's targets: stage 13 at most 0.15 of PyTorch's on the protocol's model and 0.3 on the
wider ones, stage 12 no slower than stage 11. The exit status is 0 even where a target is missed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minitorch_cuda import bench, train  # noqa: E402
from minitorch_cuda.experiments import latency_floor  # noqa: E402

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


def phases(hidden, activation, batch) -> dict:
    """Stage 13's phase by phase, on the first batch of the training split: the kernel as the trainer
    builds it, and with every layer after the first in its rows phase (``wide=False``)."""
    protocol = train.Protocol(hidden=hidden, activation=activation, batch_size=batch)
    data = train.load_to("cuda")
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


def main(picked: list[str]) -> int:
    numbers = [int(p) for p in picked] if picked else list(range(len(MODELS)))
    if any(n not in range(len(MODELS)) for n in numbers):
        print(f"models are numbered 0-{len(MODELS) - 1}, not {picked}", file=sys.stderr)
        return 2
    record = {"command": "python3 .ci/wide_models.py " + " ".join(picked), "models": []}
    for n in numbers:
        hidden, activation, batch = MODELS[n]
        result = measure(hidden, activation, batch)
        entry = {"model": n, "hidden": hidden, "activation": activation, "batch_size": batch,
                 "summary": summary(result, n == 0), "phases": phases(hidden, activation, batch),
                 "bench": result}  # fmt: skip
        record["models"].append(entry)
        record["device"] = result["device"]
        s = entry["summary"]
        print(f"model {n}: 784-{'-'.join(map(str, hidden))}-10 {activation}, batch {batch}: "
              + ", ".join(f"stage {k} {v:.2f}" for k, v in s["over_torch_graph"].items())
              + f" of PyTorch's graph ({s['us_per_step']['torch_graph']:.1f} us a step); "
              + f"stage 13 target <= {s['stage_13_target']}: {'met' if s['stage_13_met'] else 'MISSED'}; "
              + f"stage 12 / 11 = {s['stage_12_over_11']:.2f}: {'met' if s['stage_12_met'] else 'MISSED'}",
              flush=True)  # fmt: skip
        for variant, times in entry["phases"].items():
            print(f"  stage 13 ({variant}, rows from layer {times['row_from']}): "
                  + ", ".join(f"{p['phase']} {p['median_us']:.1f}" for p in times["phases"])
                  + f" us; total {times['total']['median_us']:.1f} us", flush=True)  # fmt: skip
        out = Path(os.environ.get("OUT", "."), "wide_models.json")
        out.write_text(json.dumps(record, indent=1, default=str) + "\n")  # after each model: a timeout keeps the rest
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
