"""The hidden checks of Exercise 20.1: fibonacci as a tile function (numpy, no GPU).

A tile function receives a whole tile of inputs and may only use whole-tile
operations (arithmetic, comparisons, ``np.where``): no Python per element, no
lookup table. That is the constraint a tile kernel lives under, and the reason
the source's tile fibonacci runs every step for every element.
"""

from __future__ import annotations

import numpy as np

from .cases import MAX_FIB_N, fib_reference


def check_fib_tile(fib_tile, source: str = "") -> list[str]:
    from ..grade import channel
    from ..grade.verdict import WRONG_RESULT, fail, notebook_hint, source_of

    notebook_hint(
        fib_tile,
        source or source_of(fib_tile),
        {
            r"FIB_TABLE|fib_reference|fib_scalar|lru_cache": "compute the values; no lookup table or scalar helper",
            r"np\.vectorize|np\.frompyfunc|\.tolist\(|\.item\(|np\.nditer|map\(": "whole-tile operations only: "
            "no Python code per element",
            r"\bfor\s+\w+\s+in\s+(?!range\b)": "loop over steps with range(...), never over the elements of the tile",
        },
    )
    done = []
    rng = np.random.default_rng()
    tiles = {
        "edge cases 0..4 and the largest input": np.array([0, 1, 2, 3, 4, MAX_FIB_N], np.int64),
        "a random tile of 1024": rng.integers(0, MAX_FIB_N + 1, 1024, dtype=np.int64),
        "a 2-D tile of 8 x 16": rng.integers(0, MAX_FIB_N + 1, (8, 16), dtype=np.int64),
        "a tile of one repeated value": np.full(64, 17, np.int64),
    }
    for label, tile in tiles.items():
        want = fib_reference(tile)  # before the student's code sees the tile
        before = tile.copy()
        got = np.asarray(fib_tile(tile))
        if not np.array_equal(tile, before) or channel.changed_arguments(fib_tile):
            fail(WRONG_RESULT, f"{label}: fib_tile changed its input tile")
        if got.shape != tile.shape:
            fail(WRONG_RESULT, f"{label}: the result has shape {got.shape}, the tile {tile.shape}")
        bad = got != want
        if bad.any():
            idx = [tuple(int(v) for v in i) for i in np.argwhere(bad)[:5]]
            details = [f"n = {tile[i]}: got {got[i]}, want {want[i]}" for i in idx]
            fail(WRONG_RESULT, f"{label}: {int(bad.sum())} of {tile.size} values are wrong", details)
        done.append(f"{label}: all {tile.size} values right")
    return done
