"""Which programming models can run here, and if not, why (found at run time).

Each check returns ``None`` when the model can run, or one sentence that says
what is missing: the package (import error), the toolchain version, or the
GPU's compute capability. The chapter prints these sentences instead of
numbers it cannot measure.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

from ..device import cuda_unavailable_reason

# cuTile Python: tileiras from CUDA >= 13.1, and these compute capabilities
# (the majors its documentation lists; the H200's 9.0 is not among them).
CUTILE_MIN_CUDA = (13, 1)
CUTILE_MAJORS = (8, 10, 11, 12)


def cuda_c() -> str | None:
    return cuda_unavailable_reason() or None


@functools.cache
def triton() -> str | None:
    try:
        import triton as _triton
    except Exception as exc:  # ImportError, or a broken install raising anything
        return f"Triton does not import ({type(exc).__name__}: {exc})"
    if int(_triton.__version__.split(".")[0]) < 3:
        return f"Triton {_triton.__version__} is older than 3.0, which these kernels are written for"
    return cuda_c()


@functools.cache
def cupy() -> str | None:
    try:
        import cupy as _cupy  # noqa: F401
    except Exception as exc:
        return f"CuPy does not import ({type(exc).__name__}: {exc})"
    return cuda_c()


def _version(text: str) -> tuple[int, int] | None:
    m = re.search(r"release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


@functools.cache
def toolkit_version() -> tuple[int, int] | None:
    """The CUDA toolkit release, as ``nvcc --version`` reports it."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
    return _version(done.stdout)


def cutile_reason(
    imported: str | None, tileiras: bool, cuda: tuple[int, int] | None, capability: tuple[int, int] | None
) -> str | None:
    """The decision, apart from the probing, so that it can be tested without a GPU."""
    if imported:
        return f"cuTile Python does not import ({imported})"
    problems = []
    if not tileiras and (cuda is None or cuda < CUTILE_MIN_CUDA):
        have = "no CUDA toolkit" if cuda is None else f"CUDA {cuda[0]}.{cuda[1]}"
        need = ".".join(map(str, CUTILE_MIN_CUDA))
        problems.append(f"it needs tileiras from CUDA >= {need} and this machine has {have}")
    if capability is not None and capability[0] not in CUTILE_MAJORS:
        majors = ", ".join(f"{m}.x" for m in CUTILE_MAJORS)
        problems.append(f"the GPU is compute capability {capability[0]}.{capability[1]}, not one of {majors}")
    return ("cuTile Python cannot run here: " + "; ".join(problems)) if problems else None


@functools.cache
def cutile() -> str | None:
    try:
        import cuda.tile  # noqa: F401

        imported = None
    except Exception as exc:
        imported = f"{type(exc).__name__}: {exc}"
    capability = None
    if cuda_c() is None:
        from ..cuda.runtime import drv

        capability = drv.Context.get_device().compute_capability()
    reason = cutile_reason(imported, shutil.which("tileiras") is not None, toolkit_version(), capability)
    if reason is None and capability is None:
        return cuda_c()
    return reason


def report() -> dict[str, str | None]:
    """Every model: None where it can run, else why not."""
    return {"cuda_c": cuda_c(), "triton": triton(), "cutile": cutile(), "cupy": cupy()}
