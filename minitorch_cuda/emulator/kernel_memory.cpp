// kernel_memory.cpp: the C library's functions that device code may call and that touch the
// kernel's memory, for kernels built for race checking or tracing.
//
// ThreadSanitizer's calls cover the kernel's own loads and stores, not what the C library does for
// it: a memcpy out of shared memory (g++ compiles a kernel's memcpy, and loops it turns into one,
// into a call), or sincosf writing its results through its pointers, would be invisible to race
// checking, and a missing __syncthreads() before them would pass. compiler.py links this file into
// each instrumented kernel library; hidden, these definitions take the library's calls instead of
// the C library's. Each tells race checking of the bytes read and written, at the kernel's own call
// (its line in a report), then does the work: the copies here, the math in the C library's own
// function (named by its version: this file's definitions hide the plain name). printf's %n, which
// writes through a pointer and which CUDA's printf does not have, is refused. The access counts of
// a traced launch leave these out: ncu counts instructions, which a C library call does not show.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

extern "C" void __emu_access_range(const void* address, size_t bytes, int write, const void* pc);
extern "C" [[noreturn]] void __emu_refuse(const char* what, const void* pc, const char* why);

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

// --- functions that write their results through pointers ------------------------------------------

// libc_NAME is the C library's NAME, by its version (.symver), past this file's definition of NAME
#define EMU_LIBC(returns, name, params) \
    extern "C" returns libc_##name params; \
    __asm__(".symver libc_" #name ", " #name "@GLIBC_2.2.5")

template <class... T>
static inline void written(const void* pc, T*... outs) {
    (__emu_access_range(outs, sizeof(T), 1, pc), ...);
}

// NAME, which writes through its pointers OUT...: each reported as written at the kernel's call
#define EMU_WRITES_THROUGH(returns, name, params, args, ...)                \
    EMU_LIBC(returns, name, params);                                        \
    EMU_HIDDEN returns name params {                                        \
        written(__builtin_return_address(0), __VA_ARGS__);                  \
        return libc_##name args;                                            \
    }

EMU_WRITES_THROUGH(void, sincos, (double x, double* s, double* c), (x, s, c), s, c)
EMU_WRITES_THROUGH(void, sincosf, (float x, float* s, float* c), (x, s, c), s, c)
EMU_WRITES_THROUGH(double, frexp, (double x, int* e), (x, e), e)
EMU_WRITES_THROUGH(float, frexpf, (float x, int* e), (x, e), e)
EMU_WRITES_THROUGH(double, modf, (double x, double* whole), (x, whole), whole)
EMU_WRITES_THROUGH(float, modff, (float x, float* whole), (x, whole), whole)
EMU_WRITES_THROUGH(double, remquo, (double x, double y, int* q), (x, y, q), q)
EMU_WRITES_THROUGH(float, remquof, (float x, float y, int* q), (x, y, q), q)
EMU_WRITES_THROUGH(int, clock_gettime, (clockid_t clock, struct timespec* at), (clock, at), at)
EMU_LIBC(int, vprintf, (const char*, va_list));

// --- printf without %n ---------------------------------------------------------------------------

static bool in_a_conversion(char c) {  // a flag, width, precision, length or argument number
    for (const char* f = "-+ #0'123456789.*hlLqjzt$"; *f; ++f)
        if (*f == c) return true;
    return false;
}

static bool writes_through_an_argument(const char* format) {  // a %n conversion
    for (const char* c = format; *c; ++c) {
        if (*c != '%') continue;
        if (*++c == '%') continue;
        while (*c && in_a_conversion(*c)) ++c;
        if (*c == 'n') return true;
        if (!*c) break;
    }
    return false;
}

#define EMU_NO_PERCENT_N "printf's %n (racecheck)", __builtin_return_address(0), \
    "it writes through its pointer out of race checking's sight, and CUDA's printf has no %n"

EMU_HIDDEN int vprintf(const char* format, va_list args) {
    if (writes_through_an_argument(format)) __emu_refuse(EMU_NO_PERCENT_N);
    return libc_vprintf(format, args);
}
EMU_HIDDEN int printf(const char* format, ...) {
    if (writes_through_an_argument(format)) __emu_refuse(EMU_NO_PERCENT_N);
    va_list args;
    va_start(args, format);
    const int n = libc_vprintf(format, args);
    va_end(args);
    return n;
}
