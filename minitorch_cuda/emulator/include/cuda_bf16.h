// cuda_bf16.h for the CPU emulator: bfloat16 storage and round-to-nearest-even conversions.
#pragma once
#include <string.h>

struct __nv_bfloat16 {
    unsigned short x;
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
    unsigned bits;
    __builtin_memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(unsigned short)((bits >> 16) | 0x40)};  // NaN stays NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return __nv_bfloat16{(unsigned short)(bits >> 16)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) {
    const unsigned bits = unsigned(h.x) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
