"""The exercises of the course: one id per exercise, the same in the solution
notebook, the student notebook, the checks, the rubric and the grade sheet.

An exercise is either a CUDA kernel (a Python string holding CUDA C, swapped
into the framework with ``mt.override``) or a Python object (a function or a
class). The notebook cell that holds it carries the cell metadata
``exercise: 'N.k'`` and defines the variable named here.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from ..cuda.kernel_table import SPECS, entry_params, prepare_signature


@dataclasses.dataclass(frozen=True)
class Exercise:
    id: str
    notebook: str  # file stem in solutions/ and exercises/
    title: str
    kind: str  # "cuda" or "python"
    name: str  # the variable the exercise cell defines
    kernel: str | None = None  # the registry name it overrides (or the standalone entry)
    params: str | None = None  # the C parameters of a standalone kernel (not in the registry)
    gpu: bool = True  # whether its checks need a GPU
    needs: tuple[str, ...] = ()  # optional modules its checks import (the grade extra brings them)
    # a Python exercise's kernel object that the grader launches itself, on its own arrays and grid
    # (20.2's @triton.jit kernel): what the kernel computes, whatever its host function does
    launched: str | None = None

    @property
    def sort_key(self) -> tuple[int, int]:
        chapter, number = self.id.split(".")
        return int(chapter), int(number)


# An unsolved exercise holds the stub grade/generate.py put where its solution was: in a kernel
# the comment line ``kernel_stub(id)``, in Python ``python_stub(id)``, which raises ``not_done(id)``.
STUB_MARKER = "TODO: Exercise"


def kernel_stub(exercise_id: str) -> str:
    return f"// {STUB_MARKER} {exercise_id}"


def python_stub(exercise_id: str) -> str:
    return f'raise NotImplementedError("{not_done(exercise_id)}")'


def not_done(exercise_id: str) -> NotImplementedError:
    """What an unsolved exercise raises, and what the checks raise for a kernel that holds its stub."""
    return NotImplementedError(f"Exercise {exercise_id}")


def holds_stub(artifact) -> bool:
    """Whether a kernel exercise's source still holds its stub."""
    return isinstance(artifact, str) and STUB_MARKER in artifact


def _cuda(id_: str, notebook: str, title: str, kernel: str, name: str | None = None, **kw) -> Exercise:
    if "params" not in kw:  # a registry kernel: its parameters come from the kernel table
        kw["params"] = SPECS[kernel].params
    return Exercise(id_, notebook, title, "cuda", name or f"{kernel}_source", kernel, **kw)


def check_entry(ex: Exercise, artifact) -> None:
    """Raise ValueError / TypeError unless the compiled ``artifact`` (grade/artifact.py) has the exercise's
    kernel as an ``extern "C"`` entry with its parameters."""
    from .artifact import _plain_name, same_signature

    theirs = artifact.signature(ex.kernel)
    if theirs is None:
        mangled = [name for name in artifact.entries if _plain_name(name) == ex.kernel]
        if mangled:
            raise ValueError(f'declare your kernel extern "C" __global__ void {ex.kernel}(...): without extern "C" '
                             "its compiled name is mangled and the framework cannot find it")  # fmt: skip
        found = ", ".join(sorted(artifact.entries)) or "none"
        raise ValueError(
            f'the compiled kernel has no extern "C" __global__ function {ex.kernel!r} (its entries: {found}): '
            "the work must happen in that CUDA kernel"
        )
    if not same_signature(theirs, ex.params):
        raise TypeError(f"{ex.kernel} must take ({ex.params}); yours compiles to other parameters ({_codes(theirs)})")


def check_source_entry(ex: Exercise, source: str) -> None:
    """The notebook's early hint, read from the text (the grader reads the compiled kernel:
    ``check_entry``): raise ValueError / TypeError unless ``source`` declares the kernel with its parameters."""
    theirs = entry_params(source, ex.kernel)
    if prepare_signature(theirs) != prepare_signature(ex.params):
        raise TypeError(f"{ex.kernel} must take ({ex.params}); yours takes ({theirs})")


def _codes(signature: tuple[str, ...]) -> str:
    words = {"P": "pointer", "i": "int", "I": "unsigned", "f": "float", "128s": "TensorMap"}
    return ", ".join(words.get(c, c) for c in signature) or "none"


EXERCISES: dict[str, Exercise] = {
    e.id: e
    for e in [
        _cuda(
            "1.1",
            "01_cuda_setup",
            "scalar-multiply kernel",
            "scale",
            "scale_source",
            params="float* out, const float* in, float alpha, int n",
        ),
        Exercise("1.2", "01_cuda_setup", "launch configuration", "python", "launch_config", gpu=False),
        Exercise("2.1", "02_floating_point", "BF16 rounding by bit manipulation", "python", "round_to_bf16", gpu=False),
        _cuda("3.1", "03_building_the_backend", "ReLU kernel", "ew_relu"),
        _cuda("3.2", "03_building_the_backend", "stable sigmoid kernel", "ew_sigmoid"),
        _cuda("3.3", "03_building_the_backend", "softmax forward kernel", "softmax_rows_volatile", "softmax_source"),
        Exercise("4.1", "04_memory", "memory pool", "python", "MemoryPool", gpu=False),
        Exercise("5.1", "05_profiling", "timing: warm-up, sync, median", "python", "time_median", gpu=False),
        _cuda("6.1", "06_opt1_memcopies", "sum of squares (clipping norm)", "sumsq_volatile", "sumsq_source"),
        _cuda("6.2", "06_opt1_memcopies", "clipping scale kernel", "clip_scale"),
        _cuda("7.1", "07_opt2_gather", "gather kernel", "gather_rows", "gather_source"),
        _cuda("8.1", "08_opt3_transpose_fusion", "matmul with transpose flags", "matmul_transposed"),
        _cuda("9.1", "09_opt4_init_and_pool", "on-device normal init", "init_normal"),
        _cuda("10.1", "10_opt5_batched_matmul", "batched matmul over a 3-D grid", "matmul_batched"),
        _cuda("11.1", "11_opt6_tiled_matmul", "shared-memory tiled matmul", "matmul_tiled"),
        Exercise("12.1", "12_opt7_syncs", "a training step without device syncs", "python", "train_step"),
        _cuda("13.1", "13_opt8_warp_shuffle", "warp-shuffle row sum", "sum_rows_shuffle"),
        _cuda("13.2", "13_opt8_warp_shuffle", "the last block adds the partials", "sumsq_last_block"),
        Exercise("14.1", "14_cublas", "the roofline bound of a matmul", "python", "matmul_roofline", gpu=False),
        _cuda(
            "14.2",
            "14_cublas",
            "bias and ReLU after a library GEMM, in one launch",
            "bias_relu",
            "bias_relu_source",
            params="float* out, const float* c, const float* bias, int M, int N",
        ),
        _cuda("15.1", "15_roofline", "16-byte loads with a grid-stride loop", "ew_relu_vec4"),
        _cuda(
            "16.1", "16_regtiled_matmul", "a register-tiled matmul", "matmul_regtiled_32x32x8", "matmul_regtiled_source"
        ),
        _cuda("17.1", "17_fusion", "softmax, cross-entropy and mean in one launch", "softmax_xent_fused"),
        Exercise("18.1", "18_cuda_graphs", "capture once, replay per batch", "python", "GraphedStep", gpu=False),
        Exercise("19.1", "19_tensor_cores", "TF32 rounding by bit manipulation", "python", "round_to_tf32", gpu=False),
        Exercise(
            "19.2",
            "19_tensor_cores",
            "the fragment layout of an mma.sync TF32 tile",
            "python",
            "fragment_coords",
            gpu=False,
        ),
        Exercise("20.1", "20_tile_programming", "fibonacci as a tile function", "python", "fib_tile", gpu=False),
        Exercise(
            "20.2",
            "20_tile_programming",
            "bias and ReLU as a Triton kernel",
            "python",
            "bias_relu_triton",
            gpu=False,
            needs=("triton",),
            launched="bias_relu_kernel",
        ),
        _cuda(
            "21.1",
            "21_latency_floor",
            "one phase of a persistent kernel: the global norm, clipped",
            "clip_global_norm",
            "clip_global_norm_source",
            params="float* const* grads, const int* sizes, int count, float* partials, float* norm, float max_norm, "
            "GridBarrier* barrier",
        ),
    ]
}

NOTEBOOKS: list[str] = sorted({e.notebook for e in EXERCISES.values()})


def get(exercise_id: str) -> Exercise:
    try:
        return EXERCISES[str(exercise_id)]
    except KeyError:
        raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(EXERCISES)}") from None


def missing_dependency(ex: Exercise) -> str | None:
    """Why this machine cannot grade ``ex`` (a module its checks need is not installed), or None.
    find_spec, not import: importing triton here would fix its mode before the check chooses the interpreter."""
    missing = [name for name in ex.needs if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    names = " and ".join(name.capitalize() for name in missing)
    return (
        f"{names} {'is' if len(missing) == 1 else 'are'} not installed: exercise {ex.id} will not be graded; "
        "install the `grade` extra (pip install -e '.[grade]') and grade again"
    )


def for_notebook(notebook: str) -> list[Exercise]:
    return sorted((e for e in EXERCISES.values() if e.notebook == notebook), key=lambda e: e.sort_key)


def ordered() -> list[Exercise]:
    return sorted(EXERCISES.values(), key=lambda e: e.sort_key)
