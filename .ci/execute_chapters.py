"""Execute every chapter notebook end to end with nbclient (GPU cells included where a GPU exists).

On a GPU machine this is how the chapters' live measurements are recorded:
each `gpu` cell saves its JSON into MINITORCH_CUDA_RESULTS_DIR (book/results/
by default). Usage: python .ci/execute_chapters.py [chapters/NN_name.md ...]
"""

import sys
import time
from pathlib import Path

import jupytext
import nbclient

ROOT = Path(__file__).resolve().parent.parent


def main(paths: list[str]) -> int:
    chapters = [Path(p) for p in paths] or sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))
    failed = []
    for path in chapters:
        start = time.perf_counter()
        notebook = jupytext.read(path)
        try:
            nbclient.NotebookClient(
                notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
            ).execute()
            status = "ok"
        except Exception as exc:  # report and go on: one chapter must not hide the others
            status = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[-1] if str(exc) else ''}"
            failed.append(path.name)
        print(f"{path.name:40s} {time.perf_counter() - start:7.1f} s  {status}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
