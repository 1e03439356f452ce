"""The package's import graph reads in one direction (DESIGN.md, "The backend reads in one
direction"): no import circle but Tensor/Function's, none at all inside ``cuda/`` or the emulator,
and the backend never reaches up into the frontend, the grader or the benchmark.

The graph is read from the source with ``ast``: every import of a module, at its top level or
inside its functions (an import put off until a function runs still ties the two modules
together: the circles the issue counted ran through such late imports), but not those of an
``if TYPE_CHECKING:`` block, which never run. An edge goes to the most specific module named:
``from . import runtime`` to ``cuda.runtime``, ``from .driver import drv`` to ``cuda.driver``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import minitorch_cuda

ROOT = Path(minitorch_cuda.__file__).resolve().parent
PACKAGE = "minitorch_cuda"

# The one circle the design keeps: a Tensor method calls a Function, a Function builds Tensors.
ALLOWED_CIRCLE = {"minitorch_cuda.tensor", "minitorch_cuda.autograd", "minitorch_cuda.functions"}

# (importer prefix, imported prefix) pairs that must never appear, and why.
FORBIDDEN = [
    ("minitorch_cuda.cuda", "minitorch_cuda.nn", "the backend does not know the frontend's models"),
    ("minitorch_cuda.cuda", "minitorch_cuda.optim", "the backend does not know the frontend's optimizers"),
    ("minitorch_cuda.cuda", "minitorch_cuda.train", "the backend does not know the trainer"),
    ("minitorch_cuda.cuda", "minitorch_cuda.grade", "the backend does not know the grader"),
    ("minitorch_cuda.cuda", "minitorch_cuda.bench", "the backend does not know the benchmark"),
    ("minitorch_cuda.profiler", "minitorch_cuda.cuda.runtime", "the runtime hands the profiler its events"),
    ("minitorch_cuda.grade", "minitorch_cuda.bench", "the grader times with the timer, not the benchmark CLI"),
]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _statements(body: list[ast.stmt], late: bool):
    """The statements of ``body``, nested blocks opened: those that run when the module is imported,
    and with ``late`` those of its functions too; never an ``if TYPE_CHECKING:`` block's."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not late:
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _statements(node.orelse, late)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements(inner, late)


def import_graph(root: Path = ROOT, late: bool = False) -> dict[str, set[str]]:
    """{module: the package's modules it imports when imported (``late``: or when a function of it runs)}."""
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph[name] = set()
        for node in _statements(ast.parse(path.read_text()).body, late):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                if target not in modules:
                    continue
                named = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                edges.update(named if len(named) == len(node.names) else [*named, target])
        edges.discard(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_reader_sees_a_circle_and_skips_late_and_type_checking_imports(tmp_path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("from .a import x\nfrom .c import y\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import z\ndef late():\n    from . import b\n"
    )
    at_import = import_graph(package)
    assert at_import["pkg.a"] == {"pkg.b"} and at_import["pkg.b"] == {"pkg.a", "pkg.c"} and at_import["pkg.c"] == set()
    assert circles(at_import) == [{"pkg.a", "pkg.b"}]
    late = import_graph(package, late=True)
    assert late["pkg.c"] == {"pkg.b"}, "a function's import counts; a TYPE_CHECKING one does not"
    assert circles(late) == [{"pkg.a", "pkg.b", "pkg.c"}]


def test_the_only_import_circle_is_tensor_and_function() -> None:
    others = [sorted(c) for c in circles(import_graph(late=True)) if c != ALLOWED_CIRCLE]
    assert not others, f"import circles besides Tensor/Function: {others}"


@pytest.mark.parametrize("folder", ["cuda", "emulator", "grade"])
def test_no_import_circle_inside(folder: str) -> None:
    found = circles(import_graph(late=True))
    inside = [sorted(c) for c in found if any(m.startswith(f"{PACKAGE}.{folder}.") for m in c)]
    assert not inside, f"import circles through {folder}/: {inside}"


@pytest.mark.parametrize("importer, imported, why", FORBIDDEN)
def test_layering(importer: str, imported: str, why: str) -> None:
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph(late=True).items()
        if module == importer or module.startswith(importer + ".")
        for target in targets
        if target == imported or target.startswith(imported + ".")
    )
    assert not broken, f"{why}: {broken}"


def test_the_module_map_of_cuda_names_every_module() -> None:
    """cuda/__init__.py's docstring says where each concept lives: a new module joins the map."""
    import minitorch_cuda.cuda as cuda

    modules = {p.stem for p in (ROOT / "cuda").glob("*.py")} - {"__init__"}
    named = set(re.findall(r"\b(\w+)\b", cuda.__doc__))
    assert not modules - named, f"modules missing from cuda/__init__.py's map: {sorted(modules - named)}"
