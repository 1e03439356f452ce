// floor.cu: kernels that do no work, to measure what a training step costs before any
// arithmetic (chapter 21, minitorch_cuda/experiments/latency_floor.py).
//   floor_empty      returns at once: a launch, or a node of a CUDA graph, and nothing else
//   floor_barriers   every block crosses grid_barrier `barriers` times (grid_barrier.cuh,
//                    the barrier stage 13's persistent_step uses between its phases); one
//                    block per multiprocessor at most, so that all are resident at once
#include "grid_barrier.cuh"

extern "C" __global__ void floor_empty() {}

extern "C" __global__ void floor_barriers(GridBarrier* barrier, int barriers) {
    for (int i = 0; i < barriers; ++i) grid_barrier(barrier);
}
