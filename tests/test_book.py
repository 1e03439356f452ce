"""Checks for the Jupyter Book: it builds with warnings as errors, every page
renders its figures in a headless browser, and every chapter notebook runs end
to end.

All tests carry the `book` mark. They are slow (the build executes every
chapter), so select or deselect them with `-m book` / `-m "not book"`.

Environment:
  BOOK_HTML   path to an already built `_build/html`; the build test then only
              checks that the pages exist, and the browser tests use it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from minitorch_cuda.book.style import MIN_PT

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
# Flags for a quiet, sandbox-free, offline browser in CI containers.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def toc_files() -> list[str]:
    """Every page listed in _toc.yml (root included), as paths without suffix."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


def chapter_notebooks() -> list[Path]:
    """Every chapter notebook and lab note on disk, listed in the toc or not yet."""
    return sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md")) + sorted((ROOT / "book" / "lab_notes").glob("*.md"))


# ---------------------------------------------------------------------------
# (a) the build
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def book_html(tmp_path_factory) -> Path:
    """Build the book once per test module (or reuse $BOOK_HTML)."""
    if os.environ.get("BOOK_HTML"):
        html = Path(os.environ["BOOK_HTML"]).resolve()
        assert (html / "index.html").exists(), f"BOOK_HTML={html} has no index.html"
        return html
    if shutil.which("jupyter-book") is None:
        pytest.skip("jupyter-book is not installed (pip install 'jupyter-book<2')")
    out = tmp_path_factory.mktemp("book")
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "build_book.sh"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    log = proc.stdout + proc.stderr
    (out / "build.log").write_text(log)
    # The script runs with -W, so any warning already makes it exit non-zero;
    # the tail of the log says which one.
    assert proc.returncode == 0, f"book build failed (log: {out / 'build.log'}):\n{log[-6000:]}"
    return out / "_build" / "html"


def test_book_builds_every_toc_page(book_html: Path) -> None:
    missing = [f for f in toc_files() if not (book_html / f"{f}.html").exists()]
    assert not missing, f"pages listed in _toc.yml but not built: {missing}"


def test_footer_names_the_year_of_the_build(book_html: Path) -> None:
    """The copyright runs to the year the book was built (book/_ext/copyright_year.py), or
    SOURCE_DATE_EPOCH's year for a reproducible build, on every page."""
    import yaml

    first = yaml.safe_load((ROOT / "_config.yml").read_text())["copyright"]  # the course's first year
    year = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))).tm_year
    expected = f"{first}-{year}" if int(first) < year else str(year)
    footers = {
        f: re.findall(r"©\s*Copyright\s+([^<]*?)\.?\s*<", (book_html / f"{f}.html").read_text()) for f in toc_files()
    }
    wrong = {f: found for f, found in footers.items() if found != [expected]}
    assert not wrong, f"footers that do not read '© Copyright {expected}.': {dict(list(wrong.items())[:3])}"


# ---------------------------------------------------------------------------
# (b) every page renders its figures in headless Chromium
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright python package is not installed (pip install playwright)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


# Runs in the page: every <img> must have finished loading with real pixels.
_IMAGES_JS = """() => Array.from(document.images).map(img => ({
    src: img.getAttribute('src'), alt: img.getAttribute('alt'), complete: img.complete, width: img.naturalWidth}))"""
# Runs in the page: open every collapsed block as a reader would (sphinx-togglebutton's
# dropdown admonitions by their title, <details> of hidden cells and sphinx-design
# dropdowns), then count what is still closed.
_EXPAND_JS = """() => {
  document.querySelectorAll('.toggle-hidden').forEach(item => {
    const title = item.querySelector(':scope > .admonition-title');
    (title || document.querySelector(`button[data-target="${item.id}"]`) || item).click();
  });
  document.querySelectorAll('details:not([open])').forEach(d => { d.open = true; });
  return document.querySelectorAll('.toggle-hidden, details:not([open])').length;
}"""
_ERRORS_JS = """() => document.querySelectorAll('.output.traceback, .output.error').length"""
# What a reader must never meet, read from the rendered page (see the test's docstring).
_PAGE_JS = r"""() => {
  const OVERFLOW_ALLOWANCE_PX = 4;
  const article = document.querySelector('article') || document.body;
  // prose and outputs, without code (which may well spell LaTeX or messages)
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT, {acceptNode: n =>
    n.parentElement.closest('pre, code, .cell_input, script, style, math') ? NodeFilter.FILTER_REJECT
                                                                          : NodeFilter.FILTER_ACCEPT});
  let prose = '';
  while (walker.nextNode()) prose += walker.currentNode.textContent + ' ';
  // what cells printed; listings of source code and the one cell that demonstrates
  // the no-CUDA error on purpose (tag shows-no-cuda, chapter 1) are not the build's state
  const outputs = Array.from(article.querySelectorAll('.cell_output div.output'))
    .filter(o => !o.closest('.tag_shows-no-cuda'))
    .filter(o => !o.querySelector('div[class*="highlight-"]:not(.highlight-myst-ansi)'))
    .map(o => o.innerText).join('\n');
  const figures = Array.from(article.querySelectorAll('figure')).filter(f =>
    !f.querySelector('img, svg, object, embed, canvas, table')).map(f => f.innerText.slice(0, 80));
  const widgets = Array.from(article.querySelectorAll(
      '.fpx-root, .jupyter-widgets, .widget-area, .jupyter-widgets-view, script[type*="widget-view"]'))
    .filter(w => w.tagName === 'SCRIPT' || !w.querySelector('input, select, table, canvas, svg'))
    .map(w => (w.className || w.type) + ': ' + (w.innerText || '').slice(0, 60));
  // the page, its code (listings and cells) and its outputs all fit the column
  const wide = [document.scrollingElement, article,
                ...article.querySelectorAll('pre, div.highlight, .cell_output div.output')]
    .filter(o => o.scrollWidth > o.clientWidth + OVERFLOW_ALLOWANCE_PX)
    .map(o => o.scrollWidth + 'px > ' + o.clientWidth + 'px: ' + (o.innerText || '').split('\n')[0].slice(0, 70));
  // a cell's printed lines in one block, not one box per stream message
  const split = Array.from(article.querySelectorAll('.cell_output'))
    .filter(o => o.querySelectorAll(':scope > div.output.stream').length > 1)
    .map(o => o.innerText.split('\n')[0].slice(0, 70));
  return {prose, outputs, figures, widgets, wide, split,
          katexErrors: article.querySelectorAll('.katex-error').length,
          math: article.querySelectorAll('math').length};
}"""
# TeX that only shows when the math did not render
_RAW_LATEX = re.compile(
    r"\\[()\[\]]|\$\$|\\(frac|times|text|mathrm|sum|sqrt|lfloor|lVert|begin|cdot|approx|le|ge)(?![a-zA-Z])"
)
# the state of the machine that built the page
_BUILD_STATE = re.compile(
    r"GPU available|No GPU here|PyCUDA is not installed|No module named|ModuleNotFoundError|"
    r"install the 'cuda' extra|Traceback \(most recent call last\)|is not installed here"
)


def _describes(alt: str | None, src: str) -> bool:
    """Alt text says something: not missing, not blank, not the image's path or file name."""
    if not alt or not alt.strip():
        return False
    name = src.rsplit("/", 1)[-1]
    return alt.strip() not in {src, name, name.rsplit(".", 1)[0]} and not alt.strip().endswith(name)


@pytest.mark.parametrize("page", toc_files())
def test_page_reads_well(page: str, book_html: Path, browser, tmp_path: Path) -> None:
    """Each page, opened offline in headless Chromium with every collapsed block
    opened: no error in the console, every image loads and has alt text that is not
    its file name, no error output, no raw LaTeX (math renders without a network),
    no message about the build machine, no widget area left empty, no figure without
    its picture, no code or output wider than the column, and no cell's printed lines
    split into several boxes."""
    path = book_html / f"{page}.html"
    assert path.exists(), f"{path} was not built"
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    # The book must render offline: refuse everything that is not a local file
    # (CDN scripts for widgets or MathJax fail fast instead of hanging).
    ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    console: list[str] = []
    try:
        pg = ctx.new_page()
        pg.on("console", lambda msg: console.append(msg.text) if msg.type == "error" else None)
        pg.on("pageerror", lambda err: console.append(str(err)))
        pg.goto(path.as_uri(), wait_until="load", timeout=60_000)
        pg.wait_for_timeout(300)  # the page's own scripts (chapter 2's explorer) run after load
        still_collapsed = pg.evaluate(_EXPAND_JS)
        pg.wait_for_timeout(100)
        images = pg.evaluate(_IMAGES_JS)
        n_errors = pg.evaluate(_ERRORS_JS)
        seen = pg.evaluate(_PAGE_JS)
        shot = tmp_path / (page.replace("/", "__") + ".png")
        pg.screenshot(path=str(shot), full_page=True)
    finally:
        ctx.close()
    assert not console, f"{page}: errors in the browser console: {console[:3]} (screenshot {shot})"
    assert still_collapsed == 0, f"{page}: {still_collapsed} collapsed blocks did not open (screenshot {shot})"
    broken = [img for img in images if not img["complete"] or img["width"] == 0]
    assert not broken, f"{page}: images that did not load (screenshot {shot}): {broken}"
    unnamed = [img["src"] for img in images if not _describes(img["alt"], img["src"])]
    assert not unnamed, (
        f"{page}: images whose alt text is empty or their file name (give the figure a caption, or the cell "
        f"`mystnb: image: alt:`): {unnamed[:3]} (screenshot {shot})"
    )
    assert n_errors == 0, f"{page}: {n_errors} error outputs rendered (screenshot {shot})"
    latex = [m.group(0) for m in _RAW_LATEX.finditer(seen["prose"] + seen["outputs"])]
    assert not latex and seen["katexErrors"] == 0, f"{page}: math not rendered: {latex[:5]} (screenshot {shot})"
    state = sorted({m.group(0) for m in _BUILD_STATE.finditer(seen["outputs"])})
    assert not state, f"{page}: outputs report the build machine's state: {state} (screenshot {shot})"
    assert not seen["widgets"], f"{page}: widget areas left empty: {seen['widgets']} (screenshot {shot})"
    assert not seen["figures"], f"{page}: figures without a picture: {seen['figures']} (screenshot {shot})"
    assert not seen["wide"], f"{page}: outputs wider than the column: {seen['wide'][:3]} (screenshot {shot})"
    assert not seen["split"], f"{page}: a cell's output split into boxes: {seen['split'][:3]} (screenshot {shot})"


def test_wide_output_cells_print_in_the_smaller_type(book_html: Path, browser) -> None:
    """A cell tagged `wide-output` (a text table, a kernel file's header) shows its output, printed
    text or a listing, in smaller type than the code, so that its rows stay on one line."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.goto((book_html / "chapters" / "21_latency_floor.html").as_uri(), wait_until="load")
        sizes = pg.evaluate("""() => ({
          code: parseFloat(getComputedStyle(document.querySelector('article .cell_input pre')).fontSize),
          wide: Array.from(document.querySelectorAll('article .cell.tag_wide-output .cell_output pre'))
                  .map(pre => [parseFloat(getComputedStyle(pre).fontSize), pre.innerText.slice(0, 50)])})""")
    finally:
        ctx.close()
    assert len(sizes["wide"]) >= 3, sizes  # a table, the floors' printout, two kernel headers
    assert all(size < 0.9 * sizes["code"] for size, _ in sizes["wide"]), sizes


def test_the_page_check_reads_what_collapsed_blocks_hide(browser, tmp_path: Path) -> None:
    """Raw TeX in an output inside a closed dropdown (sphinx-togglebutton's own script and
    style) or a closed <details> is invisible to innerText: the page test opens both first."""
    togglebutton = Path(__import__("sphinx_togglebutton").__file__).parent / "_static"
    for name in ("togglebutton.js", "togglebutton.css"):
        shutil.copy(togglebutton / name, tmp_path / name)
    page = tmp_path / "page.html"
    page.write_text("""<!doctype html><html><head><link rel="stylesheet" href="togglebutton.css">
<script>let toggleHintShow = 'Click to show'; let toggleHintHide = 'Click to hide';
let toggleOpenOnPrint = 'true'; var togglebuttonSelector = '.toggle, .admonition.dropdown';</script>
<script src="togglebutton.js"></script></head><body><article>
<div class="admonition dropdown"><p class="admonition-title">Answer</p>
<div class="cell_output"><div class="output"><pre>I = \\frac{2}{4}</pre></div></div></div>
<details><summary>Show output</summary>
<div class="cell_output"><div class="output"><pre>$$x$$</pre></div></div></details>
</article></body></html>""")
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.goto(page.as_uri(), wait_until="load")
        pg.wait_for_timeout(200)
        assert pg.evaluate(_PAGE_JS)["outputs"].strip() == ""  # closed: nothing to read
        assert pg.evaluate(_EXPAND_JS) == 0
        outputs = pg.evaluate(_PAGE_JS)["outputs"]
    finally:
        ctx.close()
    assert {m.group(0) for m in _RAW_LATEX.finditer(outputs)} == {"$$", "\\frac"}


# ---------------------------------------------------------------------------
# (c) every chapter notebook executes end to end
# ---------------------------------------------------------------------------


# A module the chapter's kernel imports through matplotlib's figure.hooks: for each figure,
# the texts that the page shows below the book's minimum at its last draw (the one saved).
_FIGURE_AUDIT = """from minitorch_cuda.book import style

too_small = {}


def record(fig):
    def on_draw(event):
        too_small[id(fig)] = style.small_texts(fig)

    fig.canvas.mpl_connect("draw_event", on_draw)
"""
_FIGURE_REPORT = """import json, book_figure_audit
print(json.dumps({"figures": len(book_figure_audit.too_small),
                  "too_small": [texts for texts in book_figure_audit.too_small.values() if texts]}))"""


def _drop_gpu_cells(nb) -> int:
    """Remove cells tagged `gpu`; chapters are written so later cells never
    depend on them (they read recorded results instead). Returns how many."""
    keep = [c for c in nb.cells if "gpu" not in c.get("metadata", {}).get("tags", [])]
    dropped = len(nb.cells) - len(keep)
    nb.cells = keep
    return dropped


@pytest.mark.notebooks
@pytest.mark.parametrize("chapter", chapter_notebooks(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_chapter_executes(chapter: Path, tmp_path: Path, monkeypatch) -> None:
    try:
        import minitorch_cuda as mt
    except ImportError as err:
        pytest.skip(f"minitorch_cuda does not import yet: {err}")
    if not hasattr(mt, "cuda_available"):
        pytest.skip("minitorch_cuda has no cuda_available() yet")
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    nb = jupytext.read(chapter)
    if not mt.cuda_available():
        _drop_gpu_cells(nb)
    # GPU cells write their measurements into the results folder; give them a
    # copy so a test run never overwrites the recorded results.
    results = tmp_path / "results"
    if (ROOT / "book" / "results").is_dir():
        shutil.copytree(ROOT / "book" / "results", results)
    results.mkdir(exist_ok=True)
    monkeypatch.setenv("MINITORCH_CUDA_RESULTS_DIR", str(results))
    # figures go through the inline backend, as in the build (its hooks are the book's)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    # The kernel must import the same minitorch_cuda this process tested, and run as the
    # book's build runs it (book/ipython_kernel_config.py), with the figure audit added.
    pythonpath = [str(ROOT), str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(pythonpath))
    (tmp_path / "book_figure_audit.py").write_text(_FIGURE_AUDIT)
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        (ROOT / "book" / "ipython_kernel_config.py").read_text()
        + '\nc.InlineBackend.rc.setdefault("figure.hooks", []).append("book_figure_audit:record")\n'
    )
    monkeypatch.setenv("IPYTHONDIR", str(profile.parent))
    nb.cells.append(nbformat.v4.new_code_cell(_FIGURE_REPORT))

    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(chapter.parent)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        executed = tmp_path / f"{chapter.stem}.ipynb"
        nbformat.write(nb, executed)
        pytest.fail(f"{chapter.name} failed (executed notebook: {executed}):\n{err}")
    # every value the prose pastes was glued from the recorded results (a typo or a missing
    # record would otherwise fail only in the full build)
    from minitorch_cuda.book import prose

    unglued = prose.glue_keys(chapter.read_text()) - prose.glued_names(nb)
    assert not unglued, f"{chapter.name}: the prose pastes values no cell glued: {sorted(unglued)}"
    audit = json.loads("".join(out.get("text", "") for out in nb.cells[-1].outputs))
    shown = sum(1 for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
                if {"image/svg+xml", "image/png"} & set(out.get("data", {})))  # fmt: skip
    assert audit["figures"] >= shown, f"{chapter.name}: the figure audit saw {audit['figures']} of {shown} figures"
    too_small = audit["too_small"]
    assert not too_small, (
        f"{chapter.name}: figures with text the page shows below {MIN_PT} pt "
        f"(minitorch_cuda/book/style.py; (text, points on the page)): {too_small[:3]}"
    )


def test_the_floating_point_explorer_answers_on_the_static_page(book_html: Path, browser) -> None:
    """Chapter 2's explorer computes in the page: typing a value updates the table
    without a kernel behind it, and the MX block view follows the element format."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    try:
        pg = ctx.new_page()
        pg.goto((book_html / "chapters" / "02_floating_point.html").as_uri(), wait_until="load", timeout=60_000)
        root = pg.locator(".fpx-root").first

        def stored(fmt: str) -> str:  # the "stored value" column of one format's row
            return root.locator(f".fpx-formats tr:has(td:first-child:text-is('{fmt}')) td").nth(2).inner_text()

        root.locator("input.fpx-value").fill("65520")
        assert stored("float16") == "inf" and stored("float32") == "65520"
        root.locator("input.fpx-value").fill("1.5")
        assert stored("float4_e2m1fn") == "1.5"
        assert root.locator(".fpx-formats tr", has_text="float8_e8m0fnu").locator("td").nth(2).inner_text() == "2"
        root.locator("select.fpx-element").select_option("float8_e4m3fn")
        assert "Shared scale X = 2" in root.locator(".fpx-mx").inner_text()
    finally:
        ctx.close()
