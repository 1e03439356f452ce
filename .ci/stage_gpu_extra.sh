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
# bubblewrap, which the GPU machine's image lacks, so that the grader's sandbox (bwrap with the GPU's
# device nodes bound) is tested there too: this machine's binary and the libraries it links,
# started by a wrapper that finds them (gpu_run.sh puts it first on PATH).
if command -v bwrap >/dev/null; then
    mkdir -p .gpu_extra/bwrap/bin .gpu_extra/bwrap/lib
    cp "$(command -v bwrap)" .gpu_extra/bwrap/lib/bwrap
    ldd "$(command -v bwrap)" | awk '/=> \// {print $3}' | grep -v -e libc.so -e ld-linux | xargs -r cp -t .gpu_extra/bwrap/lib
    cat >.gpu_extra/bwrap/bin/bwrap <<'WRAP'
#!/bin/sh
lib=$(dirname "$(readlink -f "$0")")/../lib
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$lib/bwrap" "$@"
WRAP
    chmod +x .gpu_extra/bwrap/bin/bwrap
fi
