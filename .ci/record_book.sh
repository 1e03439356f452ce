#!/usr/bin/env bash
# Re-make every record the book reads, with today's code, on the lent GPU machine. The plan (each
# record, the command that makes it, the groups and their estimates) is minitorch_cuda/book/campaign.py;
# taking the records in is book/results/README.md.
#   bash .ci/gpu_run.sh bash .ci/record_book.sh --parallel ladder chapters matmul tile grading wide   # one call, 6+ GPUs
#   bash .ci/gpu_run.sh bash .ci/record_book.sh ladder                                   # a group a call
#   python3 -m minitorch_cuda.book.campaign --list                                       # the plan
# $OUT gets records_<group>.tar.gz (the records, to unpack into book/results/) and campaign_<group>.json
# (each step's command, status, seconds against its estimate, and what was left for another call).
set -uo pipefail
cd "$(dirname "$0")/.."
exec python3 -m minitorch_cuda.book.campaign "$@"
