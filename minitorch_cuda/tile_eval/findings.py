"""The numbers chapter 20's prose states, computed from a tile_eval result.

The chapter glues each of them (``{glue:text}`name```), so a re-recorded run
rewrites the text with it; where a sentence compares (a tie, lower, exactly),
the word is computed here too, so that it cannot contradict the numbers.
Like ``report``, nothing here measures: it reads the dict the benchmark wrote.
"""

from __future__ import annotations

import statistics

from minitorch_cuda.tile_eval import cases

TIE = 0.10  # a ratio to CUDA C within this of 1 counts as level with it
MULTI_ARRAY = ("add", "triad", "nstream")  # the streams that read two or three arrays
SOURCE_FIB_LARGEST = 0.73  # the CCCL evaluation's tile fibonacci at 2^28, against CUB (its own number)


def _ratio(data: dict, case: str, model: str, log2: int, dtype: str | None = None) -> float:
    for r in data["throughput"]:
        if (r["case"], r["model"], r["log2"]) == (case, model, log2) and dtype in (None, r["dtype"]):
            return r["ratio_to_cuda_c"]
    raise KeyError(f"tile_eval has no {model} row for {case} {dtype or ''} at 2^{log2}")


def _row(data: dict, case: str, model: str, log2: int) -> dict:
    return next(r for r in data["throughput"] if (r["case"], r["model"], r["log2"]) == (case, model, log2))


def _streams(data: dict, model: str, log2: int) -> list[dict]:
    return [
        r
        for r in data["throughput"]
        if r["case"] in cases.STREAMS and r["model"] == model and r["log2"] == log2 and "ratio_to_cuda_c" in r
    ]


def _level(ratio: float) -> str:
    return "ties" if abs(ratio - 1) <= TIE else ("is slower" if ratio < 1 else "is faster")


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _count(n: int) -> str:
    return f"{n:,}"


def streams(data: dict) -> dict:
    largest = max(data["sizes_log2"])
    triton = _streams(data, "triton", largest)
    close = [r for r in triton if abs(r["ratio_to_cuda_c"] - 1) <= TIE]
    lo = min(close, key=lambda r: r["ratio_to_cuda_c"])
    hi = max(close, key=lambda r: r["ratio_to_cuda_c"])
    outside = sorted((r for r in triton if r not in close), key=lambda r: r["ratio_to_cuda_c"])
    cupy = _streams(data, "cupy", largest)
    wide = [r["ratio_to_cuda_c"] for r in cupy if r["case"] in MULTI_ARRAY and r["dtype"] in ("fp64", "int64")]
    above = [
        r["fraction_of_copy"]
        for r in data["throughput"]
        if r["case"] in MULTI_ARRAY and r["model"] in ("cuda_c", "triton") and r["log2"] == largest
    ]
    found = {
        "largest_log2": largest,
        "tie_band": TIE,
        "streams_close": len(close),
        "streams_total": len(triton),
        "streams_lo": lo["ratio_to_cuda_c"],
        "streams_lo_case": f"{lo['dtype']} {lo['case']}",
        "streams_hi": hi["ratio_to_cuda_c"],
        "streams_hi_case": f"{hi['dtype']} {hi['case']}",
        "stream_exceptions": _listing([f"{r['dtype']} {r['case']} {r['ratio_to_cuda_c']:.2f}x" for r in outside])
        if outside
        else "none",
        "multi_array_copy_max": max(above),
        "cupy_wide_lo": min(wide),
        "cupy_wide_hi": max(wide),
    }
    for dtype in ("fp64", "fp32", "fp16", "int8"):
        found[f"cupy_copy_{dtype}"] = _ratio(data, "copy", "cupy", largest, dtype)
    for log2 in data["sizes_log2"]:
        found[f"triton_median_{log2}"] = statistics.median(r["ratio_to_cuda_c"] for r in _streams(data, "triton", log2))
    return found


def correctness(data: dict) -> dict:
    rows = [r for r in data["throughput"] if r.get("correctness")]
    triton = [r for r in rows if r["model"] == "triton"]
    cupy = [r for r in rows if r["model"] == "cupy"]
    cupy_unequal = [r for r in cupy if not r["correctness"]["bitwise_equal"]]
    numpy_checked = [r["matches_numpy"] for r in rows if r["model"] == "cuda_c" and r["matches_numpy"] is not None]
    return {
        "triton_equal": sum(r["correctness"]["bitwise_equal"] for r in triton),
        "triton_cases": len(triton),
        "numpy_match": sum(numpy_checked),
        "numpy_cases": len(numpy_checked),
        "cupy_unequal_rows": len(cupy_unequal),
        "cupy_rows": len(cupy),
        "cupy_unequal_cases": _listing(sorted({f"{r['dtype']} {r['case']}" for r in cupy_unequal}) or ["none"]),
        "cupy_differing_share": max(
            (r["correctness"]["differing"] / r["correctness"]["elements"] for r in cupy_unequal), default=0.0
        ),
        "cupy_max_ulp": max((r["correctness"].get("max_ulp", 0) for r in cupy_unequal), default=0),
    }


def tuning(data: dict) -> dict:
    found = {}
    for case, t in data["tuning"]["triton"].items():
        ok = [r for r in t["rows"] if "gelems" in r]
        best, worst = max(ok, key=lambda r: r["gelems"]), min(ok, key=lambda r: r["gelems"])
        found[f"tune_spread_{case.split('_')[0]}"] = best["gelems"] / worst["gelems"]
        if case == "heavy32":
            log2 = t["n"].bit_length() - 1
            default = _row(data, "heavy32", "triton", log2)  # the throughput run uses the default configuration
            found["heavy32_default_gelems"] = default["gelems"]
            found["heavy32_tuned_gelems"] = best["gelems"]
            found["heavy32_tuned_ratio"] = best["gelems"] / _row(data, "heavy32", "cuda_c", log2)["gelems"]
            found["tuning_log2"] = log2
    return found


def launches(data: dict) -> dict:
    return {f"launch_{m}_us": o["enqueue_us"] for m, o in data["launch_overhead"].items() if "enqueue_us" in o}


def compiles(data: dict) -> dict:
    cuda_c, triton = data["compile"]["cuda_c"], data["compile"]["triton"]
    first = next(iter(triton))  # the run's first Triton compile also loads Triton's compiler
    usual = [k["cold_s"] for name, k in triton.items() if name not in (first, "heavy_64")]
    return {
        "cuda_c_module_s": data["cuda_c_module_compile_s"],
        "cuda_c_cold_lo_s": min(k["cold_s"] for k in cuda_c.values()),
        "cuda_c_cold_hi_s": max(k["cold_s"] for k in cuda_c.values()),
        "cuda_c_warm_hi_s": max(k["warm_s"] for k in cuda_c.values()),
        "triton_first_kernel": first.split("_")[0],
        "triton_first_s": triton[first]["cold_s"],
        "triton_cold_lo_s": min(usual),
        "triton_cold_hi_s": max(usual),
        "triton_warm_lo_ms": min(k["warm_s"] for k in triton.values()) * 1e3,
        "triton_warm_hi_ms": max(k["warm_s"] for k in triton.values()) * 1e3,
        "triton_heavy64_cold_s": triton["heavy_64"]["cold_s"],
        "triton_heavy64_cubin_mb": triton["heavy_64"]["cubin_bytes"] / 1e6,
        "cuda_c_heavy64_cold_s": cuda_c["heavy_64"]["cold_s"],
        "cuda_c_heavy64_cubin_kb": cuda_c["heavy_64"]["cubin_bytes"] / 1e3,
        "toolkit": ".".join(map(str, data["versions"]["cuda_toolkit"])),
    }


def outliers(data: dict) -> dict:
    largest, sizes = max(data["sizes_log2"]), sorted(data["sizes_log2"])
    fib = [_ratio(data, "fib", "triton", s) for s in sizes]
    cuda_c, triton = data["compile"]["cuda_c"], data["compile"]["triton"]
    sel = [triton[f"heavy_{n}"]["sass"]["SEL"] for n in cases.HEAVY_NS]
    heavy64 = triton["heavy_64"]
    found = {
        "fib_smallest": fib[0],
        "fib_lo": min(fib[1:]),
        "fib_hi": max(fib[1:]),
        "fib_vs_source": "lower" if fib[-1] < SOURCE_FIB_LARGEST else "higher",
        "fib_sel": triton["fib"]["sass"]["SEL"],
        "fib_branches": triton["fib"]["sass"]["BRA"],
        "fib_registers": triton["fib"]["registers"],
        "cuda_c_fib_sel": cuda_c["fib"]["sass"]["SEL"],
        "cuda_c_fib_branches": cuda_c["fib"]["sass"]["BRA"],
        "cupy_fib": _ratio(data, "fib", "cupy", largest),
        "cupy_fib_level": _level(_ratio(data, "fib", "cupy", largest)),
        "tilemax_fib": _ratio(data, "fib", "triton_tilemax", largest),
        "tilemax_branches": triton["fib_tilemax"]["sass"]["BRA"],
        "tilemax_registers": triton["fib_tilemax"]["registers"],
        "heavy_sel": _listing([_count(s) for s in sel]),
        "heavy_sel_law": "exactly" if all(s == 2 * n * n for s, n in zip(sel, cases.HEAVY_NS)) else "close to",
        "heavy_registers": _listing([str(triton[f"heavy_{n}"]["registers"]) for n in cases.HEAVY_NS[:-1]]),
        "cuda_c_heavy_registers_lo": min(cuda_c[f"heavy_{n}"]["registers"] for n in cases.HEAVY_NS),
        "cuda_c_heavy_registers_hi": max(cuda_c[f"heavy_{n}"]["registers"] for n in cases.HEAVY_NS),
        "heavy64_spills": _count(heavy64["spills"]),
        "heavy64_ldl": _count(heavy64["sass"]["LDL"]),
        "heavy64_stl": _count(heavy64["sass"]["STL"]),
        "heavy64_triton_s": _row(data, "heavy64", "triton", largest)["median_ms"] / 1e3,
        "heavy64_cuda_c_ms": _row(data, "heavy64", "cuda_c", largest)["median_ms"],
        "heavy64_slowdown": 1 / _ratio(data, "heavy64", "triton", largest),
    }
    for n in cases.HEAVY_NS:
        found[f"heavy{n}_ratio"] = _ratio(data, f"heavy{n}", "triton", largest)
    return found


SECTIONS = (streams, correctness, tuning, launches, compiles, outliers)


def numbers(data: dict) -> dict:
    """Every number and comparison word chapter 20's prose pastes, by its glue name. A section of
    the run that failed or was not run (the benchmark records its error and goes on) gives none of
    its numbers: the chapter still runs, and the book's build, which needs them all, says which."""
    found = {}
    for section in SECTIONS:
        try:
            found |= section(data)
        except (KeyError, TypeError, ValueError, StopIteration, ZeroDivisionError):
            continue
    return found
