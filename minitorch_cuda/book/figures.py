"""Figures drawn from the recorded results: the ladder, profiles, GFLOP/s and rooflines.

Every function takes dicts as loaded by ``minitorch_cuda.results.load``
(``bench_stages``, ``profiles``, ``matmul``), draws on the Axes it is given (or
a new one) and returns that Axes. Nothing here needs a GPU or PyCUDA. The
schematics that show no measurement are in ``diagrams``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from ..experiments.tma_ablation import fractions
from ..profiler import draw_timeline
from . import style
from .tables import MATMUL_LABELS

# The blog's own timings (its GPU, its C++ framework) as (seconds, batches timed).
# Naive: 50 batches; after Opt. 1: the same 50; final: one full epoch of 844. The blog does
# not say whether the first two cover 50 batches or a full epoch: the ladder shows both.
BLOG_SECONDS = {0: (997.691, 50), 1: (2.399, 50), 8: (0.206, 844)}
EPOCH_STEPS = 844


def _axes(ax, size=(7, 3.5)):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def shape_label(row: dict) -> str:
    """A matmul row's name for an axis: ``512³`` for a cube, else the name over ``M×N×K``."""
    if row["label"].endswith("^3") and row["M"] == row["N"] == row["K"]:
        return row["label"][:-2] + "³"
    return f"{row['label']}\n{row['M']}×{row['N']}×{row['K']}"


# Where a point's label may go, in points from the point: right, left, above, below,
# then further out (drawn with a leader line).
_OFFSETS = [
    (5, 2),
    (5, -9),
    (-5, 2),
    (-5, -9),
    (0, 7),
    (0, -14),
    (14, 12),
    (14, -20),
    (-14, 12),
    (-14, -20),
    (24, 0),
    (-24, 0),
    (0, 20),
    (0, -26),
]


def place_labels(ax, xs, ys, labels, fontsize: float = 6.5, avoid=()) -> None:
    """Annotate points so that no label covers another label or a point: each label takes
    the first of a few positions around its point that is still free (the limits must be
    final). ``avoid`` adds (x, y) data points that labels must keep clear of."""
    ax.figure.canvas.draw()  # final transforms and a renderer to measure text
    # labels are placed at the size the page will show them (style.legible would raise them later)
    fontsize = max(fontsize, style.MIN_PT / style.page_scale(ax.figure))
    renderer = ax.figure.canvas.get_renderer()
    to_px = ax.transData.transform
    scale = ax.figure.dpi / 72
    obstacles = [(*(to_px((x, y)) - 4 * scale), *(to_px((x, y)) + 4 * scale)) for x, y in [*zip(xs, ys), *avoid]]
    inside = ax.get_window_extent()

    def overlap(box):
        out = box[0] < inside.x0 or box[2] > inside.x1 or box[1] < inside.y0 or box[3] > inside.y1
        hits = sum(box[0] < o[2] and o[0] < box[2] and box[1] < o[3] and o[1] < box[3] for o in obstacles)
        return hits + 10 * out

    for x, y, label in sorted(zip(xs, ys, labels), key=lambda p: -p[1]):
        label = label.replace("^3", "³")
        text = ax.text(0, 0, label, fontsize=fontsize)
        size = text.get_window_extent(renderer)
        text.remove()
        px, py = to_px((x, y))
        best = None
        for dx, dy in _OFFSETS:
            x0 = px + dx * scale - (size.width if dx < 0 else size.width / 2 if dx == 0 else 0)
            box = (x0, py + dy * scale, x0 + size.width, py + dy * scale + size.height)
            score = overlap(box)
            if best is None or score < best[0]:
                best = (score, dx, dy, box)
            if score == 0:
                break
        _, dx, dy, box = best
        far = abs(dx) > 10 or abs(dy) > 10
        ax.annotate(
            label,
            (x, y),
            textcoords="offset points",
            xytext=(dx, dy),
            fontsize=fontsize,
            ha="right" if dx < 0 else "center" if dx == 0 else "left",
            va="bottom",
            arrowprops=dict(arrowstyle="-", lw=0.4, color="0.4", shrinkA=0, shrinkB=3) if far else None,
        )
        obstacles.append(box)


# --- the ladder and the profiles ------------------------------------------------------


def ladder(bench: dict, ax=None, blog: dict | None = None, peers: tuple[str, ...] = ("torch",)):
    """Seconds per training step for every stage (log scale), the blog's steps
    where it gives them, and each PyTorch peer the record holds (``torch``: eager;
    ``torch_graph``: its whole step in one CUDA graph) as a horizontal line."""
    ax = _axes(ax, (8, 4))
    blog = BLOG_SECONDS if blog is None else blog
    rows = bench["stages"]
    xs = [r["stage"] for r in rows]
    ys = [r["s_per_step"] for r in rows]
    ax.plot(xs, ys, "o-", color="tab:blue", label=f"minitorch-cuda ({bench['device']['name']})")
    if all(r.get("epoch_seconds") for r in rows):  # min to max over the epochs (the rounds)
        lo = [min(r["epoch_seconds"]) / r["batches_per_epoch"] for r in rows]
        hi = [max(r["epoch_seconds"]) / r["batches_per_epoch"] for r in rows]
        below, above = [y - v for y, v in zip(ys, lo)], [v - y for y, v in zip(ys, hi)]
        ax.errorbar(xs, ys, yerr=[below, above], fmt="none", ecolor="tab:blue", elinewidth=1, capsize=3)
    blog_points = []
    if blog:
        bx = sorted(blog)
        blog_points = [(s, blog[s][0] / blog[s][1]) for s in bx]
        ax.plot(bx, [y for _, y in blog_points], "s", color="tab:orange", label="the blog (its GPU)")
        other = [(s, blog[s][0] / EPOCH_STEPS) for s in bx if blog[s][1] != EPOCH_STEPS]
        if other:  # the same seconds read as a full epoch
            for s, y in other:
                ax.plot([s, s], [y, dict(blog_points)[s]], ":", color="tab:orange", lw=1)
            ax.plot(*zip(*other), "s", mfc="none", color="tab:orange", label="the blog, read as full epochs")
            blog_points += other
    peer_style = {"torch": ("tab:green", ":"), "torch_graph": ("tab:red", "--")}
    shown = [bench[p] for p in peers if bench.get(p)]
    for peer, row in zip(peers, shown):
        color, line = peer_style.get(peer, ("0.4", "-."))
        ax.axhline(row["s_per_step"], color=color, ls=line, label=row["name"])
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.7)
    labels = [f"{r['s_per_step'] * 1e3:.3g} ms" + ("*" if r["batches_per_epoch"] < 100 else "") for r in rows]
    # labels keep clear of the blog's points, of the line through ours and of PyTorch's
    avoid = list(blog_points)
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        avoid += [(x0 + f * (x1 - x0), y0 * (y1 / y0) ** f) for f in (0.25, 0.5, 0.75)]
    for row in shown:
        avoid += [(min(xs) + i / 4, row["s_per_step"]) for i in range(4 * (max(xs) - min(xs)) + 1)]
    place_labels(ax, xs, ys, labels, fontsize=7, avoid=avoid)  # * marks the partial epochs
    ax.set_xlabel("stage (each keeps the optimizations below it)")
    ax.set_ylabel("seconds per training step")
    ax.legend(fontsize=8)
    ax.grid(True, which="major", axis="y", alpha=0.3)
    return ax


def kernel_shares(before: dict, after: dict, ax=None, top: int = 8):
    """Paired bars: GPU time per step of the ``top`` names, before and after a stage, as the
    median event times the events per step: one event stretched by a pause of the host (a
    37 ms ``ew_relu_backward`` among 13 us ones) would otherwise outgrow every real bar."""
    ax = _axes(ax, (8, 0.45 * top + 1.2))

    def per_step(entry):
        return {r["name"]: r["med_us"] * r["instances"] / entry["steps"] for r in entry["stats"]}

    b, a = per_step(before), per_step(after)
    names = sorted(set(b) | set(a), key=lambda n: -max(b.get(n, 0), a.get(n, 0)))[:top][::-1]
    ys = range(len(names))
    h = 0.38
    ax.barh([y + h / 2 for y in ys], [b.get(n, 0) for n in names], h, label=f"stage {before['stage']}")
    ax.barh([y - h / 2 for y in ys], [a.get(n, 0) for n in names], h, label=f"stage {after['stage']}")
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.set_xlabel("event time per training step (us): median event x events per step")
    ax.legend(fontsize=8)
    return ax


def timeline(entry: dict, ax=None, window: tuple[float, float] | None = None):
    """The recorded events of a profile (``profiler.draw_timeline``: one row per name,
    kernels blue, copies red), those that start inside ``window`` (us) if it is given."""
    events = entry["timeline"]
    if window:
        events = [e for e in events if window[0] <= e[2] <= window[1]]
    ax = draw_timeline(events, ax)
    ax.set_title(f"stage {entry['stage']}: kernels blue, copies red", fontsize=9)
    return ax


# --- matmul and the roofline -------------------------------------------------------------


def gflops_bars(matmul: dict, ax=None, kernels: list[str] | None = None, labels: list[str] | None = None):
    """Grouped bars of GFLOP/s per shape, one bar per kernel, on a log axis."""
    rows = [r for r in matmul["rows"] if labels is None or r["label"] in labels]
    kernels = kernels or list(rows[0]["gflops"])
    ax = _axes(ax, (9, 4))
    width = 0.8 / len(kernels)
    for i, name in enumerate(kernels):
        xs = [j + (i - (len(kernels) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [r["gflops"].get(name, float("nan")) for r in rows], width, label=MATMUL_LABELS.get(name, name))
        for x, r in zip(xs, rows):
            if name not in r["gflops"]:  # not timed at this shape: say so instead of an empty slot
                ax.text(x, 0.02, "n/t", transform=ax.get_xaxis_transform(), ha="center", fontsize=5, color="0.4")
    if any(name not in r["gflops"] for r in rows for name in kernels):
        ax.text(1, -0.16, "n/t: not timed at this shape", transform=ax.transAxes, ha="right", fontsize=6, color="0.4")
    ax.set_xticks(range(len(rows)), [shape_label(r) for r in rows], fontsize=7)
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.set_yscale("log")
    ax.set_ylabel("GFLOP/s")
    # at most three to a row, rows as even as can be: a wider legend widens the figure, which
    # the page then shrinks, text included
    ncol = len(kernels) if len(kernels) <= 3 else -(-len(kernels) // -(-len(kernels) // 3))
    ax.legend(fontsize=7, ncol=ncol, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    return ax


def peaks(device: dict) -> tuple[float, float]:
    """(FP32 FLOP/s, DRAM bytes/s) from the recorded device properties: 128 FP32
    lanes per SM on Hopper, an FMA counting 2 flops; HBM moves 2 words per clock."""
    flops = device["multiprocessors"] * 128 * 2 * device["clock_khz"] * 1e3
    bandwidth = 2 * device["memory_clock_khz"] * 1e3 * device["memory_bus_width_bits"] / 8
    return flops, bandwidth


def intensity(M: int, N: int, K: int) -> float:
    """Flops per byte if A and B are read once and C written once (float32)."""
    return 2.0 * M * N * K / (4.0 * (M * K + K * N + M * N))


def roofline(device: dict, matmul: dict, ax=None, kernels: tuple[str, ...] = ("matmul_tiled", "cublas")):
    """Bandwidth and FP32 peak lines, every measured matmul placed by its intensity."""
    ax = _axes(ax, (7, 4.5))
    flops, bandwidth = peaks(device)
    ridge = flops / bandwidth
    xs = sorted([2.0**e for e in range(-2, 11)] + [ridge])
    ax.plot(xs, [min(flops, bandwidth * x) / 1e9 for x in xs], "k-", lw=1.5)
    ax.axvline(ridge, color="grey", ls=":", lw=0.8)
    ax.text(ridge * 1.1, flops / 1e9 * 0.5, f"ridge {ridge:.0f} flop/B", fontsize=7, color="grey")
    ax.text(xs[0] * 1.2, flops / 1e9 * 1.15, f"FP32 peak {flops / 1e12:.0f} TFLOP/s", fontsize=7)
    ax.text(xs[0] * 1.2, bandwidth * xs[0] * 1.6 / 1e9, f"{bandwidth / 1e12:.1f} TB/s", fontsize=7, rotation=28)
    markers = {"matmul_naive": "v", "matmul_batched": "^", "matmul_tiled": "o", "cublas": "s"}
    placed = {}
    for name in kernels:
        pts = [
            (intensity(r["M"], r["N"], r["K"]), r["gflops"][name], r["label"])
            for r in matmul["rows"]
            if name in r["gflops"]
        ]
        xs_, ys_, labels = zip(*pts)
        ax.scatter(xs_, ys_, marker=markers.get(name, "o"), label=MATMUL_LABELS.get(name, name), zorder=3)
        placed[name] = (xs_, ys_, labels)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    others = [(x, y) for name in kernels[:-1] for x, y in zip(*placed[name][:2])]
    place_labels(ax, *placed[kernels[-1]], avoid=others)  # the last kernel's points carry the shape names
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop per byte of DRAM traffic, ideal)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"Roofline of the {device['name']} (FP32, no tensor cores)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return ax


def roofline_points(device: dict, points: list[dict], ax=None, copy_gbps: float | None = None):
    """The FP32 roofline with arbitrary kernels on it. Each point is a dict with
    ``label``, ``intensity`` (flop/byte), ``gflops`` and ``group`` (one marker per group).
    ``copy_gbps`` adds the measured copy bandwidth as a second, lower roof."""
    ax = _axes(ax, (8, 5))
    flops, bandwidth = peaks(device)
    xs = sorted([2.0**e for e in range(-6, 12)] + [flops / bandwidth])  # the ridge, where the roofs meet
    ax.plot(
        xs,
        [min(flops, bandwidth * x) / 1e9 for x in xs],
        "k-",
        lw=1.5,
        label=f"model roofs: {bandwidth / 1e12:.1f} TB/s, {flops / 1e12:.1f} TFLOP/s",
    )
    if copy_gbps:
        ax.plot(
            xs,
            [min(flops / 1e9, copy_gbps * x) for x in xs],
            "k--",
            lw=0.8,
            label=f"measured copy {copy_gbps / 1e3:.2f} TB/s",
        )
    markers = "os^vDPX*<>"
    groups = list(dict.fromkeys(p["group"] for p in points))
    for g, marker in zip(groups, markers):
        pts = [p for p in points if p["group"] == g]
        ax.scatter([p["intensity"] for p in pts], [p["gflops"] for p in pts], marker=marker, label=g, zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    place_labels(ax, [p["intensity"] for p in points], [p["gflops"] for p in points], [p["label"] for p in points])
    ax.set_xlabel("arithmetic intensity (flop per byte of DRAM traffic, ideal)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"Roofline of the {device['name']} (FP32)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return ax


def bandwidth_bars(table: dict, ax=None):
    """GB/s of each kernel of ``bench.bandwidth_table`` with the copy's as a line, each bar
    marked with its share of the copy."""
    ax = _axes(ax, (8, 3.5))
    kernels = table["kernels"]
    names = list(kernels)
    copy = kernels["memcpy_dtod"]["gb_per_s"]
    ax.bar(range(len(names)), [kernels[n]["gb_per_s"] for n in names], color="tab:blue")
    for i, n in enumerate(names):  # inside the bar's top, clear of the copy's line
        share = kernels[n]["gb_per_s"] / copy
        ax.text(i, kernels[n]["gb_per_s"] - copy * 0.04, f"{share:.0%}", ha="center", va="top", fontsize=7, color="w")
    ax.axhline(copy, color="k", ls="--", lw=0.8, label="device-to-device copy (100%)")
    ax.set_ylim(0, copy * 1.2)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("GB/s")
    ax.legend(fontsize=7, loc="upper right", frameon=False)
    return ax


# --- launches and step time (chapter 17) ---------------------------------------------------


def launches_vs_step(series: dict[str, list[dict]], ax=None, model_stage: int = 8, line: tuple[int, int] = (8, 10)):
    """Microseconds per training step against kernel launches per step, one point per stage
    row (``bench.run_stage`` rows), one marker per run. Dashed: the crude model that charges
    every launch the same share of stage ``model_stage``'s step. Dotted: the straight line
    through stages ``line`` of the first run, whose value at zero launches is the time no
    launch count explains."""
    ax = _axes(ax, (7.5, 4.5))
    first = next(iter(series.values()))
    by_stage = {r["stage"]: r for r in first}

    def xy(r):
        return r["counters_per_step"]["launches"], r["s_per_step"] * 1e6

    most = max(xy(r)[0] for rows in series.values() for r in rows) * 1.1
    if model_stage in by_stage:
        x, y = xy(by_stage[model_stage])
        ax.plot([0, most], [0, most * y / x], "k--", lw=0.8, label=f"{y / x:.0f} us per launch (stage {model_stage})")
    if all(s in by_stage for s in line):
        (x0, y0), (x1, y1) = xy(by_stage[line[0]]), xy(by_stage[line[1]])
        slope = (y1 - y0) / (x1 - x0)
        ax.plot(
            [0, most],
            [y0 - slope * x0, y0 + slope * (most - x0)],
            ":",
            color="tab:red",
            lw=1.2,
            label=f"through stages {line[0]} and {line[1]}: {slope:.1f} us per launch + {y0 - slope * x0:.0f} us",
        )
    xs, ys, labels = [], [], []
    for (name, rows), marker in zip(series.items(), "os^D"):
        pts = [xy(r) for r in rows]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=name, zorder=3)
        xs += [p[0] for p in pts]
        ys += [p[1] for p in pts]
        labels += [f"stage {r['stage']}" for r in rows]
    ax.set_xlim(0, most)
    ax.set_ylim(0, max(ys) * 1.35)
    lines = [(x, y) for line in ax.get_lines() for x, y in zip(*line.get_data())]
    along = [
        (x0 + f * (x1 - x0), y0 + f * (y1 - y0))
        for (x0, y0), (x1, y1) in zip(lines[::2], lines[1::2])
        for f in [i / 40 for i in range(41)]
    ]  # labels keep clear of the two model lines
    place_labels(ax, xs, ys, labels, fontsize=7, avoid=along)
    ax.set_xlabel("kernel launches per training step")
    ax.set_ylabel("microseconds per training step")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, alpha=0.3)
    return ax


def step_timelines(steps: dict[str, dict], ax=None):
    """One training step per row, as a replayed graph runs it: the events of one profiled
    step (``steps[label]["events"]``: name, kind, event microseconds, in queue order) laid
    back to back, kernels blue and the read-back red, and a black tick at the step's measured
    time (``steps[label]["step_us"]``); grey: the part of the step that no event covers."""
    ax = _axes(ax, (7.5, 0.9 + 0.8 * len(steps)))
    colors = {"kernel": "tab:blue", "memcpy": "tab:red"}
    for y, step in enumerate(reversed(steps.values())):
        at = 0.0
        for _, kind, duration in step["events"]:
            ax.broken_barh([(at, duration)], (y - 0.3, 0.6), facecolors=colors.get(kind, "tab:gray"), edgecolor="white",
                           linewidth=0.5)  # fmt: skip
            at += duration
        if step["step_us"] > at:
            ax.broken_barh([(at, step["step_us"] - at)], (y - 0.3, 0.6), facecolors="0.85")
        ax.plot([step["step_us"]] * 2, [y - 0.4, y + 0.4], "k-", lw=1.5)
        kernels = sum(kind == "kernel" for _, kind, _ in step["events"])
        ax.annotate(f"{step['step_us']:.0f} us, {kernels} kernel{'s' * (kernels != 1)}", (step["step_us"], y + 0.4),
                    xytext=(4, 0), textcoords="offset points", fontsize=7, va="top")  # fmt: skip
    ax.set_yticks(range(len(steps)), list(reversed(steps)), fontsize=8)
    ax.set_ylim(-0.6, len(steps) - 0.4)
    ax.set_xlim(0, max(max(s["step_us"], sum(e[2] for e in s["events"])) for s in steps.values()) * 1.25)
    ax.set_xlabel("microseconds in one training step")
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def phase_bars(phases: dict[str, dict], ax=None):
    """Stage 13's kernel phase by phase, one row per build (``phases[label]``: a
    ``PersistentStep.phase_times`` record): each phase's median microseconds laid back to back,
    named where the name fits its segment at the page's size, and the kernel's median total at
    the row's end."""
    ax = _axes(ax, (7.5, 0.9 + 0.8 * len(phases)))
    names = list(dict.fromkeys(r["phase"] for run in phases.values() for r in run["phases"]))
    palette = plt.get_cmap("tab20").colors
    color = {name: palette[i % len(palette)] for i, name in enumerate(names)}  # a phase keeps its color
    ax.set_yticks(range(len(phases)), list(reversed(phases)), fontsize=8)
    ax.set_ylim(-0.6, len(phases) - 0.4)
    ax.set_xlim(0, max(r["total"]["median_us"] for r in phases.values()) * 1.15)
    ax.set_xlabel("microseconds of stage 13's kernel, phase by phase (block 0's clock)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.figure.canvas.draw()  # final limits, and a renderer to measure the names
    renderer, fontsize = ax.figure.canvas.get_renderer(), style.MIN_PT / style.page_scale(ax.figure)
    for y, run in enumerate(reversed(phases.values())):
        at = 0.0
        for row in run["phases"]:
            width = row["median_us"]
            ax.broken_barh([(at, width)], (y - 0.3, 0.6), facecolors=color[row["phase"]], edgecolor="white",
                           linewidth=0.5)  # fmt: skip
            name = row["phase"].replace("forward", "fwd").replace("backward", "bwd")
            text = ax.text(at + width / 2, y, name, ha="center", va="center", fontsize=fontsize)
            room = ax.transData.transform((at + width, y))[0] - ax.transData.transform((at, y))[0]
            if text.get_window_extent(renderer).width > room - 4:  # does not fit: left unnamed
                text.remove()
            at += width
        ax.annotate(f"{run['total']['median_us']:.0f} us", (at, y), xytext=(4, 0), textcoords="offset points",
                    fontsize=7, va="center")  # fmt: skip
    return ax


# --- the tile evaluation (chapter 20) ------------------------------------------------------


def ratio_bars(data: dict, cases: list[str], log2: int, ax=None):
    """Each model's throughput as a ratio to CUDA C (1 = as fast) for every case and dtype
    of a tile_eval result at 2^``log2`` elements, with the spread of the ratio over the
    model's quartile times, as ``tile_eval.report.ratio_table`` prints it. Every bar carries
    its value, so that the outliers far below 1 stay readable on a linear axis."""
    by: dict[tuple, dict] = {}
    for r in data.get("throughput", []):
        if r["log2"] == log2 and r["case"] in cases:
            by.setdefault((r["case"], r["dtype"]), {})[r["model"]] = r
    groups = sorted(by, key=lambda k: (cases.index(k[0]), k[1]))
    colors = {"triton": "tab:blue", "triton_tilemax": "tab:purple", "cupy": "tab:green", "cutile": "tab:brown"}
    bars = []  # (y, model, ratio, low, high), top to bottom
    y, ticks = 0.0, []
    for g in groups:
        base = by[g].get("cuda_c")
        present = [m for m in colors if m in by[g] and base and "ratio_to_cuda_c" in by[g][m]]
        for i, m in enumerate(present):
            r = by[g][m]
            bars.append(
                (y + i, m, r["ratio_to_cuda_c"], base["median_ms"] / r["q3_ms"], base["median_ms"] / r["q1_ms"])
            )
        ticks.append((y + (len(present) - 1) / 2, f"{g[0]} {g[1]}"))
        y += len(present) + 0.6
    ax = _axes(ax, (8, 0.15 * y + 1.2))
    for model in colors:
        mine = [b for b in bars if b[1] == model]
        if mine:
            ax.barh(
                [-b[0] for b in mine],
                [b[2] for b in mine],
                0.85,
                color=colors[model],
                label=model,
                xerr=[[b[2] - b[3] for b in mine], [b[4] - b[2] for b in mine]],
                error_kw={"lw": 0.5, "capsize": 1},
            )
    for b in bars:
        ax.text(b[4] + 0.015, -b[0], f"{b[2]:.2f}x" if b[2] >= 0.01 else f"{b[2]:.1g}x", va="center", fontsize=5.5)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks([-t[0] for t in ticks], [t[1] for t in ticks], fontsize=6.5)
    ax.set_ylim(-y + 0.3, 1)
    ax.set_xlim(0, max(1.2, max(b[4] for b in bars) + 0.15))
    ax.set_xlabel(f"throughput relative to CUDA C at 2^{log2} elements (1 = as fast)")
    ax.legend(fontsize=7, ncol=len(colors), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def ablation_bars(record: dict, ax=None):
    """The TMA kernel's ablation (experiments/tma_ablation.py): each variant's GFLOP/s as a fraction
    of cuBLAS TF32 in the same run, one bar per size, the whole kernel first."""
    shares = fractions(record)
    sizes = list(record["cublas_tf32_gflops"])
    ax = _axes(ax, (7, 0.45 * len(shares) * len(sizes) + 1.0))
    height = 0.8 / len(sizes)
    for i, n in enumerate(sizes):
        ys = [j + (i - (len(sizes) - 1) / 2) * height for j in range(len(shares))]
        values = [per.get(n, float("nan")) for per in shares.values()]
        ax.barh(ys, values, height, label=f"{n}³")
        for y, v in zip(ys, values):
            ax.text(v + 0.01, y, f"{v:.0%}", va="center", fontsize=7)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(range(len(shares)), list(shares), fontsize=7)
    ax.invert_yaxis()  # the whole kernel on top
    top = max((v for per in shares.values() for v in per.values()), default=1.0)
    ax.set_xlim(0, max(1.1, top + 0.12))
    ax.set_xlabel("GFLOP/s as a fraction of cuBLAS TF32 in the same run (1 = as fast)")
    ax.legend(fontsize=7, ncol=len(sizes), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return ax
