#!/usr/bin/env bash
# The GPU half of the checks, for the lent GPU machine (logs and results in $OUT/gpu_check.tar.gz):
#   bash .ci/gpu_run.sh bash .ci/gpu_check.sh [PART ...]   (carry .gpu and .gpu_extra; see .ci/stage_gpu_extra.sh)
#   bash .ci/gpu_run.sh bash .ci/gpu_check.sh --parallel tests grader sanitize
#   bash .ci/gpu_run.sh bash .ci/gpu_check.sh --parallel chapters+grader tile   (a+b: one after the other)
# PARTs: tests grader grade1 sanitize notebooks results chapters tile tf32 steps torch floor ncu (default: tests grader
# sanitize notebooks results; together they need more than one 10-minute call, so pick parts
# per call). tests runs only the paths in $TESTS where set. grade1 times the grading of one
# full submission, cold and warm, with the default command and each --jobs value in $GRADE_JOBS.
# chapters re-records the chapters in $CHAPTERS. tile records chapter 20's tile_eval.json; tf32
# tests wgmma.cu and wgmma_tma.cu (tests/test_wgmma*.py, kept out of `tests`), then times them beside stage 12's
# kernel and cuBLAS (tf32_wgmma.json). steps splits chapter 16's MNIST steps (step_split.json).
# floor measures chapter 21's latency floor beside stages 10, 11 and 13 (ch21_floor.json).
# torch records PyTorch's own profile of the step, eager and graphed (torch_profile.json).
# ncu records Nsight Compute counters and matmul.cu's SASS behind the chapters' causes (ncu_*.json).
# Each part has its own time limit so one slow part cannot starve the others; SIGINT lets
# pytest print its summary when a limit is hit.
# --parallel runs the parts side by side, spread round-robin over the visible GPUs (the
# timing parts, `results`, `chapters`, `tile`, `tf32`, `grade1`, `steps`, `torch`, `floor` and `ncu`, only where each
# gets a GPU of its own); without it, each part's pytest workers spread over all the GPUs;
# pytest spreads over $WORKERS processes. A test that runs past 400 s fails with its
# stack (pytest-timeout) instead of holding the part until its limit.
set -u
out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out/results"
cp book/results/*.json "$out/results/"

part() {  # part NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout -s INT "$limit" "$@" >"$out/$name.log" 2>&1
    echo "== $name: exit $? after $((SECONDS - start)) s"
    tail -n 8 "$out/$name.log"
}

parallel=0
if [ "${1:-}" = "--parallel" ]; then parallel=1; shift; fi
workers="${WORKERS:-4}"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tests grader sanitize notebooks results)
run_part() {
    case $1 in
    tests) part tests 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rf --durations=10 -n "$workers" --timeout=400 \
               --ignore=tests/test_grader.py --ignore=tests/test_exercises.py --ignore=tests/test_notebooks.py \
               --ignore=tests/test_wgmma.py --ignore=tests/test_wgmma_tma.py ${TESTS:-} ;;
    # grading one student's full set (the known-good submission: solutions/ itself), cold and warm,
    # with the default command and each --jobs value in $GRADE_JOBS: grade_one.json (the guide's number)
    grade1) part grade1 560 python3 .ci/grade_one.py --out "$out/results" --jobs ${GRADE_JOBS:-} ;;
    # --dist loadscope: each module's tests on one worker, so the module fixture that grades every
    # known-wrong student runs once, not once per worker
    grader) part grader 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rf -n "$workers" --dist loadscope --timeout=400 \
               tests/test_grader.py tests/test_exercises.py ;;
    # four runs at a time: racecheck is CPU-bound (stages 9-13 take 80-90 s each alone)
    sanitize) part sanitize 540 python3 -m minitorch_cuda.sanitize --stages 0-13 --jobs 4 --json "$out/results/sanitize.json" ;;
    # Two workers at most: processes sharing one GPU are time-sliced, and the sync-heavy
    # early chapters then run ten times slower (measured with six workers).
    notebooks) part notebooks 560 python3 -m pytest -m notebooks -q -p no:cacheprovider -rf --durations=60 \
               -n "${NOTEBOOK_WORKERS:-2}" tests/test_notebooks.py ;;
    # Only these parts write results (into the copy under $out that the archive returns).
    results) MINITORCH_CUDA_RESULTS_DIR="$out/results" part results 540 bash .ci/refresh_results.sh ;;
    # re-records the `gpu` cells of the chapters named in $CHAPTERS (e.g. chapters/19_tensor_cores.md)
    chapters) MINITORCH_CUDA_RESULTS_DIR="$out/results" part chapters 560 python3 .ci/execute_chapters.py ${CHAPTERS:?} ;;
    # --json keeps what was measured (a checkpoint per case) should the limit stop the run.
    tile) MINITORCH_CUDA_RESULTS_DIR="$out/results" part tile 575 python3 -m minitorch_cuda.tile_eval --record \
               --json "$out/results/tile_eval_run.json" ;;
    # the wgmma kernels' tests first, each in a process that a hang cannot outlive (thread timeout)
    tf32) part tf32 400 bash -c "python3 -m pytest -m gpu -q -p no:cacheprovider -rf --timeout=120 \
               --timeout-method=thread tests/test_wgmma.py tests/test_wgmma_tma.py && python3 -m minitorch_cuda.experiments.tf32_wgmma --json $out/results/tf32_wgmma.json" ;;
    # chapter 5: PyTorch's own profile of the protocol step, eager and graphed (torch_profile.json)
    torch) MINITORCH_CUDA_RESULTS_DIR="$out/results" part torch 200 python3 -m minitorch_cuda.experiments.torch_profile ;;
    # chapter 16: each MNIST step of stages 8 and 9 split into host and GPU time (step_split.json)
    steps) MINITORCH_CUDA_RESULTS_DIR="$out/results" part steps 300 python3 -m minitorch_cuda.experiments.step_split ;;
    # chapter 21: the latency floor (graphs of empty kernels, a launch, a grid barrier) and the steps of
    # stages 10, 11, 13 beside PyTorch eager, its CUDA graph and torch.compile (ch21_floor.json); about a minute
    floor) MINITORCH_CUDA_RESULTS_DIR="$out/results" part floor 300 python3 -m minitorch_cuda.experiments.latency_floor ;;
    # Nsight Compute and SASS behind chapters 7, 10, 11, 13-16, 19 and 21 (ncu_<topic>.json); the run keeps
    # to its own 300 s budget (53 s before ch16_pipelined and ch21 joined), the limit leaves 80 s beyond it
    ncu) MINITORCH_CUDA_RESULTS_DIR="$out/results" part ncu 380 python3 -m minitorch_cuda.experiments.ncu \
               --out "$out/results" ;;
    *) echo "unknown part $1"; exit 2 ;;
    esac
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || gpus=1
[ "$gpus" -ge 1 ] || gpus=1
# One part alone: its pytest workers spread over every GPU (tests/conftest.py).
[ "$parallel" = 0 ] && export MINITORCH_CUDA_TEST_GPUS=$gpus
i=0
run_group() {  # a+b+c: the parts one after another
    local p
    for p in ${1//+/ }; do run_part "$p"; done
}
for p in "${parts[@]}"; do
    if [ "$parallel" = 1 ]; then
        CUDA_VISIBLE_DEVICES=$((i % gpus)) run_group "$p" &
        i=$((i + 1))
    else
        run_group "$p"
    fi
done
wait
# One archive of the logs and results: the lent machine returns only a few files.
tar -czf "$out/gpu_check.tar.gz" -C "$out" results $(cd "$out" && ls ./*.log 2>/dev/null) &&
    rm -rf "$out/results" "$out"/*.log
