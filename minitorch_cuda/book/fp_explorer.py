"""Chapter 2's floating-point explorer: type a value, see its bits in every format
(TF32 and the MX scale E8M0 included), and watch a block of values share one
MX scale.

All its logic is JavaScript (``fp_explorer.js``) that runs in the page: on the
static book page, where no kernel runs behind it, as in Jupyter (JupyterLab,
Notebook, Colab, VS Code run the script of an output the session produced).
There is no widget manager to load, so the page also works offline.
``tests/test_fp_explorer.py`` checks the JavaScript encoder against ml_dtypes.
"""

from __future__ import annotations

import html
import json
import uuid
from pathlib import Path

JS = Path(__file__).with_name("fp_explorer.js")
# A block of 32 gradient-sized values spanning three binades, with one outlier
# (0.0125): cast to FP4 without a scale they are all zero; with the block's
# scale the largest lands at the top of FP4's range and the small ones lose
# their digits first.
DEFAULT_BLOCK = [
    round(v * 1e-3, 7)
    for v in (
        0.82,
        -1.37,
        0.05,
        2.4,
        -0.61,
        0.013,
        1.05,
        -0.27,
        0.44,
        -3.1,
        0.0071,
        1.9,
        -0.09,
        0.33,
        12.5,
        -0.76,
        0.58,
        -2.2,
        0.021,
        0.97,
        -1.6,
        0.15,
        -0.048,
        2.9,
        0.71,
        -0.38,
        1.24,
        -0.0033,
        0.26,
        -1.11,
        0.64,
        -4.7,
    )
]


class FloatExplorer:
    """Displayed, an interactive explorer; printed, a one-line description."""

    def __init__(self, value: float | str = 0.1, element: str = "float4_e2m1fn", block: list[float] | None = None):
        self.value, self.element = str(value), element
        self.block = list(DEFAULT_BLOCK if block is None else block)

    def __repr__(self) -> str:
        return f"FloatExplorer(value={self.value}, element={self.element!r}): display it in Jupyter or the book"

    def _repr_html_(self) -> str:
        node = f"fpx-{uuid.uuid4().hex[:12]}"
        state = json.dumps({"value": self.value, "element": self.element, "block": self.block})
        return (
            f"<div id='{node}' class='fpx-root'>{html.escape(repr(self))}</div>\n<script>\n{JS.read_text()}\n"
            f"FPX.render({{model: FPX.staticModel({state}), el: document.getElementById('{node}')}});\n</script>"
        )
