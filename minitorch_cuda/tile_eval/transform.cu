// Transform kernels in CUDA C (SIMT) with grid-stride loops: the streams move
// 16 bytes per operand and thread, as CUB's DeviceTransform does; fib and heavy
// take one element per thread.
// The reference side of the tile evaluation (chapter 20). Kernels:
//   copy_<T> scale_<T> add_<T> triad_<T> nstream_<T>   the five streams
//   fib                                                 data-dependent loop (int64 -> int64)
//   heavy_<N>                                           N values per thread in registers (uint32)
// <T> is fp16 bf16 fp32 fp64 int8 int64. The Python side appends the
// INSTANTIATE_* lines it needs, so one kernel can be compiled alone (for its
// compile time, cubin size and PTX) or all of them in one module (the benchmark).
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// The scalar arrives as a double; it goes through float first so that 16-bit
// types round it exactly as Triton does (its float scalar argument is fp32).
template <class T> __device__ __forceinline__ T from_scalar(double s) { return static_cast<T>(s); }
template <> __device__ __forceinline__ __half from_scalar<__half>(double s) { return __float2half_rn(float(s)); }
template <> __device__ __forceinline__ __nv_bfloat16 from_scalar<__nv_bfloat16>(double s) {
    return __float2bfloat16_rn(float(s));
}

// The arithmetic of each stream, written once for every type. Integer
// products of int8 promote to int and are truncated on the store, which is
// the same wrap-around every model gives.
template <class T> struct Copy    { __device__ T operator()(T a, T, T, T) const { return a; } };
template <class T> struct Scale   { __device__ T operator()(T a, T, T, T s) const { return T(s * a); } };
template <class T> struct Add     { __device__ T operator()(T a, T b, T, T) const { return T(a + b); } };
template <class T> struct Triad   { __device__ T operator()(T a, T b, T, T s) const { return T(a + s * b); } };
template <class T> struct Nstream { __device__ T operator()(T a, T b, T c, T s) const { return T(a + b + s * c); } };

// Sixteen bytes of T, the widest load one thread can issue: 8 halves, 16 int8s.
template <class T> struct alignas(16) Pack { T v[16 / sizeof(T)]; };

// out may alias a (nstream updates a in place), so no __restrict__ on them.
// Whole packs while every pointer is 16-byte aligned (cuMemAlloc's are), then
// the tail, or everything when a pointer is not, one element at a time.
template <class T, class F>
__device__ void stream(T* out, const T* a, const T* b, const T* c, double scalar, long long n) {
    constexpr int V = 16 / sizeof(T);
    using P = Pack<T>;
    const T s = from_scalar<T>(scalar);
    const F f;
    const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const size_t addresses = (size_t)out | (size_t)a | (size_t)b | (size_t)c;  // unused operands are null
    const long long packs = addresses % 16 == 0 ? n / V : 0;
    for (long long p = first; p < packs; p += stride) {
        const P x = reinterpret_cast<const P*>(a)[p];
        const P y = b ? reinterpret_cast<const P*>(b)[p] : x;  // read an operand only if the op has it
        const P z = c ? reinterpret_cast<const P*>(c)[p] : x;
        P r;
#pragma unroll
        for (int k = 0; k < V; ++k) r.v[k] = f(x.v[k], y.v[k], z.v[k], s);
        reinterpret_cast<P*>(out)[p] = r;
    }
    for (long long i = packs * V + first; i < n; i += stride) {
        const T x = a[i];
        const T y = b ? b[i] : x;
        const T z = c ? c[i] : x;
        out[i] = f(x, y, z, s);
    }
}

#define INSTANTIATE_STREAM(OP, FUNCTOR, T, SUFFIX)                                                      \
    extern "C" __global__ void OP##_##SUFFIX(T* out, const T* a, const T* b, const T* c, double scalar, \
                                             long long n) {                                              \
        stream<T, FUNCTOR<T>>(out, a, b, c, scalar, n);                                                  \
    }

// The CUB benchmark's fibonacci: the loop runs n - 2 times, a different
// count in every thread of a warp.
__device__ long long fib_value(long long k) {
    long long t1 = 0, t2 = 1;
    if (k < 1 || k == 1) return 0;
    if (k == 2) return 1;
    for (long long j = 3; j <= k; ++j) {
        const long long next = t1 + t2;
        t1 = t2;
        t2 = next;
    }
    return t2;
}

#define INSTANTIATE_FIB()                                                                  \
    extern "C" __global__ void fib(long long* out, const long long* in, long long n) {     \
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;         \
             i += (long long)gridDim.x * blockDim.x)                                         \
            out[i] = fib_value(in[i]);                                                       \
    }

// The source's heavy_op: an array of N values per element. The loops have
// constant bounds and indices, so after unrolling reg[] lives in registers.
template <int N>
__device__ void heavy(unsigned int* out, const unsigned int* in, long long n) {
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        unsigned int reg[N];
        reg[0] = in[e];
#pragma unroll
        for (int i = 1; i < N; ++i) reg[i] = reg[i - 1] * reg[i - 1] + 1u;
#pragma unroll
        for (int i = 0; i < N; ++i) reg[i] = (reg[i] * reg[i]) % 19u;
#pragma unroll
        for (int i = 0; i < N; ++i) reg[i] = reg[N - i - 1] * reg[i];
        unsigned int x = 0;
#pragma unroll
        for (int i = 0; i < N; ++i) x += reg[i];
        out[e] = x;
    }
}

#define INSTANTIATE_HEAVY(N) \
    extern "C" __global__ void heavy_##N(unsigned int* out, const unsigned int* in, long long n) { heavy<N>(out, in, n); }
