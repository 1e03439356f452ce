"""Reading notebooks (``.ipynb`` or MyST ``.md``), finding exercise cells, executing them.

Exercise cells are found in the notebook *source*: the code cell whose
metadata says ``exercise: 'N.k'``, or, when a student lost the metadata, the
last code cell that defines the exercise's variable. Outputs are never read.
"""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import nbformat

from .exercises import Exercise

GPU_TAG = "gpu"


MAX_CELLS = 5000  # cells of one notebook (a course notebook has about a hundred)


def read(path: str | Path) -> nbformat.NotebookNode:
    """The notebook at ``path``. A MyST header that uses YAML anchors or aliases (``&a``, ``*a``: a
    few KB of them expand exponentially) is refused, as is a notebook of more than ``MAX_CELLS``
    cells; the grader calls this in a worker with a cap on memory and time (``runner.read_exercises``)."""
    path = Path(path)
    if path.suffix == ".md":
        import jupytext

        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"it is not UTF-8 text (byte {exc.start}): save it again from Jupyter") from None
        refuse_yaml_aliases(text)
        marks = text.count("{code-cell}") + text.count("\n+++")  # cell starts, counted before jupytext's slow parse
        if marks > MAX_CELLS:
            raise ValueError(f"it has about {marks} cells, more than the {MAX_CELLS} a notebook may have")
        nb = jupytext.reads(text, fmt="md")
    else:
        nb = nbformat.read(path, as_version=4)
    if len(nb.cells) > MAX_CELLS:
        raise ValueError(f"it has {len(nb.cells)} cells, more than the {MAX_CELLS} a notebook may have")
    return nb


# the YAML jupytext parses in a MyST notebook: the header, and a code cell's options (a --- block
# or :key: lines right after its fence)
_YAML_BLOCKS = re.compile(
    r"\A---[ \t]*\n(.*?)^---[ \t]*$"
    r"|^```\{code-cell\}[^\n]*\n---[ \t]*\n(.*?)^---[ \t]*$"
    r"|^```\{code-cell\}[^\n]*\n((?::[^\n]*\n)+)",
    re.S | re.M,
)


def refuse_yaml_aliases(text: str) -> None:
    """Raise ValueError if the YAML jupytext reads (``_YAML_BLOCKS``) uses an anchor or an alias (a
    "billion laughs" expands a few KB into gigabytes)."""
    import yaml

    for match in _YAML_BLOCKS.finditer(text):
        block = next(g for g in match.groups() if g is not None)
        try:
            tokens = list(yaml.scan(block, Loader=yaml.SafeLoader))
        except yaml.YAMLError:
            tokens = [t for t in ("&", "*") if re.search(rf"(^|[\s\[{{,:]){re.escape(t)}\w", block)]
        if any(isinstance(t, (yaml.AnchorToken, yaml.AliasToken, str)) for t in tokens):
            raise ValueError(
                "its YAML header or a cell's options use anchors or aliases (& and *), which the grader "
                "does not read: write the values out (jupytext writes none)"
            )


def find(folder: Path, stem: str) -> Path | None:
    """``stem.ipynb`` or ``stem.md`` in ``folder`` (the notebook as shipped or saved)."""
    for suffix in (".ipynb", ".md"):
        if (folder / f"{stem}{suffix}").exists():
            return folder / f"{stem}{suffix}"
    return None


def cell_exercise(cell) -> str | None:
    value = cell.get("metadata", {}).get("exercise")
    return None if value is None else str(value)


def python_source(source: str) -> str:
    """Cell source as plain Python: IPython magics and shell lines become comments."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        lines.append("# " + line if stripped.startswith(("%", "!")) else line)
    return "\n".join(lines)


def _defines(source: str, name: str) -> bool:
    try:
        tree = ast.parse(python_source(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # a cell nested past the parser's depth
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
    return False


def exercise_source(nb, ex: Exercise) -> str | None:
    """The source of the cell(s) holding exercise ``ex``, or None when there is none."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c.source for c in code if cell_exercise(c) == ex.id]
    if tagged:
        return "\n\n".join(tagged)
    defining = [c.source for c in code if _defines(c.source, ex.name)]
    return defining[-1] if defining else None


def without_gpu_cells(nb):
    nb = nbformat.from_dict(nb)
    nb.cells = [c for c in nb.cells if GPU_TAG not in c.get("metadata", {}).get("tags", [])]
    return nb


def strip_outputs(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def execute(nb, cwd: str | Path, cell_timeout: float) -> list[dict]:
    """Run every cell in a fresh kernel, errors allowed; one record per code cell.

    Records: index, exercise id (or None), tags, seconds, and the error
    (``ename``, ``evalue``) if the cell raised or timed out.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    nb = strip_outputs(nbformat.from_dict(nb))
    client = NotebookClient(
        nb,
        timeout=cell_timeout,
        allow_errors=True,
        interrupt_on_timeout=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
    )
    records: list[dict] = []
    with client.setup_kernel():  # the kernel inherits this process's environment
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            record = {
                "index": index,
                "exercise": cell_exercise(cell),
                "tags": list(cell.get("metadata", {}).get("tags", [])),
                "first_line": cell.source.strip().splitlines()[0][:80] if cell.source.strip() else "",
            }
            start = time.perf_counter()
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError:
                record["error"] = {"ename": "CellTimeoutError", "evalue": f"no result after {cell_timeout} s"}
            except DeadKernelError as exc:
                record["error"] = {"ename": "DeadKernelError", "evalue": str(exc)}
                record["seconds"] = time.perf_counter() - start
                records.append(record)
                break
            record["seconds"] = time.perf_counter() - start
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error" and "error" not in record:
                    record["error"] = {"ename": output.get("ename", ""), "evalue": output.get("evalue", "")}
            records.append(record)
    return records
