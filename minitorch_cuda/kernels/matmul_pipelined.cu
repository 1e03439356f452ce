// matmul_pipelined.cu: stage 9's SGEMM fed by asynchronous copies, same parameters as matmul_regtiled.
//   matmul_pipelined_T          C = op(A) op(B) over the batch: block (NT, 1, 1),
//                               grid (ceil(N / BN), ceil(M / BM), batch)
//   matmul_pipelined_splitk_T   the same over K slices: grid z = batch * k_splits; block z
//                               computes slice z % k_splits of matrix z / k_splits into
//                               partial + z * M * N; matmul_splitk_reduce then sums the slices
//                               in order 0, 1, ... (deterministic: no atomics); matmul_splitk_reduce4
//                               the same, a float4 of outputs per thread
//   matmul_pipelined_splitk_bias_act_T   the split-K product and its reduction in one launch,
//                               with act(sum + bias[col]) (act 1: ReLU) as the epilogue (the
//                               lean step, stage 11, for skinny forward products such as
//                               64 x 256 x 784): each block writes its slice as above, then
//                               counts itself done on its output tile (counters: one per tile,
//                               zero before, zero again after); the last of the tile's k_splits
//                               blocks sums the slices in order 0, 1, ... (the same bits every
//                               run, whichever block comes last). T: the tiles with BIAS_ACT
// The tiles T are matmul_tiles.cuh's PIPELINED_TILES (block tile, warp tile, thread tile, stages,
// blocks per SM asked), one line each.
//
// Tiles reach shared memory by the CUDA C++ pipeline primitives (cp.async): the copies of
// slice t + STAGES - 1 are in flight while the block multiplies slice t, without passing
// through registers. Shared memory holds A transposed (As[k][m]) and B as is (Bs[k][n]), each
// row padded to BM + 4 (BN + 4) floats: a row stride S = 4 (mod 32) words.
// Banks (32 of 4 bytes):
// - fragment reads: a warp's float4 reads at one k touch 8 (A) or 4 (B) distinct quads side by
//   side in one row, the other lanes reading the same quads (broadcasts): no two lanes read
//   different words of one bank;
// - 16-byte copies (a row in global memory runs along m for A^T, along n for B): 8 neighbouring
//   lanes copy 8 neighbouring quads of one row (rows hold 16 or 32 quads): 128 contiguous bytes;
// - 4-byte copies along a row: 32 lanes, 32 neighbouring words;
// - 4-byte transposing copies (A stored M x K, B stored N x K): lane l copies element
//   (m, k) = (m0 + l / 8, k0 + l % 8) to word k * S + m, whose bank is
//   (4 k + m) mod 32 = 4 (l % 8) + l / 8 (+ a shift common to the warp): 32 distinct banks.
//   In global memory the warp reads 4 rows x 8 floats, four whole 32-byte sectors.
// The stages live in dynamic shared memory, STAGES * BK * (BM + 4 + BN + 4) floats (the
// launch's; kernel_table.pipelined_shared_bytes): three stages of 128 x 128 need more than
// the 48 KB a block gets without opting in.
// Edges: a copy that falls outside the matrix copies no bytes and zero-fills its destination
// (the src-size argument), so the math needs no bounds checks.
#include <cuda_pipeline.h>

#include "matmul_tiles.cuh"
#include "tile_load.cuh"

#ifndef PIPELINED_WAIT_LAG
#define PIPELINED_WAIT_LAG 0  // the tests build it with 1: waiting one batch too few must fail
#endif
#define PL_PAD 4

// Rows r0.. (R) and columns c0.. (C) of an H x W row-major matrix into sm[r][c], row stride S,
// WIDTH floats a copy (4 where W % 4 == 0 and src is 16-byte aligned: a quad is then wholly
// inside the matrix or outside). A thread's column is fixed and its rows RSTEP apart, so the
// index math is done once per slice, not per copy.
template <int R, int C, int NT, int WIDTH>
__device__ __forceinline__ void copy_straight(float* sm, int S, const float* src, int H, int W, int r0, int c0) {
    constexpr int PER_ROW = C / WIDTH, RSTEP = NT / PER_ROW;
    static_assert(NT % PER_ROW == 0 && R % RSTEP == 0, "whole rows per pass of the block");
    const int c = (int)(threadIdx.x % PER_ROW) * WIDTH, r = (int)(threadIdx.x / PER_ROW);
    const bool col_in = c0 + c < W;
    const float* p = src + (long long)(r0 + r) * W + c0 + c;
#pragma unroll 1  // unrolled, the copies' pointers stay live across the K loop: spills
    for (int i = 0; i < R / RSTEP; ++i) {
        const bool in = col_in && r0 + r + i * RSTEP < H;
        __pipeline_memcpy_async(sm + (r + i * RSTEP) * S + c, in ? p + (long long)i * RSTEP * W : src, 4 * WIDTH,
                                in ? 0 : 4 * WIDTH);
    }
}

// Rows m0.. (R) and columns k0.. (C) of an H x W row-major matrix into sm[k][m] (transposed),
// row stride S = 4 (mod 32): lane l of warp w takes k = (w % (C / 8)) 8 + l % 8 and rows
// m = (w / (C / 8)) 4 + l / 8 + i MSTEP (see the header's bank arithmetic).
template <int R, int C, int NT>
__device__ __forceinline__ void copy_transposed(float* sm, int S, const float* src, int H, int W, int m0, int k0) {
    constexpr int CHUNKS_K = C / 8, WARPS = NT / 32, MSTEP = 4 * WARPS / CHUNKS_K;
    static_assert(C % 8 == 0 && WARPS % CHUNKS_K == 0 && R % MSTEP == 0, "whole 4 x 8 chunks per warp");
    const int lane = (int)(threadIdx.x % 32), warp = (int)(threadIdx.x / 32);
    const int k = (warp % CHUNKS_K) * 8 + lane % 8, m = (warp / CHUNKS_K) * 4 + lane / 8;
    const bool k_in = k0 + k < W;
    const float* p = src + (long long)(m0 + m) * W + k0 + k;
#pragma unroll 1
    for (int i = 0; i < R / MSTEP; ++i) {
        const bool in = k_in && m0 + m + i * MSTEP < H;
        __pipeline_memcpy_async(sm + k * S + m + i * MSTEP, in ? p + (long long)i * MSTEP * W : src, 4, in ? 0 : 4);
    }
}

// One float4 read of shared memory into 4 registers of an unrolled array.
__device__ __forceinline__ void unpack4_pl(float* dst, const float* src) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
}

template <int BM, int BN, int BK, int WM, int WN, int TM, int TN, int STAGES>
__device__ __forceinline__ void pipelined_body(float* c, const float* a, const float* b, int M, int N, int K,
                                               int ta, int tb, int stride_a, int stride_b, int k_splits) {
    static_assert((WM / TM) * (WN / TN) == 32, "a warp's threads cover its warp tile");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && STAGES >= 2, "register tiles are groups of 4 x 4");
    constexpr int WARPS_N = BN / WN, NT = 32 * (BM / WM) * WARPS_N;
    constexpr int LX = WN / TN;                        // a warp's threads along n
    constexpr int GM = WM * 4 / TM, GN = WN * 4 / TN;  // rows (columns) between a thread's 4 x 4 groups
    constexpr int SA = BM + PL_PAD, SB = BN + PL_PAD;
    static_assert(SA % 32 == 4 && SB % 32 == 4, "the bank arithmetic of the header");
    extern __shared__ float4 pipelined_stages[];  // float4: 16-byte aligned, as the copies need
    float* const stages = reinterpret_cast<float*>(pipelined_stages);
    float(*As)[BK][SA] = reinterpret_cast<float(*)[BK][SA]>(stages);
    float(*Bs)[BK][SB] = reinterpret_cast<float(*)[BK][SB]>(stages + STAGES * BK * SA);

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm0 = (warp / WARPS_N) * WM + (lane / LX) * 4;  // this thread's first row in the block tile
    const int wn0 = (warp % WARPS_N) * WN + (lane % LX) * 4;  // ...and first column
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const long long z = blockIdx.z, matrix = z / k_splits;
    a += matrix * stride_a;
    b += matrix * stride_b;
    c += z * M * N;
    const bool vec_a = ta && (M & 3) == 0 && aligned16(a);
    const bool vec_b = !tb && (N & 3) == 0 && aligned16(b);

    // This block's K-slices: whole BK-tiles, split evenly over the k_splits slices.
    const int all_tiles = (K + BK - 1) / BK, per_split = (all_tiles + k_splits - 1) / k_splits;
    const int first = (int)(z % k_splits) * per_split;
    const int tiles = max(0, min(all_tiles, first + per_split) - first);

    auto issue = [&](int t) {  // the copies of this block's slice t into stage t % STAGES
        const int k0 = (first + t) * BK, s = t % STAGES;
        if (!ta) copy_transposed<BM, BK, NT>(&As[s][0][0], SA, a, M, K, row0, k0);
        else if (vec_a) copy_straight<BK, BM, NT, 4>(&As[s][0][0], SA, a, K, M, k0, row0);
        else copy_straight<BK, BM, NT, 1>(&As[s][0][0], SA, a, K, M, k0, row0);
        if (tb) copy_transposed<BN, BK, NT>(&Bs[s][0][0], SB, b, N, K, col0, k0);
        else if (vec_b) copy_straight<BK, BN, NT, 4>(&Bs[s][0][0], SB, b, K, N, k0, col0);
        else copy_straight<BK, BN, NT, 1>(&Bs[s][0][0], SB, b, K, N, k0, col0);
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    // One batch committed per slice (empty ones past the end too), so that before slice t is
    // read t + STAGES - 1 batches are committed and waiting until STAGES - 2 remain lands slice t.
#pragma unroll
    for (int t = 0; t < STAGES - 1; ++t) {
        if (t < tiles) issue(t);
        __pipeline_commit();
    }
    for (int t = 0; t < tiles; ++t) {
        __pipeline_wait_prior(STAGES - 2 + PIPELINED_WAIT_LAG);
        // Every thread's copies of slice t have landed, and every thread is done with slice
        // t - 1, whose stage the next copies overwrite.
        __syncthreads();
        if (t + STAGES - 1 < tiles) issue(t + STAGES - 1);
        __pipeline_commit();
        const int s = t % STAGES;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float fa[TM], fb[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) unpack4_pl(fa + 4 * g, &As[s][k][wm0 + g * GM]);
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) unpack4_pl(fb + 4 * g, &Bs[s][k][wn0 + g * GN]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
        }
    }

    const bool vec_c = (N & 3) == 0 && aligned16(c);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + wm0 + (i / 4) * GM + i % 4;
        if (row >= M) continue;
        float* out = c + (long long)row * N;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            const int col = col0 + wn0 + g * GN;
            if (col >= N) continue;
            store_row4(out, col, N, &acc[i][4 * g], vec_c);
        }
    }
}

#define PIPELINED(T, BM, BN, BK, WM, WN, TM, TN, STAGES, MIN_BLOCKS, BIAS_ACT)                            \
extern "C" __global__ void __launch_bounds__(32 * (BM / WM) * (BN / WN), MIN_BLOCKS) matmul_pipelined_##T(      \
    float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb, int stride_a, int stride_b) { \
    pipelined_body<BM, BN, BK, WM, WN, TM, TN, STAGES>(c, a, b, M, N, K, ta, tb, stride_a, stride_b, 1);      \
}                                                                                                              \
extern "C" __global__ void __launch_bounds__(32 * (BM / WM) * (BN / WN), MIN_BLOCKS) matmul_pipelined_splitk_##T( \
    float* partial, const float* a, const float* b, int M, int N, int K, int ta, int tb, int stride_a,          \
    int stride_b, int k_splits) {                                                                              \
    pipelined_body<BM, BN, BK, WM, WN, TM, TN, STAGES>(partial, a, b, M, N, K, ta, tb, stride_a, stride_b,    \
                                                       k_splits);                                              \
}
PIPELINED_TILES(PIPELINED)

// c[z][i] = the sum over s of partial[z * k_splits + s][i], s in order: the same bits every run.
// One thread per element of the batch * mn outputs.
extern "C" __global__ void matmul_splitk_reduce(float* c, const float* partial, int mn, int k_splits, int n) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const float* p = partial + (long long)(e / mn) * k_splits * mn + e % mn;
    float sum = 0.0f;
    for (int s = 0; s < k_splits; ++s) sum += p[(long long)s * mn];
    c[e] = sum;
}

// The same sums four outputs at a time, with float4 loads and stores, where mn is a multiple of
// 4 and c and partial start 16-byte aligned (the launcher's choice): thread e sums quad e, every
// slice's load issued before the first add. The same bits as matmul_splitk_reduce.
extern "C" __global__ void matmul_splitk_reduce4(float* c, const float* partial, int mn, int k_splits, int n) {
    const long long e = 4ll * (blockIdx.x * blockDim.x + threadIdx.x);
    if (e >= n) return;
    const float4* p = reinterpret_cast<const float4*>(partial + (e / mn) * k_splits * mn + e % mn);
    const long long step = mn / 4;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < k_splits; ++s) {
        const float4 v = p[s * step];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
    }
    *reinterpret_cast<float4*>(c + e) = sum;
}

// The last block of an output tile to finish its slice: the CUDA Programming Guide's
// "last block" pattern. Every thread fences its partial stores (release) before thread 0
// counts the block in; the block that brings the count to k_splits fences again (acquire)
// and reads the other slices with volatile loads, which go to L2 (this SM's L1 may not hold
// another SM's writes), then resets the counter for the next launch or graph replay.
template <int BM, int BN>
__device__ __forceinline__ void splitk_last_block(float* c, const float* partial, unsigned int* counters,
                                                  const float* bias, int M, int N, int k_splits, int act) {
    __shared__ int is_last;
    const long long matrix = blockIdx.z / k_splits, mn = (long long)M * N;
    const int tile = (int)((matrix * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&counters[tile], 1u) == (unsigned int)(k_splits - 1);
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    const volatile float* slices = partial + matrix * k_splits * mn;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    for (int e = threadIdx.x; e < BM * BN; e += blockDim.x) {
        const int row = row0 + e / BN, col = col0 + e % BN;
        if (row >= M || col >= N) continue;
        const long long at = (long long)row * N + col;
        float sum = 0.0f;
        for (int s = 0; s < k_splits; ++s) sum += slices[s * mn + at];
        if (bias != nullptr) sum += bias[col];
        c[matrix * mn + at] = act ? fmaxf(sum, 0.0f) : sum;
    }
    if (threadIdx.x == 0) counters[tile] = 0u;
}

#define PIPELINED_SPLITK_BIAS_ACT(T, BM, BN, BK, WM, WN, TM, TN, STAGES, MIN_BLOCKS, BIAS_ACT)              \
TILE_IF(BIAS_ACT,                                                                                              \
extern "C" __global__ void __launch_bounds__(32 * (BM / WM) * (BN / WN), MIN_BLOCKS)                           \
matmul_pipelined_splitk_bias_act_##T(                                                                          \
    float* c, float* partial, unsigned int* counters, const float* a, const float* b, const float* bias,       \
    int M, int N, int K, int ta, int tb, int stride_a, int stride_b, int k_splits, int act) {                  \
    pipelined_body<BM, BN, BK, WM, WN, TM, TN, STAGES>(partial, a, b, M, N, K, ta, tb, stride_a, stride_b,    \
                                                       k_splits);                                              \
    splitk_last_block<BM, BN>(c, partial, counters, bias, M, N, k_splits, act);                               \
})
PIPELINED_TILES(PIPELINED_SPLITK_BIAS_ACT)
