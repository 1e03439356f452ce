// layout.cu: copies that change the memory layout, every stage.
//   strided_copy   out (contiguous) = in viewed through up to 4 dims of shape/strides;
//                  makes transposed views contiguous (materialized transposes, stages 0-2)
extern "C" __global__ void strided_copy(float* out, const float* in, int n,
                                        int d1, int d2, int d3,
                                        int s0, int s1, int s2, int s3) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // Peel the flat output index into 4-D coordinates (d0 is implied by n).
    int rest = i;
    const int i3 = rest % d3; rest /= d3;
    const int i2 = rest % d2; rest /= d2;
    const int i1 = rest % d1; rest /= d1;
    const int i0 = rest;
    out[i] = in[(long long)i0 * s0 + (long long)i1 * s1 + (long long)i2 * s2 + (long long)i3 * s3];
}
