// mma_async.cu: stage 12's TF32 matmul, fed by cp.async (chapter 19).
// Two changes from mma.cu's WMMA kernel, both about feeding the tensor cores:
//   - the tensor-core instruction is issued directly (mma.sync m16n8k8), so we choose
//     which shared-memory words each lane reads: every fragment read is free of bank
//     conflicts, and the operands stay in shared memory exactly as they are stored;
//   - tiles go from global to shared memory by cp.async, with ASYNC_STAGES K-slices in
//     flight: the copies of slice t + 2 run while the warps multiply slice t, and no
//     register holds the data on the way.
// A block of ASYNC_THREADS threads computes a 128 x ASYNC_BN tile of C in K-slices of 32;
// each warp an ASYNC_WM x ASYNC_WN tile, as (WM / 16) x (WN / 8) mma fragments.
// A tile is staged as its operand is stored: a K-contiguous one (A, or B with tb) as
// [extent][32 + 4], the other as [32][extent + 8]. The paddings put the 32 words a fragment read
// touches in 32 different banks (lane (g, t) reads row g, column t: bank 4g + t, or 8t + g).
// An operand whose contiguous extent and batch stride are multiples of 4 and whose start is
// 16-byte aligned is copied a quad (16 bytes) at a time; any other (K = 70, a row slice) a float
// at a time into the same tiles. M, N, K are free: cp.async zero-fills what lies outside the matrix.
// Launch: block (ASYNC_THREADS, 1, 1), grid (ceil(N / ASYNC_BN), ceil(M / 128), batch), dynamic
// shared memory ASYNC_SMEM_BYTES (more than the 48 KB default: kernel_table.py reads these
// #defines for the launch, and the registry raises the function's limit).
// Next step, on Hopper only: wgmma.cu hands whole tiles to the tensor cores by descriptor.
#include "cp_async.cuh"

#ifndef ASYNC_WN  // the fastest of seven shapes at 4096^3 on the H200 (chapter 19); -D... sets others
#define ASYNC_BN 256
#define ASYNC_WM 64
#define ASYNC_WN 64
#define ASYNC_STAGES 3
#define ASYNC_MIN_BLOCKS 1  // one block an SM (166 KB of shared memory; ~210 registers a thread)
#define ASYNC_KK_UNROLL 2
#endif
#define ASYNC_BM 128
#define ASYNC_BK 32
#define ASYNC_THREADS (32 * (ASYNC_BM / ASYNC_WM) * (ASYNC_BN / ASYNC_WN))
#define ASYNC_KROW (ASYNC_BK + 4)  // row of a K-contiguous tile; (EXTENT + 8) for the other layout
#define ASYNC_MAX(x, y) ((x) > (y) ? (x) : (y))
#define ASYNC_TILE(EXTENT) ASYNC_MAX((EXTENT) * ASYNC_KROW, ASYNC_BK * ((EXTENT) + 8))  // floats, either layout
#define ASYNC_STAGE (ASYNC_TILE(ASYNC_BM) + ASYNC_TILE(ASYNC_BN))
#define ASYNC_SMEM_BYTES (ASYNC_STAGES * ASYNC_STAGE * 4)

__device__ __forceinline__ unsigned to_tf32(float x) {  // round to nearest, ties away
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// d += a * b for one 16 x 8 x 8 fragment; lane (g, t) = (lane / 4, lane % 4) holds
// a: (g, t) (g + 8, t) (g, t + 4) (g + 8, t + 4), b: (t, g) (t + 4, g), d: (g, 2t) (g, 2t + 1)
// (g + 8, 2t) (g + 8, 2t + 1), as (row, column).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Element (i, k) of a staged EXTENT x 32 tile: i is a row of A or a column of B.
template <bool KCONTIG, int EXTENT>
__device__ __forceinline__ float tile_at(const float* s, int i, int k) {
    return KCONTIG ? s[i * ASYNC_KROW + k] : s[k * (EXTENT + 8) + i];
}

// Start copying the EXTENT x 32 (i, k) tile at (i0, k0) of an operand with extents I x K
// into s: stored [I][K] if KCONTIG, else [K][I]; in 16-byte quads where ``quads`` (the
// contiguous extent a multiple of 4, g 16-byte aligned), else each quad's four floats apart.
template <bool KCONTIG, int EXTENT>
__device__ __forceinline__ void copy_tile(float* s, const float* g, int I, int K, int i0, int k0, bool quads) {
    constexpr int QUADS = EXTENT * ASYNC_BK / 4;
    static_assert(QUADS % ASYNC_THREADS == 0, "every thread copies the same number of quads");
#pragma unroll
    for (int j = 0; j < QUADS / ASYNC_THREADS; ++j) {
        const int q = threadIdx.x + j * ASYNC_THREADS;
        int i, k;
        if (KCONTIG) {
            i = q / (ASYNC_BK / 4), k = 4 * (q % (ASYNC_BK / 4));
        } else {
            k = q / (EXTENT / 4), i = 4 * (q % (EXTENT / 4));
        }
        const long long at = KCONTIG ? (long long)(i0 + i) * K + k0 + k : (long long)(k0 + k) * I + i0 + i;
        float* dst = KCONTIG ? s + i * ASYNC_KROW + k : s + k * (EXTENT + 8) + i;
        if (quads) {
            const bool inside = i0 + i < I && k0 + k < K;  // whole quads: the contiguous extent is 4n
            cp_async16(dst, inside ? g + at : g, inside ? 16 : 0);
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) {  // along the contiguous extent: k for KCONTIG, else i
                const bool inside = KCONTIG ? (i0 + i < I && k0 + k + e < K) : (i0 + i + e < I && k0 + k < K);
                cp_async4(dst + e, inside ? g + at + e : g, inside ? 4 : 0);
            }
        }
    }
}

template <bool TA, bool TB>
__device__ __forceinline__ void async_body(float* c, const float* a, const float* b, int M, int N, int K,
                                           int stride_a, int stride_b) {
    constexpr int MI = ASYNC_WM / 16, NJ = ASYNC_WN / 8;
    extern __shared__ float4 smem4[];  // float4: 16-byte aligned, as cp.async needs
    float* smem = reinterpret_cast<float*>(smem4);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int WARPS_N = ASYNC_BN / ASYNC_WN;
    const int wm = (warp / WARPS_N) * ASYNC_WM, wn = (warp % WARPS_N) * ASYNC_WN;
    const int row0 = blockIdx.y * ASYNC_BM, col0 = blockIdx.x * ASYNC_BN;
    const long long z = blockIdx.z;
    a += z * stride_a;
    b += z * stride_b;
    c += z * M * N;
    // Whole aligned quads: the contiguous extent a multiple of 4 and this matrix 16-byte aligned.
    const bool quads_a = ((TA ? M : K) & 3) == 0 && (reinterpret_cast<unsigned long long>(a) & 15ull) == 0;
    const bool quads_b = ((TB ? K : N) & 3) == 0 && (reinterpret_cast<unsigned long long>(b) & 15ull) == 0;

    auto copy = [&](int slice) {
        float* s = smem + (slice % ASYNC_STAGES) * ASYNC_STAGE;
        copy_tile<!TA, ASYNC_BM>(s, a, M, K, row0, slice * ASYNC_BK, quads_a);
        copy_tile<TB, ASYNC_BN>(s + ASYNC_TILE(ASYNC_BM), b, N, K, col0, slice * ASYNC_BK, quads_b);
    };
    float acc[MI][NJ][4] = {};
    const int slices = (K + ASYNC_BK - 1) / ASYNC_BK;
#pragma unroll
    for (int s = 0; s < ASYNC_STAGES - 1; ++s) {
        if (s < slices) copy(s);
        cp_async_commit();  // one group per slice, empty ones too: the wait below counts groups
    }
    for (int slice = 0; slice < slices; ++slice) {
        cp_async_wait<ASYNC_STAGES - 2>();  // this thread's copies of `slice` have landed
        __syncthreads();                     // everyone's have, and everyone is done with slice - 1
        if (slice + ASYNC_STAGES - 1 < slices) copy(slice + ASYNC_STAGES - 1);  // into slice - 1's buffer
        cp_async_commit();
        const float* As = smem + (slice % ASYNC_STAGES) * ASYNC_STAGE;
        const float* Bs = As + ASYNC_TILE(ASYNC_BM);
        constexpr int KK_UNROLL = ASYNC_KK_UNROLL;
#pragma unroll KK_UNROLL
        for (int kk = 0; kk < ASYNC_BK; kk += 8) {
            unsigned fa[MI][4], fb[NJ][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int r = wm + 16 * i + g;
                fa[i][0] = to_tf32(tile_at<!TA, ASYNC_BM>(As, r, kk + t));
                fa[i][1] = to_tf32(tile_at<!TA, ASYNC_BM>(As, r + 8, kk + t));
                fa[i][2] = to_tf32(tile_at<!TA, ASYNC_BM>(As, r, kk + t + 4));
                fa[i][3] = to_tf32(tile_at<!TA, ASYNC_BM>(As, r + 8, kk + t + 4));
            }
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
                const int n = wn + 8 * j + g;
                fb[j][0] = to_tf32(tile_at<TB, ASYNC_BN>(Bs, n, kk + t));
                fb[j][1] = to_tf32(tile_at<TB, ASYNC_BN>(Bs, n, kk + t + 4));
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NJ; ++j) mma_tf32(acc[i][j], fa[i], fb[j]);
        }
    }
    cp_async_wait<0>();  // only empty groups can be left; wait anyway before the block ends

    // Lane (g, t) holds columns 2t and 2t + 1 of rows g and g + 8: one float2 where it fits.
    const bool pairs = (N & 1) == 0 && (reinterpret_cast<unsigned long long>(c) & 7ull) == 0;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const int col = col0 + wn + 8 * j + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + wm + 16 * i + g + 8 * h;
                if (r >= M) continue;
                float* dst = c + (long long)r * N + col;
                if (pairs && col + 1 < N) {
                    *reinterpret_cast<float2*>(dst) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                } else {
                    if (col < N) dst[0] = acc[i][j][2 * h];
                    if (col + 1 < N) dst[1] = acc[i][j][2 * h + 1];
                }
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(ASYNC_THREADS, ASYNC_MIN_BLOCKS) matmul_tf32_async(float* c, const float* a,
                                                                             const float* b, int M, int N,
                                                                             int K, int ta, int tb,
                                                                             int stride_a, int stride_b) {
    if (ta) {
        if (tb) async_body<true, true>(c, a, b, M, N, K, stride_a, stride_b);
        else async_body<true, false>(c, a, b, M, N, K, stride_a, stride_b);
    } else {
        if (tb) async_body<false, true>(c, a, b, M, N, K, stride_a, stride_b);
        else async_body<false, false>(c, a, b, M, N, K, stride_a, stride_b);
    }
}
