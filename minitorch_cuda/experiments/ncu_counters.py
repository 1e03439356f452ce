"""Nsight Compute's counters: the metric names the topics ask for, ncu's CSV parsed into
per-kernel metrics in base units with the ratios derived from them, and the SASS listings of
``cuobjdump`` read into instruction counts and inner loops.

Pure text processing: the experiment (``experiments/ncu.py``) runs ncu and cuobjdump and
hands their output here; the tests feed it recorded output without a GPU.
"""

from __future__ import annotations

import csv
import io
import re

# --- the metrics, in groups the topics combine ----------------------------------------------------

TIME = ("gpu__time_duration.sum", "launch__grid_size", "launch__block_size", "launch__registers_per_thread")
SECTORS = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
)
MEMORY = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "lts__t_sector_op_read_hit_rate.pct",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "l1tex__t_sector_hit_rate.pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
)
SHARED = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
)
FMA = (
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",  # thread-level FFMAs: / 32 per warp instruction
    "sm__inst_executed_pipe_fma.sum",
    "smsp__inst_executed.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
STALLS = tuple(
    f"smsp__average_warps_issue_stalled_{why}_per_issue_active.ratio"
    for why in (
        "barrier",
        "membar",
        "long_scoreboard",
        "short_scoreboard",
        "mio_throttle",
        "math_pipe_throttle",
        "wait",
    )
)
STALLS_MORE = tuple(  # the other reasons, so that the dominant one is found among them all
    f"smsp__average_warps_issue_stalled_{why}_per_issue_active.ratio"
    for why in ("not_selected", "dispatch_stall", "lg_throttle", "no_instruction", "imc_miss", "branch_resolving",
                "drain", "sleeping", "misc")
)  # fmt: skip
ISSUE = ("smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__warps_eligible.avg.per_cycle_active")
BUSY = (  # how much of a tiny kernel's time the SMs had work
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "smsp__warps_launched.sum",
    "smsp__inst_executed.sum",
)
WAVES = (
    "launch__waves_per_multiprocessor",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__shared_mem_per_block_dynamic",
    "launch__shared_mem_per_block_static",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "device__attribute_multiprocessor_count",
)
TENSOR = (  # candidates: mma.sync/WMMA run on the HMMA pipe, wgmma on Hopper's GMMA pipe
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_hmma.sum",
    "sm__inst_executed_pipe_tensor_op_gmma.sum",
)

DERIVED = {  # name: (numerator, denominator metric or constant, scale)
    "sectors_per_request_ld": (SECTORS[0], SECTORS[1], 1.0),
    "sectors_per_request_st": (SECTORS[2], SECTORS[3], 1.0),
    "shared_ld_wavefronts_per_warp_ffma": (SHARED[1], FMA[0], 32.0),
    "shared_wavefronts_per_warp_ffma": (SHARED[0], FMA[0], 32.0),
    "dram_reads_of_matrix": ("dram__bytes_read.sum", 8192 * 8192 * 4, 1.0),
    "grid_blocks_per_sm": ("launch__grid_size", "device__attribute_multiprocessor_count", 1.0),
    "warps_per_sm": ("smsp__warps_launched.sum", "device__attribute_multiprocessor_count", 1.0),
    "ffma_gflops": (FMA[0], TIME[0], 2.0),  # 2 flops per thread FFMA, per ns: GFLOP/s
    "ffma_per_warp_instruction": (FMA[0], FMA[2], 1 / 32),
    "fma_pipe_share": (FMA[1], FMA[2], 1.0),
    "sm_active_share": ("sm__cycles_active.avg", "sm__cycles_elapsed.avg", 1.0),
}
DOMINANT_STALL = ("dominant_stall", "dominant_stall_share")  # derived from STALLS + STALLS_MORE, not a ratio

# --- parsing ncu's CSV -------------------------------------------------------------------------

SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "k": 1e3}
TIME_SCALE = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def number(text: str, unit: str = "") -> float | int | str | None:
    """A metric value in base units: '45,408' -> 45408, 'n/a' -> None; 'Mbyte' scales to bytes,
    'usecond' to ns (ncu's defaults when --print-units base was not given). Text stays text."""
    text = text.strip()
    if text in ("", "n/a", "N/A", "-"):
        return None
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return text
    if unit in TIME_SCALE:
        value *= TIME_SCALE[unit]
    else:
        m = re.fullmatch(r"([KMGTk]?)(byte|sector|B)(/s|/second)?", unit)
        if m:
            value *= SCALE[m.group(1)]
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def _rows(text: str) -> list[list[str]]:
    """The CSV lines of ncu's output (they start with a quote; ==PROF== lines and the
    workload's own output do not)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def parse_csv(text: str) -> list[dict]:
    """Profiled launches in ID order, each {id, kernel, block, grid, metrics, units}, from
    ncu's long format (a row per metric: the details page with --metrics) or the raw page's
    wide one (a row per launch, a units row under the header)."""
    rows = _rows(text)
    if not rows:
        return []
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}
    launches: dict[int, dict] = {}

    def launch(row: list[str]) -> dict:
        key = int(row[col["ID"]])
        return launches.setdefault(
            key,
            {
                "id": key,
                "kernel": row[col["Kernel Name"]],
                "block": row[col["Block Size"]] if "Block Size" in col else None,
                "grid": row[col["Grid Size"]] if "Grid Size" in col else None,
                "metrics": {},
                "units": {},
            },
        )

    if "Metric Name" in col:
        for row in rows[1:]:
            if len(row) != len(head):
                continue
            name, unit = row[col["Metric Name"]], row[col["Metric Unit"]]
            entry = launch(row)
            entry["metrics"][name] = number(row[col["Metric Value"]], unit)
            entry["units"][name] = unit
    else:
        metric_cols = [i for i, name in enumerate(head) if "__" in name]
        units = rows[1] if len(rows) > 1 and not rows[1][col["ID"]].strip().isdigit() else [""] * len(head)
        for row in rows[1:]:
            if len(row) != len(head) or not row[col["ID"]].strip().isdigit():
                continue
            entry = launch(row)
            for i in metric_cols:
                entry["metrics"][head[i]] = number(row[i], units[i])
                entry["units"][head[i]] = units[i]
    return [launches[k] for k in sorted(launches)]


def dominant_stall(metrics: dict) -> tuple[str, float] | None:
    """The stall reason with the most warps per issue cycle, and its share of all those reported."""
    stalls = {m: metrics.get(m) for m in STALLS + STALLS_MORE}
    stalls = {m: v for m, v in stalls.items() if isinstance(v, (int, float))}
    total = sum(stalls.values())
    if not total:
        return None
    top = max(stalls, key=stalls.get)
    return re.search(r"stalled_(\w+?)_per_issue", top).group(1), stalls[top] / total


def derive(metrics: dict, names: tuple[str, ...]) -> dict:
    out = {}
    for name in names:
        if name in DOMINANT_STALL:
            found = dominant_stall(metrics)
            if found:
                out[name] = found[DOMINANT_STALL.index(name)]
            continue
        top, bottom, scale = DERIVED[name]
        a = metrics.get(top)
        b = bottom if isinstance(bottom, (int, float)) else metrics.get(bottom)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
            out[name] = scale * a / b
    return out


def by_kernel(launches: list[dict], derived: tuple[str, ...] = (), every: bool = False) -> dict:
    """The last profiled launch of each kernel (the warm-ups were skipped), with derived ratios;
    ``every``: each launch, named in launch order ('01 name'), as a ranged run's step is."""
    out: dict[str, dict] = {}
    for i, entry in enumerate(launches):
        kept = {k: entry[k] for k in ("id", "block", "grid", "metrics", "units")}
        kept["derived"] = derive(entry["metrics"], derived)
        name = f"{i + 1:02d} {entry['kernel']}" if every else entry["kernel"]
        if name in out and out[name]["grid"] != entry["grid"]:  # the same kernel at another shape
            name = f"{name} @ {entry['grid']}"
        kept["launches_profiled"] = out.get(name, {}).get("launches_profiled", 0) + 1
        out[name] = kept
    return out


def offered_metrics(listing: str) -> set[str]:
    """Base metric names in ``ncu --query-metrics`` output (first column)."""
    return set(re.findall(r"^([a-z0-9]+__[A-Za-z0-9_]+)\s", listing, re.MULTILINE))


def usable(metrics: tuple[str, ...], offered: set[str] | None) -> tuple[list[str], list[str]]:
    """(kept, dropped): a metric is dropped when the listing has its unit (e.g. ``sm``) but not
    its base name; with no listing, or a unit the listing never names (``launch``), it is kept."""
    if not offered:
        return list(dict.fromkeys(metrics)), []
    units = {name.split("__")[0] for name in offered}
    kept, dropped = [], []
    for m in dict.fromkeys(metrics):
        base = m.split(".")[0]
        (kept if base in offered or m.split("__")[0] not in units else dropped).append(m)
    return kept, dropped


def rejected(output: str, metrics: list[str]) -> list[str]:
    """Metrics that ncu's error lines name (an unknown metric fails the whole run)."""
    errors = "\n".join(line for line in output.splitlines() if "ERROR" in line or "rror" in line)
    return [m for m in metrics if m in errors or m.split(".")[0] in errors]


# --- SASS (chapter 10) --------------------------------------------------------------------------

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;")


def sass_functions(listing: str) -> dict[str, list[tuple[int, str]]]:
    """cuobjdump -sass output split by function: [(address, instruction text)]; a label line
    (``.L_x_3:``) is kept as an entry with text ``.L_x_3:`` at the next address."""
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in listing.splitlines():
        m = re.search(r"Function\s*:\s*(\S+)", line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        if current is None:
            continue
        label = re.match(r"\s*(\.L_x_\d+):", line)
        if label:
            current.append((-1, label.group(1) + ":"))
            continue
        m = INSTRUCTION.search(line)
        if m:
            current.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(text: str) -> str:
    """The base opcode: '@!P0 LDG.E.128 R4, ...' -> 'LDG'."""
    parts = text.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def loops(code: list[tuple[int, str]]) -> list[list[str]]:
    """Bodies of backward branches (a BRA to an address or label at or before itself)."""
    labels, addresses, instructions = {}, [], []
    pending = []
    for address, text in code:
        if address < 0:
            pending.append(text[:-1])
            continue
        for name in pending:
            labels[name] = address
        pending = []
        addresses.append(address)
        instructions.append(text)
    bodies = []
    for i, text in enumerate(instructions):
        if opcode(text) != "BRA":
            continue
        m = re.search(r"`?\(?(\.L_x_\d+)\)?`?", text)
        target = labels.get(m.group(1)) if m else None
        if target is None:
            m = re.search(r"0x([0-9a-f]+)", text)
            target = int(m.group(1), 16) if m else None
        if target is not None and target <= addresses[i]:
            start = addresses.index(target) if target in addresses else None
            if start is not None:
                bodies.append(instructions[start : i + 1])
    return bodies


def histogram(instructions: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for text in instructions:
        op = opcode(text)
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def sass_summary(code: list[tuple[int, str]]) -> dict:
    """Instruction counts of one function and of its inner loop (the loop with the most FFMAs)."""
    instructions = [text for address, text in code if address >= 0]
    bodies = loops(code)
    inner = max(bodies, key=lambda b: (histogram(b).get("FFMA", 0), len(b)), default=[])
    ops = histogram(inner)
    return {
        "instructions": len(instructions),
        "opcodes": histogram(instructions),
        "inner_loop": {
            "instructions": len(inner),
            "ffma": ops.get("FFMA", 0),
            "instructions_per_ffma": len(inner) / ops["FFMA"] if ops.get("FFMA") else None,
            "opcodes": ops,
            "code": inner[:240],
        },
    }


def resource_usage(listing: str) -> dict[str, dict]:
    """``cuobjdump -res-usage``: {function: {REG: 40, SHARED: 0, ...}}."""
    out, current = {}, None
    for line in listing.splitlines():
        m = re.search(r"Function\s+(\S+?):", line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        if current is not None:
            for key, value in re.findall(r"([A-Z]+):(\d+)", line):
                current[key] = int(value)
    return out
