"""Chapters' views of the Nsight Compute records (``book/results/ncu_<topic>.json``, written by
``python -m minitorch_cuda.experiments.ncu``): a table of chosen metrics per run and kernel,
the SASS comparison of chapter 10, and the names of the kernels a topic profiled. Where a
record is missing, one line says the measurement is pending and how to make it.
"""

from __future__ import annotations

from .. import results

# The workloads' fixed choices, which the chapters name beside the records they produced
from ..experiments.ncu_workloads import REGTILED_AT_4096, SIZES  # noqa: F401

PENDING = "Nsight Compute measurement pending: book/results/ncu_{topic}.json is not recorded yet ({how})."


def _how(topic: str) -> str:
    return f"python -m minitorch_cuda.experiments.ncu {topic} on a GPU"


def shown(topic: str, columns: list[tuple[str, str, float, str]], record: dict | None = None) -> str:
    """A chapter's view of ``ncu_<topic>.json``: a line per run and kernel with ``columns``
    (label, metric or derived name, scale, format); '-' where ncu did not report it; one
    line saying the measurement is pending where nothing was recorded."""
    record = results.load(f"ncu_{topic}") if record is None else record
    if record is None:
        return PENDING.format(topic=topic, how=_how(topic))
    if "error" in record:
        return f"ncu_{topic}.json recorded no measurement: {record['error']}"
    lines = [f"Nsight Compute ({record.get('ncu_version') or 'ncu'}) on {record.get('gpu') or 'the GPU'}, "
             f"{record.get('recorded', '')[:10]} (ncu_{topic}.json):"]  # fmt: skip
    width = max([len(k) for run in record.get("runs", []) for k in run.get("kernels", {})] + [12])
    width = min(width, 48)
    lines.append(f"{'kernel':<{width}} " + " ".join(f"{label:>{max(10, len(label))}}" for label, *_ in columns))
    for run in record.get("runs", []):
        lines.append(f"[{run['variant']}]" + (f" error: {run['error']}" if run.get("error") else ""))
        for name, kernel in run.get("kernels", {}).items():
            cells = []
            for label, key, scale, fmt in columns:
                value = kernel["metrics"].get(key, kernel.get("derived", {}).get(key))
                if key == "grid":
                    value = kernel.get("grid")
                text = fmt.format(value * scale) if isinstance(value, (int, float)) else (value or "-")
                cells.append(f"{text:>{max(10, len(label))}}")
            short = name if len(name) <= width else name[: width - 3] + "..."
            lines.append(f"{short:<{width}} " + " ".join(cells))
    return "\n".join(lines)


def kernel_names(topic: str, record: dict | None = None) -> list[str]:
    """The full names of the kernels a topic's record profiled (cuBLAS's are long)."""
    record = results.load(f"ncu_{topic}") if record is None else record
    return [k for run in (record or {}).get("runs", []) for k in run.get("kernels", {})]


def shown_sass(topic: str = "ch10", record: dict | None = None) -> str:
    """Chapter 10's view: per kernel its instructions, its inner loop's, and the loop's opcodes."""
    record = results.load(f"ncu_{topic}") if record is None else record
    if record is None:
        return PENDING.format(topic=topic, how=_how(topic)).replace("Nsight Compute measurement", "SASS comparison")
    sass = record.get("sass", {})
    if "error" in record or "error" in sass:
        return f"ncu_{topic}.json holds no SASS: {record.get('error') or sass.get('error')}"
    lines = [f"{' '.join(sass.get('compile_command', [])[1:4])}; cuobjdump -sass (ncu_{topic}.json):"]
    for name, k in sass.get("kernels", {}).items():
        if "error" in k:
            lines.append(f"{name}: {k['error']}")
            continue
        loop = k["inner_loop"]
        per = loop["instructions_per_ffma"]
        lines.append(
            f"{name}: {k['instructions']} instructions, {k.get('resources', {}).get('REG', '?')} registers; "
            f"inner loop {loop['instructions']} instructions for {loop['ffma']} FFMA"
            + (f" ({per:.2f} per FFMA)" if per else "")
        )
        lines.append("    " + ", ".join(f"{op} {n}" for op, n in loop["opcodes"].items()))
    return "\n".join(lines)
