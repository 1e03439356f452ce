#!/usr/bin/env bash
# Re-measure everything the book shows, on a GPU machine, into book/results/:
# the stage ladders with PyTorch, matmul GFLOP/s, per-stage profiles, then every
# chapter's live `gpu` cells. With $OUT set (the lent GPU machine), the results
# come back as one archive, $OUT/results.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m minitorch_cuda.bench --record                # the blog's ladder, stages 0-8
python3 -m minitorch_cuda.bench --record --stages 0-13   # the whole ladder (bench_beyond.json)
python3 -m minitorch_cuda.experiments.step_split                               # chapter 16: MNIST steps split into host and GPU time
python3 -m minitorch_cuda.experiments.torch_profile                             # chapter 5: PyTorch's own profile of the step
python3 .ci/execute_chapters.py
status=$?
if [ -n "${OUT:-}" ]; then
    tar -czf "$OUT/results.tar.gz" -C book results
fi
exit $status
