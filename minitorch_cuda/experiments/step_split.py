"""Where the time of an MNIST step goes at stages 8 and 9 (chapter 16). Epochs of stage 8, of
stage 9 and of stage 9 with one of its changes switched off, in interleaved rounds; each step
is split at its one read-back into the host issuing the step (submit) and the host waiting
for the GPU (wait); then 20 steps are queued behind a spinning kernel to time the GPU alone.
    bash .ci/gpu_run.sh bash .ci/gpu_check.sh steps    (records book/results/step_split.json)
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from minitorch_cuda import results, stages, train
from minitorch_cuda.cuda import timing
from minitorch_cuda.cuda.autotune import tuner
from minitorch_cuda.cuda.runtime import device_properties
from minitorch_cuda.needs_gpu import refuse_emulated

VARIANTS = {  # name: (stage, steps switched off, autotune on)
    "stage 8": (8, set(), True),
    "stage 9": (9, set(), True),
    "stage 9, tiled matmul": (9, {"regtiled_matmul"}, True),
    "stage 9, scalar elementwise": (9, {"vectorized_kernels"}, True),
    "stage 9, heuristic tiles": (9, set(), False),
}


def measure(data, stage: int, without: set[str], autotune: bool, epochs: int) -> dict:
    tuner.clear()
    tuner.enabled = autotune
    with stages.use_stage(stage, without=without):
        trainer = train.Trainer(train.Protocol(), "cuda")
        trainer.epoch(data.x_train, data.y_train, max_batches=5)
        batch = trainer.protocol.batch_size
        steps = -(-len(data.x_train) // batch)
        submit, wait, wall = [], [], []
        for _ in range(epochs):  # Trainer.epoch, with the step split at its one read-back
            order = trainer.rng.permutation(len(data.x_train))
            x, y = data.x_train[order], data.y_train[order]
            s = w = 0.0
            start = time.perf_counter()
            for i in range(0, len(x), batch):
                t0 = time.perf_counter()
                loss = trainer.device_step(x[i : i + batch], y[i : i + batch])
                t1 = time.perf_counter()
                loss.item()
                s, w = s + t1 - t0, w + time.perf_counter() - t1
            wall.append(time.perf_counter() - start)
            submit.append(s)
            wait.append(w)
        gpu_ms, queued_ms = gpu_only_ms_per_step(trainer, x, y, batch)
    return {
        "ms_per_step": 1e3 * float(np.median(wall)) / steps,
        "gpu_ms_per_step": gpu_ms,  # the kernels alone, back to back
        "queued_ms": queued_ms,  # how long issuing them took; must be shorter than the spin
        "submit_ms_per_step": 1e3 * float(np.median(submit)) / steps,  # the host issuing the step
        "wait_ms_per_step": 1e3 * float(np.median(wait)) / steps,  # the host waiting for the loss
        "choices": {k: v["choice"] for k, v in tuner.choices().items()},
    }


SPIN = """
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def gpu_only_ms_per_step(trainer, x, y, batch: int, steps: int = 20, spin_cycles: int = 400_000_000):
    """The GPU's own time for ``steps`` steps: a spinning kernel holds the GPU while the host
    queues the steps behind it, so between the two events the kernels run back to back."""
    from pycuda.compiler import SourceModule

    spin = SourceModule(SPIN, no_extern_c=True).get_function("spin")
    queued = []

    def queue_steps() -> None:
        start = time.perf_counter()
        for i in range(0, steps * batch, batch):
            trainer.device_step(x[i : i + batch], y[i : i + batch])
        queued.append(time.perf_counter() - start)

    spin(np.int64(spin_cycles), block=(1, 1, 1), grid=(1, 1))
    return timing.elapsed_ms(queue_steps) / steps, 1e3 * queued[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    refuse_emulated("python -m minitorch_cuda.experiments.step_split")
    data = train.load_to("cuda")
    out: dict[str, list] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):  # interleaved, so drift in the host's speed hits every variant
        for name, variant in VARIANTS.items():
            out[name].append(measure(data, *variant, epochs=args.epochs))
            r = out[name][-1]
            print(
                f"{name:30s} {r['ms_per_step']:.3f} ms/step: submit {r['submit_ms_per_step']:.3f}, "
                f"wait {r['wait_ms_per_step']:.3f}; GPU alone {r['gpu_ms_per_step']:.3f} "
                f"(queued in {r['queued_ms']:.1f} ms)",
                flush=True,
            )
    command = "python3 -m minitorch_cuda.experiments.step_split " + " ".join(sys.argv[1:])
    print(results.save("step_split", {"device": device_properties(), "variants": out}, command.strip()))


if __name__ == "__main__":
    main()
