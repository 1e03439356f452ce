"""The tile evaluation benchmark: every row of chapter 20's table, in one run.

    python -m minitorch_cuda.tile_eval --json PATH [--sizes 16,20,24,28] [--cases triad,fib,...]
                                       [--repeats N] [--record] [--no-ncu]

Without a GPU it stops at once and says why. With ``--record`` the result is
also written to ``book/results/tile_eval.json`` (or under
``$MINITORCH_CUDA_RESULTS_DIR``) through ``minitorch_cuda.results.save``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from .. import results
from ..device import cuda_unavailable_reason
from ..needs_gpu import refuse_emulated
from . import availability, cases, sources

RESULT_NAME = "tile_eval"


def fresh_caches() -> None:
    """Empty compile caches for Triton and CuPy, so that 'cold' means cold (set before they import)."""
    root = Path(tempfile.mkdtemp(prefix="tile_eval_"))
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    os.environ["CUPY_CACHE_DIR"] = str(root / "cupy")


def load_models(available: dict, cuda_cache: str | None = None) -> dict:
    from .cuda_c import CudaModel

    models = {"cuda_c": CudaModel(cache_dir=cuda_cache)}
    if available["triton"] is None:
        from . import triton_kernels

        models["triton"] = triton_kernels
    if available["cupy"] is None:
        from . import cupy_kernels

        models["cupy"] = cupy_kernels
    if available["cutile"] is None:
        from . import cutile_kernels

        models["cutile"] = cutile_kernels
    return models


def versions() -> dict:
    out = {"python": platform.python_version(), "cuda_toolkit": availability.toolkit_version()}
    for name in ("pycuda", "triton", "cupy", "cuda.tile", "numpy"):
        try:
            module = __import__(name, fromlist=["__version__"])
            out[name] = getattr(module, "__version__", getattr(module, "VERSION", "?"))
        except Exception as exc:
            out[name] = f"not importable: {type(exc).__name__}"
    import pycuda.driver as drv

    out["driver"] = drv.get_driver_version()
    return out


def _safe(fn, *args) -> dict:
    """A section of the run; if it fails, its error is recorded and the run goes on."""
    try:
        return fn(*args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}


def run(
    sizes_log2: list[int],
    repeats: int,
    log=print,
    with_ncu: bool = True,
    checkpoint=None,
    case_names=cases.CASE_NAMES,
) -> dict:
    """Every section in turn; ``checkpoint(data)`` after each one and each throughput case,
    so that a run stopped at a time limit still leaves what it measured."""
    from ..cuda.runtime import device_properties
    from . import measure, rows, timing

    started = time.perf_counter()

    def note(message: str) -> None:  # each line says how far into the run it is: where the time goes
        log(f"[{time.perf_counter() - started:6.1f} s] {message}")
        if checkpoint is not None:
            checkpoint({**data, "partial": message, "seconds": time.perf_counter() - started})

    available = availability.report()
    data: dict = {
        "device": device_properties(),
        "available": available,
        "versions": versions(),
        "sizes_log2": sizes_log2,
        "cases": list(case_names),
        "repeats": repeats,
        "sampling": {"max_samples": repeats, "min_samples": timing.MIN_SAMPLES, "budget_ms": timing.SAMPLE_BUDGET_MS},
    }
    note(f"models: {', '.join(k + ('' if v is None else ' (no)') for k, v in available.items())}")
    with tempfile.TemporaryDirectory() as cuda_cache:
        t0 = time.perf_counter()
        models = load_models(available, cuda_cache)
        data["cuda_c_module_compile_s"] = time.perf_counter() - t0
        note("compile times, binary sizes, PTX/SASS")
        kernels = cases.compiled_kernels(case_names)
        slow = [k for k in kernels if k in rows.SLOW_TRITON_COMPILES] if "triton" in models else []
        probes = {k.replace("_", ""): rows.CompileProbe(k) for k in slow}  # case name -> its compile
        compile_rows = {"cuda_c": rows.cuda_compile(models["cuda_c"], kernels)}
    if "triton" in models:
        compile_rows["triton"] = _safe(rows.triton_compile, [k for k in kernels if k not in slow])

    def collect(case: str) -> None:  # a slow compile's row, once its kernel is about to run
        if case in probes:
            note(f"waiting for the Triton compile of {case}")
            probe = probes.pop(case)
            row = _safe(probe.row)
            if "error" not in compile_rows["triton"]:
                compile_rows["triton"][probe.kernel] = row

    if "cupy" in models:
        compile_rows["cupy"] = _safe(rows.cupy_compile)
    data["compile"] = compile_rows
    data["lines_per_kernel"] = sources.lines_per_kernel()

    l2 = data["device"]["l2_cache_bytes"]
    copy_cache: dict[int, float] = {}

    def copy_gbps(nbytes: int) -> float:
        if nbytes not in copy_cache:
            copy_cache[nbytes] = timing.copy_bandwidth(nbytes, repeats)["gbps"]
        return copy_cache[nbytes]

    throughput = data["throughput"] = []
    specs = cases.throughput_cases(sizes_log2, case_names)
    note(f"throughput: {len(specs)} cases")
    for i, spec in enumerate(specs):
        collect(spec["case"])
        note(f"[{i + 1}/{len(specs)}] {spec['case']} {spec['dtype']} 2^{spec['log2']}")
        throughput += measure.run_case(models, spec, l2, copy_gbps, repeats)
    for case in list(probes):
        collect(case)
    data["copy_gbps"] = {str(k): v for k, v in sorted(copy_cache.items())}

    note("launch overhead, tuning, diagnostics")
    data["launch_overhead"] = _safe(rows.launch_overhead, models)
    if "triton" in models:
        data["tuning"] = {"triton": _safe(rows.triton_tuning, repeats, l2, case_names)}
    data["diagnostics"] = _safe(rows.diagnostics_rows, available)
    if with_ncu:
        note("ncu")
        data["ncu"] = _safe(rows.ncu_rows)
    data["seconds"] = time.perf_counter() - started
    return data


def ncu_target() -> None:
    """One launch of each model's triad, fib and heavy32, for ncu to profile."""
    import numpy as np

    from . import measure

    models = load_models(availability.report())
    for spec in (
        {"case": "triad", "dtype": "fp32", "log2": 24},
        {"case": "fib", "dtype": "int64", "log2": 24},
        {"case": "heavy32", "dtype": "uint32", "log2": 24},
    ):
        measure.run_case(models, spec, 0, lambda nbytes: np.nan, repeats=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minitorch_cuda.tile_eval", description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--sizes", default=",".join(map(str, cases.SIZES_LOG2)), help="log2 of the sizes: 16,20,24,28")
    parser.add_argument("--cases", default=",".join(cases.CASE_NAMES), help="which cases: copy,scale,...,heavy64")
    parser.add_argument(
        "--repeats",
        type=int,
        default=20,
        help="timed samples per kernel, at most (default 20; slow ones stop early)",
    )
    parser.add_argument("--record", action="store_true", help=f"also save book/results/{RESULT_NAME}.json")
    parser.add_argument("--no-ncu", action="store_true", help="skip the ncu row (it runs ncu on a child process)")
    parser.add_argument("--ncu-target", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compile-probe", metavar="KERNEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.json and not args.record and not args.ncu_target:
        parser.error("say where the result goes: --json PATH and/or --record")
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes takes comma-separated integers (log2 of the sizes), not {args.sizes!r}")
    if any(not 4 <= s <= 30 for s in sizes):
        parser.error("--sizes: each log2 size must be between 4 and 30")
    names = tuple(c.strip() for c in args.cases.split(",") if c.strip())
    unknown = sorted(set(names) - set(cases.CASE_NAMES))
    if unknown or not names:
        parser.error(f"--cases: unknown {unknown or 'empty list'}; pick from {','.join(cases.CASE_NAMES)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    refuse_emulated("python -m minitorch_cuda.tile_eval")
    reason = cuda_unavailable_reason()
    if reason:
        print(f"tile_eval needs a CUDA GPU and PyCUDA: {reason}", file=sys.stderr)
        return 2
    if args.ncu_target:
        ncu_target()
        return 0
    if args.compile_probe:  # a child of run(): TRITON_CACHE_DIR comes from the parent
        from ..cuda import runtime  # noqa: F401  (a CUDA context for the compile's arguments)
        from . import rows

        args.json.write_text(json.dumps(rows.compile_probe(args.compile_probe)))
        return 0
    fresh_caches()
    command = "python -m minitorch_cuda.tile_eval " + " ".join(argv if argv is not None else sys.argv[1:])

    def write_json(data: dict) -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": command, **data}, indent=1) + "\n")

    data = run(
        sizes,
        args.repeats,
        log=lambda m: print(m, file=sys.stderr, flush=True),
        with_ncu=not args.no_ncu,
        checkpoint=write_json if args.json else None,
        case_names=names,
    )
    if args.json:
        write_json(data)
        print(f"wrote {args.json}")
    if args.record:
        print(f"recorded {results.save(RESULT_NAME, data, command)}")
    return 0
