// cuda_pipeline.h for the CPU emulator: the asynchronous copies to shared memory of the
// CUDA C++ pipeline primitives (runtime.cpp: each lands at the wait that covers its batch).
#pragma once
#include <stddef.h>

extern "C" {
void __emu_pipeline_copy(void* dst, const void* src, size_t bytes, size_t zfill, const char* file, int line);
void __emu_pipeline_commit(void);
void __emu_pipeline_wait(size_t prior);
}

// Copies size_and_align - zfill bytes (4, 8 or 16 in all, both addresses aligned to it) and
// zero-fills the last zfill bytes of the destination.
inline void __pipeline_memcpy_async(void* dst_shared, const void* src_global, size_t size_and_align,
                                    size_t zfill = 0, EMU_SITE) {
    __emu_pipeline_copy(dst_shared, src_global, size_and_align, zfill, __file, __line);
}
inline void __pipeline_commit() { __emu_pipeline_commit(); }
// Waits until at most `prior` of this thread's committed batches are still in flight.
inline void __pipeline_wait_prior(size_t prior) { __emu_pipeline_wait(prior); }
