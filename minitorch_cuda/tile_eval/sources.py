"""The kernels' source text, read from this package's files without importing them.

The chapter shows code through these functions (so what it shows is what
runs), and the evaluation's "lines per kernel" counts the same text. Python
kernels are found with ``ast``, so Triton or cuTile need not be installed to
read them. The brace matching and the ``ast`` lookup are the book's own
(``minitorch_cuda.book.excerpts``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..book import excerpts

HERE = Path(__file__).resolve().parent
FILES = {
    "cuda_c": HERE / "transform.cu",
    "triton": HERE / "triton_kernels.py",
    "cutile": HERE / "cutile_kernels.py",
    "cupy": HERE / "cupy_kernels.py",
}


def python_function(model: str, name: str) -> str:
    """The source of a top-level function (with its decorator) or assignment in a model's file."""
    try:
        return excerpts.python_definition(FILES[model].read_text(), name)
    except KeyError:
        raise KeyError(f"no function or assignment {name!r} in {FILES[model].name}") from None


def cuda_block(start_pattern: str) -> str:
    """From the first line matching ``start_pattern`` in transform.cu, with the comment
    lines right above it, to the line whose brace closes the block (or the macro) it opens."""
    text = FILES["cuda_c"].read_text()
    start = re.search(start_pattern, text, re.M).start()
    while start > 0:  # take the comment lines right above as part of the block
        above = text.rfind("\n", 0, start - 1) + 1
        if not text.startswith("//", above):
            break
        start = above
    return excerpts.braced_lines(text, start)


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
