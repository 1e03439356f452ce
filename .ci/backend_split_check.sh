#!/usr/bin/env bash
# Issue 37 (the backend reads in one direction) on a GPU: the tests of what the split touched that
# only a GPU runs (wgmma_tma's builds through registry.variant and its tensor maps through
# driver.bindings, stage 13's one-kernel step and its phase clock, the tuner's choices at stages
# 9-12, the X-macro tiles' kernels, the kernel sequence per step), under 5 minutes, with a JSON
# summary in $OUT/backend_split.json.
#   bash .ci/gpu_run.sh bash .ci/backend_split_check.sh
set -u
out="${OUT:-/tmp/backend_split}"
mkdir -p "$out"
start=$SECONDS
timeout -s INT 280 python3 -m pytest -m gpu -q -p no:cacheprovider -rf --timeout=250 -n "${WORKERS:-4}" \
    --junitxml="$out/backend_split.xml" \
    tests/test_wgmma_tma.py tests/test_persistent_step.py tests/test_registry.py tests/test_matmul_exact.py \
    tests/test_matmul_pipelined.py tests/test_matmul_splitk.py tests/test_matmul_cluster.py tests/test_lean_step.py \
    tests/test_stages_beyond.py tests/test_graphs.py tests/test_latency_floor.py tests/test_host_path.py \
    >"$out/backend_split.log" 2>&1
rc=$?
python3 - "$out" "$rc" "$((SECONDS - start))" <<'PY'
import json, sys, xml.etree.ElementTree as ET
out, rc, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
suites = ET.parse(f"{out}/backend_split.xml").getroot()
suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
          if case.find("failure") is not None or case.find("error") is not None]
summary = {"exit": rc, "seconds": seconds, **counts, "passed": counts["tests"] - counts["failures"]
           - counts["errors"] - counts["skipped"], "failed": failed}
json.dump(summary, open(f"{out}/backend_split.json", "w"), indent=1)
print(json.dumps(summary))
PY
tail -n 5 "$out/backend_split.log"
