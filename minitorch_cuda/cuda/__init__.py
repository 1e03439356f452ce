"""The CUDA backend. Each concept lives in one module, and imports go downward only
(tests/test_layering.py checks it):

choosing
    backend        the op namespace Tensor calls (the same names as backend_cpu)
    ops_tensor, ops_math, ops_matmul, ops_optim
                   the ops by concept; each chooses its kernel family by stage
    matmul_choice  the tuner: which matmul variant runs for a shape (tuning keys,
                   candidates, the host-cost model, the split-K policy), and MATMULS
    autotune       the timing bookkeeping the tuner records its decisions in
    graphs, persistent_step, batch_cursor, step_report
                   stage 11's graphed step and stage 13's one-kernel step
launching
    launchers      every launch contract but the matmuls': grid, block, arguments
    matmul_launchers
                   the matmul launch contracts, every tile and variant given
    wgmma_tma      the TMA kernel's builds (per tile width) and launch plan
    launch_core    dispatch (a launch, or its timing) and Gemm, the matmul problem
    registry       the kernel a name runs now (an override, else the built-in),
                   and variant(): a kernel built with other #defines
running
    runtime        compile, launch, copy, synchronize: every driver call, checked,
                   counted and profiled
    memory, array  device buffers, the pool, DeviceArray
    tensor_map     TMA descriptors
below them all
    probe          whether CUDA can be used here; what an architecture can run
    driver         PyCUDA or the CPU emulator; the cuda-bindings driver API
    kernel_table   the kernels' signatures, files and shapes, read from kernels/
                   (pure Python: the tile lists of matmul_tiles.cuh, the #defines)
    nvcc_check     nvcc's verdict on a kernel (and ptxas's report) where the emulator runs it
"""
