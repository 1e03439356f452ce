#!/usr/bin/env bash
# The GPU half of the checks, for the lent GPU machine (logs and results under $OUT):
#   bash .ci/gpu_run.sh bash .ci/gpu_check.sh [PART ...]   (carry .gpu and .gpu_extra; see .ci/stage_gpu_extra.sh)
# PARTs: tests grader sanitize notebooks results (default: all, which needs more than one
# 10-minute call; pick parts per call). Each part has its own time limit so one slow part
# cannot starve the others; SIGINT lets pytest print its summary when a limit is hit.
set -u
out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out/results"
cp book/results/*.json "$out/results/"
export MINITORCH_CUDA_RESULTS_DIR="$out/results"   # chapters re-measure into a copy

part() {  # part NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout -s INT "$limit" "$@" >"$out/$name.log" 2>&1
    echo "== $name: exit $? after $((SECONDS - start)) s"
    tail -n 8 "$out/$name.log"
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tests grader sanitize notebooks results)
for p in "${parts[@]}"; do
    case $p in
    tests) part tests 420 python3 -m pytest -m gpu -q -p no:cacheprovider -rf --durations=10 \
               --ignore=tests/test_grader.py --ignore=tests/test_exercises.py --ignore=tests/test_notebooks.py ;;
    grader) part grader 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rf tests/test_grader.py tests/test_exercises.py ;;
    sanitize) part sanitize 240 python3 -m minitorch_cuda.sanitize --stages 0-8 --json "$out/sanitize.json" ;;
    notebooks) part notebooks 540 python3 -m pytest -m notebooks -q -p no:cacheprovider -rf --durations=40 tests/test_notebooks.py ;;
    results) part results 540 bash .ci/refresh_results.sh ;;
    *) echo "unknown part $p"; exit 2 ;;
    esac
done
# One archive: the lent machine returns only a limited number of files.
tar -czf "$out/results.tar.gz" -C "$out" results && rm -rf "$out/results"
