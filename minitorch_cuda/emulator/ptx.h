// ptx.h: what the inline PTX that the CPU emulator models becomes (force-included after cuda_emu.h).
//
// ptx.py rewrites each recognised asm(...) statement of a kernel into a call of one of these, with
// the statement's operands as arguments: the tensor-core instruction mma.sync (tensor_core.h),
// cvt.rna.tf32.f32, the asynchronous copies cp.async (the runtime's <cuda_pipeline.h> model: a copy
// lands at the wait that covers its group), and %globaltimer. Any other PTX is refused at build.
#pragma once
#include "tensor_core.h"

extern "C" {
void __emu_pipeline_copy(void* dst, const void* src, size_t bytes, size_t zfill, const char* file, int line);
void __emu_pipeline_commit(void);
void __emu_pipeline_wait(size_t prior);
}

namespace emu {
namespace ptx {

// A 32-bit shared-memory address (__cvta_generic_to_shared) holds an offset into the block's dynamic
// shared memory (below 2^30), or kStaticWindow plus the distance (within +-2^30) of a static
// __shared__ variable (thread_local, as all of them) from `anchor`, a thread_local of the same library.
constexpr unsigned kStaticWindow = 0x80000000u;
static thread_local char anchor;

inline unsigned shared_address(const void* p, const char* file, int line) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), dynamic = reinterpret_cast<uintptr_t>(self()->block->dynamic_shared);
    if (a - dynamic < (uintptr_t(227) << 10)) return unsigned(a - dynamic);
    const long long distance = (long long)(a - reinterpret_cast<uintptr_t>(&anchor));
    if (distance < -(1ll << 30) || distance >= (1ll << 30))
        __emu_trap("__cvta_generic_to_shared of an address that is not in shared memory", file, line);
    return unsigned(kStaticWindow + distance);
}

inline void* generic_address(unsigned s) {
    if (s < kStaticWindow - (1u << 30)) return self()->block->dynamic_shared + s;
    return &anchor + ((long long)s - kStaticWindow);
}

// cp.async.{ca,cg}.shared.global [dst], [src], cp_size{, src_size}: src_size bytes copied, the rest
// of cp_size zero-filled.
inline void cp_async(unsigned dst, const void* src, long long cp_size, long long src_size, const char* file, int line) {
    if (src_size < 0 || src_size > cp_size)
        __emu_trap("cp.async with a source size outside 0 to the copy size", file, line);
    __emu_pipeline_copy(generic_address(dst), src, size_t(cp_size), size_t(cp_size - src_size), file, line);
}

inline void mma_tf32(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                     unsigned b0, unsigned b1, float c0, float c1, float c2, float c3, const char* file, int line) {
    float d[4];
    tensor_core::warp_mma<tensor_core::Tf32>(d, {a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3}, file, line);
    d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3];
}

inline void mma_bf16(float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                     unsigned b0, unsigned b1, float c0, float c1, float c2, float c3, const char* file, int line) {
    float d[4];
    tensor_core::warp_mma<tensor_core::Bf16>(d, {a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3}, file, line);
    d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3];
}

// An operand register of any 32-bit type (a kernel may keep TF32 operands as float or unsigned).
template <class T>
inline unsigned b32(T v) {
    static_assert(sizeof(T) == 4, "an mma.sync operand register holds 32 bits");
    return from_bits<unsigned>(to_bits(v));
}

}  // namespace ptx
}  // namespace emu

inline size_t __cvta_generic_to_shared(const void* p, EMU_SITE) { return emu::ptx::shared_address(p, __file, __line); }
