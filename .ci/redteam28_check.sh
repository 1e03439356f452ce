#!/usr/bin/env bash
# Issue 36 on a GPU, in about a minute: Exercise 20.2 graded by what its kernel computes (the grader's
# own launch, tile_eval/triton_launch.py) on a machine whose Triton sees a CUDA driver. The shipped
# solutions must pass 20.2; the three cheats that compute on the host must lose it with their reason.
#   bash .ci/gpu_run.sh bash .ci/redteam28_check.sh
set -u
out="${OUT:-/tmp/redteam28}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
names="computes_on_the_host_by_operators patches_the_interpreter swaps_the_graders_launcher"
python3 - "$out" $names <<'PY'
import sys
sys.path.insert(0, "tests")
from submissions import CHEATS, STUDENTS, build
build(sys.argv[1] + "/students", {"full_solutions": STUDENTS["full_solutions"], "host_cheat": STUDENTS["host_cheat"]}
      | {n: CHEATS[n][0] for n in sys.argv[2:]})
PY
timeout -s INT 150 python3 -m minitorch_cuda grade "$out/students" --out "$out/grades/grades.csv" --no-progress \
    --no-execute --seed 28 --exercise 20.2 >"$out/grade.log" 2>&1
echo "grade exit $?"
python3 - "$out" <<'PY'
import json, sys
for r in json.load(open(f"{sys.argv[1]}/grades/grades.json"))["results"]:
    print(r["student"], r["exercise"], r["passed"], r["reason"], str(r.get("message", ""))[:240])
PY
