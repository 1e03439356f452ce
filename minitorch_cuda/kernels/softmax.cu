// softmax.cu: softmax over the last axis and the fused cross-entropy, one block per row.
//   softmax_rows_volatile / _shuffle   out = exp(x - max) / sum exp(x - max)
//   softmax_xent_volatile / _shuffle   probs as above and row_loss[r] = -sum_c t * log_softmax(x)
//                                      (from the logits, so no log of an underflowed 0)
//   xent_backward                      out = upstream[0] * scale * (probs - target)
#include "block_reduce.cuh"

#define DEFINE_SOFTMAX(KIND)                                                           \
extern "C" __global__ void softmax_rows_##KIND(float* out, const float* in, int rows,  \
                                               int cols) {                             \
    __shared__ float smem[1024];                                                       \
    const long long base = (long long)blockIdx.x * cols;                               \
    float m = -CUDART_INF_F;                                                           \
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[base + c]);   \
    m = block_reduce_##KIND<MaxOp>(m, smem);                                           \
    float s = 0.0f;                                                                    \
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(in[base + c] - m);  \
    s = block_reduce_##KIND<SumOp>(s, smem);                                           \
    for (int c = threadIdx.x; c < cols; c += blockDim.x)                               \
        out[base + c] = expf(in[base + c] - m) / s;                                    \
}

#define DEFINE_SOFTMAX_XENT(KIND)                                                      \
extern "C" __global__ void softmax_xent_##KIND(float* probs, float* row_loss,          \
                                               const float* logits, const float* target,\
                                               int rows, int cols) {                   \
    __shared__ float smem[1024];                                                       \
    const long long base = (long long)blockIdx.x * cols;                               \
    float m = -CUDART_INF_F;                                                           \
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, logits[base + c]);\
    m = block_reduce_##KIND<MaxOp>(m, smem);                                           \
    float s = 0.0f;                                                                    \
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(logits[base + c] - m);\
    s = block_reduce_##KIND<SumOp>(s, smem);                                           \
    const float log_s = logf(s);                                                       \
    float loss = 0.0f;                                                                 \
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {                             \
        const float z = logits[base + c] - m;                                          \
        probs[base + c] = expf(z) / s;                                                 \
        loss -= target[base + c] * (z - log_s);                                        \
    }                                                                                  \
    loss = block_reduce_##KIND<SumOp>(loss, smem);                                     \
    if (threadIdx.x == 0) row_loss[blockIdx.x] = loss;                                 \
}

REDUCTION_VARIANTS(DEFINE_SOFTMAX)
REDUCTION_VARIANTS(DEFINE_SOFTMAX_XENT)

// upstream lives on the device so that backward() never waits for the host.
extern "C" __global__ void xent_backward(float* out, const float* probs, const float* target,
                                         const float* upstream, int n, float scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = upstream[0] * scale * (probs[i] - target[i]);
}
