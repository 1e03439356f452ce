"""A student's kernel as the grader builds it (grade/kernel_build.py) and what it compiled to
(grade/artifact.py), on the CPU: nvcc to PTX for sm_90 (no GPU needed) and the emulator's g++ build.

Each rule is checked through both readers, so a kernel is judged alike on a GPU and on the emulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_bwrap, needs_gxx, needs_nvcc

from minitorch_cuda.cuda.kernel_table import KERNEL_DIR
from minitorch_cuda.grade import exercises, kernel_build, sandbox, verdict

ROOT = Path(__file__).resolve().parents[1]
RELU = (
    'extern "C" __global__ void ew_relu(float* out, const float* a, int n) {\n'
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) out[i] = a[i] > 0.0f ? a[i] : 0.0f;\n"
    "}\n"
)


def ptx_artifact(source: str):
    cubin, artifact = kernel_build.compile_for_gpu(source, "sm_90")
    assert cubin[:4] == b"\x7fELF"
    return artifact


def emulated_artifact(source: str):
    return kernel_build._emulated(source).artifact


READERS = [
    pytest.param(ptx_artifact, id="ptx", marks=needs_nvcc),
    pytest.param(emulated_artifact, id="emulator", marks=needs_gxx),
]


def test_the_include_folder_holds_the_course_headers_and_no_answer() -> None:
    folder = kernel_build.headers()
    names = {p.name for p in folder.iterdir()}
    assert names and all(n.endswith((".cuh", ".h")) for n in names)
    assert names == {p.name for p in KERNEL_DIR.glob("*.cuh")} - kernel_build.ANSWER_KEYS
    assert {"grid_barrier.cuh", "block_reduce.cuh"} <= names  # 21.1 includes them
    for path in folder.iterdir():  # no header left in reaches one left out
        assert not any(key in path.read_text() for key in kernel_build.ANSWER_KEYS), path.name


# an #include of a file that is not a course header, in every spelling the preprocessor accepts
# (through a macro, split over lines, behind a comment, as a digraph, include_next, #import, after a
# lone carriage return, after a raw string that looks like a comment opener, behind a digit separator,
# built by stringizing, only in the device pass): the file each one names
INCLUDES = {
    "answer": ('#include "elementwise.cu"\n', "the framework's `elementwise.cu`, which holds the answer"),
    "answer_by_path": (f'#include "{KERNEL_DIR}/matmul.cu"\n', "the framework's `matmul.cu`, which holds the answer"),
    "answer_key_header": ('#include "matmul_regtiled.cuh"\n', "`matmul_regtiled.cuh`, which holds the answer"),
    "macro": ('#define THEIRS "/subs/bob/relu.cu"\n#include THEIRS\n', "`/subs/bob/relu.cu`"),
    "continued_line": ('#inc\\  \nlude "/subs/bob/relu.cu"\n', "`/subs/bob/relu.cu`"),
    "comment": ('#/**/include "/subs/bob/relu.cu"\n', "`/subs/bob/relu.cu`"),
    "digraph": ('%:include "/subs/bob/relu.cu"\n', "`/subs/bob/relu.cu`"),
    "include_next": ("#include_next </etc/passwd>\n", "`/etc/passwd`"),
    "import": ('#import "../bob/relu.cu"\n', "`../bob/relu.cu`"),
    "carriage_return": ('int x;\r#include "/etc/passwd"\n', "`/etc/passwd`"),
    "raw_string": ('const char* s = R"x(\n/*)x";\n#include "/etc/passwd"\n// */\n', "`/etc/passwd`"),
    "digit_separator": ('#define X 1\'000\n#if X\n#include "/etc/hostname"\n#endif\n', "`/etc/hostname`"),
    "stringized": ("#define S(x) #x\n#define F(x) S(x)\n#include F(/etc/hostname)\n", "`/etc/hostname`"),
    "device_pass_only": ('#ifdef __CUDA_ARCH__\n#include "/etc/hostname"\n#endif\n', "`/etc/hostname`"),
    "environment": ('#include "/proc/self/environ"\n', "`/proc/self/environ`"),
    "outside_system_dirs": ('#include "/usr/include/../lib/os-release"\n', "outside the course's headers"),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("form", list(INCLUDES))
def test_an_include_is_judged_by_what_the_preprocessor_opened(reader, form) -> None:
    head, named = INCLUDES[form]
    with pytest.raises(verdict.CheckFailed) as refused:
        reader(head + RELU)
    assert refused.value.reason == verdict.FORBIDDEN and named in refused.value.message, refused.value.message
    assert "root:" not in refused.value.message


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("form", ["answer_by_path", "include_next", "environment", "device_pass_only"])
def test_without_bubblewrap_the_preprocessor_still_decides(reader, form, monkeypatch) -> None:
    """Where bwrap is missing the compiler sees the whole file system: the files it opened still fail."""
    monkeypatch.setattr(sandbox, "bwrap", lambda: None)
    test_an_include_is_judged_by_what_the_preprocessor_opened(reader, form)


@pytest.mark.parametrize("reader", READERS)
def test_course_and_system_headers_may_be_included(reader) -> None:
    allowed = '#include "grid_barrier.cuh"  // #include "/etc/passwd" in a comment\n#include <math_constants.h>\n'
    artifact = reader(allowed + RELU)
    assert artifact.headers == {"grid_barrier.cuh"} and artifact.entries["ew_relu"] == ("P", "P", "i")


SHARED = 'extern "C" __global__ void k(float* out) {\n    __shared__ float s[64];\n    s[threadIdx.x] = 1.0f;\n'
SHARED += "    __syncthreads();\n    out[threadIdx.x] = s[63 - threadIdx.x];\n}\n"
PLAIN = 'extern "C" __global__ void k(float* out) {\n    out[threadIdx.x] = 1.0f;\n}\n'
SHUFFLE = (
    'extern "C" __global__ void k(float* out) {\n    out[threadIdx.x] = DOWN(0xffffffffu, out[threadIdx.x], 1);\n}\n'
)
CAS_ADD = (  # atomicAdd as an atomicCAS loop, behind a macro
    "#define SWAP(p, a, b) atomicCAS(p, a, b)\n"
    "__device__ float add(float* p, float v) {\n"
    "    int* q = (int*)p; int old = *q, seen;\n"
    "    do { seen = old; old = SWAP(q, seen, __float_as_int(v + __int_as_float(seen))); } while (seen != old);\n"
    "    return __int_as_float(old);\n}\n"
    'extern "C" __global__ void k(float* out) { add(out, 1.0f); }\n'
)
BARRIER = '#include "grid_barrier.cuh"\nextern "C" __global__ void k(float* out, GridBarrier* b) {\n'
BARRIER += "    out[blockIdx.x] = 1.0f;\n    BARRIER_CALL\n    out[0] += 1.0f;\n}\n"


@pytest.mark.parametrize("reader", READERS)
def test_shared_memory_is_read_from_the_compiled_code(reader) -> None:
    assert reader(SHARED).uses_shared
    assert not reader("// __shared__ float s[64];\n" + PLAIN).uses_shared
    assert not reader("#if 0\n__shared__ float s[64];\n#endif\n" + PLAIN).uses_shared
    assert not reader('const char* why = "__shared__";\n' + PLAIN).uses_shared


@pytest.mark.parametrize("reader", READERS)
def test_shuffles_are_read_from_the_compiled_code(reader) -> None:
    assert reader("#define DOWN __shfl_down_sync\n" + SHUFFLE).uses_shuffle
    assert not reader("// __shfl_down_sync\n#define DOWN(m, v, d) (v)\n" + SHUFFLE).uses_shuffle


@pytest.mark.parametrize("reader", READERS)
def test_atomics_are_read_from_the_compiled_code(reader) -> None:
    assert reader(CAS_ADD).own_atomics
    assert reader('extern "C" __global__ void k(float* out) { atomicAdd(out, 1.0f); }\n').own_atomics
    assert reader("// atomicAdd(out, 1.0f)\n" + PLAIN).own_atomics == ()
    # grid_barrier's counters are the course header's atomics, not the student's
    barrier = reader(BARRIER.replace("BARRIER_CALL", "grid_barrier(b);"))
    assert "grid_barrier" in barrier.calls and barrier.own_atomics == ()
    commented = reader(BARRIER.replace("BARRIER_CALL", "// grid_barrier(b);"))
    assert "grid_barrier" not in commented.calls


HIDDEN_ATOMICS = {  # an atomic the student's code performs, passed off as a system header's or hidden in text
    "line_directive": '#line 1 "/usr/include/stdio.h"\n__device__ void f(float* p) { atomicAdd(p, 1.0f); }\n'
    '#line 3 "kernel.cu"\nextern "C" __global__ void k(float* out) { f(out); }\n',
    "gnu_line_marker": '# 1 "/usr/include/stdio.h" 1 3 4\n__device__ void f(float* p) { atomicAdd(p, 1.0f); }\n'
    '# 3 "kernel.cu" 2\nextern "C" __global__ void k(float* out) { f(out); }\n',
    "digit_separators": 'extern "C" __global__ void k(float* out) {\n'
    "    int x = 1'000; atomicAdd(out, 1.0f); int y = 2'0;\n}\n",
    "raw_string": 'extern "C" __global__ void k(float* out) {\n'
    '    const char* r = R"x(")x"; atomicAdd(out, 1.0f); r = "";\n}\n',
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("form", list(HIDDEN_ATOMICS))
def test_an_atomic_is_seen_however_the_source_hides_it(reader, form) -> None:
    assert reader(HIDDEN_ATOMICS[form]).own_atomics


@pytest.mark.parametrize("reader", READERS)
def test_a_macro_that_changes_a_course_header_is_refused(reader) -> None:
    """A macro of the student's used inside a course header would pass the student's code off as the
    header's (on a GPU, ``#define __threadfence() atomicAdd(...)`` puts an atomic inside grid_barrier)."""
    source = "#define bar bar_of_mine\n" + BARRIER.replace("BARRIER_CALL", "grid_barrier(b);")
    with pytest.raises(verdict.CheckFailed) as refused:
        reader(source)
    assert refused.value.reason == verdict.FORBIDDEN and "`grid_barrier.cuh`" in refused.value.message
    assert reader(BARRIER.replace("BARRIER_CALL", "grid_barrier(b);") + "#define bar bar_of_mine\n").own_atomics == ()


@needs_nvcc
def test_an_atomic_put_inside_the_barrier_by_a_macro_is_refused_on_the_gpu_path() -> None:
    source = "#define __threadfence() atomicAdd((unsigned*)bar, 1u)\n" + BARRIER.replace(
        "BARRIER_CALL", "grid_barrier(b);"
    )
    with pytest.raises(verdict.CheckFailed, match="changes what the course's `grid_barrier.cuh` compiles to"):
        ptx_artifact(source)


VEC4 = 'extern "C" __global__ void k(float* out, const float* a) {\n'
VEC4 += "    reinterpret_cast<float4*>(out)[threadIdx.x] = reinterpret_cast<const float4*>(a)[threadIdx.x];\n}\n"


# What a kernel could do on the emulator to silence its checks: leave g++'s sanitizer calls out of a
# function, or reach the emulator's own state (the block's race-checking record, its runtime's calls)
SILENCED = {
    "no_sanitize_thread": 'extern "C" __global__ __attribute__((no_sanitize_thread)) void k(float* out) {\n'
    "    out[threadIdx.x] = 1.0f;\n}\n",
    "no_sanitize_by_macro": '#define QUIET __attribute__((__no_sanitize__("thread", "bounds")))\n'
    'extern "C" __global__ QUIET void k(float* out) {\n    out[threadIdx.x] = 1.0f;\n}\n',
    "the_block_record": 'extern "C" __global__ void k(float* out) {\n'
    "    emu::self()->block->racecheck = nullptr;\n    out[threadIdx.x] = 1.0f;\n}\n",
    "the_namespace_opened": "namespace emu { void forget(); }\nusing namespace emu;\n"
    'extern "C" __global__ void k(float* out) {\n    out[threadIdx.x] = 1.0f;\n}\n',
    "the_runtime_call": 'extern "C" void __emu_shared_declared(const void*, unsigned long);\n'
    'extern "C" __global__ void k(float* out) {\n    __emu_shared_declared(out, 4);\n}\n',
    "a_pasted_name": "#define HIDE(a, b) a##b\n"
    'extern "C" void HIDE(__emu_, shared_declared)(const void*, unsigned long);\n'
    'extern "C" __global__ void k(float* out) {\n    HIDE(__emu_, shared_declared)(out, 4);\n}\n',
    "a_builtin_copy": 'extern "C" __global__ void k(float* out, const float* x) {\n'
    "    __builtin_memcpy(out, x, 4 * blockDim.x);\n}\n",
    "an_x86_load": 'extern "C" __global__ void k(float* out, const float* x) {\n'
    "#if __CUDA_ARCH__ == 800\n    typedef float v4 __attribute__((vector_size(16)));\n"
    "    *(v4*)out = __builtin_ia32_loadups(x);\n#endif\n}\n",
    "a_forged_marker": '# 1 "' + "EMULATOR_INCLUDE/cooperative_groups.h" + '" 1 3 4\n'
    "namespace emu { void forget(); }\n"
    '# 3 "kernel.cu" 2\nextern "C" __global__ void k(float* out) {\n    out[threadIdx.x] = 1.0f;\n}\n',
}


@needs_gxx
@pytest.mark.parametrize("form", list(SILENCED))
def test_a_kernel_cannot_silence_the_emulators_checks(form) -> None:
    from minitorch_cuda.emulator import toolchain

    with pytest.raises(verdict.CheckFailed) as refused:
        emulated_artifact(SILENCED[form].replace("EMULATOR_INCLUDE", str(toolchain.INCLUDE)))
    assert refused.value.reason == verdict.FORBIDDEN, refused.value.message


@needs_gxx
def test_cudas_names_and_the_emulators_headers_are_no_reach_into_it() -> None:
    """threadIdx and the other index variables expand into the emulator's namespace, and its
    stand-ins for CUDA's headers are its code: neither counts as the kernel's reach."""
    source = (
        "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
        'extern "C" __global__ void k(float* out) {\n'
        "    out[blockIdx.x * blockDim.x + threadIdx.x] = gridDim.x;\n    __syncthreads();\n}\n"
    )
    assert emulated_artifact(source).entries["k"] == ("P",)


@pytest.mark.parametrize("reader", READERS)
def test_16_byte_moves_are_read_from_the_compiled_code(reader) -> None:
    assert reader(VEC4).moves_16_bytes
    assert not reader("// float4 loads, float4 stores\n" + PLAIN).moves_16_bytes


@pytest.mark.parametrize("reader", READERS)
def test_the_entry_and_its_parameters_are_read_from_the_compiled_code(reader) -> None:
    ex = exercises.get("3.1")
    exercises.check_entry(ex, reader(RELU))
    exercises.check_entry(ex, reader("#define NAME ew_relu\n" + RELU.replace("ew_relu", "NAME")))
    with pytest.raises(TypeError, match="float"):
        exercises.check_entry(ex, reader(RELU.replace("int n", "float n")))
    with pytest.raises(ValueError, match='extern "C"'):
        exercises.check_entry(ex, reader(RELU.replace('extern "C" ', "")))
    with pytest.raises(ValueError, match="no extern"):  # the entry only in a dead block
        exercises.check_entry(ex, reader("#if 0\n" + RELU + "#endif\n" + PLAIN))


def test_a_compile_log_keeps_only_the_students_own_lines() -> None:
    log = (
        "In file included from kernel.cu:1:\n"
        "/etc/passwd:1:5: error: 'root' does not name a type\n"
        "    1 | root:x:0:0:root:/root:/bin/bash\n"
        'kernel.cu(3): error: identifier "x" is undefined\n'
        "ptxas error   : Entry function 'k' uses too much shared data\n"
    )
    kept = kernel_build.student_log(log)
    assert kept.splitlines() == [
        'kernel.cu(3): error: identifier "x" is undefined',
        "ptxas error   : Entry function 'k' uses too much shared data",
    ]


COMPILE = """
import json, sys
from minitorch_cuda.grade import kernel_build
source = sys.stdin.read()
try:
    kernel_build.compile_for_gpu(source, "sm_90") if sys.argv[1] == "ptx" else kernel_build._emulated(source)
    print(json.dumps(None))
except Exception as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""


@pytest.mark.parametrize("reader", READERS)
def test_a_compile_error_in_a_header_quotes_none_of_it(reader) -> None:
    """A name that clashes with a course header's: the errors lie in the header, whose lines stay out of
    the feedback; the student's own erroneous line is shown."""
    source = 'typedef int GridBarrier;\n#include "grid_barrier.cuh"\n' + RELU.replace(
        "out[i] =", "out[i] = undefined_x +"
    )
    env = dict(os.environ, MINITORCH_CUDA_EMULATE="1", PYTHONPATH=str(ROOT))  # the runtime's error type
    run = subprocess.run(
        [sys.executable, "-c", COMPILE, "ptx" if reader is ptx_artifact else "emulator"],
        input=source,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    name, message = json.loads(run.stdout.strip().splitlines()[-1])
    assert name == "KernelCompileError", message
    assert "undefined_x" in message and "kernel.cu(" in message
    header = (KERNEL_DIR / "grid_barrier.cuh").read_text().splitlines()
    assert not [line for line in header if len(line.strip()) > 12 and line.strip() in message], message


@needs_bwrap
def test_the_compiler_sees_nothing_of_the_grader(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GRADER_SECRET", "hunter2")
    probe = "env; ls /etc /home /work /root 2>&1; ls " + str(ROOT) + " 2>&1; cat /proc/1/cmdline"
    out = sandbox.run_compiler(["sh", "-c", probe], tmp_path, [kernel_build.headers()])
    seen = out.stdout + out.stderr
    assert "hunter2" not in seen and "GRADER_SECRET" not in seen
    assert "passwd" not in seen and "solutions" not in seen and "pyproject" not in seen, seen


@needs_nvcc
def test_the_compile_finds_the_toolkits_nvcc_through_a_wrapper(tmp_path, monkeypatch) -> None:
    """On a GPU the checker's PATH starts with a memory-capping nvcc script (limited_compilers) that the
    sandbox cannot see: the compile runs the toolkit's nvcc, bound into the sandbox and on its PATH."""
    tools = sandbox.limited_compilers(tmp_path)
    monkeypatch.setenv("PATH", os.pathsep.join([tools, os.environ["PATH"]]))
    real = sandbox.real_nvcc()
    assert real and not real.startswith(str(tmp_path)) and Path(real).parent.name == "bin"
    # its real folder: /usr/local/cuda may lead there through /etc/alternatives, which the sandbox lacks
    assert sandbox.compile_environment(tmp_path)["PATH"].startswith(os.path.dirname(os.path.realpath(real)))
    assert ptx_artifact(RELU).entries["ew_relu"] == ("P", "P", "i")
