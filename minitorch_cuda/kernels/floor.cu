// floor.cu: kernels that do no work, to measure what a training step costs before any
// arithmetic (chapter 21, minitorch_cuda/experiments/latency_floor.py).
//   floor_empty      returns at once: a launch, or a node of a CUDA graph, and nothing else
//   floor_barriers   every block crosses grid_barrier `barriers` times (grid_barrier.cuh,
//                    the barrier stage 13's persistent_step uses between its phases); one
//                    block per multiprocessor at most, so that all are resident at once
//   floor_report     hands a loss of 0.5 to the host through its report (step_report.cuh):
//                    the read-back that stage 13's step makes without a copy
#include "grid_barrier.cuh"
#include "step_report.cuh"

extern "C" __global__ void floor_empty() {}

extern "C" __global__ void floor_barriers(GridBarrier* barrier, int barriers) {
    for (int i = 0; i < barriers; ++i) grid_barrier(barrier);
}

extern "C" __global__ void floor_report(unsigned long long* report) { report_loss(report, 0.5f); }
