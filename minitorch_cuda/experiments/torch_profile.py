"""PyTorch's own profile of the protocol's step on the GPU (chapter 5 quotes it): how many kernels
a step launches, their GPU time, and the step's wall time, eagerly and with the whole step in one
CUDA graph (torch_reference's two peers), from torch.profiler's CUDA activity (CUPTI).
    python -m minitorch_cuda.experiments.torch_profile    (records book/results/torch_profile.json)
    bash .ci/gpu_run.sh bash .ci/gpu_check.sh torch
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

from minitorch_cuda import results, train
from minitorch_cuda.needs_gpu import refuse_emulated

COPIES = ("Memcpy", "Memset")  # CUPTI's names for copies and fills: not kernels


def summarize(events, steps: int) -> dict:
    """Per step: kernels, copies and fills, and the kernels' GPU time; the kernels by total time.
    ``events`` are the profile's device-side events, each with ``name`` and ``elapsed_us``."""
    kernels = defaultdict(list)
    copies = 0
    for event in events:
        if event.name.startswith(COPIES):
            copies += 1
        else:
            kernels[event.name].append(event.elapsed_us)
    rows = sorted(
        ({"name": name, "per_step": len(times) / steps, "avg_us": sum(times) / len(times), "total_us": sum(times)}
         for name, times in kernels.items()),
        key=lambda r: -r["total_us"],
    )  # fmt: skip
    return {
        "steps": steps,
        "kernels_per_step": sum(len(t) for t in kernels.values()) / steps,
        "copies_per_step": copies / steps,
        "kernel_us_per_step": sum(r["total_us"] for r in rows) / steps,
        "kernels": rows,
    }


class _DeviceEvent:
    def __init__(self, event):
        self.name, self.elapsed_us = event.name, event.time_range.elapsed_us()


def profile(trainer_cls, data, steps: int, warmup: int) -> dict:
    """One peer's profile over ``steps`` steps after ``warmup``, beside an unprofiled epoch's wall
    time for the same number of steps (the profiler's own overhead is in the profiled one)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    trainer = trainer_cls(train.Protocol(), data)
    trainer.epoch(max_batches=warmup)
    torch.cuda.synchronize()
    start = time.perf_counter()
    trainer.epoch(max_batches=steps)
    wall = time.perf_counter() - start
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        trainer.epoch(max_batches=steps)
        torch.cuda.synchronize()
    device = [_DeviceEvent(e) for e in prof.events() if e.device_type == DeviceType.CUDA]
    return {"wall_us_per_step": 1e6 * wall / steps, **summarize(device, steps)}


def main(argv=None) -> int:
    prog = "python -m minitorch_cuda.experiments.torch_profile"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="profiled steps per peer (default: 100)")
    parser.add_argument("--warmup", type=int, default=20, help="steps before them (default: 20)")
    args = parser.parse_args(argv)
    refuse_emulated(prog, "PyTorch's CUDA profile would come from no GPU")
    from minitorch_cuda import torch_reference

    if not torch_reference.available():
        print("PyTorch with CUDA is not available here: nothing to profile", file=sys.stderr)
        return 2
    import torch

    from minitorch_cuda.cuda.runtime import device_properties

    data = train.load_to("cuda")
    record = {
        "device": device_properties(),
        "torch": torch.__version__,
        "protocol": vars(train.Protocol()),
        "eager": profile(torch_reference.TorchTrainer, data, args.steps, args.warmup),
        "graph": profile(torch_reference.TorchGraphTrainer, data, args.steps, args.warmup),
    }
    command = prog + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    results.save("torch_profile", record, command)
    for peer in ("eager", "graph"):
        r = record[peer]
        print(
            f"PyTorch {peer}: {r['kernels_per_step']:.1f} kernels and {r['copies_per_step']:.1f} copies a step, "
            f"{r['kernel_us_per_step']:.1f} us of kernel time; {r['wall_us_per_step']:.1f} us a step unprofiled"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
