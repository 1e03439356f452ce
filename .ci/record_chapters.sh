#!/usr/bin/env bash
# On a GPU machine: re-make the records that the named chapters' `gpu` cells write, and bring
# them back under $OUT. The pages read every measured number from these records at build time
# (glue), so committing them updates the text. One chapter a call keeps each call under 5 minutes:
#   bash .ci/gpu_run.sh bash .ci/record_chapters.sh chapters/16_regtiled_matmul.md
#   bash .ci/gpu_run.sh bash .ci/record_chapters.sh chapters/19_tensor_cores.md
#   bash .ci/gpu_run.sh bash .ci/record_chapters.sh chapters/21_latency_floor.md
# $OUT/records/ gets each record the run wrote (copy them into book/results/), and
# $OUT/record_chapters.json says which chapter wrote which record, in how many seconds.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="${OUT:-$root/_build/records}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp book/results/*.json "$scratch"/  # the cells read earlier records beside the ones they write
export MINITORCH_CUDA_RESULTS_DIR="$scratch"
start=$(date +%s)
python3 .ci/execute_chapters.py "$@"
status=$?
mkdir -p "$out/records"
written=()
for f in "$scratch"/*.json; do
    name=$(basename "$f")
    if ! cmp -s "$f" "book/results/$name"; then cp "$f" "$out/records/"; written+=("\"${name%.json}\""); fi
done
python3 - "$out/record_chapters.json" "$status" "$(( $(date +%s) - start ))" "$(IFS=,; echo "${written[*]}")" "$@" <<'PY'
import json, sys
path, status, seconds, written, *chapters = sys.argv[1:]
json.dump({"chapters": chapters, "status": int(status), "seconds": int(seconds),
           "records_written": json.loads(f"[{written}]")}, open(path, "w"), indent=1)
PY
echo "records written: ${written[*]:-none} -> $out/records"
exit $status
