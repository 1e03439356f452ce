// matmul.cu: C (M x N) = op(A) (M x K) * op(B) (K x N), row-major, float32.
// op(X) is X or its transpose (ta, tb): a transposed operand is stored K x M (N x K).
//   matmul_naive       stages 0-2  one thread per output, no flags (transposes are
//                                  materialized first), one launch per 2-D matrix
//   matmul_transposed  stages 3-4  the same with the flags read in the index math
//   matmul_batched     stage 5     the same over a 3-D grid: blockIdx.z picks the
//                                  matrix, so a whole batch is one launch
//   matmul_tiled       stages 6+   32 x 32 tiles of A and B staged in shared memory
// Batched kernels take the element stride between matrices of A and B; a stride
// of 0 broadcasts one matrix over the batch. C's stride is always M * N.

extern "C" __global__ void matmul_naive(float* c, const float* a, const float* b,
                                        int M, int N, int K) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += a[row * K + k] * b[k * N + col];
    c[row * N + col] = acc;
}

__device__ __forceinline__ float load_a(const float* a, int row, int k, int M, int K, int ta) {
    return ta ? a[(long long)k * M + row] : a[(long long)row * K + k];
}

__device__ __forceinline__ float load_b(const float* b, int k, int col, int N, int K, int tb) {
    return tb ? b[(long long)col * K + k] : b[(long long)k * N + col];
}

extern "C" __global__ void matmul_transposed(float* c, const float* a, const float* b,
                                             int M, int N, int K, int ta, int tb) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += load_a(a, row, k, M, K, ta) * load_b(b, k, col, N, K, tb);
    c[(long long)row * N + col] = acc;
}

extern "C" __global__ void matmul_batched(float* c, const float* a, const float* b,
                                          int M, int N, int K, int ta, int tb,
                                          int stride_a, int stride_b) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    const int z = blockIdx.z;
    a += (long long)z * stride_a;
    b += (long long)z * stride_b;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += load_a(a, row, k, M, K, ta) * load_b(b, k, col, N, K, tb);
    c[(long long)z * M * N + (long long)row * N + col] = acc;
}

#define TILE 32

// Each block computes one TILE x TILE tile of C. Per step along K it stages a tile
// of A and a tile of B in shared memory (zero-padded at the edges, so the inner
// loop needs no bounds checks), then every thread does TILE multiply-adds from
// shared memory: each loaded value is reused TILE times instead of once.
extern "C" __global__ void matmul_tiled(float* c, const float* a, const float* b,
                                        int M, int N, int K, int ta, int tb,
                                        int stride_a, int stride_b) {
    __shared__ float tile_a[TILE][TILE];
    __shared__ float tile_b[TILE][TILE + 1];  // +1: no bank conflicts when tb reads columns
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    const int z = blockIdx.z;
    a += (long long)z * stride_a;
    b += (long long)z * stride_b;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        const int ka = k0 + tx, kb = k0 + ty;
        tile_a[ty][tx] = (row < M && ka < K) ? load_a(a, row, ka, M, K, ta) : 0.0f;
        tile_b[ty][tx] = (kb < K && col < N) ? load_b(b, kb, col, N, K, tb) : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += tile_a[ty][k] * tile_b[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) c[(long long)z * M * N + (long long)row * N + col] = acc;
}
