"""On a GPU: issue 41's table, a user's ``a @ b`` at stages 9 and 12 against cuBLAS FP32 and TF32.

    bash .ci/gpu_run.sh python3 .ci/user_matmul.py                  # every shape, 3-6 minutes
    bash .ci/gpu_run.sh python3 .ci/user_matmul.py square           # only the kinds named:
    bash .ci/gpu_run.sh python3 .ci/user_matmul.py skinny mnist     #   square, skinny, mnist

The same measurement as ``python -m minitorch_cuda.bench --user-matmul`` (minitorch_cuda/
user_matmul.py: back-to-back calls, wall clock and events, interleaved rounds, one process).
Writes $OUT/user_matmul.json (the device, the command, the table) and prints each ratio next to
its target; the exit status is 0 even where a ratio is below its target (the table says which).
A fresh machine compiles the kernels first (a minute or two). On the CPU emulator
(MINITORCH_CUDA_EMULATE=1) it runs tiny shapes once, as a dry run of the script: host times.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minitorch_cuda.device import require_cuda  # noqa: E402

require_cuda()
from minitorch_cuda import user_matmul  # noqa: E402
from minitorch_cuda.cuda.driver import EMULATED  # noqa: E402
from minitorch_cuda.cuda.runtime import device_properties  # noqa: E402

DRY_RUN = [("33x12x20", 33, 20, 12, "square"), ("16x36x8", 16, 8, 36, "skinny"), ("MNIST fwd 3", 64, 10, 128, "mnist")]


def main(kinds: list[str]) -> int:
    unknown = set(kinds) - {"square", "skinny", "mnist"}
    if unknown:
        print(f"unknown kinds {sorted(unknown)}: name square, skinny or mnist (or none: every shape)", file=sys.stderr)
        return 2
    sizes = DRY_RUN if EMULATED else user_matmul.SIZES
    sizes = [s for s in sizes if not kinds or s[-1] in kinds]
    if EMULATED:
        user_matmul.SAMPLE_S = 0.001
    start = time.perf_counter()

    def progress(row: dict) -> None:
        print(f"measured {row['label']}", file=sys.stderr, flush=True)

    table = user_matmul.table(sizes, rounds=1 if EMULATED else user_matmul.ROUNDS, progress=progress)
    result = {
        "device": device_properties(),
        "command": "python3 .ci/user_matmul.py " + " ".join(kinds),
        "seconds": time.perf_counter() - start,
        "user_path": table,
    }
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "user_matmul.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"{result['device']['name']}, torch {table['torch']}, {result['seconds']:.0f} s")
    print(user_matmul.format_table(table))
    below = [
        f"{row['label']} {name}" for row in table["rows"] for name, value in row["ratios"].items()
        if name in row["targets"] and value < row["targets"][name]
    ]  # fmt: skip
    print(f"below target: {', '.join(below) or 'none'}" if table["torch"] else "no PyTorch here: no ratios")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
