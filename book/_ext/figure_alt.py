"""A figure's picture gets its caption as alt text, unless the page gave it one.

Without this, an image that a code cell draws has no alt text, and the HTML
writer falls back to the image's file path (``_images/4f1c...svg``), which is
what a screen reader would read out. A cell that wants a different description
sets it in its metadata (``mystnb: image: alt: ...``); an image outside a
figure needs one there (tests/test_book.py checks every page).
"""

from __future__ import annotations

from docutils import nodes


def alt_from_caption(app, doctree, docname) -> None:
    for figure in doctree.findall(nodes.figure):
        caption = figure.next_node(nodes.caption)
        if caption is None:
            continue
        text = " ".join(caption.astext().split())
        for image in figure.findall(nodes.image):
            if not image.get("alt"):
                image["alt"] = text


def setup(app):
    app.connect("doctree-resolved", alt_from_caption)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
