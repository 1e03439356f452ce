"""The book's helpers that readers never see directly: the .ipynb copies for
Colab and download, the notes a chapter prints about its machine, and the
tables that fit a column."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from minitorch_cuda.book import notebooks, notes, tables

ROOT = Path(__file__).resolve().parents[1]


def test_every_chapter_and_exercise_has_an_ipynb_target():
    stems = {(p.parent.name, p.stem) for p in notebooks.targets()}
    for folder in notebooks.FOLDERS:
        for source in (ROOT / folder).glob("[0-9][0-9]_*.md"):
            assert (folder, source.stem) in stems


def test_the_committed_ipynb_copies_are_up_to_date():
    """Colab opens the copies in book/notebooks/ from the repository: a chapter or exercise edited
    without regenerating them would open stale there."""
    assert notebooks.main(["--check"]) == 0, "book/notebooks/ is stale: run `python -m minitorch_cuda.book.notebooks`"


def test_the_ipynb_copy_installs_first_and_carries_no_outputs():
    source = ROOT / "exercises" / "01_cuda_setup.md"
    nb = notebooks.notebook(source)
    first = nb.cells[0]
    assert first.cell_type == "code" and "remove-cell" in first.metadata["tags"]
    assert first.metadata["jupyter"]["source_hidden"] and first.metadata["cellView"] == "form"
    assert 'find_spec("minitorch_cuda") is None' in first.source and '"exercises"' in first.source
    assert notebooks.REPOSITORY in first.source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert notebooks.render(source) == notebooks.render(source)  # stable cell ids: regenerating changes nothing


def test_the_install_cell_does_nothing_where_the_course_is_installed():
    source = notebooks.notebook(ROOT / "chapters" / "02_floating_point.md").cells[0].source
    before = Path.cwd()
    exec(compile(source, "install-cell", "exec"), {})  # our own generated cell
    assert Path.cwd() == before  # it neither cloned nor changed directory: the package imports here


def test_notes_hide_the_build_machine_in_the_book(monkeypatch, capsys):
    monkeypatch.setenv(notes.BOOK_ENV, "1")
    notes.gpu_status(False)
    assert capsys.readouterr().out == ""
    note = notes.no_gpu()
    assert "the recorded results, on the GPU each record names" in repr(note) and "PyCUDA" not in repr(note)
    assert "class='mt-note'" in note._repr_html_()
    monkeypatch.setenv(notes.BOOK_ENV, "")
    notes.gpu_status(True)
    assert capsys.readouterr().out == "GPU available: yes\n"


@pytest.mark.parametrize("width", [60, 96])
def test_a_table_fits_its_width_as_text_and_renders_as_html(width, monkeypatch):
    monkeypatch.setattr(tables.Table, "WIDTH", width)
    table = tables.Table(
        ["stage", "ms", "what changed"], [[0, "1.0", "a description " * 8], [1, "2.0", "short"]], align="rrl"
    )
    text = str(table)
    assert max(map(len, text.splitlines())) <= width
    assert "short" in text and text.count("description") == 8
    html = table._repr_html_()
    assert html.count("<tr>") == 3 and "text-align:right" in html


# --- the book's Sphinx extensions (book/_ext) ---------------------------------------------


def _extension(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_copyright_runs_from_the_first_year_to_the_year_of_the_build():
    copyright_year = _extension("copyright_year")
    assert copyright_year.copyright_through("2025", 2026) == "2025-2026"
    assert copyright_year.copyright_through("2026", 2026) == "2026"
    assert copyright_year.copyright_through("2025-2026, the authors", 2027) == "2025-2026, the authors"


def test_a_figure_takes_its_caption_as_alt_text_unless_it_has_one():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    figure_alt = _extension("figure_alt")
    doc = new_document("page", get_default_settings(Parser))
    drawn, described = nodes.image(uri="_images/3f2a.svg"), nodes.image(uri="_images/9c1b.svg", alt="bars of GFLOP/s")
    doc += nodes.figure("", drawn, nodes.caption("", "Microseconds per   replay\nof a graph."))
    doc += nodes.figure("", described, nodes.caption("", "GFLOP/s per kernel."))
    loose = nodes.image(uri="_images/0d4e.svg")
    doc += loose
    figure_alt.alt_from_caption(None, doc, "page")
    assert drawn["alt"] == "Microseconds per replay of a graph."
    assert described["alt"] == "bars of GFLOP/s"
    assert "alt" not in loose  # no caption to take it from: the page test asks the cell for one


def test_each_script_is_written_into_a_page_once():
    """Sphinx 7.4 registers sphinx-thebe's inline script as two (filename None and ''): the
    page then declared THEBE_JS_URL twice, an error in the console of every page."""
    from sphinx.builders.html._assets import _JavaScript

    launch_links = _extension("launch_links")
    body = 'const THEBE_JS_URL = "https://unpkg.com/thebe"'
    context = {
        "script_files": [
            _JavaScript("_static/doctools.js"),
            _JavaScript(None, body=body),
            _JavaScript("", body=body),
            _JavaScript("_static/sphinx-thebe.js", **{"async": "async"}),
        ]
    }
    launch_links.one_copy_of_each_script(None, "index", "page.html", context, None)
    assert [(s.filename or "", s.attributes.get("body")) for s in context["script_files"]] == [
        ("_static/doctools.js", None),
        ("", body),
        ("_static/sphinx-thebe.js", None),
    ]


# --- the pages' sources ------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(`{3,}|:{3,})\s*(.*)$")
_CODE_FENCES = re.compile(r"^$|^[\w+-]+$|^\{(code-cell|code-block|code|literalinclude|math|raw)\}")
_LIST_ITEM = re.compile(r"^\s*([-+*]|\d+[.)])\s")


def formulas_split_by_a_list_item(text: str) -> list[int]:
    """Lines (1-based) that begin like a list item (``+ ``, ``- ``, ``* ``, ``1. ``) while an
    inline ``$...$`` formula of the paragraph is still open. Markdown starts a list there,
    even mid-paragraph, and the page shows the formula's TeX and a stray bullet. Prose only:
    code fences are skipped, directive fences (admonitions, dropdowns) are prose."""
    found, fences, open_math = [], [], False
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if fence:
            marker, info = fence.groups()
            if fences and fences[-1][0] == marker and not info:
                fences.pop()
            else:
                fences.append((marker, bool(_CODE_FENCES.match(info))))
            open_math = False
            continue
        if any(code for _, code in fences):
            continue
        if not line.strip():
            open_math = False
            continue
        if open_math and _LIST_ITEM.match(line):
            found.append(number)
        singles = re.sub(r"\$\$", "", re.sub(r"\\\$", "", line)).count("$")
        open_math ^= singles % 2 == 1
    return found


def test_a_list_marker_inside_a_formula_is_found():
    split = "The layer has $I = 2 / (64\\cdot784 + 784\\cdot256\n+ 64\\cdot256) \\approx 24$ flop/byte.\n"
    whole = "The layer has $I = 2 / (64\\cdot784 + 784\\cdot256 +\n64\\cdot256) \\approx 24$ flop/byte.\n"
    assert formulas_split_by_a_list_item(split) == [2]
    assert formulas_split_by_a_list_item(whole) == []
    assert formulas_split_by_a_list_item("```{admonition} Answer\n:class: dropdown\n\n" + split + "```\n") == [5]
    assert formulas_split_by_a_list_item('```python\nx = "$a"\n- 1\n```\n') == []
    assert formulas_split_by_a_list_item("costs $5 a month.\n\n- a list item\n") == []


def test_no_formula_in_the_book_is_split_by_a_list_marker():
    sources = [p for folder in ("chapters", "book", "exercises") for p in sorted((ROOT / folder).glob("*.md"))]
    split = {f"{p.relative_to(ROOT)}:{n}": p.read_text().splitlines()[n - 1] for p in sources
             for n in formulas_split_by_a_list_item(p.read_text())}  # fmt: skip
    assert not split, f"lines that begin a list item inside a $...$ formula (join them to the line above): {split}"
