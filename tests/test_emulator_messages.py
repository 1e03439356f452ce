"""What a fault in an emulated kernel tells a student: the kernel, block and thread (the runtime),
the source line (from the line table of the kernel's library), and, for an access just past a
buffer passed as an argument, the parameter and the index instead of raw addresses."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_addr2line, needs_gxx

pytestmark = needs_gxx

SOURCE = r"""
extern "C" __global__ void copy_too_far(float* out, const float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n + 2000) out[i] = a[i];  // reads past a's n elements
}
extern "C" __global__ void wild_read(float* out, const float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x = a[i * 1000000];
    if (i < n) out[i] = x;
}
"""


def fault(tmp_path, kernel: str) -> str:
    from minitorch_cuda.emulator import compiler, driver

    module = compiler.SourceModule(SOURCE, no_extern_c=True, cache_dir=str(tmp_path))
    a = driver.to_device(np.ones(1000, np.float32))
    out = driver.to_device(np.zeros(4096, np.float32))
    with pytest.raises(driver.LaunchError) as failed:
        module.get_function(kernel).prepare("PPi").prepared_call((16, 1, 1), (256, 1, 1), out, a, 1000)
    return str(failed.value)


@needs_addr2line
def test_a_read_past_an_argument_names_the_array_the_index_and_the_line(tmp_path) -> None:
    message = fault(tmp_path, "copy_too_far")
    assert "in kernel 'copy_too_far', block (3, 0, 0), thread (232, 0, 0)" in message, message
    assert "out-of-bounds read of a[1000] (a holds 1000 elements)" in message, message
    assert "at line 4: `if (i <= n + 2000) out[i] = a[i];" in message and "0x" not in message, message


@needs_addr2line
def test_a_wild_read_names_its_line(tmp_path) -> None:
    message = fault(tmp_path, "wild_read")
    assert "in kernel 'wild_read'" in message and "invalid read" in message, message
    assert message.count("at line 8: `float x = a[i * 1000000];`") == 1 and "[pc " not in message, message
