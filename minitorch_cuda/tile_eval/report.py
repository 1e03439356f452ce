"""Tables for chapter 20, drawn from a tile_eval result (the JSON the benchmark writes).

Every function takes the loaded dict and returns text; none measures
anything, so the chapter's ordinary cells run anywhere.
"""

from __future__ import annotations

from collections import defaultdict

MODELS = ("cuda_c", "triton", "triton_tilemax", "cupy", "cutile")


def _rows(data: dict, case: str | None = None, log2: int | None = None) -> list[dict]:
    return [
        r
        for r in data.get("throughput", [])
        if (case is None or r["case"] == case) and (log2 is None or r["log2"] == log2)
    ]


def where(data: dict) -> str:
    d = data["device"]
    cc = ".".join(map(str, d["compute_capability"]))
    return f"Measured on {d['name']} (compute capability {cc}), recorded {data.get('recorded', '?')}."


def availability_text(data: dict) -> str:
    return "\n".join(f"{m:8s} {'runs' if why is None else why}" for m, why in data["available"].items())


def ratio_table(data: dict, cases: list[str], log2: int) -> str:
    """GElem/s of CUDA C and each model's ratio to it, with the ratio's spread (quartiles)."""
    by = defaultdict(dict)
    for r in _rows(data, log2=log2):
        if r["case"] in cases:
            by[(r["case"], r["dtype"])][r["model"]] = r
    models = [m for m in MODELS if any(m in v for v in by.values())]
    head = f"{'case':9s} {'dtype':6s} {'CUDA C GElem/s':>15s}" + "".join(f" {m:>17s}" for m in models[1:])
    lines = [head]
    for (case, dtype), per in by.items():
        base = per.get("cuda_c", {})
        cells = [f"{case:9s} {dtype:6s} {base.get('gelems', float('nan')):15.1f}"]
        for m in models[1:]:
            r = per.get(m)
            if r is None:
                cells.append(f" {'-':>17s}")
            elif "error" in r or "ratio_to_cuda_c" not in r:
                cells.append(f" {'error':>17s}")
            else:
                # the ratio at the quartiles of the model's time, against CUDA C's median
                lo, hi = base["median_ms"] / r["q3_ms"], base["median_ms"] / r["q1_ms"]
                cells.append(f" {r['ratio_to_cuda_c']:6.2f}x [{lo:.2f}-{hi:.2f}]")
        lines.append("".join(cells))
    return "\n".join(lines)


def copy_fraction_table(data: dict, log2: int) -> str:
    lines = [f"{'case':9s} {'dtype':6s}" + "".join(f" {m:>9s}" for m in ("cuda_c", "triton", "cupy"))]
    by = defaultdict(dict)
    for r in _rows(data, log2=log2):
        if "fraction_of_copy" in r:
            by[(r["case"], r["dtype"])][r["model"]] = r["fraction_of_copy"]
    for (case, dtype), per in by.items():
        cells = "".join(f" {per[m]:9.0%}" if m in per else f" {'-':>9s}" for m in ("cuda_c", "triton", "cupy"))
        lines.append(f"{case:9s} {dtype:6s}{cells}")
    return "\n".join(lines)


def scaling_table(data: dict, case: str) -> str:
    """GElem/s and ratio per size for one case (the source's fibonacci table, for our models)."""
    by = defaultdict(dict)
    for r in _rows(data, case=case):
        by[r["log2"]][r["model"]] = r
    models = [m for m in MODELS if any(m in v for v in by.values())]
    rows = [["size", *models]]
    for log2, per in sorted(by.items()):
        cells = []
        for m in models:
            r = per.get(m, {})
            if "gelems" not in r:
                cells.append(r.get("error", "-")[:22])
            else:
                cells.append(f"{r['gelems']:.1f} ({r.get('ratio_to_cuda_c', 1):.2f}x)")
        rows.append([f"2^{log2}", *cells])
    # columns as wide as their content, so the table fits a book's column
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["GElem/s (ratio to CUDA C) per size"]
    for row in rows:
        lines.append(row[0].ljust(widths[0]) + "".join(f"  {c:>{w}s}" for c, w in zip(row[1:], widths[1:])))
    return "\n".join(lines)


def correctness_summary(data: dict) -> str:
    """Per model: cases bitwise equal to CUDA C, and the largest ULP / integer difference elsewhere."""
    per = defaultdict(lambda: {"equal": 0, "total": 0, "worst": []})
    for r in data.get("throughput", []):
        c = r.get("correctness")
        if c is None or r["model"] == "cuda_c":
            continue
        s = per[r["model"]]
        s["total"] += 1
        if c["bitwise_equal"]:
            s["equal"] += 1
        else:
            s["worst"].append((c.get("max_ulp", c.get("max_abs_diff")), f"{r['case']}/{r['dtype']}"))
    lines = []
    for model, s in per.items():
        worst = sorted(set(s["worst"]), reverse=True)[:4]
        detail = ", ".join(f"{where} {d} ulp" for d, where in worst) or "none"
        lines.append(f"{model:15s} bitwise equal in {s['equal']}/{s['total']} cases; largest differences: {detail}")
    numpy_ok = [r.get("matches_numpy") for r in data.get("throughput", []) if r["model"] == "cuda_c"]
    lines.append(
        f"CUDA C vs numpy (integer, fib, heavy cases): {sum(x is True for x in numpy_ok)} match, "
        f"{sum(x is False for x in numpy_ok)} differ"
    )
    return "\n".join(lines)


def compile_table(data: dict) -> str:
    lines = [
        f"{'model':7s} {'kernel':12s} {'cold s':>7s} {'warm s':>7s} {'cubin B':>8s} {'regs':>5s} {'spill/local':>11s}"
    ]
    for model, kernels in data.get("compile", {}).items():
        if "error" in kernels:
            lines.append(f"{model:7s} {'(all)':12s} {str(kernels['error'])[:80]}")
            continue
        for name, k in kernels.items():
            if "error" in k:
                lines.append(f"{model:7s} {name:12s} {k['error'][:60]}")
                continue
            spill = k.get("spills", k.get("local_bytes"))
            lines.append(
                f"{model:7s} {name:12s} {k['cold_s']:7.2f} {k['warm_s']:7.3f} {k.get('cubin_bytes') or '-':>8} "
                f"{k.get('registers', '-'):>5} {spill if spill is not None else '-':>11}"
            )
    return "\n".join(lines)


def evidence_text(data: dict, kernel: str) -> str:
    """What the PTX and SASS of ``kernel`` show in each model: counts and a few lines."""
    lines = []
    for model, kernels in data.get("compile", {}).items():
        k = kernels.get(kernel)
        if isinstance(k, dict) and "error" in k:
            lines.append(f"{model}: {k['error'][:200]}")
        if not k or "ptx" not in k:
            continue
        lines.append(f"{model}: PTX {k['ptx']}  SASS {k.get('sass', 'not disassembled')}")
        for ex in k.get("ptx_examples", [])[:3] + k.get("sass_examples", [])[:3]:
            lines.append(f"    {ex}")
    return "\n".join(lines)


def overhead_text(data: dict) -> str:
    overhead = data.get("launch_overhead", {})
    if "error" in overhead:
        return f"not measured: {overhead['error']}"
    return "\n".join(
        f"{m:8s} {o['error']}"
        if "error" in o
        else f"{m:8s} enqueue {o['enqueue_us']:6.1f} us/launch, until done {o['until_done_us']:6.1f} us/launch"
        for m, o in overhead.items()
    )


def tuning_text(data: dict) -> str:
    lines = []
    tuning = data.get("tuning", {}).get("triton", {})
    if "error" in tuning:
        return f"not measured: {tuning['error']}"
    for case, t in tuning.items():
        ok = [r for r in t["rows"] if "gelems" in r]
        if not ok:
            continue
        best, worst = max(ok, key=lambda r: r["gelems"]), min(ok, key=lambda r: r["gelems"])
        lines.append(
            f"{case:10s} best BLOCK={best['block']} warps={best['num_warps']} {best['gelems']:.1f} GElem/s; "
            f"worst BLOCK={worst['block']} warps={worst['num_warps']} {worst['gelems']:.1f} "
            f"({best['gelems'] / worst['gelems']:.2f}x apart)"
        )
    return "\n".join(lines)


def diagnostics_text(data: dict) -> str:
    out = []
    diagnostics = data.get("diagnostics", {})
    if "error" in diagnostics:
        return f"not recorded: {diagnostics['error']}"
    for mistake, per in diagnostics.items():
        out.append(f"== {mistake}")
        for model, message in per.items():
            out.append(f"-- {model}:\n{message}")
    return "\n".join(out)


def ncu_text(data: dict) -> str:
    ncu = data.get("ncu", {})
    if "error" in ncu:
        return f"ncu: {ncu['error']}"
    names = sorted({line.split('","')[4] for line in ncu.get("csv", [])[1:] if line.count('","') > 5})
    return f"ncu exit code {ncu.get('returncode')}; kernels it profiled:\n  " + "\n  ".join(names or ["none"])
