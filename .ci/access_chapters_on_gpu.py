"""On the GPU machine: chapters 7, 11 and 16 as a reader with a GPU runs them, their `gpu` cells left out
(those re-record; this checks the cells that read records). Their access cells trace the chapter's kernel
on the CPU emulator in a child process (emulator/access.py) while the notebook's own process has CUDA;
the values they glue must be the record's (book/results/access_vs_ncu.json). About a minute.

    bash .ci/gpu_run.sh python .ci/access_chapters_on_gpu.py      (writes $OUT/access_chapters_on_gpu.json)

Per chapter: whether it ran, each access cell's wall time, and the values its access cells glued.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import jupytext
import nbclient

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ["07_opt2_gather", "11_opt6_tiled_matmul", "16_regtiled_matmul"]
OUT = Path(os.environ.get("OUT", "/tmp/access_chapters_on_gpu"))


def seconds(cell) -> float:
    ran = cell.metadata.get("execution", {})
    start, end = (datetime.datetime.fromisoformat(ran[k].replace("Z", "+00:00"))
                  for k in ("iopub.execute_input", "shell.execute_reply"))  # fmt: skip
    return round((end - start).total_seconds(), 2)


def glued(cell) -> dict:
    """The values a cell glued (myst-nb's scrapbook outputs), as text."""
    values = {}
    for out in cell.get("outputs", []):
        scrapbook = out.get("metadata", {}).get("scrapbook")
        if scrapbook:
            values[scrapbook["name"]] = out["data"].get(scrapbook["mime_prefix"] + "text/plain")
    return values


def run(name: str) -> dict:
    path = ROOT / "chapters" / f"{name}.md"
    notebook = jupytext.read(path)
    notebook.cells = [c for c in notebook.cells if "gpu" not in c.get("metadata", {}).get("tags", [])]
    started = time.perf_counter()
    try:
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", record_timing=True,
                                resources={"metadata": {"path": str(path.parent)}}).execute()  # fmt: skip
        error = None
    except Exception as exc:  # noqa: BLE001  (reported, and the next chapter runs)
        error = f"{type(exc).__name__}: {str(exc)[-2000:]}"
    cells = [c for c in notebook.cells if c.cell_type == "code" and "accesses." in c.source]
    return {
        "chapter": name,
        "error": error,
        "seconds": round(time.perf_counter() - started, 1),
        "access_cells_seconds": [seconds(c) for c in cells if "execution" in c.metadata],
        "glued": {k: v for c in cells for k, v in glued(c).items() if k.startswith("access_")},
    }


def main() -> int:
    import minitorch_cuda as mt

    record = {"gpu": mt.cuda_available(), "chapters": [run(name) for name in CHAPTERS]}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "access_chapters_on_gpu.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))
    return 0 if record["gpu"] and not any(c["error"] for c in record["chapters"]) else 1


if __name__ == "__main__":
    sys.exit(main())
