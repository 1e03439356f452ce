# IPython kernel configuration for building the book (.ci/build_book.sh copies it
# into a fresh IPYTHONDIR): figures come out as SVG, sharp on every screen, instead
# of 72-dpi PNGs. Chapters opened in Jupyter keep the reader's own settings.
c = get_config()  # noqa: F821 (IPython provides it)
c.InlineBackend.figure_formats = {"svg"}
# Every figure a chapter shows gets text readable at the page's width: its smallest
# text is raised to the book's minimum just before it is saved (minitorch_cuda/book/style.py).
c.InlineBackend.rc = {"figure.hooks": ["minitorch_cuda.book.style:legible_when_saved"]}
