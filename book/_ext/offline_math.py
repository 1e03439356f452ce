"""Math that renders without a network: every formula becomes MathML at build time.

sphinxcontrib-katex prerenders each formula with its bundled KaTeX under node;
asking KaTeX for MathML alone means the page needs neither MathJax from a CDN
nor KaTeX's web fonts, and no JavaScript at all: browsers draw MathML
natively. ``book/_static/math.css`` picks a math font where one is installed.
"""

from __future__ import annotations

import shutil

from sphinx.errors import ExtensionError


def setup(app):
    if shutil.which("node") is None:
        raise ExtensionError(
            "the book renders its math at build time with node, which is not installed (apt-get install nodejs)"
        )
    from sphinxcontrib import katex

    # The prerenderer reads its options from this module-level dict, not from katex_options.
    katex.KATEX_DEFAULT_OPTIONS.update({"output": "mathml", "throwOnError": False})
    app.setup_extension("sphinxcontrib.katex")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
