"""The similarity report's fingerprints: what a copy keeps and what independent work does not share."""

from __future__ import annotations

import re

from minitorch_cuda.grade import similarity

SUM_AXIS = similarity.global_functions((similarity.KERNELS / "reduce.cu").read_text())["sum_axis"]

# the built-in sum_axis, renamed, re-spaced, re-commented and with other literals
DISGUISED = """
// my own reduction kernel!!
extern "C"   __global__   void   reduce_middle ( float *dst , const float *src , int A , int B ,
        int C , float mult )
{
    /* one thread per output */
    const int t = blockIdx.x*blockDim.x+threadIdx.x;   if (t >= A*C) return;
    const int a = t / C, c = t % C;   // split the index
    const float *p = src + (long long)a*B*C + c;
    float total = 0.0f;
    for (int r = 0; r < B; ++r) total += p[(long long)r*C];
    dst[t] = mult*total;
}
"""

# two honest kernels for one task (a sum of n values), written apart
TREE = """
__global__ void sum_tree(float* out, const float* x, int n) {
    __shared__ float part[256];
    int t = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) acc += x[i];
    part[t] = acc;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (t < step) part[t] += part[t + step];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, part[0]);
}
"""
SHUFFLE = """
__global__ void sum_warps(float *result, const float *values, int count)
{
    float mine = 0;
    int lane = threadIdx.x & 31;
    int index = threadIdx.x + blockIdx.x * blockDim.x;
    while (index < count) {
        mine = mine + values[index];
        index = index + gridDim.x * blockDim.x;
    }
    mine += __shfl_down_sync(0xffffffff, mine, 16);
    mine += __shfl_down_sync(0xffffffff, mine, 8);
    mine += __shfl_down_sync(0xffffffff, mine, 4);
    mine += __shfl_down_sync(0xffffffff, mine, 2);
    mine += __shfl_down_sync(0xffffffff, mine, 1);
    if (lane == 0) { atomicAdd(result, mine); }
}
"""


def test_a_renamed_copy_of_a_built_in_kernel_scores_high() -> None:
    matches = similarity.compare("x", {"ann": DISGUISED}, similarity.builtin_kernels())
    best = matches[0]
    assert (best.student, best.other) == ("ann", "built-in reduce.cu:sum_axis")
    assert best.score >= 0.95 and best.flagged


def test_two_independent_solutions_score_low() -> None:
    a, b = similarity.fingerprints(TREE), similarity.fingerprints(SHUFFLE)
    assert len(a) >= similarity.MIN_FINGERPRINTS and len(b) >= similarity.MIN_FINGERPRINTS
    assert similarity.score(a, b) < 0.2
    assert similarity.compare("x", {"ann": TREE, "bob": SHUFFLE}, {}) == []


def test_whitespace_comments_and_names_change_nothing() -> None:
    respaced = re.sub(r"\s+", "  \n ", TREE.replace("acc", "running").replace("part", "buf"))
    commented = "/* header\n comment */\n" + respaced.replace(";", "; // step\n")
    assert similarity.tokens(commented) == similarity.tokens(TREE)
    assert similarity.fingerprints(commented) == similarity.fingerprints(TREE)
    assert similarity.fingerprints(TREE.replace("256", "512")) == similarity.fingerprints(TREE)


def test_a_pair_of_students_with_the_same_kernel_is_flagged_once() -> None:
    copied = TREE.replace("sum_tree", "my_sum").replace("acc", "s")
    matches = similarity.compare("9.1", {"bob": copied, "ann": TREE, "cy": SHUFFLE}, {})
    assert [(m.student, m.other, m.flagged) for m in matches] == [("ann", "bob", True)]
    assert matches[0].score == 1.0


def test_the_starter_code_every_student_got_is_not_evidence() -> None:
    starter = TREE  # were the whole kernel given, two students handing it back share nothing of their own
    assert similarity.compare("x", {"ann": TREE, "bob": TREE}, {}, starter=starter) == []
    assert similarity.compare("x", {"ann": TREE, "bob": TREE}, {})[0].flagged


def test_every_built_in_kernel_is_found_by_name() -> None:
    kernels = similarity.builtin_kernels()
    names = {name.split(":", 1)[1] for name in kernels}
    for path in similarity.KERNELS.glob("*.cu"):
        declared = re.findall(r'extern "C" __global__ void (\w+)\s*\(', path.read_text())
        assert set(declared) <= names, path.name
    assert kernels["built-in reduce.cu:sum_axis"] == similarity.fingerprints(SUM_AXIS)


def test_the_csv_rows_put_the_highest_scores_first() -> None:
    ms = [similarity.Match("1", "a", "b", 0.6, 9), similarity.Match("1", "c", "d", 0.9, 12)]
    assert similarity.rows(ms) == [
        ["exercise", "student", "matches", "score", "shared_fingerprints", "flagged"],
        ["1", "c", "d", "0.90", "12", "yes"],
        ["1", "a", "b", "0.60", "9", ""],
    ]
