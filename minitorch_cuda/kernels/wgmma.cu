// wgmma.cu: a TF32 matmul on Hopper's warpgroup MMA (sm_90a), chapter 19's next step.
// C[z] (M x N) = A[z] (M x K) * B[z]^T, B given as N x K: both operands K-contiguous, the
// only layout wgmma accepts for TF32 operands (transposes are for 16-bit types only).
//
// mma.sync (mma_async.cu) makes every warp load its fragments from shared memory into
// registers; wgmma.mma_async lets a warpgroup (4 warps, 128 threads) hand the tensor cores
// two shared-memory *descriptors* instead, and the 64 x 256 x 8 product runs while the
// threads go on. A block of two warpgroups computes a 128 x 256 tile of C, warpgroup w the
// rows 64w..64w+63: 128 FP32 accumulators a thread.
// K-slices of 32 columns travel by cp.async into WG_STAGES buffers, WG_AHEAD slices ahead of
// the multiplication; one slice's wgmma stays in flight while the next is issued. A staged
// tile has one 128-byte row per row of A (or of B^T), its eight 16-byte chunks swizzled,
// chunk j of row r at position j ^ (r % 8): the "128-byte swizzle" layout a descriptor can
// name, in which the tensor cores read without bank conflicts. The swizzle acts on address bits 4-9, so every
// tile starts on a 1024-byte boundary.
// The tensor cores use the top 19 bits of each FP32 operand (TF32 by truncation: there is no
// register pass in which to round, as mma_async.cu does with cvt.rna).
// Needs K % 4 == 0, A and B 16-byte aligned, batch strides multiples of 4: cp.async moves whole
// 16-byte quads and zero-fills those outside the matrix. Launch: block (WG_THREADS, 1, 1),
// grid (ceil(N / WG_BN), ceil(M / WG_BM), batch), dynamic shared memory WG_SMEM_BYTES.
#include "cp_async.cuh"
#include "wgmma_tf32.cuh"

#define WG_BM 128
#define WG_BN 256
#define WG_BK 32  // 32 floats: one 128-byte swizzled row
#define WG_STAGES 4
#define WG_AHEAD (WG_STAGES - 2)  // slices copied ahead; one more buffer for a wgmma still running
#define WG_THREADS 256
#define WG_STAGE_BYTES ((WG_BM + WG_BN) * WG_BK * 4)
#define WG_SMEM_BYTES (WG_STAGES * WG_STAGE_BYTES + 1024)  // + room to align to 1024 bytes

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma exists only in sm_90a code

// Stage the R x 32 tile at (r0, k0) of a K-contiguous `rows` x K operand, swizzled.
template <int R>
__device__ __forceinline__ void copy_rows(unsigned char* tile, const float* g, int rows, int K, int r0, int k0) {
    constexpr int CHUNKS = R * WG_BK / 4;  // 16-byte quads
    static_assert(CHUNKS % WG_THREADS == 0, "every thread copies the same number of quads");
#pragma unroll
    for (int i = 0; i < CHUNKS / WG_THREADS; ++i) {
        const int q = threadIdx.x + i * WG_THREADS;
        const int r = q / 8, j = q % 8;  // eight neighbouring threads read one 128-byte row
        const bool inside = r0 + r < rows && k0 + 4 * j < K;
        const float* src = inside ? g + (long long)(r0 + r) * K + k0 + 4 * j : g;
        cp_async16(tile + r * 128 + ((j ^ (r % 8)) << 4), src, inside ? 16 : 0);
    }
}

#endif

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
    matmul_tf32_wgmma(float* c, const float* a, const float* b, int M, int N, int K, int stride_a, int stride_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(16) unsigned char wg_smem[];
    unsigned char* smem = wg_smem + ((1024 - (__cvta_generic_to_shared(wg_smem) & 1023)) & 1023);
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int row0 = blockIdx.y * WG_BM, col0 = blockIdx.x * WG_BN;
    a += blockIdx.z * (long long)stride_a;
    b += blockIdx.z * (long long)stride_b;
    c += blockIdx.z * (long long)M * N;

    auto tile_a = [&](int slice) { return smem + (slice % WG_STAGES) * WG_STAGE_BYTES; };
    auto tile_b = [&](int slice) { return tile_a(slice) + WG_BM * 128; };
    auto copy = [&](int slice) {
        copy_rows<WG_BM>(tile_a(slice), a, M, K, row0, slice * WG_BK);
        copy_rows<WG_BN>(tile_b(slice), b, N, K, col0, slice * WG_BK);
    };

    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    // Buffers in use while slice s is multiplied: s - 1 (its wgmma may still run), s, and the
    // WG_AHEAD slices being copied in.
    const int slices = (K + WG_BK - 1) / WG_BK;
#pragma unroll
    for (int s = 0; s < WG_AHEAD; ++s) {
        if (s < slices) copy(s);
        cp_async_commit();  // one group per slice, empty ones too: the wait below counts groups
    }
    for (int slice = 0; slice < slices; ++slice) {
        cp_async_wait<WG_AHEAD - 1>();                          // this thread's quads of `slice` landed
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // ... visible to the tensor cores
        __syncthreads();  // everyone's have; and every warpgroup's wgmma of slice - 2 has finished
        wgmma_slice(d, tile_a(slice) + wg * 64 * 128, tile_b(slice));  // this warpgroup's 64 rows of A
        // While the tensor cores work: the copies of slice + WG_AHEAD, into slice - 2's buffer.
        if (slice + WG_AHEAD < slices) copy(slice + WG_AHEAD);
        cp_async_commit();
        wgmma_wait<1>(d);  // slice - 1's are done
    }
    wgmma_wait<0>(d);
    cp_async_wait<0>();

    // Warp w of the warpgroup holds rows 16w..16w+15; lane (g, t) holds, for every 8 columns
    // n8, columns n8 + 2t and n8 + 2t + 1 of rows g and g + 8: d[4 * (n8 / 8) + 2h + p].
    // (wgmma_tma.cu's store_tile, written out: moved into a function, even an inlined one, it
    // compiles here to other SASS than the code verified on the H200.)
    const int g = lane / 4, t = lane % 4;
    const bool pairs = (N & 1) == 0 && (reinterpret_cast<unsigned long long>(c) & 7ull) == 0;
#pragma unroll
    for (int n8 = 0; n8 < WG_BN / 8; ++n8) {
        const int col = col0 + 8 * n8 + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row0 + 64 * wg + 16 * warp + g + 8 * h;
            if (r >= M) continue;
            float* dst = c + (long long)r * N + col;
            const float x = d[4 * n8 + 2 * h], y = d[4 * n8 + 2 * h + 1];
            if (pairs && col + 1 < N) {
                *reinterpret_cast<float2*>(dst) = make_float2(x, y);
            } else {
                if (col < N) dst[0] = x;
                if (col + 1 < N) dst[1] = y;
            }
        }
    }
#else
    __trap();  // built for a GPU without wgmma: ops_matmul never launches it there
#endif
}
