"""The CUDA modules import and expose the CPU backend's op names, even where PyCUDA is missing.

Without a GPU nothing in ``minitorch_cuda.cuda`` can run, but a misplaced
import or a missing op would only surface on the GPU machine. A subprocess
with a stand-in ``pycuda`` (no device behind it) catches those on every CI run.
"""

import subprocess
import sys
import textwrap

STUB_AND_IMPORT = textwrap.dedent(
    """
    import sys, types
    driver = types.ModuleType("pycuda.driver")
    driver.Error = driver.CompileError = driver.MemoryError = driver.LogicError = type("Error", (Exception,), {})
    driver.init = lambda: None
    driver.Device = type("Device", (), {"count": staticmethod(lambda: 1)})
    driver.Context = type("Context", (), {"get_device": staticmethod(lambda: None)})
    driver.device_attribute = types.SimpleNamespace()
    compiler = types.ModuleType("pycuda.compiler")
    compiler.SourceModule = object
    package = types.ModuleType("pycuda")
    package.driver, package.compiler = driver, compiler
    sys.modules.update({"pycuda": package, "pycuda.driver": driver, "pycuda.compiler": compiler,
                        "pycuda.autoprimaryctx": types.ModuleType("pycuda.autoprimaryctx")})

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
)


def test_cuda_backend_imports_with_every_cpu_op() -> None:
    result = subprocess.run([sys.executable, "-c", STUB_AND_IMPORT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
