// batch_cursor.cu: the lean step's graph fetches its own batch (stage 11).
//   fetch_batch   copies the x_size and target_size floats where the cursor points into the
//                 graph's static inputs, then moves the cursor past them: the two copies a
//                 replay needed from the host, as one kernel at the head of the graph
// Every block reads the cursor at its start; the last block to finish moves it (the CUDA
// Programming Guide's "last block" pattern, as matmul_pipelined.cu's splitk_last_block): a
// block counts itself done only after all its threads have read the cursor, so the move races
// with no read. arrived: zero before, zero again after (the last block resets it).
#include "batch_cursor.cuh"

extern "C" __global__ void fetch_batch(BatchCursor* cursor, float* x, float* target, int x_size, int target_size,
                                       unsigned int* arrived) {
    const float* const from_x = cursor->x;
    const float* const from_target = cursor->target;
    const int first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x;
    for (int i = first; i < x_size; i += step) x[i] = from_x[i];
    for (int i = first; i < target_size; i += step) target[i] = from_target[i];
    __syncthreads();  // every thread of the block has read the cursor
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(arrived, 1u) == gridDim.x - 1) {
            cursor->x = from_x + x_size;
            cursor->target = from_target + target_size;
            *arrived = 0u;
        }
    }
}
