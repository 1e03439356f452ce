"""compute-sanitizer on a kernel exercise that passed its checks: memcheck, racecheck, synccheck.

Each tool runs ``python -m minitorch_cuda.grade.worker launch ID kernel.cu``, which
launches the student's kernel once on small, odd shapes through the backend's
launcher (``kernel_checks.small_launch``), in its own process with its own
timeout; the three run side by side. racecheck runs only on kernels that use
``__shared__``, synccheck only on kernels with a barrier or a warp intrinsic.
An error fails the exercise with the reason ``sanitizer`` and the tool's first
message. Where compute-sanitizer or a GPU is absent this is skipped, and the
result says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import sandbox
from .exercises import Exercise

ERROR_EXIT = 99
_BANNER = re.compile(
    r"^=+\s*(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|Program hit|Target application)"
)


def binary() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and Path(root, "bin", "compute-sanitizer").is_file():
            return str(Path(root, "bin", "compute-sanitizer"))
    return None


def tools_for(source: str) -> list[str]:
    tools = ["memcheck"]
    if "__shared__" in source:
        tools.append("racecheck")
    if re.search(r"__syncthreads|__syncwarp|__shfl|__ballot|__any_sync|__all_sync", source):
        tools.append("synccheck")
    return tools


def first_error(output: str) -> tuple[str, list[str]]:
    """The tool's first message and the lines under it."""
    lines = [line.rstrip() for line in output.splitlines() if line.startswith("=")]
    for i, line in enumerate(lines):
        text = line.lstrip("=").rstrip()
        if not text.strip() or text.startswith("  ") or _BANNER.match(line):
            continue
        under = [x.lstrip("=").strip() for x in lines[i + 1 : i + 4] if x.lstrip("=").startswith("  ")]
        return text.strip(), under
    return "the tool reported an error", []


def run(ex: Exercise, source: str, timeout: float) -> tuple[str | None, list[str]]:
    """(the failure message or None, notes). Runs each tool once on a small launch."""
    tool_bin = binary()
    if tool_bin is None:
        return None, ["compute-sanitizer not found: not run"]
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix=f"sanitize-{ex.id}-") as tmp:
        path = Path(tmp, "kernel.cu")
        path.write_text(source)
        procs = {}
        for tool in tools_for(source):
            argv = [tool_bin, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "3"]
            argv += ["--report-api-errors", "no", sys.executable, "-m", "minitorch_cuda.grade.worker"]
            argv += ["launch", ex.id, str(path)]
            log = open(Path(tmp, f"{tool}.log"), "wb")  # noqa: SIM115 -- closed below
            procs[tool] = (sandbox.popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp), log)
        deadline = time.monotonic() + timeout
        failure = None
        for tool, (proc, log) in procs.items():
            try:
                code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = None
            sandbox.finish(proc)
            log.close()
            output = Path(tmp, f"{tool}.log").read_text(errors="replace")
            if code is None:
                notes.append(f"compute-sanitizer {tool} did not finish within {timeout:g} s (not counted)")
            elif code == ERROR_EXIT and failure is None:
                message, under = first_error(output)
                failure = f"compute-sanitizer {tool}: {message}", under
            elif code not in (0, ERROR_EXIT):
                tail = [line for line in output.strip().splitlines()[-2:] if line.strip()]
                notes.append(f"compute-sanitizer {tool}: the small launch exited with code {code} (not counted)")
                notes += [f"  {line[:200]}" for line in tail]
        if failure is not None:
            return failure[0], failure[1]
    ran = ", ".join(procs)
    return None, [f"compute-sanitizer ({ran}) on a small launch: no errors", *notes]
