"""wgmma_tma.cu (TMA, mbarriers, warp specialization, persistent blocks; Hopper only) and its host
side. On the CPU: nvcc's build for sm_90a (no spills, the instructions meant in the SASS), the
tensor-map arguments, and the launcher's arguments on the stand-in driver. On a GPU: the product
against float64 and against torch's TF32 matmul, and each debug switch. A wait that traps (the
kernel's watchdog) leaves the process's CUDA context unusable, so the first launch runs in a process
of its own; like test_wgmma.py, the GPU part still belongs in `.ci/gpu_check.sh`'s tf32 part, apart
from the rest of the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_gxx, needs_nvcc
from helpers import NVCC, cuobjdump, matmul_inputs, matmul_reference, where_wrong

from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
from minitorch_cuda.cuda.tensor_map import swizzled_stack

TESTS = Path(__file__).resolve().parent
SOURCE = KERNEL_DIR / "wgmma_tma.cu"
CAP_AT_ENTRY = 168  # 65536 registers / 384 threads, rounded down to a multiple of 8


# --- CPU: the build ---------------------------------------------------------------------------


@needs_nvcc
@pytest.mark.parametrize(
    "defines",
    [(), ("-DWT_BN=128",), ("-DWT_STAGES=1",), ("-DWT_BN=128", "-DWT_STAGES=6"), ("-DWT_DEBUG",),
     ("-DWT_B_N_MAJOR=1",), ("-DWT_B_N_MAJOR=1", "-DWT_BN=128"), ("-DWT_B_N_MAJOR=1", "-DWT_STAGES=1"),
     # the ablation's builds (experiments/tma_ablation.py): copies by threads, one consumer, both
     ("-DWT_TMA=0",), ("-DWT_CONSUMERS=1",), ("-DWT_TMA=0", "-DWT_CONSUMERS=1"), ("-DWT_TMA=0", "-DWT_BN=128")],
    ids=str,
)  # fmt: skip
def test_builds_for_sm_90a_without_spills(defines, tmp_path):
    """ptxas's report: no spills, the register cap of __launch_bounds__(384, 1) at entry (setmaxnreg
    moves registers at run time), no stack outside the debug build's printf, and no note that
    setmaxnreg was ignored (C7508) or that the wgmma pipeline is serialized (C7510, C7513, C7515:
    the N-major build loads no register a running group reads); in the SASS, one group left running
    while the next slice is waited for, except with one stage or printf."""
    cubin = tmp_path / "wgmma_tma.cubin"
    target = "-gencode=arch=compute_90a,code=sm_90a"  # HOPPER.md: the form that assembles with every nvcc 13
    done = subprocess.run(
        [NVCC, "-cubin", target, "-Xptxas", "-v", *defines, "-o", str(cubin), str(SOURCE)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = done.stderr + done.stdout
    assert done.returncode == 0, log
    frame, spill_stores, spill_loads = map(int, re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                                                          r"(\d+) bytes spill loads", log).groups())  # fmt: skip
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    assert spill_stores == spill_loads == 0, log
    assert registers <= CAP_AT_ENTRY, log
    assert "C7508" not in log and "warning" not in log.lower(), log
    if "-DWT_DEBUG" not in defines:
        assert frame == 0 and "C751" not in log, log
    dump = cuobjdump()
    if dump is None:
        return
    sass = subprocess.run([dump, "-sass", str(cubin)], capture_output=True, text=True, timeout=120).stdout
    bn = 128 if "-DWT_BN=128" in defines else 256
    n_major = "-DWT_B_N_MAJOR=1" in defines
    wgmmas = 8 if n_major else 4  # the N-major loop is unrolled by two slices (its two register operands)
    waits = set(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass))
    in_step = "-DWT_STAGES=1" in defines or "-DWT_DEBUG" in defines  # the debug build's printf serializes (C7510)
    assert waits == ({"0x0"} if in_step else {"0x0", "0x1"}), waits
    assert len(re.findall(rf"HGMMA\.64x{bn}x8\.F32\.TF32", sass)) == wgmmas, "one wgmma per 8 columns of a slice"
    copies = 1 + 4 if n_major else 2  # A's tile, and B's: one box, or four of 32 columns
    if "-DWT_TMA=0" in defines:  # the producer's threads copy, in a loop, and arrive as their copies land
        assert not re.search(r"UTMALDG", sass) and len(re.findall(r"\bLDGSTS\b", sass)) == 2, "one cp.async a loop"
        assert re.search(r"ARRIVES\.LDGSTSBAR", sass), "cp.async.mbarrier.arrive"
    else:
        assert len(re.findall(r"UTMALDG\.3D", sass)) == copies, "TMA copies of A and of B"
    assert "USETMAXREG.DEALLOC" in sass and "USETMAXREG.TRY_ALLOC" in sass
    if "-DWT_DEBUG" not in defines:  # the debug build's printf takes its arguments from the stack
        assert not re.search(r"\b(LDL|STL)\b", sass), "nothing in local memory"


@needs_nvcc
def test_builds_that_differ_only_in_gpu_code_are_cached_apart(tmp_path):
    """PyCUDA's disk cache keys a source that has an #include by nvcc's host-side preprocessing of
    it (the temporary file's name removed) and the options. The launcher's builds of wgmma_tma.cu
    differ only in code for the GPU, so their preprocessing is the same byte for byte; the source's
    digest among the options is what keeps a 3-stage or 128-column build from getting the default
    cubin (on the H100 it did, and wrote past its shared memory)."""
    from minitorch_cuda.cuda.kernel_table import NVCC_OPTIONS, source_define

    sources = [
        f"#define WT_BN {bn}\n#define WT_STAGES {stages}\n" + SOURCE.read_text()
        for bn, stages in ((256, 4), (256, 3), (128, 4))
    ]
    preprocessed = []
    for i, source in enumerate(sources):
        path = tmp_path / f"kernel{i}.cu"
        path.write_text(source)
        done = subprocess.run([NVCC, "--preprocess", "-arch=sm_90a", f"-I{KERNEL_DIR}", *NVCC_OPTIONS, str(path)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        preprocessed.append(done.stdout.replace(str(path), "").replace(path.name, ""))
    assert preprocessed[0] == preprocessed[1] == preprocessed[2], "the variants differ outside GPU-only code"
    assert len({source_define(s) for s in sources}) == 3


# --- CPU: the tensor maps and the launch ------------------------------------------------------


def test_tensor_map_arguments_of_a_batch_and_of_a_shared_matrix():
    batch = swizzled_stack(0x10000, rows=300, cols=1028, matrices=3, matrix_stride=300 * 1028, box_rows=128,
                           box_cols=32)  # fmt: skip
    assert (batch.dims, batch.strides, batch.box) == ((1028, 300, 3), (4112, 4112 * 300), (32, 128, 1))
    shared = swizzled_stack(0x10000, rows=600, cols=1028, matrices=1, matrix_stride=0, box_rows=256, box_cols=32)
    assert (shared.dims, shared.strides, shared.box) == ((1028, 600, 1), (4112, 4112 * 600), (32, 256, 1))


def test_tensor_map_of_k_slices_side_by_side():
    """A split-K product's A (4096 x 4096, four K-slices): four matrices of 4096 rows of 1024,
    rows 4096 floats apart and matrices 1024 apart, so matrix s is columns 1024 s .. of A."""
    slices = swizzled_stack(0x10000, rows=4096, cols=1024, matrices=4, matrix_stride=1024, box_rows=256,
                            box_cols=32, row_stride=4096)  # fmt: skip
    assert (slices.dims, slices.strides, slices.box) == ((1024, 4096, 4), (4 * 4096, 4 * 1024), (32, 256, 1))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"row_stride": 60}, "cannot lie 60 floats apart"),
        ({"row_stride": 66}, "whole 16 bytes"),
        ({"address": 0x10004}, "16-byte aligned"),
        ({"cols": 1022}, "whole 16 bytes"),
        ({"box_cols": 64}, "32 floats wide"),
        ({"box_rows": 512}, "1 to 256 rows"),
        ({"rows": 0}, "non-empty"),
    ],
    ids=str,
)
def test_tensor_map_refuses_what_tma_cannot_copy(change, message):
    args = {"address": 0x10000, "rows": 64, "cols": 64, "matrices": 1, "matrix_stride": 0, "box_rows": 128,
            "box_cols": 32}  # fmt: skip
    with pytest.raises(ValueError, match=message):
        swizzled_stack(**{**args, **change})


HOST_SIDE = f"""
import json, struct, sys, types
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401  (before anything imports pycuda; it answers sm_90 and 132 SMs)

encoded, launched, built, refused = [], [], [], []
cu = standin_pycuda.bindings
def encode(*args):
    encoded.append(list(args))
    return 0, types.SimpleNamespace(opaque=[len(encoded)] * 16)  # map n: sixteen words n
cu.cuTensorMapEncodeTiled = encode
class Module(standin_pycuda._SourceModule):
    def __init__(self, source, **kwargs):
        built.append([source.splitlines()[:4], kwargs["arch"]])
standin_pycuda.compiler.SourceModule = Module

from minitorch_cuda.cuda import launch_core, matmul_choice, matmul_launchers, runtime, wgmma_tma
from minitorch_cuda.cuda.array import DeviceArray
from minitorch_cuda.cuda.autotune import tuner
tuner.enabled = False  # nothing can be timed here: the tile width is the first one, 256
def launch(kernel, grid, block, *args, shapes=()):
    words = [struct.unpack("<16Q", x)[0] if isinstance(x, bytes) else x for x in args]  # a map: its first word
    launched.append([kernel.name, kernel.shared_bytes, grid, block, words])
launch_core.launch = launch

M, N, K = 300, 600, 1028
a, b, c = DeviceArray.empty((3, M, K)), DeviceArray.empty((N, K)), DeviceArray.empty((3, M, N))
g = launch_core.Gemm(M, N, K, tb=True, stride_a=M * K, stride_b=0, batch=3)
matmul_choice.matmul_tf32_wgmma_tma(c, a, b, g)
matmul_choice.matmul_tf32_wgmma_tma(c, a, b, g, blocks=1, tiles=2)  # the same maps: encoded once
big = DeviceArray.empty((4096, 4096))
square = launch_core.Gemm(4096, 4096, 4096, tb=True)
matmul_launchers.matmul_tf32_wgmma_tma(big, big, big, square, bn=128, stages=1, debug=True)
try:
    matmul_choice.matmul_tf32_wgmma_tma(c, a, b, launch_core.Gemm(M, N, 1022, tb=True))
except ValueError as exc:
    refused.append(str(exc))
stored_kn = len(launched), len(encoded)  # B stored K x N (a @ b, stage 12's usual case): read as stored
b_kn = DeviceArray.empty((K, N))
matmul_choice.matmul_tf32_wgmma_tma(c, a, b_kn, launch_core.Gemm(M, N, K, stride_a=M * K, batch=3))
a_km = DeviceArray.empty((K, M))  # A stored K x M as well (a.T @ b): both transposed first
matmul_choice.matmul_tf32_wgmma_tma(c, a_km, b_kn, launch_core.Gemm(M, N, K, ta=True))
for switches, problem in (({{"as_stored": True}}, launch_core.Gemm(M, N, K, stride_a=M * K, batch=3)),  # no width
                          ({{"as_stored": True, "bn": 256}}, launch_core.Gemm(M, N, K, ta=True))):  # a.T @ b
    try:
        matmul_launchers.matmul_tf32_wgmma_tma(c, a_km, b_kn, problem, **switches)
    except (TypeError, ValueError) as exc:  # a launcher never chooses the width: the tuner does
        refused.append(str(exc))
G = launch_core.Gemm  # where B may be read as stored: a @ b alone, TMA's 16-byte rules kept
rules = [matmul_launchers.b_reads_as_stored(0x10000, pb, g) for pb, g in (
    (0x20000, G(8, 8, 4)), (0x20000, G(8, 8, 4, stride_a=32, stride_b=32, batch=2)), (0x20000, G(8, 6, 4)),
    (0x20000, G(8, 8, 4, ta=True)), (0x20000, G(8, 8, 4, tb=True)), (0x20004, G(8, 8, 4)),
    (0x20000, G(8, 8, 4, stride_b=34, batch=2)))]
standin_pycuda._Device.compute_capability = lambda self: (8, 0)
runtime.arch.cache_clear()
try:
    matmul_choice.matmul_tf32_wgmma_tma(c, a, b, g)
except ValueError as exc:
    refused.append(str(exc))
print(json.dumps({{"encoded": encoded, "launched": launched, "built": built, "refused": refused,
                  "pointers": [a.ptr, b.ptr, c.ptr, big.ptr, b_kn.ptr, a_km.ptr], "stored_kn": stored_kn,
                  "rules": rules}}))
"""


def test_launcher_builds_the_maps_and_the_launch_the_kernel_expects():
    """On the stand-in driver (an H200 with 132 SMs that computes nothing): the tensor maps' boxes are
    the kernel's tiles (128 x 256, the untuned width), a shared B is one matrix, the grid is one block
    per SM at most (fewer when there are fewer tiles), the debug switches reach the build and the
    launch, B stored K x N goes to the N-major build as stored (its map: boxes of 32 x 32) while an
    A stored K x M is still transposed first, B is read as stored only where TMA's rules allow, and
    what the kernel cannot take is refused with the rule it breaks, before anything compiles."""
    done = subprocess.run([sys.executable, "-c", HOST_SIDE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.splitlines()[-1])
    pa, pb, pc, pbig, pkn, pkm = run["pointers"]
    M, N, K = 300, 600, 1028
    tail = [[1] * 3, "INTERLEAVE_NONE", "SWIZZLE_128B", "L2_PROMOTION_L2_256B", "FLOAT_OOB_FILL_NONE"]
    launches, encodings = run["stored_kn"]
    as_stored, transposed = run["encoded"][encodings : encodings + 2], run["encoded"][encodings + 2 :]
    assert [m[2:6] for m in as_stored] == [
        [pa, [K, M, 3], [4 * K, 4 * K * M], [32, 256, 1]],  # A's rows in the wide box, where B^T's were
        [pkn, [N, K, 1], [4 * N, 4 * N * K], [32, 32, 1]],  # B as stored: 32 columns of N by 32 of K
    ]
    kn_tiles = 3 * 2 * 5  # three matrices of ceil(300 / 256) x ceil(600 / 128) tiles (C^T's)
    name, _, grid, _, words = run["launched"][launches]
    assert (name, grid) == ("matmul_tf32_wgmma_tma", [kn_tiles, 1, 1])
    assert words == [1 + encodings, 2 + encodings, pc, M, N, K, 3, 1, kn_tiles]
    assert len(transposed) == 2 and not {m[2] for m in transposed} & {pkm, pkn}  # both from scratch
    assert [r[0] for r in run["launched"][launches + 1 :]] == ["transpose_2d", "transpose_2d", "matmul_tf32_wgmma_tma"]
    # as stored: a @ b, and a batch of them; not N % 4 != 0, a.T @ b, a @ b.T, a misaligned B, nor
    # B's matrices 34 floats apart
    assert run["rules"] == [True, True, False, False, False, False, False]
    del run["encoded"][encodings:], run["launched"][launches:]
    assert run["encoded"] == [
        ["DATA_TYPE_FLOAT32", 3, pa, [K, M, 3], [4 * K, 4 * K * M], [32, 128, 1], *tail],
        ["DATA_TYPE_FLOAT32", 3, pb, [K, N, 1], [4 * K, 4 * K * N], [32, 256, 1], *tail],
        ["DATA_TYPE_FLOAT32", 3, pbig, [4096, 4096, 1], [4 * 4096, 4 * 4096**2], [32, 128, 1], *tail],
    ]  # the big operand's second map is the first one again: the encoding is cached
    tiles = 3 * 3 * 3  # three matrices of ceil(300 / 128) x ceil(600 / 256) tiles
    smem_256, smem_128_one_stage = 4 * (128 + 256) * 32 * 4 + 1024, (128 + 128) * 32 * 4 + 1024
    assert run["launched"] == [
        ["matmul_tf32_wgmma_tma", smem_256, [tiles, 1, 1], [384, 1, 1], [1, 2, pc, M, N, K, 3, 1, tiles]],
        ["matmul_tf32_wgmma_tma", smem_256, [1, 1, 1], [384, 1, 1], [1, 2, pc, M, N, K, 3, 1, 2]],
        ["matmul_tf32_wgmma_tma", smem_128_one_stage, [132, 1, 1], [384, 1, 1],
         [3, 3, pbig, 4096, 4096, 4096, 1, 1, 32 * 32]],
    ]  # fmt: skip
    built = [b for b in run["built"] if b[0][0].startswith("#define WT_")]  # (the transposes build layout.cu)
    assert built == [
        [["#define WT_BN 256", "#define WT_STAGES 4", "#define WT_B_N_MAJOR 0", '#line 1 "wgmma_tma.cu"'], "sm_90a"],
        [["#define WT_BN 128", "#define WT_STAGES 1", "#define WT_B_N_MAJOR 0", "#define WT_DEBUG"], "sm_90a"],
        [["#define WT_BN 256", "#define WT_STAGES 4", "#define WT_B_N_MAJOR 1", '#line 1 "wgmma_tma.cu"'], "sm_90a"],
    ]  # fmt: skip
    odd_k, no_width, not_as_stored, not_hopper = run["refused"]
    assert "TMA strides are whole 16 bytes: K=1022" in odd_k
    assert "required keyword-only argument: 'bn'" in no_width  # the width is matmul_choice's to choose
    assert "B is read as stored only for a @ b" in not_as_stored
    assert "needs a Hopper GPU (sm_90: TMA, wgmma, setmaxnreg); stand-in device is sm_80" in not_hopper


ABLATION_SIDE = (
    HOST_SIDE.split("M, N, K = 300, 600, 1028")[0]
    + """
M, N, K = 300, 600, 1028
a, b, c = DeviceArray.empty((3, M, K)), DeviceArray.empty((N, K)), DeviceArray.empty((3, M, N))
g = launch_core.Gemm(M, N, K, tb=True, stride_a=M * K, stride_b=0, batch=3)
matmul_launchers.matmul_tf32_wgmma_tma(c, a, b, g, bn=256, consumers=1, tma=False, blocks=10**6)
try:
    matmul_launchers.matmul_tf32_wgmma_tma(c, a, DeviceArray.empty((K, N)), launch_core.Gemm(M, N, K), bn=256,
                                           as_stored=True, tma=False)
except ValueError as exc:
    refused.append(str(exc))
print(json.dumps({"encoded": encoded, "launched": launched, "built": built, "refused": refused,
                  "pointers": [a.ptr, b.ptr, c.ptr]}))
"""
)


SPLIT_SIDE = (
    HOST_SIDE.split("M, N, K = 300, 600, 1028")[0]
    + """
from minitorch_cuda.cuda.launch_core import Gemm
M, N, K = 4096, 128, 4096  # a @ b, 16 tiles of 256 x 128 (C^T's) as stored for 132 SMs
a, b, c = DeviceArray.empty((M, K)), DeviceArray.empty((K, N)), DeviceArray.empty((M, N))
g = Gemm(M, N, K)
matmul_launchers.matmul_tf32_wgmma_tma(c, a, b, g, bn=256, as_stored=True, splits=4)
first = len(launched)
for _ in range(2):  # a user's loop: the route's queue, the maps worked out once
    matmul_launchers.wgmma_tma_launch(a, b, g, 256, True, 4).queue(c, a, b)
bt = DeviceArray.empty((N, K))  # a @ b.T: K-major B^T
matmul_launchers.matmul_tf32_wgmma_tma(c, a, bt, Gemm(M, N, K, tb=True), bn=128, splits=2)
for problem, splits in ((Gemm(M, N, K, stride_a=M * K, batch=2), 2), (Gemm(M, N, 4092), 2), (Gemm(M, N, K), 3)):
    try:
        matmul_launchers.matmul_tf32_wgmma_tma(c, a, b, problem, bn=256, as_stored=True, splits=splits)
    except ValueError as exc:
        refused.append(str(exc))
splits = {f"{shape} {bn} {as_stored}": matmul_choice.wgmma_tma_splits(Gemm(*shape), bn, as_stored)
          for shape in ((4096, 128, 4096), (128, 4096, 4096), (1024, 1024, 1024), (4096, 4096, 4096), (4096, 128, 384))
          for bn in (256, 128) for as_stored in (True, False)}
print(json.dumps({"encoded": encoded, "launched": launched, "refused": refused, "first": first, "splits": splits,
                  "pointers": [a.ptr, b.ptr, c.ptr, bt.ptr]}))
"""
)


def test_a_split_product_reads_k_slices_as_a_batch_and_sums_them():
    """On the stand-in driver (132 SMs): a skinny product split in four K-slices is one launch of
    the kernel on a batch of four (A's slices side by side, rows K apart; B's slices one after
    the other), writing scratch, then the four-wide sum into C, in the route's queue as in the
    launcher; K-major B^T splits the same way; what cannot be split is refused with the rule; and
    splits are offered only where the tiles leave SMs idle, up to the first count that covers them,
    each slice at least 128 of K."""
    done = subprocess.run([sys.executable, "-c", SPLIT_SIDE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.splitlines()[-1])
    pa, pb, pc, pbt = run["pointers"]
    M, N, K = 4096, 128, 4096
    maps = [m[2:6] for m in run["encoded"]]
    assert maps == [
        [pa, [1024, M, 4], [4 * K, 4 * 1024], [32, 256, 1]],  # A's slices, side by side
        [pb, [N, 1024, 4], [4 * N, 4 * 1024 * N], [32, 32, 1]],  # B's, one after another
        [pa, [2048, M, 2], [4 * K, 4 * 2048], [32, 128, 1]],  # K-major: A ...
        [pbt, [2048, N, 2], [4 * K, 4 * 2048], [32, 128, 1]],  # ... and B^T sliced alike
    ]  # the queued products reuse the first two
    tiles = 4 * 16  # four slices of 16 tiles
    product, total = run["launched"][0], run["launched"][1]
    assert product[0] == "matmul_tf32_wgmma_tma" and product[2] == [tiles, 1, 1]
    scratch = product[4][2]
    assert scratch != pc and product[4] == [1, 2, scratch, M, N, 1024, 4, 4, tiles]
    assert total[0] == "matmul_splitk_reduce4" and total[4] == [pc, scratch, M * N, 4, M * N]
    assert run["first"] == 2 and [r[0] for r in run["launched"][2:6]] == [product[0], total[0]] * 2
    assert [r[4][3:] for r in run["launched"][2:6:2]] == [product[4][3:]] * 2
    k_major = run["launched"][6:]
    assert [r[0] for r in k_major] == ["matmul_tf32_wgmma_tma", "matmul_splitk_reduce4"]
    assert k_major[0][4][3:] == [M, N, 2048, 2, 2, 2 * 32 * 1]  # 32 tiles of 128 x 128
    assert len(run["refused"]) == 3 and all("K-slices need one matrix" in r for r in run["refused"])
    assert run["splits"] == {
        "(4096, 128, 4096) 256 True": [1, 2, 4, 8, 16], "(4096, 128, 4096) 256 False": [1, 2, 4, 8],
        "(4096, 128, 4096) 128 True": [1, 2, 4, 8], "(4096, 128, 4096) 128 False": [1, 2, 4, 8],
        "(128, 4096, 4096) 256 True": [1, 2, 4, 8], "(128, 4096, 4096) 256 False": [1, 2, 4, 8, 16],
        "(128, 4096, 4096) 128 True": [1, 2, 4, 8], "(128, 4096, 4096) 128 False": [1, 2, 4, 8],
        "(1024, 1024, 1024) 256 True": [1, 2, 4, 8], "(1024, 1024, 1024) 256 False": [1, 2, 4, 8],
        "(1024, 1024, 1024) 128 True": [1, 2, 4], "(1024, 1024, 1024) 128 False": [1, 2, 4],
        "(4096, 4096, 4096) 256 True": [1], "(4096, 4096, 4096) 256 False": [1],
        "(4096, 4096, 4096) 128 True": [1], "(4096, 4096, 4096) 128 False": [1],
        "(4096, 128, 384) 256 True": [1, 2], "(4096, 128, 384) 256 False": [1, 2],
        "(4096, 128, 384) 128 True": [1, 2], "(4096, 128, 384) 128 False": [1, 2],
    }  # fmt: skip


def test_the_ablations_switches_reach_the_build_and_the_launch():
    """On the stand-in driver: one consumer makes 64-row tiles (maps, grid, 256 threads, shared
    memory), copies by threads pass A's and B^T's pointers and batch strides after the kernel's own
    arguments (B^T shared: stride 0), a grid of as many blocks as tiles gives one tile a block, and
    the N-major build refuses the switches."""
    done = subprocess.run([sys.executable, "-c", ABLATION_SIDE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.splitlines()[-1])
    pa, pb, pc = run["pointers"]
    M, N, K = 300, 600, 1028
    assert [m[5] for m in run["encoded"]] == [[32, 64, 1], [32, 256, 1]]  # A's box: 64 rows
    tiles = 3 * 5 * 3  # three matrices of ceil(300 / 64) x ceil(600 / 256) tiles
    smem = 4 * (64 + 256) * 32 * 4 + 1024
    assert run["launched"] == [
        ["matmul_tf32_wgmma_tma", smem, [tiles, 1, 1], [256, 1, 1], [1, 2, pc, M, N, K, 3, 1, tiles, pa, pb, M * K, 0]]
    ]
    built = [b for b in run["built"] if b[0][0].startswith("#define WT_")]
    assert built == [[["#define WT_BN 256", "#define WT_STAGES 4", "#define WT_B_N_MAJOR 0", "#define WT_CONSUMERS 1"],
                      "sm_90a"]]  # fmt: skip
    assert len(run["refused"]) == 1 and "K-major only" in run["refused"][0]


DRIVER_LAUNCH = f"""
import ctypes, json, struct, sys, types
sys.path.insert(0, {str(TESTS)!r})
import standin_pycuda  # noqa: F401

cu, calls = standin_pycuda.bindings, []
standin_pycuda.compiler.compile = lambda source, **options: calls.append(["compile", options["arch"]]) or b"cubin"
cu.cuModuleLoadData = lambda cubin: calls.append(["load", cubin.decode()]) or (0, "module")
cu.cuModuleGetFunction = lambda module, name: calls.append(["function", module, name.decode()]) or (0, "function")
cu.CUfunction_attribute = types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max dynamic shared")
cu.cuFuncSetAttribute = lambda f, attribute, value: calls.append(["attribute", f, attribute, value]) or (0,)
def launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    p = (ctypes.c_void_p * 4).from_address(params)  # what the driver reads: one pointer per argument
    calls.append(["launch", f, [gx, gy, gz], [bx, by, bz], shared, stream, extra, ctypes.string_at(p[0], 128).hex(),
                  ctypes.c_uint64.from_address(p[1]).value, ctypes.c_int32.from_address(p[2]).value,
                  ctypes.c_float.from_address(p[3]).value])
    return (0,)
cu.cuLaunchKernel = launch

from minitorch_cuda.cuda import runtime
module = standin_pycuda._SourceModule("source")
kernel = runtime.DriverKernel("k", module, "entry", "128sPif", 100_000, "source")
blob = bytes(range(128))
kernel.launch_async((7, 1, 1), (384, 1, 1), None, blob, 0x7F0012345600, -3, 0.5)
kernel.launch_async((2, 1), (64, 1, 1), types.SimpleNamespace(handle=99), blob, 1, 2, 3.0)
print(json.dumps(calls))
"""


def test_a_kernel_taking_a_structure_gets_one_pointer_per_argument():
    """DriverKernel on the stand-in driver: built once, at its first launch, for this GPU alone, with
    its shared memory opted in; each launch hands the driver a pointer to every argument's bytes
    (the 128-byte map, the pointer, the int, the float), on the stream given (0: the legacy one)."""
    done = subprocess.run([sys.executable, "-c", DRIVER_LAUNCH], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = json.loads(done.stdout.splitlines()[-1])
    blob = bytes(range(128)).hex()
    assert calls == [
        ["compile", "sm_90a"], ["load", "cubin"], ["function", "module", "entry"],
        ["attribute", "function", "max dynamic shared", 100_000],
        ["launch", "function", [7, 1, 1], [384, 1, 1], 100_000, 0, 0, blob, 0x7F0012345600, -3, 0.5],
        ["launch", "function", [2, 1, 1], [64, 1, 1], 100_000, 99, 0, blob, 1, 2, 3.0],
    ]  # fmt: skip


EMULATED = """
import numpy as np, minitorch_cuda as mt
from minitorch_cuda.cuda import launch_core, matmul_choice
from minitorch_cuda.cuda.array import DeviceArray

x = np.ones((64, 784), np.float32)
w = np.ones((784, 256), np.float32)
with mt.use_stage(12):
    print(float((mt.tensor(x, device="cuda") @ mt.tensor(w, device="cuda")).numpy().max()))
d, g = DeviceArray.empty((4, 4)), launch_core.Gemm(4, 4, 4, tb=True)
try:
    matmul_choice.matmul_tf32_wgmma_tma(d, d, d, g)
except ValueError as exc:
    print(exc)
"""


@needs_gxx
def test_on_the_emulator_stage_12_runs_and_this_kernel_says_it_needs_a_hopper_gpu():
    """The emulator is an Ampere GPU (its tensor cores run stage 12's mma.sync and WMMA kernels);
    Hopper's warpgroup MMA fed by TMA is refused before anything compiles."""
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1"}
    done = subprocess.run([sys.executable, "-c", EMULATED], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    stage_12, this_kernel = done.stdout.strip().splitlines()
    assert float(stage_12) == 784.0  # sums of ones: exact in TF32
    assert "matmul_tf32_wgmma_tma needs a Hopper GPU" in this_kernel and "is sm_80" in this_kernel


# --- GPU --------------------------------------------------------------------------------------

FIRST_LAUNCH = """
import numpy as np
import pycuda.autoprimaryctx  # noqa: F401
from minitorch_cuda.cuda import backend, launch_core, matmul_choice, wgmma_tma
from minitorch_cuda.cuda.array import DeviceArray
from minitorch_cuda.cuda.runtime import arch, synchronize

if arch() == "sm_90":
    rng = np.random.default_rng(30)
    a, b = rng.standard_normal((300, 1028)).astype(np.float32), rng.standard_normal((600, 1028)).astype(np.float32)
    out = DeviceArray.empty((300, 600))
    matmul_choice.matmul_tf32_wgmma_tma(out, backend.from_numpy(a), backend.from_numpy(b),
                                    launch_core.Gemm(300, 600, 1028, tb=True), debug=True)
    synchronize("the first launch of matmul_tf32_wgmma_tma")
    print("finished; largest difference from float64:", np.abs(backend.to_numpy(out) - a.astype(float) @ b.T).max())
"""


@pytest.fixture(scope="module")
def first_launch_apart():
    """One launch (the debug build) in a process of its own before any in this one: a kernel that
    traps or hangs there fails these tests with its output and leaves this process's context usable."""
    try:
        done = subprocess.run([sys.executable, "-c", FIRST_LAUNCH], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the first launch of matmul_tf32_wgmma_tma did not finish in 300 s: {exc.stdout!r} {exc.stderr!r}")
    if done.returncode != 0:
        pytest.fail(f"the first launch of matmul_tf32_wgmma_tma failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


def _hopper():
    from minitorch_cuda.cuda.runtime import arch

    if arch() != "sm_90":
        pytest.skip(f"wgmma_tma.cu needs a Hopper GPU (sm_90); this one is {arch()}")


def _launch(a, b, tb=True, **switches):
    """C = A B^T by matmul_tf32_wgmma_tma on a (batch?, M, K) and b (batch?, N, K), or with ``tb``
    False C = A B on b (batch?, K, N), into an output poisoned with NaN first: an element the
    kernel does not write stays NaN."""
    from minitorch_cuda.cuda import backend, launch_core, matmul_launchers
    from minitorch_cuda.cuda.runtime import synchronize

    _hopper()
    switches.setdefault("bn", 256)  # the launcher takes the width it is given (matmul_choice tunes it)
    g = launch_core.Gemm.of(a, b, tb=tb)
    out = backend.from_numpy(np.full(((g.batch,) if g.batch > 1 else ()) + (g.M, g.N), np.nan, np.float32))
    matmul_launchers.matmul_tf32_wgmma_tma(out, backend.from_numpy(a), backend.from_numpy(b), g, **switches)
    synchronize("matmul_tf32_wgmma_tma")
    return backend.to_numpy(out)


def _check_tf32(out, a, b, what=""):
    """wgmma truncates its inputs to TF32 (see test_wgmma.py): within 2.5e-3 of |A| |B| everywhere
    and 1e-3 overall, against float64."""
    ref, scale = matmul_reference(a, b, False, True)
    assert np.isfinite(out).all(), f"{what}{np.isnan(out).mean():.1%} of the output left unwritten"
    assert np.all(np.abs(out - ref) <= 2.5e-3 * scale + 1e-6), what + where_wrong(out, ref, scale, 2.5e-3)
    relative = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert relative < 1e-3, f"{what}relative error {relative:.2e}"
    return ref


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
@pytest.mark.parametrize("bn", [256, 128])
@pytest.mark.parametrize(
    "shape", [(4, 4, 4), (128, 256, 32), (72, 76, 84), (132, 260, 300), (300, 600, 1028), (1000, 1000, 1000)], ids=str
)
def test_tf32_wgmma_tma_against_float64(shape, bn):
    """One tile, one slice, partial tiles at every edge, K not a multiple of 32 (TMA zero-fills)."""
    M, N, K = shape
    a, b = matmul_inputs(M, N, K, False, True, seed=31)
    _check_tf32(_launch(a, b, bn=bn), a, b)


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
@pytest.mark.parametrize(
    "shape",
    [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (1031, 2053, 1028), (4097, 515, 2052)],
    ids=str,
)
def test_tf32_wgmma_tma_against_float64_and_torch_tf32(shape):
    """The sizes the benchmark times, and odd ones; persistent blocks walk several tiles each. torch's
    TF32 matmul (cuBLAS) computes the same function within both products' TF32 error."""
    torch = pytest.importorskip("torch")
    M, N, K = shape
    a, b = matmul_inputs(M, N, K, False, True, seed=32)
    out = _launch(a, b)
    ref = _check_tf32(out, a, b)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        theirs = (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda().T).cpu().double().numpy()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    ours_vs_torch = np.linalg.norm(out - theirs) / np.linalg.norm(theirs)
    torch_error = np.linalg.norm(theirs - ref) / np.linalg.norm(ref)
    assert ours_vs_torch < 1.5e-3, f"{ours_vs_torch:.2e} from torch TF32 (torch's own error {torch_error:.2e})"


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
def test_tf32_wgmma_tma_batched_and_shared_operand():
    a, b = matmul_inputs(200, 300, 68, False, True, (3,), (3,), seed=33)
    _check_tf32(_launch(a, b), a, b, "batched: ")
    a, b = matmul_inputs(200, 300, 68, False, True, (3,), (), seed=34)  # B shared by the batch
    _check_tf32(_launch(a, b), a, b, "shared B: ")


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
@pytest.mark.parametrize(
    "switches", [{"bn": 256}, {"bn": 128}, {"bn": 256, "stages": 1}, {"bn": 128, "blocks": 3}], ids=str
)
@pytest.mark.parametrize(
    "shape", [(4, 4, 4), (72, 76, 84), (132, 260, 300), (257, 132, 100), (300, 600, 1028), (1031, 2052, 1028)], ids=str
)
def test_b_read_as_stored_against_float64(shape, switches):
    """a @ b with B stored K x N, read as stored (the N-major build: C^T = B^T A^T, B^T the register
    operand): partial tiles at every edge, K not a multiple of 32, one stage (each slice waited
    for before the next loads), fewer blocks than tiles; every element written, within the TF32
    bound of float64."""
    M, N, K = shape
    a, b = matmul_inputs(M, N, K, False, False, seed=38)
    _check_tf32(_launch(a, b, tb=False, as_stored=True, **switches), a, np.ascontiguousarray(b.T))


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
@pytest.mark.parametrize("splits", [2, 4])
@pytest.mark.parametrize("as_stored", [True, False])
@pytest.mark.parametrize("shape", [(4096, 128, 4096), (128, 4096, 4096), (300, 132, 1040), (72, 76, 3088)], ids=str)
def test_split_k_against_float64(shape, as_stored, splits):
    """K-slices as the kernel's batch, then their sum: the skinny shapes, partial tiles, and slices
    whose K the 32-wide stage does not divide (1040 / 4 = 260: the map's zero fill must end each
    slice, or slice s would add the start of slice s + 1)."""
    M, N, K = shape
    a, b = matmul_inputs(M, N, K, False, not as_stored, seed=40)
    out = _launch(a, b, tb=not as_stored, as_stored=as_stored or None, splits=splits)
    _check_tf32(out, a, b if not as_stored else np.ascontiguousarray(b.T), f"{splits} slices: ")


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
def test_b_read_as_stored_batched_and_shared():
    for b_batch, what in (((3,), "batched: "), ((), "shared B: ")):
        a, b = matmul_inputs(200, 300, 68, False, False, (3,), b_batch, seed=39)
        out = _launch(a, b, tb=False, bn=128, as_stored=True)  # as_stored=True: refused were it not possible
        _check_tf32(out, a, np.ascontiguousarray(np.swapaxes(b, -1, -2)), what)


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
@pytest.mark.parametrize(
    "switches", [{"stages": 1}, {"stages": 2}, {"blocks": 1}, {"blocks": 3, "bn": 128}, {"debug": True}], ids=str
)
def test_debug_switches_compute_the_same_product(switches):
    """Many tiles per block and many slices per stage, so that every ring wraps several times."""
    a, b = matmul_inputs(520, 1030, 420, False, True, seed=35)
    _check_tf32(_launch(a, b, **switches), a, b, f"{switches}: ")


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
@pytest.mark.parametrize(
    "switches",
    [{"tma": False}, {"consumers": 1}, {"tma": False, "consumers": 1, "bn": 128}, {"blocks": 10**6},
     {"tma": False, "stages": 1}],
    ids=str,
)  # fmt: skip
def test_the_ablations_builds_compute_the_same_product(switches):
    """experiments/tma_ablation.py's variants, on partial tiles, K not a multiple of 32 and a batch
    with a shared B^T (the copies by threads zero-fill and offset as TMA does)."""
    a, b = matmul_inputs(520, 1030, 420, False, True, seed=36)
    _check_tf32(_launch(a, b, **switches), a, b, f"{switches}: ")
    batch = np.random.default_rng(37).standard_normal((3, 130, 68)).astype(np.float32)
    shared = np.random.default_rng(38).standard_normal((260, 68)).astype(np.float32)
    out = _launch(batch, shared, **switches)
    for z in range(3):
        _check_tf32(out[z], batch[z], shared, f"{switches}, matrix {z}: ")


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
def test_stage_12s_route_times_both_tile_widths_and_keeps_the_faster():
    """a @ b at 1024^3 through the launcher as stage 12 calls it (no width given): both widths are
    timed, each with B transposed first and read as stored, unsplit and in K-slices, transposes
    and the slices' sum included, the least of
    each one's longer GPU and host time (the transpose a launch more) is kept for the shape, and
    the product is right."""
    from minitorch_cuda.cuda import backend, launch_core, matmul_choice
    from minitorch_cuda.cuda.array import DeviceArray
    from minitorch_cuda.cuda.autotune import tuner
    from minitorch_cuda.cuda.runtime import synchronize

    _hopper()
    a, b = matmul_inputs(1024, 1024, 1024, False, False, seed=37)
    da, db = backend.from_numpy(a), backend.from_numpy(b)
    out, g = DeviceArray.empty((1024, 1024)), launch_core.Gemm(1024, 1024, 1024)
    matmul_choice.matmul_tf32_wgmma_tma(out, da, db, g)
    synchronize("matmul_tf32_wgmma_tma")
    timed = tuner.choices()["matmul_tf32_wgmma_tma 1024,1024,1024,0,0,1,True,True"]
    # 32 wide tiles or 64 narrow ones for the SMs: K-splits up to the first count that covers them
    splits = {w: [""] + [f" split {s}" for s in matmul_choice.wgmma_tma_splits(g, w, True)[1:]] for w in (256, 128)}
    assert set(timed["timings_ms"]) == {
        f"{w}{way}{s}" for w in (256, 128) for way in ("", " as stored") for s in splits[w]
    }
    assert timed["host_ms"]["256"] == 2 * timed["host_ms"]["256 as stored"] == timed["host_ms"]["256 as stored split 2"]
    assert timed["choice"] == min(timed["timings_ms"], key=lambda v: max(timed["timings_ms"][v], timed["host_ms"][v]))
    ref, scale = matmul_reference(a, b, False, False)
    assert np.all(np.abs(backend.to_numpy(out) - ref) <= 2.5e-3 * scale + 1e-6)


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
def test_first_tiles_only_follow_the_grouped_raster():
    """tiles=3 computes tiles 0-2 of the raster and nothing else: within a group of tile rows the
    raster goes down a column first, so they are tile rows 0, 1 and 2 of tile column 0."""
    a, b = matmul_inputs(640, 768, 96, False, True, seed=36)
    out = _launch(a, b, bn=256, tiles=3)
    ref, scale = matmul_reference(a, b, False, True)
    written = np.isfinite(out)
    expected = np.zeros_like(written)
    expected[: 3 * 128, :256] = True
    assert (written == expected).all(), f"written elements: rows {np.nonzero(written.any(1))[0][[0, -1]]}"
    assert np.all(np.abs(out[expected] - ref[expected]) <= 2.5e-3 * scale[expected] + 1e-6)


@pytest.mark.gpu
@pytest.mark.usefixtures("first_launch_apart")
def test_kernel_resources_on_the_device():
    """What the driver loaded: the register cap at entry, nothing in local memory."""
    from minitorch_cuda.cuda import wgmma_tma

    _hopper()
    kernel, _ = wgmma_tma.kernel(256, None, False)
    assert kernel.function.num_regs <= CAP_AT_ENTRY and kernel.function.local_size_bytes == 0


@pytest.mark.gpu
def test_a_gpu_other_than_hopper_is_refused_with_the_reason():
    from minitorch_cuda.cuda import launch_core, matmul_choice
    from minitorch_cuda.cuda.array import DeviceArray
    from minitorch_cuda.cuda.runtime import arch

    if arch() == "sm_90":
        pytest.skip("this GPU is a Hopper: the kernel runs here")
    x = DeviceArray.empty((4, 4))
    with pytest.raises(ValueError, match=r"needs a Hopper GPU \(sm_90"):
        matmul_choice.matmul_tf32_wgmma_tma(x, x, x, launch_core.Gemm(4, 4, 4, tb=True))
