// cp_async.cuh: global -> shared copies that bypass registers (sm_80 and later), for the
// pipelined tensor-core kernels (mma_async.cu, wgmma.cu).
#pragma once

// Copy 16 bytes, or zero-fill them when src_bytes is 0 (a quad outside the matrix).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes));
}

// Copy 4 bytes, or zero-fill them when src_bytes is 0 (an element outside the matrix).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Wait until at most PENDING of this thread's committed groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }
