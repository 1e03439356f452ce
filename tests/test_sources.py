"""Every number in the chapters' prose traces to a source, and every citation to references.bib.

A measured number (GFLOP/s, TB/s, ms, µs, %, ...) in a paragraph passes when the paragraph
cites a source ({cite}), names a record (``something.json``, "the benchmark record"), says it
is a model or an estimate, or directly follows a code cell (whose output it discusses).
Anything else must be listed in ALLOWED with the reason it needs no record. No GPU needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
BIB = ROOT / "book" / "references.bib"

UNITS = r"(?:[GT]FLOP/s|[GMT]B/s|GiB/s|ms\b|µs\b|us\b|ns\b|microseconds?\b|milliseconds?\b|%|percent\b)"
NUMBER = re.compile(rf"(?<![\w.])(\d[\d,]*(?:\.\d+)?)\s*{UNITS}")
SOURCED = re.compile(
    r"\{cite\}|\w+\.json|\brecord(?:s|ed)?\b|\bmodel\b|\bestimat|\bpredict|\bdata sheet\b|\bhypothes",
    re.IGNORECASE,
)

# (chapter stem, text of the sentence): why its numbers need no record of their own.
WORKED = "a Try-it question or answer: arithmetic on the numbers it states"
ALLOWED: dict[tuple[str, str], str] = {
    ("05_profiling", "The intensity rises from 7.5 to about 40 flop"): WORKED,
    ("08_opt3_transpose_fusion", "removes one of the nine matmul launches per step"): WORKED,
}


def prose_paragraphs(text: str) -> list[tuple[str, str, bool]]:
    """(paragraph, its text with math and inline code blanked, follows a code cell) for the
    prose of a MyST chapter: code cells and code blocks dropped, admonitions kept."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # the jupytext header
    out: list[tuple[str, bool]] = []
    after_code = False
    lines = text.splitlines()
    i, paragraph = 0, []

    def flush():
        nonlocal paragraph, after_code
        body = " ".join(paragraph).strip()
        if body:
            out.append((body, after_code))
            after_code = False
        paragraph = []

    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(`{3,})\s*(\{[\w-]+\})?\s*(\S*)", line)
        if fence:
            flush()
            ticks, directive, lang = fence.groups()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(ticks)
                        and lines[j].strip() == ticks), len(lines))  # fmt: skip
            if directive in ("{admonition}", "{exercise}", "{solution}", "{note}", "{important}", "{tip}"):
                body = [ln for ln in lines[i + 1 : end] if not ln.startswith(":")]
                out.extend((p, False) for p in "\n".join(body).split("\n\n") if p.strip())
            else:  # a code cell or a code block: its numbers are computed or quoted code
                after_code = directive == "{code-cell}"
            i = end + 1
            continue
        if not line.strip():
            flush()
        else:
            paragraph.append(line)
        i += 1
    flush()
    return [(body, re.sub(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`", " ", body), after) for body, after in out]


def unsourced(text: str) -> list[str]:
    """Sentences with a measured number whose paragraph names no source."""
    found = []
    for raw, body, after_code in prose_paragraphs(text):
        if after_code or SOURCED.search(raw) or not NUMBER.search(body):
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", body):
            if NUMBER.search(sentence):
                found.append(sentence.strip())
    return found


def test_the_scan_flags_a_bare_number_and_passes_a_sourced_one() -> None:
    bare = "Intro.\n\nThe kernel reaches 123 GFLOP/s on this GPU.\n"
    assert unsourced(bare) == ["The kernel reaches 123 GFLOP/s on this GPU."]
    assert unsourced("The kernel reaches 123 GFLOP/s {cite}`blog`.\n") == []
    assert unsourced("It takes 4.2 ms in `matmul.json`.\n") == []
    after_cell = "```{code-cell} ipython3\nprint(1)\n```\n\nIt takes 4.2 ms.\n"
    assert unsourced(after_cell) == []
    assert unsourced("```{code-cell} ipython3\nx = 7  # 9 ms\n```\n") == []
    boxed = "```{admonition} Key takeaways\n:class: important\n\n- Stage 9 takes 0.5 ms per step.\n```\n"
    assert unsourced(boxed) == ["- Stage 9 takes 0.5 ms per step."]
    assert unsourced("The bound is $x = 5\\%$ and `n = 10 ms`.\n") == []


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_measured_number_in_the_prose_has_a_source(chapter: Path) -> None:
    allowed = [text for (stem, text) in ALLOWED if stem == chapter.stem]
    found = unsourced(chapter.read_text())
    bad = [s for s in found if not any(a in " ".join(s.split()) for a in allowed)]
    assert not bad, (
        f"{chapter.name}: numbers with no {{cite}}, record name or cell before them "
        "(add the source, or list them in tests/test_sources.py ALLOWED with a reason):\n  " + "\n  ".join(bad)
    )


def bib_keys() -> set[str]:
    return set(re.findall(r"^@\w+\{([^,\s]+),", BIB.read_text(), re.MULTILINE))


def test_every_citation_is_in_references_bib() -> None:
    keys, missing = bib_keys(), set()
    for page in [*CHAPTERS, *(ROOT / "book").glob("*.md")]:
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", page.read_text()):
            missing |= {k.strip() for k in group.split(",")} - keys
    assert not missing, f"cited but not in book/references.bib: {sorted(missing)}"


def test_every_reference_can_be_found() -> None:
    """Each entry has a year and a way to find it: a URL, a DOI, a publisher or a journal."""
    entries = re.split(r"\n(?=@)", BIB.read_text())
    for entry in (e for e in entries if e.startswith("@")):
        key = entry.split("{", 1)[1].split(",", 1)[0]
        if not entry.startswith("@misc"):  # a web page may carry no date; a paper or a book does
            assert re.search(r"^\s*year\s*=", entry, re.M), f"{key}: no year"
        where = r"^\s*(url|doi|publisher|journal|booktitle|howpublished|note)\s*="
        assert re.search(where, entry, re.M), f"{key}: no URL, DOI, publisher or journal"


def test_every_allowed_sentence_is_still_there() -> None:
    """An entry whose sentence was rewritten or removed goes, so the list cannot hide new numbers."""
    stale = []
    for stem, text in ALLOWED:
        found = [" ".join(s.split()) for s in unsourced((ROOT / "chapters" / f"{stem}.md").read_text())]
        if not any(text in s for s in found):
            stale.append((stem, text))
    assert not stale, f"ALLOWED entries that match no unsourced sentence any more: {stale}"
