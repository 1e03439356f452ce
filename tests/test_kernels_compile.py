"""Every kernel file compiles with nvcc (where nvcc exists; CI has it), and every
kernel the registry names is defined ``extern "C"`` in the file it names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import needs_nvcc
from helpers import NVCC

from minitorch_cuda import MAX_STAGE
from minitorch_cuda.cuda.kernel_table import KERNEL_DIR, SPECS, entry_params, prepare_signature

CU_FILES = sorted(KERNEL_DIR.glob("*.cu"))
# extern "C" __global__ void [__cluster_dims__(...)] [__launch_bounds__(...)] NAME(
_BOUNDS = r"(?:__launch_bounds__\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*)?"
_CLUSTER = r"(?:__cluster_dims__\s*\([^()]*\)\s*)?"
EXTERN_C = r'extern\s+"C"\s+__global__\s+void\s+' + _CLUSTER + _BOUNDS


def test_kernel_files_exist():
    assert CU_FILES, f"no .cu files in {KERNEL_DIR}"
    assert {s.file for s in SPECS.values()} <= {p.name for p in CU_FILES}


@needs_nvcc
@pytest.mark.parametrize("path", CU_FILES, ids=lambda p: p.name)
def test_compiles_with_nvcc(path: Path, tmp_path: Path):
    result = subprocess.run(
        [NVCC, "-arch=sm_90", "-c", "-I", str(KERNEL_DIR), "-o", str(tmp_path / "out.o"), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"nvcc failed on {path.name}:\n{result.stderr}{result.stdout}"
    assert "warning" not in result.stderr.lower(), f"nvcc warned on {path.name}:\n{result.stderr}"


def _split_args(text: str) -> list[str]:
    args, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    return args + [current.strip()]


def _expanded(source: str) -> str:
    """The source with its function-like macros expanded at top level (enough of a C
    preprocessor for BINARY(ew_add, ...), REDUCTION_VARIANTS(DEFINE_SUM_ROWS) and the tile lists'
    X-macros, REGTILED_TILES(REGTILED) with their variadic TILE_IF)."""
    for header in re.findall(r'^#include\s+"([^"]+)"', source, re.M):
        source = (KERNEL_DIR / header).read_text() + "\n" + source
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)  # block comments, also inside macros
    source = source.replace("\\\n", " ")  # join continuation lines
    macros = {}
    for name, params, body in re.findall(r"^#define\s+(\w+)\(([^)]*)\)(.*)$", source, re.M):
        macros[name] = ([p.strip() for p in params.split(",")], body)
    text = re.sub(r"^#.*$", "", source, flags=re.M)
    if not macros:
        return text
    for _ in range(8):  # nested macros: REDUCTION_VARIANTS(DEFINE) -> DEFINE(volatile) ...
        out, pos = [], 0
        for match in re.finditer(r"\b(" + "|".join(map(re.escape, macros)) + r")\(", text):
            if match.start() < pos:
                continue
            depth, i = 1, match.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            params, body = macros[match.group(1)]
            args = _split_args(text[match.end() : i - 1])
            if params[-1:] == ["..."]:  # variadic: the arguments past the named ones are __VA_ARGS__
                named = len(params) - 1
                params, args = [*params[:named], "__VA_ARGS__"], [*args[:named], ", ".join(args[named:])]
            for param, arg in zip(params, args):
                body = re.sub(r"\b" + re.escape(param) + r"\b", arg, body)
            out.append(text[pos : match.start()] + re.sub(r"\s*##\s*", "", body))
            pos = i
        out.append(text[pos:])
        text = "".join(out)
    return text


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_registry_kernel_is_defined_in_its_file(name):
    spec = SPECS[name]
    source = (KERNEL_DIR / spec.file).read_text()
    direct = set(re.findall(EXTERN_C + r"(\w+)\s*\(", source))
    if name in direct:
        params = entry_params(source, name)
        assert prepare_signature(params) == spec.signature, f"{name}: ({params}) vs the registry's ({spec.params})"
        return
    # Kernels written through macros: BINARY(ew_add, ...) or DEFINE_SUM_ROWS(KIND) via REDUCTION_VARIANTS.
    expanded = _expanded(source)
    assert re.search(EXTERN_C + name + r"\s*\(", expanded), f'{name} is not defined extern "C" in {spec.file}'
    params = entry_params(expanded, name)
    assert prepare_signature(params) == spec.signature, f"{name}: ({params}) vs the registry's ({spec.params})"


def test_every_extern_c_kernel_is_in_the_registry():
    defined: set[str] = set()
    for path in CU_FILES:
        expanded = _expanded(path.read_text())
        defined |= set(re.findall(EXTERN_C + r"(\w+)\s*\(", expanded))
    assert defined - set(SPECS) == set(), f"kernels no op can reach: {sorted(defined - set(SPECS))}"


# --- the compute-sanitizer script ---------------------------------------------------------


def test_sanitize_parses_summaries():  # its --stages list: stages.parse, in test_stages.py
    from minitorch_cuda import sanitize

    assert sanitize.parse_summary("========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitize.parse_summary("========= ERROR SUMMARY: 3 errors\n") == 3
    assert sanitize.parse_summary("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)") == 2
    assert sanitize.parse_summary("Traceback ...") is None
    rows = [
        {"tool": "memcheck", "stage": 0, "ok": True, "errors": 0, "returncode": 0},
        {"tool": "memcheck", "stage": 8, "ok": False, "errors": 2, "returncode": 1},
    ]
    text = sanitize.table(rows, ["memcheck"], [0, 8])
    assert "s0" in text and "s8" in text and text.splitlines()[-1].split() == ["memcheck", "0", "2"]
    # an interrupted campaign: the runs that never finished show as "-", the table still prints
    text = sanitize.table(rows[:1], ["memcheck", "racecheck"], [0, 8])
    assert [line.split() for line in text.splitlines()[-2:]] == [["memcheck", "0", "-"], ["racecheck", "-", "-"]]


@pytest.mark.gpu
@pytest.mark.parametrize("stage", range(MAX_STAGE + 1))
def test_sanitize_workload_runs(stage):
    from minitorch_cuda import sanitize

    sanitize.workload(stage)


@pytest.mark.gpu
@pytest.mark.slow
def test_memcheck_is_clean_at_stages_0_and_8(tmp_path):
    import json
    import sys

    if shutil.which("compute-sanitizer") is None and not Path("/usr/local/cuda/bin/compute-sanitizer").exists():
        pytest.skip("compute-sanitizer is not installed")
    out = tmp_path / "sanitize.json"
    result = subprocess.run(
        [sys.executable, "-m", "minitorch_cuda.sanitize", "--tools", "memcheck", "--stages", "0,8", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads(out.read_text())["results"]
    assert [(r["tool"], r["stage"], r["errors"]) for r in results] == [("memcheck", 0, 0), ("memcheck", 8, 0)]
