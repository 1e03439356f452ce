"""The footer's copyright runs from the course's first year to the year of the build.

``_config.yml`` names only the first year (``copyright: "2025"``); this extension
makes it ``2025-2026`` when the book is built in 2026, so the footer never goes
stale. A reproducible build that sets SOURCE_DATE_EPOCH gets that year instead
(Sphinx's own ``correct_copyright_year`` runs after this one and rewrites the
second year).
"""

from __future__ import annotations

import datetime
import re


def copyright_through(first: str, year: int) -> str:
    """``"2025"`` -> ``"2025-2026"`` in 2026 (``"2026"`` alone in 2026); other text is kept."""
    if not re.fullmatch(r"\d{4}", first.strip()):
        return first
    return first.strip() if int(first) >= year else f"{first.strip()}-{year}"


def extend_copyright(app, config) -> None:
    config.copyright = copyright_through(config.copyright, datetime.date.today().year)


def setup(app):
    # before sphinx.config.correct_copyright_year (priority 800), which honours SOURCE_DATE_EPOCH
    app.connect("config-inited", extend_copyright, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
