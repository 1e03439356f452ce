"""The prose of a page, as a reader reads it: its words, and its numbers that look measured.

A page is a MyST-markdown notebook (a chapter or a lab note). Its *prose* is
what stays once code cells, code listings, front matter, directive options,
labels and comments are taken out; a directive that holds prose (an
admonition, a figure's caption, an exercise) keeps its body.

Two checks read it (tests/test_book_prose.py):

- ``prose_words``: the length of a lesson, bounded so that a chapter reads in
  about 25 minutes;
- ``measured_numbers``: numbers with a unit of time, rate, share or ratio
  typed into the prose. A measured number must come from its record at build
  time (``glue`` below and myst-nb's ``{glue:text}`` role), so that
  re-recording updates the text; what the scan finds outside glue is either a
  cited constant (a datasheet peak, the blog's own numbers) or a slip.
"""

from __future__ import annotations

import re
from pathlib import Path

_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
_FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})\s*(\{[^}]*\})?\s*([^\n]*)$")
# directives whose body is code or data, not prose
_CODE_DIRECTIVES = {"{code-cell}", "{code-block}", "{code}", "{literalinclude}", "{raw}", "{glue:figure}", "{math}"}
_GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`[^`]*`")
_ROLE = re.compile(r"\{[\w:-]+\}`([^`]*)`")
_INLINE_CODE = re.compile(r"``.+?``|`[^`]*`")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_WORD = re.compile(r"[^\W_](?:[\w'’.,/×-]*\w)?")

# A number followed by a unit that says it was measured (or computed from a measurement).
UNITS = ("µs", "us", "ms", "ns", "s", "GB/s", "TB/s", "TFLOP/s", "GFLOP/s", "%", "x", "×")
_NUMBER = r"(?<![\w.])\d[\d,]*(?:\.\d+)?"
_MEASURED = re.compile(
    _NUMBER + r"(?:\s?(?:µs|us|ms|ns|GB/s|TB/s|TFLOP/s|GFLOP/s)\b|\s?%|x\b|\s(?:s)\b(?![-']))"
    r"|" + _NUMBER + r"\s?×(?!\s*(?:\d|" + "\u27e8v\u27e9" + r"))"  # a factor, not a product (128 × 128)
)
_GLUED = " \u27e8v\u27e9 "  # a glued value where the scan reads the prose: a number it may not flag


def prose(text: str) -> str:
    """The prose of a MyST page: without front matter, code cells, listings, directive
    options, comments and target labels; inline code and math become a placeholder word."""
    text = _COMMENT.sub("", _FRONT_MATTER.sub("", text))
    kept: list[str] = []
    closing: list[tuple[str, bool]] = []  # open fences: (marker, inside code)
    for line in text.splitlines():
        stripped = line.strip()
        fence = _FENCE.match(stripped)
        if closing and stripped == closing[-1][0]:
            closing.pop()
            continue
        in_code = any(code for _, code in closing)
        if fence and not in_code:
            marker, directive, _ = fence.groups()
            is_code = directive in _CODE_DIRECTIVES or (directive is None and not marker.startswith(":"))
            closing.append((marker, is_code))
            continue
        if in_code:
            continue
        if re.match(r"^:[\w-]+:", stripped) or re.match(r"^\([\w:-]+\)=$", stripped) or stripped.startswith("%"):
            continue
        if closing and stripped == "---":  # a directive's YAML options block
            continue
        kept.append(line)
    return "\n".join(kept)


def _reader_text(text: str, glued: str) -> str:
    """Prose as read: a glue role reads as ``glued``, other roles as their text, code and math as a word."""
    text = _GLUE_ROLE.sub(glued, prose(text))
    text = _ROLE.sub(lambda m: m.group(1).split("<")[0], text)
    return _MATH.sub(" math ", _INLINE_CODE.sub(" code ", text))


def prose_words(text: str) -> int:
    """How many words a reader reads in the page's prose (a glued value counts as one)."""
    return len(_WORD.findall(_reader_text(text, " value ")))


def measured_numbers(text: str) -> list[str]:
    """Every measured-looking number in the page's prose outside glue roles, code and math,
    each with a little of the sentence around it."""
    flat = " ".join(_reader_text(text, _GLUED).split())
    return [flat[max(0, m.start() - 40) : m.end() + 10].strip() for m in _MEASURED.finditer(flat)]


def glue_keys(text: str) -> set[str]:
    """The names the page's prose pastes with glue roles (``{glue:text}`name:.1f``` reads ``name``)."""
    return {m.group(0).split("`")[1].split(":")[0] for m in _GLUE_ROLE.finditer(prose(text))}


def glued_names(notebook) -> set[str]:
    """The names an executed notebook glued (its outputs' myst-nb metadata)."""
    return {
        out.get("metadata", {}).get("scrapbook", {}).get("name")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    } - {None}


def page_words(path: Path) -> int:
    return prose_words(Path(path).read_text())


def glue(name: str, value, display: bool = False) -> None:
    """Store ``value`` under ``name`` for the page's prose (``{glue:text}`name:.1f```), as
    myst-nb's ``glue`` does, without needing myst-nb where the notebook runs (Colab)."""
    import IPython
    from IPython.display import display as show

    if hasattr(value, "item"):  # a numpy scalar: its repr ("np.float64(...)") would not format
        value = value.item()
    prefix = "" if display else "application/papermill.record/"  # myst-nb's key for hidden values
    bundle, metadata = IPython.core.formatters.format_display_data(value)
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    show({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)
