"""The kernels' source text, read from this package's files without importing them.

The chapter shows code through these functions (so what it shows is what
runs), and the evaluation's "lines per kernel" counts the same text. Python
kernels are found with ``ast``, so Triton or cuTile need not be installed to
read them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {
    "cuda_c": HERE / "transform.cu",
    "triton": HERE / "triton_kernels.py",
    "cutile": HERE / "cutile_kernels.py",
    "cupy": HERE / "cupy_kernels.py",
}


def python_function(model: str, name: str) -> str:
    """The source of a top-level function (with its decorator) or assignment in a model's file."""
    text = FILES[model].read_text()
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            return "\n".join(lines[start - 1 : node.end_lineno])
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return "\n".join(lines[node.lineno - 1 : node.end_lineno])
    raise KeyError(f"no function or assignment {name!r} in {FILES[model].name}")


def cuda_block(start_pattern: str) -> str:
    """From the first line matching ``start_pattern`` in transform.cu to the end of its braces
    (or of its macro, for a ``#define`` that continues over backslashes)."""
    lines = FILES["cuda_c"].read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if re.search(start_pattern, line))
    # take the comment lines right above as part of the block
    while first > 0 and lines[first - 1].startswith("//"):
        first -= 1
    depth, opened = 0, False
    for i in range(first, len(lines)):
        depth += lines[i].count("{") - lines[i].count("}")
        opened = opened or "{" in lines[i]
        continuing = lines[i].rstrip().endswith("\\")
        if opened and depth == 0 and not continuing:
            return "\n".join(lines[first : i + 1])
    raise ValueError(f"unbalanced braces after {start_pattern!r}")


def code_lines(source: str) -> int:
    """Lines that are not blank, not comments and not docstrings: what one has to write."""
    count, in_doc = 0, False
    for raw in source.splitlines():
        line = raw.strip()
        if line.startswith(('"""', "'''")):
            if not (len(line) > 3 and line.endswith(('"""', "'''"))):
                in_doc = not in_doc
            continue
        if in_doc or not line or line.startswith(("#", "//")) and not line.startswith("#define"):
            continue
        count += 1
    return count


# What "one kernel" is in each model, for the lines-per-kernel row: the code a
# user writes for that operation (helpers it needs are counted with it).
KERNEL_SOURCES = {
    "triad": {
        "cuda_c": lambda: "\n".join(
            [
                cuda_block(r"^template <class T> struct Triad"),
                cuda_block(r"^template <class T> struct alignas"),
                cuda_block(r"^template <class T, class F>"),
                cuda_block(r"^#define INSTANTIATE_STREAM"),
            ]
        ),
        "triton": lambda: python_function("triton", "triad_kernel") + "\n" + python_function("triton", "_tile"),
        "cutile": lambda: python_function("cutile", "triad_kernel"),
        "cupy": lambda: 'cp.ElementwiseKernel("T a, T b, T s", "T out", "out = a + s * b", "cupy_triad")',
    },
    "fib": {
        "cuda_c": lambda: (
            cuda_block(r"^__device__ long long fib_value") + "\n" + cuda_block(r"^#define INSTANTIATE_FIB")
        ),
        "triton": lambda: python_function("triton", "fib_unrolled_kernel") + "\n" + python_function("triton", "_tile"),
        "cutile": lambda: python_function("cutile", "fib_kernel"),
        "cupy": lambda: python_function("cupy", "FIB"),
    },
    "heavy": {
        "cuda_c": lambda: cuda_block(r"^template <int N>") + "\n" + cuda_block(r"^#define INSTANTIATE_HEAVY"),
        "triton": lambda: python_function("triton", "heavy_kernel") + "\n" + python_function("triton", "_tile"),
    },
}


def lines_per_kernel() -> dict[str, dict[str, int]]:
    return {
        case: {model: code_lines(get()) for model, get in models.items()} for case, models in KERNEL_SOURCES.items()
    }
