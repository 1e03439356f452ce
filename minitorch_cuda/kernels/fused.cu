// fused.cu: work of several kernels done in one launch (stage 10).
//   matmul_bias_act_BMxBNxBK   act(op(A) op(B) + bias[col]): the register-tiled matmul
//                              (matmul_regtiled.cuh) with the bias add and, for act = 1,
//                              the ReLU in its epilogue; every tile of REGTILED_TILES
//   softmax_xent_fused         probs = softmax(logits) and loss[0] = scale * sum over rows of
//                              -sum_c t log softmax(x): one block, one warp per row (rows up
//                              to 1024 columns), the row sum in a fixed order (deterministic)
//   multi_sumsq                sums of squares of up to 8 tensors in one launch: block
//                              (x, t) writes partials[t * gridDim.x + x]
//   multi_clip_rmsprop         every block sums all partials into the global norm, then
//                              for tensor t = blockIdx.y: g *= clip factor (written back),
//                              v = decay v + (1 - decay) g^2, p -= lr g / (sqrt(v) + eps);
//                              n_partials = 0 means no clipping
//   multi_clip_scale           the clipping alone: g *= clip factor
// and the lean step's (stage 11: fewer, fuller kernels for the graphed step):
//   matmul_grad_BMxBNxBK       op(A) op(B) [* (mask > 0)], [colsum = column sums of op(B)]:
//                              the register-tiled matmul with ReLU's backward in its epilogue
//                              (dX = dY W^T * (act > 0)) or the bias gradient beside the weight
//                              gradient (dW = X^T dY, db = sums of dY's columns)
//   softmax_xent_grad          softmax_xent_fused writing scale * (softmax - target), the
//                              logits' gradient for an upstream gradient of 1, instead of probs
//   multi_clip_rmsprop_grid    multi_sumsq and multi_clip_rmsprop in one launch of at most one
//                              block per SM: every block's partial sum of squares of all the
//                              tensors, a grid barrier, then every block sums the partials in the
//                              same order (the same factor everywhere) and updates its share
// Multi-tensor kernels take the tensors as kernel parameters (8 slots, unused ones
// null with size 0), not as a device table: nothing is uploaded per step and a
// captured CUDA graph keeps the addresses it was captured with.
#include <math_constants.h>
#include "block_reduce.cuh"
#include "grid_barrier.cuh"
#include "matmul_regtiled.cuh"
#include "matmul_tiles.cuh"
#include "param_run.cuh"

#define BIAS_ACT(T, BM, BN, BK, TM, TN, MIN_BLOCKS, TWINS)                                  \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) matmul_bias_act_##T( \
    float* c, const float* a, const float* b, const float* bias, int M, int N, int K, int ta,  \
    int tb, int stride_a, int stride_b, int act) {                                           \
    regtiled_body<BM, BN, BK, TM, TN>(c, a, b, bias, M, N, K, ta, tb, stride_a, stride_b, act); \
}
REGTILED_TILES(BIAS_ACT)

#define GRAD(T, BM, BN, BK, TM, TN, MIN_BLOCKS, TWINS)                                       \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) matmul_grad_##T( \
    float* c, const float* a, const float* b, const float* mask, float* colsum, int M, int N,  \
    int K, int ta, int tb, int stride_a, int stride_b) {                                     \
    regtiled_body<BM, BN, BK, TM, TN>(c, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0, \
                                      mask, colsum);                                         \
}
REGTILED_TILES(GRAD)

#define XENT_VALUES 32  // per lane: rows up to 1024 columns

// Block: a multiple of 32 threads up to XENT_THREADS (one block in all); grid (1, 1, 1).
// The bound keeps the 32 row values per lane in registers: at 1024 threads the
// kernel would need more registers than an SM has and the launch would fail.
#define XENT_THREADS 512
// GRAD: out = scale * (softmax - target) (the gradient for an upstream 1), else the softmax.
template <bool GRAD>
__device__ __forceinline__ void softmax_xent_body(float* out, float* loss, const float* logits, const float* target,
                                                  int rows, int cols, float scale) {
    __shared__ float warp_loss[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float my_loss = 0.0f;  // this warp's rows, summed in row order (lane 0's copy counts)
    for (int row = warp; row < rows; row += warps) {
        const float* x = logits + (long long)row * cols;
        const float* t = target + (long long)row * cols;
        float* p = out + (long long)row * cols;
        float v[XENT_VALUES];
        float m = -CUDART_INF_F;
#pragma unroll
        for (int j = 0; j < XENT_VALUES; ++j) {
            const int c = lane + 32 * j;
            v[j] = c < cols ? x[c] : -CUDART_INF_F;
            m = fmaxf(m, v[j]);
        }
        m = warp_allreduce<MaxOp>(m);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < XENT_VALUES; ++j) s += lane + 32 * j < cols ? expf(v[j] - m) : 0.0f;
        s = warp_allreduce<SumOp>(s);
        const float log_s = logf(s);
        float row_loss = 0.0f;
#pragma unroll
        for (int j = 0; j < XENT_VALUES; ++j) {
            const int c = lane + 32 * j;
            if (c < cols) {
                const float zc = v[j] - m;
                p[c] = GRAD ? scale * (expf(zc) / s - t[c]) : expf(zc) / s;
                row_loss -= t[c] * (zc - log_s);
            }
        }
        row_loss = warp_allreduce<SumOp>(row_loss);
        my_loss += row_loss;
    }
    if (lane == 0) warp_loss[warp] = my_loss;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < warps; ++w) total += warp_loss[w];
        loss[0] = scale * total;
    }
}

extern "C" __global__ void __launch_bounds__(XENT_THREADS) softmax_xent_fused(float* probs, float* loss, const float* logits, const float* target,
                                              int rows, int cols, float scale) {
    softmax_xent_body<false>(probs, loss, logits, target, rows, cols, scale);
}

extern "C" __global__ void __launch_bounds__(XENT_THREADS) softmax_xent_grad(float* grad, float* loss, const float* logits,
                                                                           const float* target, int rows, int cols,
                                                                           float scale) {
    softmax_xent_body<true>(grad, loss, logits, target, rows, cols, scale);
}

// Slot t of eight parameters, without an indexed local array (which would live in
// local memory): a chain of selects on the block-uniform t.
template <class T>
__device__ __forceinline__ T slot(int t, T x0, T x1, T x2, T x3, T x4, T x5, T x6, T x7) {
    return t == 0 ? x0 : t == 1 ? x1 : t == 2 ? x2 : t == 3 ? x3 : t == 4 ? x4 : t == 5 ? x5 : t == 6 ? x6 : x7;
}

#define SLOT(name) slot(blockIdx.y, name##0, name##1, name##2, name##3, name##4, name##5, name##6, name##7)

// Block: 256 threads (a power of two for block_reduce_shuffle); grid (chunks, tensors).
extern "C" __global__ void multi_sumsq(float* partials, const float* g0, const float* g1, const float* g2, const float* g3, const float* g4,
                                       const float* g5, const float* g6, const float* g7,
                                       int n0, int n1, int n2, int n3, int n4, int n5, int n6, int n7) {
    __shared__ float smem[33];
    const float* g = SLOT(g);
    const int n = SLOT(n);
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc += g[i] * g[i];
    acc = block_reduce_shuffle<SumOp>(acc, smem);
    if (threadIdx.x == 0) partials[blockIdx.y * gridDim.x + blockIdx.x] = acc;
}

// The clip factor from all partial sums; every block computes it (a few hundred
// values from L2), so that no second launch is needed to broadcast the norm.
__device__ __forceinline__ float clip_factor(const float* partials, int n_partials, float max_norm, float* smem) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n_partials; i += blockDim.x) acc += partials[i];
    const float norm = sqrtf(block_reduce_shuffle<SumOp>(acc, smem));
    return (n_partials > 0 && norm > max_norm) ? max_norm / (norm + 1e-6f) : 1.0f;
}

// One element's clipped RmsProp step (optim.cu's formulas): the gradient scaled in place where
// clipping applies, then the running square and the parameter.
__device__ __forceinline__ void clipped_rmsprop(float* p, float* g, float* v, int i, float factor, float lr,
                                                float decay, float eps) {
    float gi = g[i];
    if (factor != 1.0f) {
        gi *= factor;
        g[i] = gi;
    }
    const float vi = decay * v[i] + (1.0f - decay) * gi * gi;
    v[i] = vi;
    p[i] -= lr * gi / (sqrtf(vi) + eps);
}

extern "C" __global__ void multi_clip_rmsprop(const float* partials, int n_partials, float max_norm, float lr,
                                              float decay, float eps,
                                              float* p0, float* p1, float* p2, float* p3, float* p4, float* p5, float* p6,
                                              float* p7,
                                              float* g0, float* g1, float* g2, float* g3, float* g4, float* g5, float* g6,
                                              float* g7,
                                              float* v0, float* v1, float* v2, float* v3, float* v4, float* v5, float* v6,
                                              float* v7,
                                              int n0, int n1, int n2, int n3, int n4, int n5, int n6, int n7) {
    __shared__ float smem[33];
    const float factor = clip_factor(partials, n_partials, max_norm, smem);
    float* p = SLOT(p);
    float* g = SLOT(g);
    float* v = SLOT(v);
    const int n = SLOT(n);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        clipped_rmsprop(p, g, v, i, factor, lr, decay, eps);
}

extern "C" __global__ void multi_clip_scale(const float* partials, int n_partials, float max_norm,
                                            float* g0, float* g1, float* g2, float* g3, float* g4, float* g5, float* g6,
                                              float* g7,
                                            int n0, int n1, int n2, int n3, int n4, int n5, int n6, int n7) {
    __shared__ float smem[33];
    const float factor = clip_factor(partials, n_partials, max_norm, smem);
    if (factor == 1.0f) return;
    float* g = SLOT(g);
    const int n = SLOT(n);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) g[i] *= factor;
}

// Block: 256 threads; grid (blocks, 1, 1), blocks <= multiprocessors (grid_barrier.cuh's rule):
// the launcher's. partials: gridDim.x floats; barrier zeroed once, left zeroed. The tensors are
// one run of elements (param_run.cuh): a thread's loads of every tensor are in flight at once.
extern "C" __global__ void multi_clip_rmsprop_grid(float* partials, GridBarrier* barrier, float max_norm, float lr,
                                                   float decay, float eps,
                                                   float* p0, float* p1, float* p2, float* p3, float* p4, float* p5,
                                                   float* p6, float* p7,
                                                   float* g0, float* g1, float* g2, float* g3, float* g4, float* g5,
                                                   float* g6, float* g7,
                                                   float* v0, float* v1, float* v2, float* v3, float* v4, float* v5,
                                                   float* v6, float* v7,
                                                   int n0, int n1, int n2, int n3, int n4, int n5, int n6, int n7) {
    __shared__ float smem[33];
    __shared__ ParamRun run;
    if (threadIdx.x == 0) {
        long long end = 0;
        run.count = 0;
        for (int t = 0; t < 8; ++t) {
            const int n = slot(t, n0, n1, n2, n3, n4, n5, n6, n7);
            if (n == 0) continue;
            const int r = run.count++;
            run.p[r] = slot(t, p0, p1, p2, p3, p4, p5, p6, p7);
            run.g[r] = slot(t, g0, g1, g2, g3, g4, g5, g6, g7);
            run.v[r] = slot(t, v0, v1, v2, v3, v4, v5, v6, v7);
            run.end[r] = end += n;
        }
    }
    __syncthreads();
    if (run.count == 0) return;  // every block alike: no barrier is left waiting
    const long long first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x;
    const float acc = block_reduce_shuffle<SumOp>(run_sumsq<8>(run, first, step, 0.0f), smem);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
    grid_barrier(barrier);
    const float factor = clip_factor(partials, gridDim.x, max_norm, smem);
    run_clipped_step<8>(run, first, step, factor, lr, decay, eps, true);
}
