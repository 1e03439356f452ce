// cuda_emu.h: the CUDA C subset of the course, as C++ for the CPU emulator.
//
// Force-included (g++ -include) before every kernel source. Each GPU thread of a
// block is a fiber on one OS thread (runtime.cpp); the fiber's state sits at the
// base of its stack region, which is aligned to its size, so threadIdx is read
// from the stack pointer without thread-local storage. Everything that makes a
// thread wait for others (__syncthreads, the warp operations) is a call into the
// runtime, which switches fibers; everything else runs as plain C++.
//
// compiler.py preprocesses a source with this header, finds the kernels by the words
// __global__, __shared__ and __launch_bounds__ (left undefined here), then defines them.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <cmath>
#include <utility>

// --- the ABI the runtime shares with compiled kernels --------------------------------

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

constexpr uintptr_t kStackBytes = uintptr_t(256) << 10;  // one GPU thread: state, guard page, stack

struct Block;

struct Thread {  // at the base of the thread's stack region
    uint3 thread_idx;
    Block* block;
    int linear;  // its index in the block, x fastest
};

struct Block {  // one running block; the fields kernels read come first
    uint3 block_idx;
    dim3 block_dim, grid_dim;
    unsigned char* dynamic_shared;
    unsigned long long serial;  // of the blocks its worker has run, from 1: never the same twice
    void* racecheck = nullptr;  // racecheck.cpp's record of the block, in a launch with race checking
    void* trace = nullptr;      // trace.cpp's, in a traced launch
};

inline Thread* self() {
    return reinterpret_cast<Thread*>(reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) & ~(kStackBytes - 1));
}

// What a block's shared memory holds before the block writes it, static and dynamic alike (a
// GPU leaves an earlier block's bytes, which can happen to be the right value). Bytes of 0xff
// are a NaN in every floating-point type (half, bfloat16, float, double), so an early read spoils
// what is computed from it; they are -1 in a signed integer and the largest value in an unsigned
// one, either way an index far out of bounds.
constexpr unsigned char kSharedPoison = 0xff;

// Poisons the static __shared__ variables it is given at its first call by a thread of the
// running block (compiler.py puts the call after their declaration); `poisoned` is their own
// record, one per worker, of the last block that did.
// Race checking (racecheck.cpp) does not see it, and forgets what earlier blocks did there; access
// tracing (trace.cpp) learns where the variable lies.
extern "C" void __emu_shared_declared(const void* address, size_t bytes);
// The poison's fill: never a call of memset, which race checking watches in a kernel built for it
// (kernel_memory.cpp); the emulator's own copies below are __builtin_memcpy of a few bytes, inline.
inline void fill_bytes(void* to, unsigned char value, size_t n) {
    asm volatile("rep stosb" : "+D"(to), "+c"(n) : "a"(value) : "memory");
}
template <class... T>
__attribute__((no_sanitize_thread)) inline void poison_shared(unsigned long long& poisoned, T&... variables) {
    const unsigned long long block = self()->block->serial;
    if (poisoned == block) return;
    poisoned = block;
    (fill_bytes(__builtin_addressof(variables), kSharedPoison, sizeof variables), ...);
    (__emu_shared_declared(__builtin_addressof(variables), sizeof variables), ...);
}

enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, VOTE_BALLOT, VOTE_ANY, VOTE_ALL, SYNC_WARP };

template <class T>
inline unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "a warp exchanges at most 8 bytes per lane");
    unsigned long long bits = 0;
    __builtin_memcpy(&bits, &v, sizeof(T));
    return bits;
}

template <class T>
inline T from_bits(unsigned long long bits) {
    T v;
    __builtin_memcpy(&v, &bits, sizeof(T));
    return v;
}

// Calls kernel(args[0], args[1], ...) with each argument read as its parameter's type.
template <class... P, size_t... I>
inline void invoke_with(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<P*>(args[I])...);
}

template <class... P>
inline void invoke(void (*kernel)(P...), void** args) {
    invoke_with(kernel, args, std::index_sequence_for<P...>{});
}

constexpr int launch_bound(int max_threads, int = 0, int = 0) { return max_threads; }
constexpr uint3 cluster_dims(unsigned x, unsigned y = 1, unsigned z = 1) { return {x, y, z}; }  // __cluster_dims__

}  // namespace emu

extern "C" {
int __emu_syncthreads(int predicate, const char* file, int line);
void __emu_grid_barrier(void* bar, const char* file, int line);  // grid_barrier.cuh's, on the CPU
uint3 __emu_cluster_enter(const void* anchor);  // include/cooperative_groups.h's thread block clusters
void __emu_cluster_sync(const char* file, int line);
void* __emu_cluster_map(const void* address, unsigned rank, const void* anchor, const char* file, int line);
unsigned long long __emu_warp(int op, unsigned mask, unsigned long long value, int arg, int width, const char* name,
                              const char* file, int line);
unsigned __emu_activemask(void);
[[noreturn]] void __emu_trap(const char* what, const char* file, int line);
}

#define EMU_SITE const char *__file = __builtin_FILE(), int __line = __builtin_LINE()

// --- qualifiers ------------------------------------------------------------------------

#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__  // a kernel parameter of a Hopper TMA kernel (its body is sm_90a code only)
#define __CUDA_ARCH__ 800  // Ampere: independent thread scheduling, TF32/BF16 tensor cores (tensor_core.h)
#define MINITORCH_CUDA_EMULATOR 1
// __global__, __shared__ and __launch_bounds__: defined by compiler.py after its scan.

#define threadIdx (static_cast<const uint3&>(emu::self()->thread_idx))
#define blockIdx (static_cast<const uint3&>(emu::self()->block->block_idx))
#define blockDim (static_cast<const dim3&>(emu::self()->block->block_dim))
#define gridDim (static_cast<const dim3&>(emu::self()->block->grid_dim))
#define warpSize 32

// --- vector types ------------------------------------------------------------------------

#define EMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N { T x, y; }; \
    inline N make_##N(T x, T y) { return N{x, y}; }
#define EMU_VEC3(T, N) struct N { T x, y, z; }; \
    inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define EMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N { T x, y, z, w; }; \
    inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }

EMU_VEC2(float, float2, 8)
EMU_VEC3(float, float3)
EMU_VEC4(float, float4, 16)
EMU_VEC2(int, int2, 8)
EMU_VEC3(int, int3)
EMU_VEC4(int, int4, 16)
EMU_VEC2(unsigned, uint2, 8)
EMU_VEC4(unsigned, uint4, 16)
EMU_VEC2(double, double2, 16)
EMU_VEC4(unsigned char, uchar4, 4)
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

// --- synchronization -------------------------------------------------------------------

inline void __syncthreads(EMU_SITE) { __emu_syncthreads(0, __file, __line); }
inline int __syncthreads_count(int pred, EMU_SITE) { return __emu_syncthreads(pred, __file, __line); }
inline int __syncthreads_or(int pred, EMU_SITE) { return __emu_syncthreads(pred, __file, __line) > 0; }
inline int __syncthreads_and(int pred, EMU_SITE) {
    return __emu_syncthreads(pred, __file, __line) == int(blockDim.x * blockDim.y * blockDim.z);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, EMU_SITE) {
    __emu_warp(emu::SYNC_WARP, mask, 0, 0, 32, "__syncwarp", __file, __line);
}
inline unsigned __activemask() { return __emu_activemask(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
// the threads of a block share one OS thread: a compiler barrier orders them (and race checking
// tells it from __threadfence(), which publishes to other blocks)
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __trap(EMU_SITE) { __emu_trap("__trap()", __file, __line); }
inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }  // the host's cycle counter
// %globaltimer's stand-in (read by inline PTX on a GPU): the host's monotonic clock, in ns
inline unsigned long long __emu_globaltimer() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}

#define EMU_SHFL(NAME, OP)                                                                              \
    template <class T>                                                                                  \
    inline T NAME(unsigned mask, T v, int arg, int width = 32, EMU_SITE) {                              \
        return emu::from_bits<T>(__emu_warp(OP, mask, emu::to_bits(v), arg, width, #NAME, __file, __line)); \
    }
EMU_SHFL(__shfl_sync, emu::SHFL_IDX)
EMU_SHFL(__shfl_up_sync, emu::SHFL_UP)
EMU_SHFL(__shfl_down_sync, emu::SHFL_DOWN)
EMU_SHFL(__shfl_xor_sync, emu::SHFL_XOR)

inline unsigned __ballot_sync(unsigned mask, int pred, EMU_SITE) {
    return unsigned(__emu_warp(emu::VOTE_BALLOT, mask, pred != 0, 0, 32, "__ballot_sync", __file, __line));
}
inline int __any_sync(unsigned mask, int pred, EMU_SITE) {
    return int(__emu_warp(emu::VOTE_ANY, mask, pred != 0, 0, 32, "__any_sync", __file, __line));
}
inline int __all_sync(unsigned mask, int pred, EMU_SITE) {
    return int(__emu_warp(emu::VOTE_ALL, mask, pred != 0, 0, 32, "__all_sync", __file, __line));
}

// --- atomics (blocks run on several OS threads at once: these are real atomics) ---------

template <class T>
inline T __emu_atomic_update(T* address, T (*f)(T, T), T v) {  // compare-and-swap loop on the bits
    T old;
    __atomic_load(address, &old, __ATOMIC_SEQ_CST);
    for (;;) {  // a failed exchange reloads old
        T next = f(old, v);
        if (__atomic_compare_exchange(address, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return old;
    }
}

#define EMU_ATOMIC_INT(T)                                                                                  \
    inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }                   \
    inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }                   \
    inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }                   \
    inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }                     \
    inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }                   \
    inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }                 \
    inline T atomicMax(T* p, T v) { return __emu_atomic_update<T>(p, [](T a, T b) { return a > b ? a : b; }, v); } \
    inline T atomicMin(T* p, T v) { return __emu_atomic_update<T>(p, [](T a, T b) { return a < b ? a : b; }, v); } \
    inline T atomicCAS(T* p, T compare, T v) {                                                             \
        __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
        return compare;                                                                                    \
    }
EMU_ATOMIC_INT(int)
EMU_ATOMIC_INT(unsigned)
EMU_ATOMIC_INT(unsigned long long)
EMU_ATOMIC_INT(long long)

inline float atomicAdd(float* p, float v) { return __emu_atomic_update<float>(p, [](float a, float b) { return a + b; }, v); }
inline double atomicAdd(double* p, double v) {
    return __emu_atomic_update<double>(p, [](double a, double b) { return a + b; }, v);
}
inline float atomicExch(float* p, float v) {
    float old;
    __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
inline float atomicMax(float* p, float v) { return __emu_atomic_update<float>(p, [](float a, float b) { return fmaxf(a, b); }, v); }
inline float atomicMin(float* p, float v) { return __emu_atomic_update<float>(p, [](float a, float b) { return fminf(a, b); }, v); }
inline unsigned atomicInc(unsigned* p, unsigned limit) {
    unsigned old = *p, assumed;
    do {
        assumed = old;
        const unsigned next = assumed >= limit ? 0 : assumed + 1;
        __atomic_compare_exchange_n(p, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    } while (old != assumed);
    return old;
}

// --- math: the fast intrinsics computed exactly (results within their documented error) --

#define EMU_MINMAX(T)                                       \
    inline T min(T a, T b) { return a < b ? a : b; }        \
    inline T max(T a, T b) { return a > b ? a : b; }
EMU_MINMAX(int)
EMU_MINMAX(unsigned)
EMU_MINMAX(long long)
EMU_MINMAX(unsigned long long)
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline float sinpif(float x) { return float(sin(M_PI * double(x))); }
inline float cospif(float x) { return float(cos(M_PI * double(x))); }
inline float __saturatef(float x) { return fminf(fmaxf(x, 0.0f), 1.0f); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rd(float x) { return int(floorf(x)); }
inline int __float2int_ru(float x) { return int(ceilf(x)); }
inline unsigned __float2uint_rn(float x) { return unsigned(nearbyintf(x)); }
inline float __int2float_rn(int x) { return float(x); }

inline int __float_as_int(float x) { return emu::from_bits<int>(emu::to_bits(x)); }
inline unsigned __float_as_uint(float x) { return emu::from_bits<unsigned>(emu::to_bits(x)); }
inline float __int_as_float(int x) { return emu::from_bits<float>(emu::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return emu::from_bits<float>(emu::to_bits(x)); }
inline long long __double_as_longlong(double x) { return emu::from_bits<long long>(emu::to_bits(x)); }
inline double __longlong_as_double(long long x) { return emu::from_bits<double>(emu::to_bits(x)); }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return int((long long)a * b >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((unsigned long long)a * b >> 32); }

template <class T>
inline T __ldg(const T* p) { return *p; }
