#!/usr/bin/env bash
# On the GPU machine: install the carried test-tool wheels (.gpu_extra/, see stage_gpu_extra.sh),
# then run the command through the kit's .gpu/run.sh (PyCUDA, the Jupyter stack, PYTHONPATH).
#   bash .ci/gpu_run.sh bash .ci/gpu_check.sh tests
# One at a time: each call reinstalls the wheels into the same folders, and a second call
# started beside a running one breaks it ("wheel install failed"). To use two GPUs, start
# one gpu_run.sh whose command runs both halves (gpu_check.sh --parallel does).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-extra "$root"/.gpu_extra/*.whl \
    >/dev/null 2>&1 || echo "installing the .gpu_extra wheels failed"
export PYTHONPATH="/tmp/gpu-extra${PYTHONPATH:+:$PYTHONPATH}"
[ -x "$root/.gpu_extra/bwrap/bin/bwrap" ] && export PATH="$root/.gpu_extra/bwrap/bin:$PATH"  # the grader's sandbox
exec bash "$root/.gpu/run.sh" "$@"
