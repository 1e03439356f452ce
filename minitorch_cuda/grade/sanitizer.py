"""compute-sanitizer on a kernel exercise that passed its checks: memcheck, racecheck, synccheck.

Each tool runs ``python -m minitorch_cuda.grade.worker launch ID kernel.cu``, which
launches the student's kernel once on small, odd shapes through the backend's
launcher (``kernel_checks.small_launch``), in its own process with its own
timeout; the three run side by side. racecheck runs only on kernels that use
``__shared__``, synccheck only on kernels with a barrier or a warp intrinsic.
Where the course's CPU emulator is installed, the same launch also runs on it:
it names, by thread and line, what a GPU leaves undefined and may get right by
luck (a shuffle whose mask leaves out a lane that executes it, an index past a
``__shared__`` array). An error fails the exercise with the reason
``sanitizer`` and the tool's first message. Where compute-sanitizer or a GPU is
absent this is skipped, and the result says so.
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

from ..emulator import switched_on as emulator_on
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


def emulator_usable() -> bool:
    """The CPU emulator is there (its package and a C++ compiler)."""
    import importlib.util

    found = importlib.util.find_spec("minitorch_cuda.emulator") is not None
    return found and (shutil.which("c++") or shutil.which("g++")) is not None


EMULATOR = "the CPU emulator"
EMULATOR_FAULT = 3  # the launch worker's exit status for a fault the emulator found


def run(ex: Exercise, source: str, timeout: float, emulator: bool = True) -> tuple[str | None, list[str]]:
    """(the failure message or None, notes). Runs each tool once on a small launch, side by side;
    with ``emulator`` (and the emulator there) the same launch also runs on the CPU emulator, which
    reports what a GPU leaves undefined (a shuffle whose mask leaves out a lane that executes it,
    an index past a ``__shared__`` array) by kernel, thread and line."""
    tool_bin = binary()
    launch = [sys.executable, "-m", "minitorch_cuda.grade.worker", "launch", ex.id]
    runs: dict[str, tuple[list[str], dict | None]] = {}
    for tool in tools_for(source) if tool_bin else []:
        argv = [tool_bin, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "3"]
        runs[f"compute-sanitizer {tool}"] = ([*argv, "--report-api-errors", "no", *launch], None)
    if emulator and emulator_usable():
        runs[EMULATOR] = (launch, None)  # sandboxed below: the emulator runs the kernel as native code
    if not runs:
        return None, ["compute-sanitizer not found: not run"]
    notes: list[str] = []
    failure = None
    with tempfile.TemporaryDirectory(prefix=f"sanitize-{ex.id}-") as tmp:
        path = Path(tmp, "kernel.cu")
        path.write_text(source)
        procs = {}
        for name, (argv, env) in runs.items():
            argv = [*argv, str(path)]
            if name == EMULATOR:
                sandbox.seed_emulator_cache(Path(tmp))
                env = sandbox.environment(Path(tmp), no_gpu=True) | emulator_on()
                argv = sandbox.command(argv, Path(tmp))
            log = open(Path(tmp, f"{len(procs)}.log"), "wb")  # noqa: SIM115 -- closed below
            proc = sandbox.popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env)
            procs[name] = (proc, log, Path(tmp, f"{len(procs)}.log"))
        deadline = time.monotonic() + timeout
        for name, (proc, log, log_path) in procs.items():
            try:
                code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = None
            sandbox.finish(proc)
            log.close()
            output = log_path.read_text(errors="replace")
            fault = ERROR_EXIT if name != EMULATOR else EMULATOR_FAULT
            if code is None:
                notes.append(f"{name} did not finish within {timeout:g} s (not counted)")
            elif code == fault and failure is None:
                if name == EMULATOR:
                    faults = [line[len("fault: ") :] for line in output.splitlines() if line.startswith("fault: ")]
                    failure = f"{EMULATOR}: {faults[-1] if faults else 'the kernel faulted'}", []
                else:
                    message, under = first_error(output)
                    failure = f"{name}: {message}", under
            elif code not in (0, fault):
                tail = [line for line in output.strip().splitlines()[-2:] if line.strip()]
                notes.append(f"{name}: the small launch exited with code {code} (not counted)")
                notes += [f"  {line[:200]}" for line in tail]
    if failure is not None:
        return failure
    tools = [n.removeprefix("compute-sanitizer ") for n in procs if n != EMULATOR]
    ran = (f"compute-sanitizer ({', '.join(tools)})" if tools else "") + (
        (" and " if tools else "") + EMULATOR if EMULATOR in procs else ""
    )
    return None, [f"{ran} on a small launch: no errors", *notes]
