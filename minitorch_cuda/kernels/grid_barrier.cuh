// grid_barrier.cuh: a barrier across every block of a launch, for persistent kernels
// whose phases read what other blocks wrote in the phase before (stage 13).
//
//   struct GridBarrier  two counters in global memory, zeroed once (cudaMemset) before
//                       the first launch; every barrier leaves count at 0, so the same
//                       one serves every later launch (and every replay of a graph).
//   grid_barrier(bar)   every thread of every block calls it, the same number of times;
//                       it returns when all blocks have arrived, with every write any
//                       block made before arriving visible to every thread after it.
//
// It needs every block of the grid running at once (co-resident): a block waiting at
// the barrier keeps its multiprocessor, so a block that could start only after another
// finished would never come, and the launch would hang. The launcher's rule:
//     blocks <= multiprocessors() * (most blocks of this kernel one SM holds at once)
// With one block per SM, the plan here, blocks = multiprocessors() always fits (a
// block that launches at all fits on an SM), provided nothing else shares the GPU
// meanwhile: no other stream's kernels, no MPS client limiting the SMs.
// On the CPU emulator the device has 4 multiprocessors (MULTIPROCESSOR_COUNT) and a
// launch of at most 4 blocks runs them all at once, each on its own OS thread, taking
// turns that pass at grid barriers (so every run is the same); a grid barrier in a
// larger launch is an error naming the kernel, as it would hang a GPU.
#pragma once

struct GridBarrier {
    unsigned int count;       // blocks arrived at the current barrier
    unsigned int generation;  // barriers completed so far (wraps; only "changed" matters)
};

#ifdef MINITORCH_CUDA_EMULATOR
// A spinning fiber would never let the others run: the runtime provides the barrier
// (the block's threads meet as at __syncthreads, then the blocks meet), with its checks.
__device__ inline void grid_barrier(GridBarrier* bar, EMU_SITE) { __emu_grid_barrier(bar, __file, __line); }
#else
// Why it is correct (the PTX memory model, gpu scope):
// - generation is read before arriving: the last block may complete the barrier and
//   bump it the moment our atomicAdd lands, and a value read after that would already
//   be the new one, so we would wait for a change that has happened.
// - the release fence before the atomicAdd: __syncthreads made the writes of all the
//   block's threads visible to thread 0, and its fence (cumulative) orders them, and
//   the read of generation, before its arrival; whoever sees the arrival sees them.
// - the last arriver resets count, fences, then bumps generation: a waiter that sees
//   the new generation (then fences) increments count for the next barrier only after
//   the reset, so no arrival is lost to it.
// - waiters read generation, not count: count returns to 0 at once and climbs again as
//   fast blocks arrive at the next barrier, so a slow waiter could miss the value it
//   waited for; generation only moves on, once per barrier, so the change cannot be
//   missed and consecutive barriers need no reset in between.
// - the acquire fence after seeing the new generation, then __syncthreads: every
//   block's writes before its arrival are visible to thread 0 and through the block
//   barrier to all the block's threads.
__device__ __forceinline__ void grid_barrier(GridBarrier* bar) {
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        volatile unsigned int* generation = &bar->generation;
        const unsigned int seen = *generation;
        __threadfence();  // release: the block's writes (and the read of seen) before arriving
        const unsigned int blocks = gridDim.x * gridDim.y * gridDim.z;
        if (atomicAdd(&bar->count, 1u) == blocks - 1) {
            atomicExch(&bar->count, 0u);
            __threadfence();  // the reset lands before anyone can arrive at the next barrier
            atomicAdd(&bar->generation, 1u);
        } else {
            while (*generation == seen) {
            }
        }
        __threadfence();  // acquire: every block's writes before its arrival
    }
    __syncthreads();
}
#endif
