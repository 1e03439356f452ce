// wgmma_tma.cu: wgmma.cu's TF32 product (C = A B^T, both operands K-contiguous), fed by the tensor
// memory accelerator (TMA) and split into roles (sm_90a), chapter 19's fourth kernel: stage 12's
// route for products from 1024^3 up (matmul_launchers.matmul_tf32_wgmma_tma).
//
// What changes from wgmma.cu, each a step of the published Hopper GEMM worklogs:
//   - TMA copies: one thread issues a whole tile's copy (cp.async.bulk.tensor) and the copy engine
//     writes it in the 128-byte swizzle wgmma's descriptors name; no thread computes an address,
//     and the copy engine zero-fills what lies outside the matrix;
//   - mbarriers instead of __syncthreads: stage s has a "full" barrier (the copy's bytes arrived)
//     and an "empty" one (both consumers' wgmma read it); waits are on a phase's parity;
//   - warp specialization: warpgroup 0 is the producer (one thread issues the copies) and gives
//     up registers (setmaxnreg.dec); warpgroups 1 and 2 are consumers, rows 0-63 and 64-127 of a
//     WT_BM x WT_BN tile of C, and take them (setmaxnreg.inc) for their WT_BN / 2 accumulators;
//   - persistence: a block per SM walks the tiles blockIdx.x, + gridDim.x, ..., so the producer
//     fetches the next tile's slices while the consumers store this one; tiles go in groups of
//     WT_GROUP_M tile rows, column by column within a group, so that blocks running together
//     share A's rows and B's columns in L2.
// A stage is one K-slice of 32 floats (a 128-byte row, the swizzle's span): the A tile (WT_BM rows)
// and the B tile (WT_BN rows of B^T), each 1024-byte aligned, since the swizzle acts on address
// bits 4-9. Consumers keep one slice's wgmma in flight and release the stage before it.
//
// B stored the other way (-DWT_B_N_MAJOR=1, `a @ b`: B is K x N, N-contiguous). TF32 wgmma reads
// shared memory K-major only, so the kernel computes C^T = B^T A^T instead, each consumer's 64 rows
// of B^T as wgmma's register operand, which it loads from the staged slice in whatever layout TMA
// left it: A's tile (WT_BN rows of C) takes B^T's place in the descriptors, a C tile is WT_BN rows
// by WT_BM columns, and the store writes the transposed accumulators. No transpose of B runs first.
// A consumer holds two register operands and alternates: the next slice's loads into one while the
// group of this slice, which reads the other, runs.
//
// The ablation (experiments/tma_ablation.py), each switch taking one feature away: -DWT_TMA=0 has
// the producer warpgroup's 128 threads stage each slice by cp.async into the same swizzled layout,
// as wgmma.cu's threads do (the kernel then also takes A's and B^T's pointers and batch strides;
// each producer thread arrives on the full barrier when its copies land, and a consumer fences
// the generic proxy's writes before its wgmma reads them); -DWT_CONSUMERS=1 has one consumer
// warpgroup and 64-row tiles (two consumers' 256 accumulators would not fit one thread); the
// launch's `blocks` equal to its tiles gives one tile a block (no persistence). K-major only.
//
// Debugging: -DWT_STAGES=1 runs one stage (copy, multiply, release, strictly in turn), the launch
// may have one block (every tile in order) or compute only the first `tiles` tiles, and a wait that
// lasts WT_WATCHDOG_NS prints the barrier it waits on and traps instead of hanging the GPU.
// Launch (matmul_launchers.matmul_tf32_wgmma_tma): block (WT_THREADS, 1, 1), grid (blocks, 1, 1), dynamic
// shared memory WT_SMEM_BYTES; map_a, map_b are 3-D tensor maps (K, rows, matrices) of A and B^T
// with box (WT_BK, WT_BM) and (WT_BK, WT_BN), 128-byte swizzle (N-major: map_a has box (WT_BK, WT_BN)
// and map_b is (N, K, matrices) of B, box (32, WT_BK)); an operand of one matrix is shared
// by the batch (batches_x = 1). Needs K % 4 == 0 and 16-byte aligned operands (TMA's rules).
#include "cp_async.cuh"
#include "wgmma_tf32.cuh"

#ifndef WT_TMA  // 1: the copy engine stages the tiles; 0: the producer's threads (the ablation)
#define WT_TMA 1
#endif
#ifndef WT_CONSUMERS  // consumer warpgroups, 64 rows of the tile each: 2, or 1 (the ablation)
#define WT_CONSUMERS 2
#endif
#if WT_CONSUMERS != 1 && WT_CONSUMERS != 2
#error "WT_CONSUMERS is 1 or 2"
#endif
#define WT_BM (64 * WT_CONSUMERS)
#ifndef WT_BN  // 256, or 128 (half the accumulators; -DWT_BN=128)
#define WT_BN 256
#endif
#if WT_BN != 128 && WT_BN != 256
#error "WT_BN is 128 or 256"
#endif
#ifndef WT_STAGES  // 4 x 48 KB with 128 x 256 tiles; 1 for debugging
#define WT_STAGES 4
#endif
#ifndef WT_GROUP_M
#define WT_GROUP_M 16  // faster than 8 in both raster probes (ch19_raster_probe*.json), by 0.6-3.6%
#endif
#ifndef WT_B_N_MAJOR
#define WT_B_N_MAJOR 0
#endif
#if WT_B_N_MAJOR && (!WT_TMA || WT_CONSUMERS != 2)
#error "the N-major build has two consumers and TMA copies (the ablation's switches are K-major only)"
#endif
#if WT_B_N_MAJOR  // the rows and columns of C one tile covers
#define WT_TILE_M WT_BN
#define WT_TILE_N WT_BM
#else
#define WT_TILE_M WT_BM
#define WT_TILE_N WT_BN
#endif
#define WT_BK 32
#define WT_BOX_BYTES (WT_BK * 128)  // N-major: one TMA box of B, WT_BK rows of K by 32 columns of N (128-byte rows)
#define WT_THREADS (128 + 128 * WT_CONSUMERS)  // a producer warpgroup and the consumer warpgroups
#define WT_MAX_THREADS 384  // the launch bounds of every build: one register cap at entry for setmaxnreg
#define WT_PRODUCER_REGS 40
#define WT_CONSUMER_REGS 232  // 128 x 40 + 256 x 232 <= 65536 registers
#define WT_A_BYTES (WT_BM * WT_BK * 4)
#define WT_STAGE_BYTES ((WT_BM + WT_BN) * WT_BK * 4)
#define WT_SMEM_BYTES (WT_STAGES * WT_STAGE_BYTES + 1024)  // + room to align to 1024 bytes
#define WT_IN_FLIGHT (WT_STAGES > 1)  // wgmma groups left running while the next stage is waited for
#define WT_WATCHDOG_NS 4000000000ull  // 4 s: no wait is legitimately that long
#if WT_TMA
#define WT_COPY_PARAMS
#else  // the operands the producer's threads read: A (M x K) and B^T (N x K), and their batch strides
#define WT_COPY_PARAMS , const float *a, const float *b, int stride_a, int stride_b
#endif

// A CUtensorMap as cuTensorMapEncodeTiled wrote it: 128 opaque bytes, 64-byte aligned.
struct __align__(64) TensorMap {
    unsigned long long opaque[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma and setmaxnreg exist only in sm_90a code

// --- mbarriers ---------------------------------------------------------------------------------

__device__ __forceinline__ void barrier_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}

__device__ __forceinline__ bool barrier_done(unsigned bar, unsigned parity) {
    unsigned done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    return done != 0;
}

__device__ __forceinline__ unsigned long long nanoseconds() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

// Wait until the phase of `bar` with this parity has completed. A fresh barrier is in phase 0, and
// the phase "before" it (parity 1) counts as completed: a producer waiting on empty[s] with parity
// 1 passes at once, as every stage starts empty.
__device__ __forceinline__ void barrier_wait(unsigned long long* bar, unsigned parity, const char* role, int stage) {
    const unsigned address = shared_address(bar);
    if (barrier_done(address, parity)) return;
    const unsigned long long start = nanoseconds();
    while (!barrier_done(address, parity)) {
        if (nanoseconds() - start > WT_WATCHDOG_NS) {
#ifdef WT_DEBUG  // printf is a call, across which ptxas serializes every wgmma (C7510): debug builds only
            printf("matmul_tf32_wgmma_tma: block %d thread %d waited 4 s on %s[%d] for parity %u\n", blockIdx.x,
                   threadIdx.x, role, stage, parity);
#endif
            __trap();
        }
    }
}

// One arrival; and the producer's: one arrival that also expects `bytes` from the copy engine.
__device__ __forceinline__ void barrier_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

__device__ __forceinline__ void barrier_expect_bytes(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
                 : "memory");
}

// --- TMA -------------------------------------------------------------------------------------------

// Copy the box at (k, row, matrix) of `map` into `tile`; its bytes complete a transaction on `bar`.
__device__ __forceinline__ void tma_load(void* tile, const TensorMap* map, unsigned long long* bar, int k, int row,
                                         int matrix) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(shared_address(tile)),
        "l"(map), "r"(k), "r"(row), "r"(matrix), "r"(shared_address(bar))
        : "memory");
}

#if !WT_TMA
// Stage the R x 32 slice at (r0, k0) of a K-contiguous `rows` x K operand by the producer
// warpgroup's 128 threads, swizzled as TMA's 128-byte swizzle leaves it (wgmma.cu's layout): thread
// t copies quad t % 8 of rows t / 8, t / 8 + 16, ..., whose swizzled place is the same in each.
template <int R>
__device__ __forceinline__ void copy_rows(unsigned char* tile, const float* g, int rows, int K, int r0, int k0) {
    const int r = threadIdx.x / 8, j = threadIdx.x % 8, k = k0 + 4 * j;
    unsigned char* const dst = tile + r * 128 + ((j ^ (r % 8)) << 4);
    const float* const src = g + (long long)(r0 + r) * K + k;
#pragma unroll 1  // a loop, not R / 16 copies unrolled: the producer keeps 40 registers
    for (int i = 0; i < R / 16; ++i) {
        const bool inside = r0 + r + 16 * i < rows && k < K;
        cp_async16(dst + i * 16 * 128, inside ? src + (long long)16 * i * K : g, inside ? 16 : 0);
    }
}

// One arrival on `bar` once this thread's copies so far have landed (the count of `bar` includes it).
__device__ __forceinline__ void copies_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
#endif

// --- the schedule ------------------------------------------------------------------------------

struct Tile {
    int matrix, m, n;  // which product of the batch, tile row, tile column
};

// Tile t of the raster: matrix by matrix; within one, groups of WT_GROUP_M tile rows, each group
// walked column by column, so that consecutive tiles (blocks running at once) share operand tiles.
__device__ __forceinline__ Tile tile_at(int t, int tiles_m, int tiles_n) {
    const int matrix = t / (tiles_m * tiles_n);
    t -= matrix * tiles_m * tiles_n;
    const int first_m = t / (WT_GROUP_M * tiles_n) * WT_GROUP_M;
    const int rows = min(tiles_m - first_m, WT_GROUP_M);
    const int within = t % (WT_GROUP_M * tiles_n);
    return {matrix, first_m + within % rows, within / rows};
}

// Rows 64 * consumer .. + 63 of the tile, from this thread's accumulators: warp w of the warpgroup
// holds rows 16w..16w+15; lane (g, t) holds, for every 8 columns n8, columns n8 + 2t and n8 + 2t + 1
// of rows g and g + 8: d[4 * (n8 / 8) + 2h + p].
__device__ __forceinline__ void store_tile(float* c, const float (&d)[WT_BN / 2], int M, int N, int row0, int col0) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const bool pairs = (N & 1) == 0 && (reinterpret_cast<unsigned long long>(c) & 7ull) == 0;
#pragma unroll
    for (int n8 = 0; n8 < WT_BN / 8; ++n8) {
        const int col = col0 + 8 * n8 + 2 * t;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row0 + 16 * warp + g + 8 * h;
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
}

// N-major: this thread's accumulators hold C^T (rows: C's columns col0 + 16 w + g + 8 h; columns:
// C's rows row0 + 8 n8 + 2 t + p); each store of a warp writes four 32-byte runs of C's rows.
__device__ __forceinline__ void store_tile_transposed(float* c, const float (&d)[WT_BN / 2], int M, int N, int row0,
                                                      int col0) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n8 = 0; n8 < WT_BN / 8; ++n8) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = col0 + 16 * warp + g + 8 * h;
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                const int r = row0 + 8 * n8 + 2 * t + p;
                if (r < M && col < N) c[(long long)r * N + col] = d[4 * n8 + 2 * h + p];
            }
        }
    }
}

// N-major: this thread's register operand for one staged slice of B (WT_BM / 32 boxes of 32 k by
// 32 n, as TMA's 128-byte swizzle left them: 16-byte chunk j of row k lies at chunk j ^ (k % 8)),
// rows 64 * consumer .. + 63 of B^T: a[4 kk + 2 j + h] = B^T(16 w + g + 8 h, 8 kk + t + 4 j).
__device__ __forceinline__ void load_operand(unsigned (&a)[16], const unsigned char* boxes, int consumer) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const unsigned char* box = boxes + (2 * consumer + warp / 2) * WT_BOX_BYTES;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int n = 16 * (warp % 2) + g + 8 * h, k = 8 * kk + t + 4 * j;
                a[4 * kk + 2 * j + h] =
                    *reinterpret_cast<const unsigned*>(box + k * 128 + (((n >> 2) ^ (k & 7)) << 4) + (n & 3) * 4);
            }
        }
    }
}

#endif

extern "C" __global__ void __launch_bounds__(WT_MAX_THREADS, 1)
    matmul_tf32_wgmma_tma(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, float* c,
                          int M, int N, int K, int batches_a, int batches_b, int tiles WT_COPY_PARAMS) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(16) unsigned char wt_smem[];
    __shared__ __align__(8) unsigned long long full[WT_STAGES], empty[WT_STAGES];
    unsigned char* smem = wt_smem + ((1024 - (__cvta_generic_to_shared(wt_smem) & 1023)) & 1023);
    auto tile_a = [&](int stage) { return smem + stage * WT_STAGE_BYTES; };
    auto tile_b = [&](int stage) { return smem + stage * WT_STAGE_BYTES + WT_A_BYTES; };
    const int tiles_m = (M + WT_TILE_M - 1) / WT_TILE_M, tiles_n = (N + WT_TILE_N - 1) / WT_TILE_N;
    const int slices = (K + WT_BK - 1) / WT_BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < WT_STAGES; ++s) {
            barrier_init(&full[s], WT_TMA ? 1 : 128);  // the producer's arrival and the copy's bytes; or each copier's
            barrier_init(&empty[s], WT_CONSUMERS);     // one arrival per consumer warpgroup
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();

    if (threadIdx.x < 128) {  // the producer warpgroup; one thread issues every copy (TMA), or all copy
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WT_PRODUCER_REGS));
        if (!WT_TMA || threadIdx.x == 0) {
#if WT_TMA
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map_a) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(&map_b) : "memory");
#endif
            int stage = 0;
            unsigned phase = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const Tile tile = tile_at(t, tiles_m, tiles_n);
                for (int slice = 0; slice < slices; ++slice) {
                    barrier_wait(&empty[stage], phase ^ 1, "empty", stage);
                    const int matrix_a = min(tile.matrix, batches_a - 1), matrix_b = min(tile.matrix, batches_b - 1);
#if !WT_TMA
                    copy_rows<WT_BM>(tile_a(stage), a + (long long)matrix_a * stride_a, M, K, tile.m * WT_BM,
                                     slice * WT_BK);
                    copy_rows<WT_BN>(tile_b(stage), b + (long long)matrix_b * stride_b, N, K, tile.n * WT_BN,
                                     slice * WT_BK);
                    copies_arrive(&full[stage]);
#else
                    barrier_expect_bytes(&full[stage], WT_STAGE_BYTES);  // whole boxes, zero-filled ones too
#endif
#if !WT_TMA
#elif WT_B_N_MAJOR  // A's rows where B^T's were; B's 32-column boxes where A's rows were
                    tma_load(tile_b(stage), &map_a, &full[stage], slice * WT_BK, tile.m * WT_TILE_M, matrix_a);
#pragma unroll
                    for (int box = 0; box < WT_BM / 32; ++box)
                        tma_load(tile_a(stage) + box * WT_BOX_BYTES, &map_b, &full[stage],
                                 tile.n * WT_TILE_N + 32 * box, slice * WT_BK, matrix_b);
#else
                    tma_load(tile_a(stage), &map_a, &full[stage], slice * WT_BK, tile.m * WT_BM, matrix_a);
                    tma_load(tile_b(stage), &map_b, &full[stage], slice * WT_BK, tile.n * WT_BN, matrix_b);
#endif
                    if (++stage == WT_STAGES) stage = 0, phase ^= 1;
                }
            }
        }
    } else {  // a consumer warpgroup: 64 rows of every tile
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WT_CONSUMER_REGS));
        const int consumer = threadIdx.x / 128 - 1;
        const bool signals = threadIdx.x % 128 == 0;  // the thread that arrives for its warpgroup
        int stage = 0;
        unsigned phase = 0;
        float d[WT_BN / 2];
#if WT_B_N_MAJOR
        unsigned operand[2][16];  // two slices' register operands: one read by a running group, one loading
#endif
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const Tile tile = tile_at(t, tiles_m, tiles_n);
#pragma unroll
            for (int i = 0; i < WT_BN / 2; ++i) d[i] = 0.0f;
#if WT_B_N_MAJOR
            // Slice i's register operand is operand[i % 2]: the next slice's loads into the other
            // registers while this slice's group runs, once the group that read them is done.
            // (Loading registers a running group reads makes ptxas serialize every wgmma, C7513.)
            auto take = [&](unsigned(&registers)[16]) {  // wait for the next stage, load its operand
                barrier_wait(&full[stage], phase, "full", stage);
                load_operand(registers, tile_a(stage), consumer);
                const int taken = stage;
                if (++stage == WT_STAGES) stage = 0, phase ^= 1;
                return taken;
            };
            int current = slices > 0 ? take(operand[0]) : 0, previous = 0;
            for (int slice = 0; slice < slices; slice += 2) {
#pragma unroll
                for (int i = 0; i < 2; ++i) {  // unrolled, so that each slice's registers are fixed
                    if (slice + i == slices) break;
                    wgmma_slice(d, operand[i], tile_b(current));
                    wgmma_wait<WT_IN_FLIGHT>(d);  // the group before, which read operand[i ^ 1], is done
                    if (!WT_IN_FLIGHT) {
                        if (signals) barrier_arrive(&empty[current]);  // read: the producer may refill it
                    } else if (slice + i > 0 && signals) {
                        barrier_arrive(&empty[previous]);  // the slice before has been read
                    }
                    previous = current;
                    if (slice + i + 1 < slices) current = take(operand[i ^ 1]);
                }
            }
            wgmma_wait<0>(d);
            if (WT_IN_FLIGHT && slices > 0 && signals) barrier_arrive(&empty[previous]);
#else
            int previous = 0;  // the stage whose wgmma may still run
            for (int slice = 0; slice < slices; ++slice) {
                barrier_wait(&full[stage], phase, "full", stage);
#if !WT_TMA  // the producer's threads wrote the slice through the generic proxy; wgmma reads through the async one
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
                wgmma_slice(d, tile_a(stage) + consumer * 64 * 128, tile_b(stage));  // this warpgroup's 64 rows of A
                wgmma_wait<WT_IN_FLIGHT>(d);
                if (!WT_IN_FLIGHT) {
                    if (signals) barrier_arrive(&empty[stage]);  // read: the producer may refill it
                } else if (slice > 0 && signals) {
                    barrier_arrive(&empty[previous]);  // the slice before has been read
                }
                previous = stage;
                if (++stage == WT_STAGES) stage = 0, phase ^= 1;
            }
            wgmma_wait<0>(d);
            if (WT_IN_FLIGHT && slices > 0 && signals) barrier_arrive(&empty[previous]);
#endif
            float* out = c + (long long)tile.matrix * M * N;
#if WT_B_N_MAJOR
            store_tile_transposed(out, d, M, N, tile.m * WT_TILE_M, tile.n * WT_TILE_N + 64 * consumer);
#else
            store_tile(out, d, M, N, tile.m * WT_BM + 64 * consumer, tile.n * WT_BN);
#endif
        }
    }
#else
    __trap();  // built for a GPU without wgmma: matmul_launchers.matmul_tf32_wgmma_tma refuses it first
#endif
}
