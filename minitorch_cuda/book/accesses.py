"""The chapters' emulator views of a course kernel's memory accesses, beside the GPU's counters.

A chapter traces one of its own kernels (``minitorch_cuda/kernels/*.cu``) on the CPU emulator with
``traced`` (emulator/access.py's ``access_report``: in a child process where this one runs on a GPU or
on no CUDA at all, so the cell runs in every book build), and sets its counts beside those Nsight
Compute counted for the same kernel at the same size in one run on a GPU: ``on_gpu``, from
``book/results/access_vs_ncu.json`` (.ci/access_vs_ncu.py, which traced the same launches).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import results
from ..cuda.kernel_table import KERNEL_DIR
from ..emulator.access import AccessReport, access_report

RECORD = "access_vs_ncu"


def traced(file: str, kernel: str, grid: Sequence[int], block: Sequence[int], args: Sequence) -> AccessReport:
    """One launch of ``kernel`` of ``minitorch_cuda/kernels/<file>`` on the emulator, traced; its headers
    found where the framework's builds find them."""
    return access_report((KERNEL_DIR / file).read_text(), kernel, grid, block, args, options=[f"-I{KERNEL_DIR}"])


def on_gpu(kernel: str, record: dict | None = None) -> dict[str, dict[str, float]]:
    """``kernel``'s first launch in the record: {metric: {"emulator": n, "ncu": n}} per counter that either
    side counted (a counter missing here was 0 on both); {} where the record or the kernel is missing."""
    record = results.load(RECORD) if record is None else record
    for workload in (record or {}).get("workloads", []):
        for launch in workload.get("launches", []):
            if launch["kernel"] == kernel and launch["launch"] == 1:
                return {m: {"emulator": c["emulator"], "ncu": c["ncu"]} for m, c in launch["counters"].items()}
    return {}


def count(counters: dict[str, dict[str, float]], metric: str, side: str = "ncu") -> float:
    """One side's count of ``metric`` (its name without ``.sum``), 0 where neither side counted it."""
    return counters.get(f"{metric}.sum", {}).get(side, 0.0)
