"""The emulator's access analysis (emulator/trace.cpp, emulator/access.py): requests, sectors per request
and shared-memory wavefronts per source line, against references computed here in numpy from the
addresses each kernel must touch (the rules written a second time, apart from trace.cpp's), and the
course's kernels against the Nsight Compute records of the chapters (book/results/ncu_*.json).

Kernels here run on the emulator in this process; the course's kernels run through the framework in a
subprocess with MINITORCH_CUDA_EMULATE=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from access_probes import COPY

from minitorch_cuda import results
from minitorch_cuda.emulator.errors import LogicError

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator builds kernels with g++")


@pytest.fixture
def report(monkeypatch):
    """access_report on the emulator, in this process."""
    monkeypatch.setenv("MINITORCH_CUDA_EMULATE", "1")
    from minitorch_cuda.emulator.access import access_report

    return access_report


# --- the references: what a warp's request costs, from its lanes' byte addresses ----------------------


def sectors(addresses: np.ndarray, size: int) -> int:
    """Distinct 32-byte sectors that the lanes' accesses of ``size`` bytes touch."""
    first, last = addresses // 32, (addresses + size - 1) // 32
    return len(set(first.tolist()) | set(last.tolist()))


def wavefronts(addresses: np.ndarray, size: int, load: bool = True) -> tuple[int, int]:
    """(wavefronts, ideal) of a shared request: phases of 128 bytes (32, 16 or 8 lanes for 4-, 8- and
    16-byte accesses; twice as many lanes for a load whose lane pairs n, n^1 or n, n^2 share addresses),
    each taking as many wavefronts as the most distinct 4-byte words one of 32 banks holds."""
    lanes = 128 // max(size, 4)
    pairs = [np.array_equal(addresses, addresses[np.arange(32) ^ d]) for d in (1, 2)]
    if load and size > 4 and any(pairs):
        lanes *= 2
    actual = 0
    for phase in addresses.reshape(-1, lanes):
        words = np.unique(np.concatenate([phase // 4 + k for k in range(max(size // 4, 1))]))
        actual += np.bincount(words % 32, minlength=32).max()
    return actual, 32 // lanes


def warps(n: int) -> list[np.ndarray]:
    """The thread indices 0..n-1 in warps of 32."""
    return list(np.arange(n).reshape(-1, 32))


# --- global memory: coalesced, strided, 16 bytes a lane (access_probes.COPY) ---------------------------


@pytest.mark.parametrize("stride", [1, 2, 32])
def test_strided_copy_reads_the_sectors_its_addresses_touch(report, stride):
    n = 2048
    x, out = np.arange(n * stride, dtype=np.float32), np.zeros(n, np.float32)
    r = report(COPY, "copy", (n // 256,), (256,), [out, x, n, stride])
    assert np.array_equal(out, x[::stride])  # the traced launch computes as any other
    load, store = r.find("x[", "load", "global"), r.find("x[", "store", "global")
    assert load.requests == store.requests == n // 32
    assert load.sectors == sum(sectors(4 * stride * w, 4) for w in warps(n))
    assert store.sectors == sum(sectors(4 * w, 4) for w in warps(n))
    assert (load.sectors_per_request, store.sectors_per_request) == ({1: 4, 2: 8, 32: 32}[stride], 4)
    assert r.metrics()["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == load.sectors


def test_a_float4_copy_moves_16_sectors_a_request(report):
    n = 1024
    x = np.arange(4 * n, dtype=np.float32)
    out = np.zeros_like(x)
    r = report(COPY, "copy4", (n // 128,), (128,), [out, x, n])
    assert np.array_equal(out, x)
    load = r.find("x[i]", "load", "global")
    assert (load.bytes, load.requests) == (16, n // 32)
    assert load.sectors == sum(sectors(16 * w, 16) for w in warps(n)) == 16 * (n // 32)


def test_a_partial_warp_counts_its_active_lanes_only(report):
    n = 40  # the second warp has 8 lanes in bounds
    x, out = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    load = report(COPY, "copy", (1,), (64,), [out, x, n, 1]).find("x[", "load", "global")
    assert (load.requests, load.sectors) == (2, 4 + sectors(4 * np.arange(32, 40), 4))


# --- shared memory: a transposed tile, a broadcast, 8-byte words ----------------------------------------

SHARED = r"""
extern "C" __global__ void transpose_tile(float* out, const float* x) {
    __shared__ float tile[32][WIDTH];  // WIDTH 33: a padded row
    const int tx = threadIdx.x, ty = threadIdx.y;
    tile[ty][tx] = x[ty * 32 + tx];
    __syncthreads();
    out[ty * 32 + tx] = tile[tx][ty];  // a warp reads a column
}
extern "C" __global__ void broadcast(float* out, const float* x) {
    __shared__ float s[32];
    s[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = s[0] + s[threadIdx.x / 4];  // one word for all; one word per 4 lanes
}
extern "C" __global__ void doubles(double* out, const double* x, int stride) {
    __shared__ double s[32 * 32];
    for (int i = threadIdx.x; i < 32 * 32; i += 32) s[i] = x[i];
    __syncwarp();
    out[threadIdx.x] = s[threadIdx.x * stride];
}
"""


@pytest.mark.parametrize("width", [32, 33])
def test_a_transposed_tile_conflicts_32_ways_unless_padded(report, width):
    x, out = np.arange(1024, dtype=np.float32), np.zeros(1024, np.float32)
    r = report(SHARED, "transpose_tile", (1,), (32, 32), [out, x], options=[f"-DWIDTH={width}"])
    assert np.array_equal(out, x.reshape(32, 32).T.ravel())
    read, write = r.find("tile[tx][ty]", "load", "shared"), r.find("tile[ty][tx]", "store", "shared")
    ty, tx = np.divmod(np.arange(1024), 32)  # per warp, ty is fixed and tx is the lane
    want_read = [wavefronts(4 * (tx[w] * width + ty[w]), 4) for w in warps(1024)]
    want_write = [wavefronts(4 * (ty[w] * width + tx[w]), 4, load=False) for w in warps(1024)]
    assert (read.wavefronts, read.ideal) == tuple(map(sum, zip(*want_read)))
    assert (write.wavefronts, write.ideal) == tuple(map(sum, zip(*want_write))) == (32, 32)
    assert read.conflict_degree == (32 if width == 32 else 1)
    name = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
    assert r.metrics()[name] == (31 * 32 if width == 32 else 0)


def test_lanes_reading_one_word_share_it(report):
    x, out = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    r = report(SHARED, "broadcast", (1,), (32,), [out, x], options=["-DWIDTH=33"])
    reads = [a for a in r.accesses if a.kind == "load" and a.space == "shared"]
    lane = np.arange(32)
    want = [wavefronts(np.zeros(32, np.int64), 4), wavefronts(4 * (lane // 4), 4)]
    assert sum(a.requests for a in reads) == 2
    assert sum(a.wavefronts for a in reads) == sum(w for w, _ in want) == 2  # no conflict
    assert np.array_equal(out, x[0] + x[lane // 4])


@pytest.mark.parametrize("stride", [1, 2, 16])
def test_8_byte_words_are_served_a_half_warp_at_a_time(report, stride):
    x, out = np.arange(1024, dtype=np.float64), np.zeros(32)
    r = report(SHARED, "doubles", (1,), (32,), [out, x, stride], options=["-DWIDTH=33"])
    read = r.find("s[threadIdx.x * stride]", "load", "shared")
    want = wavefronts(8 * stride * np.arange(32), 8)
    assert (read.bytes, read.requests, (read.wavefronts, read.ideal)) == (8, 1, want)
    assert want == {1: (2, 2), 2: (4, 2), 16: (32, 2)}[stride]  # 2 phases; 2-way; 16-way in each phase
    assert np.array_equal(out, x[np.arange(32) * stride])


def test_the_figure_draws_one_warp_of_a_line(report):
    import matplotlib

    matplotlib.use("Agg")
    x, out = np.arange(1024, dtype=np.float32), np.zeros(1024, np.float32)
    r = report(SHARED, "transpose_tile", (1,), (32, 32), [out, x], options=["-DWIDTH=32"])
    figure = r.figure("tile[tx][ty]")
    banks = figure.axes[0].collections[0].get_offsets()[:, 1]
    assert list(banks) == [0] * 32  # warp 0 reads column 0: every lane in bank 0
    sample = r.find("tile[tx][ty]").sample
    assert (sample.block, sample.warp, sample.offsets) == (0, 0, tuple(4 * 32 * lane for lane in range(32)))
    assert "32.00 wavefronts a request\n992 bank conflicts in all" in figure.axes[0].get_title()
    assert "transpose_tile: grid (1, 1, 1), block (32, 32, 1)" in str(r)


def test_a_compiled_module_is_traced_through_its_twin_built_for_tracing(report):
    from minitorch_cuda.emulator.compiler import SourceModule

    module = SourceModule(SHARED, options=["-DWIDTH=33"], no_extern_c=True)  # built without tracing
    x, out = np.arange(1024, dtype=np.float32), np.zeros(1024, np.float32)
    r = report(module, "transpose_tile", (1,), (32, 32), [out, x])
    assert r.find("tile[tx][ty]", "load", "shared").conflict_degree == 1  # its -DWIDTH=33 kept
    assert np.array_equal(out, x.reshape(32, 32).T.ravel())


MANY = r"""
extern "C" __global__ void many(float* out, const float* x) {
    float s = 0.0f;
#pragma GCC unroll 400
    for (int k = 0; k < 400; ++k) s += x[k * 32 + threadIdx.x];  // 400 loads, each its own code address
    out[threadIdx.x] = s;
}
"""
ISOLATED = textwrap.dedent("""
    import sys
    import numpy as np
    from minitorch_cuda.emulator import device_process, driver
    from minitorch_cuda.emulator.access import access_report
    device_process.isolate()  # the grader's choice: the kernel runs in the device process
    out = np.zeros(32, np.float32)
    r = access_report(sys.argv[1], "many", (1,), (32,), [out, np.ones(400 * 32, np.float32)])
    print(len(driver._trace_rows()), r.find("s +=").requests, r.find("s +=").sectors, out[0])
""")


def test_a_trace_of_many_code_addresses_comes_back_whole_from_the_device_process():
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1"}
    done = subprocess.run([sys.executable, "-c", ISOLATED, MANY], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["401", "400", "1600", "400.0"]  # more rows than one message holds


def test_tracing_without_the_emulator_says_what_to_set(monkeypatch):
    from minitorch_cuda.emulator.access import tracing

    monkeypatch.delenv("MINITORCH_CUDA_EMULATE", raising=False)
    with pytest.raises(LogicError, match="MINITORCH_CUDA_EMULATE=1"), tracing():
        pass


@pytest.fixture
def elsewhere(monkeypatch):
    """access_report in a process that does not run CUDA on the emulator (a GPU machine, a book build):
    it runs the launch in a child process."""
    monkeypatch.delenv("MINITORCH_CUDA_EMULATE", raising=False)
    from minitorch_cuda import emulator
    from minitorch_cuda.emulator.access import access_report

    assert not emulator.selected()
    return access_report


GATHER = r"""
extern "C" __global__ void gather(float* out, const float* x, const int* idx, int row_len) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = x[idx[i / row_len] * row_len + i % row_len];  // two loads on one line: idx, then x
}
extern "C" __global__ void past_the_end(float* out, const float* x) {
    out[threadIdx.x] = x[threadIdx.x + 32];  // x holds 32 floats: past its end
}
"""


def test_outside_the_emulator_a_child_process_traces_the_launch(elsewhere):
    import matplotlib

    matplotlib.use("Agg")
    rows, row_len = 8, 64
    x = np.arange(4 * rows * row_len, dtype=np.float32)
    idx = np.array([3, 0, 17, 5, 30, 2, 9, 11], np.int32)
    out = np.zeros(rows * row_len, np.float32)
    r = elsewhere(GATHER, "gather", (rows * row_len // 64,), (64,), [out, x, idx, row_len])
    assert np.array_equal(out, x.reshape(-1, row_len)[idx].ravel())  # the caller's array holds what it wrote
    load = r.find("x[idx", "load", "global")
    lanes = [w for w in warps(rows * row_len)]
    want_x = sum(sectors(4 * (idx[w // row_len] * row_len + w % row_len), 4) for w in lanes)
    want_idx = sum(sectors(4 * (w // row_len), 4) for w in lanes)
    assert (load.requests, load.sectors) == (2 * len(lanes), want_x + want_idx)
    assert [s.buffer for s in load.samples] == ["idx", "x"]  # one sample per instruction, in code order
    figure = r.figure("x[idx", "load", instruction=1)
    assert figure.axes[0].get_title().startswith("gather, line 4, load 2 of 2\nglobal load, 4 bytes\n")
    assert "sector of x" in figure.axes[0].get_ylabel()
    with pytest.raises(IndexError, match="has 2 global load instruction"):
        r.figure("x[idx", "load", instruction=2)


def test_outside_the_emulator_a_fault_and_a_bad_argument_are_named(elsewhere):
    from minitorch_cuda.emulator.errors import Error

    with pytest.raises(Error, match=r"kernel .past_the_end.*out-of-bounds read of x\[32\]"):
        elsewhere(GATHER, "past_the_end", (1,), (32,), [np.zeros(32, np.float32), np.zeros(32, np.float32)])
    with pytest.raises(TypeError, match="takes its CUDA C source there, not a dict"):
        elsewhere({}, "gather", (1,), (32,), [])
    with pytest.raises(TypeError, match="argument 1 of gather is a list"):
        elsewhere(GATHER, "gather", (1,), (32,), [np.zeros(32, np.float32), [1.0], np.zeros(1, np.int32), 32])


def test_a_bad_argument_is_named(report):
    with pytest.raises(TypeError, match="argument 2 of copy is a str"):
        report(COPY, "copy", (1,), (32,), [np.zeros(32, np.float32), np.zeros(32, np.float32), "32", 1])
    with pytest.raises(TypeError, match="the kernel's CUDA C source or a module the emulator compiled, not a dict"):
        report({}, "copy", (1,), (32,), [])


# --- the course's kernels, through the framework, against the chapters' Nsight Compute records ----------

# Runs ncu_workloads' workloads (each launch twice: the second is the one ncu keeps) traced on the
# emulator, at sizes given on the command line, and prints each kept launch's metrics as JSON.
WORKLOADS = textwrap.dedent("""
    import json, sys
    from minitorch_cuda.emulator.access import tracing
    from minitorch_cuda.experiments import ncu_workloads as w
    w.SIZES.update(json.loads(sys.argv[1]))
    out = {}
    for name in sys.argv[2:]:
        with tracing() as reports:
            getattr(w, "workload_" + name)()
        out[name] = {r.kernel: r.metrics() for r in reports[len(reports) // 2:]}
    print(json.dumps(out))
""")


def traced_workloads(sizes: dict, *names: str) -> dict:
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1"}
    done = subprocess.run([sys.executable, "-c", WORKLOADS, json.dumps(sizes), *names], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def recorded(topic: str) -> dict:
    """{kernel: {metric: value}} of a chapter's ncu record."""
    return {k: v["metrics"] for run in results.load(topic)["runs"] for k, v in run["kernels"].items()}


def same_counters(emulated: dict, gpu: dict, scale: float = 1) -> dict:
    """{metric: (emulator * scale, GPU)} for every counter both hold."""
    return {m: (emulated[m] * scale, gpu[m]) for m in emulated if m in gpu}


def test_the_gather_and_strided_copy_of_chapter_7_count_as_ncu_did():
    traced = traced_workloads({}, "ch07")["ch07"]  # at the record's size: 8192 x 784
    for kernel, gpu in recorded("ncu_ch07").items():
        pairs = same_counters(traced[kernel], gpu)
        assert len(pairs) == 4 and all(a == b for a, b in pairs.values()), (kernel, pairs)


def test_the_reductions_of_chapter_13_count_as_ncu_did():
    traced = traced_workloads({}, "ch13")["ch13"]  # at the record's sizes
    for kernel, gpu in recorded("ncu_ch13").items():
        pairs = same_counters(traced[kernel], gpu)
        # shared loads: instructions, wavefronts, bank conflicts; shared stores: instructions
        assert len(pairs) == 4 and all(a == b for a, b in pairs.values()), (kernel, pairs)


NVCC_MERGES = {  # the shared loads of the tiled matmul (see below)
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
}


def test_the_matmuls_of_chapter_11_count_as_ncu_did_per_request():
    """At 128^3, not the record's 1024^3 (too slow traced): every count of these kernels grows as n^3
    (a warp's requests per tile or per k are the same at both sizes), so the emulator's times 512
    must be the record's. The tiled kernel's shared loads are left out: nvcc merges four of a
    thread's unrolled tile_a[ty][k] reads into one 16-byte load (40 shared loads a warp and tile, not
    64: 8 broadcasts of 2 wavefronts and 32 of 1, 48 wavefronts; the record has those 48 and 31,419
    more over the launch, 0.06%, which its bank-conflict counter holds too: not a request's, the
    hardware's, unlike every counter compared here)."""
    traced = traced_workloads({"matmul": 128}, "ch11")["ch11"]
    gpu = recorded("ncu_ch11")
    gpu["matmul_tiled"].update(recorded("ncu_ch14_16")["matmul_tiled"])
    for kernel, count in (("matmul_naive", 2), ("matmul_batched", 2), ("matmul_tiled", 3)):
        pairs = same_counters(traced[kernel], gpu[kernel], scale=(1024 // 128) ** 3)
        pairs = {m: p for m, p in pairs.items() if m not in NVCC_MERGES}
        assert len(pairs) == count and all(a == b for a, b in pairs.values()), (kernel, pairs)


REGTILED = textwrap.dedent("""
    import json
    from minitorch_cuda.cuda import kernel_table, launch_core
    from minitorch_cuda.emulator.access import tracing
    from minitorch_cuda.experiments import ncu_workloads as w
    launchers, ops, runtime, DeviceArray = w._device()
    n = 256
    c, a, b = w._gemm_operands(ops, DeviceArray, n)
    g = launch_core.Gemm(n, n, n)
    out = {}
    for tile in ("128x128x8", "64x64x16"):
        bm, bn, _, threads = kernel_table.REGTILED_TILES[tile]
        with tracing() as reports:  # the plain kernel, as the record's workload launches it
            launch_core.dispatch(f"matmul_regtiled_{tile}", g.grid(bm, bn), (threads, 1, 1), (c, a, b, *g.args), 0)
        out[reports[0].kernel] = reports[0].metrics()
    print(json.dumps(out))
""")


def test_the_register_tiled_matmuls_of_chapter_16_count_as_ncu_did_per_request():
    """Their float4 reads of shared memory, one 16-byte request each (quarter-warp phases), at 256^3
    against the record's 1024^3: times 64."""
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1"}
    done = subprocess.run([sys.executable, "-c", REGTILED], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    traced = json.loads(done.stdout.splitlines()[-1])
    gpu = recorded("ncu_ch14_16")
    for kernel in ("matmul_regtiled_128x128x8", "matmul_regtiled_64x64x16"):
        pairs = same_counters(traced[kernel], gpu[kernel], scale=(1024 // 256) ** 3)
        assert len(pairs) == 4 and all(a == b for a, b in pairs.values()), (kernel, pairs)


def test_a_chapter_traces_its_kernel_as_the_gpu_comparison_did(monkeypatch):
    """book/accesses.py, as chapter 7 uses it outside the emulator: the gather at the size of
    access_vs_ncu.json counts what Nsight Compute counted for the same launch, counter by counter."""
    from minitorch_cuda.book import accesses

    monkeypatch.delenv("MINITORCH_CUDA_EMULATE", raising=False)
    record = results.load(accesses.RECORD)
    rows, row_len = record["sizes"]["gather"]
    x = np.arange(rows * row_len, dtype=np.float32)
    idx = np.random.default_rng(0).permutation(rows).astype(np.int32)
    out = np.zeros_like(x)
    report = accesses.traced("gather.cu", "gather_rows", (rows * row_len // 256,), (256,), [out, x, idx, rows, row_len])
    assert np.array_equal(out.reshape(rows, row_len), x.reshape(rows, row_len)[idx])
    gpu = accesses.on_gpu("gather_rows", record)
    assert len(gpu) == 4 and {m: c["ncu"] for m, c in gpu.items()} == {m: report.metrics()[m] for m in gpu}
    assert accesses.count(gpu, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld") == 0  # counted by neither
    assert accesses.on_gpu("no_such_kernel", record) == {}
