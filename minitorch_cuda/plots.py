"""Figures and excerpts the optimization chapters share.

Every plotting function takes dicts as loaded by ``minitorch_cuda.results.load``
(``bench_stages``, ``profiles``, ``matmul``), draws on the Axes it is given (or
a new one) and returns that Axes. Nothing here needs a GPU or PyCUDA.

The excerpt helpers read code out of the package files instead of importing
it: the CUDA modules refuse to import without PyCUDA, and a chapter that shows
the real file can never drift from it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib import patches

PACKAGE = Path(__file__).resolve().parent

# The blog's own timings (its GPU, its C++ framework) as (seconds, batches timed).
# Naive: 50 batches; after Opt. 1: the same 50; final: one full epoch of 844.
BLOG_SECONDS = {0: (997.691, 50), 1: (2.399, 50), 8: (0.206, 844)}


def _axes(ax, size=(7, 3.5)):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


# --- the ladder --------------------------------------------------------------------


def ladder(bench: dict, ax=None, blog: dict | None = None):
    """Seconds per training step for every stage (log scale), the blog's steps
    where it gives them, and PyTorch eager as a horizontal line."""
    ax = _axes(ax, (8, 4))
    blog = BLOG_SECONDS if blog is None else blog
    rows = bench["stages"]
    xs = [r["stage"] for r in rows]
    ys = [r["s_per_step"] for r in rows]
    ax.plot(xs, ys, "o-", color="tab:blue", label=f"minitorch-cuda ({bench['device']['name']})")
    for r in rows:
        partial = r["batches_per_epoch"] < 100
        ax.annotate(
            f"{r['s_per_step'] * 1e3:.3g} ms" + ("*" if partial else ""),
            (r["stage"], r["s_per_step"]),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            fontsize=7,
        )
    if blog:
        bx = sorted(blog)
        ax.plot(bx, [blog[s][0] / blog[s][1] for s in bx], "s", color="tab:orange", label="the blog (its GPU)")
    if bench.get("torch"):
        ax.axhline(bench["torch"]["s_per_step"], color="tab:green", ls=":", label=bench["torch"]["name"])
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xlabel("stage (each keeps the optimizations below it)")
    ax.set_ylabel("seconds per training step")
    ax.legend(fontsize=8)
    ax.grid(True, which="major", axis="y", alpha=0.3)
    return ax


def stage_row(bench: dict, stage: int) -> dict:
    return next(r for r in bench["stages"] if r["stage"] == stage)


def rows_text(rows: list[dict]) -> str:
    """Benchmark rows (from ``bench.run_stage``) as a table, each against the first."""
    head = f"{'stage':>5} {'batches':>8} {'median s':>9} {'ms/step':>9} {'speed-up':>9}  what changed"
    lines = [head, "-" * (len(head) + 20)]
    for r in rows:
        lines.append(
            f"{r['stage']:>5} {r['batches_per_epoch']:>8} {r['median_s']:9.3f} {r['s_per_step'] * 1e3:9.3f} "
            f"{rows[0]['s_per_step'] / r['s_per_step']:8.2f}x  {r['description']}"
        )
    return "\n".join(lines)


# --- profiles ------------------------------------------------------------------------


def profile_entry(profiles: dict, stage: int) -> dict:
    return next(p for p in profiles["stages"] if p["stage"] == stage)


def stats_text(entry: dict, top: int | None = None) -> str:
    """A recorded profile as a table in the form of ``nsys stats`` (microseconds)."""
    head = f"{'Time (%)':>8} {'Total (us)':>10} {'Inst':>5} {'Avg':>7} {'Med':>7} {'Min':>7} {'Max':>7}  Name"
    lines = [head, "-" * (len(head) + 14)]
    for r in entry["stats"][:top]:
        lines.append(
            f"{r['time_pct']:8.1f} {r['total_us']:10.1f} {r['instances']:5d} {r['avg_us']:7.2f} "
            f"{r['med_us']:7.2f} {r['min_us']:7.2f} {r['max_us']:7.2f}  {r['name']}"
        )
    return "\n".join(lines)


def counters_text(*entries: tuple[str, dict]) -> str:
    """Counter dicts side by side: ``counters_text(("stage 0", c0), ("stage 1", c1))``."""
    names = list(entries[0][1])
    lines = [f"{'per step':>14}" + "".join(f"{label:>14}" for label, _ in entries)]
    for name in names:
        lines.append(f"{name:>14}" + "".join(f"{c.get(name, 0):14,.2f}" for _, c in entries))
    return "\n".join(lines)


def kernel_shares(before: dict, after: dict, ax=None, top: int = 8):
    """Paired bars: GPU time per step of the ``top`` names, before and after a stage."""
    ax = _axes(ax, (8, 0.45 * top + 1.2))

    def per_step(entry):
        return {r["name"]: r["total_us"] / entry["steps"] for r in entry["stats"]}

    b, a = per_step(before), per_step(after)
    names = sorted(set(b) | set(a), key=lambda n: -max(b.get(n, 0), a.get(n, 0)))[:top][::-1]
    ys = range(len(names))
    h = 0.38
    ax.barh([y + h / 2 for y in ys], [b.get(n, 0) for n in names], h, label=f"stage {before['stage']}")
    ax.barh([y - h / 2 for y in ys], [a.get(n, 0) for n in names], h, label=f"stage {after['stage']}")
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.set_xlabel("event time per training step (us)")
    ax.legend(fontsize=8)
    return ax


def timeline(entry: dict, ax=None, window: tuple[float, float] | None = None):
    """The recorded events of a profile, one row per name (kernels blue, copies red)."""
    events = entry["timeline"]
    if window:
        events = [e for e in events if window[0] <= e[2] <= window[1]]
    names = list(dict.fromkeys(e[0] for e in events))[::-1]  # first to run on top
    ax = _axes(ax, (9, 0.3 * len(names) + 1.3))
    row = {n: i for i, n in enumerate(names)}
    colors = {"kernel": "tab:blue", "memcpy": "tab:red"}
    for name, kind, start, dur in events:
        ax.barh(row[name], max(dur, 0.5), left=start, height=0.6, color=colors.get(kind, "tab:gray"))
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_xlabel("time since the first recorded event (us)")
    ax.set_title(f"stage {entry['stage']}: kernels blue, copies red", fontsize=9)
    return ax


# --- matmul ----------------------------------------------------------------------------


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
            patches.Rectangle((a0[0] + k * t, y_band), t, t, fill=strong, color="tab:blue", alpha=0.7 if strong else 1,
                              lw=0.8, ls="-" if strong else "--")
        )
        ax.add_patch(
            patches.Rectangle((b0[0] + tj * t, b0[1] + (n - 1 - k) * t), t, t, fill=strong, color="tab:orange",
                              alpha=0.7 if strong else 1, lw=0.8, ls="-" if strong else "--")
        )
        ax.text(a0[0] + (k + 0.5) * t, y_band + 0.5 * t, f"k={k}", ha="center", va="center", fontsize=7)
        ax.text(b0[0] + (tj + 0.5) * t, b0[1] + (n - 0.5 - k) * t, f"k={k}", ha="center", va="center", fontsize=7)
    arrow = dict(arrowstyle="->", lw=1.2)
    ax.annotate("", xy=(a0[0] + n * t - 0.1, y_band - 0.25), xytext=(a0[0] + 0.1, y_band - 0.25), arrowprops=arrow)
    ax.annotate("", xy=(b0[0] + tj * t - 0.25, b0[1] + 0.1), xytext=(b0[0] + tj * t - 0.25, b0[1] + n * t - 0.1),
                arrowprops=arrow)
    ax.text(a0[0] + n * t / 2, y_band - 0.55, "tiles of A march along K", ha="center", fontsize=7)
    ax.text(b0[0] + tj * t - 0.4, b0[1] + n * t / 2, "tiles of B\nmarch along K", ha="right", va="center", fontsize=7)
    ax.text(0.0, 2 * n * t + gap + 0.2, f"step k={step}: solid tiles are in shared memory", fontsize=8)
    ax.set_xlim(-0.3, 2 * n * t + gap + 0.3)
    ax.set_ylim(-0.8, 2 * n * t + gap + 0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax


MATMUL_LABELS = {
    "matmul_naive": "naive (stage 0)",
    "matmul_transposed": "flags (stage 3)",
    "matmul_batched": "batched (stage 5)",
    "matmul_tiled": "tiled (stage 6)",
    "cublas": "cuBLAS",
    "matmul_regtiled": "regtiled (stage 9)",
    "matmul_tf32": "TF32 WMMA (stage 12)",
    "matmul_tf32_async": "TF32 mma.sync + cp.async (stage 12)",
    "matmul_tf32_wgmma": "TF32 wgmma (stage 12, Hopper)",
    "cublas_tf32": "cuBLAS TF32",
}
# The blog's comparison (chapter 14): the ladder's kernels of stages 0-8 and cuBLAS.
LADDER_MATMULS = ["matmul_naive", "matmul_transposed", "matmul_batched", "matmul_tiled", "cublas"]


def gflops_bars(matmul: dict, ax=None, kernels: list[str] | None = None, labels: list[str] | None = None):
    """Grouped bars of GFLOP/s per shape, one bar per kernel, on a log axis."""
    rows = [r for r in matmul["rows"] if labels is None or r["label"] in labels]
    kernels = kernels or list(rows[0]["gflops"])
    ax = _axes(ax, (9, 4))
    width = 0.8 / len(kernels)
    for i, name in enumerate(kernels):
        xs = [j + (i - (len(kernels) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, [r["gflops"].get(name, float("nan")) for r in rows], width, label=MATMUL_LABELS.get(name, name))
    ax.set_xticks(range(len(rows)), [f"{r['label']}\n{r['M']}x{r['N']}x{r['K']}" for r in rows], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("GFLOP/s (float32)")
    ax.legend(fontsize=7, ncol=len(kernels))
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
    xs = sorted([2.0 ** e for e in range(-2, 11)] + [ridge])
    ax.plot(xs, [min(flops, bandwidth * x) / 1e9 for x in xs], "k-", lw=1.5)
    ax.axvline(ridge, color="grey", ls=":", lw=0.8)
    ax.text(ridge * 1.1, flops / 1e9 * 0.5, f"ridge {ridge:.0f} flop/B", fontsize=7, color="grey")
    ax.text(xs[0] * 1.2, flops / 1e9 * 1.15, f"FP32 peak {flops / 1e12:.0f} TFLOP/s", fontsize=7)
    ax.text(xs[0] * 1.2, bandwidth * xs[0] * 1.6 / 1e9, f"{bandwidth / 1e12:.1f} TB/s", fontsize=7, rotation=28)
    markers = {"matmul_naive": "v", "matmul_batched": "^", "matmul_tiled": "o", "cublas": "s"}
    for name in kernels:
        pts = [(intensity(r["M"], r["N"], r["K"]), r["gflops"][name], r["label"]) for r in matmul["rows"]
               if name in r["gflops"]]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=markers.get(name, "o"),
                   label=MATMUL_LABELS.get(name, name), zorder=3)
        if name == kernels[-1]:
            for x, y, label in pts:
                ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, -9), fontsize=6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop per byte of DRAM traffic, ideal)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"Roofline of the {device['name']} (FP32, no tensor cores)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return ax


# --- code excerpts ---------------------------------------------------------------------


def python_source(module: str, qualname: str) -> str:
    """The source of a function in ``minitorch_cuda/<module>`` (e.g. ``cuda/backend.py``),
    read from the file: ``Class.method`` or a plain function name."""
    path = PACKAGE / module
    text = path.read_text()
    nodes: list = ast.parse(text).body
    for part in qualname.split("."):
        node = next(n for n in nodes if getattr(n, "name", None) == part)
        nodes = getattr(node, "body", [])
    return ast.get_source_segment(text, node, padded=True)


def cuda_source(file: str, name: str) -> str:
    """A ``__global__`` or ``__device__`` function (or a macro body starting with
    ``#define name``) from ``minitorch_cuda/kernels/<file>``, up to its closing brace."""
    text = (PACKAGE / "kernels" / file).read_text()
    pattern = rf"^(?:#define {name}\b|(?:template <[^>]*>\s*\n)?(?:extern \"C\" )?__\w+__[^\n]*\b{name}\()"
    match = re.search(pattern, text, re.M)
    if match is None:
        raise KeyError(f"{name} not found in {file}")
    start = match.start()
    if text.startswith("#define", start):
        end = start
        while text[end:].split("\n", 1)[0].rstrip().endswith("\\"):
            end = text.index("\n", end) + 1
        return text[start : text.index("\n", end)]
    depth, i = 0, text.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start : i + 1]
        i += 1


def file_header(file: str) -> str:
    """The comment block that opens a kernel file (which kernel each stage uses)."""
    lines = (PACKAGE / "kernels" / file).read_text().splitlines()
    return "\n".join(line for line in lines[: next(i for i, ln in enumerate(lines) if not ln.startswith("//"))])


def code_block(text: str, language: str = "python"):
    """Code for display in a notebook output (highlighted on the rendered page)."""
    from IPython.display import Markdown

    return Markdown(f"```{language}\n{text.rstrip()}\n```")


# --- beyond the blog (chapters 15-19) ------------------------------------------------


def cuda_block(file: str, first_line: str) -> str:
    """From the first line of ``minitorch_cuda/kernels/<file>`` that contains ``first_line``
    (a struct, a macro use, a lambda) to the brace that closes the block it opens."""
    text = (PACKAGE / "kernels" / file).read_text()
    start = text.find(first_line)
    if start < 0:
        raise KeyError(f"{first_line!r} not found in {file}")
    start = text.rfind("\n", 0, start) + 1
    depth, i = 0, text.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            end = text.find("\n", i)
            return text[start : end if end >= 0 else len(text)]
        i += 1


def roofline_points(device: dict, points: list[dict], ax=None, copy_gbps: float | None = None,
                    launch_us: float | None = None):
    """The FP32 roofline with arbitrary kernels on it. Each point is a dict with
    ``label``, ``intensity`` (flop/byte), ``gflops`` and ``group`` (one marker per group).
    ``copy_gbps`` adds the measured copy bandwidth as a second, lower roof."""
    ax = _axes(ax, (8, 5))
    flops, bandwidth = peaks(device)
    xs = [2.0 ** e for e in range(-6, 12)]
    ax.plot(xs, [min(flops, bandwidth * x) / 1e9 for x in xs], "k-", lw=1.5,
            label=f"model roofs: {bandwidth / 1e12:.1f} TB/s, {flops / 1e12:.1f} TFLOP/s")
    if copy_gbps:
        ax.plot(xs, [min(flops / 1e9, copy_gbps * x) for x in xs], "k--", lw=0.8,
                label=f"measured copy {copy_gbps / 1e3:.2f} TB/s")
    markers = "os^vDPX*<>"
    groups = list(dict.fromkeys(p["group"] for p in points))
    for g, marker in zip(groups, markers):
        pts = [p for p in points if p["group"] == g]
        ax.scatter([p["intensity"] for p in pts], [p["gflops"] for p in pts], marker=marker, label=g, zorder=3)
        for p in pts:
            ax.annotate(p["label"], (p["intensity"], p["gflops"]), textcoords="offset points", xytext=(4, 3),
                        fontsize=6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop per byte of DRAM traffic, ideal)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"Roofline of the {device['name']} (FP32)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return ax


def bandwidth_bars(table: dict, ax=None):
    """GB/s of each kernel of ``bench.bandwidth_table`` with the copy's as a line."""
    ax = _axes(ax, (8, 3.5))
    kernels = table["kernels"]
    names = list(kernels)
    ax.bar(range(len(names)), [kernels[n]["gb_per_s"] for n in names], color="tab:blue")
    ax.axhline(kernels["memcpy_dtod"]["gb_per_s"], color="k", ls="--", lw=0.8, label="device-to-device copy")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("GB/s")
    ax.legend(fontsize=7)
    return ax


def round_mantissa(x, bits: int):
    """float32 values rounded to nearest (ties to even) with ``bits`` explicit mantissa
    bits, as numpy float32: 10 for TF32, 7 for BF16, 23 leaves them as they are."""
    import numpy as np

    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - bits
    if drop <= 0:
        return np.asarray(x, dtype=np.float32)
    half = (1 << (drop - 1)) - 1
    u = (u + half + ((u >> drop) & 1)) & ~np.uint64((1 << drop) - 1)
    return u.astype(np.uint32).view(np.float32)
