"""The emulator's race checking (MINITORCH_CUDA_RACECHECK=1, emulator/racecheck.cpp): each race class
found with its threads, blocks, lines and array, whatever the result; and none reported on the course's
kernels, at any stage, in a short MNIST run, or in the solutions (tests/test_grader.py grades those).

Kernels are built here with race checking on (the switch is read at each build); the framework runs
in a subprocess with both switches set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
from minitorch_cuda.emulator.errors import LaunchError

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator builds kernels with g++")


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """(driver, build(source) -> module built for race checking), sharing one kernel cache."""
    from minitorch_cuda.emulator import compiler, driver

    cache = str(tmp_path_factory.getbasetemp() / "racecheck-cache")

    def build(source: str):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MINITORCH_CUDA_RACECHECK", "1")
            return compiler.SourceModule(source, no_extern_c=True, cache_dir=cache, include_dirs=[str(KERNEL_DIR)])

    return driver, build


def run(emu, source: str, name: str, signature: str, grid, block, *args, shared_size: int = 0) -> None:
    emu[1](source).get_function(name).prepare(signature).prepared_call(grid, block, *args, shared_size=shared_size)


def line_of(source: str, code: str) -> int:
    """The line of ``source`` that holds ``code`` (once)."""
    found = [i + 1 for i, line in enumerate(source.splitlines()) if code in line]
    assert len(found) == 1, (code, found)
    return found[0]


# --- one block: barriers and warps -------------------------------------------------------------

# The last thread sums what every thread stored: with the barrier missing it still gets the right
# sum under the emulator's order (threads run in order, the last one last), never on a GPU for sure.
LAST_THREAD_SUMS = r"""
extern "C" __global__ void last_sums(float* out, const float* x, int barrier) {
    __shared__ float s[128];
    const int t = threadIdx.x;
    s[t] = x[t];
    if (barrier) __syncthreads();
    if (t == blockDim.x - 1) {
        float total = 0.0f;
        for (int i = 0; i < blockDim.x; ++i) total += s[i];
        out[0] = total;
    }
}
"""


def test_a_missing_barrier_is_found_though_the_answer_is_right(emu):
    driver = emu[0]
    x = np.arange(128, dtype=np.float32)
    d_x, d_out, got = driver.to_device(x), driver.mem_alloc(4), np.empty(1, np.float32)
    run(emu, LAST_THREAD_SUMS, "last_sums", "PPi", (1, 1, 1), (128, 1, 1), d_out, d_x, 1)
    driver.memcpy_dtoh(got, d_out)
    assert got[0] == x.sum()
    with pytest.raises(LaunchError) as caught:
        run(emu, LAST_THREAD_SUMS, "last_sums", "PPi", (1, 1, 1), (128, 1, 1), d_out, d_x, 0)
    message = str(caught.value)
    assert "data race (racecheck)" in message and "kernel 'last_sums', block (0, 0, 0), thread (127, 0, 0)" in message
    assert f"reads it at line {line_of(LAST_THREAD_SUMS, 'total += s[i]')}" in message
    assert f"thread (0, 0, 0) of the same block wrote it at line {line_of(LAST_THREAD_SUMS, 's[t] = x[t]')}" in message
    assert "no __syncthreads()" in message and "warp" not in message  # thread 0 is in another warp


# The same race with the C library in the middle: the slots copied out with one memcpy, or written by
# sincosf through its pointers (emulator/kernel_memory.cpp tells race checking of their bytes).
THROUGH_THE_C_LIBRARY = r"""
extern "C" __global__ void through_libc(float* out, const float* x, int barrier, int how) {
    __shared__ float s[128], c[128];
    const int t = threadIdx.x;
    if (how == 0) s[t] = x[t], c[t] = 0.0f;
    else sincosf(x[t], &s[t], &c[t]);
    if (barrier) __syncthreads();
    if (t == blockDim.x - 1) {
        float copy[128], total = 0.0f;
        if (how == 0) memcpy(copy, s, sizeof copy);
        else for (int i = 0; i < 128; ++i) copy[i] = s[i];
        for (int i = 0; i < 128; ++i) total += copy[i] + c[i] * 0.0f;
        float whole;
        out[0] = total + modff(0.5f, &whole) + whole;
    }
}
"""


@pytest.mark.parametrize("how, racing_line", [(0, "memcpy(copy, s, sizeof copy)"), (1, "copy[i] = s[i]")])
def test_a_race_through_the_c_library_is_found(emu, how, racing_line):
    """memcpy reads the slots, or sincosf writes them: the race is named at the kernel's own lines,
    and with the barrier the same kernel runs clean, with sincosf's and modff's results right."""
    driver = emu[0]
    x = np.linspace(-2, 2, 128, dtype=np.float32)
    d_x, d_out, got = driver.to_device(x), driver.mem_alloc(4), np.empty(1, np.float32)
    run(emu, THROUGH_THE_C_LIBRARY, "through_libc", "PPii", (1, 1, 1), (128, 1, 1), d_out, d_x, 1, how)
    driver.memcpy_dtoh(got, d_out)
    want = (x.astype(np.float64) if how == 0 else np.sin(x.astype(np.float64))).sum() + 0.5
    assert got[0] == pytest.approx(want, abs=1e-4)
    with pytest.raises(LaunchError) as caught:
        run(emu, THROUGH_THE_C_LIBRARY, "through_libc", "PPii", (1, 1, 1), (128, 1, 1), d_out, d_x, 0, how)
    message = str(caught.value)
    assert "data race (racecheck)" in message, message
    assert f"reads it at line {line_of(THROUGH_THE_C_LIBRARY, racing_line)}" in message, message
    writer = "s[t] = x[t], c[t] = 0.0f" if how == 0 else "sincosf(x[t], &s[t], &c[t])"
    assert f"wrote it at line {line_of(THROUGH_THE_C_LIBRARY, writer)}" in message, message


PRINTF_N = r"""
extern "C" __global__ void printf_plain(int* out) {
    const int t = threadIdx.x;
    if (t == 0) printf("%d%%n %5.2f\n", 7, 1.0);
}
extern "C" __global__ void printf_n(int* out) {
    const int t = threadIdx.x;
    if (t == 0) printf("%d%n\n", 7, out);
    __syncthreads();
}
"""


def test_printf_n_is_refused(emu, capfd):
    """%n writes through a pointer, past race checking, and CUDA's printf has none: refused at its
    line; a %% before an n is no %n."""
    driver = emu[0]
    d_out = driver.mem_alloc(4)
    run(emu, PRINTF_N, "printf_plain", "P", (1, 1, 1), (1, 1, 1), d_out)
    driver.Context.synchronize()
    assert "7%n  1.00" in capfd.readouterr().out
    with pytest.raises(LaunchError) as caught:
        run(emu, PRINTF_N, "printf_n", "P", (1, 1, 1), (1, 1, 1), d_out)
    message = str(caught.value)
    assert "printf's %n (racecheck) at line" in message and f"line {line_of(PRINTF_N, '7, out);')}" in message, message


def test_a_race_within_blocks_is_reported_the_same_on_every_run(emu, monkeypatch):
    """Blocks run at once on two workers, every one with the race: the lowest block's report stands,
    word for word the one of a single worker's run."""
    driver = emu[0]
    d_x, d_out = driver.to_device(np.arange(128, dtype=np.float32)), driver.mem_alloc(4)
    messages = []
    for workers in ("1", "2", "2", "2"):
        monkeypatch.setenv("MINITORCH_CUDA_EMULATE_THREADS", workers)
        with pytest.raises(LaunchError) as caught:
            run(emu, LAST_THREAD_SUMS, "last_sums", "PPi", (16, 1, 1), (128, 1, 1), d_out, d_x, 0)
        messages.append(str(caught.value))
    assert "block (0, 0, 0), thread (127, 0, 0): data race (racecheck)" in messages[0], messages[0]
    assert messages[1:] == messages[:1] * 3, messages


# A tile loop without its trailing barrier: the next tile's store overwrites a slot another thread
# has not read yet (write after read), again with the right answer in the emulator's order.
TILE_LOOP = r"""
extern "C" __global__ void tile_sums(float* out, const float* x, int tiles, int trailing) {
    __shared__ float tile[64];
    const int t = threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < tiles; ++k) {
        tile[t] = x[k * 64 + t];
        __syncthreads();
        acc += tile[63 - t];
        if (trailing) __syncthreads();
    }
    out[t] = acc;
}
"""


def test_a_missing_trailing_barrier_is_a_race_on_the_next_store(emu):
    driver = emu[0]
    x = np.arange(3 * 64, dtype=np.float32)
    d_x, d_out, got = driver.to_device(x), driver.mem_alloc(4 * 64), np.empty(64, np.float32)
    run(emu, TILE_LOOP, "tile_sums", "PPii", (1, 1, 1), (64, 1, 1), d_out, d_x, 3, 1)
    driver.memcpy_dtoh(got, d_out)
    np.testing.assert_array_equal(got, x.reshape(3, 64)[:, ::-1].sum(0))
    with pytest.raises(LaunchError) as caught:
        run(emu, TILE_LOOP, "tile_sums", "PPii", (1, 1, 1), (64, 1, 1), d_out, d_x, 3, 0)
    message = str(caught.value)
    store, load = line_of(TILE_LOOP, "tile[t] = x"), line_of(TILE_LOOP, "acc += tile")
    assert "data race (racecheck)" in message and f"at line {store}" in message and f"at line {load}" in message
    # thread 31 ran on into the next tile and stored its slot before thread 32 read the old value there
    assert "thread (32, 0, 0): data race" in message and "thread (31, 0, 0) of the same block wrote it" in message


# Lanes of one warp pass values through shared memory: __syncwarp() orders them, nothing else does.
WARP_EXCHANGE = r"""
extern "C" __global__ void warp_rotate(float* out, const float* x, int sync) {
    __shared__ float s[32];
    const int lane = threadIdx.x;
    s[lane] = x[lane];
    if (sync) __syncwarp();
    out[lane] = s[(lane + 1) % 32];
}
"""


def test_lanes_of_a_warp_are_ordered_by_a_warp_operation_only(emu):
    driver = emu[0]
    x = np.arange(32, dtype=np.float32)
    d_x, d_out, got = driver.to_device(x), driver.mem_alloc(4 * 32), np.empty(32, np.float32)
    run(emu, WARP_EXCHANGE, "warp_rotate", "PPi", (1, 1, 1), (32, 1, 1), d_out, d_x, 1)
    driver.memcpy_dtoh(got, d_out)
    np.testing.assert_array_equal(got, np.roll(x, -1))
    # lane 0 ran to its end first, reading lane 1's slot before lane 1 stored it (the poison)
    with pytest.raises(LaunchError, match=r"thread \(1, 0, 0\): data race .* writes it .* thread \(0, 0, 0\) of the "
                       r"same block read it .*nor a __syncwarp\(\)"):  # fmt: skip
        run(emu, WARP_EXCHANGE, "warp_rotate", "PPi", (1, 1, 1), (32, 1, 1), d_out, d_x, 0)


ATOMIC_COUNT = r"""
extern "C" __global__ void count(int* bins, const int* keys, int n) {
    __shared__ int local[4];
    if (threadIdx.x < 4) local[threadIdx.x] = 0;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&local[keys[i] & 3], 1);
    __syncthreads();
    if (threadIdx.x < 4) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}
"""


def test_atomics_do_not_race_with_atomics(emu):
    driver = emu[0]
    keys = np.random.default_rng(0).integers(0, 100, 1000).astype(np.int32)
    d_keys, d_bins, got = driver.to_device(keys), driver.to_device(np.zeros(4, np.int32)), np.empty(4, np.int32)
    run(emu, ATOMIC_COUNT, "count", "PPi", (8, 1, 1), (128, 1, 1), d_bins, d_keys, 1000)
    driver.memcpy_dtoh(got, d_bins)
    np.testing.assert_array_equal(got, np.bincount(keys & 3, minlength=4))


# --- between blocks: global memory -------------------------------------------------------------

NEIGHBOUR = r"""
extern "C" __global__ void neighbour(float* data) {
    const int b = blockIdx.x;
    if (threadIdx.x == 0) {
        data[b] = b;
        if (b > 0) data[64 + b] = data[b - 1];  // what block b - 1 wrote, in the same launch
    }
}
"""


def test_blocks_that_share_global_memory_race_without_an_order(emu, monkeypatch):
    monkeypatch.setenv("MINITORCH_CUDA_EMULATE_THREADS", "1")  # blocks in order: block 1 comes second
    driver = emu[0]
    d = driver.to_device(np.zeros(128, np.float32))
    with pytest.raises(LaunchError) as caught:
        run(emu, NEIGHBOUR, "neighbour", "P", (8, 1, 1), (32, 1, 1), d)
    message = str(caught.value)
    assert "kernel 'neighbour', block (1, 0, 0), thread (0, 0, 0): data race (racecheck) on data[0]" in message
    assert f"thread (0, 0, 0) of block (0, 0, 0) wrote it at line {line_of(NEIGHBOUR, 'data[b] = b')}" in message
    assert "nothing ordering the two blocks" in message


# Blocks in pairs: each works a while (so that partners run at once on two workers), then writes its
# slot and reads its partner's; whichever partner comes second finds the race. `where` tells each
# block's worker by its dynamic shared memory.
PAIRS = r"""
extern "C" __global__ void pairs(float* data, unsigned long long* where, int rounds) {
    extern __shared__ float scratch[];
    const int b = blockIdx.x, t = threadIdx.x;
    if (t == 0) where[b] = (unsigned long long)scratch;
    for (int r = 0; r < rounds; ++r) {
        scratch[t] = r;
        __syncthreads();
    }
    if (t == 0) {
        data[b] = b;
        data[64 + b] = data[b ^ 1];
    }
}
"""


@pytest.mark.parametrize("workers", ["2", "1"])
def test_blocks_on_different_workers_race_from_either_side(emu, monkeypatch, workers):
    monkeypatch.setenv("MINITORCH_CUDA_EMULATE_THREADS", workers)
    driver = emu[0]
    store, load = line_of(PAIRS, "data[b] = b"), line_of(PAIRS, "data[b ^ 1]")
    for _ in range(3):
        d, d_where, where = (
            driver.to_device(np.zeros(128, np.float32)),
            driver.to_device(np.zeros(64, np.uint64)),
            np.empty(64, np.uint64),
        )
        with pytest.raises(LaunchError) as caught:
            run(emu, PAIRS, "pairs", "PPi", (64, 1, 1), (64, 1, 1), d, d_where, 2000, shared_size=256)
        driver.memcpy_dtoh(where, d_where)
        assert len(set(where[where != 0])) == int(workers), where  # the blocks that ran, on each worker
        message = str(caught.value)
        found = re.search(
            r"block \((\d+), 0, 0\), thread \(0, 0, 0\): data race \(racecheck\) on data\[(\d+)\]: this thread "
            r"(reads|writes) it at line (\d+)(?:: `[^`]*`)?, "
            r"and thread \(0, 0, 0\) of block \((\d+), 0, 0\) (wrote|read) it "
            r"at line (\d+)(?:: `[^`]*`)? in the same launch",
            message,
        )
        assert found, message
        this, index, verb, line, other, other_verb, other_line = found.groups()
        assert int(this) ^ 1 == int(other), message
        assert int(index) == int(this if verb == "writes" else other), message  # the writer's slot
        assert {(verb, int(line)), (other_verb, int(other_line))} in (
            {("writes", store), ("read", load)},
            {("reads", load), ("wrote", store)},
        ), message
        if workers == "1":  # in order: block 1 writes the slot block 0 has read
            assert (this, verb, other, index) == ("1", "writes", "0", "1"), message


GRID_PHASES = r"""
#include "grid_barrier.cuh"
extern "C" __global__ void phases(float* data, GridBarrier* bar, int barrier) {
    const int b = blockIdx.x, t = threadIdx.x;
    data[b * 32 + t] = b;
    if (barrier) grid_barrier(bar);
    data[128 + b * 32 + t] = data[((b + 1) % gridDim.x) * 32 + t];
}
"""


def test_a_grid_barrier_orders_the_blocks(emu):
    driver = emu[0]
    d, bar = driver.to_device(np.zeros(256, np.float32)), driver.to_device(np.zeros(2, np.uint32))
    got = np.empty(256, np.float32)
    run(emu, GRID_PHASES, "phases", "PPi", (4, 1, 1), (32, 1, 1), d, bar, 1)
    driver.memcpy_dtoh(got, d)
    np.testing.assert_array_equal(got[128:], np.repeat([1, 2, 3, 0], 32))
    with pytest.raises(LaunchError, match=r"data race \(racecheck\) on data\[\d+\]"):
        run(emu, GRID_PHASES, "phases", "PPi", (4, 1, 1), (32, 1, 1), d, bar, 0)


# The CUDA Programming Guide's last-block reduction: each block stores its sum, fences, and counts
# itself in; the block that brings the count to gridDim.x adds the sums up.
LAST_BLOCK = r"""
extern "C" __global__ void total(float* out, float* partial, unsigned* arrived, const float* x, int fence) {
    __shared__ float s[64];
    __shared__ bool last;
    const int t = threadIdx.x;
    s[t] = x[blockIdx.x * 64 + t];
    __syncthreads();
    if (t == 0) {
        float sum = 0.0f;
        for (int i = 0; i < 64; ++i) sum += s[i];
        partial[blockIdx.x] = sum;
        if (fence) __threadfence();
        last = atomicAdd(arrived, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && t == 0) {
        float sum = 0.0f;
        for (int b = 0; b < gridDim.x; ++b) sum += ((volatile float*)partial)[b];
        out[0] = sum;
        *arrived = 0;
    }
}
"""


def test_a_last_block_reduction_needs_its_fence(emu, monkeypatch):
    monkeypatch.setenv("MINITORCH_CUDA_EMULATE_THREADS", "1")  # the last block to arrive is the last one
    driver = emu[0]
    x = np.arange(4 * 64, dtype=np.float32)
    d_x, d_out, d_partial = driver.to_device(x), driver.mem_alloc(4), driver.mem_alloc(16)
    d_arrived, got = driver.to_device(np.zeros(1, np.uint32)), np.empty(1, np.float32)
    for blocks in (4, 9):  # co-resident (blocks take turns) and not (one worker runs them in order)
        xs = np.arange(blocks * 64, dtype=np.float32)
        d_x, d_partial = driver.to_device(xs), driver.mem_alloc(4 * blocks)
        run(emu, LAST_BLOCK, "total", "PPPPi", (blocks, 1, 1), (64, 1, 1), d_out, d_partial, d_arrived, d_x, 1)
        driver.memcpy_dtoh(got, d_out)
        assert got[0] == xs.sum()
        with pytest.raises(LaunchError) as caught:
            run(emu, LAST_BLOCK, "total", "PPPPi", (blocks, 1, 1), (64, 1, 1), d_out, d_partial, d_arrived, d_x, 0)
        message = str(caught.value)
        last = f"({blocks - 1}, 0, 0)"
        assert f"block {last}, thread (0, 0, 0): missing __threadfence() (racecheck)" in message
        store, atomic = line_of(LAST_BLOCK, "partial[blockIdx.x] = sum"), line_of(LAST_BLOCK, "atomicAdd(arrived")
        assert f"reads partial[0] at line {line_of(LAST_BLOCK, 'volatile float*')}" in message
        assert f"which block (0, 0, 0) wrote at line {store}" in message and f"store at line {atomic}" in message
        driver.memcpy_dtoh(got, d_out)
        driver.memcpy_htod(d_arrived, np.zeros(1, np.uint32))  # the failed launch left its count


# --- the framework: every stage, and a short MNIST run, report nothing ---------------------------

STAGES = r"""
import json, sys, warnings
import numpy as np, minitorch_cuda as mt
from minitorch_cuda import train
from minitorch_cuda.tensor import tensor
rng = np.random.default_rng(0)
x = rng.random((128, 784)).astype(np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
losses = {}
for stage in range(14):  # stage 12's tensor cores too: mma.sync on the emulator
    with mt.use_stage(stage), warnings.catch_warnings():
        warnings.simplefilter("error")  # stage 13 must run its one kernel, not fall back
        trainer = train.Trainer(train.Protocol(), "cuda")
        xd, yd = tensor(x, "cuda"), tensor(y, "cuda")
        losses[stage] = [trainer.step(xd[i:i + 64], yd[i:i + 64]) for i in (0, 64)]
print(json.dumps(losses))
"""


def _framework(script: str, tmp_path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1", "MINITORCH_CUDA_RACECHECK": "1",
           "MINITORCH_CUDA_CACHE": str(tmp_path / "cache")}  # fmt: skip
    return subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.timeout(900)
def test_no_race_in_the_training_step_at_any_stage(tmp_path):
    done = _framework(STAGES, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = json.loads(done.stdout.splitlines()[-1])
    assert sorted(map(int, losses)) == list(range(14))
    assert all(np.isfinite(v).all() for v in losses.values()), losses


MNIST = r"""
import sys, time
import minitorch_cuda as mt
from minitorch_cuda import train
with mt.use_stage(8):
    data = train.load_to("cuda")
    trainer = train.Trainer(train.Protocol(), "cuda")
    steps = int(sys.argv[1])
    start = time.perf_counter()  # the epoch's shuffle (a gather) on the first steps' rows only
    loss = trainer.epoch(data.x_train[: 64 * steps], data.y_train[: 64 * steps])
    print(loss, time.perf_counter() - start)
"""


@pytest.mark.timeout(900)
def test_no_race_in_a_short_mnist_run(tmp_path):
    done = _framework(MNIST, tmp_path, "5")
    assert done.returncode == 0, done.stderr[-3000:]
    loss, _ = map(float, done.stdout.split())
    assert 0.0 < loss < 2.5


# --- the grader's device process ---------------------------------------------------------------

ISOLATED = r"""
import os, sys
import numpy as np
from minitorch_cuda.emulator import compiler, device_process, driver
from minitorch_cuda.emulator.errors import LaunchError
device_process.isolate()
source = sys.stdin.read()
d = driver.to_device(np.zeros(128, np.float32))
f = compiler.SourceModule(source, no_extern_c=True).get_function("neighbour").prepare("P")
try:
    f.prepared_call((8, 1, 1), (32, 1, 1), d)
except LaunchError as exc:
    print(exc)
"""


def test_races_are_found_in_the_device_process(tmp_path):
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1", "MINITORCH_CUDA_RACECHECK": "1",
           "MINITORCH_CUDA_EMULATE_THREADS": "1",  # blocks in order: block 1 comes second
           "MINITORCH_CUDA_CACHE": str(tmp_path / "cache")}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", ISOLATED], input=NEIGHBOUR, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"data race \(racecheck\) on data\[0\].* of block \(0, 0, 0\) wrote it at line "
                     rf"{line_of(NEIGHBOUR, 'data[b] = b')}", done.stdout), done.stdout  # fmt: skip


def test_a_kernel_without_race_checking_runs_unchanged(tmp_path, monkeypatch):
    """Without the switch the same kernel builds without instrumentation and its race goes unseen."""
    from minitorch_cuda.emulator import compiler, driver

    monkeypatch.delenv("MINITORCH_CUDA_RACECHECK", raising=False)
    monkeypatch.setenv("MINITORCH_CUDA_EMULATE_THREADS", "1")  # in order, block b - 1 has written: no race shows
    module = compiler.SourceModule(textwrap.dedent(NEIGHBOUR), no_extern_c=True, cache_dir=str(tmp_path))
    assert not module.library.racecheck
    d, got = driver.to_device(np.zeros(128, np.float32)), np.empty(128, np.float32)
    module.get_function("neighbour").prepare("P").prepared_call((8, 1, 1), (32, 1, 1), d)
    driver.memcpy_dtoh(got, d)
    np.testing.assert_array_equal(got[65:72], np.arange(7))


def test_the_grader_names_each_class_for_its_reason(emu):
    """A race and a missing fence reach the grader's verdict as "racecheck" and "missing_fence"."""
    from minitorch_cuda.grade import checks, verdict

    driver = emu[0]
    d_out, d_partial, d_arrived = driver.mem_alloc(4), driver.mem_alloc(16), driver.to_device(np.zeros(1, np.uint32))
    d_x = driver.to_device(np.ones(4 * 64, np.float32))
    with pytest.raises(LaunchError) as unfenced:
        run(emu, LAST_BLOCK, "total", "PPPPi", (4, 1, 1), (64, 1, 1), d_out, d_partial, d_arrived, d_x, 0)
    with pytest.raises(LaunchError) as raced:
        run(emu, NEIGHBOUR, "neighbour", "P", (8, 1, 1), (32, 1, 1), driver.mem_alloc(512))
    assert checks.classify_exception(unfenced.value) == verdict.MISSING_FENCE
    assert checks.classify_exception(raced.value) == verdict.RACECHECK
