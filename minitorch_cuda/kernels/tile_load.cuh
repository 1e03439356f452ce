// tile_load.cuh: moving a tile of a row-major float matrix from global to shared memory.
// Used by matmul_regtiled.cuh (stage 9-10) and mma.cu (stage 12).
//
// A tile of R x C elements at (r0, c0) of an H x W row-major matrix is cut into
// quads: 4 neighbours along the contiguous (column) axis. Thread tid owns quads
// tid, tid + NT, ... and stages them in registers (load), so that the global
// loads of the next tile overlap the math on the current one; store() then writes
// them to shared memory as is (sm[r][c]) or transposed (sm[c][r]).
// vec: W % 4 == 0 and the matrix starts 16-byte aligned, so a quad is one float4
// load that is either wholly inside the matrix or wholly outside (zeros);
// otherwise four scalar loads, each checked. Out-of-range elements are zeros, so
// the math needs no bounds checks.
#pragma once
#include <cuda_bf16.h>

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

__device__ __forceinline__ void store4(float* dst, float4 v) { *reinterpret_cast<float4*>(dst) = v; }

__device__ __forceinline__ void store4(__nv_bfloat16* dst, float4 v) {
    reinterpret_cast<__nv_bfloat162*>(dst)[0] = __floats2bfloat162_rn(v.x, v.y);
    reinterpret_cast<__nv_bfloat162*>(dst)[1] = __floats2bfloat162_rn(v.z, v.w);
}

// Four floats of an output row, from col on, in a row N wide: one 16-byte store where `vec`
// says the row and N allow it, else each element that lies inside the row.
__device__ __forceinline__ void store_row4(float* row, int col, int N, const float* v, bool vec) {
    if (vec) {
        store4(row + col, make_float4(v[0], v[1], v[2], v[3]));
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
        if (col + e < N) row[col + e] = v[e];
}

__device__ __forceinline__ void store1(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void store1(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16(v); }

template <int R, int C, int NT>
struct TileLoader {
    static_assert(C % 4 == 0, "quads run along the columns");
    static constexpr int Q = R * C / 4;            // quads in the tile
    static constexpr int L = (Q + NT - 1) / NT;    // quads per thread

    __device__ static __forceinline__ void load(float (&reg)[L][4], const float* src, int H, int W,
                                                int r0, int c0, bool vec, int tid) {
#pragma unroll
        for (int i = 0; i < L; ++i) {
            const int q = tid + i * NT;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (Q % NT == 0 || q < Q) {
                const int r = r0 + q / (C / 4);
                const int c = c0 + (q % (C / 4)) * 4;
                if (r < H) {
                    const float* p = src + (long long)r * W + c;
                    if (vec) {
                        if (c < W) v = *reinterpret_cast<const float4*>(p);
                    } else {
                        if (c < W) v.x = p[0];
                        if (c + 1 < W) v.y = p[1];
                        if (c + 2 < W) v.z = p[2];
                        if (c + 3 < W) v.w = p[3];
                    }
                }
            }
            reg[i][0] = v.x;
            reg[i][1] = v.y;
            reg[i][2] = v.z;
            reg[i][3] = v.w;
        }
    }

    // sm has row length ld (elements); as is: sm[r * ld + c], transposed: sm[c * ld + r].
    // Conv rounds each value on the way in (identity, TF32).
    template <class T, class Conv>
    __device__ static __forceinline__ void store(T* sm, int ld, bool transposed, const float (&reg)[L][4], int tid,
                                                 Conv conv) {
#pragma unroll
        for (int i = 0; i < L; ++i) {
            const int q = tid + i * NT;
            if (Q % NT == 0 || q < Q) {
                const int r = q / (C / 4);
                const int c = (q % (C / 4)) * 4;
                if (transposed) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) store1(sm + (c + e) * ld + r, conv(reg[i][e]));
                } else {
                    store4(sm + r * ld + c, make_float4(conv(reg[i][0]), conv(reg[i][1]), conv(reg[i][2]),
                                                       conv(reg[i][3])));
                }
            }
        }
    }
};

struct Identity {
    __device__ __forceinline__ float operator()(float x) const { return x; }
};
