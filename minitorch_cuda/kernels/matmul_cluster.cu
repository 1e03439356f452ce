// matmul_cluster.cu: stage 9's split-K in one launch on Hopper (compute capability 9.0),
// the K-slices summed in distributed shared memory.
//   matmul_cluster_splitkS_T   C = A B for the products the exact twin T takes
//                              (launchers.exact_fit), K split S ways; launch: block (NT, 1, 1),
//                              grid (N / BN, M / BM, S), clusters of (1, 1, S) blocks
//
// A split-K product in two launches writes S slices of C to global scratch and reads them all
// back in a reduction (matmul_splitk_reduce). Here the S blocks of one output tile form a
// thread block cluster: they run at once, on SMs of one GPC, and each can write the others'
// shared memory. Every block multiplies its K-slice (regtiled_body, as the exact twin); then
// rank r sums and writes rows [r TM / S, (r + 1) TM / S) of every thread's register tile: each
// rank stores the rows that belong to the others straight into their shared memory, in the
// slot of its slice, the cluster synchronizes, and each rank adds its rows' S slices. (A first
// synchronization, at the start, makes sure every block of the cluster runs before any writes to it.)
// The additions are the reduction's, in its order (0 + slice 0 + slice 1 + ...), so the bits
// are the two-launch product's; nothing goes through global memory but C.
// A slot holds a rank's rows by thread: value (i, j) of thread t at slot[s][i * TN + j][t], so
// a warp's stores, local or remote, and its loads are 32 consecutive words.
// The emulator refuses this file (cooperative groups); stage 9 tunes it only on a GPU.
#include <cooperative_groups.h>

#include "matmul_regtiled.cuh"

namespace cg = cooperative_groups;

template <int NT, int TM, int TN, int S>
struct ClusterSum {
    static_assert(TM % S == 0, "each rank sums whole rows of the register tile");
    static constexpr bool kSumsInCluster = true;
    static constexpr int kRows = TM / S;  // register-tile rows i a rank sums and writes

    // Rank r of the cluster sums rows [r * kRows, (r + 1) * kRows) of every thread's register
    // tile. Each rank stores the rows the others sum straight into their shared memory, into the
    // slot of its own slice, the cluster synchronizes once, and each rank adds the S slices of its
    // rows in order 0, 1, ... (its own from registers). Returns the first row i this block writes.
    __device__ __forceinline__ int operator()(float (&acc)[TM][TN]) const {
        __shared__ float slot[S][kRows * TN][NT];  // slot[s]: slice s of this rank's rows
        cg::cluster_group cluster = cg::this_cluster();
        const int rank = (int)cluster.block_rank(), t = threadIdx.x;
#pragma unroll
        for (int q = 0; q < S; ++q) {
            if (q == rank) continue;
            float(*theirs)[kRows * TN][NT] = cluster.map_shared_rank(slot, q);
#pragma unroll
            for (int i = 0; i < kRows; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) theirs[rank][i * TN + j][t] = acc[q * kRows + i][j];
        }
        cluster.sync();  // every slice of this rank's rows has arrived; no rank touches another's after it
#pragma unroll
        for (int r = 0; r < S; ++r) {  // r == rank in one unrolled copy: registers indexed at compile time
            if (r != rank) continue;
#pragma unroll
            for (int i = 0; i < kRows; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    float sum = 0.0f;  // the reduction's order: 0 + slice 0 + slice 1 + ...
#pragma unroll
                    for (int s = 0; s < S; ++s) sum += s == r ? acc[r * kRows + i][j] : slot[s][i * TN + j][t];
                    acc[r * kRows + i][j] = sum;
                }
        }
        return rank * kRows;
    }
};

#define CLUSTER_SPLITK(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, S)                                       \
extern "C" __global__ void __cluster_dims__(1, 1, S) __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) \
NAME(float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb, int stride_a,     \
     int stride_b) {                                                                                  \
    cg::this_cluster().sync(); /* every block of the cluster running: its shared memory may be written */ \
    regtiled_body<BM, BN, BK, TM, TN, true, ClusterSum<(BM / TM) * (BN / TN), TM, TN, S>>(               \
        c, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0, nullptr, nullptr, S);               \
}

// kernel_table.CLUSTER_SPLITK_TILES: the register tile whose grid leaves SMs idle at 1024^3
// (128 blocks of 128 x 64 for 132 SMs) and whose tile of 128 threads x 64 values (32 KB) fits
// the static shared memory beside its stages.
CLUSTER_SPLITK(matmul_cluster_splitk2_128x64x8t128, 128, 64, 8, 8, 8, 2, 2)
CLUSTER_SPLITK(matmul_cluster_splitk4_128x64x8t128, 128, 64, 8, 8, 8, 2, 4)
