// layout.cu: copies that change the memory layout, every stage.
//   strided_copy   out (contiguous) = in viewed through up to 4 dims of shape/strides;
//                  makes transposed views contiguous (materialized transposes, stages 0-2)
//   transpose_2d   out[z] (C x R) = in[z] (R x C)^T through a shared tile, so that reads and
//                  writes are both coalesced (K-contiguous operands for wgmma.cu)
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

// Block (32, 8): a 32 x 32 tile, each thread four elements. in_stride is the distance between
// the matrices of a batch (grid.z of them); the output matrices are packed.
extern "C" __global__ void transpose_2d(float* out, const float* in, int R, int C, int in_stride) {
    __shared__ float tile[32][33];  // + 1: a column of the tile lies in 32 different banks
    in += blockIdx.z * (long long)in_stride;
    out += blockIdx.z * (long long)R * C;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32, x = threadIdx.x;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {  // input row r0 + i, along its columns
        if (r0 + i < R && c0 + x < C) tile[i][x] = in[(long long)(r0 + i) * C + c0 + x];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {  // output row c0 + i, along its columns
        if (c0 + i < C && r0 + x < R) out[(long long)(c0 + i) * R + r0 + x] = tile[x][i];
    }
}
