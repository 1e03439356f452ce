// init.cu: random initialization on the device (stage 4 on; before, numpy + upload).
//   init_normal   out[i] = std * N(0, 1), counter-based: element i's value depends
//                 only on (seed, i), so the result is the same for any launch shape
//                 and needs no generator state in memory (the idea of cuRAND's
//                 Philox, here as a SplitMix64 hash and a Box-Muller transform).
__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

extern "C" __global__ void init_normal(float* out, int n, float std, unsigned int seed) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned long long h = splitmix64(((unsigned long long)seed << 32) ^ (unsigned long long)i);
    // Two 24-bit uniforms in (0, 1]; the +1 keeps log() away from zero.
    const float u1 = ((h >> 40) + 1) * (1.0f / 16777216.0f);
    const float u2 = ((h & 0xFFFFFFull) + 1) * (1.0f / 16777216.0f);
    out[i] = std * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
