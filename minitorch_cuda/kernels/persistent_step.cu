// persistent_step.cu: the whole training step of an MLP in one launch (stage 13).
//   persistent_step   forward, softmax cross-entropy, backward, global-norm clipping and
//                     the RmsProp or SGD update of every parameter, for a chain of
//                     FeedForward layers (each with a bias, then ReLU, Sigmoid or nothing)
//                     described by a device-side table; one block per multiprocessor, all
//                     resident at once, phases separated by grid barriers (grid_barrier.cuh)
// Four phases and three grid barriers, whatever the number of layers L (where the later layers'
// weights fit in shared memory; else see "wide layers" below):
//   forward 1   the first layer's products X W_1 in tiles and slices of k: job (tile, slice s)
//               writes its partial tile to the layer's scratch split[s] (k_splits slices, the
//               host's rule from the shapes)                                        barrier
//   rows        a block per row of the batch (from the grid's last block down), the row's
//               vectors and the later layers' staged weights in shared memory: the first
//               layer's partials summed in slice order, + b_1, act_1; the forward of every
//               later layer; the row's softmax cross-entropy and D_L = (softmax - target) / rows;
//               then D_{l-1} = (D_l W_l^T) * act_{l-1}'(A_{l-1}) down to D_1. Every A_l and
//               D_l of the row is also written to global memory, for the next phase  barrier
//   gradients   gW_l = A_{l-1}^T D_l in tiles, gb_l = column sums of D_l; each job's sum of
//               squares into its own slot of partials                                barrier
//   update      every block sums the partials in one fixed order: the global norm, the clip
//               factor max_norm / (norm + 1e-6) where norm > max_norm (as optim.cu's
//               clip_scale); then p, v of every parameter (optim.cu's formulas), all layers as
//               one run of elements (param_run.cuh)
// Wide layers (row_from > 1): where the later layers' weights do not fit in shared memory, every
// row's block would read them from L2, forward and backward (4 MB a row for three layers of 512,
// 512 MB a step at batch 128). Then the layers before row_from run as tiles instead, each phase
// across all blocks and reading each weight once a tile: 2 row_from + 1 grid barriers in all.
//   forward l   for l < row_from: act(A_{l-1} W_l + b_l) in tiles, no slices of k      barrier each
//   rows        from layer row_from on, as above, its input row read from A_{row_from - 1};
//               the deltas down to D_{row_from - 1}                                    barrier
//   backward l  for l = row_from - 1 down to 1: D_{l-1} = (D_l W_l^T) * act_{l-1}'(A_{l-1}) in
//               tiles                                                                  barrier each
//   gradients, update as above.
// The mean loss is known once the rows phase is done: block 0 writes it then, to `loss` and,
// where the launch has one, to the host's report (step_report.cuh). The host reads it there and
// queues the next step while this one still computes its gradients and update; the next launch's
// cost overlaps them instead of following them (chapter 21).
// Why rows: from the first layer's sums to D_1, a row of the batch needs nothing from any other
// row, so one block can carry it through every layer with no grid barrier; the first design
// (a barrier after each layer's forward and backward, 2L + 1 of them) paid 8 barriers of 1.85 us
// and the least a phase costs nine times (51 us a step on the H200, chapter 21). What rows
// costs instead: its products are matrix-vector products, a chain of dependent steps a row, and
// each row's block needs the weights of the layers after the first, forward and backward: it
// copies them into its shared memory at the kernel's start (142 KB with the biases for the
// protocol's 256 -> 128 -> 10), where they fit (the host's choice; else they are read in place).
// Every value is computed by one thread (or warp) in an order fixed by the shapes: the
// results are the same, bit for bit, for every grid size.
// The batch is read through a cursor (batch_cursor.cuh): every block reads it at its start,
// and block 0 moves it past the batch's rows at its end, when every block has passed the
// first grid barrier and so has read it. A graph replayed on the consecutive batches of one
// array then needs nothing from the host between steps but the launch (the host writes the
// cursor only where the next batch lies elsewhere, as at the start of an epoch).
// Built with -DPS_PHASE_CLOCK, the kernel takes one more argument, phase_ns, where block 0's
// thread 0 writes %globaltimer at its start, after every grid barrier and at its end (the
// phases' times as block 0 sees them: each includes the wait for the slowest block), then
// at the start of row 0 and after each of its steps in its block (the first layer's sum, or the
// row's input read, each later layer's forward, the loss, each backward), and last the SM clock
// cycles (clock64) from block 0's start to its end: phase_stamps(f) + 2 (L - f) + 4 values for
// L layers, f = row_from (2L + 6 where f = 1).
#include <cuda_pipeline.h>

#include "batch_cursor.cuh"
#include "block_reduce.cuh"
#include "grid_barrier.cuh"
#include "param_run.cuh"
#include "step_report.cuh"

#define PS_THREADS 256      // threads of a block
#define PS_BM 64            // tiles of PS_BM x PS_BN outputs (the first forward, the gradients),
#define PS_BN 32            //   a thread's 2 x 4 of them in registers
#define PS_BK 64            // the slice of k a tile stages in shared memory at once
#define PS_CHUNK 16         // the first forward's slices of k are whole chunks of PS_CHUNK
#define PS_ROW_FLOATS 2048  // a row's outputs of every layer (and its deltas) in shared memory
#define PS_MAX_LAYERS 16    // the layer table is copied into shared memory (PS_LAYER_BYTES a layer)
#define PS_LAYER_BYTES 104  // sizeof(PersistentLayer): 9 pointers and 8 ints

#define PS_WIDE_BK 128      // the wide layers' slices of k (Tile32x16)

// One buffer of shared memory, laid out by each phase in turn: a tile's operands, or a row.
#define PS_TILE_FLOATS (PS_WIDE_BK * (32 + 1) + PS_WIDE_BK * 16)  // the larger: Tile32x16's
#define PS_ROWS_FLOATS (2 * PS_ROW_FLOATS + PS_THREADS)
#define PS_SMEM_FLOATS (PS_TILE_FLOATS > PS_ROWS_FLOATS ? PS_TILE_FLOATS : PS_ROWS_FLOATS)

// The stamps of the phases with row_from = f: the start, after each of the 2 f + 1 grid barriers, the end.
__host__ __device__ __forceinline__ int phase_stamps(int f) { return 2 * f + 3; }

#ifdef PS_PHASE_CLOCK
#define PS_CLOCK_PARAM , unsigned long long* phase_ns
#define PS_CLOCK_ARG , phase_ns
__device__ __forceinline__ unsigned long long globaltimer_ns() {
#ifdef MINITORCH_CUDA_EMULATOR
    return __emu_globaltimer();  // the host's monotonic clock: the CPU's times, not a GPU's
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}
#define PS_STAMPS                \
    int stamp = 0;               \
    const long long cycles0 = clock64()
// block 0's SM clock cycles from its start to its end, after the row stamps: with the
// %globaltimer stamps, the clock's rate while the kernel ran
#define PS_CYCLES(n_layers, f)                                                                               \
    do {                                                                                                     \
        if (blockIdx.x == 0 && threadIdx.x == 0)                                                             \
            phase_ns[phase_stamps(f) + 2 * ((n_layers) - (f)) + 3] = (unsigned long long)(clock64() - cycles0); \
    } while (0)
#define PS_STAMP()                                                                   \
    do {                                                                             \
        if (blockIdx.x == 0 && threadIdx.x == 0) phase_ns[stamp] = globaltimer_ns(); \
        ++stamp;                                                                     \
    } while (0)
#define PS_ROW_STAMPS int row_stamp = 0
#define PS_ROW_STAMP()                                                                 \
    do {                                                                               \
        if (r == 0 && threadIdx.x == 0)                                                \
            phase_ns[phase_stamps(row_from) + row_stamp] = globaltimer_ns();           \
        ++row_stamp;                                                                   \
    } while (0)
#else
#define PS_CLOCK_PARAM
#define PS_CLOCK_ARG
#define PS_STAMPS
#define PS_STAMP()
#define PS_ROW_STAMPS
#define PS_ROW_STAMP()
#define PS_CYCLES(n_layers, f)
#endif

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_SIGMOID = 2 };

// One layer of the table that cuda/persistent_step.py packs: it reads the fields below, in their
// order, for its numpy dtype (pointers and ints only), and checks its size against PS_LAYER_BYTES.
struct PersistentLayer {
    float* w;       // n_in x n_out
    float* b;       // n_out
    float* gw;      // gradients, the same shapes
    float* gb;
    float* vw;      // RmsProp state (unused by SGD)
    float* vb;
    float* out;     // rows x n_out: act(A W + b), the logits for the last layer
    float* delta;   // rows x n_out: d loss / d (A W + b)
    float* split;   // k_splits x rows x n_out: the first layer's partial tiles (null for the others)
    int n_in, n_out;
    int act;        // ACT_*, applied to this layer's output
    int partial0;   // this layer's first slot in partials: its gW tiles, then its gb chunks
    int k_splits;   // the first layer: slices of k in its forward (1: one per tile); the others: 1
    int staged;     // a later layer: where its staged copy of w, then b, begins in the dynamic shared
                    // memory (in floats, a multiple of 4), or -1: the rows phase reads w and b in
                    // global memory instead
    int staged_ld;  // the staged copy's row stride: n_out rounded up to 4 q floats with q odd (16-byte
                    // rows; 8 consecutive rows' 16-byte chunks fall in distinct banks)
    int pad;        // the struct's 8-byte alignment
};
static_assert(sizeof(PersistentLayer) == PS_LAYER_BYTES, "PS_LAYER_BYTES is the layer table's stride");

__device__ __forceinline__ int cdiv(int n, int d) { return (n + d - 1) / d; }

__device__ __forceinline__ float activate(int act, float z) {
    if (act == ACT_RELU) return fmaxf(z, 0.0f);
    if (act == ACT_SIGMOID) return z >= 0.0f ? 1.0f / (1.0f + expf(-z)) : expf(z) / (1.0f + expf(z));
    return z;
}

// d act / dz times g, from the activation's output y (elementwise.cu's backward kernels).
__device__ __forceinline__ float activate_backward(int act, float g, float y) {
    if (act == ACT_RELU) return y > 0.0f ? g : 0.0f;
    if (act == ACT_SIGMOID) return g * y * (1.0f - y);
    return g;
}

// A tile's shape: BM x BN outputs, in KS groups of threads that each sum every KS-th k of a slice
// of BK (a group's thread t: TM x TN outputs, rows m0 + TM (t / TX) + i, columns n0 + TN (t % TX) + j,
// TX = BN / TN threads across); with KS > 1 the groups' sums are added in group order after the
// last slice, into the first group's registers.
template <int BM_, int BN_, int TM_, int TN_, int KS_ = 1, int BK_ = PS_BK>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, KS = KS_, BK = BK_, TX = BN / TN;
    static constexpr int GROUP = PS_THREADS / KS;  // threads of a group
    static_assert(GROUP * KS == PS_THREADS && (GROUP / TX) * TM == BM, "each group's threads cover the tile");
    static_assert(BM * BK % PS_THREADS == 0 && BN * BK % PS_THREADS == 0, "whole loads a thread");
    static_assert(BK * (BM + 1) + BK * BN <= PS_TILE_FLOATS && TM * TN * PS_THREADS <= PS_SMEM_FLOATS,
                  "the staged slice and the groups' sums fit the shared buffer");
};
// The first forward's and the gradients' tiles: 64 x 32, 2 x 4 a thread (one 16-byte load of B a k).
using Tile64x32 = Tile<PS_BM, PS_BN, 2, 4>;
// The wide layers' tiles: 32 x 16 in four groups of 64 threads, 2 x 4 a thread, slices of 128 k:
// four times the jobs of a Tile64x32, so that a batch of 128 rows and 512 outputs is 128 jobs for
// about as many multiprocessors, at a Tile64x32's three shared loads for 8 fmaf a k, and half its
// waits for memory (with one group of 2 x 1 a thread and slices of 64, three loads for 2 fmaf: on the
// H100 the 512 -> 512 forward of 128 rows took 12.7 us).
using Tile32x16 = Tile<32, 16, 2, 4, 4, PS_WIDE_BK>;

// C[m0.., n0..] += op(A) op(B) over k in [k_begin, k_end), a T::BM x T::BN tile, thread t's
// T::TM x T::TN outputs into acc (the first group's, where T::KS > 1). A is M x K (a[m K + k]), or
// K x M where TA (a[k M + m]); B is K x N (b[k N + n]), or N x K where TB (b[n K + k]: the
// backward's W^T). Slices of T::BK along k are staged in shared memory, each thread loading its
// share of A and B with consecutive threads on consecutive addresses; the next slice's loads are
// issued into registers before the current slice's products, so that its wait for memory overlaps
// them. With 2 x 4 outputs a thread each k costs it two scalar and one 16-byte shared load for
// 8 fmaf (a warp's loads are two broadcasts and one 128-byte row). Every thread of the block calls
// it (it synchronizes the block).
template <bool TA, bool TB = false, class T = Tile64x32>
__device__ __forceinline__ void tile_product(float (&acc)[T::TM][T::TN], float* smem, const float* a, const float* b,
                                             int M, int N, int K, int m0, int n0, int k_begin, int k_end) {
    constexpr int BM = T::BM, BN = T::BN, BK = T::BK, JA = BM * BK / PS_THREADS, JB = BK * BN / PS_THREADS;
    float(*as)[BM + 1] = reinterpret_cast<float(*)[BM + 1]>(smem);  // as[k][m]; +1: no bank conflicts
    float(*bs)[BN] = reinterpret_cast<float(*)[BN]>(smem + BK * (BM + 1));  // bs[k][n]
    const int group = threadIdx.x / T::GROUP, t = threadIdx.x % T::GROUP;
    const int tx = t % T::TX, ty = t / T::TX;
    float ra[JA], rb[JB];  // the slice in flight
    auto load = [&](int k0) {
#pragma unroll
        for (int j = 0; j < JA; ++j) {
            const int i = threadIdx.x + PS_THREADS * j;
            const int m = m0 + (TA ? i % BM : i / BK), k = k0 + (TA ? i / BM : i % BK);
            ra[j] = m < M && k < k_end ? a[TA ? (long long)k * M + m : (long long)m * K + k] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < JB; ++j) {
            const int i = threadIdx.x + PS_THREADS * j;
            const int n = n0 + (TB ? i / BK : i % BN), k = k0 + (TB ? i % BK : i / BN);
            rb[j] = k < k_end && n < N ? b[TB ? (long long)n * K + k : (long long)k * N + n] : 0.0f;
        }
    };
    auto store = [&]() {  // where element i goes does not depend on the slice
#pragma unroll
        for (int j = 0; j < JA; ++j) {
            const int i = threadIdx.x + PS_THREADS * j;
            if (TA) as[i / BM][i % BM] = ra[j];
            else as[i % BK][i / BK] = ra[j];
        }
#pragma unroll
        for (int j = 0; j < JB; ++j) {
            const int i = threadIdx.x + PS_THREADS * j;
            if (TB) bs[i % BK][i / BK] = rb[j];
            else bs[i / BN][i % BN] = rb[j];
        }
    };
#pragma unroll
    for (int i = 0; i < T::TM; ++i)
#pragma unroll
        for (int j = 0; j < T::TN; ++j) acc[i][j] = 0.0f;
    load(k_begin);
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        store();
        __syncthreads();
        if (k0 + BK < k_end) load(k0 + BK);  // in flight during the products below
        const int steps = min(BK, k_end - k0);  // no products of the zero padding
#pragma unroll 4
        for (int kk = group; kk < steps; kk += T::KS) {
            float av[T::TM], bv[T::TN];
#pragma unroll
            for (int i = 0; i < T::TM; ++i) av[i] = as[kk][T::TM * ty + i];
            if constexpr (T::TN == 4) {  // one 16-byte load
                const float4 bk = *reinterpret_cast<const float4*>(&bs[kk][4 * tx]);
                bv[0] = bk.x, bv[1] = bk.y, bv[2] = bk.z, bv[3] = bk.w;
            } else {
#pragma unroll
                for (int j = 0; j < T::TN; ++j) bv[j] = bs[kk][T::TN * tx + j];
            }
#pragma unroll
            for (int j = 0; j < T::TN; ++j)
#pragma unroll
                for (int i = 0; i < T::TM; ++i) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
    if constexpr (T::KS > 1) {  // the groups' sums, added in group order (the same bits on any grid)
        float* sums = smem + threadIdx.x;  // group g's value e of thread t at sums[(e KS + g) GROUP + t]
#pragma unroll
        for (int e = 0; e < T::TM * T::TN; ++e) sums[e * PS_THREADS] = acc[e / T::TN][e % T::TN];
        __syncthreads();
        if (group == 0) {
#pragma unroll
            for (int e = 0; e < T::TM * T::TN; ++e)
#pragma unroll
                for (int g = 1; g < T::KS; ++g) acc[e / T::TN][e % T::TN] += sums[e * PS_THREADS + g * T::GROUP];
        }
        __syncthreads();  // the buffer is the next tile's
    }
}

// acc's elements that lie inside C (M x N), each through epilogue(m, n, value).
template <class T = Tile64x32, class Epilogue>
__device__ __forceinline__ void each_output(const float (&acc)[T::TM][T::TN], int M, int N, int m0, int n0,
                                            Epilogue epilogue) {
    if (threadIdx.x >= T::GROUP) return;  // the other groups' sums were added into the first's
#pragma unroll
    for (int i = 0; i < T::TM; ++i)
#pragma unroll
        for (int j = 0; j < T::TN; ++j) {
            const int m = m0 + T::TM * (threadIdx.x / T::TX) + i, n = n0 + T::TN * (threadIdx.x % T::TX) + j;
            if (m < M && n < N) epilogue(m, n, acc[i][j]);
        }
}

// acc's elements that lie inside C (M x N) into c; returns the thread's sum of their squares.
__device__ __forceinline__ float store_tile(const float (&acc)[2][4], float* c, int M, int N, int m0, int n0) {
    float sumsq = 0.0f;
    each_output(acc, M, N, m0, n0, [&](int m, int n, float v) {
        c[(long long)m * N + n] = v;
        sumsq = fmaf(v, v, sumsq);
    });
    return sumsq;
}

// Slice s of k_splits covers the PS_CHUNK chunks [s c / S, (s + 1) c / S) of the c chunks of k:
// as even as whole chunks allow, and fixed by the shapes (so are the bits).
__device__ __forceinline__ int slice_begin(int s, int k_splits, int K) {
    return (int)((long long)s * cdiv(K, PS_CHUNK) / k_splits) * PS_CHUNK;
}

// forward 1: job (tile, s) writes its tile's sum over slice s of k to split[s] (rows x n_out).
__device__ __forceinline__ void forward_first(const PersistentLayer& layer, const float* x, int rows, float* smem) {
    const int N = layer.n_out, K = layer.n_in, S = layer.k_splits;
    const int tiles_n = cdiv(N, PS_BN), tiles = cdiv(rows, PS_BM) * tiles_n;
    for (int job = blockIdx.x; job < tiles * S; job += gridDim.x) {
        const int tile = job / S, s = job % S;
        const int m0 = tile / tiles_n * PS_BM, n0 = tile % tiles_n * PS_BN;
        float acc[2][4];
        tile_product<false>(acc, smem, x, layer.w, rows, N, K, m0, n0, slice_begin(s, S, K),
                            min(slice_begin(s + 1, S, K), K));
        store_tile(acc, layer.split + (long long)s * rows * N, rows, N, m0, n0);
    }
}

// forward l, a wide layer: out = act(in W + b) (rows x n_out), a Tile32x16 a job, k in one slice.
__device__ __forceinline__ void forward_tiles(const PersistentLayer& layer, const float* in, int rows, float* smem) {
    using T = Tile32x16;
    const int N = layer.n_out, K = layer.n_in, tiles_n = cdiv(N, T::BN);
    for (int job = blockIdx.x; job < cdiv(rows, T::BM) * tiles_n; job += gridDim.x) {
        const int m0 = job / tiles_n * T::BM, n0 = job % tiles_n * T::BN;
        float acc[T::TM][T::TN];
        tile_product<false, false, T>(acc, smem, in, layer.w, rows, N, K, m0, n0, 0, K);
        each_output<T>(acc, rows, N, m0, n0, [&](int m, int n, float z) {
            layer.out[(long long)m * N + n] = activate(layer.act, z + layer.b[n]);
        });
    }
}

// backward l, a wide layer: D_{l-1} = (D_l W_l^T) * act_{l-1}'(A_{l-1}) (rows x n_in), a Tile32x16 a job.
__device__ __forceinline__ void backward_tiles(const PersistentLayer& layer, const PersistentLayer& prev, int rows,
                                               float* smem) {
    using T = Tile32x16;
    const int N = layer.n_in, K = layer.n_out, tiles_n = cdiv(N, T::BN);
    for (int job = blockIdx.x; job < cdiv(rows, T::BM) * tiles_n; job += gridDim.x) {
        const int m0 = job / tiles_n * T::BM, n0 = job % tiles_n * T::BN;
        float acc[T::TM][T::TN];
        tile_product<false, true, T>(acc, smem, layer.delta, layer.w, rows, N, K, m0, n0, 0, K);
        each_output<T>(acc, rows, N, m0, n0, [&](int m, int n, float z) {
            const long long at = (long long)m * N + n;
            prev.delta[at] = activate_backward(prev.act, z, prev.out[at]);
        });
    }
}

// rows, the first layer: row r's partials in slice order, + bias, act, into out (shared) and
// the layer's out (global).
__device__ __forceinline__ void first_row(const PersistentLayer& layer, int r, int rows, float* out) {
    const int N = layer.n_out, S = layer.k_splits;
    const long long plane = (long long)rows * N;
    for (int n = threadIdx.x; n < N; n += PS_THREADS) {
        const float* p = layer.split + (long long)r * N + n;
        const float bias = layer.b[n];  // in flight with the partials
        float z = 0.0f;
        for (int s0 = 0; s0 < S; s0 += 8) {  // 8 loads in flight, summed in slice order
            float part[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) part[u] = p[min(s0 + u, S - 1) * plane];  // clamped: no branch
#pragma unroll
            for (int u = 0; u < 8; ++u) z += s0 + u < S ? part[u] : 0.0f;  // + 0: z unchanged
        }
        const float y = activate(layer.act, z + bias);
        out[n] = y;
        layer.out[(long long)r * N + n] = y;
    }
    __syncthreads();
}

// rows, a matrix-vector product: z_o = sum_i v_i W[o, i] for the n_out outputs o, W read at
// w[o * ld + i] (BY_ROW, the backward's W^T: a thread walks a row of W) or w[i * ld + o] (the
// forward's W: consecutive threads on consecutive outputs), then epilogue(o, z_o). Thread t
// takes output o = t % T of each pass of T outputs (T: a power of two from 32 to PS_THREADS, the
// fewest that cover n_out) and the i of group g = t / T (PS_THREADS / T groups, each a stretch of
// i starting at a multiple of 4); a thread sums its stretch in 4 running sums (i mod 4) for 4
// independent chains of fmaf, the groups' sums meet in red, in group order. Every weight is one
// shared-memory load for one fmaf (BY_ROW, one 16-byte load for four), from the staged copy,
// whose row stride keeps both directions free of bank conflicts. Where the weights were not
// staged, the same loads go to global memory.
template <bool BY_ROW, class Epilogue>
__device__ __forceinline__ void row_product(int n_out, int n_red, const float* w, int ld, const float* v, float* red,
                                            Epilogue epilogue) {
    int T = 32;
    while (T < n_out && T < PS_THREADS) T *= 2;
    const int G = PS_THREADS / T, g = threadIdx.x / T, c = threadIdx.x % T;
    const int quads = (n_red + 3) / 4;  // the groups' stretches start at multiples of 4
    const int i0 = 4 * (g * quads / G), i1 = min(4 * ((g + 1) * quads / G), n_red);
    // BY_ROW, a thread walks its own row: 16-byte loads where the rows allow them (the staged
    // copy's stride, 4 q with q odd, puts 8 rows' 16-byte chunks in distinct banks, where scalar
    // loads at that stride meet 4 to a bank). The same sums in the same order either way.
    const bool quad_loads = BY_ROW && ld % 4 == 0 && reinterpret_cast<unsigned long long>(w) % 16 == 0;
    for (int o0 = 0; o0 < n_out; o0 += T) {
        const int o = min(o0 + c, n_out - 1);  // clamped: every thread reaches the block barriers
        const float* wo = BY_ROW ? w + o * ld : w + o;
        const int step = BY_ROW ? 1 : ld;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int i = i0;
        if (quad_loads) {
#pragma unroll 2
            for (; i + 4 <= i1; i += 4) {
                const float4 w4 = *reinterpret_cast<const float4*>(wo + i);
                acc[0] = fmaf(v[i], w4.x, acc[0]);
                acc[1] = fmaf(v[i + 1], w4.y, acc[1]);
                acc[2] = fmaf(v[i + 2], w4.z, acc[2]);
                acc[3] = fmaf(v[i + 3], w4.w, acc[3]);
            }
        } else {
#pragma unroll 2
            for (; i + 4 <= i1; i += 4)
#pragma unroll
                for (int u = 0; u < 4; ++u) acc[u] = fmaf(v[i + u], wo[(i + u) * step], acc[u]);
        }
        for (; i < i1; ++i) acc[0] = fmaf(v[i], wo[i * step], acc[0]);
        red[threadIdx.x] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        __syncthreads();
        if (g == 0 && o0 + c < n_out) {
            float z = red[c];
            for (int h = 1; h < G; ++h) z += red[h * T + c];
            epilogue(o0 + c, z);
        }
        __syncthreads();
    }
}

// Where the rows phase reads a later layer's parameters: the staged copy (W's rows at a stride of
// staged_ld, then b) or W (row stride n_out) and b in global memory.
struct RowWeights {
    const float* w;
    const float* b;
    int ld;
};
__device__ __forceinline__ RowWeights row_weights(const PersistentLayer& layer, const float* staged) {
    if (layer.staged < 0) return RowWeights{layer.w, layer.b, layer.n_out};
    const float* w = staged + layer.staged;
    return RowWeights{w, w + layer.n_in * layer.staged_ld, layer.staged_ld};
}

// rows, a later layer: out = act(in W + b) for row r, into out (shared) and the layer's out.
__device__ __forceinline__ void forward_row(const PersistentLayer& layer, RowWeights w, int r, const float* in,
                                            float* out, float* red) {
    const int N = layer.n_out;
    row_product<false>(N, layer.n_in, w.w, w.ld, in, red, [&](int n, float z) {
        const float y = activate(layer.act, z + w.b[n]);
        out[n] = y;
        layer.out[(long long)r * N + n] = y;
    });
}

// rows, the loss: warp 0 takes row r's logits z (shared): the row's loss into row_loss[r], and
// its D = (softmax - target) / rows into d (shared) and the layer's delta, as
// softmax_xent_fused and xent_backward compute them.
__device__ __forceinline__ void loss_row(const PersistentLayer& last, const float* target, int r, int rows,
                                         const float* z, float* d, float* row_loss) {
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, cols = last.n_out;
        const float scale = 1.0f / rows;
        const float* t = target + (long long)r * cols;
        float m = -CUDART_INF_F;
        for (int c = lane; c < cols; c += 32) m = fmaxf(m, z[c]);
        m = warp_allreduce<MaxOp>(m);
        float s = 0.0f;
        for (int c = lane; c < cols; c += 32) s += expf(z[c] - m);
        s = warp_allreduce<SumOp>(s);
        const float log_s = logf(s);
        float loss = 0.0f;
        for (int c = lane; c < cols; c += 32) {
            const float zc = z[c] - m, tc = t[c];
            const float dc = scale * (expf(zc) / s - tc);
            d[c] = dc;
            last.delta[(long long)r * cols + c] = dc;
            loss -= tc * (zc - log_s);
        }
        loss = warp_allreduce<SumOp>(loss);
        if (lane == 0) row_loss[r] = loss;
    }
    __syncthreads();
}

// rows, backward through a layer: d_prev = (d W^T) * act_prev'(a_prev) for row r, into d_prev
// (shared) and the previous layer's delta.
__device__ __forceinline__ void backward_row(const PersistentLayer& layer, RowWeights w, const PersistentLayer& prev,
                                             int r, const float* d, const float* a_prev, float* d_prev, float* red) {
    const int K = layer.n_in;
    row_product<true>(K, layer.n_out, w.w, w.ld, d, red, [&](int j, float z) {
        const float v = activate_backward(prev.act, z, a_prev[j]);
        d_prev[j] = v;
        prev.delta[(long long)r * K + j] = v;
    });
}

// The rows phase's weights and biases (of the layers from row_from on) into this block's shared memory, each row of W at a stride
// of staged_ld floats, then b: asynchronous copies (cp.async), issued at the kernel's start so
// that they land while the block computes its first forward; the rows phase waits for them. A
// warp copies a row at a time, 16 bytes a copy where the rows allow it (n_out a multiple of 4, W
// and b 16-byte aligned), else 4.
__device__ __forceinline__ void stage_weights(const PersistentLayer* layers, int n_layers, int row_from,
                                              float* staged) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int l = row_from; l < n_layers; ++l) {
        const PersistentLayer& layer = layers[l];
        if (layer.staged < 0) continue;
        const int N = layer.n_out;
        const bool aligned = (reinterpret_cast<unsigned long long>(layer.w) |
                              reinterpret_cast<unsigned long long>(layer.b)) % 16 == 0;
        const int width = N % 4 == 0 && aligned ? 4 : 1;
        for (int j = warp; j <= layer.n_in; j += PS_THREADS / 32) {  // row n_in: the bias
            const float* src = j < layer.n_in ? layer.w + (long long)j * N : layer.b;
            for (int c = lane * width; c < N; c += 32 * width)
                __pipeline_memcpy_async(staged + layer.staged + j * layer.staged_ld + c, src + c, 4 * width);
        }
    }
    __pipeline_commit();
}

// The rows phase numbers the blocks from the last: row r's block is gridDim.x - 1 - r (grid-stride),
// while the first forward's jobs go to the first blocks. With jobs for about half the
// multiprocessors (persistent_step.SPLIT_JOBS), the blocks that stage the weights for the rows
// are not those computing the first forward, and the copies overlap its products (on the H100,
// both on the same blocks, the copies added 6 us to the first forward's phase).
__device__ __forceinline__ int row_block() { return gridDim.x - 1 - blockIdx.x; }

// rows: a block per row, grid-stride. Layer l's output and delta lie at the same offset of
// acts and deltas (the widths of the layers before it, summed: at most PS_ROW_FLOATS in all,
// the host's rule). The row starts from the first layer's partial sums (row_from = 1), or from
// its input to layer row_from, A_{row_from - 1}, which the wide phases wrote; its deltas go down
// to D_{row_from - 1}.
__device__ __forceinline__ void rows_phase(const PersistentLayer* layers, int n_layers, int row_from,
                                           const float* target, int rows, float* row_loss, float* smem,
                                           const float* staged PS_CLOCK_PARAM) {
    float* acts = smem;
    float* deltas = smem + PS_ROW_FLOATS;
    float* red = smem + 2 * PS_ROW_FLOATS;
    __pipeline_wait_prior(0);  // this thread's staged copies have landed
    __syncthreads();           // and every thread's
    for (int r = row_block(); r < rows; r += gridDim.x) {
        PS_ROW_STAMPS;
        PS_ROW_STAMP();
        int offset = 0;  // layer l's, as l goes up
        for (int l = 0; l < row_from - 1; ++l) offset += layers[l].n_out;
        if (row_from == 1) {
            first_row(layers[0], r, rows, acts);
        } else {  // the row's input to layer row_from
            const PersistentLayer& in = layers[row_from - 1];
            for (int n = threadIdx.x; n < in.n_out; n += PS_THREADS) acts[offset + n] = in.out[(long long)r * in.n_out + n];
            __syncthreads();
        }
        PS_ROW_STAMP();
        for (int l = row_from; l < n_layers; ++l) {
            const int next = offset + layers[l - 1].n_out;
            forward_row(layers[l], row_weights(layers[l], staged), r, acts + offset, acts + next, red);
            PS_ROW_STAMP();
            offset = next;
        }
        loss_row(layers[n_layers - 1], target, r, rows, acts + offset, deltas + offset, row_loss);
        PS_ROW_STAMP();
        for (int l = n_layers - 1; l >= row_from; --l) {
            const int below = offset - layers[l - 1].n_out;
            backward_row(layers[l], row_weights(layers[l], staged), layers[l - 1], r, deltas + offset, acts + below,
                         deltas + below, red);
            PS_ROW_STAMP();
            offset = below;
        }
    }
}

// gradients: per layer, its gW tiles then its gb chunks, as one list of jobs over the layers,
// job j in slot j of partials (its sum of squares): the host lays the slots out
// (persistent_step.layer_jobs), each layer's from its partial0, n_partials in all.
__device__ __forceinline__ void gradients(const PersistentLayer* layers, int n_layers, const float* x, int rows,
                                          float* partials, int n_partials, float* smem) {
    for (int job = blockIdx.x; job < n_partials; job += gridDim.x) {
        int l = n_layers - 1;
        while (layers[l].partial0 > job) --l;  // the job's layer: the last to begin at or before it
        const PersistentLayer& layer = layers[l];
        const int local = job - layer.partial0;
        const int n_in = layer.n_in, n_out = layer.n_out, tiles_n = cdiv(n_out, PS_BN);
        const int gw_tiles = cdiv(n_in, PS_BM) * tiles_n;
        float sumsq = 0.0f;
        if (local < gw_tiles) {  // gW = A^T D: n_in x n_out, summed over the rows
            const int m0 = local / tiles_n * PS_BM, n0 = local % tiles_n * PS_BN;
            float acc[2][4];
            tile_product<true>(acc, smem, l == 0 ? x : layers[l - 1].out, layer.delta, n_in, n_out, rows, m0, n0, 0,
                               rows);
            sumsq = store_tile(acc, layer.gw, n_in, n_out, m0, n0);
        } else {  // gb: a thread per column, the rows in order
            const int n = (local - gw_tiles) * PS_THREADS + threadIdx.x;
            if (n < n_out) {
                float g = 0.0f;
                for (int r0 = 0; r0 < rows; r0 += 16) {  // 16 loads in flight
                    float v[16];
#pragma unroll
                    for (int u = 0; u < 16; ++u) v[u] = layer.delta[(long long)min(r0 + u, rows - 1) * n_out + n];
#pragma unroll
                    for (int u = 0; u < 16; ++u) g += r0 + u < rows ? v[u] : 0.0f;
                }
                layer.gb[n] = g;
                sumsq = g * g;
            }
        }
        sumsq = block_reduce_shuffle<SumOp>(sumsq, smem);  // after the tile's last block barrier
        if (threadIdx.x == 0) partials[job] = sumsq;
    }
}

// The clip factor from every gradient tile's sum of squares, summed by each block in the
// same order (so every block gets the same factor without another barrier).
__device__ __forceinline__ float clip_factor(const float* partials, int n_partials, float max_norm) {
    __shared__ float smem[33];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n_partials; i += PS_THREADS) acc += partials[i];
    const float norm = sqrtf(block_reduce_shuffle<SumOp>(acc, smem));
    return norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}

// Every parameter's step, the layers' weights and biases as runs of elements (param_run.cuh),
// PARAM_RUN_MAX / 2 layers to a run: a thread's loads of all of them are in flight at once.
__device__ __forceinline__ void update(const PersistentLayer* layers, int n_layers, float factor, int rmsprop, float lr,
                                       float decay, float eps) {
    __shared__ ParamRun run;
    const long long first = blockIdx.x * PS_THREADS + threadIdx.x, step = gridDim.x * PS_THREADS;
    for (int l0 = 0; l0 < n_layers; l0 += PARAM_RUN_MAX / 2) {
        __syncthreads();  // the previous run is done with
        if (threadIdx.x == 0) {
            long long end = 0;
            run.count = 0;
            for (int l = l0; l < min(n_layers, l0 + PARAM_RUN_MAX / 2); ++l) {
                const PersistentLayer& layer = layers[l];
                const int r = run.count;
                run.p[r] = layer.w, run.g[r] = layer.gw, run.v[r] = rmsprop ? layer.vw : nullptr;
                run.end[r] = end += (long long)layer.n_in * layer.n_out;
                run.p[r + 1] = layer.b, run.g[r + 1] = layer.gb, run.v[r + 1] = rmsprop ? layer.vb : nullptr;
                run.end[r + 1] = end += layer.n_out;
                run.count += 2;
            }
        }
        __syncthreads();
        run_clipped_step<8>(run, first, step, factor, lr, decay, eps, false);
    }
}

// Grid: one block per multiprocessor at most (every block must be resident: the grid
// barriers wait for all of them); block: PS_THREADS. rows <= the rows the out/delta buffers
// hold; n_layers <= PS_MAX_LAYERS; row_from: the first layer of the rows phase (1..n_layers - 1;
// the layers before it are wide: see the top); partials: every layer's gW tiles and gb chunks
// (n_partials slots); row_loss: rows;
// batch: where this step's rows lie, moved past them at the end; report: the host's word for
// the loss (step_report.cuh), or null;
// phase_ns (PS_PHASE_CLOCK only): phase_stamps(row_from) + 2 (L - row_from) + 4 values (see the top);
// dynamic shared memory: the staged weights (each rows-phase layer's n_in + 1 rows of staged_ld floats
// from its offset).
extern "C" __global__ void __launch_bounds__(PS_THREADS, 1) persistent_step(
    const PersistentLayer* layers, int n_layers, int row_from, BatchCursor* batch, int rows, float* row_loss,
    float* partials, int n_partials, float* loss, unsigned long long* report, GridBarrier* barrier, int rmsprop,
    float lr, float decay, float eps, float max_norm PS_CLOCK_PARAM) {
    __shared__ __align__(16) float smem[PS_SMEM_FLOATS];
    // The layer table in shared memory: the phases read its fields at every step of a row and
    // after every grid barrier, and read from global memory they were a wait on the path of each
    // (on the H100 the copy took the rows phase from 18.2 to 16.7 us).
    __shared__ __align__(16) PersistentLayer table[PS_MAX_LAYERS];
    extern __shared__ float4 staged4[];  // the later layers' weights, where the host staged them (16-byte aligned)
    float* const staged = reinterpret_cast<float*>(staged4);
    PS_STAMPS;
    PS_STAMP();
    for (int i = threadIdx.x; i < n_layers * (int)(sizeof(PersistentLayer) / 4); i += PS_THREADS)
        reinterpret_cast<int*>(table)[i] = reinterpret_cast<const int*>(layers)[i];
    __syncthreads();
    layers = table;
    const float* const x = batch->x;  // before the first barrier, in every block (see the top)
    const float* const target = batch->target;
    // Only blocks that carry a row read the staged weights; no block writes a weight before the
    // update, after the third grid barrier.
    if (row_block() < rows) stage_weights(layers, n_layers, row_from, staged);
    if (row_from == 1) {
        forward_first(layers[0], x, rows, smem);
        grid_barrier(barrier);
        PS_STAMP();
    } else {
        for (int l = 0; l < row_from; ++l) {
            forward_tiles(layers[l], l == 0 ? x : layers[l - 1].out, rows, smem);
            grid_barrier(barrier);
            PS_STAMP();
        }
    }
    rows_phase(layers, n_layers, row_from, target, rows, row_loss, smem, staged PS_CLOCK_ARG);
    grid_barrier(barrier);
    PS_STAMP();
    if (blockIdx.x == 0 && threadIdx.x < 32) {  // the mean loss: each lane's rows in order, then a butterfly
        float total = 0.0f;
        for (int r = threadIdx.x; r < rows; r += 32) total += row_loss[r];
        total = warp_allreduce<SumOp>(total);
        if (threadIdx.x == 0) {
            const float mean = (1.0f / rows) * total;  // softmax_xent_fused: scale * sum
            loss[0] = mean;
            report_loss(report, mean);
        }
    }
    for (int l = row_from - 1; l >= 1; --l) {
        backward_tiles(layers[l], layers[l - 1], rows, smem);
        grid_barrier(barrier);
        PS_STAMP();
    }
    gradients(layers, n_layers, x, rows, partials, n_partials, smem);
    grid_barrier(barrier);
    PS_STAMP();
    const float factor = clip_factor(partials, n_partials, max_norm);
    update(layers, n_layers, factor, rmsprop, lr, decay, eps);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        // Every block read the cursor before the first barrier: moving it now races with none.
        batch->x = x + (long long)rows * layers[0].n_in;
        batch->target = target + (long long)rows * layers[n_layers - 1].n_out;
    }
    PS_STAMP();
    PS_CYCLES(n_layers, row_from);
}
