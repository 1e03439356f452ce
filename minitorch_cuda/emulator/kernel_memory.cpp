// kernel_memory.cpp: memcpy, memmove and memset for kernels built for race checking or tracing.
//
// g++ compiles a kernel's calls of them (and the loops it turns into them) into calls of the C
// library, which ThreadSanitizer's instrumentation does not cover: race checking would never see
// the bytes they read and write (a missing __syncthreads() before a memcpy out of shared memory
// would pass). compiler.py links this file into each instrumented kernel library; hidden, these
// definitions take the library's calls instead of the C library's. Each tells race checking of the
// bytes read and written, at the kernel's own call (its line in a report), then copies them. The
// access counts of a traced launch leave them out: ncu counts a copy's instructions, which a C
// library call does not show.
#include <stddef.h>
#include <stdint.h>

extern "C" void __emu_access_range(const void* address, size_t bytes, int write, const void* pc);

#define EMU_HIDDEN extern "C" __attribute__((visibility("hidden")))

EMU_HIDDEN void* memcpy(void* to, const void* from, size_t n) {
    const void* pc = __builtin_return_address(0);
    __emu_access_range(from, n, 0, pc);
    __emu_access_range(to, n, 1, pc);
    void* out = to;
    asm volatile("rep movsb" : "+D"(to), "+S"(from), "+c"(n) : : "memory");  // not a loop g++ would make a call
    return out;
}

EMU_HIDDEN void* memmove(void* to, const void* from, size_t n) {
    const void* pc = __builtin_return_address(0);
    __emu_access_range(from, n, 0, pc);
    __emu_access_range(to, n, 1, pc);
    void* out = to;
    if (uintptr_t(to) - uintptr_t(from) >= n) {  // no overlap that a forward copy would overwrite
        asm volatile("rep movsb" : "+D"(to), "+S"(from), "+c"(n) : : "memory");
    } else {  // backward, from the last byte
        unsigned char* last_to = static_cast<unsigned char*>(to) + n - 1;
        const unsigned char* last_from = static_cast<const unsigned char*>(from) + n - 1;
        asm volatile("std\n\trep movsb\n\tcld" : "+D"(last_to), "+S"(last_from), "+c"(n) : : "memory");
    }
    return out;
}

EMU_HIDDEN void* memset(void* to, int value, size_t n) {
    __emu_access_range(to, n, 1, __builtin_return_address(0));
    void* out = to;
    asm volatile("rep stosb" : "+D"(to), "+c"(n) : "a"(value) : "memory");
    return out;
}
