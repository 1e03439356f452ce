"""grid_barrier.cuh on the CPU emulator (no GPU needed) and on a GPU (marked ``gpu``).

Under the emulator a launch of at most MULTIPROCESSOR_COUNT (4) blocks is co-resident:
every block runs on its own OS thread, in turns, each until it waits at a grid barrier
or exits. So the multi-phase kernel gives the float64 answer, a missing grid barrier
gives one wrong answer every run (block 0 runs ahead through every round), and the
divergences a GPU would hang on are errors naming the kernel.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from minitorch_cuda.cuda.kernel_table import KERNEL_DIR

# Each round every block sums its elements into its slot of one of two buffers, and after
# the barrier reads every block's slot and updates its elements. The buffers alternate, so
# one barrier a round suffices: a slot is written again two rounds on, after a barrier that
# every block passed only once it had read the slot.
PING_PONG = r"""
#include "grid_barrier.cuh"

extern "C" __global__ void ping_pong(float* x, float* partial, GridBarrier* bar, int n, int rounds, int sync) {
    __shared__ float sums[256];
    const int t = threadIdx.x, stride = gridDim.x * blockDim.x;
    for (int r = 0; r < rounds; ++r) {
        float* slots = partial + (r % 2) * gridDim.x;
        float s = 0.0f;
        for (int i = blockIdx.x * blockDim.x + t; i < n; i += stride) s += x[i];
        sums[t] = s;
        __syncthreads();
        for (int k = blockDim.x / 2; k > 0; k /= 2) {
            if (t < k) sums[t] += sums[t + k];
            __syncthreads();
        }
        if (t == 0) slots[blockIdx.x] = sums[0];
        if (sync) grid_barrier(bar);
        float total = 0.0f;
        for (int b = 0; b < gridDim.x; ++b) total += slots[b];
        for (int i = blockIdx.x * blockDim.x + t; i < n; i += stride) x[i] = 0.5f * x[i] + total / n;
    }
}
"""
SIGNATURE = "PPPiii"


def with_barrier(x: np.ndarray, rounds: int) -> np.ndarray:
    """Float64: every round adds the mean of all elements to half of each."""
    x = x.astype(np.float64)
    for _ in range(rounds):
        x = 0.5 * x + x.sum() / x.size
    return x


def blocks_in_turn(x: np.ndarray, rounds: int, blocks: int, threads: int) -> np.ndarray:
    """Float64, without the barrier, blocks run one after the other: each reads the slots of
    the blocks before it as they left them and those of the blocks after it still zero."""
    x = x.astype(np.float64)
    owner = np.arange(x.size) // threads % blocks
    partial = np.zeros((2, blocks))
    for b in range(blocks):
        own = owner == b
        for r in range(rounds):
            partial[r % 2, b] = x[own].sum()
            x[own] = 0.5 * x[own] + partial[r % 2].sum() / x.size
    return x


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("the emulator builds kernels with g++")
    from minitorch_cuda.emulator import compiler, driver

    cache = str(tmp_path_factory.getbasetemp() / "emulator-cache")

    def function(source: str, name: str, signature: str):
        module = compiler.SourceModule(source, no_extern_c=True, cache_dir=cache, include_dirs=[str(KERNEL_DIR)])
        return module.get_function(name).prepare(signature)

    return driver, function


def run_ping_pong(emu, x, rounds, sync, blocks=4, threads=64, bar=None):
    driver, function = emu
    d_x, d_partial = driver.to_device(x), driver.to_device(np.zeros(2 * blocks, np.float32))
    bar = bar if bar is not None else driver.to_device(np.zeros(2, np.uint32))
    function(PING_PONG, "ping_pong", SIGNATURE).prepared_call(
        (blocks, 1, 1), (threads, 1, 1), d_x, d_partial, bar, x.size, rounds, sync
    )
    got, counters = np.empty_like(x), np.empty(2, np.uint32)
    driver.memcpy_dtoh(got, d_x)
    driver.memcpy_dtoh(counters, bar)
    return got, counters, bar


def test_the_emulated_device_holds_four_blocks_at_once(emu):
    driver = emu[0]
    device = driver.Context.get_device()
    assert device.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT) == 4


@pytest.mark.parametrize("blocks", [1, 3, 4])
def test_grid_barriers_in_a_loop_give_the_float64_answer(emu, blocks):
    rng = np.random.default_rng(blocks)
    x, rounds = rng.standard_normal(1001).astype(np.float32), 6
    got, counters, bar = run_ping_pong(emu, x, rounds, sync=1, blocks=blocks)
    np.testing.assert_allclose(got, with_barrier(x, rounds), rtol=1e-5, atol=1e-5)
    # The GridBarrier is left as the GPU's code leaves it: count 0, one generation a barrier,
    # so the same one serves the next launch without being zeroed again.
    assert list(counters) == [0, rounds]
    got, counters, _ = run_ping_pong(emu, x, rounds, sync=1, blocks=blocks, bar=bar)
    np.testing.assert_allclose(got, with_barrier(x, rounds), rtol=1e-5, atol=1e-5)
    assert list(counters) == [0, 2 * rounds]


def test_a_missing_grid_barrier_gives_the_same_wrong_answer_every_run(emu):
    rng = np.random.default_rng(7)
    x, rounds = rng.standard_normal(1001).astype(np.float32), 6
    first, counters, _ = run_ping_pong(emu, x, rounds, sync=0)
    second, _, _ = run_ping_pong(emu, x, rounds, sync=0)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, blocks_in_turn(x, rounds, blocks=4, threads=64), rtol=1e-5, atol=1e-5)
    assert not np.allclose(first, with_barrier(x, rounds), rtol=1e-2, atol=1e-2)
    assert list(counters) == [0, 0]


def _kernel(body: str) -> str:
    return (
        '#include "grid_barrier.cuh"\n'
        'extern "C" __global__ void phased(float* out, GridBarrier* bar) {\n'
        f"{body}\n"
        "    out[blockIdx.x] = 1.0f;\n"
        "}\n"
    )


ERRORS = {  # case: (blocks, kernel body from line 3, the message)
    "a thread returns while the others wait": (
        4,
        "    if (blockIdx.x == 1 && threadIdx.x == 5) return;\n    grid_barrier(bar);",
        r"in kernel 'phased', block \(1, 0, 0\): barrier divergence: 63 of 64 threads wait at grid_barrier at "
        r"kernel.cu:4, but thread 5 has exited",
    ),
    "a block exits while the others wait": (
        4,
        "    if (blockIdx.x == 2) return;\n    grid_barrier(bar);",
        r"in kernel 'phased', block \(2, 0, 0\): grid barrier divergence: 2 of 4 blocks wait at grid_barrier at "
        r"kernel.cu:4, but block \(2, 0, 0\) has exited; every block must reach every grid barrier",
    ),
    "a block arrives after another exited": (
        3,
        "    if (blockIdx.x == 0) return;\n    grid_barrier(bar);",
        r"in kernel 'phased', block \(1, 0, 0\): grid barrier divergence: 1 of 3 blocks wait at grid_barrier at "
        r"kernel.cu:4, but block \(0, 0, 0\) has exited",
    ),
    "threads of a block wait at a grid barrier and at __syncthreads": (
        2,
        "    if (threadIdx.x < 32) grid_barrier(bar);\n    else __syncthreads();",
        r"barrier divergence: thread 0 waits at grid_barrier at kernel.cu:3 while thread 32 waits at "
        r"__syncthreads at kernel.cu:4",
    ),
    "more blocks than the device runs at once": (
        5,
        "    grid_barrier(bar);",
        r"grid_barrier at kernel.cu:3 in a launch of 5 blocks, but the emulated device runs at most 4 at once",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_grid_barrier_divergence_names_the_kernel(emu, case):
    driver, function = emu
    from minitorch_cuda.emulator.errors import LaunchError

    blocks, body, message = ERRORS[case]
    out, bar = driver.mem_alloc(4 * blocks), driver.to_device(np.zeros(2, np.uint32))
    with pytest.raises(LaunchError) as info:
        function(_kernel(body), "phased", "PP").prepared_call((blocks, 1, 1), (64, 1, 1), out, bar)
    assert re.search(message, str(info.value)), str(info.value)
    # Every block was abandoned, none left waiting: the device runs the next launch.
    got, _, _ = run_ping_pong(emu, np.ones(300, np.float32), rounds=2, sync=1)
    np.testing.assert_allclose(got, with_barrier(np.ones(300), 2), rtol=1e-6)


@pytest.mark.gpu
def test_grid_barriers_in_a_loop_on_the_device():
    """One block per multiprocessor (the co-residency rule of grid_barrier.cuh), 20 rounds,
    the same GridBarrier over two launches."""
    from minitorch_cuda.cuda import runtime

    module = runtime.compile_module(PING_PONG, "the grid-barrier test kernel")
    kernel = runtime.Kernel("ping_pong", module, "ping_pong", SIGNATURE)
    blocks, threads, rounds = runtime.multiprocessors(), 256, 20
    rng = np.random.default_rng(0)
    x = rng.standard_normal(blocks * threads * 3 + 17).astype(np.float32)
    d_x, d_partial = runtime.allocate(x.nbytes), runtime.allocate(8 * blocks)
    bar = runtime.allocate(8)
    runtime.copy_htod(int(bar), np.zeros(2, np.uint32))
    counters = np.empty(2, np.uint32)
    for launch in (1, 2):
        runtime.copy_htod(int(d_x), x)
        runtime.launch(kernel, (blocks, 1, 1), (threads, 1, 1), d_x, d_partial, bar, x.size, rounds, 1)
        got = np.empty_like(x)
        runtime.copy_dtoh(got, int(d_x))
        runtime.copy_dtoh(counters, int(bar))
        np.testing.assert_allclose(got, with_barrier(x, rounds), rtol=1e-4, atol=1e-4)
        assert list(counters) == [0, launch * rounds]
