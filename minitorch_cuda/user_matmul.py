"""What a user's ``a @ b`` gets: the framework's product at a stage, host path included, against
``torch.matmul`` (cuBLAS) in FP32 and TF32, measured the same way in the same run.

    python -m minitorch_cuda.bench --user-matmul --json out.json    # this table alone
    python -m minitorch_cuda.bench --matmul                          # beside each kernel alone

Every system is the call a user's loop makes, ``c = a @ b`` on matrices already on the GPU
(Tensors in, a Tensor out; for cuBLAS, torch tensors): ours at stage 9 (FP32) and stage 12 (TF32),
the route and its tuning included. A sample synchronizes the device, then times ``calls``
back-to-back calls by the wall clock (until the device has finished them) and by two events
around them (cuda/timing.py); ``calls`` is sized to about SAMPLE_S per sample. The systems take
turns in ROUNDS rounds, the order rotated by one each round (as bench.run_rounds takes epochs),
and a system's time is its median over the rounds. A ratio is cuBLAS's time over ours: our
speed as a share of cuBLAS's, which TARGETS holds to issue 41's bounds.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import numpy as np

from . import profiler, stages

# (label, M, N, K); "M x K x N" labels as issue 41 writes them.
SQUARE = [(f"{n}^3", n, n, n) for n in (1024, 2048, 4096, 8192, 1000, 3000)]
SKINNY = [("4096x4096x128", 4096, 128, 4096), ("128x4096x4096", 128, 4096, 4096)]  # N, then M of 128
MNIST = [  # the protocol's products at batch 64 (bench.MATMUL_SIZES)
    ("MNIST fwd 1", 64, 256, 784),
    ("MNIST fwd 2", 64, 128, 256),
    ("MNIST fwd 3", 64, 10, 128),
    ("MNIST dW1", 784, 256, 64),
]
SIZES = [(*size, "square") for size in SQUARE] + [(*size, "skinny") for size in SKINNY]
SIZES += [(*size, "mnist") for size in MNIST]

OURS = {"stage 9": 9, "stage 12": 12}
PEER = {"stage 9": "cuBLAS FP32", "stage 12": "cuBLAS TF32"}
SYSTEMS = ("stage 9", "cuBLAS FP32", "stage 12", "cuBLAS TF32")
TARGETS = {  # issue 41: our speed over cuBLAS's, at least
    ("stage 9", "square"): 0.95,
    ("stage 9", "skinny"): 0.85,
    ("stage 12", "square"): 0.85,
    ("stage 12", "skinny"): 0.75,
}
ROUNDS = 5
SAMPLE_S = 0.02  # seconds of calls per sample: host gaps and the timer's own cost stay small
MIN_CALLS, MAX_CALLS = 3, 2000
METHOD = (
    "c = a @ b on CUDA tensors in back-to-back calls; per sample a device sync, then `calls` calls timed by the "
    "wall clock until the device finished them and by events around them; systems in interleaved rounds, the "
    "order rotated each round; per system the median over the rounds; ratio = cuBLAS's time / ours"
)


def ratio_name(ours: str) -> str:
    return f"{ours} / {PEER[ours]}"


class Sampler:
    """One system's ``call`` (a user's ``c = a @ b``), its samples and its calls per sample."""

    def __init__(self, call, sync, setup=None):
        self.call, self.sync, self.setup = call, sync, setup
        self.wall, self.events, self.calls = [], [], MIN_CALLS

    def warm_up(self) -> None:
        """The first call (compiles, tunes), then calls sized to about SAMPLE_S from a timed few."""
        with self.setup():
            self.call()
            self.sync()
            start = time.perf_counter()
            for _ in range(MIN_CALLS):
                self.call()
            self.sync()
        each = (time.perf_counter() - start) / MIN_CALLS
        self.calls = int(min(MAX_CALLS, max(MIN_CALLS, SAMPLE_S / max(each, 1e-9))))

    def sample(self) -> None:
        from .cuda import timing

        call, calls = self.call, self.calls

        def back_to_back() -> None:
            for _ in range(calls):
                call()

        with self.setup():
            self.sync()
            start = time.perf_counter()
            ms = timing.elapsed_ms(back_to_back)  # returns once the device reached the stop event
            self.wall.append((time.perf_counter() - start) / calls)
        self.events.append(ms / 1e3 / calls)


def interleave(samplers: dict[str, Sampler], rounds: int) -> None:
    """Every sampler warmed up, then ``rounds`` rounds of one sample each, the order rotated by one
    each round."""
    for sampler in samplers.values():
        sampler.warm_up()
    names = list(samplers)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samplers[name].sample()


def _ours(stage: int, a, b):
    """Stage ``stage``'s ``a @ b``, a Sampler's call and setup."""

    def call():
        return a @ b

    return call, lambda: stages.use_stage(stage)


def _cublas(torch, a, b, tf32: bool):
    """``torch.matmul(a, b)`` in TF32 or FP32, a Sampler's call and setup."""

    @contextlib.contextmanager
    def precision():
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False

    return lambda: torch.matmul(a, b), precision


def _launched(stage: int, a, b) -> list[str]:
    """The kernels one ``a @ b`` at ``stage`` launches once its route is decided."""
    with stages.use_stage(stage):
        a @ b
        with profiler.profile() as prof:
            a @ b
    return [record.name for record in prof.records]


def _relative_error(stage: int, a, b, reference: np.ndarray) -> float:
    with stages.use_stage(stage):
        ours = (a @ b).numpy().astype(np.float64)
    return float(np.linalg.norm(ours - reference) / np.linalg.norm(reference))


def row(label: str, M: int, N: int, K: int, kind: str, rounds: int = ROUNDS, torch=None) -> dict:
    """One shape: every system's seconds per call (wall clock and events, median over the rounds),
    the ratios, the kernels each stage launches per call, and each stage's relative error
    against cuBLAS FP32 (or float64 without PyTorch)."""
    import minitorch_cuda as mt

    from . import synchronize

    rng = np.random.default_rng(M * 7 + N * 3 + K)
    a_host, b_host = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    a, b = mt.tensor(a_host, "cuda"), mt.tensor(b_host, "cuda")
    samplers, skipped = {}, {}
    for name, stage in OURS.items():
        call, setup = _ours(stage, a, b)
        try:
            with setup():
                call()  # a stage this GPU cannot run says so here (stage 12 on a T4)
        except ValueError as exc:
            skipped[name] = str(exc)
            continue
        samplers[name] = Sampler(call, synchronize, setup)
    if torch is not None:
        ta, tb = torch.from_numpy(a_host).cuda(), torch.from_numpy(b_host).cuda()
        for name, tf32 in (("cuBLAS FP32", False), ("cuBLAS TF32", True)):
            call, setup = _cublas(torch, ta, tb, tf32)
            samplers[name] = Sampler(call, torch.cuda.synchronize, setup)
        reference = torch.matmul(ta, tb).cpu().numpy().astype(np.float64)
    else:
        reference = a_host.astype(np.float64) @ b_host.astype(np.float64)
    interleave(samplers, rounds)
    wall = {name: statistics.median(s.wall) for name, s in samplers.items()}
    events = {name: statistics.median(s.events) for name, s in samplers.items()}
    ratios, event_ratios, targets = {}, {}, {}
    for ours in OURS:
        if ours in wall and PEER[ours] in wall:
            ratios[ratio_name(ours)] = wall[PEER[ours]] / wall[ours]
            event_ratios[ratio_name(ours)] = events[PEER[ours]] / events[ours]
        if (ours, kind) in TARGETS:
            targets[ratio_name(ours)] = TARGETS[ours, kind]
    return {
        "label": label, "M": M, "N": N, "K": K, "kind": kind,
        "calls_per_sample": {name: s.calls for name, s in samplers.items()},
        "wall_s": wall,
        "event_s": events,
        "wall_s_rounds": {name: s.wall for name, s in samplers.items()},
        "ratios": ratios,
        "event_ratios": event_ratios,
        "targets": targets,
        "kernels_per_call": {name: _launched(OURS[name], a, b) for name in OURS if name in samplers},
        "relative_error": {name: _relative_error(OURS[name], a, b, reference) for name in OURS if name in samplers},
        "skipped": skipped,
    }  # fmt: skip


def table(sizes=SIZES, rounds: int = ROUNDS, progress=None) -> dict:
    """Every shape of ``sizes`` (label, M, N, K, kind), with cuBLAS where PyTorch runs."""
    from . import torch_reference

    torch = None
    if torch_reference.available():
        import torch
    rows = []
    for size in sizes:
        rows.append(row(*size, rounds=rounds, torch=torch))
        if progress:
            progress(rows[-1])
    version = torch.__version__ if torch is not None else None
    return {"rows": rows, "rounds": rounds, "sample_s": SAMPLE_S, "method": METHOD, "torch": version}


def format_table(result: dict) -> str:
    """Each shape's ratios next to their targets; ``below`` marks a ratio under its target."""
    names = [ratio_name(ours) for ours in OURS]
    head = f"{'shape (M x K x N)':>18}  " + "  ".join(f"{n:>28}" for n in names)
    head += "   us per call (wall): " + ", ".join(SYSTEMS)
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        cells = []
        for name in names:
            value, target = r["ratios"].get(name), r["targets"].get(name)
            text = "-" if value is None else f"{value:.3f}"
            if target is not None:
                text += f" (>= {target:.2f}{'' if value is None or value >= target else ', below'})"
            cells.append(f"{text:>28}")
        times = ", ".join(f"{r['wall_s'][n] * 1e6:.1f}" if n in r["wall_s"] else "-" for n in SYSTEMS)
        shape = f"{r['M']}x{r['K']}x{r['N']}" if r["kind"] != "square" else r["label"]
        lines.append(f"{shape:>18}  " + "  ".join(cells) + f"   {times}")
    return "\n".join(lines)
