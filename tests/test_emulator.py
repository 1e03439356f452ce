"""The CPU emulator of the CUDA device (minitorch_cuda/emulator): no GPU needed, so CI runs these.

Kernels here are launched through the emulated driver directly; the framework's ops
run on it in a subprocess with MINITORCH_CUDA_EMULATE=1 (the switch is read once,
at import). Shapes are small: every GPU thread is a fiber on the host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_gxx

from minitorch_cuda.cuda.kernel_table import KERNEL_DIR, SPECS

pytestmark = needs_gxx

# Every kernel file builds (the Hopper kernels' bodies are sm_90a code only, empty elsewhere, as
# nvcc builds them for an Ampere GPU); built as sm_90a code, these are refused, naming chapter 19's section.
HOPPER = {
    "wgmma.cu": ("warpgroup tensor-core instructions (wgmma)", "A third kernel: warpgroup MMA on Hopper"),
    "wgmma_tma.cu": ("warpgroup tensor-core instructions (wgmma)", "A third kernel"),  # wgmma_tf32.cuh comes first
}
FILES = sorted(p.name for p in KERNEL_DIR.glob("*.cu"))


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """(driver, compiler, build(source) -> module), all sharing one kernel cache."""
    from minitorch_cuda.emulator import compiler, driver

    cache = str(tmp_path_factory.getbasetemp() / "emulator-cache")

    def build(source: str):
        return compiler.SourceModule(source, no_extern_c=True, cache_dir=cache, include_dirs=[str(KERNEL_DIR)])

    build.cache = cache
    return driver, compiler, build


def launch(emu, source: str, name: str, signature: str, grid, block, *args, shared: int = 0) -> None:
    _, _, build = emu
    build(source).get_function(name).prepare(signature).prepared_call(grid, block, *args, shared_size=shared)


# --- building ------------------------------------------------------------------------------


@pytest.mark.parametrize("file", FILES)
def test_every_kernel_file_builds(emu, file):
    source = (KERNEL_DIR / file).read_text()
    module = emu[2](source)
    expected = {name for name, spec in SPECS.items() if spec.file == file}
    assert expected <= module.library.names, f"{file}: missing {expected - module.library.names}"


@pytest.mark.parametrize("file", sorted(HOPPER))
def test_hopper_kernels_built_as_sm_90a_code_are_refused_naming_the_chapter(emu, file):
    from minitorch_cuda.emulator import compiler
    from minitorch_cuda.emulator.errors import CompileError

    what, section = HOPPER[file]
    with pytest.raises(CompileError, match=f"does not model .*{re.escape(what)}") as info:
        compiler.SourceModule((KERNEL_DIR / file).read_text(), no_extern_c=True, cache_dir=emu[2].cache,
                              include_dirs=[str(KERNEL_DIR)], options=["-D__CUDA_ARCH_FEAT_SM90_ALL"])  # fmt: skip
    assert f'needs a GPU (chapter 19, "{section}' in str(info.value)
    assert "error: the CPU emulator does not model" in info.value.stderr, info.value.stderr


@pytest.mark.parametrize(
    ("body", "construct", "section"),
    [
        ('unsigned r; asm("brev.b32 %0, %1;" : "=r"(r) : "r"(1u));', "the PTX instruction brev.b32", ""),
        (
            'asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0}, {%1}, {%2}, {%3};" ::);',
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 with operands other than",
            "",
        ),
        (
            'asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0}, {%1}, {%2}, {%3};" ::);',
            "the tensor-core instruction mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
            "",
        ),
        ('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");', "(wgmma)", "A third kernel"),
        ('asm volatile(\n        "setmaxnreg.inc.sync.aligned.u32 240;" ::);', "(setmaxnreg)", "A fourth kernel"),
        (
            'asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global [%0], [%1];" :: "r"(0), "l"(out));',
            "(TMA: cp.async.bulk.tensor)",
            "A fourth kernel",
        ),
        ("const CUtensorMap* map = nullptr;", "TMA tensor maps (CUtensorMap)", "A fourth kernel"),
    ],
)
def test_unmodelled_ptx_is_refused_with_its_line(emu, body, construct, section):
    from minitorch_cuda.emulator.errors import CompileError

    source = f'extern "C" __global__ void k(float* out) {{\n    {body}\n}}\n'
    with pytest.raises(CompileError, match=re.escape(construct)) as info:
        emu[2](source)
    assert "kernel.cu(2): error" in info.value.stderr and "needs a GPU" in info.value.stderr
    assert f'(chapter 19, "{section}' in info.value.stderr if section else "chapter 19" not in info.value.stderr


def test_a_syntax_error_names_its_line_as_nvcc_does(emu):
    from minitorch_cuda.emulator.errors import CompileError

    with pytest.raises(CompileError) as info:
        emu[2]('extern "C" __global__ void k(float* out) {\n    out[0] = 1.0f\n}\n')
    assert re.search(r"kernel\.cu\(2\): error: expected ';'", info.value.stderr)


def test_get_function_needs_c_linkage_as_on_a_gpu(emu):
    from minitorch_cuda.emulator.errors import LogicError

    module = emu[2]("__global__ void k(float* out) { out[0] = 1.0f; }\n")
    with pytest.raises(LogicError, match="named symbol not found"):
        module.get_function("k")


# --- GPU semantics -------------------------------------------------------------------------


WARP_OPS = r"""
extern "C" __global__ void warp_ops(int* out) {
    const int lane = threadIdx.x & 31, t = threadIdx.x;
    int* o = out + 8 * t;
    o[0] = __shfl_sync(0xffffffffu, t * 10, 3);           // broadcast lane 3 of this warp
    o[1] = __shfl_up_sync(0xffffffffu, t, 2);              // own value for lanes 0 and 1
    o[2] = __shfl_down_sync(0xffffffffu, t, 5, 16);        // within segments of 16
    o[3] = __shfl_xor_sync(0xffffffffu, t, 1);
    o[4] = __ballot_sync(0xffffffffu, lane % 3 == 0);
    o[5] = __any_sync(0xffffffffu, t == 40) + 2 * __all_sync(0xffffffffu, t < 64);
    if (lane < 16) o[6] = __shfl_xor_sync(0x0000ffffu, t, 4);  // half a warp, its own mask
    else o[6] = __shfl_xor_sync(0xffff0000u, t, 4);
    o[7] = __shfl_sync(0xffffffffu, 1.5f * t, lane ^ 7) == 1.5f * (t ^ 7);  // floats travel as bits
    const int count = __syncthreads_count(t % 4 == 0), all = __syncthreads_and(t < 64), any = __syncthreads_or(t == 5);
    if (t == 0) out[8 * blockDim.x] = count + 100 * all + 1000 * any;
}
"""


def test_warp_operations_and_counting_barriers(emu):
    driver = emu[0]
    n = 64
    out = driver.mem_alloc(4 * (8 * n + 1))
    launch(emu, WARP_OPS, "warp_ops", "P", (1, 1, 1), (n, 1, 1), out)
    flat = np.empty(8 * n + 1, np.int32)
    driver.memcpy_dtoh(flat, out)
    got = flat[:-1].reshape(n, 8)
    assert flat[-1] == n // 4 + 100 + 1000  # __syncthreads_count, _and, _or
    t = np.arange(n)
    lane, base = t % 32, t - t % 32
    seg = t - t % 16
    ballot = np.int32(np.uint32(sum(1 << i for i in range(32) if i % 3 == 0)).view(np.int32))
    np.testing.assert_array_equal(got[:, 0], (base + 3) * 10)
    np.testing.assert_array_equal(got[:, 1], np.where(lane >= 2, t - 2, t))
    np.testing.assert_array_equal(got[:, 2], np.where(t % 16 + 5 < 16, t + 5, t))
    np.testing.assert_array_equal(got[:, 3], t ^ 1)
    np.testing.assert_array_equal(got[:, 4], ballot)
    np.testing.assert_array_equal(got[:, 5], np.where(t >= 32, 1, 0) + 2)
    np.testing.assert_array_equal(got[:, 6], np.where(seg == seg, t ^ 4, 0))
    np.testing.assert_array_equal(got[:, 7], 1)


REVERSE = r"""
extern "C" __global__ void reverse(float* out, const float* in, int sync) {
    __shared__ float tile[256];
    const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    tile[t] = in[i] + blockIdx.x;  // per-block shared memory: another block's tile would show
    if (sync) __syncthreads();
    out[i] = tile[blockDim.x - 1 - t];
}
"""


def test_shared_memory_is_per_block_and_a_missing_barrier_fails_every_time(emu):
    driver = emu[0]
    blocks, n = 8, 8 * 256
    x = np.arange(n, dtype=np.float32)
    d_in, d_out = driver.to_device(x), driver.mem_alloc(4 * n)
    expected = (x.reshape(blocks, 256)[:, ::-1] + np.arange(blocks)[:, None]).ravel()
    got = np.empty(n, np.float32)
    launch(emu, REVERSE, "reverse", "PPi", (blocks, 1, 1), (256, 1, 1), d_out, d_in, 1)
    driver.memcpy_dtoh(got, d_out)
    np.testing.assert_array_equal(got, expected)
    # Without the barrier thread t reads slot 255 - t before thread 255 - t wrote it (for
    # t < 128), the same way on every run: a race shown deterministically, never by chance.
    # Such a read finds the poison of a block's start (NaN), never what the run above left in
    # the worker's tile, which for the same block would be the expected value.
    for _ in range(2):
        launch(emu, REVERSE, "reverse", "PPi", (blocks, 1, 1), (256, 1, 1), d_out, d_in, 0)
        driver.memcpy_dtoh(got, d_out)
        assert np.isnan(got.reshape(blocks, 256)[:, :128]).all()
        np.testing.assert_array_equal(got.reshape(blocks, 256)[:, 128:], expected.reshape(blocks, 256)[:, 128:])


POISONED = r"""
__shared__ int file_count;  // at file scope: poisoned by the kernel's entry, not a declaration

extern "C" __global__ void accumulate(float* out, const float* in, int init) {
    __shared__ __align__(16) float total, copy[64];  // both names of the declaration are poisoned
    __shared__ int count;
    extern __shared__ float scratch[];
    const int t = threadIdx.x;
    if (init && t == 0) total = 0.0f, count = 0, file_count = 0;
    if (init) scratch[t] = in[t], copy[t] = 2.0f * in[t];
    __syncthreads();
    atomicAdd(&total, in[t]);
    atomicAdd(&count, 1);
    atomicAdd(&file_count, 1);
    __syncthreads();
    if (t == 0) out[0] = total, out[1] = count, out[2] = file_count;
    out[3 + t] = scratch[blockDim.x - 1 - t];
    out[3 + blockDim.x + t] = copy[blockDim.x - 1 - t];
}
"""


def test_shared_memory_read_before_it_is_written_holds_the_poison(emu):
    # A launch of one block runs on the same worker every time, so without the poison the
    # runs that skip the initialisation would find the sums and the copy of the run before.
    driver = emu[0]
    n = 64
    x = np.arange(1, n + 1, dtype=np.float32)
    d_in, d_out, got = driver.to_device(x), driver.mem_alloc(4 * (3 + 2 * n)), np.empty(3 + 2 * n, np.float32)
    for init in (1, 0, 1, 0):
        launch(emu, POISONED, "accumulate", "PPi", (1, 1, 1), (n, 1, 1), d_out, d_in, init, shared=4 * n)
        driver.memcpy_dtoh(got, d_out)
        if init:
            np.testing.assert_array_equal(got, [x.astype(np.float64).sum(), n, n, *x[::-1], *(2 * x[::-1])])
        else:  # NaN as a float; -1 as an int, so each count ends one short
            assert np.isnan(got[0]) and list(got[1:3]) == [n - 1, n - 1] and np.isnan(got[3:]).all()


ATOMICS = r"""
extern "C" __global__ void atomics(float* f, int* i, unsigned* u) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(f, 0.5f);
    atomicAdd(i, 1);
    atomicMax(i + 1, t);
    atomicMin(i + 2, -t);
    atomicCAS(u, 0u, 7u + t);  // exactly one thread wins
    atomicInc(u + 1, 9u);
}
"""


def test_atomics_across_blocks(emu):
    driver = emu[0]
    blocks, threads = 32, 128
    f, i, u = driver.to_device(np.zeros(1, np.float32)), driver.to_device(np.zeros(3, np.int32)), driver.mem_alloc(8)
    driver.memcpy_htod(u, np.zeros(2, np.uint32))
    launch(emu, ATOMICS, "atomics", "PPP", (blocks, 1, 1), (threads, 1, 1), f, i, u)
    hf, hi, hu = np.empty(1, np.float32), np.empty(3, np.int32), np.empty(2, np.uint32)
    for host, dev in ((hf, f), (hi, i), (hu, u)):
        driver.memcpy_dtoh(host, dev)
    n = blocks * threads
    assert hf[0] == 0.5 * n and list(hi) == [n, n - 1, -(n - 1)]
    assert 7 <= hu[0] < 7 + n and hu[1] == n % 10


DYNAMIC = r"""
extern __shared__ float file_scope[];
extern "C" __global__ void dynamic(float* out) {
    extern __shared__ float4 quads[];
    file_scope[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = reinterpret_cast<float*>(quads)[blockDim.x - 1 - threadIdx.x];
}
"""


def test_dynamic_shared_memory(emu):
    driver = emu[0]
    out = driver.mem_alloc(4 * 64)
    launch(emu, DYNAMIC, "dynamic", "P", (2, 1, 1), (64, 1, 1), out, shared=4 * 64)
    got = np.empty(64, np.float32)
    driver.memcpy_dtoh(got, out)
    np.testing.assert_array_equal(got, np.arange(64)[::-1])


def test_file_scope_shared_memory_under_pycudas_extern_c_wrapper(emu):
    # SourceModule's default wraps the source in extern "C" { }: a file-scope extern __shared__
    # is still no variable of its own (a pointer read as the library loaded crashed the process),
    # and a file-scope static one is still poisoned at every block's start.
    from minitorch_cuda.emulator import compiler

    driver = emu[0]
    source = DYNAMIC.replace('extern "C" ', "") + POISONED.replace('extern "C" ', "")
    module = compiler.SourceModule(source, cache_dir=emu[2].cache, include_dirs=[str(KERNEL_DIR)])
    out, got = driver.mem_alloc(4 * 131), np.empty(131, np.float32)
    module.get_function("dynamic").prepare("P").prepared_call((1, 1, 1), (64, 1, 1), out, shared_size=4 * 64)
    driver.memcpy_dtoh(got[:64], out)
    np.testing.assert_array_equal(got[:64], np.arange(64)[::-1])
    d_in = driver.to_device(np.ones(64, np.float32))
    module.get_function("accumulate").prepare("PPi").prepared_call((1, 1, 1), (64, 1, 1), out, d_in, 0, shared_size=256)
    driver.memcpy_dtoh(got, out)
    assert got[2] == 63 and np.isnan(got[3:]).all()


def test_a_captured_stream_records_its_work_and_a_graph_replays_it(emu):
    from minitorch_cuda.emulator import graphs

    driver = emu[0]
    source = 'extern "C" __global__ void bump(float* x) { x[threadIdx.x] += 1.0f; }\n'
    bump = emu[2](source).get_function("bump").prepare("P")
    x, y, host = driver.to_device(np.zeros(32, np.float32)), driver.mem_alloc(128), np.empty(32, np.float32)
    owner = driver.Stream()  # graphs.py holds its stream; the handle names it
    stream = graphs.CUstream(owner.handle)
    assert graphs.cuStreamBeginCapture(stream, graphs.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0] == 0
    bump.prepared_async_call((1, 1, 1), (32, 1, 1), stream, x)
    driver.memcpy_dtod_async(y, x, 128, stream)
    err, graph = graphs.cuStreamEndCapture(stream)
    driver.memcpy_dtoh(host, x)
    assert err == 0 and len(graph) == 2 and not host.any()  # recorded, not run
    for _ in range(3):
        graphs.cuGraphLaunch(graphs.cuGraphInstantiate(graph, 0)[1], stream)
    driver.memcpy_dtoh(host, y)
    np.testing.assert_array_equal(host, 3.0)


PIPELINE = r"""
#include <cuda_pipeline.h>

// Double buffering: the copy of tile k + 1 is in flight while tile k is read. Each thread
// reads another thread's float4 (63 - t), so the __syncthreads after the wait is needed.
extern "C" __global__ void tile_sums(float* out, const float* in, int tiles, int lag) {
    __shared__ float4 stage[2][64];
    const int t = threadIdx.x;
    const float4* src = reinterpret_cast<const float4*>(in) + blockIdx.x * tiles * 64;
    __pipeline_memcpy_async(&stage[0][t], &src[t], 16);
    __pipeline_commit();
    for (int k = 0; k < tiles; ++k) {
        if (k + 1 < tiles) __pipeline_memcpy_async(&stage[(k + 1) % 2][t], &src[(k + 1) * 64 + t], 16);
        __pipeline_commit();  // an empty batch at the end keeps the count per iteration
        __pipeline_wait_prior(lag);  // lag 1: tile k has landed, tile k + 1 may be in flight
        __syncthreads();
        const float4 v = stage[k % 2][63 - t];
        out[(blockIdx.x * tiles + k) * 64 + t] = v.x + v.y + v.z + v.w;
        __syncthreads();  // every read of the slot is done before the next copy into it
    }
}

extern "C" __global__ void zero_fill(float* out, const float* in) {
    __shared__ float4 slot[64];
    const int t = threadIdx.x;
    __pipeline_memcpy_async(&slot[t], reinterpret_cast<const float4*>(in) + t, 16, 4 * (t % 4));
    __pipeline_commit();
    __pipeline_wait_prior(0);
    reinterpret_cast<float4*>(out)[t] = slot[t];
}
"""


def _tile_sums(emu, x: np.ndarray, lag: int) -> np.ndarray:
    driver = emu[0]
    blocks, tiles = x.shape[:2]
    d_in, d_out = driver.to_device(x), driver.mem_alloc(4 * blocks * tiles * 64)
    launch(emu, PIPELINE, "tile_sums", "PPii", (blocks, 1, 1), (64, 1, 1), d_out, d_in, tiles, lag)
    got = np.empty((blocks, tiles, 64), np.float32)
    driver.memcpy_dtoh(got, d_out)
    return got


@pytest.mark.parametrize("lag", [1, 0])
def test_double_buffered_async_copies(emu, lag):
    x = np.random.default_rng(lag).standard_normal((3, 5, 64, 4)).astype(np.float32)
    expected = x.astype(np.float64)[:, :, ::-1].sum(axis=3)  # thread t reads thread 63 - t's float4
    np.testing.assert_allclose(_tile_sums(emu, x, lag), expected, rtol=1e-6, atol=1e-6)


def test_an_async_copy_lands_only_at_the_wait_that_covers_it(emu):
    # Waiting until two batches remain leaves tile k in flight when it is read: the slot still
    # holds tile k - 2, on every run (a GPU may or may not have landed it by then).
    x = np.random.default_rng(2).standard_normal((3, 5, 64, 4)).astype(np.float32)
    expected = x.astype(np.float64)[:, :, ::-1].sum(axis=3)
    got = _tile_sums(emu, x, lag=2)
    np.testing.assert_allclose(got[:, 2:], expected[:, :-2], rtol=1e-6, atol=1e-6)
    assert np.isnan(got[:, :2]).all()  # tiles 0 and 1 read slots that no copy has reached yet


def test_an_async_copy_zero_fills_its_tail(emu):
    driver = emu[0]
    x = np.arange(1, 257, dtype=np.float32)
    d_in, d_out = driver.to_device(x), driver.mem_alloc(4 * 256)
    launch(emu, PIPELINE, "zero_fill", "PP", (1, 1, 1), (64, 1, 1), d_out, d_in)
    got = np.empty((64, 4), np.float32)
    driver.memcpy_dtoh(got, d_out)
    kept = np.arange(4)[None, :] < 4 - np.arange(64)[:, None] % 4  # thread t zero-fills t % 4 floats
    np.testing.assert_array_equal(got, np.where(kept, x.reshape(64, 4), 0.0))


def test_a_misaligned_async_copy_names_the_kernel(emu):
    from minitorch_cuda.emulator.errors import LaunchError

    source = (
        "#include <cuda_pipeline.h>\n"
        'extern "C" __global__ void misaligned(float* out, const float* in) {\n'
        "    __shared__ float4 slot[2];\n"
        "    __pipeline_memcpy_async(reinterpret_cast<float*>(slot) + 1, in, 16);\n"
        "}\n"
    )
    out = emu[0].mem_alloc(64)
    with pytest.raises(LaunchError) as info:
        launch(emu, source, "misaligned", "PP", (1, 1, 1), (1, 1, 1), out, out)
    assert re.search(
        r"^in kernel 'misaligned', block \(0, 0, 0\), thread \(0, 0, 0\): misaligned address: "
        r"__pipeline_memcpy_async at kernel.cu:4 copies 16 bytes",
        str(info.value),
    ), str(info.value)


# --- the errors a GPU gives ------------------------------------------------------------------


def _kernel(body: str) -> str:
    return f'extern "C" __global__ void faulty(float* out, int n) {{\n{textwrap.indent(body, "    ")}\n}}\n'


ERRORS = {  # case: (threads in the one block, kernel body, the message)
    "global write past the end": (
        256,
        "out[threadIdx.x] = 1.0f;",
        r"thread \(100, 0, 0\): out-of-bounds write of out\[100\] \(out holds 100 elements\)",
    ),
    "global read before the start": (
        1,
        "out[0] = out[-1024];",
        r"out-of-bounds read of out\[-1024\] \(out holds 100 elements\)",
    ),
    "global read far from any buffer": (
        2,
        "out[0] = out[(size_t)threadIdx.x << 34];",
        r"thread \(1, 0, 0\): invalid read of out\[17179869184\], far past the end of out: no device memory is "
        r"there, at line 2: `out\[0\] = out\[\(size_t\)threadIdx.x << 34\];`",
    ),
    "a read through a null pointer": (
        1,
        "float* never_set = nullptr;\nout[0] = never_set[n];",
        r"invalid read through a null pointer \(address 0x190, a pointer that was never set\), at line 3",
    ),
    "shared write past the end": (
        64,
        "__shared__ float s[32];\ns[threadIdx.x] = 1.0f;",
        r"thread \(32, 0, 0\): out-of-bounds index 32 into an array of type 'float \[32\]' at kernel.cu:3",
    ),
    "dynamic shared write past the end": (
        64,
        "extern __shared__ float s[];\ns[threadIdx.x * 64] = 1.0f;",
        r"thread \(1, 0, 0\): out-of-bounds write past the end of the 256 bytes of dynamic shared memory",
    ),
    "a thread leaves while others wait": (
        64,
        "if (threadIdx.x >= 16) return;\n__syncthreads();",
        r"barrier divergence: 16 of 64 threads wait at __syncthreads at kernel.cu:3, but thread 16 has exited",
    ),
    "threads wait at different barriers": (
        64,
        "if (threadIdx.x < 40) {\n    __syncthreads();\n} else {\n    __syncthreads();\n}",
        r"barrier divergence: thread 0 waits at __syncthreads at kernel.cu:3 while thread 40 waits at the one at "
        r"kernel.cu:5",
    ),
    "a shuffle's mask leaves out a lane that executes it": (
        32,
        "if (threadIdx.x >= 16) out[0] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1);",
        r"thread \(16, 0, 0\): __shfl_xor_sync at kernel.cu:2 with mask 0x0000ffff is executed by lane 16, "
        r"which the mask leaves out",
    ),
    "a shuffle reads a lane outside its mask": (
        32,
        "out[0] = __shfl_down_sync(0x0000ffffu, 1.0f, 1);",
        r"thread \(15, 0, 0\): __shfl_down_sync at kernel.cu:2 reads lane 16, which the mask leaves out",
    ),
    "a shuffle reads a lane that has exited": (
        32,
        "if (threadIdx.x >= 20) return;\nout[0] = __shfl_down_sync(0xffffffffu, 1.0f, 16);",
        r"__shfl_down_sync at kernel.cu:3 reads lane 20, which has exited",
    ),
    "a full-mask shuffle in divergent code": (
        32,
        "float v = 1.0f;\nif (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);\n__syncthreads();",
        r"threads 0-15 wait at __shfl_xor_sync at kernel.cu:3 with mask 0xffffffff, but thread 16 waits at "
        r"__syncthreads at kernel.cu:4; the warp can never complete it",
    ),
    "a thread's local arrays overflow its stack": (
        1,
        "float big[100000];\nfor (int i = 0; i < n; ++i) big[i] = i;\nout[0] = big[n - 1];",
        r"thread \(0, 0, 0\): stack overflow: the thread's local variables need more than 256 KB",
    ),
    "a misaligned float4 load": (
        1,
        "out[0] = reinterpret_cast<const float4*>(out + 1)[0].x;",
        r"misaligned address: .* of type 'const struct float4', which needs 16-byte alignment, at kernel.cu:2",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_a_gpu_gives_name_the_kernel(emu, case):
    from minitorch_cuda.emulator.errors import LaunchError

    threads, body, message = ERRORS[case]
    driver = emu[0]
    out = driver.mem_alloc(400)
    with pytest.raises(LaunchError) as info:
        launch(emu, _kernel(body), "faulty", "Pi", (1, 1, 1), (threads, 1, 1), out, 100, shared=256)
    text = str(info.value)
    assert text.startswith("in kernel 'faulty', block (0, 0, 0)") and text.endswith("(emulated on the CPU)")
    assert re.search(message, text), text
    # The emulated device is still usable after a fault, as it is not after one on a GPU.
    launch(emu, _kernel("out[0] = 2.0f;"), "faulty", "Pi", (1, 1, 1), (1, 1, 1), out, 100)


def test_launch_configuration_is_checked(emu):
    from minitorch_cuda.emulator.errors import LaunchError

    source = 'extern "C" __global__ void __launch_bounds__(128) bounded(float* out) {}\n'
    out = emu[0].mem_alloc(4)
    with pytest.raises(LaunchError, match="too many resources requested for launch .256 threads a block; at most 128"):
        launch(emu, source, "bounded", "P", (1, 1, 1), (256, 1, 1), out)
    with pytest.raises(LaunchError, match="invalid configuration argument"):
        launch(emu, source, "bounded", "P", (1, 1, 1), (0, 1, 1), out)
    with pytest.raises(LaunchError, match="dynamic shared memory"):
        launch(emu, source, "bounded", "P", (1, 1, 1), (32, 1, 1), out, shared=64 << 10)


def test_copies_are_checked_against_the_allocation(emu):
    driver = emu[0]
    buf = driver.mem_alloc(16)
    with pytest.raises(driver.LogicError, match="invalid argument"):
        driver.memcpy_htod(buf, np.zeros(5, np.float32))
    with pytest.raises(driver.LogicError, match="invalid argument"):
        driver.memcpy_dtoh(np.zeros(4, np.float32), int(buf) + 4)


def test_the_device_says_it_is_emulated(emu):
    driver = emu[0]
    device = driver.Context.get_device()
    assert device.name().endswith("(emulated on the CPU)")
    assert device.get_attribute(driver.device_attribute.WARP_SIZE) == 32


# --- the framework on the emulator -------------------------------------------------------------

FRAMEWORK = r"""
import json, numpy as np, minitorch_cuda as mt
from minitorch_cuda import results
from minitorch_cuda.cuda.runtime import device_properties

rng = np.random.default_rng(0)
x = rng.standard_normal((37, 45)).astype(np.float32)
w = rng.standard_normal((45, 29)).astype(np.float32)
t = np.eye(29, dtype=np.float32)[rng.integers(0, 29, 37)]
x64, w64 = x.astype(np.float64), w.astype(np.float64)
z = x64 @ w64
p = np.exp(z - z.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
ref = {"matmul": z, "relu": np.maximum(x64, 0), "sum": x64.sum(1), "softmax": p,
       "xent": -(t * np.log(p)).sum() / 37, "grad_w": x64.T @ ((p - t) / 37)}
errors = {}
for stage in range(12):
    with mt.use_stage(stage):
        xd, wd = mt.tensor(x, device="cuda"), mt.tensor(w, device="cuda", requires_grad=True)
        y = xd @ wd
        loss = mt.cross_entropy_with_softmax(y, mt.tensor(t, device="cuda"))
        loss.backward()
        got = {"matmul": y.numpy(), "relu": xd.relu().numpy(), "sum": xd.sum(1).numpy(),
               "softmax": y.softmax().numpy(), "xent": loss.item(), "grad_w": wd.grad.numpy()}
        errors[stage] = {k: float(np.max(np.abs(got[k] - ref[k]) / (1e-5 + 1e-4 * np.abs(ref[k])))) for k in ref}
try:
    results.save("emulated", {}, "test")
    refused = ""
except RuntimeError as exc:
    refused = str(exc)
print(json.dumps({"device": device_properties()["name"], "available": mt.cuda_available(), "errors": errors,
                  "refused": refused, "for_timing": mt.gpu_for_timing()}))
"""


def test_the_framework_matches_float64_at_every_simt_stage(emu, tmp_path):
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1", "MINITORCH_CUDA_CACHE": emu[2].cache,
           "MINITORCH_CUDA_RESULTS_DIR": str(tmp_path)}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", FRAMEWORK], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["device"] == "CPU emulator (emulated on the CPU)" and report["available"]
    assert report["for_timing"] is False, "the chapters' gpu cells would time the CPU"
    bad = {stage: {k: e for k, e in errs.items() if e > 1} for stage, errs in report["errors"].items()}
    assert not any(bad.values()), bad
    assert "measured on the CPU emulator" in report["refused"] and not list(Path(tmp_path).iterdir())
