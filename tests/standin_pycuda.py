"""A stand-in ``pycuda`` with no device behind it, for subprocesses of the tests.

``import standin_pycuda`` (before anything imports pycuda) puts fake
``pycuda``, ``pycuda.driver``, ``pycuda.compiler`` and ``pycuda.autoprimaryctx``
modules into ``sys.modules``, and a ``cuda.bindings.driver`` with the few graph
calls stage 11 makes, the tensor-map encoding and the launch of a kernel taking
structures by value (stage 12's TMA route). Every driver call succeeds and does nothing:
allocations hand out distinct fake addresses, kernels compile to functions
whose launches are no-ops, device-to-host copies fill the host array with 0.5.
Nothing is computed, so results mean nothing; what the framework's Python does
(which kernels it launches, how often it copies, syncs and allocates) is real.
"""

from __future__ import annotations

import itertools
import os
import sys
import types


class Error(Exception):
    pass


_addresses = itertools.count(1 << 20, 1 << 12)  # 4 KB apart: every address 16-byte aligned


class _Allocation:
    def __init__(self, nbytes: int):
        self.address = next(_addresses)

    def __int__(self) -> int:
        return self.address

    def free(self) -> None:
        pass


class _Device:
    def compute_capability(self) -> tuple[int, int]:
        return (9, 0)

    def get_attribute(self, attribute) -> int:
        return 132  # answers every attribute query with the H200's SM count

    def name(self) -> str:
        return "stand-in device"

    def total_memory(self) -> int:
        return 1 << 37


class _Context:
    @staticmethod
    def get_device() -> _Device:
        return _Device()

    @staticmethod
    def synchronize() -> None:
        pass


class _Event:
    def record(self, stream=None):
        return self

    def synchronize(self) -> None:
        pass

    def time_since(self, other) -> float:
        return 0.001


class _Function:
    num_regs, local_size_bytes, shared_size_bytes = 32, 0, 0

    def prepare(self, signature):
        return self

    def prepared_async_call(self, *args, shared_size=0) -> None:
        pass

    def set_attribute(self, attribute, value) -> None:
        pass

    def prepared_call(self, *args) -> None:
        pass

    def get_attribute(self, attribute) -> int:
        return 32


class _SourceModule:
    def __init__(self, source, *args, **kwargs):
        pass

    def get_function(self, name: str) -> _Function:
        return _Function()


class _Attributes:
    def __getattr__(self, name: str) -> str:
        return name  # drv.device_attribute.X is only ever passed back to get_attribute


def _fill_half(host, src) -> None:
    host[...] = 0.5


driver = types.ModuleType("pycuda.driver")
driver.Error = driver.CompileError = driver.MemoryError = driver.LogicError = Error
driver.init = lambda: None
driver.Device = type("Device", (), {"count": staticmethod(lambda: 1)})
driver.Context = _Context
driver.device_attribute = _Attributes()
driver.function_attribute = _Attributes()
driver.mem_alloc = _Allocation
driver.memcpy_htod = lambda dst, host: None
driver.memcpy_dtoh = _fill_half
driver.memcpy_dtod = lambda dst, src, nbytes: None
driver.memcpy_dtod_async = lambda dst, src, nbytes, stream=None: None
driver.Event = _Event
driver.Stream = lambda *args, **kwargs: types.SimpleNamespace(handle=1, synchronize=lambda: None)

compiler = types.ModuleType("pycuda.compiler")
compiler.SourceModule = _SourceModule
compiler.compile = lambda source, **kwargs: b"stand-in cubin"  # what runtime.DriverKernel loads

# cuda-bindings, as graphs.py uses it: calls return (CUresult, *values).
bindings = types.ModuleType("cuda.bindings.driver")
bindings.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
bindings.CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
bindings.CUstream = lambda handle: handle
bindings.cuStreamBeginCapture = lambda stream, mode: (0,)
bindings.cuStreamEndCapture = lambda stream: (0, "graph")
bindings.cuGraphInstantiate = lambda graph, flags: (0, "executable graph")
bindings.cuGraphLaunch = lambda graph, stream: (0,)
bindings.cuGraphExecDestroy = bindings.cuGraphDestroy = lambda handle: (0,)
bindings.cuGetErrorName = lambda err: (0, b"CUDA_ERROR_STANDIN")
# ... as runtime.DriverKernel loads and launches a kernel that takes a structure by value.
bindings.CUfunction_attribute = _Attributes()
bindings.cuModuleLoadData = lambda image: (0, "module")
bindings.cuModuleGetFunction = lambda module, name: (0, "function")
bindings.cuFuncSetAttribute = lambda function, attribute, value: (0,)
bindings.cuLaunchKernel = lambda *args: (0,)
# ... and as tensor_map.py encodes a TMA descriptor: 128 bytes of zeros.
bindings.cuuint64_t = bindings.cuuint32_t = int
for _enum, _name in [("CUtensorMapDataType", "DATA_TYPE_FLOAT32"), ("CUtensorMapInterleave", "INTERLEAVE_NONE"),
                     ("CUtensorMapSwizzle", "SWIZZLE_128B"), ("CUtensorMapL2promotion", "L2_PROMOTION_L2_256B"),
                     ("CUtensorMapFloatOOBfill", "FLOAT_OOB_FILL_NONE")]:  # fmt: skip
    setattr(bindings, _enum, types.SimpleNamespace(**{"CU_TENSOR_MAP_" + _name: _name}))
bindings.cuTensorMapEncodeTiled = lambda *args: (0, types.SimpleNamespace(opaque=[0] * 16))

package = types.ModuleType("pycuda")
package.driver, package.compiler = driver, compiler
sys.modules.update(
    {
        "pycuda": package,
        "pycuda.driver": driver,
        "pycuda.compiler": compiler,
        "pycuda.autoprimaryctx": types.ModuleType("pycuda.autoprimaryctx"),
        "cuda": types.ModuleType("cuda"),
        "cuda.bindings": types.SimpleNamespace(driver=bindings),
        "cuda.bindings.driver": bindings,
    }
)

# The stand-in is the device: a process that imports it is never the emulator's, even where the
# shell running the tests set MINITORCH_CUDA_EMULATE=1 for the emulated ones.
os.environ.pop("MINITORCH_CUDA_EMULATE", None)
