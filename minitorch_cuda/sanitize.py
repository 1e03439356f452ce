"""Run every built-in kernel under NVIDIA compute-sanitizer, at every stage.

    python -m minitorch_cuda.sanitize                       # memcheck racecheck synccheck, every stage
    python -m minitorch_cuda.sanitize --tools memcheck --stages 0,8 --json out.json
    python -m minitorch_cuda.sanitize --jobs 4              # four runs at a time (racecheck is CPU-bound)
    python -m minitorch_cuda.sanitize --workload 8          # the workload alone (what the sanitizer runs)

For each tool and stage this runs

    compute-sanitizer --tool T --error-exitcode 1 --report-api-errors no \
        python -m minitorch_cuda.sanitize --workload STAGE

where the workload launches every kernel the stage uses on small odd shapes
(and a few training steps), reads the sanitizer's summary ("ERROR SUMMARY: N
errors"), prints a table tool x stage -> errors and exits nonzero if any run
reported an error or failed. racecheck is slow: the shapes are kept small. The JSON is
written again after every run, and an interrupt (Ctrl-C, a time limit's SIGINT) prints the table
of the runs that finished, so a stopped campaign keeps what it measured.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time

from .cli_parser import Parser

TOOLS = ("memcheck", "racecheck", "synccheck")
SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error", re.I)
RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazard", re.I)


def parse_summary(output: str) -> int | None:
    """Errors the sanitizer reported (racecheck's hazards count too), None if no summary."""
    counts = [int(m) for m in SUMMARY.findall(output)] + [int(m) for m in RACECHECK_SUMMARY.findall(output)]
    return max(counts) if counts else None


# --- the workload: runs inside the sanitizer -----------------------------------------------


def workload(stage: int) -> None:
    """Launch every built-in kernel the stage uses, on small odd shapes, and check results."""
    import numpy as np

    import minitorch_cuda as mt
    from minitorch_cuda import optim
    from minitorch_cuda.data import one_hot
    from minitorch_cuda.train import Protocol, Trainer

    rng = np.random.default_rng(stage)
    mt.set_stage(stage)

    def check(t, ref, what, tol=1e-3):
        got = t.numpy() if isinstance(t, mt.Tensor) else np.asarray(t)
        if not np.allclose(got, ref, atol=tol, rtol=tol):
            raise AssertionError(f"stage {stage}: {what} differs from numpy")

    a = rng.standard_normal((37, 33)).astype(np.float32)
    b = rng.standard_normal((33, 35)).astype(np.float32)
    col = rng.standard_normal((37, 1)).astype(np.float32)
    row = rng.standard_normal(33).astype(np.float32)
    ta = mt.tensor(a, "cuda", requires_grad=True)
    tb = mt.tensor(b, "cuda", requires_grad=True)
    tcol, trow = mt.tensor(col, "cuda", requires_grad=True), mt.tensor(row, "cuda", requires_grad=True)
    # elementwise (every binary op and pattern, affine, rdiv, unary maps) and their backwards
    y = ((ta + trow) * tcol - ta / (tcol * tcol + 1.0)).sigmoid() + (2.0 / (ta * ta + 1.0)).log()
    y = y.relu().exp() - 1.5 - ta.T.contiguous().T
    check(
        y,
        np.exp(
            np.maximum(
                1 / (1 + np.exp(-((a + row) * col - a / (col * col + 1)))) + np.log(2 / (a * a + 1)),
                0,
            )
        )
        - 1.5
        - a,
        "elementwise chain",
    )
    # matmul with every flag, batched and broadcast; softmax, reductions, cross-entropy
    z = ta.matmul(tb) + ta.matmul(tb.T, transpose_b=True)  # a flag, and a transposed view
    w = tb.matmul(ta, transpose_a=True, transpose_b=True)
    logits = z.matmul(mt.tensor(rng.standard_normal((35, 10)).astype(np.float32), "cuda"))
    batch = mt.tensor(rng.standard_normal((3, 37, 33)).astype(np.float32), "cuda", requires_grad=True)
    bb = batch @ tb
    bt = batch.matmul(batch, transpose_b=True)
    loss = (
        mt.cross_entropy_with_softmax(logits, mt.tensor(one_hot(rng.integers(0, 10, 37)), "cuda"))
        + z.softmax().sum(0).mean()
        + bb.sum(1).mean()
        + bt.mean()
        + w.mean()
        + ta[[3, 0, 36, 3]].sum()
        + ta[5:9].sum(1, keepdims=True).sum()
    )
    loss.backward()
    batch_np = np.asarray(batch.numpy())
    if mt.stages.full_fp32(stage):
        check(bb, batch_np @ b, "batched matmul", 1e-3)
    else:
        _check_tf32(bb.numpy(), batch_np, b, f"stage {stage}: batched matmul")
    if mt.stages.tensor_cores():
        _wgmma_workload(rng)
    # creation, fill, item, gather, optimizers and clipping
    mt.randn((41, 3), seed=1, device="cuda").fill_(0.5)
    mt.ones((1,), "cuda").item()
    opt = optim.RmsProp([ta, tb, tcol, trow, batch], lr=1e-3)
    opt.clip_gradients(0.1)
    opt.step()
    sgd = optim.SGD([ta], lr=1e-3)
    sgd.step()
    # a few training steps of a small MLP, shuffled on the device
    trainer = Trainer(Protocol(hidden=(31,), batch_size=17), "cuda")
    x = mt.tensor(rng.random((17 * 3, 784), dtype=np.float32), "cuda")
    labels = mt.tensor(one_hot(rng.integers(0, 10, 17 * 3)), "cuda")
    losses = [trainer.epoch(x, labels, max_batches=3)]
    mt.synchronize()
    if not all(np.isfinite(losses)):
        raise AssertionError(f"stage {stage}: training loss is not finite: {losses}")
    print(f"workload at stage {stage}: ok (loss {losses[0]:.4f})")


def _wgmma_workload(rng) -> None:
    """Stage 12 sends only products of 1024^3 and more to the wgmma kernels, on Hopper: launch
    them directly on small odd shapes (partial tiles, a batch, a transposed operand) instead:
    wgmma.cu, and wgmma_tma.cu with B transposed first and with B read as stored."""
    import numpy as np

    from minitorch_cuda.cuda import launch_core, matmul_launchers, probe
    from minitorch_cuda.cuda.array import DeviceArray
    from minitorch_cuda.cuda.backend import from_numpy
    from minitorch_cuda.cuda.ops_tensor import to_numpy
    from minitorch_cuda.cuda.runtime import arch

    if not probe.wgmma_fits(36, arch()):
        return
    a = rng.standard_normal((2, 36, 137)).astype(np.float32)  # stored transposed: ta=True
    b = rng.standard_normal((36, 263)).astype(np.float32)
    g = launch_core.Gemm.of(a, b, ta=True)  # 137 x 263 x 36, batch 2, B broadcast
    out = DeviceArray.empty((g.batch, g.M, g.N))
    matmul_launchers.matmul_tf32_wgmma(out, from_numpy(a), from_numpy(b), g)
    _check_tf32(to_numpy(out), a.transpose(0, 2, 1), b, "stage 12: matmul_tf32_wgmma")
    if arch() != "sm_90":  # TMA and setmaxnreg: Hopper only
        return
    a = rng.standard_normal((2, 137, 36)).astype(np.float32)  # a batch of A, one B: partial tiles
    b = rng.standard_normal((36, 264)).astype(np.float32)  # N % 4 == 0: TMA can read B as stored
    g = launch_core.Gemm.of(a, b)  # 137 x 264 x 36, B stored K x N
    da, db = from_numpy(a), from_numpy(b)
    for as_stored in (False, True):
        out = DeviceArray.empty((g.batch, g.M, g.N))
        matmul_launchers.matmul_tf32_wgmma_tma(out, da, db, g, bn=128, as_stored=as_stored)
        way = "as stored" if as_stored else "transposed"
        _check_tf32(to_numpy(out), a, b, f"stage 12: matmul_tf32_wgmma_tma, B {way}")
    a = rng.standard_normal((137, 520)).astype(np.float32)  # two K-slices of 260: each ends mid-stage
    b = rng.standard_normal((520, 8)).astype(np.float32)
    g, out = launch_core.Gemm.of(a, b), DeviceArray.empty((137, 8))
    matmul_launchers.matmul_tf32_wgmma_tma(out, from_numpy(a), from_numpy(b), g, bn=128, as_stored=True, splits=2)
    _check_tf32(to_numpy(out), a, b, "stage 12: matmul_tf32_wgmma_tma in two K-slices")


def _check_tf32(got, a, b, what: str) -> None:
    """``got`` is ``a @ b`` computed from TF32 inputs, rounded or truncated: each factor off by
    up to 2^-10 of itself (the bound tests/test_stages_beyond.py uses)."""
    import numpy as np

    bound = 2.5e-3 * (np.abs(a) @ np.abs(b)) + 1e-6
    if np.any(np.abs(got - a @ b) > bound):
        raise AssertionError(f"{what} differs from numpy beyond the TF32 bound")


# --- the driver: runs the workload under each tool -----------------------------------------


def run_one(sanitizer: str, tool: str, stage: int, timeout: float) -> dict:
    command = [
        sanitizer,
        "--tool",
        tool,
        "--error-exitcode",
        "1",
        # Failed API calls are not counted: cuda-bindings probes driver entry points that this
        # driver may lack (cuGetProcAddress errors). A call that matters and fails stops the
        # workload, and a run only counts as clean when the workload finished.
        "--report-api-errors",
        "no",
        sys.executable,
        "-m",
        "minitorch_cuda.sanitize",
        "--workload",
        str(stage),
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        output, code = result.stdout + result.stderr, result.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        output, code = output + f"\ntimed out after {timeout:.0f} s", None
    errors = parse_summary(output)
    # A clean summary only counts if the workload itself got to its end.
    finished = f"workload at stage {stage}: ok" in output
    ok = code == 0 and errors == 0 and finished
    return {
        "tool": tool,
        "stage": stage,
        "errors": errors,
        "returncode": code,
        "ok": ok,
        "workload_finished": finished,
        "seconds": round(time.perf_counter() - start, 1),
        "tail": "" if ok else output[-4000:],
    }


def table(results: list[dict], tools: list[str], stages: list[int]) -> str:
    cell = {(r["tool"], r["stage"]): r for r in results}

    def show(r):
        if r["ok"]:
            return "0"
        if not r["errors"]:  # no summary, or a clean one from a workload that failed
            return "FAIL" if r["returncode"] is not None else "TIMEOUT"
        return str(r["errors"]) + ("" if r["returncode"] in (0, 1) else "!")

    head = f"{'tool':<10}" + "".join(f"{f's{s}':>9}" for s in stages)
    lines = [head, "-" * len(head)]
    for tool in tools:  # "-": not run (an interrupted campaign)
        lines.append(
            f"{tool:<10}" + "".join(f"{show(cell[(tool, s)]) if (tool, s) in cell else '-':>9}" for s in stages)
        )
    return "\n".join(lines)


def write_json(path: str, sanitizer: str, results: list[dict]) -> None:
    order = {tool: i for i, tool in enumerate(TOOLS)}
    ordered = sorted(results, key=lambda r: (order[r["tool"]], r["stage"]))
    with open(path, "w") as f:
        json.dump({"sanitizer": sanitizer, "results": ordered}, f, indent=2)


def main(argv: list[str] | None = None) -> int:
    from . import stages

    parser = Parser(prog="python -m minitorch_cuda.sanitize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--stages", type=stages.parse, help="e.g. 0-8 or 0,8 (default: every stage)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per sanitizer run")
    parser.add_argument("--jobs", type=int, default=1, help="sanitizer runs at a time (default 1)")
    parser.add_argument("--workload", type=int, metavar="STAGE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stages is None:
        args.stages = list(range(stages.MIN_STAGE, stages.MAX_STAGE + 1))

    if args.workload is not None:  # the child under compute-sanitizer; on the emulator, its own checks
        workload(args.workload)
        return 0
    from .needs_gpu import refuse_emulated

    refuse_emulated("python -m minitorch_cuda.sanitize", "compute-sanitizer would find no GPU work to check")

    sanitizer = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer" if os.path.exists("/usr/local/cuda/bin/compute-sanitizer") else None
    )
    if sanitizer is None:
        print("compute-sanitizer not found (it ships with the CUDA toolkit: add its bin/ to PATH)", file=sys.stderr)
        return 2
    from .device import cuda_available, cuda_unavailable_reason

    if not cuda_available():
        print(f"no CUDA here: {cuda_unavailable_reason()}", file=sys.stderr)
        return 2

    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give at least 1")
    results: list[dict] = []
    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    runs = [pool.submit(run_one, sanitizer, tool, stage, args.timeout) for tool in args.tools for stage in args.stages]
    try:
        for done in concurrent.futures.as_completed(runs):
            r = done.result()
            results.append(r)
            status = "ok" if r["ok"] else f"errors={r['errors']} rc={r['returncode']}"
            print(f"{r['tool']:<10} stage {r['stage']}: {status} ({r['seconds']} s)", flush=True)
            if not r["ok"]:
                print(r["tail"], file=sys.stderr)
            if args.json:
                write_json(args.json, sanitizer, results)
    except KeyboardInterrupt:
        print(f"\ninterrupted: {len(results)} of {len(runs)} runs finished\n{table(results, args.tools, args.stages)}")
        sys.stdout.flush()
        os._exit(130)  # not waiting for the runs under way: the interrupt reached them too
    pool.shutdown()
    print()
    print(table(results, args.tools, args.stages))
    failed = [r for r in results if not r["ok"]]
    if failed:
        print(f"\n{len(failed)} of {len(results)} runs reported errors or failed", file=sys.stderr)
        return 1
    print(f"\nall {len(results)} runs clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
