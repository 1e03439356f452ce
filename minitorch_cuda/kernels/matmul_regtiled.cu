// matmul_regtiled.cu: register-tiled SGEMM (stage 9), same parameters as matmul_tiled.
//   matmul_regtiled_BMxBNxBK[tNT]   BM x BN block tile, K-slices of BK, 64 to 256 threads,
//                              each thread TM x TN outputs in registers (see the header).
//   matmul_regtiled_splitk_T   the same over K slices, as matmul_pipelined_splitk_T: grid z =
//                              batch * k_splits; block z computes slice z % k_splits of matrix
//                              z / k_splits into partial + z * M * N; matmul_splitk_reduce
//                              (matmul_pipelined.cu) sums the slices in order 0, 1, ...
//                              T: the tiles with TWINS in matmul_tiles.cuh (their grids leave
//                              SMs idle at 1024^3: 128x128x8 is 64 blocks for 132 SMs)
//   matmul_regtiled[_splitk]_exact_T   the same for products the tiles divide exactly, with
//                              unchecked loads (EXACT in the header; the same bits), for the
//                              same T
//   matmul_regtiled_edge[_splitk]_T   for products whose K the tile divides but not M or N
//                              (3000^3, 1000^3): the exact body in the blocks whose tile lies
//                              inside C, the plain one in the last row and column of blocks (the
//                              same bits); for the T with TWINS 2 (the split one: TWINS 3)
// The tiles are matmul_tiles.cuh's REGTILED_TILES, one line each. The autotuner
// (cuda/matmul_choice.py) times the variants on the first call of each (M, N, K, flags, batch)
// and keeps the fastest. Launch: block ((BM / TM) (BN / TN), 1, 1), grid (ceil(N / BN),
// ceil(M / BM), batch).
#include "matmul_regtiled.cuh"
#include "matmul_tiles.cuh"

#define REGTILED_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, EXACT)                               \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) NAME(          \
    float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb,             \
    int stride_a, int stride_b) {                                                            \
    regtiled_body<BM, BN, BK, TM, TN, EXACT>(c, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0); \
}

#define REGTILED_SPLITK_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, EXACT)                            \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) NAME(              \
    float* partial, const float* a, const float* b, int M, int N, int K, int ta, int tb,           \
    int stride_a, int stride_b, int k_splits) {                                                  \
    regtiled_body<BM, BN, BK, TM, TN, EXACT>(partial, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0, \
                                             nullptr, nullptr, k_splits);                        \
}

// A block takes the exact body where its tile lies inside C, else the plain one: each body has its
// own shared memory, and ptxas sees the exact one as in its twin. The launcher's promise
// (matmul_launchers.edge_fit): the exact twin's, but for M and N.
#define REGTILED_EDGE_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS)                                      \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) NAME(               \
    float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb,                  \
    int stride_a, int stride_b) {                                                                 \
    if ((blockIdx.y + 1) * BM <= M && (blockIdx.x + 1) * BN <= N)                                  \
        regtiled_body<BM, BN, BK, TM, TN, true>(c, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0); \
    else                                                                                          \
        regtiled_body<BM, BN, BK, TM, TN, false>(c, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0); \
}

// The edge twin of the split-K kernel: the same choice per block, K-slice z % k_splits of the
// product into partial + z * M * N as matmul_regtiled_splitk_T (1000^3: 8 x 16 tiles of 128 x 64,
// one wave of the SMs unsplit, its edge blocks the slowest).
#define REGTILED_EDGE_SPLITK_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS)                               \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) NAME(               \
    float* partial, const float* a, const float* b, int M, int N, int K, int ta, int tb,            \
    int stride_a, int stride_b, int k_splits) {                                                   \
    if ((blockIdx.y + 1) * BM <= M && (blockIdx.x + 1) * BN <= N)                                  \
        regtiled_body<BM, BN, BK, TM, TN, true>(partial, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0, \
                                                nullptr, nullptr, k_splits);                      \
    else                                                                                          \
        regtiled_body<BM, BN, BK, TM, TN, false>(partial, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0, \
                                                 nullptr, nullptr, k_splits);                     \
}

// Every tile's kernel; for the tiles with TWINS, the split-K twin and the exact twins (EXACT in
// matmul_regtiled.cuh) of the tiles stage 9 keeps for the large products: the launcher takes them
// where exact_fit holds; with TWINS 2 the edge twin, which the tuner times where edge_fit holds
// (with TWINS 3 its split-K twin too).
#define REGTILED(T, BM, BN, BK, TM, TN, MIN_BLOCKS, TWINS)                                              \
    REGTILED_AS(matmul_regtiled_##T, BM, BN, BK, TM, TN, MIN_BLOCKS, false)                             \
    TILE_IF(TWINS, REGTILED_SPLITK_AS(matmul_regtiled_splitk_##T, BM, BN, BK, TM, TN, MIN_BLOCKS, false) \
                   REGTILED_AS(matmul_regtiled_exact_##T, BM, BN, BK, TM, TN, MIN_BLOCKS, true)           \
                   REGTILED_SPLITK_AS(matmul_regtiled_splitk_exact_##T, BM, BN, BK, TM, TN, MIN_BLOCKS, true)) \
    EDGE_IF(TWINS, REGTILED_EDGE_AS(matmul_regtiled_edge_##T, BM, BN, BK, TM, TN, MIN_BLOCKS))             \
    EDGE_SPLITK_IF(TWINS, REGTILED_EDGE_SPLITK_AS(matmul_regtiled_edge_splitk_##T, BM, BN, BK, TM, TN, MIN_BLOCKS))

REGTILED_TILES(REGTILED)
