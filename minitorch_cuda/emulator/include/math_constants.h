// math_constants.h for the CPU emulator: the CUDART_ constants the kernels use.
#pragma once
#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_NAN_F __builtin_nanf("")
#define CUDART_INF __builtin_huge_val()
#define CUDART_NAN __builtin_nan("")
#define CUDART_PI_F 3.141592654f
#define CUDART_PI 3.1415926535897931e+0
#define CUDART_SQRT_2PI_F 2.506628275f
#define CUDART_L2E_F 1.442695041f
#define CUDART_LN2_F 0.693147181f
