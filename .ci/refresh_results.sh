#!/usr/bin/env bash
# Re-measure everything the book shows, on a GPU machine, into book/results/:
# the stage ladder with PyTorch, matmul GFLOP/s, per-stage profiles, then every
# chapter's live `gpu` cells. With $OUT set (the lent GPU machine), the results
# come back as one archive, $OUT/results.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
# Stages 9-12 are recorded with the ladder; should one of them crash, record 0-8 at least.
python3 -m minitorch_cuda.bench --record --stages 0-12 || python3 -m minitorch_cuda.bench --record
python3 .ci/execute_chapters.py
status=$?
if [ -n "${OUT:-}" ]; then
    tar -czf "$OUT/results.tar.gz" -C book results
fi
exit $status
