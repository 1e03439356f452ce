"""Probe kernels whose memory accesses are known by arithmetic: tests/test_emulator_access.py counts
them on the emulator, and .ci/access_vs_ncu.py runs the same source under Nsight Compute on a GPU."""

# Global memory: a copy reading x at a stride (1: coalesced), and one of 16 bytes a lane.
COPY = r"""
extern "C" __global__ void copy(float* out, const float* x, int n, int stride) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[(long long)i * stride];
}
extern "C" __global__ void copy4(float4* out, const float4* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i];
}
"""
