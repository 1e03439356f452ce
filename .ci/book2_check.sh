#!/usr/bin/env bash
# The GPU half of branch wt-book2's work, for the lent GPU machine, under 5 minutes:
#   bash .ci/gpu_run.sh bash .ci/book2_check.sh
# (1) wgmma_tma.cu's GPU tests of the builds its ablation switches make and of the debug switches
# (against float64; the rest of tests/test_wgmma_tma.py is gpu_check.sh's tf32 part); (2) the ablation itself (ch19_tma_ablation.json); (3) chapter 21's
# latency floor with the torch.compile peer compiling the whole step (ch21_floor.json). $OUT gets
# the two records, each part's log (*.txt) and book2_check.json (exit codes, the ablation's shares
# of cuBLAS TF32, the compiled peer's epoch against PyTorch's CUDA graph).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/book2_check}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp book/results/*.json "$scratch"/
export MINITORCH_CUDA_RESULTS_DIR="$scratch"
mkdir -p "$out"
timeout -s INT 90 python3 -m pytest -m gpu -q -p no:cacheprovider -rf --timeout=80 --timeout-method=thread \
    tests/test_wgmma_tma.py -k "ablation or debug_switches" >"$out/wgmma_tma_tests.txt" 2>&1
tests=$?
timeout 50 python3 -m minitorch_cuda.experiments.tma_ablation >"$out/tma_ablation.txt" 2>&1
ablation=$?
timeout 150 python3 -m minitorch_cuda.experiments.latency_floor >"$out/latency_floor.txt" 2>&1
floor=$?
for name in ch19_tma_ablation ch21_floor; do
    cmp -s "$scratch/$name.json" "book/results/$name.json" || cp "$scratch/$name.json" "$out/" 2>/dev/null
done
python3 - "$out" "$tests" "$ablation" "$floor" <<'PY'
import json, sys
from pathlib import Path
out, tests, ablation, floor = sys.argv[1], *map(int, sys.argv[2:])
summary = {"exit": {"wgmma_tma_tests": tests, "tma_ablation": ablation, "latency_floor": floor}}
record = Path(out) / "ch19_tma_ablation.json"
if record.exists():
    from minitorch_cuda.experiments import tma_ablation
    data = json.loads(record.read_text())
    summary["ablation"] = {"device": data["device"]["name"], "fraction_of_cublas_tf32": tma_ablation.fractions(data),
                           "max_rel_err": {k: v["max_rel_err"] for k, v in data["variants"].items()}}
record = Path(out) / "ch21_floor.json"
if record.exists():
    data = json.loads(record.read_text())
    compiled, graph = data.get("torch_compile") or {}, data["torch_graph"]
    summary["torch_compile"] = {k: compiled.get(k) for k in ("name", "skipped", "median_s", "harness")}
    summary["torch_graph_median_s"] = graph["median_s"]
    if "median_s" in compiled:
        summary["compile_over_graph"] = compiled["median_s"] / graph["median_s"]
(Path(out) / "book2_check.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
PY
