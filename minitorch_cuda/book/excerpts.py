"""Code the chapters show, read out of the package's files instead of imported.

The CUDA modules refuse to import without PyCUDA, and a chapter that shows the
real file can never drift from it. Python definitions are found with ``ast``;
CUDA functions and blocks end at the brace that closes them (``closing_brace``,
the one brace matcher, which ``tile_eval.sources`` uses too).
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


# --- Python ----------------------------------------------------------------------------


def python_definition(text: str, qualname: str) -> str:
    """The source of ``qualname`` in the module ``text``: a function or class with its
    decorators (``Class.method`` for a method), or a top-level assignment, dedented."""
    lines = text.splitlines()
    nodes: list = ast.parse(text).body
    node = None
    for part in qualname.split("."):
        node = next((n for n in nodes if _defines(n, part)), None)
        if node is None:
            raise KeyError(f"no definition {qualname!r}")
        nodes = getattr(node, "body", [])
    first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
    return textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno]))


def _defines(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.Assign):
        return any(getattr(t, "id", None) == name for t in node.targets)
    return getattr(node, "name", None) == name


def python_source(module: str, qualname: str) -> str:
    """``python_definition`` from ``minitorch_cuda/<module>`` (e.g. ``cuda/backend.py``)."""
    return python_definition((PACKAGE / module).read_text(), qualname)


# --- CUDA -------------------------------------------------------------------------------


def closing_brace(text: str, start: int) -> int:
    """The index of the ``}`` that closes the first ``{`` at or after ``start``.
    Braces in comments and strings count too: the kernels keep them balanced."""
    depth = 0
    for i in range(text.index("{", start), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced braces after {text[start : start + 60]!r}")


def braced_lines(text: str, start: int) -> str:
    """Whole lines, from the one holding ``start`` to the one whose brace closes the first
    ``{`` after it (a struct, a macro over backslashes, a function with its signature)."""
    first = text.rfind("\n", 0, start) + 1
    end = text.find("\n", closing_brace(text, start))
    return text[first : end if end >= 0 else len(text)]


def cuda_source(file: str, name: str) -> str:
    """A ``__global__`` or ``__device__`` function (or a macro body starting with
    ``#define name``) from ``minitorch_cuda/kernels/<file>``, up to its closing brace."""
    text = (PACKAGE / "kernels" / file).read_text()
    pattern = rf"^(?:#define {name}\b|(?:template <[^>]*>\s*\n)?(?:extern \"C\" )?__\w+__[^\n]*\b{name}\()"
    match = re.search(pattern, text, re.M)
    if match is None:
        raise KeyError(f"{name} not found in {file}")
    start = match.start()
    if text.startswith("#define", start):
        end = start
        while text[end:].split("\n", 1)[0].rstrip().endswith("\\"):
            end = text.index("\n", end) + 1
        return text[start : text.index("\n", end)]
    return text[start : closing_brace(text, start) + 1]


def cuda_block(file: str, first_line: str) -> str:
    """From the first line of ``minitorch_cuda/kernels/<file>`` that contains ``first_line``
    (a struct, a macro use, a lambda) to the brace that closes the block it opens."""
    text = (PACKAGE / "kernels" / file).read_text()
    start = text.find(first_line)
    if start < 0:
        raise KeyError(f"{first_line!r} not found in {file}")
    return braced_lines(text, start)


def file_header(file: str) -> str:
    """The comment block that opens a kernel file (which kernel each stage uses)."""
    lines = (PACKAGE / "kernels" / file).read_text().splitlines()
    return "\n".join(lines[: next(i for i, line in enumerate(lines) if not line.startswith("//"))])


def cuda_define(file: str, name: str) -> str:
    """The ``#define name`` of a kernel file with its continuation lines and the comment above it
    (a tile list of matmul_tiles.cuh, one line a tile)."""
    lines = (PACKAGE / "kernels" / file).read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(rf"#define {name}\b", line)), None)
    if start is None:
        raise KeyError(f"no #define {name} in {file}")
    first, end = start, start
    while first > 0 and lines[first - 1].startswith("//"):
        first -= 1
    while lines[end].endswith("\\"):
        end += 1
    return "\n".join(lines[first : end + 1])


# --- display ----------------------------------------------------------------------------


def code_block(text: str, language: str = "python"):
    """Code for display in a notebook output (highlighted on the rendered page)."""
    from IPython.display import Markdown

    return Markdown(f"```{language}\n{text.rstrip()}\n```")
