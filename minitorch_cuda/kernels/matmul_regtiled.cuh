// matmul_regtiled.cuh: the register-tiled SGEMM body shared by matmul_regtiled.cu
// (stage 9) and fused.cu (its bias + activation epilogue, stage 10).
//
// C (M x N) = op(A) (M x K) op(B) (K x N) [+ bias[col]] [ReLU] [* (mask > 0)], float32,
// row-major, flags, batch strides and C's stride as in matmul.cu. The lean step (stage 11)
// folds two backward ops in: `mask` (M x N, like C) zeroes C where mask <= 0 (ReLU's
// backward, read from its output), and `colsum` (N) gets the column sums of op(B) over K,
// summed by the first row of blocks from the tiles they stage anyway (a weight gradient's
// bias gradient: db = column sums of dY for dW = X^T dY); batch 1 only.
// Split-K (k_splits > 1, no bias, ReLU, mask or colsum): block z computes K-slice
// z % k_splits of matrix z / k_splits, whole BK-tiles split evenly, into c + z * M * N.
// Slices (OwnSlice unless given) says where a split-K block's sums go: its own slice of
// scratch, or (ClusterSum, matmul_cluster.cu) the first block of its cluster, which writes c.
// A block of NT = (BM/TM) (BN/TN) threads computes a BM x BN tile of C; each
// thread a TM x TN register tile, as TM/4 x TN/4 groups of 4 x 4 spread over the
// block tile (rows c * RT*4 + ty*4 + i), so that the float4 reads of shared memory
// by a warp are either broadcasts (A) or one contiguous run (B): no bank conflicts.
// Shared memory holds A transposed (As[k][m]) and B as is (Bs[k][n]), both padded
// by 4 floats per row, and twice: while the block multiplies one K-slice out of
// one buffer, the next slice is loaded into registers and then stored into the
// other buffer, so one barrier per slice suffices.
// EXACT (the matmul_regtiled_exact_* kernels): the launcher's promise (matmul_launchers.exact_fit)
// of one matrix each (batch 1, so no batch strides), ta = tb = 0, tiles that divide M, N and K
// exactly, a tile in every K-slice and rows that start a float4. The loads then need no checks,
// and a thread's addresses move by a constant per K-tile (ExactLoader): at 4096^3 the checks and
// the address arithmetic of each K-tile were a fifth of the instructions issued, against
// cuBLAS's 12% (ncu_ch16_pipelined.json). The products and their order are the same, so are the bits.
// In the twins the multiply-adds of a step go along a row of the register tile and back along
// the next, so that each row's first shares an operand with the row before's last. Each
// accumulator gets its products in the same order, so the bits are the plain loop's; the order
// in the SASS is ptxas's, and with the batch strides known to be 0 it keeps this one: on the H200
// at 4096^3 the 128 x 128 x 8 twin went from 0.876 to 0.925 of cuBLAS SGEMM (one process, the two
// cubins as built; ch16_inner_loop_diagnosis.json). Written through a helper function, or with
// runtime strides, the same source came out of ptxas in another order, and slower; the checked
// kernels (and stage 10's fused ones) keep the plain order, whose timings the records hold.
#pragma once
#include "tile_load.cuh"

#define RT_PAD 4

// Split-K's default: every block writes its K-slice to c + z * M * N, and a reduction sums them.
struct OwnSlice {
    static constexpr bool kSumsInCluster = false;
    template <class Acc>
    __device__ __forceinline__ bool operator()(Acc&) const { return true; }  // this block writes
};

__device__ __forceinline__ void unpack4(float* dst, float4 v) {  // into 4 registers of an unrolled array
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
}

// TileLoader's quads of a tile that lies wholly inside its matrix, at a K-offset that changes
// per K-tile: each thread's quad addresses are fixed once, so a load is a float4 at address + offset.
template <int R, int C, int NT>
struct ExactLoader {
    using Tile = TileLoader<R, C, NT>;
    const float* quad[Tile::L];

    __device__ __forceinline__ ExactLoader(const float* src, int W, int r0, int c0, int tid) {
#pragma unroll
        for (int i = 0; i < Tile::L; ++i) {
            const int q = min(tid + i * NT, Tile::Q - 1);  // a thread without quad i never loads it
            quad[i] = src + (long long)(r0 + q / (C / 4)) * W + c0 + (q % (C / 4)) * 4;
        }
    }

    __device__ __forceinline__ void load(float (&reg)[Tile::L][4], long long offset, int tid) const {
#pragma unroll
        for (int i = 0; i < Tile::L; ++i) {
            if (Tile::Q % NT == 0 || tid + i * NT < Tile::Q)
                unpack4(reg[i], *reinterpret_cast<const float4*>(quad[i] + offset));
        }
    }
};

template <int BM, int BN, int BK, int TM, int TN, bool EXACT = false, class Slices = OwnSlice>
__device__ __forceinline__ void regtiled_body(float* c, const float* a, const float* b, const float* bias,
                                              int M, int N, int K, int ta, int tb, int stride_a, int stride_b,
                                              int relu, const float* mask = nullptr,
                                              float* colsum = nullptr, int k_splits = 1) {
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "register tiles are groups of 4 x 4");
    constexpr int RT = BM / TM, CT = BN / TN, NT = RT * CT;
    constexpr int SA = BM + RT_PAD, SB = BN + RT_PAD;
    using LoadA = TileLoader<BM, BK, NT>;   // A stored M x K: tile BM x BK, quads along k
    using LoadAT = TileLoader<BK, BM, NT>;  // A stored K x M: tile BK x BM, quads along m
    using LoadB = TileLoader<BK, BN, NT>;   // B stored K x N
    using LoadBT = TileLoader<BN, BK, NT>;  // B stored N x K
    static_assert(LoadA::L == LoadAT::L && LoadB::L == LoadBT::L, "same registers either way");
    static_assert(NT >= BN, "a thread per column of the block tile sums it");
    __shared__ __align__(16) float As[2][BK][SA];
    __shared__ __align__(16) float Bs[2][BK][SB];

    if constexpr (EXACT) ta = tb = stride_a = stride_b = 0;  // the launcher's promise (see the top)
    const int tid = threadIdx.x;
    const int tx = tid % CT, ty = tid / CT;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const long long z = blockIdx.z, matrix = z / k_splits;
    a += matrix * stride_a;
    b += matrix * stride_b;
    c += (Slices::kSumsInCluster ? matrix : z) * M * N;
    if (mask != nullptr) mask += matrix * M * N;
    // Column tid of this block's op(B), summed over every K-slice, in k order (deterministic).
    const bool sums = colsum != nullptr && blockIdx.y == 0 && tid < BN;
    float col_acc = 0.0f;
    // Vector loads need the contiguous extent to be a multiple of 4 and an aligned start.
    const bool vec_a = ((ta ? M : K) & 3) == 0 && aligned16(a);
    const bool vec_b = ((tb ? K : N) & 3) == 0 && aligned16(b);

    float ra[LoadA::L][4], rb[LoadB::L][4];
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    // This block's K-tiles: first, first + 1, ... (all of them unless split).
    const int all_tiles = (K + BK - 1) / BK, per_split = (all_tiles + k_splits - 1) / k_splits;
    const int first = (int)(z % k_splits) * per_split;
    const int tiles = min(all_tiles - first, per_split);  // < 1: a slice past the end, no tiles

    const ExactLoader<BM, BK, NT> exact_a(a, K, row0, first * BK, tid);  // used only where EXACT
    const ExactLoader<BK, BN, NT> exact_b(b, N, first * BK, col0, tid);
    // Global (row, col) of this block's K-tile t, staged into registers (zeros past K).
    auto load = [&](int t) {
        if constexpr (EXACT) {
            exact_a.load(ra, (long long)t * BK, tid);
            exact_b.load(rb, (long long)t * BK * N, tid);
            return;
        }
        const int k0 = (first + t) * BK;
        if (ta) LoadAT::load(ra, a, K, M, k0, row0, vec_a, tid);
        else LoadA::load(ra, a, M, K, row0, k0, vec_a, tid);
        if (tb) LoadBT::load(rb, b, N, K, col0, k0, vec_b, tid);
        else LoadB::load(rb, b, K, N, k0, col0, vec_b, tid);
    };
    auto store = [&](int buf) {
        if (ta) LoadAT::store(&As[buf][0][0], SA, false, ra, tid, Identity());
        else LoadA::store(&As[buf][0][0], SA, true, ra, tid, Identity());
        if (tb) LoadBT::store(&Bs[buf][0][0], SB, true, rb, tid, Identity());
        else LoadB::store(&Bs[buf][0][0], SB, false, rb, tid, Identity());
    };

    load(0);
    store(0);
    __syncthreads();
    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        if (t + 1 < tiles) load(t + 1);  // in flight while we multiply
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float fa[TM], fb[TN];
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                unpack4(fa + g * 4, *reinterpret_cast<const float4*>(&As[cur][k][g * RT * 4 + ty * 4]));
            }
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                unpack4(fb + g * 4, *reinterpret_cast<const float4*>(&Bs[cur][k][g * CT * 4 + tx * 4]));
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int jj = 0; jj < TN; ++jj) {  // the twins: odd rows backwards (see the top)
                    const int j = EXACT && (i & 1) ? TN - 1 - jj : jj;
                    acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
                }
        }
        if (sums) {  // zeros past K: the loaders zero-fill
#pragma unroll
            for (int k = 0; k < BK; ++k) col_acc += Bs[cur][k][tid];
        }
        // The other buffer was last read before the previous barrier: safe to fill.
        if (t + 1 < tiles) store(cur ^ 1);
        __syncthreads();
    }

    if (sums && col0 + tid < N) colsum[col0 + tid] = col_acc;
    if (!Slices()(acc)) return;  // another block of the cluster writes these outputs
    const bool vec_c = (N & 3) == 0 && aligned16(c);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + (i / 4) * RT * 4 + ty * 4 + (i % 4);
        if (row >= M) continue;
        float* out = c + (long long)row * N;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            const int col = col0 + g * CT * 4 + tx * 4;
            if (col >= N) continue;
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                v[e] = acc[i][g * 4 + e];
                if (bias != nullptr && col + e < N) v[e] += bias[col + e];
                if (relu) v[e] = fmaxf(v[e], 0.0f);
                if (mask != nullptr && col + e < N && !(mask[(long long)row * N + col + e] > 0.0f)) v[e] = 0.0f;
            }
            store_row4(out, col, N, v, vec_c);
        }
    }
}
