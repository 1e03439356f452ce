"""The chapters and exercise notebooks as .ipynb, for Colab and for download.

    python -m minitorch_cuda.book.notebooks            # rewrite book/notebooks/
    python -m minitorch_cuda.book.notebooks --check    # exit 1 if out of date

The MyST-markdown files in chapters/ and exercises/ stay the sources. Colab
opens only .ipynb from a repository, so every source gets a copy without
outputs under ``book/notebooks/{chapters,exercises}/``, whose first cell,
collapsed, installs the course where it is missing (a fresh Colab runtime) and
does nothing anywhere else. The book's launch buttons and download links point
at these copies.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "book" / "notebooks"
FOLDERS = ("chapters", "exercises")
# Where the course is hosted; _config.yml's repository.url says the same.
REPOSITORY = "https://github.com/minitorch-cuda/minitorch-cuda"

INSTALL_CELL = f'''# Runs first, collapsed: installs the course where it is missing (a fresh Colab runtime);
# anywhere it is installed already, it does nothing.
import importlib.util, os, shutil, subprocess, sys

if importlib.util.find_spec("minitorch_cuda") is None:
    course = os.path.join("/content" if os.path.isdir("/content") else os.path.expanduser("~"), "minitorch-cuda")
    if not os.path.isdir(course):
        subprocess.run(["git", "clone", "--depth", "1", "{REPOSITORY}", course], check=True)
    extras = "cuda,grade" if shutil.which("nvidia-smi") else "grade"  # grade: the checks and ml_dtypes
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{{course}}[{{extras}}]"], check=True)
    sys.path.insert(0, course)
    os.chdir(os.path.join(course, "{{folder}}"))  # the notebook finds data/ and book/results/ from here
'''


def notebook(source: Path):
    """The .ipynb for one MyST-markdown source: outputs cleared, the install cell first."""
    import jupytext
    import nbformat

    nb = jupytext.read(source)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    install = nbformat.v4.new_code_cell(INSTALL_CELL.replace("{folder}", source.parent.name).rstrip())
    # collapsed in JupyterLab and Colab, removed from the book's pages
    install.metadata = {"jupyter": {"source_hidden": True}, "cellView": "form", "tags": ["remove-cell"]}
    nb.cells.insert(0, install)
    nb.metadata.pop("jupytext", None)
    nb.metadata["colab"] = {"provenance": [], "name": source.with_suffix(".ipynb").name}
    nb.metadata["accelerator"] = "GPU"
    return nb


def targets() -> dict[Path, Path]:
    return {
        OUT / folder / src.with_suffix(".ipynb").name: src
        for folder in FOLDERS
        for src in sorted((ROOT / folder).glob("[0-9][0-9]_*.md"))
    }


def render(source: Path) -> str:
    import nbformat

    nb = notebook(source)
    for index, cell in enumerate(nb.cells):  # stable ids: a regeneration changes nothing
        cell.id = f"cell-{index}"
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minitorch_cuda.book.notebooks", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="only report notebooks that are out of date (exit 1)")
    args = parser.parse_args(argv)
    wanted = {path: render(src) for path, src in targets().items()}
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    extra = [p for folder in FOLDERS for p in (OUT / folder).glob("*.ipynb") if p not in wanted]
    if args.check:
        for p in stale + extra:
            print(f"out of date: {p.relative_to(ROOT)}", file=sys.stderr)
        if stale or extra:
            print("run: python -m minitorch_cuda.book.notebooks", file=sys.stderr)
        return 1 if stale or extra else 0
    for p in extra:
        p.unlink()
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(wanted[p])
    print(f"{len(stale)} notebooks written, {len(extra)} removed, {len(wanted) - len(stale)} up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
