"""Reading a kernel exercise's CUDA source out of a notebook without running anything.

The exercise cell assigns the source to the exercise's variable: a string literal
(``ew_relu_source = r\"\"\"...\"\"\"``), literals joined with ``+``, or a ``.cu`` file
next to the notebook read as ``open("relu.cu").read()`` or
``Path("relu.cu").read_text()``. This module finds that assignment in the cell's
syntax tree and evaluates only those forms; the grader compiles and launches the
result itself, so nothing else in the cell can change what is graded. A cell that
tries to change the framework (assigning to an attribute, ``setattr``,
``__code__``) is reported as such. What the source may ``#include`` is decided where
it is compiled (``kernel_build``: the preprocessor's own list of the files it opened,
against a folder of the course's headers, in the sandbox), not here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .exercises import Exercise
from .notebook import python_source
from .verdict import EXCEPTION, HOST_SIDE, MISSING, NOT_A_KERNEL, fail

MAX_SOURCE = 1 << 20
_DUNDERS = {"__code__", "__globals__", "__builtins__", "__dict__", "__class__", "__subclasses__", "__import__"}
_CALLS = {"setattr", "delattr", "exec", "eval", "compile", "__import__", "globals", "vars"}


def _tampering(tree: ast.AST) -> str | None:
    """What the cell would change in the framework if it ran, or None."""
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, (ast.Attribute, ast.Subscript)) and isinstance(t.ctx, (ast.Store, ast.Del)):
                    return f"`{ast.unparse(t)}` (line {t.lineno})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
            return f"`{node.func.id}(...)` (line {node.lineno})"
        if isinstance(node, ast.Attribute) and node.attr in _DUNDERS:
            return f"`{ast.unparse(node)}` (line {node.lineno})"
    return None


def _string(node: ast.AST, folder: Path | None, name: str) -> str:
    """The value of a string expression of the allowed forms; fails on anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _string(node.left, folder, name) + _string(node.right, folder, name)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args and not node.keywords:
        inner, method = node.func.value, node.func.attr
        if method in ("read", "read_text") and isinstance(inner, ast.Call) and len(inner.args) == 1:
            opener = inner.func.attr if isinstance(inner.func, ast.Attribute) else getattr(inner.func, "id", "")
            if opener in ("open", "Path") and (method == "read") == (opener == "open"):
                return _file(_string(inner.args[0], folder, name), folder)
        if method == "strip":
            return _string(inner, folder, name).strip()
    fail(
        NOT_A_KERNEL,
        f"{name} = {ast.unparse(node)[:80]}: the grader reads the kernel without running your cell, so the source "
        "must be a string literal in the cell (or a .cu file next to the notebook, read with open('name.cu').read())",
    )


def _file(relative: str, folder: Path | None) -> str:
    if folder is None:
        fail(NOT_A_KERNEL, f"the cell reads {relative!r}, but no folder was given to read it from")
    folder = Path(folder).resolve()
    path = (folder / relative).resolve()
    if not path.is_relative_to(folder) or not path.is_file():
        fail(NOT_A_KERNEL, f"{relative!r} is not a file in your folder (next to the notebook)")
    if path.stat().st_size > MAX_SOURCE:
        fail(NOT_A_KERNEL, f"{relative!r} is larger than {MAX_SOURCE} bytes")
    return path.read_text(errors="replace")


def kernel_source(cell: str, ex: Exercise, folder: Path | None = None) -> str:
    """The CUDA source exercise ``ex``'s cell assigns to its variable; fails with a reason otherwise."""
    try:
        tree = ast.parse(python_source(cell))
    except SyntaxError as exc:
        fail(EXCEPTION, f"the exercise cell is not valid Python: SyntaxError: {exc.msg} (line {exc.lineno})")
    except (ValueError, RecursionError, MemoryError) as exc:
        fail(EXCEPTION, f"the exercise cell cannot be read: {type(exc).__name__} (nested too deeply?)")
    changed = _tampering(tree)
    if changed:
        fail(
            HOST_SIDE,
            f"the exercise cell changes {changed}: the grader never runs this cell, it reads the kernel source "
            "and launches it itself; the work must happen in the kernel",
        )
    values = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == ex.name for t in node.targets):
            values.append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == ex.name:
            values.append(node.value)
    if not values or values[-1] is None:
        fail(MISSING, f"the exercise cell does not assign {ex.name!r} at its top level")
    try:
        source = _string(values[-1], folder, ex.name)
    except RecursionError:
        fail(NOT_A_KERNEL, f"{ex.name} joins too many strings: write the kernel as one string literal")
    if len(source) > MAX_SOURCE:
        fail(NOT_A_KERNEL, f"{ex.name} is longer than {MAX_SOURCE} characters")
    return source
