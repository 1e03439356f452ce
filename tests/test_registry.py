"""Kernel overrides: a user's kernel replaces a built-in one for a scope; wrong
signatures, broken sources and unknown names fail clearly. Signature parsing is
pure Python and tested without a GPU."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import assert_close

import minitorch_cuda as mt
from minitorch_cuda.cuda.kernel_table import SPECS, entry_params, prepare_signature

RELU_OK = """
extern "C" __global__ void ew_relu(float* out, const float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(a[i], 0.0f);
}
"""

# Deliberately wrong (the identity), so that a test can see which kernel ran.
MY_IDENTITY = """
extern "C" __global__ void my_identity(float* out,
                                       const float* a,
                                       int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i];
}
"""

WRONG_PARAMS = """
extern "C" __global__ void ew_relu(float* out, const float* a, float n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (int)n) out[i] = a[i];
}
"""

DOES_NOT_COMPILE = """extern "C" __global__ void ew_relu(float* out, const float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = max(a[i], 0.0f) + undefined_name;
}
"""

X = np.array([[-2.0, -0.5, 0.0, 0.5, 2.0]], dtype=np.float32)


# --- pure: no GPU needed ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ("float* out, const float* a, int n", "PPi"),
        ("float *out, const float *__restrict__ a, float alpha, float beta, int n", "PPffi"),
        ("float* out, int n, float std, unsigned int seed", "PifI"),
        ("const int* idx, unsigned n", "PI"),
        ("", ""),
        ("  float x ,  int   y  ", "fi"),
    ],
)
def test_prepare_signature(params, expected):
    assert prepare_signature(params) == expected


@pytest.mark.parametrize("params", ["double x", "float* out, size_t n", "bool flag", "float2 v"])
def test_prepare_signature_rejects_unsupported_types(params):
    with pytest.raises(TypeError, match="unsupported kernel parameter"):
        prepare_signature(params)


def test_entry_params():
    assert entry_params(MY_IDENTITY, "my_identity") == "float* out, const float* a, int n"
    assert entry_params(RELU_OK, "ew_relu") == "float* out, const float* a, int n"
    with pytest.raises(ValueError, match=r"no `__global__ void ew_exp\(...\)`"):
        entry_params(RELU_OK, "ew_exp")
    with pytest.raises(ValueError, match="my_iden"):
        entry_params(MY_IDENTITY, "my_iden")  # a prefix is not the name


LAUNCH_ONLY = {"floor_empty"}  # chapter 21's empty kernel: the cost of a launch and nothing else


def test_every_spec_has_a_valid_signature():
    for name, spec in SPECS.items():
        if name in LAUNCH_ONLY:
            assert spec.signature == "", f"{name} is there to be launched, with nothing to pass"
            continue
        assert re.fullmatch(r"(?:[PifI]|128s)+", spec.signature), (name, spec.signature)
        assert spec.signature.count("P") >= 1, f"{name} writes nothing"


# --- GPU ------------------------------------------------------------------------------


def _relu_out() -> np.ndarray:
    return mt.tensor(X, "cuda").relu().numpy()


@pytest.mark.gpu
def test_override_as_context_manager():
    from minitorch_cuda.cuda import registry

    builtin = registry.get("ew_relu")
    with mt.override("ew_relu", RELU_OK) as handle:
        assert registry.get("ew_relu") is handle.kernel
        assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "overridden relu")
    assert registry.get("ew_relu") is builtin
    with registry.override("ew_relu", MY_IDENTITY, entry="my_identity"):
        assert_close(_relu_out(), X, 0, 0, "the user's (identity) kernel ran")
    assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "built-in relu after the block")


@pytest.mark.gpu
def test_override_is_restored_when_the_block_raises():
    from minitorch_cuda.cuda import registry

    builtin = registry.get("ew_relu")
    with pytest.raises(ZeroDivisionError), registry.override("ew_relu", MY_IDENTITY, entry="my_identity"):
        assert_close(_relu_out(), X, 0, 0, "inside")
        1 / 0  # noqa: B018
    assert registry.get("ew_relu") is builtin
    assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "after the error")


@pytest.mark.gpu
def test_override_handle_and_restore(tmp_path):
    from minitorch_cuda.cuda import registry

    path = tmp_path / "identity.cu"
    path.write_text(MY_IDENTITY)
    handle = mt.override("ew_relu", path=path, entry="my_identity")
    try:
        assert_close(_relu_out(), X, 0, 0, "handle active")
        inner = registry.override("ew_relu", RELU_OK)  # nested: the innermost wins
        assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "inner override")
        inner.restore()
        assert_close(_relu_out(), X, 0, 0, "outer override again")
    finally:
        handle.restore()
    handle.restore()  # idempotent
    assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "restored")
    registry.override("ew_relu", MY_IDENTITY, entry="my_identity")
    registry.restore_all()
    assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "after restore_all")


@pytest.mark.gpu
def test_override_with_wrong_parameters():
    from minitorch_cuda.cuda import registry

    with pytest.raises(TypeError) as info:
        mt.override("ew_relu", WRONG_PARAMS)
    message = str(info.value)
    assert SPECS["ew_relu"].params in message and "float n" in message, message
    with pytest.raises(ValueError, match="no `__global__ void ew_relu"):
        mt.override("ew_relu", MY_IDENTITY)  # entry defaults to the kernel's name
    with pytest.raises(ValueError, match="exactly one of source=, path= or module="):
        registry.override("ew_relu")
    with pytest.raises(ValueError, match="empty"):
        registry.override("ew_relu", "   ")
    assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "nothing was replaced")


@pytest.mark.gpu
def test_override_that_does_not_compile():
    from minitorch_cuda.cuda.runtime import KernelCompileError

    with pytest.raises(KernelCompileError) as info:
        mt.override("ew_relu", DOES_NOT_COMPILE)
    message = str(info.value)
    assert "undefined_name" in message and "error" in message, message
    assert ">>    3 |" in message, f"the failing line is shown with its number:\n{message}"
    assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "the built-in still runs")


@pytest.mark.gpu
def test_unknown_kernel_name():
    from minitorch_cuda.cuda import registry

    with pytest.raises(KeyError, match="no kernel named 'ew_gelu'.*ew_relu"):
        mt.override("ew_gelu", RELU_OK)
    with pytest.raises(KeyError, match="ew_gelu"):
        registry.get("ew_gelu")
    assert_close(_relu_out(), np.maximum(X, 0), 0, 0, "still usable")


@pytest.mark.gpu_only  # every kernel, the tensor-core ones included
@pytest.mark.gpu
def test_every_builtin_kernel_compiles_and_loads():
    from minitorch_cuda.cuda import registry

    for name in SPECS:
        assert registry.get(name).name == name


# A ReLU that scales its output by SCALE (1 unless a build defines it): which source and which
# defines a variant was built from show in what it computes.
RELU_SCALED = """
#ifndef SCALE
#define SCALE 1
#endif
extern "C" __global__ void ew_relu(float* out, const float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = SCALE * fmaxf(a[i], 0.0f);
}
"""


def _run(kernel) -> np.ndarray:
    from minitorch_cuda.cuda import backend, launchers

    x = backend.from_numpy(X.ravel())
    out = backend.empty(x.shape)
    launchers.elementwise(kernel, X.size, out, x, X.size)
    return backend.to_numpy(out)


@pytest.mark.gpu
def test_a_variant_is_built_from_the_source_that_runs_now_with_its_defines():
    from minitorch_cuda.cuda import registry

    relu = np.maximum(X.ravel(), 0)
    with mt.override("ew_relu", RELU_SCALED):
        doubled = registry.variant("ew_relu", {"SCALE": 2})
        assert registry.variant("ew_relu", {"SCALE": 2}) is doubled, "built once per process"
        assert_close(_run(doubled), 2 * relu, 0, 0, "the override's source with SCALE 2")
        assert_close(_run("ew_relu"), relu, 0, 0, "the override itself, without the define")
    assert registry.variant("ew_relu", {"SCALE": 3}) is not doubled
    assert_close(_run(registry.variant("ew_relu", {"SCALE": 3})), relu, 0, 0, "the built-in ignores SCALE")


@pytest.mark.gpu
def test_a_variant_of_an_override_given_as_a_module_is_refused():
    from minitorch_cuda.cuda import registry
    from minitorch_cuda.cuda.runtime import compile_module

    module = compile_module(RELU_OK, "a compiled relu")
    with registry.override("ew_relu", module=module), pytest.raises(ValueError, match="cannot be built again"):
        registry.variant("ew_relu", {"SCALE": 2})
