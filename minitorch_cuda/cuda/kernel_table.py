"""The kernel table and C-signature parsing: pure Python, importable without PyCUDA.

``SPECS`` names every built-in kernel, the ``.cu`` file it lives in and the C
parameter list every implementation must take; ``prepare_signature`` turns
such a list into PyCUDA's ``prepare()`` format and ``entry_params`` finds a
kernel's parameter list in a source. The registry (which needs CUDA) builds
on these; tests and tools that only read the table import this module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
# nvcc's flags for every framework kernel beyond its architecture and the kernel folder as include
# path: source lines in the cubin, for compute-sanitizer's and Nsight Compute's reports
NVCC_OPTIONS = ("-lineinfo",)


def source_define(source: str) -> str:
    """An nvcc option naming ``source`` by its digest, defining a macro nothing reads. PyCUDA's
    disk cache keys a source that has an #include by its host-side preprocessing and the options;
    code for the GPU alone (inside ``#if __CUDA_ARCH__``-style guards) is not in that
    preprocessing, so two builds that differ only there (wgmma_tma.cu with another WT_STAGES or
    WT_BN) got one cubin, the first one built, until the options named the source."""
    return f"-DMINITORCH_CUDA_SOURCE={hashlib.sha256(source.encode()).hexdigest()[:16]}"


def nvcc_command(arch: str, nvcc: str = "nvcc") -> list[str]:
    """nvcc building a framework kernel into a cubin for ``arch``, as the runtime's PyCUDA build
    does (add ``-o`` and the source); for tools that run nvcc themselves."""
    return [nvcc, "-cubin", f"-arch={arch}", f"-I{KERNEL_DIR}", *NVCC_OPTIONS]


_BINARY = "float* out, const float* a, const float* b, int n, int b_div, int b_mod"
_UNARY = "float* out, const float* a, int n"


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    file: str
    params: str  # the C parameter list every implementation must take
    shared_bytes: int = 0  # dynamic shared memory each launch gets
    arch_specific: bool = False  # uses instructions of this GPU only (wgmma: sm_90a, not sm_90)

    @property
    def signature(self) -> str:
        return prepare_signature(self.params)


SPECS: dict[str, KernelSpec] = {
    **{name: KernelSpec("elementwise.cu", _BINARY) for name in ("ew_add", "ew_sub", "ew_mul", "ew_div", "ew_add_relu")},
    **{name: KernelSpec("elementwise.cu", _UNARY) for name in ("ew_exp", "ew_log", "ew_relu", "ew_sigmoid")},
    "ew_affine": KernelSpec("elementwise.cu", "float* out, const float* a, float alpha, float beta, int n"),
    "ew_rdiv": KernelSpec("elementwise.cu", "float* out, const float* a, float s, int n"),
    "ew_relu_backward": KernelSpec("elementwise.cu", "float* out, const float* grad, const float* x, int n"),
    "ew_sigmoid_backward": KernelSpec("elementwise.cu", "float* out, const float* grad, const float* y, int n"),
    "ew_fill": KernelSpec("elementwise.cu", "float* out, float value, int n"),
    "strided_copy": KernelSpec(
        "layout.cu",
        "float* out, const float* in, int n, int d1, int d2, int d3, int s0, int s1, int s2, int s3",
    ),
    "transpose_2d": KernelSpec("layout.cu", "float* out, const float* in, int R, int C, int in_stride"),
    "gather_rows": KernelSpec("gather.cu", "float* out, const float* in, const int* idx, int rows, int row_len"),
    "scatter_add_rows": KernelSpec("gather.cu", "float* out, const float* grad, const int* idx, int rows, int row_len"),
    **{
        f"sum_rows_{kind}": KernelSpec("reduce.cu", "float* out, const float* in, int rows, int cols, float scale")
        for kind in ("volatile", "shuffle")
    },
    **{
        f"sumsq_{kind}": KernelSpec("reduce.cu", "float* out, const float* x, int n")
        for kind in ("volatile", "shuffle")
    },
    # exercise 13.2's kernel; no stage launches it (the backend's one-block sumsq_* do the norm)
    "sumsq_last_block": KernelSpec(
        "reduce.cu", "float* out, float* partials, unsigned int* count, const float* x, int n"
    ),
    "sum_axis": KernelSpec("reduce.cu", "float* out, const float* in, int outer, int red, int inner, float scale"),
    **{
        f"softmax_rows_{kind}": KernelSpec("softmax.cu", "float* out, const float* in, int rows, int cols")
        for kind in ("volatile", "shuffle")
    },
    **{
        f"softmax_xent_{kind}": KernelSpec(
            "softmax.cu",
            "float* probs, float* row_loss, const float* logits, const float* target, int rows, int cols",
        )
        for kind in ("volatile", "shuffle")
    },
    "xent_backward": KernelSpec(
        "softmax.cu",
        "float* out, const float* probs, const float* target, const float* upstream, int n, float scale",
    ),
    "matmul_naive": KernelSpec("matmul.cu", "float* c, const float* a, const float* b, int M, int N, int K"),
    "matmul_transposed": KernelSpec(
        "matmul.cu", "float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb"
    ),
    **{
        name: KernelSpec(
            "matmul.cu",
            "float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb, int stride_a, int stride_b",
        )
        for name in ("matmul_batched", "matmul_tiled")
    },
    "clip_scale": KernelSpec("optim.cu", "float* g, const float* partials, int n_parts, float max_norm, int n"),
    "rmsprop_step": KernelSpec(
        "optim.cu", "float* p, const float* g, float* v, float lr, float decay, float eps, int n"
    ),
    "sgd_step": KernelSpec("optim.cu", "float* p, const float* g, float lr, int n"),
    "init_normal": KernelSpec("init.cu", "float* out, int n, float std, unsigned int seed"),
}

# --- stages 9-12 -----------------------------------------------------------------------
_MATMUL = "float* c, const float* a, const float* b, int M, int N, int K, int ta, int tb, int stride_a, int stride_b"
_BIAS_ACT = (
    "float* c, const float* a, const float* b, const float* bias, int M, int N, int K, int ta, int tb, "
    "int stride_a, int stride_b, int act"
)
TILES_HEADER = KERNEL_DIR / "matmul_tiles.cuh"


def tile_list(macro: str) -> dict[str, tuple[int, ...]]:
    """The lines of X-macro ``macro`` in matmul_tiles.cuh, the one list of a family's tiles that
    its kernel files expand: {T: the line's numbers}, in the list's order."""
    text = re.sub(r"/\*.*?\*/", "", TILES_HEADER.read_text(), flags=re.S)
    body = re.search(rf"^#define {macro}\(X\)((?:.*\\\n)*.*)", text, re.M)
    if body is None:
        raise KeyError(f"no #define {macro}(X) in {TILES_HEADER.name}")
    return {m[1]: tuple(map(int, m[2].split(","))) for m in re.finditer(r"X\((\w+),([\d,\s]+)\)", body[1])}


# The register tiles: T -> (BM, BN, BK, TM, TN, MIN_BLOCKS, TWINS) as matmul_tiles.cuh lists them
_REGTILED = tile_list("REGTILED_TILES")
# Tile shapes of the register-tiled variants: name suffix -> (BM, BN, BK, threads).
REGTILED_TILES: dict[str, tuple[int, int, int, int]] = {
    t: (bm, bn, bk, (bm // tm) * (bn // tn)) for t, (bm, bn, bk, tm, tn, _, _) in _REGTILED.items()
}
# The register tiles with a split-K twin (matmul_regtiled_splitk_{tile}) and exact twins
# (matmul_regtiled_exact_{tile}, _splitk_exact_: unchecked loads for the products they divide
# exactly, matmul_launchers.exact_fit): TWINS in the list.
REGTILED_SPLITK_TILES = tuple(t for t, line in _REGTILED.items() if line[6])
REGTILED_EXACT_TILES = REGTILED_SPLITK_TILES
# ... and with an edge twin (matmul_regtiled_edge_{tile}: the exact body inside C, the plain one on
# its edges; matmul_launchers.edge_fit): TWINS 2, and with its split-K twin (_edge_splitk_) TWINS 3.
REGTILED_EDGE_TILES = tuple(t for t, line in _REGTILED.items() if line[6] >= 2)
REGTILED_EDGE_SPLITK_TILES = tuple(t for t, line in _REGTILED.items() if line[6] == 3)
# matmul_cluster.cu's split-K in one launch (Hopper's thread block clusters): its tiles and splits
CLUSTER_SPLITK_TILES = ("128x64x8t128",)
CLUSTER_SPLITS = (2, 4)
# The pipelined tiles: T -> (BM, BN, BK, WM, WN, TM, TN, STAGES, MIN_BLOCKS, BIAS_ACT)
_PIPELINED = tile_list("PIPELINED_TILES")
# Tile shapes of matmul_pipelined.cu (cp.async into shared-memory stages): name suffix ->
# (BM, BN, BK, threads, stages).
PIPELINED_TILES: dict[str, tuple[int, int, int, int, int]] = {
    t: (bm, bn, bk, 32 * (bm // wm) * (bn // wn), stages)
    for t, (bm, bn, bk, wm, wn, _, _, stages, _, _) in _PIPELINED.items()
}


def regtiled_thread_tile(tile: str) -> tuple[int, int]:
    """(TM, TN), the outputs per thread of matmul_regtiled_{tile} (the block tile and thread count
    do not fix how a thread's tile splits)."""
    if tile not in _REGTILED:
        raise KeyError(f"matmul_regtiled_{tile} has no line in {TILES_HEADER.name}'s REGTILED_TILES")
    return _REGTILED[tile][3:5]


def pipelined_shared_bytes(tile: str) -> int:
    """Dynamic shared memory of matmul_pipelined_{tile}: its stages of A^T and B, rows padded by 4."""
    bm, bn, bk, _, stages = PIPELINED_TILES[tile]
    return stages * bk * (bm + 4 + bn + 4) * 4


# the split-K twins (pipelined and register-tiled) write each K-slice's partial product;
# matmul_splitk_reduce sums them in order
_SPLITK = _MATMUL.replace("float* c", "float* partial") + ", int k_splits"
# the lean step's (stage 11): a split-K product reduced by its last block per tile, with the bias
# and ReLU epilogue, for these tiles (the skinny forward products); and the backward products
_SPLITK_BIAS_ACT = (
    "float* c, float* partial, unsigned int* counters, const float* a, const float* b, const float* bias, "
    "int M, int N, int K, int ta, int tb, int stride_a, int stride_b, int k_splits, int act"
)
SPLITK_BIAS_ACT_TILES = tuple(t for t, line in _PIPELINED.items() if line[9])  # BIAS_ACT in the list
_GRAD = (
    "float* c, const float* a, const float* b, const float* mask, float* colsum, int M, int N, int K, "
    "int ta, int tb, int stride_a, int stride_b"
)
# Every matmul kernel the benchmark times and the grader names, and the stage whose product it is
# (the stage table of bench.py's matmul rows, the grader's matmul exercises and the book's labels).
# A register tile's kernel (matmul_regtiled_32x32x8) is matmul_regtiled's: matmul_stage says so.
MATMUL_STAGES = {
    "matmul_naive": 0,
    "matmul_transposed": 3,
    "matmul_batched": 5,
    "matmul_tiled": 6,
    "matmul_regtiled": 9,  # the autotuned variant for the shape
    "matmul_sgemm": 9,  # stage 9 as it runs: the fastest of the above and the pipelined ones below
    "matmul_pipelined_128x128x16": 9,  # cp.async into 2 stages, 256 threads
    "matmul_pipelined_128x128x16s3": 9,  # the same, 3 stages (50 KB of dynamic shared memory)
    "matmul_pipelined_128x64x16": 9,  # 3 stages, 128 threads: 128 blocks at 1024^3
    "matmul_pipelined_64x64x16": 9,  # 3 stages, 128 threads: small and skinny products
    "matmul_pipelined_32x32x16": 9,  # 3 stages, 64 threads: outputs as narrow as MNIST's 10 classes
    "matmul_pipelined_splitk_128x128x16": 9,  # K split until the blocks cover every SM
    "matmul_pipelined_splitk_64x64x16": 9,
    "matmul_pipelined_splitk_32x32x16": 9,
    "matmul_tf32": 12,  # WMMA, any operands
    "matmul_tf32_async": 12,  # mma.sync and cp.async, operands in whole quads
    "matmul_tf32_wgmma": 12,  # warpgroup MMA on Hopper (wgmma.cu), with its transpose of b (a @ b)
    "matmul_tf32_wgmma_tma": 12,  # the same fed by TMA, warp-specialized: stage 12 from 1024^3 up (a @ b)
}


def matmul_stage(kernel: str) -> int:
    """The stage whose product ``kernel`` is (a register tile's: matmul_regtiled's)."""
    if kernel.startswith("matmul_regtiled_") and kernel.removeprefix("matmul_regtiled_") in REGTILED_TILES:
        return MATMUL_STAGES["matmul_regtiled"]
    return MATMUL_STAGES[kernel]


MMA_TILE = (128, 128, 256)  # BM, BN, threads of matmul_tf32 / matmul_bf16


def kernel_defines(file: str, prefix: str) -> dict[str, int]:
    """The integer ``#define PREFIX_NAME value`` lines of a kernel file, as {NAME: value}:
    a kernel whose shape is written down once, in its file, tells the launch its shape."""
    text = (KERNEL_DIR / file).read_text()
    return {k: int(v) for k, v in re.findall(rf"^#define {prefix}_(\w+) (\d+)\b", text, re.M)}


def async_launch(d: dict[str, int]) -> tuple[tuple[int, int, int], int]:
    """(BM, BN, threads) and dynamic shared bytes of matmul_tf32_async for the ASYNC_ shape ``d``
    (mma_async.cu's own, or a variant that minitorch_cuda/experiments/tf32_variants.py compiles with -D)."""
    threads = 32 * (d["BM"] // d["WM"]) * (d["BN"] // d["WN"])
    row = d["BK"] + 4  # a K-contiguous row; an M- or N-contiguous one is extent + 8

    def tile(extent: int) -> int:
        return max(extent * row, d["BK"] * (extent + 8))

    return (d["BM"], d["BN"], threads), d["STAGES"] * (tile(d["BM"]) + tile(d["BN"])) * 4


def _wgmma_launch(d: dict[str, int]) -> tuple[tuple[int, int, int], int]:
    """(BM, BN, threads) and dynamic shared bytes of matmul_tf32_wgmma."""
    stage = (d["BM"] + d["BN"]) * d["BK"] * 4
    return (d["BM"], d["BN"], d["THREADS"]), d["STAGES"] * stage + 1024  # + alignment to 1024 bytes


ASYNC_TILE, ASYNC_SMEM_BYTES = async_launch(kernel_defines("mma_async.cu", "ASYNC"))
TRANSPOSE = kernel_defines("layout.cu", "TR")  # {"TILE": ..., "ROWS": ...}: transpose_2d's tile and block
PERSISTENT = kernel_defines("persistent_step.cu", "PS")  # {"THREADS": ..., "TILE": ...}: its job shapes
WGMMA_TILE, WGMMA_SMEM_BYTES = _wgmma_launch(kernel_defines("wgmma.cu", "WG"))


def _slots(kind: str, name: str) -> str:
    return ", ".join(f"{kind} {name}{i}" for i in range(MULTI_TENSOR_SLOTS))


MULTI_TENSOR_SLOTS = 8
VEC4_OPS = (
    "ew_add", "ew_sub", "ew_mul", "ew_div", "ew_exp", "ew_log", "ew_relu", "ew_sigmoid",
    "ew_relu_backward", "ew_sigmoid_backward", "ew_affine", "ew_fill",
)  # fmt: skip

SPECS.update(
    {
        **{f"{op}_vec4": KernelSpec("vectorized.cu", SPECS[op].params) for op in VEC4_OPS},
        "softmax_rows_warp": KernelSpec("vectorized.cu", "float* out, const float* in, int rows, int cols"),
        "softmax_rows_block": KernelSpec("vectorized.cu", "float* out, const float* in, int rows, int cols"),
        "softmax_rows_online": KernelSpec("vectorized.cu", "float* out, const float* in, int rows, int cols"),
        **{f"matmul_regtiled_{t}": KernelSpec("matmul_regtiled.cu", _MATMUL) for t in REGTILED_TILES},
        **{f"matmul_regtiled_splitk_{t}": KernelSpec("matmul_regtiled.cu", _SPLITK) for t in REGTILED_SPLITK_TILES},
        **{f"matmul_regtiled_exact_{t}": KernelSpec("matmul_regtiled.cu", _MATMUL) for t in REGTILED_EXACT_TILES},
        **{f"matmul_regtiled_edge_{t}": KernelSpec("matmul_regtiled.cu", _MATMUL) for t in REGTILED_EDGE_TILES},
        **{
            f"matmul_regtiled_edge_splitk_{t}": KernelSpec("matmul_regtiled.cu", _SPLITK)
            for t in REGTILED_EDGE_SPLITK_TILES
        },
        **{
            f"matmul_regtiled_splitk_exact_{t}": KernelSpec("matmul_regtiled.cu", _SPLITK) for t in REGTILED_EXACT_TILES
        },
        **{
            f"matmul_cluster_splitk{s}_{t}": KernelSpec("matmul_cluster.cu", _MATMUL)
            for t in CLUSTER_SPLITK_TILES
            for s in CLUSTER_SPLITS
        },
        **{f"matmul_bias_act_{t}": KernelSpec("fused.cu", _BIAS_ACT) for t in REGTILED_TILES},
        **{
            f"matmul_pipelined_{t}": KernelSpec("matmul_pipelined.cu", _MATMUL, pipelined_shared_bytes(t))
            for t in PIPELINED_TILES
        },
        **{
            f"matmul_pipelined_splitk_{t}": KernelSpec("matmul_pipelined.cu", _SPLITK, pipelined_shared_bytes(t))
            for t in PIPELINED_TILES
        },
        **{
            f"matmul_pipelined_splitk_bias_act_{t}": KernelSpec(
                "matmul_pipelined.cu", _SPLITK_BIAS_ACT, pipelined_shared_bytes(t)
            )
            for t in SPLITK_BIAS_ACT_TILES
        },
        **{f"matmul_grad_{t}": KernelSpec("fused.cu", _GRAD) for t in REGTILED_TILES},
        "softmax_xent_grad": KernelSpec(
            "fused.cu",
            "float* grad, float* loss, const float* logits, const float* target, int rows, int cols, float scale",
        ),
        "multi_clip_rmsprop_grid": KernelSpec(
            "fused.cu",
            "float* partials, GridBarrier* barrier, float max_norm, float lr, float decay, float eps, "
            f"{_slots('float*', 'p')}, {_slots('float*', 'g')}, {_slots('float*', 'v')}, {_slots('int', 'n')}",
        ),
        **{
            name: KernelSpec("matmul_pipelined.cu", "float* c, const float* partial, int mn, int k_splits, int n")
            for name in ("matmul_splitk_reduce", "matmul_splitk_reduce4")
        },
        "softmax_xent_fused": KernelSpec(
            "fused.cu",
            "float* probs, float* loss, const float* logits, const float* target, int rows, int cols, float scale",
        ),
        "multi_sumsq": KernelSpec("fused.cu", f"float* partials, {_slots('const float*', 'g')}, {_slots('int', 'n')}"),
        "multi_clip_rmsprop": KernelSpec(
            "fused.cu",
            "const float* partials, int n_partials, float max_norm, float lr, float decay, float eps, "
            f"{_slots('float*', 'p')}, {_slots('float*', 'g')}, {_slots('float*', 'v')}, {_slots('int', 'n')}",
        ),
        "multi_clip_scale": KernelSpec(
            "fused.cu",
            f"const float* partials, int n_partials, float max_norm, {_slots('float*', 'g')}, {_slots('int', 'n')}",
        ),
        "matmul_tf32": KernelSpec("mma.cu", _MATMUL),
        "matmul_tf32_async": KernelSpec("mma_async.cu", _MATMUL, shared_bytes=ASYNC_SMEM_BYTES),
        "matmul_bf16": KernelSpec("mma.cu", _MATMUL),
        "persistent_step": KernelSpec(
            "persistent_step.cu",
            "const PersistentLayer* layers, int n_layers, int row_from, BatchCursor* batch, int rows, "
            "float* row_loss, float* partials, int n_partials, float* loss, unsigned long long* report, "
            "GridBarrier* barrier, int rmsprop, "
            "float lr, float decay, float eps, float max_norm",
        ),
        "fetch_batch": KernelSpec(
            "batch_cursor.cu",
            "BatchCursor* cursor, float* x, float* target, int x_size, int target_size, unsigned int* arrived",
        ),
        # chapter 21's floors: an empty launch, grid barriers alone (persistent_step's), a loss handed over
        "floor_empty": KernelSpec("floor.cu", ""),
        "floor_barriers": KernelSpec("floor.cu", "GridBarrier* barrier, int barriers"),
        "floor_report": KernelSpec("floor.cu", "unsigned long long* report"),
        # C = A B^T with both operands K-contiguous: no transpose flags
        "matmul_tf32_wgmma": KernelSpec(
            "wgmma.cu",
            "float* c, const float* a, const float* b, int M, int N, int K, int stride_a, int stride_b",
            shared_bytes=WGMMA_SMEM_BYTES,
            arch_specific=True,
        ),
        # built per tile shape by wgmma_tma.kernel (its shared bytes follow the shape);
        # not on stage 12's route until measured
        "matmul_tf32_wgmma_tma": KernelSpec(
            "wgmma_tma.cu",
            "const TensorMap map_a, const TensorMap map_b, float* c, int M, int N, int K, int batches_a, "
            "int batches_b, int tiles",
            arch_specific=True,
        ),
    }
)


def prepare_signature(params: str) -> str:
    """C parameters -> PyCUDA's prepare() format: P pointer, i int, I unsigned, f float,
    128s a TMA descriptor (CUtensorMap) passed by value."""
    codes = []
    for param in filter(None, (p.strip() for p in params.split(","))):
        if re.search(r"\bTensorMap\b", param) and "*" not in param:
            codes.append("128s")
        elif "*" in param:
            codes.append("P")
        elif re.search(r"\bfloat\b", param):
            codes.append("f")
        elif re.search(r"\bunsigned\b", param):
            codes.append("I")
        elif re.search(r"\bint\b", param):
            codes.append("i")
        else:
            raise TypeError(
                f"unsupported kernel parameter {param!r}: use pointers, int, unsigned int, float or a TensorMap"
            )
    return "".join(codes)


def entry_params(source: str, entry: str) -> str:
    """The parameter list of ``__global__ void entry(...)`` in ``source``."""
    # __launch_bounds__(...) and __cluster_dims__(...), optional, one level of parens inside
    attrs = r"(?:(?:__launch_bounds__|__cluster_dims__)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*)*"
    match = re.search(r"__global__\s+" + attrs + r"void\s+" + attrs + re.escape(entry) + r"\s*\(([^)]*)\)", source)
    if match is None:
        raise ValueError(f"no `__global__ void {entry}(...)` found in the kernel source")
    return " ".join(match.group(1).split())
