"""A CPU emulator of the CUDA device, for machines without a GPU (MINITORCH_CUDA_EMULATE=1).

``driver`` and ``compiler`` stand in for ``pycuda.driver`` and ``pycuda.compiler``
(the part of them the framework uses); kernels are the same ``.cu`` sources, built
by g++ against ``cuda_emu.h`` and run by ``runtime.cpp``: each GPU thread a fiber,
blocks spread over the cores, with the errors a GPU would report. ``graphs`` stands
in for the graph calls of cuda-bindings (stage 11).

What it checks, naming the kernel, block and thread: global accesses past a
buffer's end (a guard page; the up to 15 bytes that round a buffer to 16 are not
checked) or far enough before its start to reach the guard page ahead, indices
out of a shared or local array's bounds (g++'s -fsanitize=bounds; not through a
pointer the array decayed to), dynamic shared
memory past its size, misaligned vector accesses, barrier divergence (of the
threads of a block, and of the blocks at a grid barrier), warp
operations whose mask leaves out a lane that runs them or reads a lane that does
not take part or has exited, warp operations that can never complete, stack
overflow; and with ``MINITORCH_CUDA_RACECHECK=1`` (racecheck.cpp; the grader's emulated checks
always) every data race of the run, in shared or global memory, whatever the result, and a store
that another block reads with no ``__threadfence()`` before the atomic that published it. Shared
memory, static and dynamic, is poisoned when each block starts (bytes
0xff: NaN as a float, -1 as an int), so a slot read before it is written gives the same
wrong answer every run. Thread block clusters (__cluster_dims__, this_cluster) run cluster by
cluster, each cluster's blocks at once: reading another block's shared memory before that block
reached this_cluster() or after it exited is an error. Ampere's tensor cores run (compute
capability 8.0): mma.sync m16n8k8 TF32 and m16n8k16 BF16 with the PTX ISA's fragment layouts and
the hardware's truncation of TF32 operands, and nvcuda::wmma built on them (tensor_core.h); the
inline PTX it models (mma.sync, cvt.rna.tf32.f32, cp.async and its groups, %globaltimer) is
rewritten into calls (ptx.py). Asynchronous copies, of cp.async and of <cuda_pipeline.h>, land at
the wait that covers their group, so reading a slot too early shows its old contents. What it
refuses at compile time: any other inline PTX, Hopper's wgmma, TMA and setmaxnreg (naming chapter
19's section), cooperative groups other than clusters. What it does not model: timing (event
times are host times), a thread preempted while it spins on another thread of its
block (the fibers switch only at barriers and warp operations) or on another block
(a launch of at most MULTIPROCESSOR_COUNT blocks runs them all at once, but in turns
that pass only at grid_barrier and at a block's exit), and
``__activemask()`` beyond "the lanes that have not exited". x86-64 Linux only
(its fiber switch is written for it).

What it measures: ``access.access_report`` and ``access.tracing`` (trace.cpp) count a launch's memory
accesses per source line as Nsight Compute does on a GPU: requests, 32-byte sectors of global memory,
shared-memory wavefronts and bank conflicts; never their time, nor the caches.
"""

from __future__ import annotations

import os

ENV = "MINITORCH_CUDA_EMULATE"  # the switch: this variable set to ON
ON = "1"
SWITCH = f"{ENV}={ON}"  # as a message tells it to a shell or a notebook's %env
RACECHECK_ENV = "MINITORCH_CUDA_RACECHECK"  # with ENV: kernels are built and run with race checking


def selected() -> bool:
    """Whether this process runs CUDA on the emulator: ``MINITORCH_CUDA_EMULATE=1``, never by default."""
    return os.environ.get(ENV) == ON


def switched_on() -> dict[str, str]:
    """The environment entry that makes a child process run CUDA on the emulator."""
    return {ENV: ON}


def racecheck_selected() -> bool:
    """Whether emulated kernels are built for race checking (racecheck.cpp): ``MINITORCH_CUDA_RACECHECK=1``
    (the grader sets it for its emulated checks), never by default."""
    return os.environ.get(RACECHECK_ENV) == ON
