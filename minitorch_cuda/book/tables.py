"""Recorded results as tables, and the names the tables and figures give the kernels.

Every function takes dicts as loaded by ``minitorch_cuda.results.load``
(``bench_stages``, ``profiles``, ``matmul``). ``rows``, ``stats`` and ``counters``
return a ``Table``: displayed, it is an HTML table that fits the book's column
(and Jupyter's); printed, the same table as aligned text. The ``*_text`` functions
return that text.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence

from ..cuda.kernel_table import MATMUL_STAGES, PIPELINED_TILES


class Table:
    """A table shown as HTML where the front end renders it and as aligned text elsewhere.

    ``align`` holds one letter per column: ``l`` (text) or ``r`` (numbers)."""

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence], align: str | None = None, caption: str = ""):
        self.header = [str(h) for h in header]
        self.rows = [[str(c) for c in row] for row in rows]
        self.align = align or "l" + "r" * (len(self.header) - 1)
        self.caption = caption

    WIDTH = 96  # the text form's line length: a book column, or a terminal

    def __str__(self) -> str:
        widths = [max(len(r[i]) for r in [self.header, *self.rows]) for i in range(len(self.header))]
        # a long last column of text (a description, a kernel name) wraps under itself
        lead = sum(widths[:-1]) + 2 * (len(widths) - 1)
        if self.align[-1] == "l" and lead + widths[-1] > self.WIDTH and self.WIDTH - lead >= 20:
            widths[-1] = max(self.WIDTH - lead, len(self.header[-1]))

        def lines(cells):
            last = textwrap.wrap(cells[-1], widths[-1]) or [""]
            first = "  ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, self.align))
            first = first[:lead] + last[0]
            return [first.rstrip(), *(" " * lead + more for more in last[1:])]

        text = [*lines(self.header), "-" * (lead + widths[-1])]
        for row in self.rows:
            text += lines(row)
        return "\n".join(([self.caption] if self.caption else []) + text)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        def cells(tag, row):
            return "".join(
                f"<{tag} style='text-align:{'right' if a == 'r' else 'left'}'>{html.escape(c)}</{tag}>"
                for c, a in zip(row, self.align)
            )

        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        body = "".join(f"<tr>{cells('td', r)}</tr>" for r in self.rows)
        return (
            f"<table class='mt-table'>{caption}<thead><tr>{cells('th', self.header)}</tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )


# What each matmul kernel is, for the book's tables; the stage comes from kernel_table.MATMUL_STAGES.
_MATMUL_NAMES = {
    "matmul_naive": "naive",
    "matmul_transposed": "flags",
    "matmul_batched": "batched",
    "matmul_tiled": "tiled",
    "matmul_regtiled": "regtiled",
    "matmul_sgemm": "SGEMM, autotuned",
    **{f"matmul_pipelined_{t}": f"pipelined {t}" for t in PIPELINED_TILES},
    **{f"matmul_pipelined_splitk_{t}": f"split-K {t}" for t in ("128x128x16", "64x64x16", "32x32x16")},
    "matmul_tf32": "TF32 WMMA",
    "matmul_tf32_async": "TF32 mma.sync + cp.async",
}
MATMUL_LABELS = {
    **{name: f"{what} (stage {MATMUL_STAGES[name]})" for name, what in _MATMUL_NAMES.items()},
    "matmul_tf32_wgmma_tma": f"TF32 wgmma + TMA (stage {MATMUL_STAGES['matmul_tf32_wgmma_tma']}, Hopper)",
    "matmul_tf32_wgmma": "TF32 wgmma (Hopper)",  # beside stage 12's route, not on it
    "cublas": "cuBLAS",
    "cublas_tf32": "cuBLAS TF32",
}
# The blog's comparison (chapter 14): the ladder's kernels of stages 0-8 and cuBLAS.
LADDER_MATMULS = ["matmul_naive", "matmul_transposed", "matmul_batched", "matmul_tiled", "cublas"]


def rows(rows: list[dict]) -> Table:
    """Benchmark rows (from ``bench.run_stage``) as a table, each against the first."""
    return Table(
        ["stage", "batches", "median s", "ms/step", "speed-up", "what changed"],
        [
            [
                r["stage"],
                r["batches_per_epoch"],
                f"{r['median_s']:.3f}",
                f"{r['s_per_step'] * 1e3:.3f}",
                f"{rows[0]['s_per_step'] / r['s_per_step']:.2f}x",
                r["description"],
            ]
            for r in rows
        ],
        align="rrrrrl",
    )


def stats(entry: dict, top: int | None = None) -> Table:
    """A recorded profile as a table in the form of ``nsys stats`` (microseconds)."""
    return Table(
        ["Time (%)", "Total (us)", "Inst", "Avg", "Med", "Min", "Max", "Name"],
        [
            [
                f"{r['time_pct']:.1f}",
                f"{r['total_us']:.1f}",
                r["instances"],
                f"{r['avg_us']:.2f}",
                f"{r['med_us']:.2f}",
                f"{r['min_us']:.2f}",
                f"{r['max_us']:.2f}",
                r["name"],
            ]
            for r in entry["stats"][:top]
        ],
        align="rrrrrrrl",
    )


def counters(*entries: tuple[str, dict]) -> Table:
    """Counter dicts side by side: ``counters(("stage 0", c0), ("stage 1", c1))``."""
    names = list(entries[0][1])
    return Table(
        ["per step", *(label for label, _ in entries)],
        [[name, *(f"{c.get(name, 0):,.2f}" for _, c in entries)] for name in names],
    )


def rows_text(rows_: list[dict]) -> str:
    return str(rows(rows_))


def stats_text(entry: dict, top: int | None = None) -> str:
    return str(stats(entry, top))


def counters_text(*entries: tuple[str, dict]) -> str:
    return str(counters(*entries))
