// block_reduce.cuh: reducing one value per thread to one value per block.
// Two variants, picked by the stage:
//   block_reduce_volatile  (stages 0-7) shared-memory tree, last warp through a
//                          volatile pointer. Since Volta, threads of a warp no longer
//                          run in lockstep, so each step reads, __syncwarp()s, then
//                          writes: the old lockstep-only form is a race.
//   block_reduce_shuffle   (stage 8) each warp reduces in registers with
//                          __shfl_down_sync, one shared slot per warp.
// Both need blockDim.x to be a power of two between 64 and 1024, and every
// thread of the block must call them (they contain __syncthreads()).
// And two that leave the result in every thread, for kernels that go on using it
// (stage 9-10 softmax and cross-entropy):
//   warp_allreduce         a butterfly of __shfl_xor_sync: every lane ends with it.
//   block_allreduce        one butterfly per warp, then each thread folds the warps'
//                          results from shared memory (blockDim.x a multiple of 32).
#pragma once
#include <math_constants.h>

struct SumOp {
    __device__ static float identity() { return 0.0f; }
    __device__ static float apply(float a, float b) { return a + b; }
};

struct MaxOp {
    __device__ static float identity() { return -CUDART_INF_F; }
    __device__ static float apply(float a, float b) { return fmaxf(a, b); }
};

// smem: at least blockDim.x floats.
template <class Op>
__device__ float block_reduce_volatile(float v, float* smem) {
    const int t = threadIdx.x;
    smem[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (t < s) smem[t] = Op::apply(smem[t], smem[t + s]);
        __syncthreads();
    }
    if (t < 32) {
        volatile float* vs = smem;
        for (int s = 32; s > 0; s >>= 1) {
            const float x = Op::apply(vs[t], vs[t + s]);
            __syncwarp();
            vs[t] = x;
            __syncwarp();
        }
    }
    __syncthreads();
    const float result = smem[0];
    __syncthreads();  // smem may be reused by the caller's next reduction
    return result;
}

template <class Op>
__device__ float warp_reduce_shuffle(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = Op::apply(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

// smem: at least 33 floats (one per warp plus the result slot).
template <class Op>
__device__ float block_reduce_shuffle(float v, float* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_reduce_shuffle<Op>(v);
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? smem[lane] : Op::identity();
        v = warp_reduce_shuffle<Op>(v);
        if (lane == 0) smem[32] = v;
    }
    __syncthreads();
    const float result = smem[32];
    __syncthreads();
    return result;
}

template <class Op>
__device__ __forceinline__ float warp_allreduce(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// smem: one float per warp, not shared with another reduction still being read.
template <class Op>
__device__ __forceinline__ float block_allreduce(float v, float* smem) {
    v = warp_allreduce<Op>(v);
    if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
    __syncthreads();
    v = smem[0];
    for (int w = 1; w < (blockDim.x >> 5); ++w) v = Op::apply(v, smem[w]);
    return v;
}

// Defines NAME_volatile and NAME_shuffle from one body that calls BLOCK_REDUCE.
#define REDUCTION_VARIANTS(DEFINE) DEFINE(volatile) DEFINE(shuffle)
