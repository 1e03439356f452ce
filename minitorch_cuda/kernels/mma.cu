// mma.cu: matmul on the tensor cores through WMMA (stage 12), same parameters as
// matmul_tiled (flags, batch strides, any M, N, K).
//   matmul_tf32   inputs rounded to TF32 (10-bit mantissa), fragments 16 x 16 x 8,
//                 FP32 accumulation: below 1e-3 relative error against float64
//                 (a few 1e-4 measured on the H200, chapter 19)
//   matmul_bf16   inputs rounded to BF16 (7-bit mantissa), fragments 16 x 16 x 16,
//                 FP32 accumulation: below 1e-2 relative error (a few 1e-3 measured)
// A block of 256 threads (8 warps, 2 x 4) computes a 128 x 128 tile of C; each warp
// a 64 x 32 tile as 4 x 2 accumulator fragments. Per K-slice of 32 the block stages
// A (as As[m][k]) and B (as Bs[k][n]) in shared memory, rounded once on the way in;
// the next slice is loaded into registers while the warps multiply. Rows are
// padded by 8 elements: WMMA wants 32-byte aligned fragment pointers and a leading
// dimension that is a multiple of 16 bytes. The last partial tiles go through a
// per-warp staging area in shared memory, so C needs no alignment or size.
// Launch: block (256, 1, 1), grid (ceil(N / 128), ceil(M / 128), batch).
#include <mma.h>
#include "tile_load.cuh"

using namespace nvcuda;

#define MMA_BM 128
#define MMA_BN 128
#define MMA_BK 32
#define MMA_THREADS 256

struct Tf32 {
    using smem_t = float;
    using frag_t = wmma::precision::tf32;
    static constexpr int FK = 8;
    __device__ __forceinline__ float operator()(float x) const { return wmma::__float_to_tf32(x); }
};

struct Bf16 {
    using smem_t = __nv_bfloat16;
    using frag_t = __nv_bfloat16;
    static constexpr int FK = 16;
    __device__ __forceinline__ float operator()(float x) const { return x; }  // store1/store4 round
};

template <class P>
__device__ __forceinline__ void mma_body(float* c, const float* a, const float* b, int M, int N, int K,
                                         int ta, int tb, int stride_a, int stride_b) {
    using T = typename P::smem_t;
    constexpr int LDA = MMA_BK + 8, LDB = MMA_BN + 8;
    constexpr int A_BYTES = MMA_BM * LDA * sizeof(T), B_BYTES = MMA_BK * LDB * sizeof(T);
    constexpr int STAGE_BYTES = 8 * 16 * 16 * sizeof(float);  // one 16 x 16 float tile per warp
    constexpr int SMEM = (A_BYTES + B_BYTES) > STAGE_BYTES ? (A_BYTES + B_BYTES) : STAGE_BYTES;
    using LoadA = TileLoader<MMA_BM, MMA_BK, MMA_THREADS>;
    using LoadAT = TileLoader<MMA_BK, MMA_BM, MMA_THREADS>;
    using LoadB = TileLoader<MMA_BK, MMA_BN, MMA_THREADS>;
    using LoadBT = TileLoader<MMA_BN, MMA_BK, MMA_THREADS>;
    __shared__ __align__(128) unsigned char smem[SMEM];
    T* As = reinterpret_cast<T*>(smem);
    T* Bs = reinterpret_cast<T*>(smem + A_BYTES);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wm = warp >> 2, wn = warp & 3;  // warp tile: rows wm*64.., cols wn*32..
    const int row0 = blockIdx.y * MMA_BM, col0 = blockIdx.x * MMA_BN;
    const long long z = blockIdx.z;
    a += z * stride_a;
    b += z * stride_b;
    c += z * M * N;
    const bool vec_a = ((ta ? M : K) & 3) == 0 && aligned16(a);
    const bool vec_b = ((tb ? K : N) & 3) == 0 && aligned16(b);

    wmma::fragment<wmma::accumulator, 16, 16, P::FK, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    float ra[LoadA::L][4], rb[LoadB::L][4];
    auto load = [&](int k0) {
        if (ta) LoadAT::load(ra, a, K, M, k0, row0, vec_a, tid);
        else LoadA::load(ra, a, M, K, row0, k0, vec_a, tid);
        if (tb) LoadBT::load(rb, b, N, K, col0, k0, vec_b, tid);
        else LoadB::load(rb, b, K, N, k0, col0, vec_b, tid);
    };

    const int tiles = (K + MMA_BK - 1) / MMA_BK;
    load(0);
    for (int t = 0; t < tiles; ++t) {
        // As[m][k]: a stored M x K is copied as is, one stored K x M transposed.
        if (ta) LoadAT::store(As, LDA, true, ra, tid, P());
        else LoadA::store(As, LDA, false, ra, tid, P());
        if (tb) LoadBT::store(Bs, LDB, true, rb, tid, P());
        else LoadB::store(Bs, LDB, false, rb, tid, P());
        __syncthreads();
        if (t + 1 < tiles) load((t + 1) * MMA_BK);  // in flight during the MMAs
#pragma unroll
        for (int kk = 0; kk < MMA_BK; kk += P::FK) {
            wmma::fragment<wmma::matrix_a, 16, 16, P::FK, typename P::frag_t, wmma::row_major> fa[4];
            wmma::fragment<wmma::matrix_b, 16, 16, P::FK, typename P::frag_t, wmma::row_major> fb[2];
#pragma unroll
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], As + (wm * 64 + i * 16) * LDA + kk, LDA);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], Bs + kk * LDB + wn * 32 + j * 16, LDB);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();  // everyone is done reading before the next slice overwrites
    }

    // Epilogue through a per-warp 16 x 16 staging tile (the slices are no longer needed).
    float* stage = reinterpret_cast<float*>(smem) + warp * 256;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int r0 = row0 + wm * 64 + i * 16, c0 = col0 + wn * 32 + j * 16;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int idx = lane + 32 * e;
                const int r = r0 + idx / 16, col = c0 + idx % 16;
                if (r < M && col < N) c[(long long)r * N + col] = stage[idx];
            }
            __syncwarp();
        }
    }
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS) matmul_tf32(float* c, const float* a, const float* b,
                                                                     int M, int N, int K, int ta, int tb,
                                                                     int stride_a, int stride_b) {
    mma_body<Tf32>(c, a, b, M, N, K, ta, tb, stride_a, stride_b);
}

extern "C" __global__ void __launch_bounds__(MMA_THREADS) matmul_bf16(float* c, const float* a, const float* b,
                                                                     int M, int N, int K, int ta, int tb,
                                                                     int stride_a, int stride_b) {
    mma_body<Bf16>(c, a, b, M, N, K, ta, tb, stride_a, stride_b);
}
