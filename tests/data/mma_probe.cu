// mma_probe.cu: one warp per block runs one tensor-core instruction on its tile of the inputs,
// the same source on a GPU (.ci/mma_record.py records what it computes) and on the CPU emulator
// (tests/test_emulator_mma.py compares). Each lane moves its registers by the PTX ISA's layout
// (groupID g = lane / 4, threadID_in_group t = lane % 4), so the recording pins down the
// instruction's arithmetic, not this file's indexing.
#include <cuda_bf16.h>
#include <mma.h>

// D = A B + C, m16n8k8: A [16][8] and B [8][8] as raw TF32 bits (the tensor core reads the top 19),
// C and D [16][8].
extern "C" __global__ void probe_mma_tf32(float* d, const unsigned* a, const unsigned* b, const float* c) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    a += blockIdx.x * 128, b += blockIdx.x * 64, c += blockIdx.x * 128, d += blockIdx.x * 128;
    const unsigned a0 = a[g * 8 + t], a1 = a[(g + 8) * 8 + t], a2 = a[g * 8 + t + 4], a3 = a[(g + 8) * 8 + t + 4];
    const unsigned b0 = b[t * 8 + g], b1 = b[(t + 4) * 8 + g];
    float d0 = c[g * 8 + 2 * t], d1 = c[g * 8 + 2 * t + 1], d2 = c[(g + 8) * 8 + 2 * t], d3 = c[(g + 8) * 8 + 2 * t + 1];
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    d[g * 8 + 2 * t] = d0, d[g * 8 + 2 * t + 1] = d1, d[(g + 8) * 8 + 2 * t] = d2, d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// m16n8k16 BF16: A [16][16], B [16][8] as bfloat16 bits, two to a register (the lower k in the low half).
extern "C" __global__ void probe_mma_bf16(float* d, const unsigned short* a, const unsigned short* b, const float* c) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    a += blockIdx.x * 256, b += blockIdx.x * 128, c += blockIdx.x * 128, d += blockIdx.x * 128;
    unsigned ra[4], rb[2];
    for (int r = 0; r < 4; ++r) {
        const int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        ra[r] = unsigned(a[row * 16 + col]) | unsigned(a[row * 16 + col + 1]) << 16;
    }
    for (int r = 0; r < 2; ++r) rb[r] = unsigned(b[(2 * t + 8 * r) * 8 + g]) | unsigned(b[(2 * t + 8 * r + 1) * 8 + g]) << 16;
    float d0 = c[g * 8 + 2 * t], d1 = c[g * 8 + 2 * t + 1], d2 = c[(g + 8) * 8 + 2 * t], d3 = c[(g + 8) * 8 + 2 * t + 1];
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
    d[g * 8 + 2 * t] = d0, d[g * 8 + 2 * t + 1] = d1, d[(g + 8) * 8 + 2 * t] = d2, d[(g + 8) * 8 + 2 * t + 1] = d3;
}

// cvt.rna.tf32.f32 of n values.
extern "C" __global__ void probe_cvt_tf32(unsigned* out, const float* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x[i]));
    out[i] = r;
}

// wmma 16 x 16 x 8 TF32 (A [16][8], B [8][16], C and D [16][16], row-major floats) and 16 x 16 x 16
// BF16 (A [16][16], B [16][16]): load, mma_sync, store. The element layout of a fragment is
// NVIDIA's secret; only what reaches memory is compared.
extern "C" __global__ void probe_wmma_tf32(float* d, const float* a, const float* b, const float* c) {
    using namespace nvcuda;
    a += blockIdx.x * 128, b += blockIdx.x * 128, c += blockIdx.x * 256, d += blockIdx.x * 256;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::load_matrix_sync(fa, a, 8);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

extern "C" __global__ void probe_wmma_bf16(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c) {
    using namespace nvcuda;
    a += blockIdx.x * 256, b += blockIdx.x * 256, c += blockIdx.x * 256, d += blockIdx.x * 256;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}
