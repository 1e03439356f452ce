// layout.cu: copies that change the memory layout, every stage.
//   strided_copy   out (contiguous) = in viewed through up to 4 dims of shape/strides;
//                  makes transposed views contiguous (materialized transposes, stages 0-2)
//   transpose_2d   out[z] (C x R) = in[z] (R x C)^T through a shared tile, so that reads and
//                  writes are both coalesced (K-contiguous operands for the wgmma kernels)
extern "C" __global__ void strided_copy(float* out, const float* in, int n,
                                        int d1, int d2, int d3,
                                        int s0, int s1, int s2, int s3) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // Peel the flat output index into 4-D coordinates (d0 is implied by n).
    int rest = i;
    const int i3 = rest % d3; rest /= d3;
    const int i2 = rest % d2; rest /= d2;
    const int i1 = rest % d1; rest /= d1;
    const int i0 = rest;
    out[i] = in[(long long)i0 * s0 + (long long)i1 * s1 + (long long)i2 * s2 + (long long)i3 * s3];
}

// A 64 x 64 tile a block of (32, 8) threads, each thread 16 elements. The loops unroll at compile
// time, so a thread issues all 16 loads before its first store and an SM of 8 blocks has up to
// 128 KB of reads in flight: a copy is bound by its bytes in flight (chapter 15). The 32 x 32
// version before it looped to a runtime bound, one load a thread in flight (one ld.global in
// its PTX loop). in_stride is the distance between the matrices of a batch (grid.z of them);
// the output matrices are packed.
#define TR_TILE 64  // a multiple of 32: a warp moves 32 columns of a row
#define TR_ROWS 8  // blockDim.y
#define TR_EACH (TR_TILE / TR_ROWS)  // rows a thread moves per column
#define TR_SPANS (TR_TILE / 32)  // 32-column spans a thread moves per row
extern "C" __global__ void __launch_bounds__(32 * TR_ROWS)
    transpose_2d(float* out, const float* in, int R, int C, int in_stride) {
    __shared__ float tile[TR_TILE][TR_TILE + 1];  // + 1: a column of the tile lies in 32 different banks
    in += blockIdx.z * (long long)in_stride;
    out += blockIdx.z * (long long)R * C;
    const int r0 = blockIdx.y * TR_TILE, c0 = blockIdx.x * TR_TILE, x = threadIdx.x, y = threadIdx.y;
    float v[TR_SPANS][TR_EACH];
#pragma unroll
    for (int h = 0; h < TR_SPANS; ++h) {  // input rows r0 + y + 8 i, columns c0 + x + 32 h
#pragma unroll
        for (int i = 0; i < TR_EACH; ++i) {
            const int r = r0 + y + TR_ROWS * i, c = c0 + x + 32 * h;
            v[h][i] = r < R && c < C ? in[(long long)r * C + c] : 0.0f;
        }
    }
#pragma unroll
    for (int h = 0; h < TR_SPANS; ++h) {
#pragma unroll
        for (int i = 0; i < TR_EACH; ++i) tile[y + TR_ROWS * i][x + 32 * h] = v[h][i];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < TR_SPANS; ++h) {  // output rows c0 + y + 8 i, columns r0 + x + 32 h
#pragma unroll
        for (int i = 0; i < TR_EACH; ++i) {
            const int c = c0 + y + TR_ROWS * i, r = r0 + x + 32 * h;
            if (c < C && r < R) out[(long long)c * R + r] = tile[x + 32 * h][y + TR_ROWS * i];
        }
    }
}
