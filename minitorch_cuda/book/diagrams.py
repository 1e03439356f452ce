"""Schematics drawn by code, so that they stay true to the kernels they explain.

Each function draws on the Axes it is given (or a new one) and returns it; none
reads a measurement (the figures of measurements are in ``figures``).
"""

from __future__ import annotations

import functools
import re

import matplotlib.pyplot as plt
from matplotlib import patches

from ..cuda.kernel_table import REGTILED_TILES, regtiled_thread_tile
from . import excerpts, style


def _at_page_size(draw):
    """A diagram comes out laid out as the chapters show it (``tight_layout``) with text
    the page can show (``style.legible``), laid out again at those sizes."""

    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        out = draw(*args, **kwargs)
        fig = getattr(out, "figure", out)
        fig.tight_layout()
        style.legible(fig)
        fig.tight_layout()
        return out

    return drawn


def _axes(ax, size):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


@_at_page_size
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


def _kernel_define(file: str, name: str) -> int:
    """The integer value of ``#define name`` in a kernel file: the diagrams draw the kernels'
    own parameters, so a change to the kernel changes its picture."""
    text = (excerpts.PACKAGE / "kernels" / file).read_text()
    return int(re.search(rf"^#define {name} (\d+)", text, re.M).group(1))


def _grid(ax, x0, y0, cols, rows, size=1.0, color="white", lw=0.5, **kw):
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(
                patches.Rectangle(
                    (x0 + c * size, y0 - (r + 1) * size), size, size, facecolor=color, edgecolor="0.5", lw=lw, **kw
                )
            )


def _finish(ax, xlim, ylim):
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


# --- chapter 7: per-row copies against one gather kernel ---------------------------------


@_at_page_size
def row_copies_vs_gather(fig=None, rows: int = 6, row_us: float = 11.0):
    """Top: stages 0 and 1 copy a batch one row at a time, each copy a driver call waited
    for (``row_us`` each, whatever the row's size). Bottom: stage 2's ``gather_rows``, one
    thread per output element, so a warp's 32 threads read 32 consecutive floats of one
    source row (one 128-byte segment) and write 32 consecutive floats of the output."""
    fig = fig or plt.figure(figsize=(7.5, 5.5))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 2.3]})
    for i in range(rows):
        start = i * row_us
        top.barh(1, row_us * 0.93, left=start, height=0.5, color="0.8", edgecolor="0.5", lw=0.5)
        top.barh(1, 0.25, left=start + row_us * 0.45, height=0.5, color="tab:blue")
        top.text(start + row_us * 0.47, 1.4, f"row {i}", ha="center", fontsize=7)
    top.barh(0, 2.5, left=0, height=0.5, color="tab:blue")
    top.text(2.8, 0, "one gather_rows launch (a few us): every row of the batch", va="center", fontsize=7)
    top.set_yticks([0, 1], ["stage 2", "stages 0-1"], fontsize=8)
    top.set_xlim(0, rows * row_us + 1)
    top.set_ylim(-0.6, 1.9)
    top.set_xlabel(
        f"time (us): grey, a copy's fixed cost (about {row_us:.0f} us, call, start-up and sync);\n"
        "blue, moving the bytes (drawn far wider than it is)",
        fontsize=7,
    )
    top.tick_params(labelsize=7)
    for side in ("top", "right"):
        top.spines[side].set_visible(False)

    ax = bottom
    cols, src_rows, idx = 16, 7, [5, 1, 3]
    _grid(ax, 0, 0, cols, src_rows, size=0.5)
    ax.text(0, 0.1, "in: the training images,\none row each (784 floats)", fontsize=7, va="bottom")
    for r in range(src_rows):
        ax.text(-0.2, -(r + 0.5) * 0.5, f"{r}", ha="right", va="center", fontsize=6)
    x_out = cols * 0.5 + 2.2
    _grid(ax, x_out, 0, cols, len(idx), size=0.5)
    ax.text(x_out, 0.1, "out: the batch,\nrow r = in[idx[r]]", fontsize=7, va="bottom")
    for r, src in enumerate(idx):
        y_src, y_out = -(src + 0.5) * 0.5, -(r + 0.5) * 0.5
        ax.annotate(
            "",
            xy=(x_out - 0.05, y_out),
            xytext=(cols * 0.5 + 0.05, y_src),
            arrowprops=dict(arrowstyle="->", lw=0.8, color="0.4"),
        )
        ax.text(x_out + cols * 0.5 + 0.1, y_out, f"r={r}: idx[{r}] = {src}", va="center", fontsize=6, color="0.3")
    warp = 8  # cells drawn per warp: a stand-in for 32 floats
    for x0, y0 in ((0, -idx[0] * 0.5), (x_out, 0)):
        ax.add_patch(
            patches.Rectangle((x0, y0 - 0.5), warp * 0.5, 0.5, facecolor="tab:orange", alpha=0.8, edgecolor="k", lw=0.8)
        )
        ax.add_patch(
            patches.Rectangle(
                (x0 + warp * 0.5, y0 - 0.5), warp * 0.5, 0.5, facecolor="tab:green", alpha=0.5, edgecolor="k", lw=0.8
            )
        )
    ax.text(
        0,
        -src_rows * 0.5 - 0.45,
        "orange: warp 0's 32 threads, i = 0..31, read 32 neighbouring floats of one "
        "row: one 128-byte segment\ngreen: warp 1 continues the same row; the 64-bit index "
        "idx[r] * row_len + c picks the row",
        fontsize=7,
        va="top",
    )
    return _finish(ax, (-0.8, x_out + cols * 0.5 + 1.6), (-src_rows * 0.5 - 0.9, 1.3)).figure


# --- chapter 13: the shuffle tree ----------------------------------------------------------


@_at_page_size
def shuffle_tree(ax=None, lanes: int = 32):
    """``warp_reduce_shuffle``: in each round lane i adds the value of lane i + offset
    (``__shfl_down_sync``), offsets halving from ``lanes / 2`` (read from block_reduce.cuh);
    after five rounds lane 0 holds the warp's sum. The upper lanes compute too, but their
    results are never used (grey)."""
    text = excerpts.cuda_source("block_reduce.cuh", "warp_reduce_shuffle")
    first = int(re.search(r"offset = (\d+)", text).group(1))
    offsets = [first >> i for i in range(first.bit_length())]
    ax = _axes(ax, (9.5, 0.75 * len(offsets) + 1.6))
    w, gap = 0.26, 1.0
    for level in range(len(offsets) + 1):
        live = lanes if level == 0 else offsets[level - 1]
        y = -level * gap
        for lane in range(lanes):
            used = lane < live
            ax.add_patch(
                patches.Rectangle(
                    (lane * w * 1.15, y), w, 0.35, facecolor="tab:blue" if used else "0.88", edgecolor="0.4", lw=0.4
                )
            )
        if level == 0:
            ax.text(-0.2, y + 0.17, "32 lanes, one value each", ha="right", va="center", fontsize=7)
            continue
        off = offsets[level - 1]
        for lane in range(off):  # each lane keeps its own value and adds the one shuffled down
            ax.plot([lane * w * 1.15 + w / 2] * 2, [y + gap - 0.02, y + 0.37], color="tab:blue", lw=0.4, alpha=0.5)
        ax.text(-0.2, y + 0.17, f"offset {off}: lane i += lane i+{off}", ha="right", va="center", fontsize=7)
        for lane in range(off):
            x_to, x_from = lane * w * 1.15 + w / 2, (lane + off) * w * 1.15 + w / 2
            ax.annotate(
                "",
                xy=(x_to, y + 0.37),
                xytext=(x_from, y + gap - 0.02),
                arrowprops=dict(arrowstyle="-|>", lw=0.5, color="tab:orange", mutation_scale=5),
            )
    for lane in (0, 8, 16, 24, 31):
        ax.text(lane * w * 1.15 + w / 2, 0.5, str(lane), ha="center", fontsize=6)
    ax.text(w / 2, -len(offsets) * gap - 0.3, "lane 0: the sum of all 32", fontsize=7, va="top")
    return _finish(ax, (-4.2, lanes * w * 1.15 + 0.2), (-len(offsets) * gap - 0.8, 0.9))


# --- chapter 16: the register tile of one thread ---------------------------------------------


@_at_page_size
def thread_tile(ax=None, variant: str = "128x128x8", thread: tuple[int, int] = (1, 2)):
    """One block tile of ``matmul_regtiled_<variant>`` (BM, BN, TM, TN from its line in
    matmul_tiles.cuh, through kernel_table): thread (ty, tx) owns TM x TN outputs as groups of 4 x 4 spread over the
    tile, rows ``c * RT*4 + ty*4 + i``; per k it reads TM values of ``As[k]`` and TN of
    ``Bs[k]`` (float4 each group) and does TM * TN multiply-adds. Warp 0 (two rows of
    16 threads at 128 x 128) is outlined."""
    BM, BN, _, threads = REGTILED_TILES[variant]
    TM, TN = regtiled_thread_tile(variant)
    RT, CT = BM // TM, BN // TN
    ty, tx = thread
    ax = _axes(ax, (8, 6.2))
    s = 1 / 16  # one output element
    x0, y0 = 0.0, 0.0  # top left corner of the C tile; B above it, A to its left
    ax.add_patch(patches.Rectangle((x0, y0 - BM * s), BN * s, BM * s, facecolor="white", edgecolor="k", lw=1))
    for gy in range(TM // 4):
        for gx in range(TN // 4):
            r, c = gy * RT * 4 + ty * 4, gx * CT * 4 + tx * 4
            ax.add_patch(patches.Rectangle((x0 + c * s, y0 - (r + 4) * s), 4 * s, 4 * s, color="tab:green"))
    warp = 32
    for t in range(warp):
        wy, wx = divmod(t, CT)
        for gy in range(TM // 4):
            for gx in range(TN // 4):
                r, c = gy * RT * 4 + wy * 4, gx * CT * 4 + wx * 4
                ax.add_patch(
                    patches.Rectangle(
                        (x0 + c * s, y0 - (r + 4) * s),
                        4 * s,
                        4 * s,
                        fill=False,
                        edgecolor="tab:green",
                        lw=0.3,
                        alpha=0.8,
                    )
                )
    a_x, b_y = x0 - 1.2, y0 + 1.2
    ax.add_patch(patches.Rectangle((a_x, y0 - BM * s), 6 * s, BM * s, facecolor="0.95", edgecolor="k", lw=0.8))
    ax.add_patch(patches.Rectangle((x0, b_y - 6 * s), BN * s, 6 * s, facecolor="0.95", edgecolor="k", lw=0.8))
    for gy in range(TM // 4):
        r = gy * RT * 4 + ty * 4
        ax.add_patch(patches.Rectangle((a_x, y0 - (r + 4) * s), 6 * s, 4 * s, color="tab:blue"))
    for gx in range(TN // 4):
        c = gx * CT * 4 + tx * 4
        ax.add_patch(patches.Rectangle((x0 + c * s, b_y - 6 * s), 4 * s, 6 * s, color="tab:orange"))
    ax.text(a_x + 3 * s, y0 + 0.15, "As[k]\n(column k of A)", ha="center", fontsize=7)
    ax.text(x0 - 0.15, b_y - 3 * s, "Bs[k] (row k of B)", ha="right", va="center", fontsize=7)
    ax.text(
        x0 + BN * s / 2,
        y0 - BM * s - 0.3,
        f"C tile {BM} x {BN}: one block of {threads} threads",
        ha="center",
        fontsize=8,
    )
    ax.text(
        x0 + BN * s + 0.3,
        y0 - 1.0,
        f"green: thread (ty={ty}, tx={tx}),\n{TM} x {TN} outputs in {TM * TN}\n"
        f"registers, as {TM // 4 * (TN // 4)} groups of 4 x 4,\n{RT * 4} rows and {CT * 4} columns apart\n\n"
        f"outlined: warp 0\n(threads 0-31)\n\nper k: {TM} values of A (blue)\nand {TN} of B (orange),\n"
        f"read as float4, make\n{TM * TN} multiply-adds",
        fontsize=7,
        va="top",
    )
    return _finish(ax, (a_x - 0.2, x0 + BN * s + 2.6), (y0 - BM * s - 0.6, b_y + 0.2))


# --- chapter 19: mma.sync fragments, the 128-byte swizzle, the cp.async pipeline ---------------


@_at_page_size
def mma_fragments(fig=None, lane: int = 5):
    """Which lane holds which element of one ``mma.sync.m16n8k8`` TF32 product (the
    layout in mma_async.cu's comment, from the PTX ISA): lane (g, t) = (lane / 4, lane % 4)
    holds a: (g, t) (g+8, t) (g, t+4) (g+8, t+4); b: (t, g) (t+4, g); d: (g, 2t) (g, 2t+1)
    (g+8, 2t) (g+8, 2t+1). One lane is highlighted in all three. Below, the banks of the
    32 words of one read of a (register a0), staged K-contiguous with rows of
    ASYNC_BK + 4 words: bank 4g + t, all different."""
    fig = fig or plt.figure(figsize=(9.5, 7))
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [8, 8, 8]})
    owner_a, owner_b, owner_d = {}, {}, {}
    for ln in range(32):
        g, t = divmod(ln, 4)
        for j, (r, c) in enumerate([(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]):
            owner_a[r, c] = (ln, f"a{j}")
        for j, (r, c) in enumerate([(t, g), (t + 4, g)]):
            owner_b[r, c] = (ln, f"b{j}")
        for j, (r, c) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]):
            owner_d[r, c] = (ln, f"d{j}")
    colors = plt.get_cmap("tab10")
    panels = [
        (axes[0], owner_a, "A: 16 x 8 (m x k)"),
        (axes[1], owner_b, "B: 8 x 8 (k x n)"),
        (axes[2], owner_d, "D = A B + D: 16 x 8 (m x n)"),
    ]
    for ax, owner, title in panels:
        for (r, c), (ln, reg) in owner.items():
            mine = ln == lane
            ax.add_patch(
                patches.Rectangle(
                    (c, -r - 1),
                    1,
                    1,
                    facecolor="tab:red" if mine else colors(ln % 4),
                    alpha=0.9 if mine else 0.25,
                    edgecolor="0.5",
                    lw=0.4,
                )
            )
            ax.text(
                c + 0.5,
                -r - 0.5,
                f"{ln}\n{reg}",
                ha="center",
                va="center",
                fontsize=5.5,
                color="white" if mine else "k",
            )
        ax.set_title(title, fontsize=8)
        _finish(ax, (-0.2, 8.2), (-16.2, 0.2))
    kk = _kernel_define("mma_async.cu", "ASYNC_BK") + 4  # ASYNC_KROW: a staged row, in words
    banks = sorted((kk * g + t) % 32 for g in range(8) for t in range(4))
    axes[1].text(
        4,
        -9.2,
        f"number: lane, register\ncolour: t = lane % 4\nred: lane {lane} (g = {lane // 4}, "
        f"t = {lane % 4})\n\nReading a0, lane (g, t) touches\nrow g, column t of the A tile,\nstaged "
        f"with rows of {kk} words:\nbank ({kk}g + t) mod 32 = 4g + t.\nThe 32 lanes touch {len(set(banks))} "
        "different\nbanks: no bank conflict.",
        ha="center",
        va="top",
        fontsize=7.5,
    )
    return fig


@_at_page_size
def swizzle_128b(fig=None):
    """The 128-byte swizzle of the wgmma tiles (``copy_rows`` in wgmma.cu): the 16-byte
    chunk j of row r goes to chunk j ^ (r % 8) of the row in shared memory. Left, the rows
    as they are in global memory; right, as staged; the colour follows a chunk. A column
    of chunks (the same j in eight rows) ends up in eight different positions, so the
    tensor cores read it from eight different groups of four banks."""
    text = excerpts.cuda_source("wgmma.cu", "copy_rows")
    assert "(j ^ (r % 8)) << 4" in text, "copy_rows no longer swizzles as this picture draws"
    fig = fig or plt.figure(figsize=(9, 3.8))
    left, right = fig.subplots(1, 2)
    cmap = plt.get_cmap("tab10")
    for ax, title, where in (
        (left, "global memory: row r, chunks j = 0..7", lambda r, j: j),
        (right, "shared memory: chunk j of row r at j ^ (r % 8)", lambda r, j: j ^ (r % 8)),
    ):
        for r in range(8):
            for j in range(8):
                p = where(r, j)
                ax.add_patch(
                    patches.Rectangle(
                        (p, -r - 1), 1, 1, facecolor=cmap(j), alpha=0.85 if j == 0 else 0.3, edgecolor="0.4", lw=0.5
                    )
                )
                ax.text(p + 0.5, -r - 0.5, str(j), ha="center", va="center", fontsize=7)
            ax.text(-0.2, -r - 0.5, f"r={r}", ha="right", va="center", fontsize=6)
        for p in range(8):
            ax.text(p + 0.5, 0.25, f"{16 * p}", ha="center", fontsize=5, color="0.4")
        ax.set_title(title, fontsize=8)
        _finish(ax, (-1.2, 8.2), (-8.2, 0.8))
    fig.suptitle(
        "a 128-byte row = eight 16-byte chunks (byte offsets on top).\nChunk 0 (dark) of the eight rows: "
        "one column on the left, eight different columns on the right,\nso a read of one chunk column "
        "touches every group of four banks once",
        fontsize=7.5,
    )
    return fig


@_at_page_size
def async_pipeline(ax=None, slices: int = 7):
    """The cp.async pipeline of mma_async.cu with ASYNC_STAGES shared buffers (read from
    the file), one row per buffer: before the loop, slices 0 .. STAGES-2 are copied; at
    iteration s the block waits for slice s, starts copying slice s + STAGES - 1 into the
    buffer that slice s - 1 used, and multiplies slice s while the copies are in flight.
    One barrier per slice."""
    stages = _kernel_define("mma_async.cu", "ASYNC_STAGES")
    ax = _axes(ax, (9, 0.55 * stages + 1.6))

    def bar(y, start, end, color, text):
        ax.add_patch(
            patches.FancyBboxPatch(
                (start + 0.05, y - 0.3),
                end - start - 0.1,
                0.6,
                boxstyle="round,pad=0.01",
                facecolor=color,
                edgecolor="0.3",
                lw=0.5,
            )
        )
        ax.text((start + end) / 2, y, text, ha="center", va="center", fontsize=6.5)

    for s in range(slices):
        y = stages - 1 - s % stages
        issued = -1 if s < stages - 1 else s - (stages - 1)
        bar(y, issued, s, "#cfe0f0", f"cp.async\nslice {s}")
        bar(y, s, s + 1, "tab:orange", f"mma {s}")
    for it in range(slices):
        ax.axvline(it, color="0.5", lw=0.6, ls=":")
    ax.set_yticks(range(stages), [f"buffer {stages - 1 - b}" for b in range(stages)], fontsize=7)
    ax.set_xticks(
        [i + 0.5 for i in range(-1, slices)],
        ["before\nthe loop"] + [f"iteration\n{i}" for i in range(slices)],
        fontsize=6.5,
    )
    ax.set_xlim(-1.15, slices + 0.05)
    ax.set_ylim(-0.6, stages - 0.4)
    ax.set_title(
        f"ASYNC_STAGES = {stages}: blue, a slice's copy in flight; orange, the tensor cores on it.\n"
        "Dotted: wait for the slice, one barrier",
        fontsize=8,
    )
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(length=0)
    return ax


# --- chapter 16: split-K through memory, and in one cluster ----------------------------------


@_at_page_size
def cluster_splitk(fig=None):
    """Two K-slices of one output tile (matmul_cluster.cu's smallest cluster, tile from
    kernel_table.CLUSTER_SPLITK_TILES): left, in two launches, each slice written to scratch in
    global memory and summed by a second kernel; right, the two blocks of one cluster on two SMs
    of a GPC, rank 1's tile read by rank 0 from rank 1's shared memory, and only C written."""
    from minitorch_cuda.cuda.kernel_table import CLUSTER_SPLITK_TILES

    tile = CLUSTER_SPLITK_TILES[0]
    fig = fig or plt.figure(figsize=(7, 8.8))
    left, right = fig.subplots(2, 1)  # one above the other: each as wide as the page's column

    def box(ax, x, y, w, h, text, color, **kw):
        ax.add_patch(patches.FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", facecolor=color,
                                            edgecolor="0.3", lw=0.6, **kw))  # fmt: skip
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=7)

    def arrow(ax, start, end, text="", at=None, color="0.25"):
        ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": color, "lw": 1.0})
        if text:
            x, y = at or ((start[0] + end[0]) / 2 + 0.1, (start[1] + end[1]) / 2)
            ax.text(x, y, text, fontsize=6.5, va="center", color=color)

    for ax, title in ((left, "two launches: the slices go through global memory"),
                      (right, "one cluster: the slices meet in shared memory")):  # fmt: skip
        ax.set_title(title, fontsize=8)
        box(ax, 0, 0, 6, 1.0, "", "#eeeeee")
        ax.text(0.05, -0.15, "global memory", fontsize=6.5, va="center", color="0.4")
    box(left, 4.4, 0.15, 1.2, 0.5, "C", "white")
    box(right, 0.6, 0.15, 1.2, 0.5, "C", "white")
    # left: blocks z = 0, 1 store their slices to scratch; a second kernel sums them into C
    for s, x in enumerate((0.2, 2.1)):
        box(left, x, 3.3, 1.8, 0.9, f"block z = {s}\nK-slice {s}\nin registers", "#cfe0f0")
        box(left, x + 0.1, 0.15, 1.6, 0.5, f"scratch: partial {s}", "#f4d6b0")
        arrow(left, (x + 0.9, 3.3), (x + 0.9, 0.68), "store" if s == 0 else "", at=(x + 1.0, 2.0))
        arrow(left, (x + 0.9, 0.68), (4.3, 1.9))
    box(left, 4.0, 1.9, 1.9, 0.6, "matmul_splitk_reduce4\n(a second launch)", "#f0e0a0")
    arrow(left, (5.0, 1.9), (5.0, 0.68))
    # right: one GPC, two SMs; rank 1's tile in its shared memory, read by rank 0, C written once
    box(right, 0.1, 1.2, 5.8, 3.3, "", "#f7f7f7")
    right.text(0.25, 4.3, f"one GPC: a cluster of 2 blocks ({tile}), one per SM", fontsize=6.5, color="0.4")
    box(right, 0.3, 3.1, 2.2, 0.9, "rank 0\nK-slice 0 in registers", "#cfe0f0")
    box(right, 3.5, 3.1, 2.2, 0.9, "rank 1\nK-slice 1 in registers", "#cfe0f0")
    box(right, 3.5, 1.45, 2.2, 0.9, "rank 1's shared memory:\nits tile, by thread", "#d8ecd0")
    arrow(right, (4.6, 3.1), (4.6, 2.38), "store", at=(4.7, 2.75))
    arrow(right, (3.5, 1.9), (2.0, 3.08), "cluster.sync(), then\nrank 0 loads it", at=(1.3, 2.5), color="tab:green")
    arrow(right, (1.2, 3.1), (1.2, 0.68), "rank 0 writes\n0 + slice 0 + slice 1", at=(1.3, 1.6))
    for ax in (left, right):
        _finish(ax, (-0.1, 6.1), (-0.3, 4.6))
    return fig


@_at_page_size
def row_dependencies(ax=None, rows: int = 3):
    """What each phase of stage 13's persistent step reads (persistent_step.cu's header): the first
    layer's products mix every row and are split over blocks by tiles and slices of k; from their
    sum to D_1 a row needs only itself, so one block carries it through every later layer, its
    forward, its loss and its deltas, with no grid barrier; the gradients sum over the rows again,
    and the update needs the norm of all of them. Grid barriers (dashed) stand only where a block
    reads what other blocks wrote."""
    ax = _axes(ax, (7.6, 4.2))
    steps = ["sum,\n+b, act", "A2", "A3", "loss", "D3", "D2", "D1"]
    step_w, gap = 0.78, 0.22
    x_rows = 2.1
    xs = [x_rows + 0.1 + step_w / 2 + i * (step_w + gap) for i in range(len(steps))]
    rows_end = xs[-1] + step_w / 2 + 0.15
    phases = [("forward 1\ntiles x k-slices", 0.0, 1.7), ("rows: one block per row", x_rows, rows_end),
              ("gradients\nsums over rows", rows_end + 0.2, rows_end + 1.6),
              ("update", rows_end + 1.8, rows_end + 3.0)]  # fmt: skip
    top = rows - 0.3
    for name, x0, x1 in phases:
        ax.add_patch(patches.Rectangle((x0, -0.6), x1 - x0, top + 0.6, facecolor="#f4f4f4", edgecolor="none"))
        ax.text((x0 + x1) / 2, top + 0.1, name, ha="center", va="bottom", fontsize=7.5)
    barriers = (1.9, rows_end + 0.1, rows_end + 1.7)
    for x in barriers:
        ax.plot([x, x], [-0.6, top + 0.6], "--", color="tab:red", lw=1)
    ax.text(barriers[0], -0.75, "grid\nbarrier", color="tab:red", fontsize=7, ha="center", va="top")
    ax.text(barriers[1], -0.75, "the loss leaves\nfor the host", color="0.3", fontsize=7, ha="center", va="top")
    ax.add_patch(patches.FancyBboxPatch((0.15, -0.45), 1.4, rows - 0.1, boxstyle="round,pad=0.02",
                                        facecolor="#cfe0f0", edgecolor="0.4", lw=0.5))  # fmt: skip
    ax.text(0.85, (rows - 1) / 2 - 0.05, "X W1\npartial sums,\nevery row", ha="center", va="center", fontsize=6.5)
    middle = (rows - 1) / 2
    for r in range(rows):
        y = rows - 1 - r
        ax.text(x_rows + 0.05, y + 0.33, f"row {r}" if r < rows - 1 else "row 63", fontsize=6, color="0.35")
        for i, (x, label) in enumerate(zip(xs, steps)):
            ax.add_patch(patches.FancyBboxPatch((x - step_w / 2, y - 0.25), step_w, 0.5, boxstyle="round,pad=0.02",
                                                facecolor="#d8ecd0", edgecolor="0.4", lw=0.5))  # fmt: skip
            ax.text(x, y, label, ha="center", va="center", fontsize=6.5)
            if i:
                ax.annotate("", xy=(x - step_w / 2, y), xytext=(xs[i - 1] + step_w / 2, y),
                            arrowprops={"arrowstyle": "->", "lw": 0.7, "color": "0.3"})  # fmt: skip
        ax.annotate("", xy=(xs[0] - step_w / 2, y), xytext=(1.57, y),
                    arrowprops={"arrowstyle": "->", "lw": 0.7, "color": "0.3"})  # fmt: skip
        ax.annotate("", xy=(rows_end + 0.35, middle), xytext=(xs[-1] + step_w / 2, y),
                    arrowprops={"arrowstyle": "->", "lw": 0.6, "color": "tab:orange"})  # fmt: skip
    ax.add_patch(patches.FancyBboxPatch((rows_end + 0.35, middle - 0.5), 1.1, 1.0, boxstyle="round,pad=0.02",
                                        facecolor="#f4d6b0", edgecolor="0.4", lw=0.5))  # fmt: skip
    ax.text(rows_end + 0.9, middle, "gW, gb,\nsums of\nsquares", ha="center", va="center", fontsize=6.5)
    ax.annotate("", xy=(rows_end + 1.95, middle), xytext=(rows_end + 1.47, middle),
                arrowprops={"arrowstyle": "->", "lw": 0.7, "color": "tab:orange"})  # fmt: skip
    ax.add_patch(patches.FancyBboxPatch((rows_end + 1.95, middle - 0.5), 0.9, 1.0, boxstyle="round,pad=0.02",
                                        facecolor="#eadcf0", edgecolor="0.4", lw=0.5))  # fmt: skip
    ax.text(rows_end + 2.4, middle, "norm,\nclip,\nRmsProp", ha="center", va="center", fontsize=6.5)
    _finish(ax, (-0.1, rows_end + 3.1), (-1.4, top + 0.7))
    return ax


@_at_page_size
def thread_hierarchy(fig=None, blocks: int = 6, sms: int = 3):
    """A grid of blocks, a block of warps, a warp of 32 threads; the GPU hands whole blocks to
    streaming multiprocessors (SMs) as they have room, in no promised order, and a block stays on
    its SM until all its threads finish."""
    fig = fig or plt.figure(figsize=(7.6, 4.0))
    ax = fig.subplots()
    colors = plt.get_cmap("tab10").colors
    panels = {"grid": 0.0, "block": 3.6, "gpu": 7.2}
    # the grid: blocks numbered as blockIdx.x
    ax.add_patch(patches.Rectangle((0, 0.4), 3.1, 2.7, facecolor="#f4f4f4", edgecolor="0.3", lw=0.8))
    ax.text(1.55, 3.25, f"a grid of {blocks} blocks\n(gridDim.x = {blocks})", ha="center", fontsize=7.5)
    for b in range(blocks):
        x, y = 0.15 + (b % 3) * 1.0, 2.2 - (b // 3) * 1.0
        ax.add_patch(patches.Rectangle((x, y), 0.8, 0.7, facecolor=colors[b % 10], alpha=0.35, edgecolor="0.3"))
        ax.text(x + 0.4, y + 0.35, f"block {b}", ha="center", va="center", fontsize=6.5)
    x0 = panels["block"]
    ax.add_patch(patches.Rectangle((x0, 0.4), 3.1, 2.7, facecolor="white", edgecolor="0.3", lw=0.8))
    ax.text(x0 + 1.55, 3.25, "block 0: 128 threads\n(blockDim.x = 128)", ha="center", fontsize=7.5)
    for w in range(4):
        y = 2.45 - w * 0.6
        ax.add_patch(patches.Rectangle((x0 + 0.15, y), 2.8, 0.45, facecolor=colors[0], alpha=0.2, edgecolor="0.4"))
        ax.text(x0 + 0.22, y + 0.22, f"warp {w}", va="center", fontsize=6.5)
        for t in range(6):
            ax.add_patch(patches.Rectangle((x0 + 0.9 + t * 0.17, y + 0.1), 0.12, 0.25, facecolor="0.55",
                                           edgecolor="none"))  # fmt: skip
        ax.text(x0 + 2.9, y + 0.22, "32 threads", va="center", ha="right", fontsize=6, color="0.3")
    ax.annotate("", xy=(x0 - 0.02, 2.55), xytext=(3.1, 2.55),
                arrowprops={"arrowstyle": "->", "lw": 0.7, "color": "0.4"})  # fmt: skip
    ax.text(
        x0 + 1.55,
        0.25,
        "threadIdx.x = 0 ... 127; a warp issues\none instruction for its 32 threads",
        ha="center",
        va="top",
        fontsize=6.5,
    )
    x0 = panels["gpu"]
    ax.add_patch(patches.Rectangle((x0, 0.4), 3.1, 2.7, facecolor="#f7f7f7", edgecolor="0.3", lw=0.8))
    ax.text(x0 + 1.55, 3.25, "the GPU: whole blocks\ngo to SMs with room", ha="center", fontsize=7.5)
    for s in range(sms):
        y = 2.3 - s * 0.9
        ax.add_patch(patches.Rectangle((x0 + 0.1, y), 2.9, 0.7, facecolor="white", edgecolor="0.4"))
        ax.text(x0 + 0.17, y + 0.35, f"SM {s}", va="center", fontsize=6.5)
        for slot, b in enumerate(range(s, blocks, sms)):
            ax.add_patch(patches.Rectangle((x0 + 0.75 + slot * 1.1, y + 0.1), 1.0, 0.5, facecolor=colors[b % 10],
                                           alpha=0.35, edgecolor="0.3"))  # fmt: skip
            ax.text(x0 + 1.25 + slot * 1.1, y + 0.35, f"block {b}", ha="center", va="center", fontsize=6)
    ax.text(x0 + 1.55, 0.25, "one assignment of many:\nCUDA promises no order", ha="center", va="top", fontsize=6.5)
    _finish(ax, (-0.1, 10.4), (-0.5, 3.9))
    return fig


@_at_page_size
def barrier_ring(ax=None):
    """The ring of shared-memory stages of wgmma_tma.cu (WT_STAGES of them, read from the kernel
    file) and the two mbarriers of each: the producer warpgroup waits until stage s is empty,
    announces the bytes it expects on full[s] and has one thread issue the TMA copies; the copy
    engine completes full[s] when the bytes have landed; each consumer warpgroup waits on full[s],
    issues its wgmma products from the stage, and arrives on empty[s] once it has read it. The
    waits name a phase's parity, so the ring turns lap after lap without a reset."""
    stages = _kernel_define("wgmma_tma.cu", "WT_STAGES")
    ax = _axes(ax, (7.6, 4.4))
    width, gap = 1.5, 0.4
    total = stages * width + (stages - 1) * gap
    x0 = 1.0 + (7.0 - total) / 2
    green, red = "tab:green", "tab:red"
    ax.add_patch(patches.FancyBboxPatch((1.0, 3.7), 7.0, 0.6, boxstyle="round,pad=0.02", facecolor="#f4d6b0",
                                        edgecolor="0.4", lw=0.6))  # fmt: skip
    producer = "producer: warpgroup 0 (one thread issues every TMA copy)"
    ax.text(4.5, 4.0, producer, ha="center", va="center", fontsize=7.5)
    ax.add_patch(patches.FancyBboxPatch((1.0, -0.3), 7.0, 0.6, boxstyle="round,pad=0.02", facecolor="#cfe0f0",
                                        edgecolor="0.4", lw=0.6))  # fmt: skip
    ax.text(4.5, 0.0, "consumers: warpgroups 1 and 2, each reading every stage",
            ha="center", va="center", fontsize=7.5)  # fmt: skip
    for s in range(stages):
        x = x0 + s * (width + gap)
        ax.add_patch(patches.Rectangle((x, 1.5), width, 1.0, facecolor="#eeeeee", edgecolor="0.3", lw=0.8))
        ax.text(x + width / 2, 2.15, f"stage {s}", ha="center", va="center", fontsize=7.5)
        ax.text(x + width / 2, 1.8, "A and B tiles", ha="center", va="center", fontsize=6.5, color="0.3")
        # full[s]: the producer's copy lands; the consumers wait for it
        ax.annotate("", xy=(x + 0.35, 2.52), xytext=(x + 0.35, 3.68), arrowprops={"arrowstyle": "->", "lw": 0.8,
                                                                                 "color": green})  # fmt: skip
        ax.text(x + 0.42, 3.1, f"full[{s}]", fontsize=6.5, color=green)
        ax.annotate("", xy=(x + 0.35, 0.32), xytext=(x + 0.35, 1.48), arrowprops={"arrowstyle": "->", "lw": 0.8,
                                                                                 "color": green})  # fmt: skip
        # empty[s]: the consumers have read the stage; the producer waits for it before the next lap
        ax.annotate("", xy=(x + 1.2, 1.48), xytext=(x + 1.2, 0.32), arrowprops={"arrowstyle": "->", "lw": 0.8,
                                                                               "color": red, "ls": "--"})  # fmt: skip
        ax.text(x + 1.26, 0.9, f"empty[{s}]", fontsize=6.5, color=red, ha="left")
    ax.text(0.9, 3.1, "wait empty[s],\nexpect_tx, copy", fontsize=6.5, ha="right", va="center", color=green)
    ax.text(0.9, 0.9, "wait full[s], wgmma;\nthen arrive\non empty[s]", fontsize=6.5, ha="right", va="center",
            color="0.25")  # fmt: skip
    ax.text(8.1, 2.0, f"stage {stages - 1} is\nfollowed by\nstage 0 again:\nthe next lap's\nwaits name\nthe "
                      "other parity", fontsize=6.5, va="center", color="0.3")  # fmt: skip
    _finish(ax, (-0.6, 10.4), (-0.5, 4.5))
    return ax
