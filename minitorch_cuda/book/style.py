"""The figures' shared style: every word in a figure readable at the width the page shows it.

The book's column shows a figure at most ``COLUMN_IN`` wide (672 CSS pixels, 7
inches at 96 pixels to the inch, in a desktop window) and scales a wider one
down to fit. A figure is saved cropped to what it draws (``bbox_inches="tight"``,
as the notebook does), so text of ``s`` points in a figure saved ``w`` inches
wide reaches the reader at ``s * min(1, COLUMN_IN / w)`` points. The book's
minimum there is ``MIN_PT`` (about 10.7 CSS pixels, a footnote's size).

The diagrams come out of ``legible`` already (``diagrams._at_page_size``), and
``figures.place_labels`` places its labels at the minimum. The book's build
applies it to every other figure a chapter shows: book/ipython_kernel_config.py
adds ``legible_when_saved`` to matplotlib's ``figure.hooks``, so each figure
passes through ``legible`` just before it is saved (a notebook opened in
Jupyter keeps the reader's settings). tests/test_book_modules.py and
tests/test_book.py (the chapters run as the build runs them) check the result
with ``small_texts``.
"""

from __future__ import annotations

COLUMN_IN = 7.0
MIN_PT = 8.0
# a saved figure's crop can differ from the one measured by a hundredth of an inch or so
TOLERANCE_PT = 0.05


def page_scale(fig) -> float:
    """How much the page shrinks this figure (1 when it fits the column); the figure must be drawn."""
    from matplotlib import rcParams

    # inches, as saved with bbox_inches="tight": what is drawn and a margin each side
    width = fig.get_tightbbox().width + 2 * rcParams["savefig.pad_inches"]
    return min(1.0, COLUMN_IN / width) if width > 0 else 1.0


def _shown_texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def small_texts(fig) -> list[tuple[str, float]]:
    """Every visible text of ``fig`` that the page shows smaller than ``MIN_PT``, as
    (text, points on the page). The figure must be drawn (tick labels exist only
    after a draw): call ``fig.canvas.draw()`` first, or call it from a draw event."""
    scale = page_scale(fig)
    return [
        (t.get_text(), round(t.get_fontsize() * scale, 2))
        for t in _shown_texts(fig)
        if t.get_fontsize() * scale < MIN_PT - TOLERANCE_PT
    ]


def legible(fig):
    """Raise every text of ``fig`` that the page would show smaller than ``MIN_PT`` to
    that size; returns ``fig``. Larger text can widen a cropped figure, which the page
    then shrinks more, so this repeats until the sizes hold (twice, as a rule)."""
    for _ in range(4):
        fig.canvas.draw()  # tick labels exist, and the crop is known, only once drawn
        smallest = MIN_PT / page_scale(fig)
        raised = False
        for ax in fig.axes:  # tick labels are made anew at each draw: raise them at the source
            for axis in (ax.xaxis, ax.yaxis):
                for which, ticks in (("major", axis.get_major_ticks()), ("minor", axis.get_minor_ticks())):
                    if ticks and ticks[0].label1.get_fontsize() < smallest:
                        axis.set_tick_params(which=which, labelsize=smallest)
                        raised = True
        for text in _shown_texts(fig):
            if text.get_fontsize() < smallest - 1e-6:
                text.set_fontsize(smallest)
                raised = True
        if not raised:
            break
    return fig


def legible_when_saved(fig) -> None:
    """A matplotlib ``figure.hooks`` entry: ``legible(fig)`` runs each time ``fig`` is
    saved or shown inline, after the chapter has drawn everything on it."""
    canvas = fig.canvas
    print_figure = canvas.print_figure

    def print_legible(*args, **kwargs):
        legible(fig)
        return print_figure(*args, **kwargs)

    canvas.print_figure = print_legible
