"""The exercise checks themselves, the notebook helper and the generator.

CPU: the Python exercises against their solutions and typical mistakes; the
generator's stubs and `--check`; every kernel solution compiles with nvcc (where
nvcc exists). GPU: every kernel solution passes its checks in-process, as in the
notebook's check cell.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import jupytext
import nbformat
import numpy as np
import pytest
from conftest import needs_nvcc, needs_triton

import minitorch_cuda as mt
from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
from minitorch_cuda.exercise import cuda_exercise
from minitorch_cuda.grade import checks, exercises, generate, host_checks, notebook, verdict

ROOT = Path(__file__).resolve().parents[1]


def solution(exercise_id: str):
    """The solution cell of an exercise, executed as the grader does."""
    ex = exercises.get(exercise_id)
    source = notebook.exercise_source(jupytext.read(ROOT / "solutions" / f"{ex.notebook}.md"), ex)
    namespace = {"np": np, "mt": mt, "cuda_exercise": cuda_exercise}
    exec(source, namespace)
    return namespace[ex.name], source


@pytest.mark.parametrize("exercise_id", ["1.2", "2.1", "4.1", "5.1", "14.1", "18.1", "19.1"])
def test_python_solutions_pass(exercise_id) -> None:
    artifact, source = solution(exercise_id)
    result = checks.run_check(exercise_id, artifact, source)
    assert result.passed, str(result)


@needs_nvcc
@pytest.mark.parametrize("exercise_id", [e.id for e in exercises.ordered() if e.kind == "cuda"])
def test_kernel_solutions_compile(exercise_id, tmp_path) -> None:
    """Every kernel solution builds for the H200 (sm_90) as the grader builds it, also without a GPU."""
    source, _ = solution(exercise_id)
    (tmp_path / "kernel.cu").write_text(source)
    cmd = ["nvcc", "-arch=sm_90", "-cubin", "-I", str(KERNEL_DIR), "-o", str(tmp_path / "kernel.cubin")]
    result = subprocess.run([*cmd, str(tmp_path / "kernel.cu")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_bf16_truncation_fails_with_indices() -> None:
    def truncate(x):
        return (np.asarray(x, np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)

    result = checks.run_check("2.1", truncate, "")
    assert result.reason == verdict.WRONG_RESULT and result.details[0].startswith("input ")


def test_bf16_ties_away_from_zero_is_named() -> None:
    def away(x):
        bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        out = ((bits + 0x8000) & 0xFFFF0000).astype(np.uint32)
        return np.where(np.isnan(x), np.float32(np.nan).view(np.uint32), out).view(np.float32)

    assert "half to even" in checks.run_check("2.1", away, "").message


def test_pool_without_retry_fails() -> None:
    pool_class, _ = solution("4.1")

    class NoRetry(pool_class):
        def acquire(self, nbytes):
            free = self._free.get(nbytes)
            return free.pop() if free else self._allocate(nbytes)

    result = checks.run_check("4.1", NoRetry)
    assert not result.passed


def test_timing_without_the_second_sync_measures_the_launch() -> None:
    def launch_only(fn, warmup=3, repeats=10, sync=None, clock=None):
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(repeats):
            sync()
            start = clock()
            fn()  # queued, not done
            samples.append(clock() - start)
        return float(np.median(samples)), samples

    result = checks.run_check("5.1", launch_only)
    assert result.reason == verdict.WRONG_RESULT and "sync() after fn()" in result.message
    assert result.details[0].startswith("sample 0: got")


def test_roofline_with_the_larger_roof_fails() -> None:
    roofline, _ = solution("14.1")

    def above_the_roof(M, N, K, peak, bandwidth):
        out = roofline(M, N, K, peak, bandwidth)
        return out | {"bound_gflops": max(peak, bandwidth * out["intensity"])}

    result = checks.run_check("14.1", above_the_roof)
    assert result.reason == verdict.WRONG_RESULT and "bound_gflops" in result.message


@pytest.mark.parametrize(
    ("exercise_id", "call"), [("1.2", "launch_config("), ("5.1", "time_median("), ("14.1", "matmul_roofline(")]
)
def test_a_raising_function_fails_with_the_call_named(exercise_id, call) -> None:
    def raises(*args, **kwargs):
        return 1 / 0

    result = checks.run_check(exercise_id, raises)
    assert result.reason == verdict.EXCEPTION
    assert result.message.startswith(call) and "ZeroDivisionError" in result.message

    def stub(*args, **kwargs):
        raise NotImplementedError(f"Exercise {exercise_id}")

    with pytest.raises(NotImplementedError):
        checks.run_check(exercise_id, stub)


def test_graphed_step_reading_before_the_replay_is_one_step_late() -> None:
    graphed_step, _ = solution("18.1")

    class ReadFirst(graphed_step):
        def __call__(self, xb, yb):
            key = (xb.shape, yb.shape)
            if key not in self.graphs:
                return super().__call__(xb, yb)
            x, y, graph, loss = self.graphs[key]
            self.device.copy(x, xb)
            self.device.copy(y, yb)
            value = self.device.read(loss)  # the previous replay's loss
            graph.launch()
            return value

    result = checks.run_check("18.1", ReadFirst)
    assert result.reason == verdict.WRONG_RESULT and "a replay" in result.message
    assert result.details[0].startswith("batch 1 (8 rows): got")


def test_graphed_step_capturing_first_is_refused() -> None:
    class CaptureFirst:
        def __init__(self, body, device):
            self.body, self.device = body, device

        def __call__(self, xb, yb):
            with self.device.capture() as graph:
                loss = self.body(xb, yb)
            graph.launch()
            return self.device.read(loss)

    result = checks.run_check("18.1", CaptureFirst)
    assert result.reason == verdict.WRONG_RESULT and "run the step once eagerly" in result.message


def test_graphed_step_capturing_without_a_warmup_is_refused() -> None:
    """The eager step outside ``device.warmup()``: the capture's allocations find nothing reserved,
    as the GPU's pool would not hold them (``CudaGraphDevice.warmup`` reserves them)."""

    class NoWarmup:
        def __init__(self, body, device):
            self.body, self.device, self.graphs = body, device, {}

        def __call__(self, xb, yb):
            device, key = self.device, (xb.shape, yb.shape)
            if key not in self.graphs:
                x, y = device.empty(xb.shape), device.empty(yb.shape)
                device.copy(x, xb)
                device.copy(y, yb)
                value = device.read(self.body(x, y))
                with device.capture() as graph:
                    loss = self.body(x, y)
                self.graphs[key] = x, y, graph, loss
                return value
            x, y, graph, loss = self.graphs[key]
            device.copy(x, xb)
            device.copy(y, yb)
            graph.launch()
            return device.read(loss)

    result = checks.run_check("18.1", NoWarmup)
    assert result.reason == verdict.WRONG_RESULT and "no warm-up reserved" in result.message, result


def test_graphed_step_without_a_graph_is_host_side() -> None:
    class Eager:
        def __init__(self, body, device):
            self.body, self.device = body, device

        def __call__(self, xb, yb):
            return self.device.read(self.body(xb, yb))

    assert checks.run_check("18.1", Eager).reason == verdict.HOST_SIDE


def test_tf32_reference_agrees_with_the_chapters_rounding() -> None:
    from minitorch_cuda import numerics

    x = host_checks._rounding_inputs(np.random.default_rng(0), 13)
    assert np.array_equal(numerics.tf32_reference(x).view(np.uint32), numerics.round_mantissa(x, 10).view(np.uint32))


def test_tf32_ties_away_from_zero_and_lost_nans_fail() -> None:
    def away(x):  # what the tensor cores' cvt.rna does
        bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
        out = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)
        return np.where(np.isnan(x), x, out)

    assert "half to even" in checks.run_check("19.1", away, "").message
    round_to_tf32, _ = solution("19.1")
    nan_payloads = checks.run_check("19.1", lambda x: round_to_tf32(np.where(np.isnan(x), np.float32(1), x)), "")
    assert "NaN must stay NaN" in nan_payloads.message


def test_report_raises_on_stub_and_prints(capsys) -> None:
    with pytest.raises(NotImplementedError, match="Exercise 3.1"):
        checks.report("3.1", "// TODO: Exercise 3.1")
    launch_config, _ = solution("1.2")
    assert checks.report("1.2", launch_config).passed
    assert "Exercise 1.2 (launch configuration): PASSED" in capsys.readouterr().out


def test_compare_reasons() -> None:
    want = np.arange(300, dtype=np.float32)
    poisoned = np.full(300, -1.0, np.float32)
    with pytest.raises(verdict.CheckFailed) as info:
        verdict.compare(poisoned, want, "x", poison=-1.0)
    assert info.value.reason == verdict.NO_WRITES
    tail = want.copy()
    tail[-1] = 7
    with pytest.raises(verdict.CheckFailed) as info:
        verdict.compare(tail, want, "x", tail=300 % 256)
    assert info.value.reason == verdict.BOUNDARY and "index 299" in info.value.details[0]


def test_an_output_computed_from_memory_no_thread_wrote_is_named() -> None:
    """A missing __syncthreads() on the emulator reads shared memory still NaN: the message says so,
    and the values read as numbers (nan, 3.0), not reprs (np.float64(nan))."""
    want = np.arange(64, dtype=np.float32)
    got = want.copy()
    got[3::8] = np.nan
    with pytest.raises(verdict.CheckFailed) as info:
        verdict.compare(got, want, "row sums", poison=-1.0)
    failure = info.value
    assert failure.reason == verdict.WRONG_RESULT and "8 of 64 values differ" in failure.message
    assert "8 are NaN: computed from memory no thread had written yet" in failure.message, failure.message
    assert failure.details[0] == "index 3: got nan, want 3.0", failure.details


def test_cuda_exercise_helper() -> None:
    with pytest.raises(NotImplementedError, match="Exercise 3.1"):
        cuda_exercise(
            "3.1",
            'extern "C" __global__ void ew_relu(float* out, const float* a, int n) {\n    // TODO: Exercise 3.1\n}',
        )
    with pytest.raises(TypeError, match="must take"):
        cuda_exercise("3.1", 'extern "C" __global__ void ew_relu(float* out, int n) {}')
    with pytest.raises(ValueError, match="no `__global__ void ew_relu"):
        cuda_exercise("3.1", "__global__ void relu(float* out, const float* a, int n) {}")


def test_stub_source() -> None:
    python = "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
    assert generate.stub_source(python, "2.1", "t") == 'def f():\n    raise NotImplementedError("Exercise 2.1")'
    cuda = 'src = """\n__global__ void k() {\n    // BEGIN SOLUTION\n    x();\n    // END SOLUTION\n}\n"""'
    assert "    // TODO: Exercise 6.1\n}" in generate.stub_source(cuda, "6.1", "t")
    with pytest.raises(generate.MarkerError):
        generate.stub_source("# BEGIN SOLUTION\nx = 1\n", "1.1", "t")
    with pytest.raises(generate.MarkerError):
        generate.stub_source("# BEGIN SOLUTION\n# END SOLUTION\n", None, "t")


def test_exercises_are_up_to_date() -> None:
    assert generate.main(["--check"]) == 0, "exercises/ is stale: run `python -m minitorch_cuda.grade.generate`"


def test_check_mode_flags_stale_files_and_outputs(tmp_path) -> None:
    sols, exs = tmp_path / "solutions", tmp_path / "exercises"
    sols.mkdir()
    exs.mkdir()
    (sols / "02_floating_point.md").write_text((ROOT / "solutions" / "02_floating_point.md").read_text())
    args = ["--solutions", str(sols), "--exercises", str(exs)]
    assert generate.main(["--check", *args]) == 1  # missing
    assert generate.main(args) == 0
    assert generate.main(["--check", *args]) == 0
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("1", outputs=[nbformat.v4.new_output("stream", text="1")])]
    )
    nbformat.write(nb, exs / "scratch.ipynb")
    assert generate.main(["--check", *args]) == 1


def test_an_exercise_keeps_its_solutions_jupytext_version(tmp_path) -> None:
    """The header names the jupytext that wrote the solution, whichever jupytext is installed:
    a jupytext release must not make every exercise stale (CI on 6 December, 1.19.6 -> 1.19.7)."""
    text = (ROOT / "solutions" / "02_floating_point.md").read_text()
    solution = tmp_path / "02_floating_point.md"
    solution.write_text(generate.JUPYTEXT_VERSION.sub("    jupytext_version: 0.0.1", text, count=1))
    exercise = generate.student_notebook(solution)
    assert [m.group(0).strip() for m in generate.JUPYTEXT_VERSION.finditer(exercise)] == ["jupytext_version: 0.0.1"]
    assert "Exercise 2." in exercise  # the solution blocks became stubs as before


def test_the_instructor_guide_lists_which_exercises_need_a_gpu() -> None:
    """Its section "Which exercises need a GPU" names every exercise once, in the right group."""
    import re

    text = (ROOT / "book" / "instructor_guide.md").read_text()
    section = text.split("## Which exercises need a GPU", 1)[1]
    needs_gpu, anywhere = section.split("These run on any machine", 1)
    anywhere = anywhere.split("\n\n", 1)[0]

    def ids(part: str) -> list[str]:
        return re.findall(r"\b\d+\.\d+\b", part)

    assert sorted(ids(needs_gpu)) == sorted(e.id for e in exercises.ordered() if e.gpu)
    assert sorted(ids(anywhere)) == sorted(e.id for e in exercises.ordered() if not e.gpu)


def test_every_exercise_has_a_solution_cell_and_check_cell() -> None:
    for ex in exercises.ordered():
        nb = jupytext.read(ROOT / "solutions" / f"{ex.notebook}.md")
        cells = [c for c in nb.cells if c.cell_type == "code"]
        solved = [c for c in cells if notebook.cell_exercise(c) == ex.id]
        checking = [c for c in cells if str(c.metadata.get("exercise_check")) == ex.id]
        assert len(solved) == 1 and "BEGIN SOLUTION" in solved[0].source, ex.id
        assert len(checking) == 1 and f'report("{ex.id}"' in checking[0].source, ex.id
        assert ("gpu" in checking[0].metadata.get("tags", [])) == ex.gpu, ex.id


@pytest.mark.gpu
@pytest.mark.skipif(not mt.cuda_available(), reason=f"needs a GPU: {mt.cuda_unavailable_reason()}")
@pytest.mark.parametrize("exercise_id", [e.id for e in exercises.ordered() if e.gpu])
def test_gpu_solution_passes_in_process(exercise_id) -> None:
    artifact, source = solution(exercise_id)
    result = checks.run_check(exercise_id, artifact, source)
    assert result.passed, str(result)


# --- reading a kernel without running its cell (grade/source.py) -------------------------------

RELU = 'extern "C" __global__ void ew_relu(float* out, const float* a, int n) { }'


@pytest.mark.parametrize(
    ("cell", "reason", "message"),
    [
        (f"ew_relu_source = r'''{RELU}'''\ncuda_exercise('3.1', ew_relu_source)", None, ""),
        (f"ew_relu_source = '// head\\n' + r'''{RELU}'''", None, ""),
        ("ew_relu_source = open('relu.cu').read()", None, ""),
        ("from pathlib import Path\new_relu_source = Path('relu.cu').read_text()", None, ""),
        ("ew_relu_source = open('../outside.cu').read()", verdict.NOT_A_KERNEL, "not a file in your folder"),
        ("ew_relu_source = make_source()", verdict.NOT_A_KERNEL, "without running your cell"),
        ("src = 'x'", verdict.MISSING, "does not assign 'ew_relu_source'"),
        (
            f"import pycuda.driver as drv\ndrv.Function.prepared_async_call = print\new_relu_source = '''{RELU}'''",
            verdict.HOST_SIDE,
            "drv.Function.prepared_async_call",
        ),
        (f"setattr(mt, 'tensor', None)\new_relu_source = '''{RELU}'''", verdict.HOST_SIDE, "setattr"),
        (f"f = print\nf.__code__\new_relu_source = '''{RELU}'''", verdict.HOST_SIDE, "__code__"),
        # read as it is: what it includes is judged where it compiles (tests/test_kernel_build.py)
        (f"ew_relu_source = '#include \"/etc/passwd\"\\n' + '''{RELU}'''", None, ""),
        ("ew_relu_source = '''", verdict.EXCEPTION, "SyntaxError"),
    ],
)
def test_kernel_source_is_read_statically(tmp_path, cell, reason, message) -> None:
    from minitorch_cuda.grade import source

    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "relu.cu").write_text(RELU)
    (tmp_path / "outside.cu").write_text(RELU)
    ex = exercises.get("3.1")
    if reason is None:
        assert source.kernel_source(cell, ex, tmp_path / "student").endswith(RELU)
        return
    with pytest.raises(verdict.CheckFailed) as failed:
        source.kernel_source(cell, ex, tmp_path / "student")
    assert failed.value.reason == reason and message in failed.value.message, failed.value.message


def test_every_shipped_kernel_cell_reads_statically() -> None:
    from minitorch_cuda.grade import source

    for ex in exercises.ordered():
        if ex.kind == "cuda":
            for folder in ("solutions", "exercises"):
                nb = jupytext.read(ROOT / folder / f"{ex.notebook}.md")
                assert f"{ex.kernel}(" in source.kernel_source(notebook.exercise_source(nb, ex), ex)


# --- the channel between checker and subject (grade/channel.py) --------------------------------


def test_the_checkers_side_of_the_channel_shares_only_what_its_policy_allows() -> None:
    import os

    from minitorch_cuda.grade import channel, fakes, worker

    r, w = os.pipe()
    peer = channel.Peer(r, w, shareable=worker.shareable)
    device = fakes.FakeDevice(4096)
    handle = peer.encode(device)["H"]
    assert peer.encode(device) == {"H": handle}  # one handle per object
    for name in ("__class__", "_private", "__init__"):
        with pytest.raises(channel.ChannelRefused):
            peer._perform({"op": "getattr", "obj": handle, "name": name})
    with pytest.raises(channel.ChannelRefused):
        peer._perform({"op": "method", "obj": handle, "name": "__init__", "args": {"T": []}})
    with pytest.raises(channel.ChannelRefused):
        peer.encode(os)
    with pytest.raises(channel.ChannelRefused):
        peer._perform({"op": "getattr", "obj": 999, "name": "used"})
    value, _ = peer._perform({"op": "method", "obj": handle, "name": "allocate", "args": {"T": [1024]}})
    assert value.nbytes == 1024 and device.used == 1024
    assert peer.decode(peer.encode((np.float32([1, 2]), {"k": (1, "x")}, np.int64(3))))[1] == {"k": (1, "x")}
    with pytest.raises(channel.SubjectGone):
        peer.decode({"A": ["object", [1], ""]})  # no dtype outside the fixed set
    os.close(r)
    os.close(w)


# --- compute-sanitizer on a kernel that passed (grade/sanitizer.py) -----------------------------

MEMCHECK_OUTPUT = """\
========= COMPUTE-SANITIZER
========= Invalid __shared__ write of size 4 bytes
=========     at softmax_rows_volatile+0x2a0 in kernel.cu:12
=========     by thread (63,0,0) in block (0,0,0)
=========     Address 0x10fc is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""


def test_the_sanitizers_first_message_is_the_reason(tmp_path, monkeypatch) -> None:
    from minitorch_cuda.grade import sanitizer

    assert sanitizer.first_error(MEMCHECK_OUTPUT) == (
        "Invalid __shared__ write of size 4 bytes",
        [
            "at softmax_rows_volatile+0x2a0 in kernel.cu:12",
            "by thread (63,0,0) in block (0,0,0)",
            "Address 0x10fc is out of bounds",
        ],
    )
    race = "========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access at k+0x1f0\n"
    assert sanitizer.first_error(race)[0] == "Error: Race reported between Write access at k+0x1f0"
    assert sanitizer.tools_for("__global__ void k() { }") == ["memcheck"]
    assert sanitizer.tools_for("__shared__ float s[8]; __syncthreads();") == ["memcheck", "racecheck", "synccheck"]
    assert sanitizer.tools_for("v += __shfl_down_sync(0xffffffffu, v, 1);") == ["memcheck", "synccheck"]
    ex = exercises.get("3.3")
    monkeypatch.setattr(sanitizer, "binary", lambda: None)
    assert sanitizer.run(ex, "__shared__", 10, emulator=False) == (None, ["compute-sanitizer not found: not run"])
    fake = tmp_path / "compute-sanitizer"  # a stand-in: memcheck reports an error, the others are clean
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = memcheck ]; then cat <<"EOF"\n{MEMCHECK_OUTPUT}EOF\nexit 99; fi\n'
        'if [ "$2" = racecheck ]; then sleep 30; fi\nexit 0\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sanitizer, "binary", lambda: str(fake))
    message, details = sanitizer.run(ex, "__shared__ float s[8]; __syncthreads();", 3, emulator=False)
    assert message == "compute-sanitizer memcheck: Invalid __shared__ write of size 4 bytes" and details
    fake.write_text('#!/bin/sh\nif [ "$2" = memcheck ]; then exit 0; fi\nsleep 30\n')
    clean = "__global__ void k() { }"
    assert sanitizer.run(ex, clean, 10, emulator=False) == (
        None,
        ["compute-sanitizer (memcheck) on a small launch: no errors"],
    )
    message, notes = sanitizer.run(ex, "__shared__ float s[8];", 2, emulator=False)
    assert message is None and "racecheck did not finish within 2 s (not counted)" in notes[1]


def test_the_emulator_watches_the_small_launch_too(monkeypatch) -> None:
    """Beside compute-sanitizer, the small launch runs on the CPU emulator, which names what a GPU
    leaves undefined: here a shuffle whose mask leaves out lanes that execute it."""
    from minitorch_cuda.grade import sanitizer, source

    if not sanitizer.emulator_usable():
        pytest.skip("the CPU emulator (minitorch_cuda.emulator) or a C++ compiler is missing")
    monkeypatch.setattr(sanitizer, "binary", lambda: None)
    ex = exercises.get("13.1")
    nb = jupytext.read(ROOT / "solutions" / f"{ex.notebook}.md")
    honest = source.kernel_source(notebook.exercise_source(nb, ex), ex)
    assert sanitizer.run(ex, honest, 120) == (None, ["the CPU emulator on a small launch: no errors"])
    masked = honest.replace("__shfl_down_sync(0xffffffffu, v, offset)", "__shfl_down_sync(0x0000ffffu, v, offset)")
    message, _ = sanitizer.run(ex, masked, 120)
    assert message.startswith("the CPU emulator: ") and "mask leaves out" in message, message


# --- 19.2 the mma.sync fragment layout, 20.2 a Triton kernel ------------------------------------


def test_the_fragment_reference_is_the_layout_mma_async_cu_runs_on_the_h200() -> None:
    """The checker's layout against the one written in mma_async.cu's comment, which its kernel
    uses (and passes its checks with) on the H200."""
    import re

    from minitorch_cuda.grade import mma_fragments

    text = (KERNEL_DIR / "mma_async.cu").read_text()
    comment = re.search(r"lane \(g, t\) = \(lane / 4, lane % 4\) holds\n(.*?), as \(row, column\)", text, re.S)
    words = " ".join(line.lstrip("/ ") for line in comment.group(1).splitlines())
    layouts = dict(re.findall(r"\b([abd]): ((?:\([^()]*\) ?)+)", words))
    for op, written in (("a", layouts["a"]), ("b", layouts["b"]), ("c", layouts["d"])):
        pairs = re.findall(r"\(([^()]*)\)", written)
        assert len(pairs) == mma_fragments.REGISTERS[op]
        for lane in range(32):
            g, t = divmod(lane, 4)
            for reg, pair in enumerate(pairs):
                want = tuple(eval(p.replace("2t", "2 * t"), {"g": g, "t": t}) for p in pair.split(","))
                assert mma_fragments.ptx_layout(op, lane, reg) == want, (op, lane, reg)


def _wrong_layout(fragment_coords, mistake: str):
    """The solution's layout with one typical mistake (and the solution's ValueErrors)."""

    def layout(op, lane, reg):
        row, col = fragment_coords(op, lane, reg)
        if mistake == "row and column swapped":
            return col, row
        if mistake == "lane = 8 * threadID + groupID":
            t, g = divmod(lane, 8)
            return {"a": (g + 8 * (reg & 1), t + 4 * (reg >> 1)), "b": (t + 4 * reg, g)}.get(
                op, (g + 8 * (reg >> 1), 2 * t + (reg & 1))
            )
        if mistake == "the halves of k swapped in A and B":
            return (row, (col + 4) % 8) if op == "a" else ((row + 4) % 8, col) if op == "b" else (row, col)
        return fragment_coords(op, lane, [0, 2, 1, 3][reg]) if op == "c" else (row, col)  # c1 and c2 swapped

    return layout


WRONG_LAYOUTS = {
    "row and column swapped": ("A, lane 0, register a1: yours (0, 8), the instruction's (8, 0)", "outside the 16 x 8"),
    "lane = 8 * threadID + groupID": ("A, lane 1, register a0: yours (1, 0), the instruction's (0, 1)", "wrong D"),
    "the halves of k swapped in A and B": ("A, lane 0, register a0: yours (0, 4), the instruction's (0, 0)", "right D"),
    "c1 and c2 swapped": ("C/D, lane 0, register c1: yours (8, 0), the instruction's (0, 1)", "wrong D"),
}


def test_the_fragment_layout_solution_passes() -> None:
    fragment_coords, source = solution("19.2")
    result = checks.run_check("19.2", fragment_coords, source)
    assert result.passed, str(result)


@pytest.mark.parametrize("mistake", list(WRONG_LAYOUTS))
def test_a_wrong_fragment_layout_names_its_first_wrong_lane_and_register(mistake) -> None:
    fragment_coords, _ = solution("19.2")
    first, why = WRONG_LAYOUTS[mistake]
    result = checks.run_check("19.2", _wrong_layout(fragment_coords, mistake), "")
    assert result.reason == verdict.WRONG_RESULT and result.message.startswith(first), result.message
    assert why in result.message, result.message


def test_a_fragment_layout_that_accepts_any_register_fails() -> None:
    fragment_coords, _ = solution("19.2")

    def lenient(operand, lane, register):
        return fragment_coords(operand, lane % 32, register % (2 if operand == "b" else 4))

    result = checks.run_check("19.2", lenient, "")
    assert result.reason == verdict.WRONG_RESULT and "should raise ValueError" in result.message


TRITON_VARIANTS = """
import json, sys
import jupytext, numpy as np
import minitorch_cuda as mt
from minitorch_cuda.exercise import cuda_exercise
from minitorch_cuda.grade import checks, exercises, notebook

ex = exercises.get("20.2")
cell = notebook.exercise_source(jupytext.read("solutions/20_tile_programming.md"), ex)
store = "tl.store(out_ptr + row * stride_out + cols, tl.maximum(x + b, 0.0), mask=inside)"
grid = "    grid = (M, triton.cdiv(N, BLOCK_N))"
variants = {
    "solution": cell,
    "unmasked store": cell.replace(store, store.replace(", mask=inside", "")),
    "bias by row": cell.replace("tl.load(bias_ptr + cols, mask=inside)", "tl.load(bias_ptr + row + 0 * cols)"),
    "numpy": cell.replace(grid, "    out[:, :N] = np.maximum(c[:, :N] + bias, 0)\\n    return out\\n" + grid)
    .replace(store, store.replace("tl.maximum(x + b, 0.0)", "x * 0.0")),  # a kernel that stores zeros
}
reasons = {}
for name, source in variants.items():
    assert name == "solution" or source != cell, name
    namespace = {"np": np, "mt": mt, "cuda_exercise": cuda_exercise, "__name__": "__exercise__"}
    exec(compile(source, "<exercise 20.2 cell>", "exec"), namespace)
    result = checks.run_check("20.2", namespace[ex.name], source)
    reasons[name] = [result.reason, result.message]
print(json.dumps(reasons))
"""


@needs_triton
def test_the_triton_kernel_runs_in_the_interpreter_and_its_mistakes_fail() -> None:
    """Exercise 20.2 in a fresh process with TRITON_INTERPRET=1 (Triton reads it at its first import)."""
    import json
    import os
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", TRITON_VARIANTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    reasons = json.loads(out.stdout.strip().splitlines()[-1])
    assert reasons["solution"][0] == verdict.PASSED, reasons["solution"]
    assert reasons["unmasked store"][0] == verdict.BOUNDARY and "past column" in reasons["unmasked store"][1]
    assert reasons["bias by row"][0] == verdict.WRONG_RESULT, reasons["bias by row"]
    # the launcher's numpy answer is right; the kernel, launched alone with other tiles, is not
    assert reasons["numpy"][0] == verdict.HOST_SIDE and "the kernel must do the work" in reasons["numpy"][1]


# --- 21.1 one phase of a persistent kernel (grade/grid_phase.py) --------------------------------

# the reason each of 21.1's known-wrong students (tests/submissions.py) gets in-process, and what it is
# told; a slot read before the barrier is a race on a GPU, which the message there may name otherwise
GRID_PHASE = {
    "full_solutions": ({verdict.PASSED}, ""),
    "partials_before_barrier": ({verdict.WRONG_RESULT, verdict.RACE}, "was read before it was written"),
    "no_grid_barrier": ({verdict.FORBIDDEN}, "call grid_barrier(barrier)"),
    "atomic_norm": ({verdict.FORBIDDEN}, "use no atomics"),
    "norm_without_tail": ({verdict.BOUNDARY}, "(n + 255) / 256 chunks"),
    "grid_covers_the_data": ({verdict.WRONG_RESULT}, "at most one block per multiprocessor"),
    "off_by_one": ({verdict.BOUNDARY}, "wrote after the end"),
}


@pytest.mark.gpu
@pytest.mark.emulated
@pytest.mark.parametrize("student", list(GRID_PHASE))
def test_21_1_grid_phase_checks(student) -> None:
    """The solution passes on grids of 1 to every multiprocessor's block; each mistake fails for its reason."""
    from submissions import STUDENTS, apply

    from minitorch_cuda import emulator
    from minitorch_cuda.grade import source

    ex = exercises.get("21.1")
    edits = [e for e in STUDENTS[student].edits if e.notebook == ex.notebook]
    text = apply((ROOT / "solutions" / f"{ex.notebook}.md").read_text(), edits, student)
    cell = notebook.exercise_source(jupytext.reads(text, fmt="md:myst"), ex)
    result = checks.run_check("21.1", source.kernel_source(cell, ex), cell)
    reasons, told = GRID_PHASE[student]
    if student == "partials_before_barrier" and emulator.racecheck_selected():  # named before the poison shows
        reasons, told = {verdict.RACECHECK}, "data race (racecheck) on partials["
    assert result.reason in reasons, str(result)
    if student != "partials_before_barrier" or emulator.selected():
        assert told in result.message, str(result)


def test_21_1_grid_sizes() -> None:
    """The grids 21.1 is checked on. (A barrier or an atomic named only in a comment is neither called
    nor forbidden: the rules read the compiled kernel, tests/test_kernel_build.py.)"""
    from minitorch_cuda.grade import grid_phase

    assert grid_phase.grid_sizes(4) == [1, 2, 3, 4] and grid_phase.grid_sizes(132) == [1, 2, 3, 7, 132]


def test_21_1_chunks_are_the_launchers_blocks() -> None:
    """The statement's chunk of 256 elements is one per thread of the block launchers.floor launches."""
    from minitorch_cuda.cuda.kernel_table import PERSISTENT
    from minitorch_cuda.grade import grid_phase

    assert PERSISTENT["THREADS"] == grid_phase.CHUNK == 256
    statement = (ROOT / "solutions" / "21_latency_floor.md").read_text()
    assert "chunks of 256 elements" in statement and "256 threads a block" in statement
