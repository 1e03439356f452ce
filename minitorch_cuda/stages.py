"""The optimization ladder: which of the blog's steps are switched on.

Every stage keeps all the steps below it, so ``stage >= n`` asks "is step n
on?". Only the CUDA backend reads the stage; the CPU backend has none.

| stage | step switched on |
| --- | --- |
| 0 | naive backend: host clipping, per-row copies, materialized transposes, host |
|   | init, an allocation per tensor, a launch per 2-D matrix, a sync after every  |
|   | launch, volatile warp reductions |
| 1 | gradient clipping on the device |
| 2 | slicing and shuffling through one gather kernel |
| 3 | transposes fused into the matmul kernel through flags |
| 4 | weights initialized on the device, memory pool |
| 5 | batched matmul in one launch over a 3-D grid |
| 6 | shared-memory tiled matmul |
| 7 | no device sync except where the host reads data |
| 8 | warp-shuffle reductions |
| 9 | register-tiled SGEMM (autotuned tile shapes), 16-byte vectorized elementwise |
|   | kernels with grid-stride loops, one-pass warp-shuffle softmax |
| 10 | fusion: matmul + bias + ReLU in one kernel, softmax + cross-entropy + mean in one, |
|    | gradient clipping + RmsProp over all parameters in two launches |
| 11 | the whole training step captured once in a CUDA graph and replayed per batch |
| 12 | matmul on the tensor cores in TF32 (10-bit mantissa: ~1e-3 relative error) |

``DEFAULT_STAGE`` is the stage a fresh process (and every test) starts at: 8,
the end of the blog's ladder. Stages 9-12 run on the H200 (their tests pass) but
are asked for explicitly: on the MNIST model stage 9 is no faster per step than
stage 8, whose step is bound by the host (book/results/step_split.json), and
stage 12 changes the numerics (TF32, like PyTorch's ``allow_tf32``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

MIN_STAGE, MAX_STAGE = 0, 12
DEFAULT_STAGE = 8

DESCRIPTIONS = {
    0: "naive CUDA backend",
    1: "clipping on the device",
    2: "gather kernel for slicing",
    3: "transposes fused into matmul",
    4: "on-device init and memory pool",
    5: "batched matmul in one launch",
    6: "shared-memory tiled matmul",
    7: "no needless device syncs",
    8: "warp-shuffle reductions",
    9: "register-tiled matmul, vectorized kernels",
    10: "fused epilogue, loss and optimizer",
    11: "training step in a CUDA graph",
    12: "TF32 tensor-core matmul",
}

_current = DEFAULT_STAGE


def get_stage() -> int:
    return _current


def set_stage(n: int) -> None:
    """Switch the CUDA backend to stage ``n`` for everything that follows."""
    global _current
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"stage must be an int, got {type(n).__name__}")
    if not MIN_STAGE <= n <= MAX_STAGE:
        raise ValueError(f"stage must be in {MIN_STAGE}..{MAX_STAGE}, got {n}")
    _current = n


@contextlib.contextmanager
def use_stage(n: int) -> Iterator[int]:
    """Run a block at stage ``n`` and restore the previous stage afterwards."""
    previous = _current
    set_stage(n)
    try:
        yield n
    finally:
        set_stage(previous)


# Named predicates keep the backend readable: `if stages.device_clipping()`.
def device_clipping() -> bool:
    return _current >= 1


def gather_kernel() -> bool:
    return _current >= 2


def fused_transpose() -> bool:
    return _current >= 3


def device_init() -> bool:
    return _current >= 4


def memory_pool() -> bool:
    return _current >= 4


def batched_matmul() -> bool:
    return _current >= 5


def tiled_matmul() -> bool:
    return _current >= 6


def sync_after_launch() -> bool:
    return _current < 7


def warp_shuffle() -> bool:
    return _current >= 8


def regtiled_matmul() -> bool:
    return _current >= 9


def vectorized_kernels() -> bool:
    return _current >= 9


def fused_kernels() -> bool:
    return _current >= 10


def cuda_graphs() -> bool:
    return _current >= 11


def tensor_cores() -> bool:
    return _current >= 12


def full_fp32(stage: int | None = None) -> bool:
    """Whether ``stage`` (default: the current one) computes every op in float32;
    stage 12 rounds matmul inputs to TF32."""
    return (_current if stage is None else stage) < 12
