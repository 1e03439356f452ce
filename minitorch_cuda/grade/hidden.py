"""The hidden part of every check's shapes: drawn from the seed of the instructor's run.

The notebooks' own checks use fixed shapes, which a student can read and fit (a kernel
that handles at most N values per thread passes when the widest shape is N times the
largest block). The grader adds shapes drawn from ``--seed`` (recorded in grades.json):
the same seed gives the same shapes, so a grade can be reproduced and audited, while a
student cannot know them in advance. ``sizes`` draws them beyond a bound the fixed
shapes stay under, ragged (never a multiple of a block), and up to the largest size the
exercise claims; on the CPU emulator they are scaled down by ``EMULATOR_SCALE`` (it runs
every thread as a fiber, many times slower than a GPU) but stay beyond the bound.

The worker calls ``use(seed, exercise_id)`` before a check; outside the grader (a
notebook's check cell) there is no seed and the hidden shapes come from a fresh one.
"""

from __future__ import annotations

import secrets
import zlib

import numpy as np

from .. import emulator

EMULATOR_SCALE = 0.1  # share of a hidden size's headroom kept on the emulator

_seed: int | None = None
_exercise = ""


def fresh_seed() -> int:
    """A seed for a run that names none (63 bits: it fits JSON and a command line)."""
    return secrets.randbits(63)


def use(seed: int | None, exercise_id: str) -> None:
    """Draw the hidden shapes of ``exercise_id`` from ``seed`` (None: a fresh seed)."""
    global _seed, _exercise
    _seed = None if seed is None else int(seed)
    _exercise = str(exercise_id)


def rng(label: str) -> np.random.Generator:
    """The generator of one check's hidden shapes: a function of (seed, exercise, label) only."""
    seed = _seed if _seed is not None else fresh_seed()
    return np.random.default_rng([seed, zlib.crc32(_exercise.encode()), zlib.crc32(label.encode())])


def sizes(label: str, beyond: int, largest: int, count: int = 2, block: int = 256) -> list[int]:
    """``count`` sizes in (``beyond``, ``largest``], none a multiple of ``block``: past the fixed
    shapes' reach, ragged at the edge, the last one near the largest size the exercise claims.
    On the emulator ``largest`` shrinks towards ``beyond`` (never below 1.5 x ``beyond``)."""
    if emulator.selected():
        largest = max(int(beyond * 1.5), int(beyond + (largest - beyond) * EMULATOR_SCALE))
    gen = rng(label)
    low = beyond + 1
    out = [int(gen.integers(low, largest + 1)) for _ in range(count - 1)]
    out.append(int(gen.integers(max(low, largest - largest // 16), largest + 1)))  # near the top
    return [n + 1 if n % block == 0 else n for n in out]


def between(label: str, low: int, high: int, count: int) -> list[int]:
    """``count`` integers in [low, high] (a hidden dimension of a shape); on the emulator ``high``
    shrinks towards ``low`` as in ``sizes``."""
    if emulator.selected():
        high = low + int((high - low) * EMULATOR_SCALE)
    gen = rng(label)
    return [int(v) for v in gen.integers(low, high + 1, count)]
