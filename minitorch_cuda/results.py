"""Recorded measurements: the JSON files in ``book/results/`` that the book shows.

A GPU run writes them (``python -m minitorch_cuda.bench --record``); a machine
without a GPU reads them, so every reader sees numbers measured on real hardware.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

from . import emulator

# MINITORCH_CUDA_RESULTS_DIR redirects reads and writes (tests point it at a copy).
RESULTS_DIR = Path(
    os.environ.get("MINITORCH_CUDA_RESULTS_DIR", Path(__file__).resolve().parent.parent / "book" / "results")
)


def load(name: str) -> dict | None:
    """The recorded result ``name`` (without .json), or None if it was never recorded."""
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def save(name: str, data: dict, command: str) -> Path:
    """Write a result with the command that made it and where it was measured."""
    if emulator.selected():
        raise RuntimeError(f"not recording {name!r}: it was measured on the CPU emulator, not on a GPU")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    record = {
        "command": command,
        "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        **data,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def stage_row(bench: dict, stage: int) -> dict:
    """The row of one stage in a ``bench_stages`` result."""
    return next(r for r in bench["stages"] if r["stage"] == stage)


def profile_entry(profiles: dict, stage: int) -> dict:
    """The recorded profile of one stage in a ``profiles`` result."""
    return next(p for p in profiles["stages"] if p["stage"] == stage)
