"""Recorded results as text tables, and the names the tables and figures give the kernels.

Every function takes dicts as loaded by ``minitorch_cuda.results.load``
(``bench_stages``, ``profiles``, ``matmul``) and returns a string to print.
"""

from __future__ import annotations

MATMUL_LABELS = {
    "matmul_naive": "naive (stage 0)",
    "matmul_transposed": "flags (stage 3)",
    "matmul_batched": "batched (stage 5)",
    "matmul_tiled": "tiled (stage 6)",
    "cublas": "cuBLAS",
    "matmul_regtiled": "regtiled (stage 9)",
    "matmul_tf32": "TF32 WMMA (stage 12)",
    "matmul_tf32_async": "TF32 mma.sync + cp.async (stage 12)",
    "matmul_tf32_wgmma": "TF32 wgmma (stage 12, Hopper)",
    "cublas_tf32": "cuBLAS TF32",
}
# The blog's comparison (chapter 14): the ladder's kernels of stages 0-8 and cuBLAS.
LADDER_MATMULS = ["matmul_naive", "matmul_transposed", "matmul_batched", "matmul_tiled", "cublas"]


def rows_text(rows: list[dict]) -> str:
    """Benchmark rows (from ``bench.run_stage``) as a table, each against the first."""
    head = f"{'stage':>5} {'batches':>8} {'median s':>9} {'ms/step':>9} {'speed-up':>9}  what changed"
    lines = [head, "-" * (len(head) + 20)]
    for r in rows:
        lines.append(
            f"{r['stage']:>5} {r['batches_per_epoch']:>8} {r['median_s']:9.3f} {r['s_per_step'] * 1e3:9.3f} "
            f"{rows[0]['s_per_step'] / r['s_per_step']:8.2f}x  {r['description']}"
        )
    return "\n".join(lines)


def stats_text(entry: dict, top: int | None = None) -> str:
    """A recorded profile as a table in the form of ``nsys stats`` (microseconds)."""
    head = f"{'Time (%)':>8} {'Total (us)':>10} {'Inst':>5} {'Avg':>7} {'Med':>7} {'Min':>7} {'Max':>7}  Name"
    lines = [head, "-" * (len(head) + 14)]
    for r in entry["stats"][:top]:
        lines.append(
            f"{r['time_pct']:8.1f} {r['total_us']:10.1f} {r['instances']:5d} {r['avg_us']:7.2f} "
            f"{r['med_us']:7.2f} {r['min_us']:7.2f} {r['max_us']:7.2f}  {r['name']}"
        )
    return "\n".join(lines)


def counters_text(*entries: tuple[str, dict]) -> str:
    """Counter dicts side by side: ``counters_text(("stage 0", c0), ("stage 1", c1))``."""
    names = list(entries[0][1])
    lines = [f"{'per step':>14}" + "".join(f"{label:>14}" for label, _ in entries)]
    for name in names:
        lines.append(f"{name:>14}" + "".join(f"{c.get(name, 0):14,.2f}" for _, c in entries))
    return "\n".join(lines)
