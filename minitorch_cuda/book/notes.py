"""What a chapter says about the machine it runs on.

The built book is read by people who never see the machine that built it (a
CI runner without a GPU), so a page must not report that machine's state: a
`gpu` cell built without a GPU shows one short note and the recorded results
follow. A student running the same notebook does want to know why a cell did
not measure, and gets the reason. ``.ci/build_book.sh`` sets
``MINITORCH_CUDA_BOOK=1`` to tell the two apart.
"""

from __future__ import annotations

import html
import os

BOOK_ENV = "MINITORCH_CUDA_BOOK"


def in_book_build() -> bool:
    """True while the book is being built (the page's outputs are for readers)."""
    return os.environ.get(BOOK_ENV, "") not in ("", "0")


class Note:
    """One line: a styled note on the page and in Jupyter, plain text elsewhere."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f"<p class='mt-note'>{html.escape(self.text)}</p>"


def gpu_status(gpu: bool) -> None:
    """The setup cell's report: silent in the book build; in a notebook, whether
    CUDA is usable here and, if not, why."""
    if in_book_build():
        return
    print("GPU available:", "yes" if gpu else f"no ({why_not_measured()})")


def why_not_measured() -> str:
    """Why the chapters' `gpu` cells cannot measure here: no usable GPU, or the CPU emulator."""
    from ..device import cuda_unavailable_reason
    from ..emulator import ENV, selected

    if selected():
        return f"the CPU emulator is on ({ENV}=1): it checks kernels, but its timings would be the CPU's"
    return cuda_unavailable_reason()


def no_gpu(what: str = "the next cell shows the recorded results, on the GPU each record names") -> Note:
    """What a `gpu` cell shows where it cannot measure: in the book, that the
    numbers come from the recorded run; in a notebook, the reason as well."""
    if in_book_build():
        return Note(f"Measured live only on a GPU; {what}.")
    return Note(f"No GPU here ({why_not_measured()}); {what}.")
