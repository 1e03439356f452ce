#!/usr/bin/env bash
# Issue 36, the red-team pass of session 27, on a GPU, under 5 minutes: the cheats of the "red team,
# session 27" block of tests/submissions.py each lose their exercise with their reason, graded on this
# GPU beside the shipped solutions; and the shipped solutions keep every point of every exercise (the
# subject's sandbox now covers the answer keys, the line count travels as records). JSON summary in
# $OUT/redteam27.json.
#   bash .ci/gpu_run.sh bash .ci/redteam27_check.sh
set -u
out="${OUT:-/tmp/redteam27}"
mkdir -p "$out"
start=$SECONDS
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 - "$out" <<'PY'
import sys
sys.path.insert(0, "tests")
from submissions import CHEATS, STUDENTS, build
names = ["opens_the_package_folder", "switches_the_hook_off", "rewrites_the_rules", "reaches_the_line_counter",
         "sends_terminal_codes", "forges_the_count_in_json", "returns_a_lazy_result", "works_while_decoding",
         "computes_on_the_host_by_operators", "patches_the_interpreter", "swaps_the_graders_launcher"]
build(sys.argv[1] + "/cheats", {"full_solutions": STUDENTS["full_solutions"]} | {n: CHEATS[n][0] for n in names}
      | {"race_switched_off_by_dlsym": STUDENTS["race_switched_off_by_dlsym"]})
build(sys.argv[1] + "/solutions", {"full_solutions": STUDENTS["full_solutions"]})
PY
ids=(--exercise 6.1 --exercise 18.1 --exercise 19.1 --exercise 20.1 --exercise 20.2)
timeout -s INT 140 python3 -m minitorch_cuda grade "$out/cheats" --out "$out/cheats_grades/grades.csv" --no-progress \
    --seed 27 --no-execute "${ids[@]}" >"$out/cheats.log" 2>&1
cheats_rc=$?
graded_at=$SECONDS
timeout -s INT 130 python3 -m minitorch_cuda grade "$out/solutions" --out "$out/grades/grades.csv" --no-progress --no-execute \
    --seed 27 >"$out/solutions.log" 2>&1
solutions_rc=$?
python3 - "$out" "$cheats_rc" "$solutions_rc" "$((SECONDS - start))" "$((SECONDS - graded_at))" <<'PY'
import csv, json, sys
sys.path.insert(0, "tests")
from submissions import CHEATS
out, cheats_rc, solutions_rc, seconds, solutions_seconds = sys.argv[1], *map(int, sys.argv[2:])
expected = {n: (CHEATS[n][1], CHEATS[n][2]) for n in ("opens_the_package_folder", "switches_the_hook_off",
            "rewrites_the_rules", "reaches_the_line_counter", "sends_terminal_codes", "forges_the_count_in_json",
            "returns_a_lazy_result", "works_while_decoding", "computes_on_the_host_by_operators",
            "patches_the_interpreter", "swaps_the_graders_launcher")}
expected["race_switched_off_by_dlsym"] = ("6.1", {"race", "sanitizer", "racecheck"})  # a race on a GPU
results = {}
try:
    for r in json.load(open(f"{out}/cheats_grades/grades.json"))["results"]:
        results[(r["student"], r["exercise"])] = r
except (OSError, ValueError) as exc:
    results = {"error": str(exc)}
cheats = {}
for name, (exercise, reasons) in expected.items():
    r = results.get((name, exercise), {}) if isinstance(results, dict) else {}
    cheats[name] = {"exercise": exercise, "reason": r.get("reason"), "ok": (not r.get("passed", True))
                    and r.get("reason") in reasons, "message": str(r.get("message", ""))[:300]}
honest = {e: r.get("passed") for (s, e), r in results.items() if s == "full_solutions"} if "error" not in results else {}
try:
    row = next(csv.DictReader(open(f"{out}/grades/grades.csv")))
    solutions = {"total": row["total"], "max": row["max"], "notes": row["notes"]}
except (OSError, StopIteration) as exc:
    solutions = {"error": str(exc)}
summary = {"seconds": seconds, "cheats_exit": cheats_rc, "cheats": cheats,
           "all_cheats_lose": all(c["ok"] for c in cheats.values()), "honest_beside_cheats": honest,
           "solutions_exit": solutions_rc, "solutions_on_gpu": solutions, "solutions_seconds": solutions_seconds}
json.dump(summary, open(f"{out}/redteam27.json", "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
