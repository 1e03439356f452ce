"""The folder where compiled kernels are cached on disk, written once for all that use it.

``$MINITORCH_CUDA_CACHE``, else ``~/.cache/minitorch_cuda``: PyCUDA's cubins of the
framework's kernels go there (``cuda/runtime.py``), the CPU emulator's builds into its
``emulator/`` folder (``emulator/compiler.py``). A grading sandbox gets a cache of its own
under its HOME, seeded with a copy of the grader's emulator builds (``grade/sandbox.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "MINITORCH_CUDA_CACHE"


def under(home: str | Path) -> Path:
    """The cache folder of a user whose home is ``home``: the default, and a sandbox's own."""
    return Path(home) / ".cache" / "minitorch_cuda"


def folder() -> Path:
    """This process's cache folder."""
    return Path(os.environ.get(ENV, under(Path.home())))


def emulator_builds(cache: str | Path) -> Path:
    """Where the CPU emulator keeps its builds inside the cache folder ``cache``."""
    return Path(cache) / "emulator"
