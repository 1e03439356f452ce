#!/usr/bin/env bash
# The GPU half of the checks, in one batch for the GPU machine (one call, logs under $OUT):
#   bash gpu_extra/run.sh bash .ci/gpu_check.sh      (or: bash .gpu/run.sh bash .ci/gpu_check.sh)
# Each part has its own time limit so one slow part cannot starve the others;
# SIGINT lets pytest print its summary when a limit is hit.
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
    tail -n 6 "$out/$name.log"
}

part grader 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_grader.py tests/test_exercises.py -rf
part sanitize 80 python3 -m minitorch_cuda.sanitize --tools memcheck synccheck --stages 0,3,5,8 --json "$out/sanitize.json"
part racecheck 50 python3 -m minitorch_cuda.sanitize --tools racecheck --stages 0,8 --json "$out/racecheck.json"
part notebooks 150 python3 -m pytest -m notebooks -q -p no:cacheprovider tests/test_notebooks.py -rf
