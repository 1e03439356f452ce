"""The book's prose: each lesson reads in about 25 minutes, each lab-notes experiment in a few,
and no measured number is typed into the text (it comes from its record at build time, through
glue, so that re-recording updates the page). Fast: reads the sources, builds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from minitorch_cuda.book import devices, prose

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))
LAB_NOTES = sorted((ROOT / "book" / "lab_notes").glob("[0-9][0-9]_*.md"))
PAGES = CHAPTERS + LAB_NOTES

LESSON_WORDS = 4000  # about 25 minutes of reading
EXPERIMENT_WORDS = 650  # one section of a lab note: "about 600 words and one table"

# Numbers the prose may type: constants it cites, not measurements (number and unit as written).
CITED = {
    "997.691 s": "the blog's naive stage, its own timing",
    "2.399 s": "the blog's stage 1, its own timing",
    "0.206 s": "the blog's final stage, its own timing",
    "20 s": "arithmetic on the blog's 997.691 s read as 50 steps",
    "1.2 s": "arithmetic on the blog's 997.691 s read as one epoch",
    "652 GFLOP/s": "the blog's tiled kernel at its largest size",
    "the tiled kernel had 12% of cuBLAS": "the blog's tiled kernel against the blog's cuBLAS",
    "an average of 101 us": "the blog's profile of its naive matmul",
    "a median of 51 us": "the blog's profile of its naive matmul",
    "99.4%": "the blog's first profile: the share of its copies",
    "11.6x": "the blog's own speedup, quoted",
    "0.3325 s": "the blog's shuffle-loop experiment, its own timing",
    "0.3318 s": "the blog's shuffle-loop experiment, its own timing",
    "5,373 GFLOP/s": "the blog's cuBLAS at 1024³",
    "| 12% |": "the blog's tiled kernel as a share of its cuBLAS",
}

# Pages whose prose still types measured numbers: each is to be converted to glue. The test
# fails when a page listed here is clean (take it off the list) or one not listed is not.
STILL_TO_CONVERT: set[str] = set()


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def stray_numbers(path: Path) -> list[str]:
    found = prose.measured_numbers(path.read_text())
    return [f for f in found if not any(cited in f for cited in CITED)]


@pytest.mark.parametrize("path", PAGES, ids=_name)
def test_a_lesson_reads_in_about_25_minutes(path: Path) -> None:
    words = prose.page_words(path)
    assert words <= LESSON_WORDS, (
        f"{_name(path)}: {words} words of prose, over {LESSON_WORDS}: move how the kernel was found to its "
        f"lab-notes page (book/lab_notes/) or drop what teaches nothing"
    )


@pytest.mark.parametrize("path", LAB_NOTES, ids=_name)
def test_each_lab_note_experiment_is_short(path: Path) -> None:
    sections = path.read_text().split("\n## ")[1:]
    long = {s.splitlines()[0]: prose.prose_words("## " + s) for s in sections}
    long = {title: words for title, words in long.items() if words > EXPERIMENT_WORDS}
    assert sections, f"{_name(path)}: no experiments (## sections)"
    assert not long, f"{_name(path)}: experiments over {EXPERIMENT_WORDS} words of prose: {long}"


@pytest.mark.parametrize("path", PAGES, ids=_name)
def test_measured_numbers_come_from_records(path: Path) -> None:
    stray = stray_numbers(path)
    if _name(path) in STILL_TO_CONVERT:
        assert stray, f"{_name(path)} types no measured number any more: take it off STILL_TO_CONVERT"
        return
    assert not stray, (
        f"{_name(path)}: measured numbers typed into the prose (glue them from their record with "
        f"minitorch_cuda.book.prose.glue and {{glue:text}}, or cite a constant in CITED): {stray[:5]}"
    )


# Records that do not yet say which GPU made them: the next recording writes the device (bench.py
# and the experiments do now). The test fails when one of them gains it (take it off the list).
RECORDS_WITHOUT_DEVICE = {
    "ch19_async_variants",
    "matmul",
    "matmul_transposed_b",
    "profiles",
    "profiles_beyond",
    "sanitize",
    "tf32_wgmma",
    "tf32_wgmma_h100",
}


@pytest.mark.parametrize("path", sorted((ROOT / "book" / "results").glob("*.json")), ids=lambda p: p.stem)
def test_every_record_names_its_gpu(path: Path) -> None:
    import json

    try:
        name = devices.device_name(json.loads(path.read_text()))
    except ValueError:
        assert path.stem in RECORDS_WITHOUT_DEVICE, f"{path.name} names no device: record it with its device"
        return
    assert path.stem not in RECORDS_WITHOUT_DEVICE, f"{path.name} names {name} now: take it off RECORDS_WITHOUT_DEVICE"
    devices.datasheet(name)  # a GPU the book has datasheet figures for


def test_the_list_of_pages_to_convert_names_pages_that_exist() -> None:
    assert not STILL_TO_CONVERT - {_name(p) for p in PAGES}


def test_the_prose_is_what_a_reader_reads() -> None:
    page = """---
jupytext: {}
---

(sec-x)=
# Title

The kernel ran 3.9x faster, in 74.2 µs, at 12.3% of the peak;
a 128 × 128 tile is a shape, and {glue:text}`speedup:.2f` times is glued.

```{code-cell} ipython3
print("45.1 ms")
```

:::{admonition} Note
:class: note
It took 2 s.
:::
"""
    found = prose.measured_numbers(page)
    assert any("3.9x" in f for f in found) and any("74.2 µs" in f for f in found)
    assert any("12.3%" in f for f in found) and any("2 s" in f for f in found)
    assert not any("45.1" in f or "128 ×" in f for f in found)
    assert len(found) == 4
    # words: the title, the sentences and the admonition's body; not the code cell, the label or the options
    assert prose.prose_words(page) == prose.prose_words(
        "Title The kernel ran 3.9x faster, in 74.2 µs, at 12.3% of the peak; a 128 × 128 tile is a shape, "
        "and value times is glued. It took 2 s."
    )


def test_records_name_their_gpu_and_its_datasheet() -> None:
    assert devices.short_name({"device": {"name": "NVIDIA H100 80GB HBM3"}}) == "H100"
    assert devices.short_name({"gpu": "NVIDIA H200, 580.159.04"}) == "H200"
    assert devices.datasheet({"runs": [{"device": "NVIDIA H200"}]})["dram_tb_s"] == 4.8
    with pytest.raises(ValueError, match="names no device"):
        devices.device_name({"command": "x"})
    with pytest.raises(KeyError, match="devices.py"):
        devices.datasheet("NVIDIA B200")
    assert devices.short_name({"device": {"name": "NVIDIA B200"}}) == "B200"  # a reader's own GPU still has a name
