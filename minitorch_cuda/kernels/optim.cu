// optim.cu: parameter updates and gradient clipping, one thread per element.
//   clip_scale     g *= max_norm / (norm + 1e-6) when norm > max_norm, where
//                  norm = sqrt(sum of the n_parts partial sums of squares); the
//                  norm never leaves the device (stage 1 on)
//   rmsprop_step   v = decay v + (1 - decay) g^2;  p -= lr g / (sqrt(v) + eps)
//   sgd_step       p -= lr g
extern "C" __global__ void clip_scale(float* g, const float* partials, int n_parts,
                                      float max_norm, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float total = 0.0f;
    for (int p = 0; p < n_parts; ++p) total += partials[p];  // a handful of parameters
    const float norm = sqrtf(total);
    if (norm > max_norm) g[i] *= max_norm / (norm + 1e-6f);
}

extern "C" __global__ void rmsprop_step(float* p, const float* g, float* v, float lr,
                                        float decay, float eps, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    const float vi = decay * v[i] + (1.0f - decay) * gi * gi;
    v[i] = vi;
    p[i] -= lr * gi / (sqrtf(vi) + eps);
}

extern "C" __global__ void sgd_step(float* p, const float* g, float lr, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    p[i] -= lr * g[i];
}
