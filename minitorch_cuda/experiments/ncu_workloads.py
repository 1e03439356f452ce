"""The workloads that ``experiments/ncu.py`` profiles: each runs in a child process under ncu
(``python -m minitorch_cuda.experiments.ncu --workload NAME``), launching its kernels through
the launchers (cuda/launchers.py, cuda/matmul_launchers.py) as the backend does (PyTorch for
cuBLAS): every launch once as a warm-up, then again for ncu to keep. Their stdout stays quiet: ncu's CSV goes there.
"""

from __future__ import annotations

import numpy as np

STEP_WARMUP = 3  # steps before the profiled one: the first compiles, autotunes and captures; then replays


def _device():
    from minitorch_cuda.cuda.driver import attach

    attach()
    from minitorch_cuda.cuda import launchers, ops_tensor, runtime
    from minitorch_cuda.cuda.array import DeviceArray

    return launchers, ops_tensor, runtime, DeviceArray


def _random(ops_tensor, *shape, seed: int = 0):
    return ops_tensor.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _twice(launches) -> None:
    """Every launch once as a warm-up, then every launch again: --launch-skip len(launches)."""
    for _ in range(2):
        for launch in launches:
            launch()


# The problem sizes the topics' questions name (a CPU check runs the same code at small sizes).
SIZES = {
    "gather": (8192, 784),
    "sumsq": 784 * 256,
    "sum_rows": (256, 64),
    "matmul": 1024,
    "softmax": 8192,
    "tf32": 4096,
    "pipelined": 4096,
    "splitk": 1024,
    "protocol": {},  # train.Protocol's fields that differ from the protocol's (none: its 784-256-128-10 model)
}


def workload_ch07() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    rows, cols = SIZES["gather"]
    x = _random(ops, rows, cols)
    idx = ops._upload_indices(np.random.default_rng(1).permutation(rows))
    out, out_t = DeviceArray.empty((rows, cols)), DeviceArray.empty((cols, rows))
    # strided_copy makes x's transpose (cols x rows, strides (1, cols), padded to 4-D) contiguous
    _twice([
        lambda: launchers.elementwise("gather_rows", rows * cols, out, x, idx, rows, cols),
        lambda: launchers.elementwise("strided_copy", rows * cols, out_t, x, rows * cols, 1, cols, rows, 0, 0, 1, cols),
    ])  # fmt: skip
    runtime.synchronize()


def _gemm_operands(ops, DeviceArray, n: int):
    a, b = _random(ops, n, n, seed=0), _random(ops, n, n, seed=1)
    return DeviceArray.empty((n, n)), a, b


def workload_ch11() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["matmul"]
    c, a, b = _gemm_operands(ops, DeviceArray, n)
    g = launch_core.Gemm(n, n, n)
    kernels = (matmul_launchers.matmul_naive, matmul_launchers.matmul_batched, matmul_launchers.matmul_tiled)
    _twice([lambda f=f: f(c, a, b, g) for f in kernels])
    runtime.synchronize()


def workload_ch13() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    n, (rows, cols) = SIZES["sumsq"], SIZES["sum_rows"]
    grad, x, out = _random(ops, n), _random(ops, rows, cols), DeviceArray.empty((rows,))
    _twice([
        lambda: launchers.sumsq("sumsq_volatile", out, grad, n),
        lambda: launchers.sumsq("sumsq_shuffle", out, grad, n),
        lambda: launchers.sum_rows("sum_rows_volatile", out, x, rows, cols, 1.0),
        lambda: launchers.sum_rows("sum_rows_shuffle", out, x, rows, cols, 1.0),
    ])  # fmt: skip
    runtime.synchronize()


REGTILED_AT_1024 = ("128x128x8", "64x64x16")  # the largest tile, and the one matmul.json's autotuner kept


def workload_ch14_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["matmul"]
    c, a, b = _gemm_operands(ops, DeviceArray, n)
    g = launch_core.Gemm(n, n, n)
    _twice([
        lambda: matmul_launchers.matmul_tiled(c, a, b, g),
        *[lambda t=t: matmul_launchers.matmul_regtiled(c, a, b, g, tile=t) for t in REGTILED_AT_1024],
    ])  # fmt: skip
    runtime.synchronize()


def workload_ch15() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    n = SIZES["softmax"]
    x, out = _random(ops, n, n), DeviceArray.empty((n, n))
    kernels = ("softmax_rows_shuffle", "softmax_rows_online", "softmax_rows_block")
    _twice([lambda k=k: launchers.softmax_rows(k, out, x, n, n) for k in kernels])
    runtime.synchronize()


def workload_ch19_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["tf32"]
    c, a, b = _gemm_operands(ops, DeviceArray, n)
    g, g_t = launch_core.Gemm(n, n, n), launch_core.Gemm(n, n, n, tb=True)  # b read as B^T: no transpose launch
    _twice([
        lambda: matmul_launchers.matmul_tf32(c, a, b, g),
        lambda: matmul_launchers.matmul_tf32_async(c, a, b, g),
        lambda: matmul_launchers.matmul_tf32_wgmma(c, a, b, g_t),
    ])  # fmt: skip
    runtime.synchronize()


# matmul.json's autotuner choices, fixed so that nothing is timed under ncu: matmul_regtiled at 4096^3,
# and matmul_sgemm at 1024^3 (pipelined_128x128x16s3_splitk4), whose register-tiled runner-up is 64x64x16
REGTILED_AT_4096, PIPELINED_AT_4096, SPLITK_AT_1024 = "128x128x8", "128x128x16s3", ("128x128x16s3", 4)


def workload_ch16_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import kernel_table, launch_core, matmul_launchers

    big, small = SIZES["pipelined"], SIZES["splitk"]
    (c, a, b), g = _gemm_operands(ops, DeviceArray, big), launch_core.Gemm(big, big, big)
    (c1, a1, b1), g1 = _gemm_operands(ops, DeviceArray, small), launch_core.Gemm(small, small, small)
    tile, splits = SPLITK_AT_1024
    bm, bn, _, threads = kernel_table.REGTILED_TILES[REGTILED_AT_4096]
    _twice([
        lambda: matmul_launchers.matmul_regtiled(c, a, b, g, tile=REGTILED_AT_4096),  # its exact twin at 4096^3
        # and the plain kernel on the same product, launched as is: the checks the twin drops
        lambda: launch_core.dispatch(f"matmul_regtiled_{REGTILED_AT_4096}", g.grid(bm, bn), (threads, 1, 1),
                                     (c, a, b, *g.args), 0),
        lambda: matmul_launchers.matmul_pipelined(c, a, b, g, tile=PIPELINED_AT_4096),
        lambda: matmul_launchers.matmul_regtiled(c1, a1, b1, g1, tile=REGTILED_AT_1024[1]),
        # and matmul_splitk_reduce4
        lambda: matmul_launchers.matmul_pipelined(c1, a1, b1, g1, tile=tile, splits=splits),
    ])  # fmt: skip
    runtime.synchronize()


def workload_ch16_cluster() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    n = SIZES["splitk"]
    (c, a, b), g = _gemm_operands(ops, DeviceArray, n), launch_core.Gemm(n, n, n)
    _twice([
        lambda: matmul_launchers.matmul_sgemm(c, a, b, g, variant="128x64x8t128_cluster2"),
        lambda: matmul_launchers.matmul_sgemm(c, a, b, g, variant="128x64x8t128_splitk2"),  # and matmul_splitk_reduce4
    ])  # fmt: skip
    runtime.synchronize()


def profiled_step(stage: int, without: tuple[str, ...] = ()) -> None:
    """A train.Trainer on the protocol's model at ``stage`` (minus ``without``): STEP_WARMUP steps on a
    random MNIST-shaped batch, then one more between cuProfilerStart and cuProfilerStop, the range a
    ranged run profiles. The step reads its loss back, so its kernels are done when the range closes."""
    _device()
    from minitorch_cuda import stages, train
    from minitorch_cuda.cuda.driver import drv
    from minitorch_cuda.data import one_hot
    from minitorch_cuda.tensor import tensor

    protocol = train.Protocol(**SIZES["protocol"])
    rng = np.random.default_rng(0)
    x = tensor(rng.random((protocol.batch_size, 784), dtype=np.float32), "cuda")
    y = tensor(one_hot(rng.integers(0, 10, protocol.batch_size)), "cuda")
    with stages.use_stage(stage, without=without):
        trainer = train.Trainer(protocol, "cuda")
        for _ in range(STEP_WARMUP):
            trainer.step(x, y)
        drv.start_profiler()
        trainer.step(x, y)
        drv.stop_profiler()


SMALL = ((64, 64, 64), (64, 256, 784))  # M, N, K: the smallest cube and the MNIST first layer


def workload_ch14_small_ours() -> None:
    launchers, ops, runtime, DeviceArray = _device()
    from minitorch_cuda.cuda import launch_core, matmul_launchers

    launches = []
    for M, N, K in SMALL:
        c, a, b = DeviceArray.empty((M, N)), _random(ops, M, K), _random(ops, K, N, seed=1)
        g = launch_core.Gemm(M, N, K)
        launches += [
            lambda f=f, c=c, a=a, b=b, g=g: f(c, a, b, g)
            for f in (
                matmul_launchers.matmul_transposed,
                matmul_launchers.matmul_batched,
                matmul_launchers.matmul_tiled,
            )
        ]
    _twice(launches)
    runtime.synchronize()


def cublas(n: int, tf32: bool, repeats: int, shapes: tuple = ()) -> None:
    """torch.matmul, ``repeats`` times per shape (n x n x n unless ``shapes`` are given): warm-ups first."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = tf32
    pairs = [(torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")) for M, N, K in shapes or [(n, n, n)]]
    for _ in range(repeats):
        for a, b in pairs:
            torch.matmul(a, b)
    torch.cuda.synchronize()


WORKLOADS = {
    "ch07": workload_ch07,
    "ch11": workload_ch11,
    "ch13": workload_ch13,
    "ch14_ours": workload_ch14_ours,
    "ch15": workload_ch15,
    "ch19_ours": workload_ch19_ours,
    "cublas_fp32_1024": lambda: cublas(1024, False, 4),
    "cublas_fp32_4096": lambda: cublas(4096, False, 2),
    "cublas_tf32_4096": lambda: cublas(4096, True, 2),
    "ch14_small_ours": workload_ch14_small_ours,
    "cublas_small": lambda: cublas(0, False, 3, SMALL),  # two warm-ups per shape, then one each
    "ch16_ours": workload_ch16_ours,
    "ch16_cluster": workload_ch16_cluster,
    "cublas_fp32_4096_1024": lambda: cublas(0, False, 2, ((4096, 4096, 4096), (1024, 1024, 1024))),
    "ch21_stage11": lambda: profiled_step(11, without=("cuda_graphs",)),
    "ch21_stage11_graphed": lambda: profiled_step(11),
    "ch21_stage13": lambda: profiled_step(13, without=("cuda_graphs",)),
}
