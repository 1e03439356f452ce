// vectorized.cu: the bandwidth-bound kernels at stage 9 and on.
//   ew_*_vec4            the elementwise ops of elementwise.cu with 16-byte loads and
//                        stores and a grid-stride loop (a few blocks per SM, each thread
//                        many float4s); the last n % 4 elements are done by block 0.
//                        Pointers must be 16-byte aligned (the backend checks).
//                        b of a binary op: a float4 when it runs along with a
//                        (b_div == 1, b_mod % 4 == 0), one value when four neighbours
//                        share it (b_div % 4 == 0), else four scalar reads.
//   softmax_rows_warp    rows of at most 1024 columns: one warp per row, the row held
//                        in registers (32 values a lane), max and sum by butterfly
//                        shuffles: one read and one write of each element.
//   softmax_rows_block   rows of up to 16,384 columns: one block per row, the row held in
//                        registers (8 quads a thread; the host launches ceil(cols / 32)
//                        threads rounded up to a warp), max and sum reduced across the
//                        block: one read and one write of each element, so DRAM sees
//                        two arrays however long the row (chapter 15).
//   softmax_rows_online  any row length: one block of 256 threads per row; one pass
//                        keeps a running (max, sum) pair per thread (the sum rescaled
//                        when the max grows), pairs merged by shuffles; a second pass
//                        writes exp(x - max) / sum (meant to re-read the row from L2; the
//                        bandwidth measured in chapter 15 suggests it comes from DRAM).
#include <math_constants.h>
#include "block_reduce.cuh"
#include "tile_load.cuh"

#define VEC_LOOP(n)                                                                      \
    const int n4 = (n) >> 2;                                                             \
    for (int i4 = blockIdx.x * blockDim.x + threadIdx.x; i4 < n4; i4 += gridDim.x * blockDim.x)

// The scalar tail: elements 4 * (n / 4) .. n - 1, by the first threads of block 0.
#define VEC_TAIL(n) for (int i = 4 * ((n) >> 2) + threadIdx.x; blockIdx.x == 0 && i < (n); i += blockDim.x)

__device__ __forceinline__ float4 load_b4(const float* b, int i, int n, int b_div, int b_mod) {
    if (b_div == 1 && b_mod == n) return reinterpret_cast<const float4*>(b)[i >> 2];
    if (b_div == 1 && (b_mod & 3) == 0) return *reinterpret_cast<const float4*>(b + i % b_mod);
    if ((b_div & 3) == 0) {
        const float v = b[(i / b_div) % b_mod];
        return make_float4(v, v, v, v);
    }
    return make_float4(b[(i / b_div) % b_mod], b[((i + 1) / b_div) % b_mod], b[((i + 2) / b_div) % b_mod],
                       b[((i + 3) / b_div) % b_mod]);
}

#define MAP4(F, P, Q) make_float4(F(P.x, Q.x), F(P.y, Q.y), F(P.z, Q.z), F(P.w, Q.w))

#define BINARY_VEC4(name, expr)                                                          \
__device__ __forceinline__ float name##_op(float x, float y) { return (expr); }          \
extern "C" __global__ void name##_vec4(float* out, const float* a, const float* b,      \
                                       int n, int b_div, int b_mod) {                   \
    VEC_LOOP(n) {                                                                        \
        const float4 x = reinterpret_cast<const float4*>(a)[i4];                         \
        const float4 y = load_b4(b, 4 * i4, n, b_div, b_mod);                            \
        reinterpret_cast<float4*>(out)[i4] = MAP4(name##_op, x, y);                      \
    }                                                                                    \
    VEC_TAIL(n) out[i] = name##_op(a[i], b[(i / b_div) % b_mod]);                        \
}

BINARY_VEC4(ew_add, x + y)
BINARY_VEC4(ew_sub, x - y)
BINARY_VEC4(ew_mul, x * y)
BINARY_VEC4(ew_div, x / y)

// Unary maps and the two backward products, written as a binary op on (x, y) where
// y is a second array (grad-style) or a kernel parameter.
#define UNARY_VEC4(name, expr)                                                           \
__device__ __forceinline__ float name##_op(float x, float) { return (expr); }            \
extern "C" __global__ void name##_vec4(float* out, const float* a, int n) {             \
    VEC_LOOP(n) {                                                                        \
        const float4 x = reinterpret_cast<const float4*>(a)[i4];                         \
        reinterpret_cast<float4*>(out)[i4] = MAP4(name##_op, x, x);                      \
    }                                                                                    \
    VEC_TAIL(n) out[i] = name##_op(a[i], 0.0f);                                          \
}

UNARY_VEC4(ew_exp, expf(x))
UNARY_VEC4(ew_log, logf(x))
UNARY_VEC4(ew_relu, x > 0.0f ? x : 0.0f)
UNARY_VEC4(ew_sigmoid, x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x)))

#define SAVED_VEC4(name, expr)                                                           \
__device__ __forceinline__ float name##_op(float g, float s) { return (expr); }          \
extern "C" __global__ void name##_vec4(float* out, const float* grad, const float* saved, int n) { \
    VEC_LOOP(n) {                                                                        \
        const float4 g = reinterpret_cast<const float4*>(grad)[i4];                      \
        const float4 s = reinterpret_cast<const float4*>(saved)[i4];                     \
        reinterpret_cast<float4*>(out)[i4] = MAP4(name##_op, g, s);                      \
    }                                                                                    \
    VEC_TAIL(n) out[i] = name##_op(grad[i], saved[i]);                                   \
}

SAVED_VEC4(ew_relu_backward, s > 0.0f ? g : 0.0f)
SAVED_VEC4(ew_sigmoid_backward, g * s * (1.0f - s))

extern "C" __global__ void ew_affine_vec4(float* out, const float* a, float alpha, float beta, int n) {
    VEC_LOOP(n) {
        const float4 x = reinterpret_cast<const float4*>(a)[i4];
        reinterpret_cast<float4*>(out)[i4] =
            make_float4(alpha * x.x + beta, alpha * x.y + beta, alpha * x.z + beta, alpha * x.w + beta);
    }
    VEC_TAIL(n) out[i] = alpha * a[i] + beta;
}

extern "C" __global__ void ew_fill_vec4(float* out, float value, int n) {
    VEC_LOOP(n) reinterpret_cast<float4*>(out)[i4] = make_float4(value, value, value, value);
    VEC_TAIL(n) out[i] = value;
}

// --- softmax -------------------------------------------------------------------------

#define WARP_ROW_VALUES 32  // values a lane holds: rows up to 32 * 32 = 1024 columns


// Block: any multiple of 32 threads; grid: ceil(rows / warps per block). A warp
// whose row is past the end leaves as a whole, so the shuffles see full warps.
extern "C" __global__ void softmax_rows_warp(float* out, const float* in, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* x = in + (long long)row * cols;
    float* y = out + (long long)row * cols;
    float v[WARP_ROW_VALUES];
    float m = -CUDART_INF_F;
#pragma unroll
    for (int j = 0; j < WARP_ROW_VALUES; ++j) {
        const int col = lane + 32 * j;
        v[j] = col < cols ? x[col] : -CUDART_INF_F;
        m = fmaxf(m, v[j]);
    }
    m = warp_allreduce<MaxOp>(m);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < WARP_ROW_VALUES; ++j) {
        v[j] = lane + 32 * j < cols ? expf(v[j] - m) : 0.0f;
        s += v[j];
    }
    s = warp_allreduce<SumOp>(s);
#pragma unroll
    for (int j = 0; j < WARP_ROW_VALUES; ++j) {
        const int col = lane + 32 * j;
        if (col < cols) y[col] = v[j] / s;
    }
}

// (m, s) stands for s * exp(m): a partial softmax denominator. Merging rescales the
// smaller side; an empty side (m = -inf) contributes nothing.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    if (mx == -CUDART_INF_F) return;
    s = (m == -CUDART_INF_F ? 0.0f : s * expf(m - mx)) + (m2 == -CUDART_INF_F ? 0.0f : s2 * expf(m2 - mx));
    m = mx;
}

#define ONLINE_THREADS 256

extern "C" __global__ void __launch_bounds__(ONLINE_THREADS) softmax_rows_online(float* out, const float* in,
                                                                                 int rows, int cols) {
    __shared__ float sm_m[ONLINE_THREADS / 32], sm_s[ONLINE_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float* x = in + (long long)blockIdx.x * cols;
    float* y = out + (long long)blockIdx.x * cols;
    const bool vec = (cols & 3) == 0 && aligned16(x) && aligned16(y);
    float m = -CUDART_INF_F, s = 0.0f;
    if (vec) {
        for (int c4 = tid; c4 < cols / 4; c4 += ONLINE_THREADS) {
            const float4 v = reinterpret_cast<const float4*>(x)[c4];
            const float mv = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
            if (mv == -CUDART_INF_F) continue;
            const float sv = expf(v.x - mv) + expf(v.y - mv) + expf(v.z - mv) + expf(v.w - mv);
            online_merge(m, s, mv, sv);
        }
    } else {
        for (int c = tid; c < cols; c += ONLINE_THREADS) online_merge(m, s, x[c], 1.0f);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        online_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_s[warp] = s;
    }
    __syncthreads();
    m = sm_m[0];
    s = sm_s[0];
#pragma unroll
    for (int w = 1; w < ONLINE_THREADS / 32; ++w) online_merge(m, s, sm_m[w], sm_s[w]);
    const float inv = 1.0f / s;
    if (vec) {
        for (int c4 = tid; c4 < cols / 4; c4 += ONLINE_THREADS) {
            const float4 v = reinterpret_cast<const float4*>(x)[c4];
            reinterpret_cast<float4*>(y)[c4] =
                make_float4(expf(v.x - m) * inv, expf(v.y - m) * inv, expf(v.z - m) * inv, expf(v.w - m) * inv);
        }
    } else {
        for (int c = tid; c < cols; c += ONLINE_THREADS) y[c] = expf(x[c] - m) * inv;
    }
}

// --- softmax, the row in a block's registers ---------------------------------------------

#define BLOCK_ROW_QUADS 8            // quads a thread holds
#define BLOCK_ROW_MAX_THREADS 512    // so rows of up to 512 * 32 = 16,384 columns

// Columns c .. c + 3 of a row; -inf past the end (so they drop out of max and exp).
__device__ __forceinline__ float4 load_quad(const float* x, int c, int cols, bool vec) {
    const float pad = -CUDART_INF_F;
    if (vec) return c < cols ? *reinterpret_cast<const float4*>(x + c) : make_float4(pad, pad, pad, pad);
    float4 q;
    q.x = c < cols ? x[c] : pad;
    q.y = c + 1 < cols ? x[c + 1] : pad;
    q.z = c + 2 < cols ? x[c + 2] : pad;
    q.w = c + 3 < cols ? x[c + 3] : pad;
    return q;
}

// Block: a multiple of 32 threads, at least cols / 32; grid: (rows, 1, 1).
extern "C" __global__ void __launch_bounds__(BLOCK_ROW_MAX_THREADS) softmax_rows_block(float* out, const float* in,
                                                                                       int rows, int cols) {
    // Two buffers, so the sum's writes cannot race the max's reads: one barrier each.
    __shared__ float sm_max[BLOCK_ROW_MAX_THREADS / 32], sm_sum[BLOCK_ROW_MAX_THREADS / 32];
    const float* x = in + (long long)blockIdx.x * cols;
    float* y = out + (long long)blockIdx.x * cols;
    const bool vec = (cols & 3) == 0 && aligned16(x) && aligned16(y);
    float4 v[BLOCK_ROW_QUADS];
    float m = -CUDART_INF_F;
#pragma unroll
    for (int j = 0; j < BLOCK_ROW_QUADS; ++j) {  // all loads issued before any is used
        v[j] = load_quad(x, 4 * (threadIdx.x + j * blockDim.x), cols, vec);
        m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    }
    m = block_allreduce<MaxOp>(m, sm_max);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < BLOCK_ROW_QUADS; ++j) {  // exp(-inf - m) = 0 for the padding
        v[j] = make_float4(expf(v[j].x - m), expf(v[j].y - m), expf(v[j].z - m), expf(v[j].w - m));
        s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    const float inv = 1.0f / block_allreduce<SumOp>(s, sm_sum);
#pragma unroll
    for (int j = 0; j < BLOCK_ROW_QUADS; ++j) {
        const int c = 4 * (threadIdx.x + j * blockDim.x);
        const float4 q = make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv);
        if (vec) {
            if (c < cols) *reinterpret_cast<float4*>(y + c) = q;
        } else {
            if (c < cols) y[c] = q.x;
            if (c + 1 < cols) y[c + 1] = q.y;
            if (c + 2 < cols) y[c + 2] = q.z;
            if (c + 3 < cols) y[c + 3] = q.w;
        }
    }
}
