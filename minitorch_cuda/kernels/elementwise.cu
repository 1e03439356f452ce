// elementwise.cu: one thread per element, every stage.
//   ew_add, ew_sub, ew_mul, ew_div   out = a (op) b, b broadcast by (i / b_div) % b_mod
//                                    (same shape: 1, n; bias row: 1, cols; column: cols, rows)
//   ew_add_relu                      out = relu(a + b), broadcast as ew_add (stage 12's bias and
//                                    ReLU after a tensor-core product, in place)
//   ew_affine                        out = alpha * a + beta      (scalar add/sub/mul, neg)
//   ew_rdiv                          out = s / a
//   ew_exp, ew_log, ew_relu          unary maps
//   ew_sigmoid                       stable: never evaluates exp of a positive number
//   ew_relu_backward                 out = grad * (x > 0)
//   ew_sigmoid_backward              out = grad * y * (1 - y)
//   ew_fill                          out = value
#define INDEX() const int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return

#define BINARY(name, expr)                                                      \
extern "C" __global__ void name(float* out, const float* a, const float* b,     \
                                int n, int b_div, int b_mod) {                 \
    INDEX();                                                                    \
    const float x = a[i];                                                       \
    const float y = b[(i / b_div) % b_mod];                                     \
    out[i] = (expr);                                                            \
}

BINARY(ew_add, x + y)
BINARY(ew_sub, x - y)
BINARY(ew_mul, x * y)
BINARY(ew_div, x / y)
BINARY(ew_add_relu, x + y > 0.0f ? x + y : 0.0f)

extern "C" __global__ void ew_affine(float* out, const float* a, float alpha, float beta, int n) {
    INDEX();
    out[i] = alpha * a[i] + beta;
}

extern "C" __global__ void ew_rdiv(float* out, const float* a, float s, int n) {
    INDEX();
    out[i] = s / a[i];
}

#define UNARY(name, expr)                                                       \
extern "C" __global__ void name(float* out, const float* a, int n) {           \
    INDEX();                                                                    \
    const float x = a[i];                                                       \
    out[i] = (expr);                                                            \
}

UNARY(ew_exp, expf(x))
UNARY(ew_log, logf(x))
UNARY(ew_relu, x > 0.0f ? x : 0.0f)

// 1 / (1 + e^-x) overflows e^-x for x << 0; for negative x use e^x / (1 + e^x).
UNARY(ew_sigmoid, x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x)))

extern "C" __global__ void ew_relu_backward(float* out, const float* grad, const float* x, int n) {
    INDEX();
    out[i] = x[i] > 0.0f ? grad[i] : 0.0f;
}

extern "C" __global__ void ew_sigmoid_backward(float* out, const float* grad, const float* y, int n) {
    INDEX();
    const float s = y[i];
    out[i] = grad[i] * s * (1.0f - s);
}

extern "C" __global__ void ew_fill(float* out, float value, int n) {
    INDEX();
    out[i] = value;
}
