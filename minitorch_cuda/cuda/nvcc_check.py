"""nvcc's verdict on a kernel source where the kernels themselves run on the CPU emulator.

Under ``MINITORCH_CUDA_EMULATE=1`` the framework builds kernels with g++, which neither
reports what nvcc would reject nor says what the source costs on a GPU. Where nvcc is on
PATH, ``compile_cubin`` builds the same source as the framework's compile on a GPU sees it
(``kernel_table.nvcc_command``: the kernel folder as include path, ``-lineinfo``) into a cubin for a real
architecture, with ptxas's resource report (``-Xptxas -v``): registers, spills and shared
memory per kernel. Only the exercise helper calls it, and only under emulation: on a GPU
the framework's own compile already shows nvcc's errors.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .kernel_table import nvcc_command

ARCH = "sm_90"  # the course's GPU (H100/H200); any real architecture shows the same mistakes


@dataclasses.dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one ``__global__`` function."""

    name: str
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    shared_bytes: int  # static shared memory
    stack_bytes: int  # the stack frame: local memory (arrays indexed at run time, spills)

    def line(self) -> str:
        stack = f", {self.stack_bytes} B stack (local memory)" if self.stack_bytes else ""
        return (
            f"{self.name}: {self.registers} registers, spills {self.spill_stores} B stored / "
            f"{self.spill_loads} B loaded, {self.shared_bytes} B shared memory{stack}"
        )


def available() -> bool:
    return shutil.which("nvcc") is not None


def parse_resources(log: str) -> list[KernelResources]:
    """Each entry function's line of ptxas's ``-v`` report, in the order ptxas compiled them."""
    found = []
    # one chunk per entry function: from its "Compiling entry function" to the next one
    for chunk in re.split(r"(?=ptxas info\s*: Compiling entry function)", log)[1:]:
        name = re.search(r"Compiling entry function '([^']+)'", chunk).group(1)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", chunk)
        used = re.search(r"Used (\d+) registers", chunk)
        shared = re.search(r"(\d+) bytes smem", chunk)
        stack, stores, loads = (int(v) for v in frame.groups()) if frame else (0, 0, 0)
        registers = int(used.group(1)) if used else 0
        found.append(KernelResources(name, registers, stores, loads, int(shared.group(1)) if shared else 0, stack))
    return found


@functools.cache
def _nvcc(source: str, arch: str) -> tuple[bool, str]:
    """Whether nvcc built ``source`` into a cubin for ``arch``, and its log (cached per source:
    nvcc takes about half a second, and a notebook cell is often run again unchanged)."""
    with tempfile.TemporaryDirectory(prefix="minitorch_cuda_nvcc_") as folder:
        path = Path(folder) / "kernel.cu"  # the name PyCUDA gives the source, so messages match a GPU's
        path.write_text(source)
        command = [*nvcc_command(arch), "-Xptxas", "-v"]
        done = subprocess.run(
            [*command, "-o", str(path.with_suffix(".cubin")), path.name],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
    return done.returncode == 0, done.stdout + done.stderr


def compile_cubin(source: str, label: str, arch: str = ARCH) -> tuple[KernelResources, ...]:
    """Compile ``source`` with nvcc for ``arch`` and return ptxas's report per kernel; raise the
    framework's KernelCompileError, with nvcc's log and the numbered lines it points at, when
    nvcc rejects it."""
    built, log = _nvcc(source, arch)
    if not built:
        from .runtime import KernelCompileError, _numbered_excerpt  # runtime needs CUDA (or the emulator)

        raise KernelCompileError(f"nvcc could not compile {label}:\n{log.strip()}\n\n{_numbered_excerpt(source, log)}")
    return tuple(parse_resources(log))
