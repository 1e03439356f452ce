"""The CUDA modules import and expose the CPU backend's op names, even where PyCUDA is missing.

Without a GPU nothing in ``minitorch_cuda.cuda`` can run, but a misplaced
import or a missing op would only surface on the GPU machine. A subprocess
with a stand-in ``pycuda`` (no device behind it) catches those on every CI run.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

STUB_AND_IMPORT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, TESTS)
    import standin_pycuda  # noqa: F401  (a pycuda with no device behind it)

    import minitorch_cuda.backend_cpu as cpu
    from minitorch_cuda.cuda import autotune, backend, graphs, registry  # noqa: F401
    import minitorch_cuda.bench, minitorch_cuda.grade.kernel_checks, minitorch_cuda.sanitize  # noqa: F401

    def ops(module):
        return {name for name in dir(module) if not name.startswith("_") and callable(getattr(module, name))
                and getattr(getattr(module, name), "__module__", "").startswith("minitorch_cuda")}

    missing = sorted(ops(cpu) - ops(backend))
    assert not missing, f"ops of the CPU backend missing on CUDA: {missing}"
    print("ok")
    """
).replace("TESTS", repr(str(TESTS)))


def test_cuda_backend_imports_with_every_cpu_op() -> None:
    result = subprocess.run([sys.executable, "-c", STUB_AND_IMPORT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


COMPILE_ONCE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, TESTS)
    import standin_pycuda  # noqa: F401

    built = []
    standin_pycuda.compiler.SourceModule = lambda source, **options: built.append(options["arch"]) or object()
    from minitorch_cuda.cuda import runtime

    first = runtime.compile_module("// a", "a.cu")
    assert runtime.compile_module("// a", "a.cu") is first and runtime.compile_module("// b", "b.cu") is not first
    runtime.compile_module("// a", "a.cu", arch_specific=True)
    print(built)
    """
).replace("TESTS", repr(str(TESTS)))


def test_a_source_is_compiled_once_per_process_and_build() -> None:
    """compile_module answers a source it has built with the same module (registry, autotuner and
    the wgmma_tma builds rely on it), and builds for this GPU alone apart."""
    result = subprocess.run([sys.executable, "-c", COMPILE_ONCE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "['sm_90', 'sm_90', 'sm_90a']"
