"""The emulator's device process (emulator/device_process.py): what the grader's checker runs kernels in.

Each case runs in a fresh Python process, since ``isolate()`` holds for a whole process and must come
before its first allocation. A kernel that reaches the C library (through an address computed from
printf's, which no inspection of its library sees) is stopped and named; the same kernel run in the
caller's process does what it says, which is what the control cases show.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import needs_gxx
from submissions import through_puts

pytestmark = needs_gxx

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = """
import json, sys
import numpy as np
from minitorch_cuda.emulator import compiler, device_process, driver as drv
if sys.argv[1] == "isolated":
    device_process.isolate()
out = {}
def launch(source, name, formats, grid, block, *args):
    try:
        compiler.SourceModule(source).get_function(name).prepare(formats).prepared_call(grid, block, *args)
        return "ok"
    except drv.Error as exc:
        return f"{type(exc).__name__}: {exc}"
"""


def run(code: str, where: str, cwd: Path, **env: str) -> dict:
    """What ``code`` (after PRELUDE) puts in ``out``, run "isolated" or "in-process" in a fresh process
    (``env`` added to its environment)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    script = PRELUDE + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    done = subprocess.run(
        [sys.executable, "-c", script, where], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


KERNELS = r"""
__global__ void scale(float* out, const float* a, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s * a[i];
}
__global__ void block_sum(float* out, const float* a, int n) {  // shared memory, a barrier, shuffles
    __shared__ float partial[8];
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += a[i];
    for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < blockDim.x / 32; ++w) s += partial[w];
        out[0] = s;
    }
}
__global__ void past_the_end(float* out, int n) { out[n + 64] = 1.0f; }
__global__ void load_first(float* out, const float* a) { out[0] = a[0]; }
"""

SAME_EVERYWHERE = f"""
source = {KERNELS!r}
n = 1000
a = np.linspace(-1, 1, n, dtype=np.float32)
da, dout = drv.to_device(a), drv.mem_alloc(4 * n)
out["scale_launch"] = launch(source, "scale", "PPfi", (4, 1, 1), (256, 1, 1), dout, da, 2.5, n)
host = np.empty(n, np.float32); drv.memcpy_dtoh(host, dout)
out["scale"] = host.tolist()
out["sum_launch"] = launch(source, "block_sum", "PPi", (1, 1, 1), (256, 1, 1), dout, da, n)
drv.memcpy_dtoh(host, dout)
out["sum"] = float(host[0])
out["fault"] = launch(source, "past_the_end", "Pi", (1, 1, 1), (1, 1, 1), dout, n)
out["after_fault"] = launch(source, "scale", "PPfi", (4, 1, 1), (256, 1, 1), dout, da, 1.0, n)
freed = drv.to_device(a); pointer = int(freed); freed.free()
out["freed"] = launch(source, "load_first", "PP", (1, 1, 1), (1, 1, 1), dout, pointer)
"""


def test_a_launch_in_the_device_process_does_what_it_does_in_the_callers(tmp_path) -> None:
    """Results and the emulator's fault messages are the same both ways (addresses aside: the device
    process's memory lies in a range of its own), and memory freed since the last launch is gone there
    too (in the caller's process the address may already hold another mapping: not compared)."""
    here, there = (run(SAME_EVERYWHERE, where, tmp_path) for where in ("in-process", "isolated"))
    assert here["scale_launch"] == there["scale_launch"] == "ok"
    assert here["scale"] == there["scale"] and here["sum"] == there["sum"]
    assert abs(there["sum"] - float(sum(x for x in [-1 + 2 * i / 999 for i in range(1000)]))) < 1e-3
    faults = [re.sub(r"0x[0-9a-f]+", "ADDRESS", r["fault"]) for r in (here, there)]
    assert faults[0] == faults[1] and "out-of-bounds write of out[1064] (out holds 1000 elements)" in faults[0], faults
    assert "no device memory is there" in there["freed"], there["freed"]
    assert here["after_fault"] == there["after_fault"] == "ok"


@pytest.mark.parametrize("threads", ["16", "64"])
def test_many_workers_run_in_the_device_process(tmp_path, threads) -> None:
    """A machine of 16 cores runs a launch on 16 workers: past 8 threads that allocate, glibc reads the
    CPUs online from /sys, which the filter refuses (the grader's emulated checks failed so on a GPU
    machine) unless its arena limit is set before the filter. More are cut to driver.MAX_WORKERS (at
    32, a worker's thread met the limit on memory maps and the process aborted)."""
    code = f"""
source = {KERNELS!r}
n = 1 << 16
a = np.linspace(-1, 1, n, dtype=np.float32)
da, dout = drv.to_device(a), drv.mem_alloc(4 * n)
out["launch"] = launch(source, "scale", "PPfi", (n // 64, 1, 1), (64, 1, 1), dout, da, 2.0, n)
host = np.empty(n, np.float32); drv.memcpy_dtoh(host, dout)
out["wrong"] = int(np.count_nonzero(host != 2.0 * a))
"""
    got = run(code, "isolated", tmp_path, MINITORCH_CUDA_EMULATE_THREADS=threads)
    assert got == {"launch": "ok", "wrong": 0}, got


def _kernel(lines: str) -> str:
    return 'extern "C" __global__ void reach(float* out) {\n' + lines + "    out[0] = 1.0f;\n}\n"


# Each reaches the C library through puts's address (none is imported), and what the refusal names
REACHES = {
    "fopen": (
        through_puts('        fopen("FORGED", "w");\n', fopen="void* (*)(const char*, const char*)"),
        "open a file",
    ),
    "system": (through_puts('        system("touch FORGED");\n', system="int (*)(const char*)"), "system call"),
    "kill_parent": (
        through_puts("        kill(getppid(), 9);\n", kill="int (*)(int, int)", getppid="int (*)()"),
        "find the process that started it",
    ),
    "socket": (through_puts("        socket(2, 1, 0);\n", socket="int (*)(int, int, int)"), "network connection"),
}


@pytest.mark.parametrize("call", list(REACHES))
def test_a_kernel_reaching_the_c_library_is_stopped_and_named(tmp_path, call) -> None:
    """The call is refused before it happens (no file, the caller alive), the launch fails naming it,
    and the device stays stopped, as a GPU's context after a fault."""
    lines, named = REACHES[call]
    code = f"""
    d = drv.mem_alloc(64)
    out["first"] = launch({_kernel(lines)!r}, "reach", "P", (1, 1, 1), (1, 1, 1), d)
    out["second"] = launch({_kernel("")!r}, "reach", "P", (1, 1, 1), (1, 1, 1), d)
    """
    there = run(code, "isolated", tmp_path)
    assert "which device code cannot do" in there["first"] and named in there["first"], there
    assert "stopped after an earlier error" in there["second"], there
    assert not (tmp_path / "FORGED").exists()


def test_the_same_kernel_in_the_callers_process_opens_the_file(tmp_path) -> None:
    """The control: run where it was loaded before, the kernel above writes its file (what made the
    checker's verdict forgeable), so the refusal above is the device process's doing."""
    code = f"""
    d = drv.mem_alloc(64)
    out["first"] = launch({_kernel(REACHES["fopen"][0])!r}, "reach", "P", (1, 1, 1), (1, 1, 1), d)
    """
    assert run(code, "in-process", tmp_path)["first"] == "ok"
    assert (tmp_path / "FORGED").exists()


def test_a_constructor_runs_under_the_filter(tmp_path) -> None:
    """Code that runs when the library is loaded runs in the device process, filtered as the kernels."""
    source = '#include <stdio.h>\n__attribute__((constructor)) static void forge() { fopen("FORGED", "w"); }\n'
    code = f"""
    d = drv.mem_alloc(64)
    out["first"] = launch({source + _kernel("")!r}, "reach", "P", (1, 1, 1), (1, 1, 1), d)
    """
    there = run(code, "isolated", tmp_path)
    assert "loading the kernel library" in there["first"] and "open a file" in there["first"], there
    assert not (tmp_path / "FORGED").exists()


def test_isolating_after_an_allocation_is_refused(tmp_path) -> None:
    """An allocation made before would be memory the device process cannot see."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = (
        "from minitorch_cuda.emulator import device_process, driver\n"
        "driver.mem_alloc(16)\n"
        "try:\n    device_process.isolate()\nexcept driver.LogicError as exc:\n    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "refused: isolate() must come before the first device allocation" in done.stdout, done.stderr


# A kernel that answers for the device process (to report its launch clean), sent to every likely descriptor
FORGED_REPLIES = {
    "short": ("int reply[3] = {0, 0, 0};", 12, "malformed reply"),
    "out_of_turn": ("long reply[3] = {0, 0, 0};", 24, "answered out of turn"),
}


@pytest.mark.parametrize("form", list(FORGED_REPLIES))
def test_a_reply_the_kernel_forges_fails_its_launch(tmp_path, form) -> None:
    """The kernel runs in the process that answers, so it can write an answer; one that is not the
    answer to the request in turn fails the launch instead of hiding the kernel's fault."""
    declaration, size, named = FORGED_REPLIES[form]
    forge = f"        {declaration}\n        for (int fd = 3; fd < 16; ++fd) send(fd, reply, {size}, 0x4000);\n"
    lines = through_puts(forge, send="long (*)(int, const void*, unsigned long, int)")
    source = 'extern "C" __global__ void reach(float* out, int n) {\n' + lines + "    out[n + 64] = 1.0f;\n}\n"
    code = f"""
    d = drv.mem_alloc(64)
    out["first"] = launch({source!r}, "reach", "Pi", (1, 1, 1), (1, 1, 1), d, 16)
    """
    assert named in run(code, "isolated", tmp_path)["first"]


@pytest.mark.parametrize(("value", "workers"), [("3", 3), ("0", 1), ("500", 16), ("", None)])
def test_the_emulators_worker_count_follows_the_setting(monkeypatch, value, workers) -> None:
    """MINITORCH_CUDA_EMULATE_THREADS sets the workers, 1 to driver.MAX_WORKERS; unset (empty), one per core."""
    from minitorch_cuda.emulator import driver

    monkeypatch.setenv("MINITORCH_CUDA_EMULATE_THREADS", value)
    expected = workers or min(len(os.sched_getaffinity(0)), driver.MAX_WORKERS)
    assert driver._workers() == expected


def test_a_worker_count_that_is_not_a_number_names_the_setting(monkeypatch) -> None:
    from minitorch_cuda.emulator import driver

    monkeypatch.setenv("MINITORCH_CUDA_EMULATE_THREADS", "four")
    with pytest.raises(ValueError, match=r"MINITORCH_CUDA_EMULATE_THREADS='four': set it to a whole number"):
        driver._workers()
