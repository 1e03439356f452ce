// matmul_tiles.cuh: the tile shapes of stage 9's SGEMM families, one line per tile. The kernel
// files expand each list into their kernels (X-macros); cuda/kernel_table.py reads the same lines
// for the launches. A new tile is one line here.
#pragma once

// Register tiles (regtiled_body, the register-tiled SGEMM): X(T, BM, BN, BK, TM, TN, MIN_BLOCKS, TWINS)
// makes matmul_regtiled_T (matmul_regtiled.cu), matmul_bias_act_T and matmul_grad_T (fused.cu).
// A block of (BM / TM) (BN / TN) threads computes a BM x BN tile of C over K-slices of BK, each
// thread TM x TN outputs in registers; MIN_BLOCKS asks ptxas to leave room for that many resident
// blocks per SM. TWINS 1 adds the split-K twin (matmul_regtiled_splitk_T) and the exact twins
// (matmul_regtiled_exact_T, matmul_regtiled_splitk_exact_T): the tiles whose grids leave SMs idle
// at 1024^3 on 132 SMs (128 x 128: 64 blocks, 128 x 64: 128, 256 x 128: 32). TWINS 2 adds the edge
// twin too (matmul_regtiled_edge_T: the exact body inside, the plain one on the edges, each with its
// own shared memory, which two of 256 x 128 x 8 would not fit); TWINS 3 its split-K twin too
// (matmul_regtiled_edge_splitk_T; 128 x 128 x 8's spills 4 bytes under its launch bounds). T is
// BMxBNxBK, with tNT where a second thread count shares the block tile.
#define REGTILED_TILES(X)                                                                           \
    X(128x128x8,    128, 128,  8,  8, 8, 2, 2)                                                      \
    X(128x64x8,     128,  64,  8,  8, 4, 2, 0)                                                      \
    X(64x64x8,       64,  64,  8,  4, 4, 2, 0)                                                      \
    X(64x64x16,      64,  64, 16,  4, 4, 2, 0)                                                      \
    X(32x32x8,       32,  32,  8,  4, 4, 8, 0) /* small and skinny products: more blocks */         \
    X(128x64x8t128, 128,  64,  8,  8, 8, 2, 3) /* cuBLAS's FP32 tiles on the H200 at 1024^3 */      \
    X(256x128x8,    256, 128,  8, 16, 8, 1, 1) /* and 4096^3 (ncu_ch14_16.json) */

// Pipelined tiles (matmul_pipelined.cu, cp.async into STAGES shared-memory stages):
// X(T, BM, BN, BK, WM, WN, TM, TN, STAGES, MIN_BLOCKS, BIAS_ACT) makes matmul_pipelined_T and
// matmul_pipelined_splitk_T, and with BIAS_ACT 1 matmul_pipelined_splitk_bias_act_T (the lean
// step's skinny forward products). A block of 32 (BM / WM) (BN / WN) threads: warps of WM x WN
// outputs, each thread TM x TN of them.
#define PIPELINED_TILES(X)                                                                          \
    X(128x128x16,   128, 128, 16, 64, 32, 8, 8, 2, 2, 0)                                            \
    X(128x128x16s3, 128, 128, 16, 64, 32, 8, 8, 3, 2, 0) /* 50 KB of dynamic shared memory */       \
    X(128x64x16,    128,  64, 16, 64, 32, 8, 8, 3, 3, 0) /* 128 blocks at 1024^3 */                \
    X(64x64x16,      64,  64, 16, 32, 32, 4, 8, 3, 4, 1) /* small and skinny products */           \
    X(32x32x16,      32,  32, 16, 32, 16, 4, 4, 3, 8, 1) /* outputs as narrow as MNIST's 10 */

// Expands its arguments where FLAG is 1 to 3, to nothing where it is 0: a list's optional kernels;
// EDGE_IF only where it is 2 or 3, EDGE_SPLITK_IF where it is 3 (REGTILED_TILES' edge twins).
#define TILE_IF(FLAG, ...) TILE_IF_##FLAG(__VA_ARGS__)
#define TILE_IF_0(...)
#define TILE_IF_1(...) __VA_ARGS__
#define TILE_IF_2(...) __VA_ARGS__
#define TILE_IF_3(...) __VA_ARGS__
#define EDGE_IF(FLAG, ...) EDGE_IF_##FLAG(__VA_ARGS__)
#define EDGE_IF_0(...)
#define EDGE_IF_1(...)
#define EDGE_IF_2(...) __VA_ARGS__
#define EDGE_IF_3(...) __VA_ARGS__
#define EDGE_SPLITK_IF(FLAG, ...) EDGE_SPLITK_IF_##FLAG(__VA_ARGS__)
#define EDGE_SPLITK_IF_0(...)
#define EDGE_SPLITK_IF_1(...)
#define EDGE_SPLITK_IF_2(...)
#define EDGE_SPLITK_IF_3(...) __VA_ARGS__
