"""What the chapters show besides prose (minitorch_cuda.book) and the numerics module: every
figure renders from the recorded results, every diagram from the kernels' own files,
labels placed by ``place_labels`` do not overlap, excerpts end at the right brace. CPU only."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import ml_dtypes
import numpy as np
import pytest
from matplotlib.text import Text

from minitorch_cuda import numerics, results
from minitorch_cuda.book import diagrams, excerpts, figures, tables


def recorded(name: str) -> dict:
    data = results.load(name)
    if data is None:
        pytest.skip(f"book/results/{name}.json is not recorded")
    return data


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --- excerpts ------------------------------------------------------------------------------


def test_closing_brace_skips_nested_blocks() -> None:
    text = "void f() { if (x) { y(); } }\nint z;"
    assert text[excerpts.closing_brace(text, 0)] == "}"
    assert excerpts.closing_brace(text, 0) == text.index("}\nint")
    assert excerpts.braced_lines(text, text.index("f()")) == "void f() { if (x) { y(); } }"
    with pytest.raises(ValueError, match="unbalanced"):
        excerpts.closing_brace("{ {", 0)


def test_python_definition_takes_decorators_methods_and_assignments() -> None:
    text = "X = 1\n\nclass A:\n    @staticmethod\n    def f():\n        return 2  # two\n"
    assert excerpts.python_definition(text, "X") == "X = 1"
    assert excerpts.python_definition(text, "A.f") == "@staticmethod\ndef f():\n    return 2  # two"
    with pytest.raises(KeyError, match="A.g"):
        excerpts.python_definition(text, "A.g")


def test_cuda_excerpts_end_where_the_kernel_ends() -> None:
    body = excerpts.cuda_source("gather.cu", "gather_rows")
    assert body.startswith('extern "C" __global__ void gather_rows(') and body.endswith("}")
    assert "scatter_add_rows" not in body
    assert excerpts.file_header("gather.cu").startswith("//")


# --- numerics --------------------------------------------------------------------------------


def test_round_mantissa_is_bf16_rounding_at_seven_bits() -> None:
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 1e3
    expect = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(numerics.round_mantissa(x, 7), expect)
    assert np.array_equal(numerics.round_mantissa(x, 23), x)


# --- figures from the recorded results --------------------------------------------------------


def _label_boxes(ax):
    """The boxes of the labels' text; an annotation's own extent would add its leader line, which
    may cross a neighbour's label's box without covering its text."""
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    return [Text.get_window_extent(t, renderer) for t in ax.texts if t.get_text()]


def _overlapping(boxes) -> list:
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]


def test_stage_and_profile_figures_render() -> None:
    bench, profiles = recorded("bench_stages"), recorded("profiles")
    assert not _overlapping(_label_boxes(figures.ladder(bench)))
    before = results.profile_entry(profiles, 0)
    ax = figures.timeline(before, window=(0, 28000))
    names = [t.get_text() for t in ax.get_yticklabels()]
    drawn = {round(p.get_y() + p.get_height() / 2) for p in ax.patches}
    assert drawn == set(range(len(names))), "every row of the timeline holds a visible bar"
    figures.kernel_shares(before, results.profile_entry(profiles, 1))


def test_matmul_figures_label_each_shape_once_and_do_not_collide() -> None:
    bench, matmul = recorded("bench_stages"), recorded("matmul")
    ax = figures.gflops_bars(matmul, kernels=tables.LADDER_MATMULS)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert "512³" in ticks and all(t.count("512") <= 1 for t in ticks)
    ax = figures.roofline(bench["device"], matmul)
    assert not _overlapping(_label_boxes(ax))


def test_the_ladder_draws_each_pytorch_peer_the_record_holds() -> None:
    bench = recorded("bench_beyond")
    legend = [t.get_text() for t in figures.ladder(bench, blog={}, peers=("torch", "torch_graph")).get_legend().texts]
    assert bench["torch"]["name"] in legend and bench["torch_graph"]["name"] in legend
    assert bench["torch_graph"]["name"] not in [t.get_text() for t in figures.ladder(bench).get_legend().texts]


def test_launch_and_ratio_figures_render() -> None:
    bench = recorded("bench_beyond")
    ax = figures.launches_vs_step({"ladder": [results.stage_row(bench, s) for s in (8, 9, 10, 11)]})
    assert not _overlapping(_label_boxes(ax))
    tile = recorded("tile_eval")
    figures.ratio_bars(tile, ["copy", "triad", "fib", "heavy64"], max(tile["sizes_log2"]))


# --- diagrams from the kernels' own files --------------------------------------------------


@pytest.mark.parametrize(
    "draw",
    [
        diagrams.tiling_picture,
        diagrams.row_copies_vs_gather,
        diagrams.shuffle_tree,
        diagrams.thread_tile,
        diagrams.mma_fragments,
        diagrams.swizzle_128b,
        diagrams.async_pipeline,
        diagrams.cluster_splitk,
        diagrams.thread_hierarchy,
        diagrams.barrier_ring,
        diagrams.row_dependencies,
    ],
    ids=lambda f: f.__name__,
)
def test_diagram_draws(draw) -> None:
    from minitorch_cuda.book import style

    drawn = draw()
    fig = getattr(drawn, "figure", drawn)
    fig.tight_layout()  # as the chapters show them
    fig.canvas.draw()
    assert fig.axes
    assert style.small_texts(fig) == [], "text the page shows below the book's minimum"


def test_diagrams_read_the_kernels_parameters() -> None:
    stages = diagrams._kernel_define("wgmma_tma.cu", "WT_STAGES")
    ring = [t.get_text() for t in diagrams.barrier_ring().texts]
    assert f"stage {stages - 1}" in ring and f"stage {stages}" not in ring  # the ring has the kernel's stages
    ax = diagrams.shuffle_tree()
    assert "offset 16: lane i += lane i+16" in [t.get_text() for t in ax.texts]
    assert diagrams._kernel_define("mma_async.cu", "ASYNC_STAGES") >= 2
    ax = diagrams.async_pipeline()
    assert ax.get_yticklabels()[0].get_text().startswith("buffer")


# --- the figures' shared style: text readable at the page's width ----------------------------


def _saved_width_in(fig) -> float:
    """The width of the SVG the notebook saves (cropped with bbox_inches="tight"), in inches."""
    import io
    import re

    svg = io.StringIO()
    fig.savefig(svg, format="svg", bbox_inches="tight")
    return float(re.search(r'<svg[^>]*\bwidth="([\d.]+)pt"', svg.getvalue()).group(1)) / 72


def _wide_figure_with_small_text():
    fig, ax = plt.subplots(figsize=(10, 3))
    ax.plot([0, 1000], [0, 1], label="a line")
    ax.text(500, 0.5, "annotation", fontsize=6)
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=6)
    return fig


def test_page_scale_is_the_column_over_the_saved_width() -> None:
    from minitorch_cuda.book import style

    for width in (5, 7, 10):
        fig, ax = plt.subplots(figsize=(width, 3))
        ax.set_ylabel("a label the crop keeps")
        fig.canvas.draw()
        expected = min(1.0, style.COLUMN_IN / _saved_width_in(fig))
        assert style.page_scale(fig) == pytest.approx(expected, rel=0.01)


def test_legible_raises_every_small_text_to_the_page_minimum() -> None:
    from minitorch_cuda.book import style

    fig = _wide_figure_with_small_text()
    fig.canvas.draw()
    assert {"annotation", "a line"} <= {text for text, _ in style.small_texts(fig)}
    style.legible(fig)
    scale = min(1.0, style.COLUMN_IN / _saved_width_in(fig))
    fig.canvas.draw()
    shown = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert shown and all(t.get_fontsize() * scale >= style.MIN_PT - 0.05 for t in shown)
    assert style.small_texts(fig) == []


def test_legible_leaves_readable_text_alone() -> None:
    from minitorch_cuda.book import style

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.set_title("a title", fontsize=12)
    ax.plot([0, 1], [0, 1])
    fig.canvas.draw()
    before = [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text)]
    style.legible(fig)
    fig.canvas.draw()
    assert [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text)] == before


def test_the_book_kernels_hook_makes_a_figure_legible_when_it_is_saved() -> None:
    """book/ipython_kernel_config.py puts legible_when_saved in figure.hooks: the text is
    raised as the figure is saved, after everything was drawn on it."""
    import io

    from minitorch_cuda.book import style

    with plt.rc_context({"figure.hooks": ["minitorch_cuda.book.style:legible_when_saved"]}):
        fig = _wide_figure_with_small_text()
    late = fig.axes[0].text(0, 0.9, "added last", fontsize=5)
    fig.savefig(io.BytesIO(), format="svg", bbox_inches="tight")
    fig.canvas.draw()
    assert style.small_texts(fig) == [] and late.get_fontsize() > 5
