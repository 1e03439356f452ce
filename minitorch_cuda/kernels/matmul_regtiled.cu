// matmul_regtiled.cu: register-tiled SGEMM (stage 9), same parameters as matmul_tiled.
//   matmul_regtiled_BMxBNxBK[tNT]   BM x BN block tile, K-slices of BK, 64 to 256 threads,
//                              each thread TM x TN outputs in registers (see the header).
//   matmul_regtiled_splitk_T   the same over K slices, as matmul_pipelined_splitk_T: grid z =
//                              batch * k_splits; block z computes slice z % k_splits of matrix
//                              z / k_splits into partial + z * M * N; matmul_splitk_reduce
//                              (matmul_pipelined.cu) sums the slices in order 0, 1, ...
//                              T: the tiles whose grids leave SMs idle at 1024^3 (128x128x8:
//                              64 blocks for 132 SMs), kernel_table.REGTILED_SPLITK_TILES
//   matmul_regtiled[_splitk]_exact_T   the same for products the tiles divide exactly, with
//                              unchecked loads (EXACT in the header; the same bits), for T in
//                              kernel_table.REGTILED_EXACT_TILES
// MIN_BLOCKS asks ptxas to leave room for that many resident blocks per SM.
// The autotuner (cuda/autotune.py) times the variants on the first call of each
// (M, N, K, flags, batch) and keeps the fastest. Launch: block (NT, 1, 1),
// grid (ceil(N / BN), ceil(M / BM), batch).
//   variant          BM   BN  BK  TM  TN  threads
//   128x128x8       128  128   8   8   8  256
//   128x64x8        128   64   8   8   4  256
//   64x64x8          64   64   8   4   4  256
//   64x64x16         64   64  16   4   4  256
//   32x32x8          32   32   8   4   4   64   (small and skinny products: more blocks)
//   128x64x8t128    128   64   8   8   8  128   (cuBLAS's FP32 tiles on the H200, at
//   256x128x8       256  128   8  16   8  256    1024^3 and 4096^3: ncu_ch14_16.json)
#include "matmul_regtiled.cuh"

#define REGTILED_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, EXACT)                               \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) NAME(          \
    float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb,             \
    int stride_a, int stride_b) {                                                            \
    regtiled_body<BM, BN, BK, TM, TN, EXACT>(c, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0); \
}
#define REGTILED(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS) REGTILED_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, false)

REGTILED(matmul_regtiled_128x128x8, 128, 128, 8, 8, 8, 2)
REGTILED(matmul_regtiled_128x64x8, 128, 64, 8, 8, 4, 2)
REGTILED(matmul_regtiled_64x64x8, 64, 64, 8, 4, 4, 2)
REGTILED(matmul_regtiled_64x64x16, 64, 64, 16, 4, 4, 2)
REGTILED(matmul_regtiled_32x32x8, 32, 32, 8, 4, 4, 8)
REGTILED(matmul_regtiled_128x64x8t128, 128, 64, 8, 8, 8, 2)
REGTILED(matmul_regtiled_256x128x8, 256, 128, 8, 16, 8, 1)

#define REGTILED_SPLITK_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, EXACT)                            \
extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS) NAME(              \
    float* partial, const float* a, const float* b, int M, int N, int K, int ta, int tb,           \
    int stride_a, int stride_b, int k_splits) {                                                  \
    regtiled_body<BM, BN, BK, TM, TN, EXACT>(partial, a, b, nullptr, M, N, K, ta, tb, stride_a, stride_b, 0, \
                                             nullptr, nullptr, k_splits);                        \
}
#define REGTILED_SPLITK(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS) \
    REGTILED_SPLITK_AS(NAME, BM, BN, BK, TM, TN, MIN_BLOCKS, false)

REGTILED_SPLITK(matmul_regtiled_splitk_128x128x8, 128, 128, 8, 8, 8, 2)
REGTILED_SPLITK(matmul_regtiled_splitk_128x64x8t128, 128, 64, 8, 8, 8, 2)
REGTILED_SPLITK(matmul_regtiled_splitk_256x128x8, 256, 128, 8, 16, 8, 1)

// The exact twins (EXACT in matmul_regtiled.cuh) of the tiles stage 9 keeps for the large
// products, kernel_table.REGTILED_EXACT_TILES; the launcher takes them where exact_fit holds.
REGTILED_AS(matmul_regtiled_exact_128x128x8, 128, 128, 8, 8, 8, 2, true)
REGTILED_AS(matmul_regtiled_exact_128x64x8t128, 128, 64, 8, 8, 8, 2, true)
REGTILED_AS(matmul_regtiled_exact_256x128x8, 256, 128, 8, 16, 8, 1, true)
REGTILED_SPLITK_AS(matmul_regtiled_splitk_exact_128x128x8, 128, 128, 8, 8, 8, 2, true)
REGTILED_SPLITK_AS(matmul_regtiled_splitk_exact_128x64x8t128, 128, 64, 8, 8, 8, 2, true)
REGTILED_SPLITK_AS(matmul_regtiled_splitk_exact_256x128x8, 256, 128, 8, 16, 8, 1, true)
