"""Chapter 20's tile evaluation: references, interop, compare, sources, tables (CPU);
the CUDA C kernels through nvcc (where nvcc exists); the Triton kernels in
Triton's interpreter, on numpy arrays (where triton imports); the whole
benchmark on a GPU (``-m gpu``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_nvcc, needs_triton

import minitorch_cuda as mt
from minitorch_cuda.tile_eval import availability, cases, compare, cuda_c, diagnostics, report, sources
from minitorch_cuda.tile_eval.interop import TileArray

ROOT = Path(__file__).resolve().parents[1]
GPU = mt.cuda_available()


# --- references ---------------------------------------------------------------------


def test_fib_table_is_the_cub_function() -> None:
    assert list(cases.FIB_TABLE[:8]) == [0, 0, 1, 1, 2, 3, 5, 8]
    assert cases.fib_scalar(cases.MAX_FIB_N) == cases.FIB_TABLE[-1] == 165580141


def test_heavy_reference_pairs_closed_form() -> None:
    """The in-place third loop equals rev*r in the first half and rev*r*r in the second (the Triton form)."""
    data = cases.heavy_inputs(257, seed=5)
    for n_values in cases.HEAVY_NS:
        reg = np.empty((data.size, n_values), np.uint32)
        v = data.copy()
        reg[:, 0] = v
        with np.errstate(over="ignore"):
            for i in range(1, n_values):
                v = v * v + np.uint32(1)
                reg[:, i] = v
            reg = (reg * reg) % np.uint32(19)
            rev = reg[:, ::-1]
            half = np.arange(n_values) < n_values // 2
            closed = np.where(half, rev * reg, rev * reg * reg).sum(axis=1, dtype=np.uint32)
        np.testing.assert_array_equal(closed, cases.heavy_reference(data, n_values))


def test_bf16_inputs_as_bits_and_as_values_agree() -> None:
    pytest.importorskip("ml_dtypes")
    bits = cases.stream_inputs("triad", "bf16", 1000, seed=3, bits=True)
    values = cases.stream_inputs("triad", "bf16", 1000, seed=3)
    for b, v in zip(bits, values):
        assert b.dtype == np.uint16
        np.testing.assert_array_equal(b, v.view(np.uint16))


def test_throughput_cases_cover_the_issue() -> None:
    specs = cases.throughput_cases()
    assert {s["case"] for s in specs} == {*cases.STREAMS, "fib", "heavy8", "heavy16", "heavy32", "heavy64"}
    assert {s["log2"] for s in specs} == {16, 20, 24, 28}
    assert len(specs) == 5 * 6 * 4 + 4 + 4 * 4


# --- compare, interop, availability, sources ----------------------------------------------


def test_ulp_distance() -> None:
    a = np.float32([1.0, -2.0, 0.0])
    b = np.nextafter(np.nextafter(a, np.float32(9)), np.float32(9))
    d = compare.differences(b, a, "fp32")
    assert d["max_ulp"] == 2 and d["differing"] == 3 and not d["bitwise_equal"]
    assert compare.differences(np.float32([-0.0]), np.float32([0.0]), "fp32")["max_ulp"] == 0
    nan = np.float64([np.nan, 1.0])
    assert compare.differences(nan, nan.copy(), "fp64")["bitwise_equal"]
    assert compare.differences(np.int8([5, -3]), np.int8([5, 4]), "int8")["max_abs_diff"] == 7
    assert compare.differences(np.uint16([0x7FC0]), np.uint16([0x7FC1]), "bf16")["nan_mismatch"] == 0


@pytest.mark.parametrize("log2", [16, 20])
def test_two_fp16_roundings_reproduce_cupys_recorded_differences(log2) -> None:
    """CuPy's fp16 nstream differs from CUDA C's on the H200; emulating CUDA C as an fp16 add
    then a fused multiply-add, and CuPy as float32 rounded once, gives the same comparison."""
    from minitorch_cuda import results
    from minitorch_cuda.tile_eval.measure import CHECKED_PREFIX

    recorded = results.load("tile_eval")
    assert recorded is not None, "book/results/tile_eval.json is missing"
    row = next(
        r
        for r in recorded["throughput"]
        if (r["case"], r["dtype"], r["model"], r["log2"]) == ("nstream", "fp16", "cupy", log2)
    )
    assert compare.fp16_nstream_roundings(1 << log2, CHECKED_PREFIX) == row["correctness"]
    unfused = compare.fp16_nstream_roundings(1 << log2, CHECKED_PREFIX, contracted=False)
    assert unfused["differing"] != row["correctness"]["differing"], "the comparison must tell the two apart"


def test_tile_array_exposes_the_same_pointer() -> None:
    t = TileArray(0x7F0000001000, (1024,), "fp16")
    cai = t.__cuda_array_interface__
    assert cai["data"] == (0x7F0000001000, False) and cai["shape"] == (1024,) and cai["typestr"] == "<f2"
    assert t.data_ptr() == t.ptr and str(t.dtype) == "float16" and t.nbytes == 2048
    with pytest.raises(TypeError, match="bf16"):
        TileArray(0x1000, (4,), "bf16").__cuda_array_interface__  # noqa: B018


def test_tile_array_from_device_array_without_copy() -> None:
    class FakeDeviceArray:  # the part of minitorch_cuda.cuda.array.DeviceArray that is used
        ptr, shape = 0xABC000, (3, 4)

        def is_contiguous(self) -> bool:
            return True

    t = TileArray.from_device_array(FakeDeviceArray())
    assert t.ptr == 0xABC000 and t.shape == (3, 4) and t.strides == (4, 1) and str(t.dtype) == "float32"


def test_cutile_reasons() -> None:
    h200 = availability.cutile_reason(None, False, (13, 0), (9, 0))
    assert "CUDA >= 13.1" in h200 and "CUDA 13.0" in h200 and "compute capability 9.0" in h200
    assert availability.cutile_reason(None, False, (13, 1), (12, 0)) is None
    assert "does not import" in availability.cutile_reason("ModuleNotFoundError: cuda", True, None, None)
    assert all(v is None or isinstance(v, str) for v in availability.report().values())


def test_sources_are_read_from_the_package() -> None:
    assert "tl.where" in sources.python_function("triton", "fib_unrolled_kernel")
    assert "ct.where" in sources.python_function("cutile", "fib_kernel")
    assert "heavy_##N" in sources.cuda_block(r"^#define INSTANTIATE_HEAVY")
    counts = sources.lines_per_kernel()
    assert set(counts) == {"triad", "fib", "heavy"}
    assert all(v > 0 for per in counts.values() for v in per.values())
    assert sources.code_lines('def f():\n    """doc"""\n    # c\n\n    return 1\n') == 2


def test_report_tables_from_a_synthetic_result() -> None:
    row = {"case": "triad", "dtype": "fp32", "log2": 24, "median_ms": 1.0, "q1_ms": 0.9, "q3_ms": 1.1}
    data = {
        "device": {"name": "Test GPU", "compute_capability": [9, 0]},
        "available": {"cuda_c": None, "cutile": "no"},
        "throughput": [
            dict(
                row,
                model="cuda_c",
                gelems=16.7,
                fraction_of_copy=0.9,
                matches_numpy=None,
                correctness={"bitwise_equal": True},
            ),
            dict(
                row,
                model="triton",
                gelems=15.0,
                ratio_to_cuda_c=0.9,
                fraction_of_copy=0.8,
                correctness={"bitwise_equal": False, "max_ulp": 1},
            ),
        ],
        "launch_overhead": {"cuda_c": {"enqueue_us": 3.0, "until_done_us": 4.0}},
    }
    assert "0.90x" in report.ratio_table(data, ["triad"], 24)
    assert "90%" in report.copy_fraction_table(data, 24)
    assert "bitwise equal in 0/1" in report.correctness_summary(data)
    assert "Test GPU" in report.where(data) and "enqueue" in report.overhead_text(data)


# --- CUDA C through nvcc ----------------------------------------------------------------


@needs_nvcc
def test_cuda_c_kernels_compile_for_sm90() -> None:
    cubin, _ = cuda_c.nvcc_compile(cuda_c.module_source())
    assert len(cubin) > 10_000


@needs_nvcc
def test_cuda_c_heavy_keeps_its_array_in_registers() -> None:
    from minitorch_cuda.tile_eval import codegen

    ptx, _ = cuda_c.nvcc_compile(cuda_c.module_source(["heavy_64"]), target="ptx")
    counts = codegen.count(ptx.decode(), codegen.PTX_PATTERNS)
    assert counts["ld.local"] == counts["st.local"] == counts["malloc"] == 0


def test_sass_counts_go_past_4096_instructions() -> None:
    """cuobjdump's addresses get a fifth hex digit at instruction 4096 (Triton's heavy64 has far more)."""
    from minitorch_cuda.tile_eval import codegen

    lines = [f"        /*{16 * i:04x}*/   @P0 SEL R1, R2, R3, P0 ;" for i in range(5000)]
    sass = "\n".join(lines)
    assert codegen.instruction_count(sass) == 5000
    assert codegen.count(sass, codegen.SASS_PATTERNS)["predicated"] == 5000


@needs_nvcc
def test_cuda_c_diagnostic_names_the_identifier() -> None:
    assert 'identifier "bb" is undefined' in diagnostics.cuda_c_undefined_name()


# --- Triton in its interpreter (CPU) ------------------------------------------------------
# The interpreter must be chosen before triton is first imported, so the kernels
# run in a separate process (minitorch_cuda.tile_eval.interpret), once per session.

INTERPRETER_CHECKS = (
    [f"stream-{op}-{dt}" for op in cases.STREAMS for dt in cases.STREAM_DTYPES if dt != "bf16" or op == "copy"]
    + ["fib-unrolled", "fib-tilemax"]
    + [f"heavy-{n}" for n in cases.HEAVY_NS]
    + ["diagnostic-undefined-name", "diagnostic-tile-size"]
)


@pytest.fixture(scope="module")
def interpreter_results() -> dict:
    from minitorch_cuda.tile_eval import interpret

    return {r["check"]: r for r in interpret.results()}


@needs_triton
@pytest.mark.parametrize("check", INTERPRETER_CHECKS)
def test_triton_kernel_in_the_interpreter(interpreter_results, check) -> None:
    assert check in interpreter_results, f"{check} did not run"
    assert interpreter_results[check]["ok"], interpreter_results[check]["problem"]


def test_bf16_arithmetic_is_left_to_the_gpu() -> None:
    """Recorded on purpose: Triton's interpreter gets bf16 arithmetic wrong, so only bf16 copy runs there."""
    from minitorch_cuda.tile_eval import interpret

    assert interpret.BF16_OPS == ("copy",)


# --- the benchmark -------------------------------------------------------------------------


@pytest.mark.skipif(GPU, reason="checks the message given where there is no GPU")
def test_benchmark_fails_fast_without_a_gpu(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "minitorch_cuda.tile_eval", "--json", str(tmp_path / "t.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr
    assert not (tmp_path / "t.json").exists()


@pytest.mark.skipif(GPU, reason="checks the error path of a machine without a GPU")
def test_compile_probe_reports_its_child_failing() -> None:
    """The child that compiles heavy64 beside the run: its failure becomes the row's error."""
    from minitorch_cuda.tile_eval import rows

    row = rows.CompileProbe("heavy_64").row(timeout_s=120)
    assert "exited with 2" in row["error"] and "needs a CUDA GPU" in row["error"], row


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason=f"needs a GPU: {mt.cuda_unavailable_reason()}")
def test_benchmark_small_run(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["MINITORCH_CUDA_RESULTS_DIR"] = str(tmp_path / "results")
    path = tmp_path / "t.json"
    done = subprocess.run(
        # Triton's heavy64 takes minutes to compile (206 s on the H200): the recorded run covers it
        [sys.executable, "-m", "minitorch_cuda.tile_eval", "--json", str(path), "--sizes", "16", "--repeats", "3"]
        + ["--cases", "copy,triad,nstream,fib,heavy8"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(path.read_text())
    rows = [r for r in data["throughput"] if r["model"] == "cuda_c"]
    assert rows and all("error" not in r for r in rows)
    assert all(r["matches_numpy"] is not False for r in rows)
    nstream_ints = [r for r in rows if r["case"] == "nstream" and r["dtype"] in ("int8", "int64")]
    assert nstream_ints and all(r["matches_numpy"] is True for r in nstream_ints)  # a updated in place
    overhead = data["launch_overhead"]
    assert "cuda_c" in overhead and all("error" not in o for o in overhead.values()), overhead
    ints = [r for r in data["throughput"] if r["dtype"] in ("int8", "int64", "uint32") and "correctness" in r]
    assert all(r["correctness"]["bitwise_equal"] for r in ints), [
        r for r in ints if not r["correctness"]["bitwise_equal"]
    ]


def test_launch_overhead_launches_every_model_on_the_same_arrays(monkeypatch) -> None:
    """Each model copies a 1,024-element array (the row once passed its result dict instead)."""
    from minitorch_cuda.tile_eval import rows, timing

    calls = []

    class Model:
        def stream(self, *args):
            calls.append(args)

    addresses = iter(range(0x1000, 0x10000, 0x1000))
    monkeypatch.setattr(rows, "_device_array", lambda values, dtype: TileArray(next(addresses), values.shape, dtype))
    monkeypatch.setattr(timing, "launch_overhead", lambda launch: launch() or {"enqueue_us": 1.0})
    overhead = rows.launch_overhead({"cuda_c": Model(), "triton": Model()})
    assert overhead == {"cuda_c": {"enqueue_us": 1.0}, "triton": {"enqueue_us": 1.0}}
    (_, _, out_c, ins_c, _), (_, out_t, ins_t, _) = calls
    assert isinstance(out_c, TileArray) and out_c is out_t and ins_c == ins_t and out_c is not ins_c[0]


@functools.cache
def _stream_model(dtype: str) -> cuda_c.CudaModel:
    return cuda_c.CudaModel([f"{op}_{dtype}" for op in cases.STREAMS])


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason=f"needs a GPU: {mt.cuda_unavailable_reason()}")
@pytest.mark.parametrize("dtype", ["int8", "fp16", "fp32", "int64"])
@pytest.mark.parametrize("n", [1, 15, 1000, 4099])
@pytest.mark.parametrize("misaligned", [False, True])
def test_cuda_c_streams_at_awkward_sizes_and_offsets(dtype, n, misaligned) -> None:
    """The 16-byte packs, the scalar tail and the all-scalar path (a pointer off by one element)."""
    import pycuda.driver as drv

    model = _stream_model(dtype)
    host = cases.stream_inputs("nstream", dtype, n, seed=n)
    itemsize = cases.DTYPES[dtype].itemsize
    shift = itemsize if misaligned else 0
    owners, arrays = [], []
    for values in [np.zeros(n, host[0].dtype), *host]:
        owner = drv.mem_alloc(values.nbytes + 16)
        owners.append(owner)
        drv.memcpy_htod(int(owner) + shift, values)
        arrays.append(TileArray(int(owner) + shift, (n,), dtype, owner=owner))
    for name, op in cases.STREAMS.items():
        out = arrays[1] if op.in_place else arrays[0]
        drv.memcpy_htod(arrays[1].ptr, host[0])  # nstream overwrote a
        model.stream(name, dtype, out, arrays[1 : 1 + op.inputs], cases.scalar_for(dtype))
        got = np.empty(n, host[0].dtype)
        drv.memcpy_dtoh(got, out.ptr)
        want = op.reference(cases.scalar_for(dtype), *[h.copy() for h in host[: op.inputs]])
        if cases.DTYPES[dtype].is_float:
            tol = 2e-3 if dtype == "fp16" else 1e-6  # an FMA rounds once where numpy rounds twice
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    for owner in owners:
        owner.free()


# --- Exercise 20.1 -------------------------------------------------------------------------


def test_exercise_20_1_solution_and_mistakes() -> None:
    import jupytext

    from minitorch_cuda.grade import checks, exercises, notebook, verdict

    ex = exercises.get("20.1")
    source = notebook.exercise_source(jupytext.read(ROOT / "solutions" / f"{ex.notebook}.md"), ex)
    namespace = {"np": np, "mt": mt}
    exec(source, namespace)
    assert checks.run_check("20.1", namespace["fib_tile"], source).passed

    def per_element(n):
        return np.array([cases.fib_scalar(int(v)) for v in n.ravel()]).reshape(n.shape)

    looped = "def per_element(n):\n    return [f(v) for v in n]\n"
    assert checks.run_check("20.1", per_element, looped).reason == verdict.FORBIDDEN

    def off_by_one(n):
        t1, t2 = np.zeros_like(n), np.ones_like(n)
        for k in range(3, cases.MAX_FIB_N + 1):
            more = n > k
            t1, t2 = np.where(more, t2, t1), np.where(more, t1 + t2, t2)
        return np.where(n == 2, 1, np.where(n < 2, 0, t2))

    result = checks.run_check("20.1", off_by_one)
    assert result.reason == verdict.WRONG_RESULT and result.details


# --- the chapter renders a recorded run (synthetic, shaped like bench.run's output) ----------


def fake_result() -> dict:
    rows = []
    for spec in cases.throughput_cases():
        models = ["cuda_c", "triton"] + (["triton_tilemax"] if spec["case"] == "fib" else [])
        models += ["cupy"] if spec["dtype"] != "bf16" and not spec["case"].startswith("heavy") else []
        for i, model in enumerate(models):
            t = 1.0 + 0.1 * i
            rows.append(
                dict(
                    spec,
                    model=model,
                    n=1 << spec["log2"],
                    median_ms=t,
                    q1_ms=t * 0.95,
                    q3_ms=t * 1.05,
                    min_ms=t * 0.9,
                    max_ms=t * 1.1,
                    gelems=1.0 / t,
                    ratio_to_cuda_c=1.0 / t,
                    fraction_of_copy=0.9 / t,
                    matches_numpy=True if model == "cuda_c" else None,
                    correctness={"bitwise_equal": i != 1, "differing": 0, "max_ulp": 1},
                )
            )
    rows[1] = dict(rows[1], error="RuntimeError: a failed launch")
    rows[1].pop("gelems")
    evidence = {
        "cold_s": 1.0,
        "warm_s": 0.01,
        "cubin_bytes": 9000,
        "registers": 32,
        "local_bytes": 0,
        "ptx": {"ld.local": 0, "selp": 3},
        "ptx_examples": ["selp.b64 %rd1, %rd2, %rd3, %p1;"],
    }
    return {
        "device": {"name": "Fake H200", "compute_capability": [9, 0], "l2_cache_bytes": 60 << 20},
        "available": {"cuda_c": None, "triton": None, "cutile": "cuTile Python cannot run here", "cupy": None},
        "sizes_log2": list(cases.SIZES_LOG2),
        "throughput": rows,
        "compile": {
            "cuda_c": {k: evidence for k in ["triad_fp32", "fib", "heavy_8", "heavy_64"]},
            "triton": {"fib": evidence, "fib_tilemax": {"error": "CompilationError: x"}},
            "cupy": {"error": "ImportError: no"},
        },
        "launch_overhead": {"cuda_c": {"enqueue_us": 3.0, "until_done_us": 4.0}, "triton": {"error": "x"}},
        "tuning": {
            "triton": {
                "triad_fp32": {
                    "n": 1,
                    "rows": [
                        {"block": 256, "num_warps": 4, "gelems": 1.0},
                        {"block": 512, "num_warps": 4, "gelems": 2.0},
                    ],
                }
            }
        },
        "diagnostics": {"undefined_name": {"cuda_c": "error: bb", "triton": "NameError: bb"}},
        "ncu": {"error": "ncu is not on PATH"},
    }


def test_report_handles_every_section() -> None:
    data = fake_result()
    for text in (
        report.ratio_table(data, list(cases.STREAMS), 28),
        report.scaling_table(data, "fib"),
        report.compile_table(data),
        report.evidence_text(data, "fib"),
        report.overhead_text(data),
        report.tuning_text(data),
        report.diagnostics_text(data),
        report.ncu_text(data),
        report.correctness_summary(data),
        report.copy_fraction_table(data, 16),
    ):
        assert isinstance(text, str) and text
    assert "2.00x apart" in report.tuning_text(data)


@pytest.mark.notebooks
def test_chapter_renders_a_recorded_result(tmp_path) -> None:
    import jupytext
    import nbclient

    (tmp_path / "tile_eval.json").write_text(json.dumps(fake_result()))
    nb = jupytext.read(ROOT / "chapters" / "20_tile_programming.md")
    nb.cells = [c for c in nb.cells if "gpu" not in c.metadata.get("tags", [])]
    env = {"MINITORCH_CUDA_RESULTS_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "chapters")}}
        ).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "Fake H200" in text and "not recorded yet" not in text


def test_the_chapters_numbers_from_a_synthetic_result() -> None:
    from minitorch_cuda.tile_eval import findings

    def row(case, dtype, model, log2, ratio, fraction=0.9):
        return {"case": case, "dtype": dtype, "model": model, "log2": log2, "ratio_to_cuda_c": ratio,
                "fraction_of_copy": fraction}  # fmt: skip

    ratios = {("copy", "int8"): 0.5, ("triad", "fp32"): 0.95, ("add", "fp64"): 1.08, ("scale", "fp16"): 1.2}
    throughput = [
        row(c, d, "triton", log2, r * (1 if log2 == 28 else 0.5)) for (c, d), r in ratios.items() for log2 in (24, 28)
    ]
    throughput += [row(c, d, "cupy", 28, 0.7) for c, d in ratios] + [
        row("copy", dt, "cupy", 28, 0.3) for dt in ("fp64", "fp32", "fp16")
    ]
    throughput += [row("add", "fp64", "cuda_c", 28, 1.0, fraction=1.2)]
    found = findings.streams({"sizes_log2": [24, 28], "throughput": throughput})
    # within the band: 0.95 and 1.08 (not 1.2, not 0.5); the exceptions from lowest to highest
    assert (found["streams_close"], found["streams_total"]) == (2, 4)
    assert (found["streams_lo_case"], found["streams_hi_case"]) == ("fp32 triad", "fp64 add")
    assert found["stream_exceptions"] == "int8 copy 0.50x and fp16 scale 1.20x"
    assert found["multi_array_copy_max"] == 1.2 and found["triton_median_24"] == pytest.approx(0.5 * (0.95 + 1.08) / 2)
    assert (
        findings._level(1.05) == "ties" and findings._level(0.5) == "is slower" and findings._level(1.5) == "is faster"
    )


def test_the_chapters_numbers_from_the_recorded_run() -> None:
    """Chapter 20 pastes these; each checked against the record read independently."""
    from minitorch_cuda import results
    from minitorch_cuda.tile_eval import findings

    data = results.load("tile_eval")
    found = findings.numbers(data)
    triton = {(r["case"], r["dtype"], r["log2"]): r for r in data["throughput"] if r["model"] == "triton"}
    assert found["heavy64_ratio"] == triton[("heavy64", "uint32", 28)]["ratio_to_cuda_c"]
    assert found["launch_triton_us"] == data["launch_overhead"]["triton"]["enqueue_us"]
    assert (
        found["triton_equal"] <= found["triton_cases"] == sum(1 for r in data["throughput"] if r["model"] == "triton")
    )
    # the SEL counts in the order of HEAVY_NS, as the prose lists them
    assert found["heavy_sel"].replace(",", "").replace(" and", "").split() == [
        str(data["compile"]["triton"][f"heavy_{n}"]["sass"]["SEL"]) for n in cases.HEAVY_NS
    ]


def test_the_chapters_numbers_skip_what_a_partial_run_lacks() -> None:
    """A run whose sections failed (fake_result: a failed row and launch, Triton compiles missing or
    failed) gives the numbers it has and no error, so that the chapter still runs on it."""
    from minitorch_cuda.tile_eval import findings

    found = findings.numbers(fake_result())
    assert found["streams_total"] > 0 and found["launch_cuda_c_us"] == 3.0  # what the run has
    assert "launch_triton_us" not in found  # its launch failed
    assert "heavy_sel" not in found and "cuda_c_module_s" not in found  # sections it lacks
