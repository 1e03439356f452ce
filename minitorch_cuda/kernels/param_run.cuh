// param_run.cuh: the optimizer's elementwise work over several tensors as one run of elements,
// for the kernels that update every parameter of a model in one launch (stages 11 and 13).
//
//   struct ParamRun       up to PARAM_RUN_MAX tensors (p, g, v: parameter, gradient, RmsProp
//                         state), one after another: element e of the run is element
//                         e - end[t - 1] of tensor t, the first t with e < end[t]
//   run_sumsq<U>          a thread's sum of g^2 over its elements of the run, in order
//   run_clipped_step<U>   the clipped RmsProp or SGD step of each of its elements
//
// A thread takes elements first, first + step, ... of the run, U at a time, and issues the
// loads of all U before it uses any: it waits for memory once per U elements, not once per
// element and tensor. (A grid of 132 x 256 threads has about 7 of the protocol's 235,146
// parameters per thread, in 6 tensors: with U = 8 a single wait, where an element at a time
// and a loop per tensor waited 11 times, about a microsecond each.) Each element's arithmetic
// is that of optim.cu's kernels; only the order in which the sums of squares meet changes
// with the run's layout, as it does with the grid.
#pragma once

#define PARAM_RUN_MAX 16

struct ParamRun {
    float* p[PARAM_RUN_MAX];
    float* g[PARAM_RUN_MAX];
    float* v[PARAM_RUN_MAX];    // null for SGD
    long long end[PARAM_RUN_MAX];  // cumulative sizes
    int count;
};

// The tensor of run element e (e < the run's total).
__device__ __forceinline__ int run_tensor(const ParamRun& run, long long e) {
    int t = 0;
    while (e >= run.end[t]) ++t;
    return t;
}

__device__ __forceinline__ long long run_index(const ParamRun& run, int t, long long e) {
    return t == 0 ? e : e - run.end[t - 1];
}

template <int U>
__device__ __forceinline__ float run_sumsq(const ParamRun& run, long long first, long long step, float acc) {
    const long long total = run.end[run.count - 1];
    for (long long base = first; base < total; base += U * step) {
        float g[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long e = base + u * step;
            g[u] = 0.0f;
            if (e < total) {
                const int t = run_tensor(run, e);
                g[u] = run.g[t][run_index(run, t, e)];
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) acc += g[u] * g[u];  // zeros past the end add nothing
    }
    return acc;
}

// g *= factor (written back where keep_clipped and factor != 1); RmsProp where v is set:
// v = decay v + (1 - decay) g^2, p -= lr g / (sqrt(v) + eps); else SGD: p -= lr g.
template <int U>
__device__ __forceinline__ void run_clipped_step(const ParamRun& run, long long first, long long step, float factor,
                                                 float lr, float decay, float eps, bool keep_clipped) {
    const long long total = run.end[run.count - 1];
    for (long long base = first; base < total; base += U * step) {
        float *p[U], *g[U], *v[U];
        float gi[U], vi[U], pi[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {  // every load first
            const long long e = base + u * step;
            p[u] = nullptr;
            if (e < total) {
                const int t = run_tensor(run, e);
                const long long i = run_index(run, t, e);
                p[u] = run.p[t] + i;
                g[u] = run.g[t] + i;
                v[u] = run.v[t] ? run.v[t] + i : nullptr;
                gi[u] = *g[u];
                vi[u] = v[u] ? *v[u] : 0.0f;
                pi[u] = *p[u];
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (p[u] == nullptr) continue;
            float gu = gi[u];
            if (factor != 1.0f) {
                gu *= factor;
                if (keep_clipped) *g[u] = gu;
            }
            if (v[u]) {
                const float vu = decay * vi[u] + (1.0f - decay) * gu * gu;
                *v[u] = vu;
                *p[u] = pi[u] - lr * gu / (sqrtf(vu) + eps);
            } else {
                *p[u] = pi[u] - lr * gu;
            }
        }
    }
}
