#!/usr/bin/env bash
# The GPU machine's image lacks the test tools (pytest, pytest-xdist, pytest-timeout, hypothesis,
# ml_dtypes, tqdm) and has no network: download their wheels for its Python 3.12 into .gpu_extra/
# (git-ignored), and carry .gpu_extra with .gpu to each device call; run commands there through
# .ci/gpu_run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu_extra
python3 -m pip download -q --python-version 3.12 --only-binary=:all: --no-deps -d .gpu_extra \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    pytest pluggy iniconfig packaging pygments hypothesis sortedcontainers attrs ml_dtypes tqdm pytest-xdist execnet \
    pytest-timeout
ls .gpu_extra
