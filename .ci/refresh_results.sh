#!/usr/bin/env bash
# Re-make every record the book reads, on a GPU machine, into book/results/ (or the folder
# $MINITORCH_CUDA_RESULTS_DIR names): the campaign's groups one after another, without the lent
# machine's call limit (minitorch_cuda/book/campaign.py has the commands; on the lent machine,
# .ci/record_book.sh runs them a group a call). With $OUT set, the records also come back as one
# archive, $OUT/results.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
into=$(realpath "${MINITORCH_CUDA_RESULTS_DIR:-book/results}")
python3 -m minitorch_cuda.book.campaign --limit 0 --out "${OUT:-_build/records}" --into "$into" \
    ladder chapters matmul tile
status=$?
if [ -n "${OUT:-}" ]; then
    tar -czf "$OUT/results.tar.gz" -C "$(dirname "$into")" "$(basename "$into")"
fi
exit $status
