// tensor_core.h: the tensor cores of an Ampere GPU on the CPU emulator (chapter 19).
//
// One instruction, mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (and its BF16 twin
// m16n8k16 .bf16), is the whole model: ptx.py rewrites a kernel's inline-PTX mma.sync into
// warp_mma(), and include/mma.h builds nvcuda::wmma on it. The instruction is warp-collective:
// each lane hands in its registers of A, B and C, the lanes meet (a __syncwarp rendezvous of the
// runtime), the first lane to run on computes the whole 16 x 8 D once, and each lane takes its
// four registers of D. Which register holds which element is the PTX ISA's ("Matrix Fragments
// for mma.m16n8k8" and "for mma.m16n8k16"), with groupID g = lane >> 2 and threadID_in_group
// t = lane % 4; Layout below writes each rule once.
//
// Numbers: the tensor core reads the top 19 bits of a TF32 operand (it truncates: a kernel rounds
// with cvt.rna.tf32.f32 first), every product of two TF32 or BF16 operands is exact in a double,
// and accumulate() adds them to C by the rule a GPU's recording pinned down
// (tests/data/mma_recording.npz, made by .ci/mma_record.py on an H200, then again on an H100), bit for bit.
#pragma once
#include <algorithm>

namespace emu {
namespace tensor_core {

// The exchange is the emulator's, not the kernel's memory: race checking does not watch it. (One lane
// computes the product after the rendezvous and the others read it, ordered by the fibers' one
// order, which a race check of the buffer would report.) What the kernel's own memory holds
// reaches mma.sync through registers, read and written where the kernel's code is checked.
#define EMU_EXCHANGE __attribute__((no_sanitize_thread))

inline float bits_float(unsigned bits) { return from_bits<float>(bits); }

// The value a TF32 operand register holds for the tensor core: its top 19 bits.
inline double tf32_operand(unsigned bits) { return bits_float(bits & 0xffffe000u); }

// The value of the BF16 in the low (half 0) or high (half 1) 16 bits of a register.
inline double bf16_operand(unsigned bits, int half) { return bits_float((bits >> (16 * half)) << 16); }

// cvt.rna.tf32.f32: to the nearest TF32 value, ties away from zero; the low 13 bits become 0. A NaN
// is cut, not rounded: it keeps its sign and the top 10 bits of its payload, quiet or signaling, and
// one whose payload lies wholly in the low 13 bits becomes infinity (the GPU's recording,
// tests/data/mma_recording.npz: 22 NaNs, three of them such, mma_probe.py's inputs 520 to 522).
inline unsigned cvt_rna_tf32(float x) {
    const unsigned bits = to_bits(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return bits & 0xffffe000u;
    return (bits + 0x1000u) & 0xffffe000u;  // a carry out of the mantissa moves into the exponent
}

// float(x) rounded toward zero (x is exact in a double).
inline float toward_zero(double x) {
    float f = float(x);
    if (std::fabs(double(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    return f;
}

// The accumulation rule, measured bit for bit on an H200 and an H100 (sm_90; mma_recording.npz, 36,864
// elements of D: 0 differ, against 5,221 under the rule guessed before the recording, C and blocks of 4
// or 8 products aligned to the largest term's value with 3 extra bits). It is of the kind Fasi,
// Higham, Mikaitis and Pranesh describe for an A100 ("Numerical behavior of NVIDIA tensor cores",
// PeerJ CS 2021): C and a block of products are added in one step, their significands aligned to
// the largest exponent among them and cut toward zero below a fixed bit, and the sum is rounded to
// float toward zero, the C of the next block. What the recording pins down:
// - the exponent a term is aligned by is C's, and a product's is the sum of its operands'
//   (ea + eb, whatever the product's significand, which lies in [1, 4)), a subnormal counting as
//   float's smallest normal exponent, -126 (one element of WMMA TF32's subnormal tiles tells);
// - the last bit kept weighs 2^(top - 23 - kExtraBits), kExtraBits = 2, top the largest of them;
// - one block is the whole instruction: the 8 products of TF32 m16n8k8, the 16 of BF16
//   m16n8k16; but WMMA's 16 x 16 x 8 TF32 goes in blocks of 4 (as two k = 4 steps, each rounded
//   to float; BF16 WMMA is one block of 16 like mma.sync).
// - a sum of zeros is +0, even of -0s only (all 1,648 such sums of the recording, 4 of them of -0s).
// Non-finite inputs take IEEE's rules (not recorded). The EMU_MMA_ macros exist for
// .ci/mma_record.py, which tries other rules (-D) against a GPU's results; the defaults are the rule.
#ifndef EMU_MMA_EXTRA_BITS
#define EMU_MMA_EXTRA_BITS 2
#define EMU_MMA_TF32_BLOCK 8
#define EMU_MMA_BF16_BLOCK 16
#define EMU_MMA_WMMA_TF32_BLOCK 4
#define EMU_MMA_ROUND_NEAREST 0
#define EMU_MMA_ALIGN_BY_VALUE 0
#endif
constexpr int kExtraBits = EMU_MMA_EXTRA_BITS;
constexpr bool kRoundNearest = EMU_MMA_ROUND_NEAREST;
constexpr bool kAlignByValue = EMU_MMA_ALIGN_BY_VALUE;  // 1: a product's exponent is its value's (the former guess)

// The exponent the tensor core aligns a nonzero float (or TF32, BF16) by.
inline int exponent(double x) { return std::max(std::ilogb(x), -126); }

// C + sum of a[i] b[i] (i < n), `block` products a step.
inline float accumulate(float c, const double* a, const double* b, int n, int block) {
    for (int start = 0; start < n; start += block) {
        const int end = std::min(n, start + block);
        double plain = c;  // IEEE's sum: for inf and NaN
        int top = c != 0.0f ? exponent(c) : INT32_MIN;  // the largest exponent of a term
        for (int i = start; i < end; ++i) {
            const double product = a[i] * b[i];  // exact: 11- or 8-bit significands
            plain += product;
            if (product != 0.0) top = std::max(top, kAlignByValue ? std::ilogb(product) : exponent(a[i]) + exponent(b[i]));
        }
        if (!std::isfinite(plain) || top == INT32_MIN) {
            c = std::isfinite(plain) ? 0.0f : float(plain);  // zeros only: +0, whatever their signs
            continue;
        }
        const int unit = top - 23 - kExtraBits;  // the weight of the last bit kept
        long long sum = (long long)std::trunc(std::ldexp(double(c), -unit));
        for (int i = start; i < end; ++i) sum += (long long)std::trunc(std::ldexp(a[i] * b[i], -unit));
        c = kRoundNearest ? float(std::ldexp(double(sum), unit)) : toward_zero(std::ldexp(double(sum), unit));
    }
    return c;
}

// The PTX ISA's fragment layouts: (row, column) of what register `reg` (and, for 16-bit types, its
// half) of `lane` holds. TF32 m16n8k8: A 16 x 8, B 8 x 8. BF16 m16n8k16: A 16 x 16, B 16 x 8, two
// values a register (element i = 2 * reg + half). C and D: 16 x 8 for both.
struct Coords {
    int row, col;
};
inline Coords tf32_a(int lane, int reg) { return {lane / 4 + 8 * (reg & 1), lane % 4 + 4 * (reg >> 1)}; }
inline Coords tf32_b(int lane, int reg) { return {lane % 4 + 4 * reg, lane / 4}; }
inline Coords bf16_a(int lane, int i) { return {lane / 4 + 8 * ((i >> 1) & 1), 2 * (lane % 4) + (i & 1) + 8 * (i >> 2)}; }
inline Coords bf16_b(int lane, int i) { return {2 * (lane % 4) + (i & 1) + 8 * (i >> 1), lane / 4}; }
inline Coords accumulator(int lane, int reg) { return {lane / 4 + 8 * (reg >> 1), 2 * (lane % 4) + (reg & 1)}; }

// The two instructions: K, the products added per step of accumulate() and how A's and B's
// registers decode.
struct Tf32 {
    static constexpr int K = 8, kBlock = EMU_MMA_TF32_BLOCK;
    static constexpr const char* name = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
    EMU_EXCHANGE static void decode(const unsigned (&a)[32][4], const unsigned (&b)[32][2], double (&A)[16][16], double (&B)[16][8]) {
        for (int lane = 0; lane < 32; ++lane) {
            for (int reg = 0; reg < 4; ++reg) A[tf32_a(lane, reg).row][tf32_a(lane, reg).col] = tf32_operand(a[lane][reg]);
            for (int reg = 0; reg < 2; ++reg) B[tf32_b(lane, reg).row][tf32_b(lane, reg).col] = tf32_operand(b[lane][reg]);
        }
    }
};
struct Bf16 {
    static constexpr int K = 16, kBlock = EMU_MMA_BF16_BLOCK;
    static constexpr const char* name = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    EMU_EXCHANGE static void decode(const unsigned (&a)[32][4], const unsigned (&b)[32][2], double (&A)[16][16], double (&B)[16][8]) {
        for (int lane = 0; lane < 32; ++lane) {
            for (int i = 0; i < 8; ++i) A[bf16_a(lane, i).row][bf16_a(lane, i).col] = bf16_operand(a[lane][i / 2], i % 2);
            for (int i = 0; i < 4; ++i) B[bf16_b(lane, i).row][bf16_b(lane, i).col] = bf16_operand(b[lane][i / 2], i % 2);
        }
    }
};

// WMMA's TF32 16 x 16 x 8: the same registers as mma.sync's, summed in smaller blocks (above).
struct WmmaTf32 : Tf32 {
    static constexpr int kBlock = EMU_MMA_WMMA_TF32_BLOCK;
};

// D = A B + C of the whole warp from every lane's registers.
template <class Shape>
EMU_EXCHANGE inline void product(const unsigned (&a)[32][4], const unsigned (&b)[32][2], const float (&c)[32][4], float (&d)[32][4]) {
    double A[16][16], B[16][8], column[16];
    Shape::decode(a, b, A, B);
    for (int lane = 0; lane < 32; ++lane) {
        for (int reg = 0; reg < 4; ++reg) {
            const Coords at = accumulator(lane, reg);
            for (int k = 0; k < Shape::K; ++k) column[k] = B[k][at.col];
            d[lane][reg] = accumulate(c[lane][reg], A[at.row], column, Shape::K, Shape::kBlock);
        }
    }
}

// Where the lanes of one warp leave their registers for the others. Two buffers, used in turn by
// each lane: a lane that runs ahead into its next mma fills the other buffer while the warp's
// slower lanes still read this one (it cannot get two ahead: the next rendezvous waits for them).
struct Exchange {
    unsigned a[32][4], b[32][2];
    float c[32][4], d[32][4];
    int line[32];
    bool computed;
};
struct WarpExchange {
    unsigned long long block;  // the serial of the block whose warp uses it (turns start at 0 in a new block)
    unsigned char turn[32];    // per lane: the buffer of its next mma
    Exchange buffer[2];
};
static thread_local WarpExchange t_warps[32];  // per worker: it runs one block at a time

// One mma.sync of the calling lane: its four registers of D.
template <class Shape>
EMU_EXCHANGE inline void warp_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4],
                     const char* file, int line) {
    const Thread* self_ = self();
    const dim3 dims = self_->block->block_dim;
    const uint3 t = self_->thread_idx;
    const unsigned linear = t.x + dims.x * (t.y + dims.y * t.z), lane = linear % 32;
    if (__emu_activemask() != 0xffffffffu)
        __emu_trap("mma.sync executed by a warp with fewer than 32 lanes (lanes have exited, or the block's size "
                   "is not a multiple of 32): all 32 lanes of a warp execute it together",
                   file, line);
    WarpExchange& warp = t_warps[linear / 32];
    if (warp.block != self_->block->serial) {
        warp.block = self_->block->serial;
        __builtin_memset(warp.turn, 0, sizeof warp.turn);
    }
    Exchange& x = warp.buffer[warp.turn[lane]];
    warp.turn[lane] ^= 1;
    __builtin_memcpy(x.a[lane], a, sizeof a);  // __builtin_: inline, never the kernel's watched memcpy
    __builtin_memcpy(x.b[lane], b, sizeof b);
    __builtin_memcpy(x.c[lane], c, sizeof c);
    x.line[lane] = line;
    x.computed = false;
    __emu_warp(SYNC_WARP, 0xffffffffu, 0, 0, 32, Shape::name, file, line);
    if (!x.computed) {
        for (int other = 0; other < 32; ++other)
            if (x.line[other] != line)
                __emu_trap("the lanes of a warp meet at two different mma.sync instructions (this one, and one at "
                           "another line): all 32 lanes execute the same one together",
                           file, line);
        product<Shape>(x.a, x.b, x.c, x.d);
        x.computed = true;
    }
    __builtin_memcpy(d, x.d[lane], sizeof d);
}

}  // namespace tensor_core
}  // namespace emu
