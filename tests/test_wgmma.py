"""wgmma.cu, the warpgroup-MMA TF32 kernel (Hopper only), against float64; and the
coalesced transpose that feeds it. GPU only, but for its sm_90a build (nvcc's report and
SASS, on the CPU), and kept apart from the rest of the GPU suite (`.ci/gpu_check.sh` runs it
in its `tf32` part): a kernel that hangs the GPU here cannot stall the other tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_nvcc
from helpers import FLAGS, NVCC, cuobjdump, matmul_inputs, matmul_reference, where_wrong

from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
from minitorch_cuda.cuda.nvcc_check import parse_resources


@needs_nvcc
def test_builds_for_sm_90a_without_spills(tmp_path):
    """ptxas's report: no spills or stack, no warning, no note that the wgmma pipeline is serialized
    (C7510); in the SASS four m64n256k8 products (one per 8 columns of a 32-wide slice) and nothing in
    local memory. The accumulators are 128 registers of a thread: a spill would show here first."""
    cubin, source = tmp_path / "wgmma.cubin", KERNEL_DIR / "wgmma.cu"
    target = "-gencode=arch=compute_90a,code=sm_90a"
    done = subprocess.run(
        [NVCC, "-cubin", target, "-I", str(KERNEL_DIR), "-Xptxas", "-v", "-o", str(cubin), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = done.stderr + done.stdout
    assert done.returncode == 0, log
    (kernel,) = parse_resources(log)
    assert kernel.name == "matmul_tf32_wgmma", log
    assert kernel.spill_stores == kernel.spill_loads == kernel.stack_bytes == 0, log
    assert "C7510" not in log and "warning" not in log.lower(), log
    dump = cuobjdump()
    if dump is None:
        return
    sass = subprocess.run([dump, "-sass", str(cubin)], capture_output=True, text=True, timeout=120).stdout
    assert len(re.findall(r"HGMMA\.64x256x8\.F32\.TF32", sass)) == 4, "one wgmma per 8 columns of a 32-wide slice"
    assert not re.search(r"\b(LDL|STL)\b", sass), "nothing in local memory"


def _launch_wgmma(a, b):
    """matmul_tf32_wgmma on a (batch?, M, K) and b (batch?, N, K): C = A B^T, nothing to transpose."""
    from minitorch_cuda.cuda import backend, launch_core, matmul_launchers
    from minitorch_cuda.cuda.array import DeviceArray
    from minitorch_cuda.cuda.runtime import arch

    if arch() != "sm_90":
        pytest.skip(f"wgmma needs a Hopper GPU (sm_90); this one is {arch()}")
    g = launch_core.Gemm.of(a, b, tb=True)
    out = DeviceArray.empty(((g.batch,) if g.batch > 1 else ()) + (g.M, g.N))
    matmul_launchers.matmul_tf32_wgmma(out, backend.from_numpy(a), backend.from_numpy(b), g)
    return backend.to_numpy(out)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape", [(4, 4, 4), (128, 256, 32), (72, 76, 84), (132, 260, 300), (256, 512, 1024), (300, 600, 1028)], ids=str
)
def test_tf32_wgmma_error_against_float64(shape):
    """Warpgroup MMA, partial tiles at every edge. TF32 by truncation: an input loses up to
    2^-10 of itself, twice what the rounding kernels lose, hence a bound of 2.5e-3."""
    M, N, K = shape
    a, b = matmul_inputs(M, N, K, False, True, seed=15)
    ref, scale = matmul_reference(a, b, False, True)
    out = _launch_wgmma(a, b)
    assert np.all(np.abs(out - ref) <= 2.5e-3 * scale + 1e-6), where_wrong(out, ref, scale, 2.5e-3)
    if M * N > 1:
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-3


@pytest.mark.gpu
def test_tf32_wgmma_batched():
    a, b = matmul_inputs(72, 260, 36, False, True, (3,), (3,), seed=16)
    ref, scale = matmul_reference(a, b, False, True)
    assert np.all(np.abs(_launch_wgmma(a, b) - ref) <= 2.5e-3 * scale + 1e-6)
    a, b = matmul_inputs(72, 260, 36, False, True, (3,), (), seed=17)  # B shared by the batch
    ref, scale = matmul_reference(a, b, False, True)
    assert np.all(np.abs(_launch_wgmma(a, b) - ref) <= 2.5e-3 * scale + 1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize(("ta", "tb"), FLAGS)
@pytest.mark.parametrize(("shape", "broadcast_b"), [((72, 76, 84), False), ((132, 260, 300), True)], ids=str)
def test_matmul_wgmma_takes_every_flag_pair(ta, tb, shape, broadcast_b):
    """Operands stored the other way round are transposed first (B once where it is broadcast)."""
    from minitorch_cuda.cuda import backend, launch_core, matmul_launchers, probe
    from minitorch_cuda.cuda.array import DeviceArray
    from minitorch_cuda.cuda.runtime import arch

    M, N, K = shape
    if not probe.wgmma_fits(K, arch()):
        pytest.skip("wgmma needs a Hopper GPU (sm_90)")
    a, b = matmul_inputs(M, N, K, ta, tb, (2,), () if broadcast_b else (2,), seed=18)
    ref, scale = matmul_reference(a, b, ta, tb)
    out = DeviceArray.empty((2, M, N))
    g = launch_core.Gemm.of(a, b, ta, tb)
    matmul_launchers.matmul_tf32_wgmma(out, backend.from_numpy(a), backend.from_numpy(b), g)
    got = backend.to_numpy(out)
    assert np.all(np.abs(got - ref) <= 2.5e-3 * scale + 1e-6), where_wrong(got, ref, scale, 2.5e-3)


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize(("rows", "cols"), [(37, 70), (130, 64), (64, 193)])  # partial, whole and mixed tiles
def test_transpose_2d_is_exact(rows, cols):
    from minitorch_cuda.cuda import backend, launchers
    from minitorch_cuda.cuda.array import DeviceArray

    x = np.random.default_rng(19).standard_normal((3, rows, cols)).astype(np.float32)
    out = DeviceArray.empty((3, cols, rows))
    launchers.transpose(out, backend.from_numpy(x), rows, cols, rows * cols, 3)
    np.testing.assert_array_equal(backend.to_numpy(out), np.swapaxes(x, 1, 2))
    once = DeviceArray.empty((1, cols, rows))
    launchers.transpose(once, backend.from_numpy(x[0]), rows, cols, 0, 1)  # a broadcast operand: once
    np.testing.assert_array_equal(backend.to_numpy(once)[0], x[0].T)


KEEPS_ROWS = """
import sys
sys.path.insert(0, {tests!r})
import standin_pycuda  # noqa: F401  (no device: every launch succeeds and computes nothing)
from minitorch_cuda import torch_reference
from minitorch_cuda.cuda import timing
from minitorch_cuda.cuda.runtime import KernelError
from minitorch_cuda.experiments import tf32_wgmma as t

torch_reference.cublas_seconds = lambda M, N, K, repeats, tf32: 1e-3
timing.launcher_seconds = lambda call, repeats: 2e-3
t.transpose_row = lambda n: {{"transpose_us": 1.0}}
def max_error(name, rng):
    if name == "matmul_tf32_wgmma_tma 128x128":
        raise KernelError("an illegal memory access (stand-in)")
    return 0.0
t.max_error = max_error
sys.argv = ["tf32_wgmma", "--json", {path!r}]
t.main()
"""


def test_the_tf32_experiment_keeps_the_rows_measured_before_a_fault(tmp_path):
    """A kernel that faults breaks the CUDA context for the rest of the process: the experiment
    measures its peers first, writes the record after every row, names the row that failed
    and exits non-zero, so the rows before it survive (stand-in driver, no GPU)."""
    path = tmp_path / "tf32.json"
    code = KEEPS_ROWS.format(tests=str(Path(__file__).parent), path=str(path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "matmul_tf32_wgmma_tma 128x128 failed" in done.stderr
    record = json.loads(path.read_text())
    measured = [name for name in record["kernels"] if "error" not in record["kernels"][name]]
    assert measured == ["matmul_tf32_wgmma", "matmul_tf32_async", "matmul_wgmma a @ b", "matmul_tf32_wgmma_tma",
                        "matmul_tf32_wgmma_tma a @ b", "matmul_tf32_wgmma_tma a @ b, B transposed",
                        "matmul_tf32_wgmma_tma a @ b, B as stored"]  # fmt: skip
    assert record["kernels"]["matmul_tf32_wgmma_tma 128x128"] == {"error": "an illegal memory access (stand-in)"}
    assert record["fraction_of_cublas"]["matmul_tf32_wgmma"] == {n: 0.5 for n in ("1024", "2048", "4096")}
    assert set(record["transposes"]) == {"1024", "2048", "4096"}
