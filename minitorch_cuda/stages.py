"""The optimization ladder: which of the blog's steps are switched on.

``STEPS`` is the ladder, one named step a row: the stage that introduces it and what it
changes. Stage 0 is the naive backend (host clipping, per-row copies, materialized
transposes, host init, an allocation per tensor, a launch per 2-D matrix, a sync after
every launch, volatile warp reductions); every stage keeps all the steps below it. Only
the CUDA backend reads the stage, through one predicate per step, named after it::

    if stages.regtiled_matmul(): ...      # stage >= 9, unless switched off

``use_stage(9, without={"regtiled_matmul"})`` runs stage 9 with that one step off, which is
how an experiment measures what a single step buys (book/results/step_split.json).

``DEFAULT_STAGE`` is the stage a fresh process (and every test) starts at: 8, the end of
the blog's ladder. Stages 9-12 run on the H200 (their tests pass) but are asked for
explicitly: on the MNIST model stage 9 is no faster per step than stage 8, whose step is
bound by the host (book/results/step_split.json), and stage 12 changes the numerics (TF32,
like PyTorch's ``allow_tf32``). Stage 13 runs a ``train.Trainer`` step of the protocol's kind
of model as one kernel in FP32 (cuda/persistent_step.py); every other op, and the step of a
model that does not fit (after a warning naming what does not), stays stage 12's.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    name: str  # also the name of its predicate: stages.<name>()
    stage: int  # the stage that switches it on
    description: str


STEPS = (
    Step("device_clipping", 1, "clipping on the device"),
    Step("gather_kernel", 2, "gather kernel for slicing"),
    Step("fused_transpose", 3, "transposes fused into matmul"),
    Step("device_init", 4, "on-device init"),
    Step("memory_pool", 4, "memory pool"),
    Step("batched_matmul", 5, "batched matmul in one launch"),
    Step("tiled_matmul", 6, "shared-memory tiled matmul"),
    Step("async_launches", 7, "no needless device syncs"),
    Step("warp_shuffle", 8, "warp-shuffle reductions"),
    Step("regtiled_matmul", 9, "register-tiled matmul"),  # autotuned tile shapes
    Step("vectorized_kernels", 9, "vectorized kernels"),  # 16-byte loads, grid-stride loops, one-pass softmax
    Step("fused_kernels", 10, "fused epilogue, loss and optimizer"),
    Step("cuda_graphs", 11, "training step in a CUDA graph"),
    # Split-K forward, bias and ReLU backward in the products, the loss's gradient written forward,
    # clipping and RmsProp across a grid barrier: 10 launches per MNIST step where stage 10 has 19;
    # and the graph fetches its batch through a cursor (one kernel more, no copies from the host).
    Step("lean_step", 11, "fewer, fuller kernels for the graphed step"),
    Step("tensor_cores", 12, "TF32 tensor-core matmul"),  # 10-bit mantissa: ~1e-3 relative error
    # The protocol's model only (train.Trainer checks the fit); its kernel computes in FP32.
    Step("persistent_step", 13, "whole training step in one persistent kernel"),
)
BY_NAME = {step.name: step for step in STEPS}

MIN_STAGE, MAX_STAGE = 0, max(step.stage for step in STEPS)
DEFAULT_STAGE = 8

# What each stage adds, as the benchmark's tables print it.
DESCRIPTIONS = {
    stage: ", ".join(s.description for s in STEPS if s.stage == stage) or "naive CUDA backend"
    for stage in range(MIN_STAGE, MAX_STAGE + 1)
}


@dataclass(frozen=True)
class _Setting:
    stage: int
    without: frozenset[str]


_current = _Setting(DEFAULT_STAGE, frozenset())  # one object: the grader's tamper check skips it


def get_stage() -> int:
    return _current.stage


def setting() -> Hashable:
    """The stage and the steps switched off, as one value: what a choice made per setting is
    kept under (the matmul routes)."""
    return _current


def switched_off() -> frozenset[str]:
    """The steps ``use_stage(..., without=...)`` switched off (usually none)."""
    return _current.without


def _checked_steps(without: Iterable[str]) -> frozenset[str]:
    if isinstance(without, str):  # without="name" would iterate over its letters
        without = (without,)
    names = frozenset(without)
    unknown = sorted(names - BY_NAME.keys())
    if unknown:
        raise ValueError(f"unknown step(s) {', '.join(unknown)}; the steps are: {', '.join(BY_NAME)}")
    return names


def set_stage(n: int, without: Iterable[str] = ()) -> None:
    """Switch the CUDA backend to stage ``n``, minus the named steps ``without``, for
    everything that follows."""
    global _current
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"stage must be an int, got {type(n).__name__}")
    if not MIN_STAGE <= n <= MAX_STAGE:
        raise ValueError(f"stage must be in {MIN_STAGE}..{MAX_STAGE}, got {n}")
    _current = _Setting(n, _checked_steps(without))


@contextlib.contextmanager
def use_stage(n: int, without: Iterable[str] = ()) -> Iterator[int]:
    """Run a block at stage ``n`` with the named steps ``without`` switched off, and restore
    the previous setting afterwards. A nested ``use_stage`` sets both anew."""
    previous = _current
    set_stage(n, without)
    try:
        yield n
    finally:
        _restore(previous)


def _restore(setting: _Setting) -> None:
    global _current
    _current = setting


def is_on(name: str, stage: int | None = None) -> bool:
    """Whether step ``name`` is on now, or (given ``stage``) at that stage of the full ladder."""
    if name not in BY_NAME:
        _checked_steps((name,))  # raises, naming the steps there are
    step = BY_NAME[name]
    if stage is not None:
        return stage >= step.stage
    return _current.stage >= step.stage and name not in _current.without


def _predicate(step: Step) -> Callable[[], bool]:
    def predicate() -> bool:
        return _current.stage >= step.stage and step.name not in _current.without  # is_on, inlined

    predicate.__name__ = predicate.__qualname__ = step.name
    predicate.__doc__ = f"Stage {step.stage} on: {step.description}."
    return predicate


# The predicates the backend calls, one per step: `if stages.device_clipping(): ...`
for _step in STEPS:
    globals()[_step.name] = _predicate(_step)
del _step


def sync_after_launch() -> bool:
    """Stages 0-6 synchronize after every launch (until ``async_launches``)."""
    return not is_on("async_launches")


def full_fp32(stage: int | None = None) -> bool:
    """Whether ``stage`` (default: the current setting) computes every op in float32;
    ``tensor_cores`` (stage 12) rounds matmul inputs to TF32."""
    return not is_on("tensor_cores", stage)


class StageListError(ValueError, argparse.ArgumentTypeError):
    """A stage list ``parse`` cannot read: a ValueError, which argparse prints as one line."""


def parse(text: str) -> list[int]:
    """'0-8', '0,3,8' or '0-8,12' -> the sorted stage numbers, each in MIN_STAGE..MAX_STAGE.
    The error names the token it could not read; as an argparse ``type=``, the CLI prints
    it as one line and exits with status 2."""
    chosen: set[int] = set()
    for token in (t.strip() for t in text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", token)
        if match is None:
            raise StageListError(f"bad stage {token!r} in {text!r}: use e.g. 0-8, 6,8 or 0-8,12")
        low, high = int(match[1]), int(match[2] or match[1])
        if low > high:
            raise StageListError(f"bad stage {token!r} in {text!r}: a range runs from low to high")
        if low < MIN_STAGE or high > MAX_STAGE:
            raise StageListError(f"bad stage {token!r} in {text!r}: stages lie in {MIN_STAGE}..{MAX_STAGE}")
        chosen.update(range(low, high + 1))
    return sorted(chosen)
