// gather.cu: row selection by an index list (stage 2 on; before, one copy per row).
//   gather_rows       out[r, :] = in[idx[r], :]
//   scatter_add_rows  out[idx[r], :] += grad[r, :]   (backward of gather; atomics for repeats)
extern "C" __global__ void gather_rows(float* out, const float* in, const int* idx,
                                       int rows, int row_len) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * row_len) return;
    const int r = i / row_len, c = i % row_len;
    out[i] = in[(long long)idx[r] * row_len + c];
}

extern "C" __global__ void scatter_add_rows(float* out, const float* grad, const int* idx,
                                            int rows, int row_len) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * row_len) return;
    const int r = i / row_len, c = i % row_len;
    atomicAdd(&out[(long long)idx[r] * row_len + c], grad[i]);
}
