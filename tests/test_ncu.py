"""The Nsight Compute experiment without a GPU: the parsing of CSV and SASS (ncu_counters),
the records it writes, fed recorded-looking ncu output through a fake command runner (ncu),
the chapters' views of them (book/ncu_records) and its workloads on the emulator (ncu_workloads)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import needs_gxx

from minitorch_cuda import results
from minitorch_cuda.book import ncu_records
from minitorch_cuda.experiments import ncu, ncu_workloads
from minitorch_cuda.experiments import ncu_counters as counters

HEAD = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)


def long_row(i: int, kernel: str, metric: str, unit: str, value: str, grid: str = "(165375, 1, 1)") -> str:
    return (
        f'"{i}","4940","python3.12","127.0.0.1","{kernel}","1","7","(256, 1, 1)","{grid}","0","9.0",'
        f'"Command line profiler metrics","{metric}","{unit}","{value}"'
    )


LD_SECTORS, LD_REQUESTS = counters.SECTORS[0], counters.SECTORS[1]
CH07_CSV = "\n".join(
    [
        "==PROF== Connected to process 4940 (/usr/bin/python3.12)",
        '==PROF== Profiling "gather_rows" - 0: 0%....50%....100% - 9 passes',
        HEAD,
        long_row(0, "gather_rows", "gpu__time_duration.sum", "ns", "45,408"),
        long_row(0, "gather_rows", LD_SECTORS, "sector", "1,310,720"),
        long_row(0, "gather_rows", LD_REQUESTS, "request", "401,408"),
        long_row(0, "gather_rows", "dram__bytes_read.sum", "byte", "26,345,472"),
        long_row(1, "strided_copy", "gpu__time_duration.sum", "ns", "120,000"),
        long_row(1, "strided_copy", LD_SECTORS, "sector", "6,422,528"),
        long_row(1, "strided_copy", LD_REQUESTS, "request", "200,704"),
        long_row(1, "strided_copy", "dram__bytes_read.sum", "byte", "n/a"),
        "==PROF== Disconnected from process 4940",
    ]
)


def test_number_reads_separators_units_and_gaps() -> None:
    assert counters.number("45,408", "ns") == 45408
    assert counters.number("83.61", "%") == pytest.approx(83.61)
    assert counters.number("n/a") is None
    assert counters.number("1.5", "Mbyte") == 1_500_000  # scaled to base units where ncu chose a prefix
    assert counters.number("2", "usecond") == 2000
    assert counters.number("(256, 1, 1)") == "(256, 1, 1)"


def test_parse_csv_long_format_keeps_launches_in_order() -> None:
    launches = counters.parse_csv(CH07_CSV)
    assert [(x["id"], x["kernel"]) for x in launches] == [(0, "gather_rows"), (1, "strided_copy")]
    gather = launches[0]
    assert gather["metrics"]["gpu__time_duration.sum"] == 45408
    assert gather["units"][LD_SECTORS] == "sector"
    assert gather["grid"] == "(165375, 1, 1)" and gather["block"] == "(256, 1, 1)"
    assert launches[1]["metrics"]["dram__bytes_read.sum"] is None


def test_parse_csv_wide_format_with_a_units_row() -> None:
    text = "\n".join(
        [
            '"ID","Kernel Name","Block Size","Grid Size","dram__bytes_read.sum","lts__t_sector_hit_rate.pct"',
            '"","","","","Mbyte","%"',
            '"0","softmax_rows_online","(256, 1, 1)","(8192, 1, 1)","536.87","12.5"',
        ]
    )
    (launch,) = counters.parse_csv(text)
    assert launch["kernel"] == "softmax_rows_online"
    assert launch["metrics"]["dram__bytes_read.sum"] == pytest.approx(536.87e6)
    assert launch["metrics"]["lts__t_sector_hit_rate.pct"] == pytest.approx(12.5)


def test_parse_csv_without_csv_lines_is_empty() -> None:
    assert counters.parse_csv("==ERROR== Failed to find metric sm__nonsense.sum\n") == []


def test_by_kernel_keeps_the_last_launch_and_derives_ratios() -> None:
    launches = counters.parse_csv(CH07_CSV + "\n" + long_row(2, "gather_rows", LD_SECTORS, "sector", "800"))
    kernels = counters.by_kernel(launches, ncu.DERIVED_FOR["ch07"])
    assert kernels["gather_rows"]["id"] == 2 and kernels["gather_rows"]["launches_profiled"] == 2
    assert kernels["strided_copy"]["derived"]["sectors_per_request_ld"] == pytest.approx(32.0)
    assert "sectors_per_request_ld" not in kernels["gather_rows"]["derived"]  # no requests in launch 2


def test_wavefronts_per_ffma_counts_warp_instructions() -> None:
    metrics = {counters.SHARED[1]: 2 * 1024, counters.FMA[0]: 32 * 1024}  # two wavefronts per warp FFMA
    assert counters.derive(metrics, ("shared_ld_wavefronts_per_warp_ffma",)) == {
        "shared_ld_wavefronts_per_warp_ffma": pytest.approx(2.0)
    }


def test_usable_drops_names_the_listing_does_not_offer() -> None:
    offered = counters.offered_metrics(
        "Device NVIDIA H200 (GH100)\n"
        "Metric Name                           Metric Description\n"
        "dram__bytes_read                      # of bytes read from DRAM\n"
        "sm__pipe_tensor_op_hmma_cycles_active # of cycles where HMMA pipe was active\n"
    )
    assert offered == {"dram__bytes_read", "sm__pipe_tensor_op_hmma_cycles_active"}
    wanted = (
        "dram__bytes_read.sum",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "launch__grid_size",  # a unit the listing never names is kept
    )
    kept, dropped = counters.usable(wanted, offered)
    assert dropped == ["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]
    assert kept == [wanted[0], wanted[1], wanted[3]]
    assert counters.usable(wanted, None) == (list(wanted), [])


def test_rejected_finds_the_metric_an_error_names() -> None:
    out = "==ERROR== Failed to find metric sm__nonsense.sum\n"
    assert counters.rejected(out, ["dram__bytes_read.sum", "sm__nonsense.sum"]) == ["sm__nonsense.sum"]


SASS = """
        code for sm_90
                Function : matmul_batched
        .headerflags    @"EF_CUDA_TEXMODE_UNIFIED"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                         /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                             /* 0x0000000000007919 */
.L_x_1:
        /*0020*/                   LDG.E R4, desc[UR4][R2.64] ;                   /* 0x0000000402047981 */
        /*0030*/                   LDG.E R5, desc[UR4][R6.64] ;                   /* 0x0000000406057981 */
        /*0040*/                   IMAD.WIDE R2, R9, 0x4, R2 ;                    /* 0x0000000409027825 */
        /*0050*/                   FFMA R8, R4, R5, R8 ;                          /* 0x0000000504087223 */
        /*0060*/              @P0 BRA `(.L_x_1) ;                                 /* 0xfffffffc00e00947 */
        /*0070*/                   EXIT ;                                         /* 0x000000000000794d */
                Function : matmul_transposed
        /*0000*/                   S2R R0, SR_TID.X ;                             /* 0x0000000000007919 */
        /*0010*/                   LDG.E R4, desc[UR4][R2.64] ;                   /* 0x0000000402047981 */
        /*0020*/                   FFMA R8, R4, R4, R8 ;                          /* 0x0000000504087223 */
        /*0030*/              @!P1 BRA 0x10 ;                                     /* 0xfffffffc00e00947 */
        /*0040*/                   EXIT ;                                         /* 0x000000000000794d */
"""


def test_sass_summary_finds_the_inner_loop_by_label_or_address() -> None:
    functions = counters.sass_functions(SASS)
    batched = counters.sass_summary(functions["matmul_batched"])
    assert batched["instructions"] == 8
    assert batched["inner_loop"]["instructions"] == 5
    assert batched["inner_loop"]["opcodes"] == {"LDG": 2, "BRA": 1, "FFMA": 1, "IMAD": 1}
    assert batched["inner_loop"]["instructions_per_ffma"] == pytest.approx(5.0)
    transposed = counters.sass_summary(functions["matmul_transposed"])
    assert transposed["inner_loop"]["instructions"] == 3
    assert counters.resource_usage("Function matmul_batched:\nREG:40 STACK:0 SHARED:0 LOCAL:0\n") == {
        "matmul_batched": {"REG": 40, "STACK": 0, "SHARED": 0, "LOCAL": 0}
    }


class FakeMachine:
    """Answers the commands ncu.main runs: nvidia-smi, ncu (query, version, profile), nvcc, cuobjdump."""

    def __init__(self, fail_workloads=()):
        self.fail_workloads = set(fail_workloads)
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], timeout: float):
        self.calls.append(cmd)
        assert timeout > 0
        tool = cmd[0]
        if tool == "nvidia-smi":
            return 0, ("9.0\n" if "--query-gpu=compute_cap" in cmd else "NVIDIA H200, 580.0\n"), ""
        if tool == "nvcc":
            return 0, "", ""
        if tool == "cuobjdump":
            return 0, (SASS if "-sass" in cmd else "Function matmul_batched:\nREG:40 SHARED:0\n"), ""
        if "--query-metrics" in cmd:
            return 0, "dram__bytes_read   # bytes\n", ""
        if "--version" in cmd:
            return 0, "NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.0.0 (build 1)\n", ""
        workload = cmd[cmd.index("--workload") + 1]
        if workload in self.fail_workloads:
            raise RuntimeError(f"the fake machine refuses {workload}")
        assert "--clock-control" in cmd and cmd[cmd.index("--clock-control") + 1] == "none"
        assert cmd[cmd.index("--launch-skip") + 1] != "0" or "--profile-from-start" in cmd
        return 0, CH07_CSV, ""


@pytest.fixture
def machine(tmp_path, monkeypatch):
    monkeypatch.setattr(ncu, "tool", lambda name: name)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "unused")
    return FakeMachine(fail_workloads={"ch11"})


def test_main_records_every_topic_and_isolates_a_failure(machine, tmp_path) -> None:
    out = tmp_path / "results"
    assert ncu.main(["--out", str(out), "ch07", "ch10", "ch11"], runner=machine) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ncu_ch07.json", "ncu_ch10.json", "ncu_ch11.json"]

    ch07 = json.loads((out / "ncu_ch07.json").read_text())
    assert ch07["command"].startswith("python -m minitorch_cuda.experiments.ncu --out")
    assert ch07["gpu"] == "NVIDIA H200, 580.0" and ch07["ncu_version"].startswith("Version 2025.3")
    assert ch07["metrics_checked_against_query"] is True
    (run,) = ch07["runs"]
    assert run["variant"] == "gather vs strided" and "error" not in run
    assert run["ncu_command"][0] == "ncu" and "--metrics" in run["ncu_command"]
    assert run["kernels"]["strided_copy"]["derived"]["sectors_per_request_ld"] == pytest.approx(32.0)
    assert set(run["kernels"]["gather_rows"]) >= {"grid", "block", "metrics", "units", "derived"}

    ch10 = json.loads((out / "ncu_ch10.json").read_text())
    assert ch10["sass"]["arch"] == "sm_90"
    assert ch10["sass"]["kernels"]["matmul_batched"]["inner_loop"]["ffma"] == 1
    assert ch10["sass"]["kernels"]["matmul_batched"]["resources"]["REG"] == 40

    ch11 = json.loads((out / "ncu_ch11.json").read_text())  # its workload failed: recorded, not raised
    assert "refuses ch11" in ch11["error"]


def test_main_rejects_unknown_topics(machine, tmp_path) -> None:
    with pytest.raises(SystemExit):
        ncu.main(["--out", str(tmp_path), "ch99"], runner=machine)


def test_a_topic_past_the_budget_is_recorded_as_skipped(machine, tmp_path) -> None:
    ncu.main(["--out", str(tmp_path), "--budget", "-1", "ch15"], runner=machine)
    assert "time budget" in json.loads((tmp_path / "ncu_ch15.json").read_text())["error"]


def test_every_topic_names_a_workload_or_sass_and_launches_nothing_unskipped() -> None:
    for name, topic in ncu.TOPICS.items():
        assert topic.runs or topic.sass, name
        for run in topic.runs:
            assert run.workload in ncu_workloads.WORKLOADS, (name, run.workload)
            assert (run.skip == 0 if run.ranged else run.skip >= 1) and run.count >= 1
            assert run.kernels.startswith("regex:")


def test_chapter_views_show_a_record_or_say_it_is_pending(machine, tmp_path) -> None:
    ncu.main(["--out", str(tmp_path), "ch07", "ch10"], runner=machine)
    ch07 = json.loads((tmp_path / "ncu_ch07.json").read_text())
    text = ncu_records.shown(
        "ch07",
        [
            ("ld sectors/req", "sectors_per_request_ld", 1, "{:.1f}"),
            ("DRAM MB", "dram__bytes_read.sum", 1e-6, "{:.1f}"),
        ],
        ch07,
    )
    assert "[gather vs strided]" in text and "32.0" in text and "26.3" in text
    assert text.splitlines()[-1].rstrip().endswith("-")  # strided_copy's n/a DRAM bytes
    assert ncu_records.kernel_names("ch07", ch07) == ["gather_rows", "strided_copy"]
    sass = ncu_records.shown_sass("ch10", json.loads((tmp_path / "ncu_ch10.json").read_text()))
    assert "matmul_batched: 8 instructions, 40 registers; inner loop 5 instructions for 1 FFMA" in sass
    monkey_dir = tmp_path / "empty"
    monkey_dir.mkdir()
    results.RESULTS_DIR = monkey_dir  # the fixture restores it
    assert ncu_records.shown("ch11", []).startswith("Nsight Compute measurement pending: book/results/ncu_ch11.json")
    assert ncu_records.shown_sass().startswith("SASS comparison pending")
    assert len(ncu_records.shown("ch11", []).splitlines()) == 1


def test_a_kernel_profiled_at_two_shapes_is_kept_once_per_grid() -> None:
    text = "\n".join(
        [
            HEAD,
            long_row(0, "matmul_tiled", "gpu__time_duration.sum", "ns", "5,000", grid="(2, 2, 1)"),
            long_row(1, "matmul_tiled", "gpu__time_duration.sum", "ns", "9,000", grid="(8, 2, 1)"),
        ]
    )
    kernels = counters.by_kernel(counters.parse_csv(text))
    assert sorted(kernels) == ["matmul_tiled", "matmul_tiled @ (8, 2, 1)"]
    assert kernels["matmul_tiled @ (8, 2, 1)"]["metrics"]["gpu__time_duration.sum"] == 9000


WORKLOAD_CHECK = """
import numpy as np
from minitorch_cuda.experiments import ncu_workloads
ncu_workloads.SIZES.update(gather=(40, 37), sumsq=3000, sum_rows=(7, 64), matmul=128, softmax=96)
for name in ("ch07", "ch11", "ch13", "ch14_ours", "ch15", "ch14_small_ours"):
    ncu_workloads.WORKLOADS[name]()
launchers, ops, runtime, DeviceArray = ncu_workloads._device()
h = np.random.default_rng(0).standard_normal((40, 37)).astype(np.float32)
x, out_t = ops.from_numpy(h), DeviceArray.empty((37, 40))
launchers.elementwise("strided_copy", 40 * 37, out_t, x, 40 * 37, 1, 37, 40, 0, 0, 1, 37)  # as workload_ch07
assert np.array_equal(ops.to_numpy(out_t), h.T)
print("workloads ok")
"""


@needs_gxx
def test_the_workloads_launch_on_the_emulator() -> None:
    """Every SIMT workload at small sizes on the CPU emulator (tensor-core ones need a GPU):
    the launch arguments are right, and strided_copy's make the transpose ch07 claims."""
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1"}
    done = subprocess.run([sys.executable, "-c", WORKLOAD_CHECK], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and "workloads ok" in done.stdout, done.stderr[-3000:]


NEW_RUNS = [(name, run) for name in ("ch16_pipelined", "ch21", "ch16_cluster") for run in ncu.TOPICS[name].runs]


@pytest.mark.parametrize(("topic", "run"), NEW_RUNS, ids=[f"{t}: {r.variant}" for t, r in NEW_RUNS])
def test_the_new_topics_build_valid_ncu_command_lines(topic, run) -> None:
    cmd = ncu.ncu_command("ncu", run, counters.usable(run.metrics, None)[0])
    child = cmd.index(sys.executable)
    assert cmd[child:] == [sys.executable, "-m", "minitorch_cuda.experiments.ncu", "--workload", run.workload]
    assert run.workload in ncu_workloads.WORKLOADS
    assert cmd[1:child].count("--csv") == 1
    flags = [f for f in cmd[1:child] if f != "--csv"]  # the one option without a value
    assert len(flags) % 2 == 0 and all(f.startswith("--") for f in flags[::2]), flags
    opts = dict(zip(flags[::2], flags[1::2]))
    assert len(opts) == len(flags) // 2, "an option given twice"
    assert opts["--clock-control"] == "none" and opts["--print-units"] == "base"
    skip, count = int(opts["--launch-skip"]), int(opts["--launch-count"])
    if topic == "ch21":  # one step, bracketed by the workload: nothing to skip, at most STEP_LAUNCHES kept
        assert opts["--profile-from-start"] == "off" and skip == 0 and count == ncu.STEP_LAUNCHES
    else:  # warm-ups then as many launches again
        assert "--profile-from-start" not in opts and skip == count >= 2
    assert opts["--kernel-name"].startswith("regex:")
    re.compile(opts["--kernel-name"].removeprefix("regex:"))
    metrics = opts["--metrics"].split(",")
    assert len(set(metrics)) == len(metrics) and counters.TIME[0] in metrics
    assert all(re.fullmatch(r"[a-z0-9_]+__[a-z0-9_]+(\.[a-z0-9_]+)*", m) for m in metrics), metrics
    if "graphed" in run.variant:
        assert opts["--graph-profiling"] == "node" and metrics == list(counters.TIME)


def test_the_pipelined_topic_profiles_every_kernel_its_question_names() -> None:
    from minitorch_cuda.cuda.kernel_table import SPECS

    ours = ncu.TOPICS["ch16_pipelined"].runs[0]
    pattern = re.compile(ours.kernels.removeprefix("regex:"))
    wanted = ["matmul_regtiled_128x128x8", "matmul_regtiled_exact_128x128x8", "matmul_pipelined_128x128x16s3",
              "matmul_regtiled_64x64x16", "matmul_pipelined_splitk_128x128x16s3", "matmul_splitk_reduce",
              "matmul_splitk_reduce4"]  # fmt: skip
    assert all(name in SPECS and pattern.search(name) for name in wanted)
    others = [k for k in SPECS if k.startswith("matmul") and k not in wanted]
    assert others and not [k for k in others if pattern.search(k)]  # the two-stage pipeline, other tiles
    assert ncu.TOPICS["ch16_pipelined"].runs[1].name_base == "demangled"
    assert set(counters.STALLS + counters.STALLS_MORE) <= set(ours.metrics)
    assert "launch__registers_per_thread" in ours.metrics


def _launch_rows(kernel: str, metrics: dict[str, str], i: int, grid: str) -> list[str]:
    return [long_row(i, kernel, name, "", value, grid=grid) for name, value in metrics.items()]


def test_derived_ratios_of_the_new_topics_from_a_fake_csv() -> None:
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio".format
    gemm = {  # 4096^3 in 4 ms: 2^36 thread FFMAs, 2^31 of them per warp, of 2^32 warp instructions
        "gpu__time_duration.sum": "4,000,000",
        counters.FMA[0]: "68,719,476,736",
        counters.FMA[1]: "2,684,354,560",
        counters.FMA[2]: "4,294,967,296",
        counters.SHARED[0]: "1,073,741,824",
        "launch__grid_size": "1,024",
        "device__attribute_multiprocessor_count": "132",
        stall("long_scoreboard"): "1.5",
        stall("barrier"): "0.5",
        stall("mio_throttle"): "2.0",
        stall("not_selected"): "1.0",
        stall("wait"): "n/a",
    }
    tiny = {
        "gpu__time_duration.sum": "14,000",
        "launch__grid_size": "2",
        "device__attribute_multiprocessor_count": "132",
        "sm__cycles_active.avg": "3,000",
        "sm__cycles_elapsed.avg": "12,000",
        "smsp__warps_launched.sum": "264",
    }
    text = "\n".join([HEAD, *_launch_rows("gemm", gemm, 0, "(32, 32, 1)"), *_launch_rows("tiny", tiny, 1, "(2, 1, 1)")])
    launches = counters.parse_csv(text)
    a = counters.by_kernel(launches, ncu.DERIVED_FOR["ch16_pipelined"])["gemm"]["derived"]
    assert a["ffma_gflops"] == pytest.approx(34359.738368)  # 2 * 2^36 flops / 4e6 ns
    assert a["ffma_per_warp_instruction"] == pytest.approx(0.5)
    assert a["fma_pipe_share"] == pytest.approx(0.625)
    assert a["shared_wavefronts_per_warp_ffma"] == pytest.approx(0.5)
    assert a["grid_blocks_per_sm"] == pytest.approx(1024 / 132)
    assert a["dominant_stall"] == "mio_throttle" and a["dominant_stall_share"] == pytest.approx(2.0 / 5.0)
    assert "shared_ld_wavefronts_per_warp_ffma" not in a  # its numerator was not reported

    kernels = counters.by_kernel(launches, ncu.DERIVED_FOR["ch21"], every=True)  # a ranged run: each launch, in order
    assert list(kernels) == ["01 gemm", "02 tiny"]
    b = kernels["02 tiny"]["derived"]
    assert b["sm_active_share"] == pytest.approx(0.25)
    assert b["warps_per_sm"] == pytest.approx(2.0)
    assert b["grid_blocks_per_sm"] == pytest.approx(2 / 132)
    assert "dominant_stall" not in b and "dominant_stall_share" not in b  # no stall reported


def test_ranged_runs_keep_every_launch_of_the_step(machine, tmp_path) -> None:
    ncu.main(["--out", str(tmp_path), "ch21", "ch16_pipelined"], runner=machine)
    ch21 = json.loads((tmp_path / "ncu_ch21.json").read_text())
    assert [r["variant"] for r in ch21["runs"]] == [r.variant for r in ncu.TOPICS["ch21"].runs]
    for run in ch21["runs"]:
        cmd = run["ncu_command"]
        assert cmd[cmd.index("--profile-from-start") + 1] == "off" and cmd[cmd.index("--launch-skip") + 1] == "0"
        assert list(run["kernels"]) == ["01 gather_rows", "02 strided_copy"]  # the fake's two launches, in order
    ch16 = json.loads((tmp_path / "ncu_ch16_pipelined.json").read_text())
    assert sorted(ch16["runs"][0]["kernels"]) == ["gather_rows", "strided_copy"]
    assert "--profile-from-start" not in ch16["runs"][0]["ncu_command"]


NEW_WORKLOADS_CHECK = """
import re
import sys
import numpy as np
from minitorch_cuda.cuda import launch_core
from minitorch_cuda.cuda.driver import drv
from minitorch_cuda.experiments import ncu, ncu_workloads

launched, ranges = [], []
launch = launch_core.launch
def recording(kernel, *args, **kw):
    launched.append(kernel.name)
    launch(kernel, *args, **kw)
launch_core.launch = recording
drv.start_profiler = lambda: ranges.append(len(launched))  # the emulator has no profiler to start
drv.stop_profiler = lambda: ranges.append(len(launched))

ncu_workloads.SIZES.update(pipelined=256, splitk=256, protocol={"hidden": (37, 19), "batch_size": 21})
ncu_workloads.WORKLOADS["ch16_ours"]()
run = ncu.TOPICS["ch16_pipelined"].runs[0]
kept = [k for k in launched if re.search(run.kernels.removeprefix("regex:"), k)]
assert len(kept) == run.skip + run.count and kept[: run.skip] == kept[run.skip :], kept
assert "matmul_splitk_reduce4" in kept and "matmul_pipelined_splitk_128x128x16s3" in kept, kept

lean = re.compile(r"^(matmul_grad_|matmul_bias_act_|matmul_pipelined_splitk_bias_act_|softmax_xent_grad$"
                  r"|multi_clip_rmsprop_grid$)")
for workload, expect in (("ch21_stage11", "lean"), ("ch21_stage11_graphed", "replay"), ("ch21_stage13", "one")):
    launched.clear(), ranges.clear()
    ncu_workloads.WORKLOADS[workload]()
    assert len(ranges) == 2 and ranges[0] > 0, (workload, ranges)  # one range, after warm-up launches
    step = launched[ranges[0] : ranges[1]]
    if expect == "lean":
        assert len(step) == 10 and all(lean.match(k) for k in step), step
    elif expect == "replay":
        assert step == [], step  # the graph's launches do not pass through launch_core.launch
    else:
        assert step == ["persistent_step"], step
    assert len(step) <= ncu.STEP_LAUNCHES
print("new workloads ok")
"""


@needs_gxx
def test_the_new_workloads_launch_what_their_runs_profile_on_the_emulator() -> None:
    """ch16_ours at 256^3: warm-ups and kept launches alike, split-K's reduce among them; chapter 21's
    workloads on a narrow model: one step in the profiler range, after the warm-up's launches, of
    stage 11's ten lean kernels, of a graph replay, of persistent_step alone."""
    env = {**os.environ, "MINITORCH_CUDA_EMULATE": "1"}
    done = subprocess.run([sys.executable, "-c", NEW_WORKLOADS_CHECK], capture_output=True, text=True, env=env,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0 and "new workloads ok" in done.stdout, done.stderr[-3000:]
