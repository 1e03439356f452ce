// wgmma_tf32.cuh: Hopper's warpgroup MMA on TF32 operands in shared memory (sm_90a), for wgmma.cu
// and wgmma_tma.cu. A staged K-slice is K-major, 32 floats (one 128-byte row) per row of A or of
// B^T, in the 128-byte swizzle; a warpgroup (128 threads) multiplies its 64 rows of A by the whole
// B tile, 256 or 128 rows: a thread's accumulator array, 128 or 64 floats (ACC), says which.
#pragma once

// The 32-bit shared-memory address that mbarrier, TMA and wgmma instructions take. (Outside the
// sm_90a block below, so that the CPU emulator sees it in every file that includes this one and
// refuses the file as asynchronous copies, instead of building the kernels' empty stand-ins.)
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma exists only in sm_90a code

// A shared-memory matrix descriptor for a K-major tile with 128-byte rows, 128-byte swizzle.
__device__ __forceinline__ unsigned long long tile_descriptor(const void* tile) {
    const unsigned long long address = shared_address(tile);
    return ((address & 0x3FFFF) >> 4)  // start address, in 16-byte units
           | (1ull << 16)              // leading-dimension offset: unused by this layout
           | ((1024ull >> 4) << 32)    // stride offset: from one 8-row group to the next
           | (1ull << 62);             // swizzle mode 1: 128 bytes
}

#define WGMMA_D8(i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_D64(i) \
    WGMMA_D8(i), WGMMA_D8(i + 8), WGMMA_D8(i + 16), WGMMA_D8(i + 24), WGMMA_D8(i + 32), WGMMA_D8(i + 40), WGMMA_D8(i + 48), WGMMA_D8(i + 56)
#define WGMMA_REGS_64                                                                \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "         \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_REGS_128                                                                              \
    WGMMA_REGS_64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
                  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "    \
                  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, " \
                  "%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, "   \
                  "%125, %126, %127"

// d (64 x 256, this thread's 128 values) += A (64 x 8) * B^T (8 x 256), both from shared memory.
__device__ __forceinline__ void wgmma_tf32(float (&d)[128], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" WGMMA_REGS_128 "}, %128, %129, 1, 1, 1;\n"
                 : WGMMA_D64(0), WGMMA_D64(64)
                 : "l"(a), "l"(b));  // scale-d 1: accumulate; A and B not negated
}

// d (64 x 128, this thread's 64 values) += A (64 x 8) * B^T (8 x 128).
__device__ __forceinline__ void wgmma_tf32(float (&d)[64], unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" WGMMA_REGS_64 "}, %64, %65, 1, 1, 1;\n"
                 : WGMMA_D64(0)
                 : "l"(a), "l"(b));
}

// The same products with A's 64 x 8 slice in registers: a[0..3] hold A's elements (g, t),
// (g + 8, t), (g, t + 4), (g + 8, t + 4) of this warp's 16 rows (lane = 4 g + t), as float bits
// (the tensor cores read TF32 from them, as from shared memory). wgmma_tma.cu's N-major route.
__device__ __forceinline__ void wgmma_tf32(float (&d)[128], const unsigned* a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" WGMMA_REGS_128
                 "}, {%128, %129, %130, %131}, %132, 1, 1, 1;\n"
                 : WGMMA_D64(0), WGMMA_D64(64)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

__device__ __forceinline__ void wgmma_tf32(float (&d)[64], const unsigned* a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" WGMMA_REGS_64
                 "}, {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
                 : WGMMA_D64(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

#undef WGMMA_D8
#undef WGMMA_D64
#undef WGMMA_REGS_64
#undef WGMMA_REGS_128

// Keep the compiler from moving reads or writes of the accumulators across a point where the
// tensor cores may still be writing them (between a wgmma and the wait for it).
template <int ACC>
__device__ __forceinline__ void wgmma_pin(float (&d)[ACC]) {
#pragma unroll
    for (int i = 0; i < ACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d += A (64 x 32) * B^T (32 x 2 ACC) of one staged K-slice, a and b the tiles' first rows: one
// wgmma group of four k8 products, each 8 columns of K (32 bytes) further into the 128-byte rows.
// Committed, not waited for: the tensor cores read the tiles and write d until wgmma_wait.
template <int ACC>
__device__ __forceinline__ void wgmma_slice(float (&d)[ACC], const unsigned char* a, const unsigned char* b) {
    wgmma_pin(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_tf32(d, tile_descriptor(a + 32 * kk), tile_descriptor(b + 32 * kk));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// The same K-slice with A's 64 x 32 from registers (a[4 kk .. 4 kk + 3]: the kk-th k8 step, in the
// order above). The tensor cores read `a` until wgmma_wait: the next slice loads into other registers.
template <int ACC>
__device__ __forceinline__ void wgmma_slice(float (&d)[ACC], const unsigned (&a)[16], const unsigned char* b) {
    wgmma_pin(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_tf32(d, a + 4 * kk, tile_descriptor(b + 32 * kk));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Wait until at most IN_FLIGHT of this warpgroup's wgmma groups still run; d then holds the others'.
template <int IN_FLIGHT, int ACC>
__device__ __forceinline__ void wgmma_wait(float (&d)[ACC]) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(IN_FLIGHT) : "memory");
    wgmma_pin(d);
}

#endif
