"""Run the Triton kernels on the CPU, in Triton's interpreter, against numpy.

    python -m minitorch_cuda.tile_eval.interpret        # prints one JSON line per check

The interpreter must be chosen before Triton is first imported (its standard
library functions are decorated at import), so this runs as its own process:
``results()`` starts it and returns the parsed checks. No GPU is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from . import cases

# bf16 arithmetic in the interpreter is not bf16 arithmetic (Triton 3.9): only copy is checked
BF16_OPS = ("copy",)


def _checks():
    """(name, thunk) pairs; a thunk returns None when the kernel matches numpy, else a message."""
    from . import diagnostics
    from . import triton_kernels as tk
    from .interop import HostArray

    def stream(op: str, dtype: str):
        n = 3000  # three tiles of 1024, the last one partial: the mask is exercised
        ins = cases.stream_inputs(op, dtype, n, seed=7)
        want = cases.STREAMS[op].reference(cases.scalar_for(dtype), *[x.copy() for x in ins])
        arrays = [HostArray(x, dtype) for x in ins]
        out = arrays[0] if cases.STREAMS[op].in_place else HostArray(np.zeros(n, ins[0].dtype), dtype)
        tk.stream(op, out, arrays, cases.scalar_for(dtype))
        got, want = out.values.astype(np.float64), want.astype(np.float64)
        # numpy rounds a + s*b twice, a fused multiply-add once: floats get a tolerance
        tol = {"fp16": 2e-3, "bf16": 0.0, "fp32": 1e-6, "fp64": 1e-12}.get(dtype, 0.0)
        bad = np.abs(got - want) > tol * np.maximum(np.abs(want), 1)
        return None if not bad.any() else f"{int(bad.sum())} of {n} differ, first at {int(np.argmax(bad))}"

    def fib(variant: str):
        k = cases.fib_inputs(2500, seed=9)
        out = HostArray(np.zeros(k.size, np.int64), "int64")
        tk.fib(out, HostArray(k, "int64"), variant)
        bad = out.values != cases.fib_reference(k)
        return None if not bad.any() else f"{int(bad.sum())} differ"

    def heavy(n_values: int):
        size = 300 if n_values <= 16 else 64  # the interpreter is slow on [BLOCK, 64] tiles
        data = cases.heavy_inputs(size, seed=n_values)
        out = HostArray(np.zeros(size, np.uint32), "uint32")
        tk.heavy(out, HostArray(data, "uint32"), n_values, block=64)
        bad = out.values != cases.heavy_reference(data, n_values)
        return None if not bad.any() else f"{int(bad.sum())} differ"

    def mistake(run, expected: str):
        message = run(HostArray)
        return None if expected in message else f"expected {expected!r} in: {message}"

    for op in cases.STREAMS:
        for dtype in cases.STREAM_DTYPES:
            if dtype != "bf16" or op in BF16_OPS:
                yield f"stream-{op}-{dtype}", lambda op=op, dtype=dtype: stream(op, dtype)
    for variant in ("unrolled", "tilemax"):
        yield f"fib-{variant}", lambda v=variant: fib(v)
    for n_values in cases.HEAVY_NS:
        yield f"heavy-{n_values}", lambda k=n_values: heavy(k)
    yield "diagnostic-undefined-name", lambda: mistake(diagnostics.triton_undefined_name, "bb")
    yield "diagnostic-tile-size", lambda: mistake(diagnostics.triton_tile_not_power_of_two, "power of 2")


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1" or "triton" in sys.modules:
        print("run with TRITON_INTERPRET=1 in a fresh process (use interpret.results())", file=sys.stderr)
        return 2
    failed = 0
    for name, check in _checks():
        try:
            problem = check()
        except Exception as exc:  # a crash is a failed check, with its message
            problem = f"{type(exc).__name__}: {str(exc)[:300]}"
        failed += problem is not None
        print(json.dumps({"check": name, "ok": problem is None, "problem": problem}), flush=True)
    return 1 if failed else 0


def results(timeout: int = 600) -> list[dict]:
    """Run the checks in a fresh interpreter-mode process; one dict per check."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-m", "minitorch_cuda.tile_eval.interpret"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not rows:
        raise RuntimeError(f"the interpreter checks did not run:\n{done.stderr[-2000:]}")
    return rows


if __name__ == "__main__":
    sys.exit(main())
