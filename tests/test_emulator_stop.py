"""Stopping an emulated launch: a time limit (a notebook's check cell) and Kernel > Interrupt
(a KeyboardInterrupt while the kernel runs). An endless loop in a kernel must end with an error
that says so, and the emulator must run the next launch as if nothing had happened."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest
from conftest import needs_gxx

pytestmark = needs_gxx

SOURCE = r"""
extern "C" __global__ void spin(float* out, int n) {  // never ends: nothing it reads changes
    volatile float* v = out;
    while (v[0] == v[0]) v[threadIdx.x % n] = 1.0f;
}
extern "C" __global__ void spin_with_barriers(float* out, int n) {  // never ends, waiting again and again
    __shared__ float s[64];
    for (;;) {
        s[threadIdx.x] = out[threadIdx.x % n];
        __syncthreads();
    }
}
extern "C" __global__ void twice(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * i;
}
"""


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    from minitorch_cuda.emulator import compiler

    return compiler.SourceModule(SOURCE, no_extern_c=True, cache_dir=str(tmp_path_factory.mktemp("cache")))


def run(module, name: str, grid: int, n: int = 64) -> np.ndarray:
    from minitorch_cuda.emulator import driver

    buffer = driver.to_device(np.zeros(n, np.float32))
    module.get_function(name).prepare("Pi").prepared_call((grid, 1, 1), (64, 1, 1), buffer, n)
    out = np.empty(n, np.float32)
    driver.memcpy_dtoh(out, buffer)
    return out


def assert_the_next_launch_works(module) -> None:
    assert np.array_equal(run(module, "twice", 1), 2.0 * np.arange(64, dtype=np.float32))


# 1 block (the pool's workers), 3 blocks (co-resident: the others wait for their turn), 64 blocks
@pytest.mark.parametrize("grid", [1, 3, 64])
@pytest.mark.parametrize("kernel", ["spin", "spin_with_barriers"])
def test_a_time_limit_stops_an_endless_kernel(module, kernel, grid) -> None:
    from minitorch_cuda.emulator import driver

    start = time.monotonic()
    with driver.time_limit(0.5), pytest.raises(driver.LaunchTimeout) as stopped:
        run(module, kernel, grid)
    assert time.monotonic() - start < 5
    message = str(stopped.value)
    assert f"kernel '{kernel}' ran past the time limit of 0.5 s and was stopped" in message
    assert "endless loop" in message
    assert_the_next_launch_works(module)


def test_without_a_limit_a_kernel_takes_the_time_it_needs(module) -> None:
    from minitorch_cuda.emulator import driver

    with driver.time_limit(60):
        assert_the_next_launch_works(module)
    assert driver._limit is None


@pytest.mark.parametrize("kernel", ["spin", "spin_with_barriers"])
def test_an_interrupt_stops_an_endless_kernel(module, kernel) -> None:
    """Kernel > Interrupt sends SIGINT: Python's KeyboardInterrupt must reach the launching thread."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    timer = threading.Timer(0.5, signal.raise_signal, (signal.SIGINT,))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run(module, kernel, 2)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 5
    assert_the_next_launch_works(module)
