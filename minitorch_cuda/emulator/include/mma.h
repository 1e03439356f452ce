// mma.h for the CPU emulator: nvcuda::wmma for the shapes of Ampere's TF32 and BF16 tensor cores,
// 16 x 16 x 8 (precision::tf32) and 16 x 16 x 16 (__nv_bfloat16), with float accumulators.
//
// NVIDIA leaves a wmma fragment's layout unspecified; here a fragment is the registers of the
// mma.sync instructions it stands for (tensor_core.h): matrix_a is one m16n8k8 (or m16n8k16) A
// fragment, matrix_b and the accumulator are two n8 halves, columns 0-7 then 8-15. So x[i] and
// num_elements are those of the mma.sync registers (a: 4 TF32 or 8 BF16 values a lane, b: 4 or 8,
// accumulator: 8), consistent with this file's loads, stores and mma_sync. As on a GPU, a fragment
// pointer must be 32-byte aligned and the leading dimension a multiple of 16 bytes.
#pragma once
#include <cuda_bf16.h>

#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
namespace precision {
struct tf32 {};
}  // namespace precision
enum layout_t { mem_row_major, mem_col_major };

namespace emu_detail {
namespace tc = emu::tensor_core;

template <class T>
struct storage {  // what an element of a fragment of type T is
    using type = T;
};
template <>
struct storage<precision::tf32> {
    using type = float;
};

// (row, col) of element i of a lane's fragment, in the fragment's own matrix (16 x K for A,
// K x 16 for B, 16 x 16 for the accumulator).
template <class Use, int K>
inline emu::tensor_core::Coords coords(int lane, int i) {
    if constexpr (std::is_same_v<Use, matrix_a>) return K == 8 ? tc::tf32_a(lane, i) : tc::bf16_a(lane, i);
    const int half = i / (K == 8 ? 2 : 4), j = i % (K == 8 ? 2 : 4);  // matrix_b: 2 or 4 values a half
    if constexpr (std::is_same_v<Use, matrix_b>) {
        const tc::Coords at = K == 8 ? tc::tf32_b(lane, j) : tc::bf16_b(lane, j);
        return {at.row, at.col + 8 * half};
    }
    const tc::Coords at = tc::accumulator(lane, i % 4);
    return {at.row, at.col + 8 * (i / 4)};
}

inline int lane() {
    const uint3 t = threadIdx;
    return int((t.x + blockDim.x * (t.y + blockDim.y * t.z)) % 32);
}

inline void check(const void* p, unsigned ldm, size_t element_bytes, const char* what, const char* file, int line) {
    if (reinterpret_cast<uintptr_t>(p) % 32) __emu_trap(what, file, line);
    if (ldm * element_bytes % 16) __emu_trap("a wmma leading dimension that is not a multiple of 16 bytes", file, line);
}

inline unsigned pack(float v) { return emu::to_bits(v); }
inline unsigned pack(__nv_bfloat16 lo, __nv_bfloat16 hi) { return unsigned(lo.x) | unsigned(hi.x) << 16; }
}  // namespace emu_detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
    static_assert(M == 16 && N == 16 && (K == 8 || K == 16), "the emulator models wmma 16 x 16 x 8 (TF32) and 16 x 16 x 16 (BF16)");

  public:
    using element_type = typename emu_detail::storage<T>::type;
    static constexpr int num_elements = std::is_same_v<Use, accumulator> ? 8 : K == 8 ? 4 : 8;
    element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const typename fragment<Use, M, N, K, T, Layout>::element_type& v) {
    for (auto& e : f.x) e = v;
}

template <class Use, int M, int N, int K, class T, class Layout, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const P* p, unsigned ldm, EMU_SITE) {
    static_assert(!std::is_same_v<Use, accumulator>, "an accumulator is loaded with a layout_t");
    emu_detail::check(p, ldm, sizeof(P), "wmma::load_matrix_sync from an address that is not 32-byte aligned", __file, __line);
    const int lane = emu_detail::lane();
    for (int i = 0; i < f.num_elements; ++i) {
        const emu::tensor_core::Coords at = emu_detail::coords<Use, K>(lane, i);
        f.x[i] = std::is_same_v<Layout, row_major> ? p[size_t(at.row) * ldm + at.col] : p[size_t(at.col) * ldm + at.row];
    }
}

template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const float* p, unsigned ldm, layout_t layout, EMU_SITE) {
    emu_detail::check(p, ldm, 4, "wmma::load_matrix_sync from an address that is not 32-byte aligned", __file, __line);
    const int lane = emu_detail::lane();
    for (int i = 0; i < 8; ++i) {
        const emu::tensor_core::Coords at = emu_detail::coords<accumulator, K>(lane, i);
        f.x[i] = layout == mem_row_major ? p[size_t(at.row) * ldm + at.col] : p[size_t(at.col) * ldm + at.row];
    }
}

template <int M, int N, int K, class T>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout, EMU_SITE) {
    emu_detail::check(p, ldm, 4, "wmma::store_matrix_sync to an address that is not 32-byte aligned", __file, __line);
    const int lane = emu_detail::lane();
    for (int i = 0; i < 8; ++i) {
        const emu::tensor_core::Coords at = emu_detail::coords<accumulator, K>(lane, i);
        (layout == mem_row_major ? p[size_t(at.row) * ldm + at.col] : p[size_t(at.col) * ldm + at.row]) = f.x[i];
    }
}

// D = A B + C: two mma.sync instructions, one per n8 half of B, C and D.
template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c, EMU_SITE) {
    namespace tc = emu::tensor_core;
    unsigned ra[4], rb[2][2];
    if constexpr (K == 8) {
        for (int r = 0; r < 4; ++r) ra[r] = emu_detail::pack(a.x[r]);
        for (int h = 0; h < 2; ++h)
            for (int r = 0; r < 2; ++r) rb[h][r] = emu_detail::pack(b.x[2 * h + r]);
    } else {
        for (int r = 0; r < 4; ++r) ra[r] = emu_detail::pack(a.x[2 * r], a.x[2 * r + 1]);
        for (int h = 0; h < 2; ++h)
            for (int r = 0; r < 2; ++r) rb[h][r] = emu_detail::pack(b.x[4 * h + 2 * r], b.x[4 * h + 2 * r + 1]);
    }
    float half_c[4], half_d[4];
    for (int h = 0; h < 2; ++h) {
        for (int r = 0; r < 4; ++r) half_c[r] = c.x[4 * h + r];
        if constexpr (K == 8)
            tc::warp_mma<tc::WmmaTf32>(half_d, ra, rb[h], half_c, __file, __line);
        else
            tc::warp_mma<tc::Bf16>(half_d, ra, rb[h], half_c, __file, __line);
        for (int r = 0; r < 4; ++r) d.x[4 * h + r] = half_d[r];
    }
}

// wmma's conversion: cvt.rna.tf32.f32, as a float.
inline float __float_to_tf32(float x) { return emu::tensor_core::bits_float(emu::tensor_core::cvt_rna_tf32(x)); }

}  // namespace wmma
}  // namespace nvcuda
