// reduce.cu: sums. Warp-level part by stage (see block_reduce.cuh).
//   sum_rows_volatile / sum_rows_shuffle   out[r] = scale * sum_c in[r, c]; one block per row
//   sumsq_volatile / sumsq_shuffle         out[0] = sum x^2; one block (clipping norm partial)
//   sumsq_last_block                       out[0] = sum x^2; many blocks, the last to finish adds
//                                          their partials (exercise 13.2; no stage launches it)
//   sum_axis                               out[o, j] = sum_k in[o, k, j]; one thread per output
//                                          (a strided, non-last axis needs no warp reduction)
#include "block_reduce.cuh"

#define DEFINE_SUM_ROWS(KIND)                                                          \
extern "C" __global__ void sum_rows_##KIND(float* out, const float* in, int rows,      \
                                           int cols, float scale) {                    \
    __shared__ float smem[1024];                                                       \
    const float* row = in + (long long)blockIdx.x * cols;                              \
    float acc = 0.0f;                                                                  \
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];                \
    acc = block_reduce_##KIND<SumOp>(acc, smem);                                       \
    if (threadIdx.x == 0) out[blockIdx.x] = scale * acc;                               \
}

#define DEFINE_SUMSQ(KIND)                                                             \
extern "C" __global__ void sumsq_##KIND(float* out, const float* x, int n) {          \
    __shared__ float smem[1024];                                                       \
    float acc = 0.0f;                                                                  \
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i] * x[i];              \
    acc = block_reduce_##KIND<SumOp>(acc, smem);                                       \
    if (threadIdx.x == 0) out[0] = acc;                                                \
}

REDUCTION_VARIANTS(DEFINE_SUM_ROWS)
REDUCTION_VARIANTS(DEFINE_SUMSQ)

// One launch of many blocks (grid-stride): each block stores its sum in partials[blockIdx.x] and
// counts itself in; the block that brings *count to gridDim.x adds the partials up with one more
// block reduction (a fixed order for a given grid: the same bits every run) and resets *count for
// the next launch: the pattern of the CUDA samples' threadFenceReduction. The __threadfence() is
// what makes it correct: the atomicAdd is relaxed and publishes nothing stored before it, so without
// the fence the last block may read a stale partial (on the emulator, race checking names it).
extern "C" __global__ void sumsq_last_block(float* out, float* partials, unsigned int* count, const float* x,
                                            int n) {
    __shared__ float smem[33];
    __shared__ bool last;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc += x[i] * x[i];
    acc = block_reduce_shuffle<SumOp>(acc, smem);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = acc;
        __threadfence();  // the partial is visible to every block before the count says it is there
        last = atomicAdd(count, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    const volatile float* done = partials;  // past any stale copy in this SM's L1
    float total = 0.0f;
    for (int b = threadIdx.x; b < gridDim.x; b += blockDim.x) total += done[b];
    total = block_reduce_shuffle<SumOp>(total, smem);
    if (threadIdx.x == 0) {
        out[0] = total;
        *count = 0;
    }
}

extern "C" __global__ void sum_axis(float* out, const float* in, int outer, int red,
                                    int inner, float scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= outer * inner) return;
    const int o = i / inner, j = i % inner;
    const float* base = in + (long long)o * red * inner + j;
    float acc = 0.0f;
    for (int k = 0; k < red; ++k) acc += base[(long long)k * inner];
    out[i] = scale * acc;
}
