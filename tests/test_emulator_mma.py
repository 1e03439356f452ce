"""Tensor cores on the CPU emulator (emulator/tensor_core.h, ptx.py, include/mma.h): mma.sync TF32
and BF16, cvt.rna.tf32.f32 and wmma against float64 numpy, bit for bit against a GPU's recording
(tests/data/mma_recording.npz, made by .ci/mma_record.py), and the errors a warp can make."""

from __future__ import annotations

from pathlib import Path

import mma_probe
import numpy as np
import pytest
from conftest import needs_gxx

pytestmark = needs_gxx

RECORDING = Path(__file__).with_name("data") / "mma_recording.npz"


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """(driver, SourceModule) of the emulator, sharing one kernel cache."""
    from minitorch_cuda.emulator import compiler, driver

    cache = str(tmp_path_factory.getbasetemp() / "emulator-cache")
    driver.init()

    def source_module(source: str, **kw):
        return compiler.SourceModule(source, cache_dir=cache, **kw)

    return driver, source_module


@pytest.fixture(scope="module")
def probed(emu):
    given = mma_probe.inputs()
    return given, mma_probe.run(*emu, given)


def _tf32(bits: np.ndarray) -> np.ndarray:
    """What the tensor core reads of TF32 operands: their top 19 bits."""
    return (np.asarray(bits).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def _bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("probe", list(mma_probe.SHAPES))
def test_the_product_is_float64s_within_the_accumulation_error(probed, probe):
    """D = A B + C of every tile against float64 of the operands the tensor core reads (TF32
    truncated, BF16 exact): within 2^-22 of |C| + |A| |B| (products exact, truncated alignment and
    rounding toward zero cost at most a few units of float's last place)."""
    given, out = probed
    a, b, c = (given[f"{probe}_{x}"] for x in "abc")
    a, b = (_bf16(x) for x in (a, b)) if probe.endswith("bf16") else (_tf32(x) for x in (a, b))
    want, scale = a @ b + c, np.abs(a) @ np.abs(b) + np.abs(c)
    got = out[f"{probe}_d"].astype(np.float64)
    bad = ~(np.abs(got - want) <= 2.0**-22 * scale + 2.0**-149)
    assert not bad.any(), f"{int(bad.sum())} elements, first tile {np.argwhere(bad)[0][0]}"


def test_cvt_rna_rounds_to_nearest_ties_away(probed):
    """To the nearest TF32, ties away from zero; a NaN is cut, not rounded: it keeps its sign and the top
    of its payload, quiet or signaling, and one whose payload is all cut off becomes infinity, as the
    GPU's recording shows (its 22 NaNs, mma_probe's inputs 520 to 522 the three cut to infinity)."""
    given, out = probed
    x = given["cvt_x"]
    u = x.view(np.uint32).astype(np.uint64)
    want = np.where(np.isnan(x), u & 0xFFFFE000, (u + 0x1000) & 0xFFFFE000).astype(np.uint32)
    np.testing.assert_array_equal(out["cvt_out"], want)
    assert out["cvt_out"][513] == 0xFF800000 and out["cvt_out"][515] == 0x7F800000  # -inf stays; max float rounds up
    assert list(out["cvt_out"][520:524]) == [0x7F800000, 0xFF800000, 0x7F800000, 0x7FC00000]
    assert (np.isnan(x) & np.isinf(out["cvt_out"].view(np.float32))).sum() == 3


def test_the_tensor_core_truncates_tf32_operands_where_cvt_would_round(emu):
    """1 + 0.75 * 2^-10 as an operand reads as 1 (the low 13 bits are dropped), though cvt.rna makes
    it 1 + 2^-10: a kernel that skips the conversion gets the truncated product, as on a GPU."""
    given = mma_probe.inputs()
    x = np.float32(1 + 0.75 * 2.0**-10)
    given["mma_tf32_a"][0] = np.zeros((16, 8), np.float32).view(np.uint32)
    given["mma_tf32_a"][0][0, 0] = x.view(np.uint32)
    given["mma_tf32_b"][0] = np.eye(8, dtype=np.float32).view(np.uint32)
    given["mma_tf32_c"][0] = 0
    d = mma_probe.run(*emu, given)["mma_tf32_d"][0]
    assert d[0, 0] == 1.0 and not d[1:].any() and not d[0, 1:].any()


@pytest.mark.skipif(not RECORDING.exists(), reason="no GPU recording yet: run .ci/mma_record.py, commit its npz here")
def test_bit_for_bit_against_the_gpu_recording(emu):
    recorded = dict(np.load(RECORDING))
    given = {k: v for k, v in recorded.items() if k.endswith(("_a", "_b", "_c")) or k == "cvt_x"}
    out = mma_probe.run(*emu, given)
    differ = {}
    for key, got in out.items():
        want = recorded[key]
        same = got.view(np.uint32) == want.view(np.uint32)
        if key != "cvt_out":
            same |= np.isnan(got) & np.isnan(want)
        if not same.all():
            tiles = np.unique(np.argwhere(~same)[:, 0]) if got.ndim == 3 else []
            differ[key] = (int((~same).sum()), sorted({mma_probe.family_of_tile(t) for t in tiles}))
    assert not differ, f"elements that differ from the GPU's ({recorded['device']}), and their families: {differ}"


KERNELS = r"""
extern "C" __global__ void partial_warp(float* out) {  // 48 threads: warp 1 has 16 lanes
    float d[4] = {0, 0, 0, 0};
    unsigned a = 0, b = 0;
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %4, %4, %4}, {%5, %5}, "
        "{%0, %1, %2, %3};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a), "r"(b));
    out[threadIdx.x] = d[0];
}

#define MMA(d) asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %4, %4, %4}, " \
                   "{%4, %4}, {%0, %1, %2, %3};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(0u))

extern "C" __global__ void diverged(float* out) {  // two instructions (told apart by their lines)
    float d[4] = {0, 0, 0, 0};
    if (threadIdx.x < 16) MMA(d);
    else MMA(d);
    out[threadIdx.x] = d[0];
}

extern "C" __global__ void copy_static(float* out, const float* in) {  // cp.async into a static __shared__ array
    __shared__ __align__(16) float tile[128];
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(&tile[4 * threadIdx.x]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(in + 4 * threadIdx.x),
                 "r"(threadIdx.x == 31 ? 8 : 16));
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    for (int i = 0; i < 4; ++i) out[4 * threadIdx.x + i] = tile[4 * (31 - threadIdx.x) + i];
}

extern "C" __global__ void misaligned_wmma(float* out, const float* a) {
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 8, nvcuda::wmma::precision::tf32, nvcuda::wmma::row_major> f;
    nvcuda::wmma::load_matrix_sync(f, a + 1, 8);
    out[threadIdx.x] = f.x[0];
}
"""


def _launch(emu, name: str, threads: int, *arrays: np.ndarray) -> np.ndarray:
    drv, source_module = emu
    module = source_module("#include <mma.h>\n" + KERNELS, no_extern_c=True)
    out = np.zeros(128, np.float32)
    buffers = [drv.to_device(x) for x in (out, *arrays)]
    module.get_function(name).prepare("P" * len(buffers)).prepared_call((1, 1, 1), (threads, 1, 1), *map(int, buffers))
    drv.memcpy_dtoh(out, buffers[0])
    return out


@pytest.mark.parametrize(
    ("name", "threads", "said"),
    [
        ("partial_warp", 48, "mma.sync executed by a warp with fewer than 32 lanes"),
        ("diverged", 32, "the lanes of a warp meet at two different mma.sync instructions"),
    ],
)
def test_a_warp_that_does_not_execute_mma_sync_together_is_named(emu, name, threads, said):
    from minitorch_cuda.emulator.errors import LaunchError

    with pytest.raises(LaunchError, match=said) as info:
        _launch(emu, name, threads)
    assert "kernel.cu" in str(info.value)


def test_cp_async_in_ptx_lands_at_its_wait_and_zero_fills(emu):
    x = np.arange(1, 129, dtype=np.float32)
    out = _launch(emu, "copy_static", 32, x).reshape(32, 4)
    want = x.reshape(32, 4)[::-1].copy()
    want[0, 2:] = 0  # thread 31 copied 8 of its 16 bytes: the rest zero-filled
    np.testing.assert_array_equal(out, want)


def test_a_misaligned_wmma_pointer_is_named(emu):
    from minitorch_cuda.emulator.errors import LaunchError

    with pytest.raises(LaunchError, match="wmma::load_matrix_sync from an address that is not 32-byte aligned"):
        _launch(emu, "misaligned_wmma", 32, np.zeros(256, np.float32))
