# IPython kernel configuration for building the book (.ci/build_book.sh copies it
# into a fresh IPYTHONDIR): figures come out as SVG, sharp on every screen, instead
# of 72-dpi PNGs. Chapters opened in Jupyter keep the reader's own settings.
c = get_config()  # noqa: F821 (IPython provides it)
c.InlineBackend.figure_formats = {"svg"}
