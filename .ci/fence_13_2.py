"""On a GPU: exercise 13.2's kernel (sumsq_last_block, the last block adds the partials), in one run.

    bash .ci/gpu_run.sh python3 .ci/fence_13_2.py      (writes $OUT/fence_13_2.json, about two minutes)

1. The GPU tests of 13.2: the solution passes its checks in process, every built-in kernel
   (sumsq_last_block among them) builds and loads.
2. The built-in kernel and the same kernel without its __threadfence(), launched LAUNCHES times
   each on one input of N floats (128 blocks): how many results differ from the first in any bit,
   and whether the count is back to 0 after each. The unfenced kernel is expected to differ rarely
   or never on a GPU (that is why 13.2's unfenced student is graded on the emulator only); the
   fenced one never.
3. The time of one launch of sumsq_last_block beside the one-block sumsq_shuffle on the same input.
On the CPU emulator (MINITORCH_CUDA_EMULATE=1) it runs a small input a few times, as a dry run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minitorch_cuda.device import require_cuda  # noqa: E402

require_cuda()
import minitorch_cuda as mt  # noqa: E402
from minitorch_cuda.cuda import launchers  # noqa: E402
from minitorch_cuda.cuda.driver import EMULATED  # noqa: E402
from minitorch_cuda.cuda.kernel_table import KERNEL_DIR  # noqa: E402
from minitorch_cuda.exercise import device_line  # noqa: E402
from minitorch_cuda.grade.harness import Buffer  # noqa: E402

LAUNCHES, N = (3, 40_000) if EMULATED else (2000, 1 << 22)
FENCE = "        __threadfence();  // the partial is visible to every block before the count says it is there\n"
TESTS = [
    "tests/test_exercises.py::test_gpu_solution_passes_in_process[13.2]",
    "tests/test_registry.py::test_every_builtin_kernel_compiles_and_loads",
]


def repeated(x: np.ndarray) -> dict:
    """LAUNCHES launches of sumsq_last_block (whichever runs for the name now) on ``x``."""
    n, blocks = x.size, launchers.last_block_grid(x.size)
    inp, count = Buffer(n, x), Buffer(1, np.zeros(1, np.uint32), np.uint32)
    first, differ, counts_left = None, 0, 0
    for _ in range(LAUNCHES):
        out = Buffer(1)
        launchers.sumsq_last_block(out, Buffer(blocks), count, inp, n, blocks)
        got = out.read("out")
        first = got if first is None else first
        differ += int(not np.array_equal(got, first))
        if count.read("count")[0] != 0:
            counts_left += 1
            count = Buffer(1, np.zeros(1, np.uint32), np.uint32)
    want = float(np.sum(x.astype(np.float64) ** 2))
    return {"launches": LAUNCHES, "differ_from_first": differ, "count_not_reset": counts_left,
            "first": float(first[0]), "float64": want}  # fmt: skip


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "/tmp/fence_13_2"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": device_line(), "emulated": EMULATED}
    if not EMULATED:
        start = time.time()
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                             cwd=ROOT, capture_output=True, text=True, timeout=240)  # fmt: skip
        result["tests"] = {"exit": run.returncode, "seconds": round(time.time() - start, 1),
                           "tail": run.stdout[-1500:]}  # fmt: skip
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    result["n"], result["blocks"] = N, launchers.last_block_grid(N)
    result["fenced"] = repeated(x)
    unfenced = (KERNEL_DIR / "reduce.cu").read_text()
    assert FENCE in unfenced, "reduce.cu's fence line changed: update FENCE"
    with mt.override("sumsq_last_block", unfenced.replace(FENCE, "")):
        result["unfenced"] = repeated(x)
    if not EMULATED:
        inp, blocks = Buffer(N, x), launchers.last_block_grid(N)
        count = Buffer(1, np.zeros(1, np.uint32), np.uint32)
        last_ms = launchers.sumsq_last_block(Buffer(1), Buffer(blocks), count, inp, N, blocks, timed=50)
        one_ms = launchers.sumsq("sumsq_shuffle", Buffer(1), inp, N, timed=50)
        result["ms"] = {"sumsq_last_block": last_ms, "sumsq_shuffle (one block)": one_ms}
    (out_dir / "fence_13_2.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
