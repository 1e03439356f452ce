// matmul_cluster.cu: stage 9's split-K in one launch on Hopper (compute capability 9.0),
// the K-slices summed in distributed shared memory.
//   matmul_cluster_splitkS_T   C = A B for the products the exact twin T takes
//                              (matmul_launchers.exact_fit), K split S ways; launch: block (NT, 1, 1),
//                              grid (N / BN, M / BM, S), clusters of (1, 1, S) blocks
//
// A split-K product in two launches writes S slices of C to global scratch and reads them all
// back in a reduction (matmul_splitk_reduce). Here the S blocks of one output tile form a
// thread block cluster: they run at once, on SMs of one GPC, and each can read the others'
// shared memory. Every block multiplies its K-slice (regtiled_body, as the exact twin); the
// blocks of rank 1.. then store their register tiles in their own shared memory, the cluster
// synchronizes, and the block of rank 0 adds the other ranks' tiles to its own, rank by rank,
// and writes C. Its additions are the reduction's, in its order (0 + slice 0 + slice 1 + ...),
// so the bits are the two-launch product's; nothing goes through global memory but C.
// The tile is stored by thread: value (i, j) of thread t at tile[i * TN + j][t], so a warp's
// stores and the remote reads of rank 0's same thread t are 32 consecutive words.
// Stage 9 tunes it only on a Hopper GPU; the CPU emulator runs it too, cluster by cluster.
#include <cooperative_groups.h>

#include "matmul_regtiled.cuh"

namespace cg = cooperative_groups;

template <int NT, int TM, int TN>
struct ClusterSum {
    static constexpr bool kSumsInCluster = true;

    __device__ __forceinline__ bool operator()(float (&acc)[TM][TN]) const {
        __shared__ float tile[TM * TN][NT];
        cg::cluster_group cluster = cg::this_cluster();
        const unsigned int rank = cluster.block_rank(), t = threadIdx.x;
        if (rank != 0) {
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) tile[i * TN + j][t] = acc[i][j];
        }
        cluster.sync();  // every rank's tile stored and visible to the cluster
        if (rank == 0) {
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f + acc[i][j];  // the reduction's first add
            for (unsigned int r = 1; r < cluster.num_blocks(); ++r) {
                const float* other = cluster.map_shared_rank(&tile[0][0], r);
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] += other[(i * TN + j) * NT + t];
            }
        }
        cluster.sync();  // a block's shared memory outlives the reads of it
        return rank == 0;
    }
};

#define CLUSTER_SPLITK(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, S)                                       \
extern "C" __global__ void __cluster_dims__(1, 1, S) __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) \
NAME(float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb, int stride_a,     \
     int stride_b) {                                                                                  \
    regtiled_body<BM, BN, BK, TM, TN, true, ClusterSum<(BM / TM) * (BN / TN), TM, TN>>(               \
        c, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0, nullptr, nullptr, S);               \
}

// kernel_table.CLUSTER_SPLITK_TILES: the register tile whose grid leaves SMs idle at 1024^3
// (128 blocks of 128 x 64 for 132 SMs) and whose tile of 128 threads x 64 values (32 KB) fits
// the static shared memory beside its stages.
CLUSTER_SPLITK(matmul_cluster_splitk2_128x64x8t128, 128, 64, 8, 8, 8, 2, 2)
CLUSTER_SPLITK(matmul_cluster_splitk4_128x64x8t128, 128, 64, 8, 8, 8, 2, 4)
