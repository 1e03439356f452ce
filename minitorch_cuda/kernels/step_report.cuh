// step_report.cuh: a step hands its loss to the host without a copy (stage 13, chapter 21).
// `report` points into pinned host memory that is mapped into the device's address space
// (cuda/step_report.py): the host zeroes it before the launch and polls it. One aligned 8-byte
// store carries the loss's bits and a nonzero flag together (it is single-copy atomic), so the
// host never sees the flag without its loss; a volatile store is a system-scope one, and the
// fence after it pushes it out to the host now rather than whenever the memory system drains.
#pragma once

__device__ __forceinline__ void report_loss(unsigned long long* report, float loss) {
    if (report == nullptr) return;  // a launch whose loss the host copies back instead
    *reinterpret_cast<volatile unsigned long long*>(report) = (1ull << 32) | __float_as_uint(loss);
    __threadfence_system();
}
