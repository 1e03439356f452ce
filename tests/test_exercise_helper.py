"""What a student sees without a GPU and with one (issues 16 and 20).

On the CPU emulator, ``cuda_exercise`` compiles a kernel with nvcc first (nvcc's errors with
the numbered lines; registers, spills and shared memory from ptxas), and the check cell says
that correctness was checked on the CPU and no speed measured; on a GPU the kernel checks end
with the student's GB/s or GFLOP/s beside the built-in kernel's. The commands that time or
record GPU work refuse the emulator. What needs ``MINITORCH_CUDA_EMULATE=1`` from the start of
a process runs in a subprocess.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jupytext
import pytest
from conftest import needs_gxx, needs_nvcc

import minitorch_cuda as mt
from minitorch_cuda import emulator
from minitorch_cuda.cuda import nvcc_check
from minitorch_cuda.grade import checks, exercises, notebook, source, speed

ROOT = Path(__file__).resolve().parents[1]


def solution_kernel(exercise_id: str) -> str:
    """The solution's kernel source, read from its notebook as the grader reads it."""
    ex = exercises.get(exercise_id)
    nb = jupytext.read(ROOT / "solutions" / f"{ex.notebook}.md")
    return source.kernel_source(notebook.exercise_source(nb, ex), ex)


def emulated(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python with MINITORCH_CUDA_EMULATE=1."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=os.environ | {emulator.ENV: "1"} | env,
    )


# --- nvcc under the emulator (cuda/nvcc_check.py) ----------------------------------------------

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    800 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 800 bytes cumulative stack size
ptxas info    : Compile time = 47.686 ms
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 256 bytes smem
ptxas info    : Compile time = 2.092 ms
"""


def test_ptxas_report_is_read_per_kernel() -> None:
    b, a = nvcc_check.parse_resources(PTXAS_LOG)
    assert b == nvcc_check.KernelResources("b", 40, 12, 8, 0, 800)
    assert a == nvcc_check.KernelResources("a", 12, 0, 0, 256, 0)
    assert b.line() == "b: 40 registers, spills 12 B stored / 8 B loaded, 0 B shared memory, 800 B stack (local memory)"
    assert a.line() == "a: 12 registers, spills 0 B stored / 0 B loaded, 256 B shared memory"


LOCAL_ARRAY = """
extern "C" __global__ void ew_relu(float* out, const float* a, int n) {
    float seen[64];  // indexed at run time: local memory
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    for (int j = 0; j < 64; ++j) seen[j] = a[(i + j) % n];
    out[i] = fmaxf(seen[(i * 7) % 64], 0.0f) * 0.0f + fmaxf(a[i], 0.0f);
}
"""


@needs_nvcc
def test_nvcc_reports_a_local_array_as_stack() -> None:
    (kernel,) = nvcc_check.compile_cubin(LOCAL_ARRAY, "a test kernel")
    assert kernel.name == "ew_relu" and 0 < kernel.registers <= 255
    assert kernel.stack_bytes == 64 * 4 and kernel.shared_bytes == 0, kernel


@needs_nvcc
@needs_gxx
def test_emulated_helper_shows_nvccs_syntax_error_with_its_line() -> None:
    good = solution_kernel("11.1")
    bad = good.replace("float acc = 0.0f;", "float acc = 0.0f", 1)
    assert bad != good
    lines = bad.splitlines()
    after = next(i for i, text in enumerate(lines, 1) if "float acc = 0.0f" in text) + 1  # where nvcc stops
    run = emulated(
        f"""
        from minitorch_cuda.exercise import cuda_exercise
        try:
            cuda_exercise("11.1", {bad!r})
        except Exception as exc:
            print(type(exc).__name__)
            print(exc)
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert out.startswith("KernelCompileError\nnvcc could not compile your kernel 'matmul_tiled' (exercise 11.1):"), out
    assert f'kernel.cu({after}): error: expected a ";"' in out, out
    assert f">> {after:4d} | {lines[after - 1]}" in out, out  # the framework's numbered excerpt
    # the warnings after the syntax error echo it ("declared but never referenced"): not pointed at
    assert "never referenced" in out and out.count(">> ") == out.count("): error"), out


@needs_nvcc
@needs_gxx
def test_emulated_helper_shows_registers_then_checks_on_the_cpu() -> None:
    run = emulated(
        f"""
        from minitorch_cuda.exercise import cuda_exercise, report
        cuda_exercise("11.1", {solution_kernel("11.1")!r})
        print("--- 3.1")
        report("3.1", {solution_kernel("3.1")!r})
        print("--- 1.2")
        report("1.2", lambda *args: None)
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    helper, relu, python = run.stdout.split("--- ")
    tiles = (32 * 32 + 32 * 33) * 4  # the solution's two __shared__ tiles, one padded
    found = re.fullmatch(
        rf"nvcc \(sm_90\) matmul_tiled: (\d+) registers, spills 0 B stored / 0 B loaded, {tiles} B shared memory\n",
        helper,
    )
    assert found and 0 < int(found.group(1)) <= 255, helper
    assert "Exercise 3.1 (ReLU kernel): PASSED" in relu, relu
    emulated_note = "(checked on the CPU emulator: correctness and memory accesses, no speed measured)"
    assert relu.rstrip().endswith(emulated_note) and "GB/s" not in relu, relu
    assert "Exercise 1.2 (launch configuration): FAILED" in python and emulated_note not in python, python


@pytest.mark.skipif(mt.cuda_available(), reason="CUDA (a GPU or the emulator) is usable here")
def test_without_cuda_the_helper_says_the_kernel_was_not_compiled(capsys) -> None:
    from minitorch_cuda.exercise import cuda_exercise

    cuda_exercise("3.1", solution_kernel("3.1"))
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "not compiled" in out and f"{emulator.ENV}=1" in out, out


# --- commands that time or record refuse the emulator ---------------------------------------------

GPU_TIMINGS = "its timings would be the CPU's, not GPU timings"
REFUSED = {
    "minitorch_cuda bench": GPU_TIMINGS,
    "minitorch_cuda bench --record": "--record would store them as GPU results",
    "minitorch_cuda.bench --record --only-kernels": "--record would store them as GPU results",
    "minitorch_cuda.sanitize": "compute-sanitizer would find no GPU work to check",
    "minitorch_cuda.experiments.ncu": "Nsight Compute would find no GPU kernels to profile",
    "minitorch_cuda.experiments.step_split": GPU_TIMINGS,
    "minitorch_cuda.experiments.torch_profile": "PyTorch's CUDA profile would come from no GPU",
    "minitorch_cuda.experiments.tf32_wgmma --json out.json": GPU_TIMINGS,
    "minitorch_cuda.experiments.tf32_variants --json out.json": GPU_TIMINGS,
    "minitorch_cuda.tile_eval --record --json out.json": GPU_TIMINGS,
}


@needs_gxx
@pytest.mark.parametrize("command", list(REFUSED))
def test_timing_commands_refuse_the_emulator(command, tmp_path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", *command.split()],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=os.environ | {emulator.ENV: "1", "MINITORCH_CUDA_RESULTS_DIR": str(results)},
    )
    assert run.returncode == 2, (run.stdout, run.stderr[-3000:])
    message = run.stderr.strip()
    assert "\n" not in message and "Traceback" not in message, run.stderr
    assert "not run: kernels run on the CPU emulator here (MINITORCH_CUDA_EMULATE=1)" in message, message
    assert REFUSED[command] in message and message.endswith("with MINITORCH_CUDA_EMULATE unset."), message
    assert run.stdout == "" and not any(results.iterdir()) and not (tmp_path / "out.json").exists()


# --- speed feedback on a GPU (grade/speed.py) --------------------------------------------------------

SPEED = re.compile(
    r"speed \(feedback, not graded\): yours ([\d,]+) (GB/s|GFLOP/s), the built-in (\w+) ([\d,]+) \2 "
    r"\((\d+\.\d\d)x\) on .+, 20 launches each"
)
KERNEL_EXERCISES = [e.id for e in exercises.ordered() if e.kind == "cuda"]


def _speed(details: list[str]) -> tuple[float, str, str, float, float]:
    found = SPEED.fullmatch(details[-1])
    assert found, details
    yours, unit, name, builtin, ratio = found.groups()
    return float(yours.replace(",", "")), unit, name, float(builtin.replace(",", "")), float(ratio)


@pytest.mark.gpu
@pytest.mark.skipif(emulator.selected(), reason="the CPU emulator measures no speed")
@pytest.mark.parametrize("exercise_id", KERNEL_EXERCISES)
def test_a_passed_kernel_check_ends_with_its_speed_beside_the_builtin(exercise_id) -> None:
    ex = exercises.get(exercise_id)
    result = checks.run_check(exercise_id, solution_kernel(exercise_id))
    assert result.passed, str(result)
    yours, unit, name, builtin, ratio = _speed(result.details)
    assert unit == ("GFLOP/s" if ex.kernel.startswith("matmul") else "GB/s")
    assert name == speed.STAND_INS.get(ex.kernel, ex.kernel)
    ceiling = 100_000 if unit == "GFLOP/s" else 20_000  # far above an H200's FP32 peak and HBM bandwidth
    assert 0 < yours < ceiling and 0 < builtin < ceiling, result.details[-1]
    assert 0.1 < ratio < 10, f"the solution and the built-in kernel should be of one speed: {result.details[-1]}"


SLOW_RELU = """
extern "C" __global__ void ew_relu(float* out, const float* a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float busy = a[i];
    for (int k = 0; k < 4000; ++k) busy = busy * 0.999f + 0.001f;  // dependent FMAs: compute-bound
    out[i] = fmaxf(a[i], 0.0f) + 0.0f * busy;  // 0 * a finite value: exact, and kept without fast math
}
"""


@pytest.mark.gpu
@pytest.mark.skipif(emulator.selected(), reason="the CPU emulator measures no speed")
def test_the_speed_line_times_the_students_kernel() -> None:
    result = checks.run_check("3.1", SLOW_RELU)
    assert result.passed, str(result)
    yours, _, _, builtin, ratio = _speed(result.details)
    assert yours < 0.25 * builtin and ratio < 0.25, result.details[-1]


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize("exercise_id", KERNEL_EXERCISES)
def test_speed_launches_fit_each_kernel(exercise_id, monkeypatch) -> None:
    """The speed problems at a small size launch each solution and its built-in kernel through the
    launchers without a fault (where the emulator runs this, it checks every access)."""
    monkeypatch.setattr(speed, "N", 8192)
    monkeypatch.setattr(speed, "MATMUL", 64)
    monkeypatch.setattr(speed, "XENT", (8, 100))
    (line,) = speed.feedback(exercises.get(exercise_id), solution_kernel(exercise_id))
    assert SPEED.fullmatch(line), line


# --- the first hour: the setup cell's line, an unsolved exercise, no GPU, a runaway kernel ---------


def test_the_setup_line_names_the_emulator_as_the_way_without_a_gpu() -> None:
    from minitorch_cuda.exercise import device_line

    if mt.cuda_available():
        pytest.skip("checks the line without a GPU")
    line = device_line()
    way, why = line.split(" (Why no GPU: ")
    assert way.startswith("GPU available: False. The kernel exercises run on the CPU emulator"), line
    assert "%env MINITORCH_CUDA_EMULATE=1" in way and "extra" not in way, line  # the cuda extra needs a GPU
    assert mt.cuda_unavailable_reason() in why


@needs_gxx
def test_the_setup_line_says_the_gpu_is_the_cpu_emulator() -> None:
    done = emulated("from minitorch_cuda.exercise import device_line; print(device_line())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("GPU available: False; kernels run on the CPU emulator"), done.stdout


def test_without_a_gpu_a_kernel_cell_points_to_the_emulator_first(capsys, monkeypatch) -> None:
    from minitorch_cuda.exercise import cuda_exercise

    if mt.cuda_available():
        pytest.skip("checks the kernel cell without a GPU")
    cuda_exercise("3.1", solution_kernel("3.1"))
    (line,) = capsys.readouterr().out.splitlines()
    way, why = line.split(" (Why no GPU: ")
    assert way.startswith("Name and parameters checked, not compiled: no usable GPU here. The kernel exercises run")
    assert "%env MINITORCH_CUDA_EMULATE=1" in way and "extra" not in way, line
    assert mt.cuda_unavailable_reason() in why


def test_without_a_gpu_a_check_says_first_to_use_the_emulator(capsys) -> None:
    from minitorch_cuda.exercise import report

    if mt.cuda_available():
        pytest.skip("checks the report without a GPU")
    assert not report("3.1", solution_kernel("3.1")).passed
    head, advice, detail = capsys.readouterr().out.splitlines()[:3]
    assert head.endswith("FAILED [no_gpu]") and "CPU emulator" in advice and "MINITORCH_CUDA_EMULATE=1" in advice
    assert mt.cuda_unavailable_reason() in detail


@pytest.mark.parametrize(
    ("cell", "says"),
    [
        ('cuda_exercise("3.1", "// TODO: Exercise 3.1")', "its kernel still holds `// TODO: Exercise 3.1`; write the"),
        (
            'def time_median(*args, **kwargs):\n    raise NotImplementedError("Exercise 5.1")\n\n'
            'report("5.1", time_median)',
            "`time_median` still raises NotImplementedError; write it in its cell",
        ),
    ],
    ids=["kernel", "python"],
)
def test_an_unsolved_exercise_is_one_line_in_the_notebook(cell, says) -> None:
    """What Jupyter shows: one line saying what to do, no traceback through the course's code."""
    error = error_in_a_notebook(cell)
    assert error.ename == "ExerciseNotDone" and isinstance(error.traceback, list), error
    (line,) = error.traceback
    assert line.startswith("ExerciseNotDone: Exercise ") and "is not done yet" in line and says in line, line


def error_in_a_notebook(cell: str):
    """The error output of ``cell`` run in a Jupyter kernel, as a student's notebook shows it."""
    import nbclient
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from minitorch_cuda.exercise import cuda_exercise, report\n" + cell)]
    nbclient.NotebookClient(nb, timeout=300, allow_errors=True).execute(cwd=str(ROOT))
    (error,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    return error


@needs_gxx
@pytest.mark.parametrize("nvcc", [pytest.param(True, marks=needs_nvcc), False], ids=["nvcc", "emulator-only"])
def test_a_compile_error_is_one_compilers_error_without_library_frames(monkeypatch, nvcc) -> None:
    monkeypatch.setenv(emulator.ENV, "1")  # the notebook's kernel inherits it
    broken = solution_kernel("3.1").replace("int i =", "intt i =", 1)
    assert broken != solution_kernel("3.1")
    hide = "" if nvcc else "from minitorch_cuda.cuda import nvcc_check\nnvcc_check.available = lambda: False\n"
    error = error_in_a_notebook(f"{hide}cuda_exercise('3.1', {broken!r})")
    (text,) = error.traceback  # the message alone: no frames of the course's code
    assert text.startswith("KernelCompileError: ") and text.count("could not compile") == 1, text
    assert ("nvcc could not compile" in text) == nvcc and "intt" in text and ">> " in text, text


@needs_gxx
def test_the_check_after_a_kernel_that_did_not_compile_says_so_in_one_line(monkeypatch) -> None:
    """The kernel cell shows the compiler's error; its check cell does not compile the same source
    again with the emulator's g++ (a second compiler's message, other line numbers), and once the
    kernel compiles the check runs it."""
    import nbclient
    import nbformat

    monkeypatch.setenv(emulator.ENV, "1")  # the notebook's kernel inherits it
    good = solution_kernel("3.1")
    broken = good.replace("int i =", "intt i =", 1)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from minitorch_cuda.exercise import cuda_exercise, report"),
        nbformat.v4.new_code_cell(f"source = {broken!r}\ncuda_exercise('3.1', source)"),
        nbformat.v4.new_code_cell("report('3.1', source)"),
        nbformat.v4.new_code_cell(f"source = {good!r}\ncuda_exercise('3.1', source)"),
        nbformat.v4.new_code_cell("report('3.1', source)"),
    ]
    nbclient.NotebookClient(nb, timeout=300, allow_errors=True).execute(cwd=str(ROOT))
    errors = [[o for o in cell.outputs if o.output_type == "error"] for cell in nb.cells]
    assert [e[0].ename if e else None for e in errors] == [None, "KernelCompileError", "KernelNotCompiled", None, None]
    (line,) = errors[2][0].traceback
    assert line == (
        "KernelNotCompiled: Exercise 3.1's kernel did not compile: its cell above shows the compiler's error; "
        "fix the kernel there, run that cell, then this one"
    ), line
    assert "PASSED" in "".join(o.get("text", "") for o in nb.cells[4].outputs)


@needs_gxx
def test_a_runaway_kernel_stops_at_the_check_cells_time_limit() -> None:
    """An endless loop in a kernel: the check cell ends at its time limit (here 2 s) with a
    timeout, as the grader's would, and the next check runs as usual."""
    kernel = solution_kernel("3.1")
    endless = kernel.replace("{\n", "{\n    while (clock64() >= 0) { }  // never ends\n", 1)
    assert endless != kernel
    done = emulated(
        f"""
        import time
        import minitorch_cuda.exercise as helper
        helper.CHECK_SECONDS = 2
        start = time.monotonic()
        stopped = helper.report("3.1", {endless!r})
        print("seconds", time.monotonic() - start)
        assert helper.report("3.1", {kernel!r}).passed
        """
    )
    assert done.returncode == 0, done.stderr
    assert "FAILED [timeout]" in done.stdout and "ran past the time limit of 2 s" in done.stdout, done.stdout
    seconds = float(re.search(r"seconds (\S+)", done.stdout).group(1))
    assert seconds < 20, done.stdout


def test_a_missing_optional_package_is_said_once_at_the_start(capsys) -> None:
    from minitorch_cuda.exercise import say_if_missing

    say_if_missing("numpy", extra="dev", needed_by="Exercise 0.0")
    assert capsys.readouterr().out == ""  # installed: nothing to say
    say_if_missing("no_such_module_here", extra="triton", needed_by="Exercise 20.2")
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("no_such_module_here is not installed: Exercise 20.2 needs it"), line
    assert "install the `triton` extra (pip install -e '.[triton]')" in line


def test_the_triton_exercise_says_in_its_setup_cell_when_triton_is_missing() -> None:
    setup = next(c for c in jupytext.read(ROOT / "exercises" / "20_tile_programming.md").cells if c.cell_type == "code")
    assert 'say_if_missing("triton", extra="triton", needed_by="Exercise 20.2")' in setup.source


def test_a_check_cell_whose_package_is_missing_stops_in_one_line() -> None:
    from minitorch_cuda.exercise import PackageMissing, require

    require("numpy", extra="dev", needed_by="Exercise 0.0")  # installed: nothing happens
    with pytest.raises(PackageMissing) as info:
        require("no_such_module_here", extra="triton", needed_by="Exercise 20.2")
    assert isinstance(info.value, ModuleNotFoundError) and info.value.name == "no_such_module_here"
    (line,) = info.value._render_traceback_()  # what IPython shows: one line, no frames
    assert line.startswith("PackageMissing: no_such_module_here is not installed: Exercise 20.2 needs it"), line
    check = next(c for c in jupytext.read(ROOT / "exercises" / "20_tile_programming.md").cells
                 if c.metadata.get("exercise_check") == "20.2")  # fmt: skip
    assert check.source.index('require("triton"') < check.source.index("bias_relu_triton")
