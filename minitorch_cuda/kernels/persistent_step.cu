// persistent_step.cu: the whole training step of an MLP in one launch (stage 13).
//   persistent_step   forward, softmax cross-entropy, backward, global-norm clipping and
//                     the RmsProp or SGD update of every parameter, for a chain of
//                     FeedForward layers (each with a bias, then ReLU, Sigmoid or nothing)
//                     described by a device-side table; one block per multiprocessor, all
//                     resident at once, phases separated by grid barriers (grid_barrier.cuh)
// Phases, for L layers (2L + 1 grid barriers, and one more per split layer):
//   forward l = 1..L     A_l = act_l(A_{l-1} W_l + b_l), A_0 = x          barrier after each
//                        split layers (k_splits > 1, a long k over few tiles: the host's rule,
//                        from the shapes alone): each job (tile, slice of k in whole PS_TILE_K
//                        chunks) writes its partial tile to the layer's scratch, barrier, then
//                        each element sums its k_splits partials in slice order, + b_l, act_l
//   loss                 a warp per row: softmax, the row's cross-entropy, and
//                        D_L = (softmax - target) / rows                   barrier
//   backward l = L..1    gW_l = A_{l-1}^T D_l, gb_l = column sums of D_l, and (l > 1)
//                        D_{l-1} = (D_l W_l^T) * act_{l-1}'(A_{l-1}); the sum of squares
//                        of each gradient tile into its own slot of partials   barrier after each
//   update               every block sums the partials in one fixed order: the global norm,
//                        the clip factor max_norm / (norm + 1e-6) where norm > max_norm (as
//                        optim.cu's clip_scale); then p, v of every parameter (optim.cu's
//                        formulas), all layers as one run of elements (param_run.cuh);
//                        block 0 writes the mean loss
// Work is split into jobs of fixed shape (PS_TILE x PS_TILE output tiles, PS_THREADS columns
// of a bias gradient, a row of the loss) handed to blocks grid-stride, and every value is
// computed by one thread (or warp) in a fixed order: the results are the same, bit for
// bit, for every grid size. Sums over k run in order, with fmaf, as matmul_regtiled's do.
// The batch is read through a cursor (batch_cursor.cuh): every block reads it at its start,
// and block 0 moves it past the batch's rows at its end, when every block has passed the
// first grid barrier and so has read it. A graph replayed on the consecutive batches of one
// array then needs nothing from the host between steps but the launch (the host writes the
// cursor only where the next batch lies elsewhere, as at the start of an epoch).
// Built with -DPS_PHASE_CLOCK, the kernel takes one more argument, phase_ns, where block 0's
// thread 0 writes %globaltimer at its start, after every grid barrier and at its end (the
// phases' times as block 0 sees them: each includes the wait for the slowest block).
#include "batch_cursor.cuh"
#include "block_reduce.cuh"
#include "grid_barrier.cuh"
#include "param_run.cuh"

#define PS_THREADS 256  // threads of a block: one per element of a PS_TILE x PS_TILE tile
#define PS_TILE 16    // output tiles of PS_TILE x PS_TILE
#define PS_TILE_K 64  // the slice of k staged in shared memory at once (a multiple of PS_TILE)

#ifdef PS_PHASE_CLOCK
#define PS_CLOCK_PARAM , unsigned long long* phase_ns
__device__ __forceinline__ unsigned long long globaltimer_ns() {
#ifdef MINITORCH_CUDA_EMULATOR
    return __emu_globaltimer();  // the host's monotonic clock: the CPU's times, not a GPU's
#else
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}
#define PS_STAMPS int stamp = 0
#define PS_STAMP()                                                                   \
    do {                                                                             \
        if (blockIdx.x == 0 && threadIdx.x == 0) phase_ns[stamp] = globaltimer_ns(); \
        ++stamp;                                                                     \
    } while (0)
#else
#define PS_CLOCK_PARAM
#define PS_STAMPS
#define PS_STAMP()
#endif

enum { ACT_NONE = 0, ACT_RELU = 1, ACT_SIGMOID = 2 };

// One layer as cuda/persistent_step.py packs it (96 bytes, the same field order).
struct PersistentLayer {
    float* w;       // n_in x n_out
    float* b;       // n_out
    float* gw;      // gradients, the same shapes
    float* gb;
    float* vw;      // RmsProp state (unused by SGD)
    float* vb;
    float* out;     // rows x n_out: act(A W + b), the logits for the last layer
    float* delta;   // rows x n_out: d loss / d (A W + b)
    float* split;   // k_splits x rows x n_out: the forward's partial tiles (null where k_splits is 1)
    int n_in, n_out;
    int act;        // ACT_*, applied to this layer's output
    int partial0;   // this layer's first slot in partials: its gW tiles, then its gb chunks
    int k_splits;   // slices of k in the forward (1: one job per tile, no scratch)
};

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

// Thread t's element (m0 + t / PS_TILE, n0 + t % PS_TILE) of C = op(A) op(B), C M x N with
// inner size K, summed over k in [k_begin, k_end) (k_begin a multiple of PS_TILE_K); op
// transposes A (stored K x M) where ta, B (stored N x K) where tb. Slices of
// PS_TILE_K along k are staged in shared memory, each thread loading PS_TILE_K / PS_TILE
// elements of each operand with consecutive threads on consecutive addresses: a few long
// slices, so that few waits for memory and block barriers lie on the path of a long k (784).
// The next slice's loads are issued into registers before the current slice's products, so
// its wait for memory overlaps them (the sums, and so the bits, are those of one slice after
// another). Every thread of the block calls it (it synchronizes the block).
__device__ __forceinline__ float tile_product(const float* a, const float* b, int M, int N, int K, bool ta, bool tb,
                                              int m0, int n0, int k_begin, int k_end) {
    constexpr int J = PS_TILE_K / PS_TILE;  // elements of each operand a thread stages per slice
    __shared__ float as[PS_TILE][PS_TILE_K + 1];  // as[m][k]; +1: no bank conflicts when written transposed
    __shared__ float bs[PS_TILE_K][PS_TILE + 1];  // bs[k][n]
    const int tx = threadIdx.x % PS_TILE, ty = threadIdx.x / PS_TILE;
    float ra[J], rb[J];  // the slice in flight
    auto load = [&](int k0) {
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int i = threadIdx.x + PS_THREADS * j;  // element i of a slice of PS_TILE x PS_TILE_K
            const int along = i % PS_TILE_K, across = i / PS_TILE_K;  // k-contiguous storage
            const int fast = i % PS_TILE, slow = i / PS_TILE;          // m- or n-contiguous storage
            if (!ta) {
                const int m = m0 + across, k = k0 + along;
                ra[j] = m < M && k < k_end ? a[m * K + k] : 0.0f;
            } else {
                const int m = m0 + fast, k = k0 + slow;
                ra[j] = m < M && k < k_end ? a[k * M + m] : 0.0f;
            }
            if (!tb) {
                const int n = n0 + fast, k = k0 + slow;
                rb[j] = k < k_end && n < N ? b[k * N + n] : 0.0f;
            } else {
                const int n = n0 + across, k = k0 + along;
                rb[j] = k < k_end && n < N ? b[n * K + k] : 0.0f;
            }
        }
    };
    auto store = [&]() {  // where element i goes does not depend on the slice
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int i = threadIdx.x + PS_THREADS * j;
            const int along = i % PS_TILE_K, across = i / PS_TILE_K;
            const int fast = i % PS_TILE, slow = i / PS_TILE;
            if (!ta) as[across][along] = ra[j];
            else as[fast][slow] = ra[j];
            if (!tb) bs[slow][fast] = rb[j];
            else bs[along][across] = rb[j];
        }
    };
    float acc = 0.0f;
    load(k_begin);
    for (int k0 = k_begin; k0 < k_end; k0 += PS_TILE_K) {
        store();
        __syncthreads();
        if (k0 + PS_TILE_K < k_end) load(k0 + PS_TILE_K);  // in flight during the products below
        const int steps = min(PS_TILE_K, k_end - k0);  // no products of the zero padding
        for (int kk = 0; kk < steps; ++kk) acc = fmaf(as[ty][kk], bs[kk][tx], acc);
        __syncthreads();
    }
    return acc;
}

__device__ __forceinline__ void forward_layer(const PersistentLayer& layer, const float* in, int rows) {
    const int N = layer.n_out, tiles_n = cdiv(N, PS_TILE), tiles = cdiv(rows, PS_TILE) * tiles_n;
    for (int job = blockIdx.x; job < tiles; job += gridDim.x) {
        const int m0 = job / tiles_n * PS_TILE, n0 = job % tiles_n * PS_TILE;
        const float acc = tile_product(in, layer.w, rows, N, layer.n_in, false, false, m0, n0, 0, layer.n_in);
        const int m = m0 + threadIdx.x / PS_TILE, n = n0 + threadIdx.x % PS_TILE;
        if (m < rows && n < N) layer.out[m * N + n] = activate(layer.act, acc + layer.b[n]);
    }
}

// Slice s of k_splits covers the PS_TILE_K chunks [s c / S, (s + 1) c / S) of the c chunks of
// k: as even as whole chunks allow, and fixed by the shapes (so are the bits).
__device__ __forceinline__ int slice_begin(int s, int k_splits, int K) {
    return (int)((long long)s * cdiv(K, PS_TILE_K) / k_splits) * PS_TILE_K;
}

// A split layer's first half: job (tile, s) writes its tile's sum over slice s of k to split[s].
__device__ __forceinline__ void forward_slices(const PersistentLayer& layer, const float* in, int rows) {
    const int N = layer.n_out, K = layer.n_in, S = layer.k_splits;
    const int tiles_n = cdiv(N, PS_TILE), tiles = cdiv(rows, PS_TILE) * tiles_n;
    for (int job = blockIdx.x; job < tiles * S; job += gridDim.x) {
        const int tile = job / S, s = job % S;
        const int m0 = tile / tiles_n * PS_TILE, n0 = tile % tiles_n * PS_TILE;
        const int k_end = min(slice_begin(s + 1, S, K), K);
        const float acc = tile_product(in, layer.w, rows, N, K, false, false, m0, n0, slice_begin(s, S, K), k_end);
        const int m = m0 + threadIdx.x / PS_TILE, n = n0 + threadIdx.x % PS_TILE;
        if (m < rows && n < N) layer.split[(s * rows + m) * N + n] = acc;
    }
}

// Its second half, after a barrier: each element's partials in slice order, + bias, act.
__device__ __forceinline__ void forward_sum(const PersistentLayer& layer, int rows) {
    const int N = layer.n_out, n_out = rows * N;
    for (int i = blockIdx.x * PS_THREADS + threadIdx.x; i < n_out; i += gridDim.x * PS_THREADS) {
        float acc = layer.split[i];
        for (int s = 1; s < layer.k_splits; ++s) acc += layer.split[s * n_out + i];
        layer.out[i] = activate(layer.act, acc + layer.b[i % N]);
    }
}

// A warp per row: the row's loss into row_loss, and D = scale * (softmax - target), as
// softmax_xent_fused and xent_backward compute them. The loop runs over the block's groups
// of PS_THREADS / 32 rows (grid-stride), the same trip count in every warp, and a warp past
// the last row computes row rows - 1 without storing it: the shuffles never sit in
// divergent code (which made ptxas spill the convergence-barrier registers).
__device__ __forceinline__ void loss_rows(const PersistentLayer& last, const float* target, int rows, float* row_loss) {
    const int lane = threadIdx.x & 31, per_block = PS_THREADS / 32, cols = last.n_out;
    const float scale = 1.0f / rows;
    for (int first = blockIdx.x * per_block; first < rows; first += gridDim.x * per_block) {
        const int row = first + threadIdx.x / 32, safe = min(row, rows - 1);
        const bool mine = row < rows;
        const float* z = last.out + safe * cols;
        const float* t = target + safe * cols;
        float* d = last.delta + safe * cols;
        float m = -CUDART_INF_F;
        for (int c0 = 0; c0 < cols; c0 += 32) m = fmaxf(m, c0 + lane < cols ? z[c0 + lane] : -CUDART_INF_F);
        m = warp_allreduce<MaxOp>(m);
        float s = 0.0f;
        for (int c0 = 0; c0 < cols; c0 += 32) s += c0 + lane < cols ? expf(z[c0 + lane] - m) : 0.0f;
        s = warp_allreduce<SumOp>(s);
        const float log_s = logf(s);
        float loss = 0.0f;
        for (int c0 = 0; c0 < cols; c0 += 32) {
            const int c = c0 + lane;
            if (c < cols) {
                const float zc = z[c] - m;
                if (mine) d[c] = scale * (expf(zc) / s - t[c]);
                loss -= t[c] * (zc - log_s);
            }
        }
        loss = warp_allreduce<SumOp>(loss);
        if (mine && lane == 0) row_loss[row] = loss;
    }
}

// Layer l's gradients and the delta of the layer before it (prev null for the first layer),
// as one list of jobs: gW tiles, gb chunks, then tiles of the previous delta.
__device__ __forceinline__ void backward_layer(const PersistentLayer& layer, const PersistentLayer* prev, const float* in, int rows,
                               float* partials) {
    __shared__ float smem[33];
    const int n_in = layer.n_in, n_out = layer.n_out, tiles_n = cdiv(n_out, PS_TILE);
    const int gw_tiles = cdiv(n_in, PS_TILE) * tiles_n, gb_chunks = cdiv(n_out, PS_THREADS);
    const int in_tiles_n = cdiv(n_in, PS_TILE);
    const int jobs = gw_tiles + gb_chunks + (prev ? cdiv(rows, PS_TILE) * in_tiles_n : 0);
    for (int job = blockIdx.x; job < jobs; job += gridDim.x) {
        if (job < gw_tiles) {  // gW = A^T D: n_in x n_out, summed over the rows
            const int m0 = job / tiles_n * PS_TILE, n0 = job % tiles_n * PS_TILE;
            const float g = tile_product(in, layer.delta, n_in, n_out, rows, true, false, m0, n0, 0, rows);
            const int m = m0 + threadIdx.x / PS_TILE, n = n0 + threadIdx.x % PS_TILE;
            const bool inside = m < n_in && n < n_out;
            if (inside) layer.gw[m * n_out + n] = g;
            const float sumsq = block_reduce_shuffle<SumOp>(inside ? g * g : 0.0f, smem);
            if (threadIdx.x == 0) partials[layer.partial0 + job] = sumsq;
        } else if (job < gw_tiles + gb_chunks) {  // gb: a thread per column, the rows in order
            const int n = (job - gw_tiles) * PS_THREADS + threadIdx.x;
            float g = 0.0f;
            if (n < n_out) {
                for (int r = 0; r < rows; ++r) g += layer.delta[r * n_out + n];
                layer.gb[n] = g;
            }
            const float sumsq = block_reduce_shuffle<SumOp>(g * g, smem);
            if (threadIdx.x == 0) partials[layer.partial0 + job] = sumsq;
        } else {  // D_prev = (D W^T) * act'(A): rows x n_in
            const int tile = job - gw_tiles - gb_chunks;
            const int m0 = tile / in_tiles_n * PS_TILE, n0 = tile % in_tiles_n * PS_TILE;
            const float g = tile_product(layer.delta, layer.w, rows, n_in, n_out, false, true, m0, n0, 0, n_out);
            const int m = m0 + threadIdx.x / PS_TILE, n = n0 + threadIdx.x % PS_TILE;
            if (m < rows && n < n_in) {
                const int i = m * n_in + n;
                prev->delta[i] = activate_backward(prev->act, g, prev->out[i]);
            }
        }
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
// hold; partials: every layer's gW tiles and gb chunks (n_partials slots); row_loss: rows;
// batch: where this step's rows lie, moved past them at the end;
// phase_ns (PS_PHASE_CLOCK only): 2 + the grid barriers, 2L + 2 + the split layers.
extern "C" __global__ void __launch_bounds__(PS_THREADS) persistent_step(
    const PersistentLayer* layers, int n_layers, BatchCursor* batch, int rows, float* row_loss,
    float* partials, int n_partials, float* loss, GridBarrier* barrier, int rmsprop, float lr, float decay, float eps,
    float max_norm PS_CLOCK_PARAM) {
    PS_STAMPS;
    PS_STAMP();
    const float* const x = batch->x;  // before the first barrier, in every block (see the top)
    const float* const target = batch->target;
    for (int l = 0; l < n_layers; ++l) {
        const float* in = l == 0 ? x : layers[l - 1].out;
        if (layers[l].k_splits > 1) {
            forward_slices(layers[l], in, rows);
            grid_barrier(barrier);
            PS_STAMP();
            forward_sum(layers[l], rows);
        } else {
            forward_layer(layers[l], in, rows);
        }
        grid_barrier(barrier);
        PS_STAMP();
    }
    loss_rows(layers[n_layers - 1], target, rows, row_loss);
    grid_barrier(barrier);
    PS_STAMP();
    for (int l = n_layers - 1; l >= 0; --l) {
        backward_layer(layers[l], l == 0 ? nullptr : &layers[l - 1], l == 0 ? x : layers[l - 1].out, rows, partials);
        grid_barrier(barrier);
        PS_STAMP();
    }
    const float factor = clip_factor(partials, n_partials, max_norm);
    update(layers, n_layers, factor, rmsprop, lr, decay, eps);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float total = 0.0f;
        for (int r = 0; r < rows; ++r) total += row_loss[r];
        loss[0] = (1.0f / rows) * total;  // softmax_xent_fused: scale * sum
        // Every block read the cursor before the first barrier: moving it now races with none.
        batch->x = x + (long long)rows * layers[0].n_in;
        batch->target = target + (long long)rows * layers[n_layers - 1].n_out;
    }
    PS_STAMP();
}
