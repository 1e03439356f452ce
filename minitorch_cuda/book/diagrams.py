"""Schematics drawn by code, so that they stay true to the kernels they explain.

Each function draws on the Axes it is given (or a new one) and returns it; none
reads a measurement (the figures of measurements are in ``figures``).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib import patches


def _axes(ax, size):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def tiling_picture(ax=None, tiles: int = 4, step: int = 1):
    """A schematic of the shared-memory tiled matmul: the C tile one block computes,
    the strips of A and B it needs, and the pair of tiles staged at step ``step``."""
    ax = _axes(ax, (6.5, 6.5))
    t = 1.0
    n = tiles
    gap = 0.6
    a0 = (0.0, 0.0)  # A: n x n tiles, lower left
    b0 = (n * t + gap, n * t + gap)  # B: above C
    c0 = (n * t + gap, 0.0)  # C: right of A
    ti, tj = 1, 2  # the C tile (row band ti, column band tj), counted from the top
    for (x0, y0), label in ((a0, "A  (M x K)"), (b0, "B  (K x N)"), (c0, "C  (M x N)")):
        ax.add_patch(patches.Rectangle((x0, y0), n * t, n * t, fill=False, lw=1.2))
        ax.text(x0 + n * t / 2, y0 - 0.3 if label[0] != "B" else y0 + n * t + 0.15, label, ha="center", fontsize=9)
    y_band = (n - 1 - ti) * t
    ax.add_patch(patches.Rectangle((a0[0], y_band), n * t, t, color="tab:blue", alpha=0.15))
    ax.add_patch(patches.Rectangle((b0[0] + tj * t, b0[1]), t, n * t, color="tab:orange", alpha=0.15))
    ax.add_patch(patches.Rectangle((c0[0] + tj * t, y_band), t, t, color="tab:green", alpha=0.6))
    ax.text(c0[0] + (tj + 0.5) * t, y_band + 0.5 * t, "C tile\n(1 block)", ha="center", va="center", fontsize=7)
    for k in range(n):  # the tiles staged in shared memory, one pair per step along K
        strong = k == step
        ax.add_patch(
            patches.Rectangle(
                (a0[0] + k * t, y_band),
                t,
                t,
                fill=strong,
                color="tab:blue",
                alpha=0.7 if strong else 1,
                lw=0.8,
                ls="-" if strong else "--",
            )
        )
        ax.add_patch(
            patches.Rectangle(
                (b0[0] + tj * t, b0[1] + (n - 1 - k) * t),
                t,
                t,
                fill=strong,
                color="tab:orange",
                alpha=0.7 if strong else 1,
                lw=0.8,
                ls="-" if strong else "--",
            )
        )
        ax.text(a0[0] + (k + 0.5) * t, y_band + 0.5 * t, f"k={k}", ha="center", va="center", fontsize=7)
        ax.text(b0[0] + (tj + 0.5) * t, b0[1] + (n - 0.5 - k) * t, f"k={k}", ha="center", va="center", fontsize=7)
    arrow = dict(arrowstyle="->", lw=1.2)
    ax.annotate("", xy=(a0[0] + n * t - 0.1, y_band - 0.25), xytext=(a0[0] + 0.1, y_band - 0.25), arrowprops=arrow)
    ax.annotate(
        "",
        xy=(b0[0] + tj * t - 0.25, b0[1] + 0.1),
        xytext=(b0[0] + tj * t - 0.25, b0[1] + n * t - 0.1),
        arrowprops=arrow,
    )
    ax.text(a0[0] + n * t / 2, y_band - 0.55, "tiles of A march along K", ha="center", fontsize=7)
    ax.text(b0[0] + tj * t - 0.4, b0[1] + n * t / 2, "tiles of B\nmarch along K", ha="right", va="center", fontsize=7)
    ax.text(0.0, 2 * n * t + gap + 0.2, f"step k={step}: solid tiles are in shared memory", fontsize=8)
    ax.set_xlim(-0.3, 2 * n * t + gap + 0.3)
    ax.set_ylim(-0.8, 2 * n * t + gap + 0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax
