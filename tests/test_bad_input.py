"""Everything a user can get wrong raises a clear Python exception that names the
problem, and the process stays usable afterwards (a CPU op runs)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import DEVICES, assert_close

import minitorch_cuda as mt


def still_usable(device: str = "cpu") -> None:
    t = mt.tensor([[1.0, 2.0], [3.0, 4.0]], device)
    assert_close((t @ t + 1.0).sum(), 58.0, 0, 0, "an op after the error")
    if device != "cpu":
        still_usable("cpu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda d: mt.ones((2, 3), d) @ mt.ones((2, 3), d), ValueError, r"inner sizes 3 and 2"),
        (
            lambda d: mt.ones((2, 3), d).matmul(mt.ones((2, 3), d), transpose_b=True) @ mt.ones((3, 1), d),
            ValueError,
            "do not match",
        ),
        (lambda d: mt.ones((2, 2, 3), d) @ mt.ones((3, 3, 2), d), ValueError, "batch"),
        (lambda d: mt.ones((3,), d) @ mt.ones((3, 1), d), ValueError, "at least 2-D"),
        (lambda d: mt.ones((2, 3), d) @ np.ones((3, 2)), TypeError, "expected a Tensor"),
        (lambda d: mt.ones((2, 3), d) + mt.ones((3, 2), d), ValueError, r"\(2, 3\) and \(3, 2\) do not broadcast"),
        (lambda d: mt.ones((2, 3), d) * mt.ones((2,), d), ValueError, "do not broadcast"),
        (lambda d: mt.ones((2, 3), d) / mt.ones((3, 2), d), ValueError, "div"),
        (lambda d: mt.ones((2, 3), d) + "1", TypeError, "got str"),
        (lambda d: mt.ones((2, 3), d) * None, TypeError, "got NoneType"),
        (lambda d: mt.ones((2, 3), d) + True, TypeError, "got bool"),
        (lambda d: mt.ones((2, 3), d) / 0, ZeroDivisionError, "scalar 0"),
        (lambda d: mt.ones((2, 3), d).reshape(4, 2), ValueError, r"cannot reshape \(2, 3\)"),
        (lambda d: mt.ones((2, 3), d).reshape(0, 6), ValueError, "positive"),
        (lambda d: mt.ones((2, 3), d).reshape(2.0, 3), TypeError, "integers"),
        (lambda d: mt.ones((3,), d).transpose(), ValueError, "at least 2 dimensions"),
        (lambda d: mt.ones((2, 3), d).sum(2), ValueError, "axis 2 is out of range"),
        (lambda d: mt.ones((2, 3), d).mean(-3), ValueError, "out of range"),
        (lambda d: mt.ones((2, 3), d).sum(1.0), ValueError, "axis"),
        (lambda d: mt.ones((2, 3), d).item(), ValueError, "one element"),
        (lambda d: mt.ones((2, 3), d).fill_("x"), TypeError, "fill_"),
        (lambda d: mt.ones((2, 3), d).assign(np.ones((3, 2))), ValueError, r"shape \(2, 3\)"),
        (lambda d: mt.cross_entropy_with_softmax(mt.ones((2, 3), d), mt.ones((2, 4), d)), ValueError, "one shape"),
        (lambda d: mt.cross_entropy_with_softmax(mt.ones((6,), d), mt.ones((6,), d)), ValueError, "2-D"),
    ],
    ids=lambda v: None,
)
def test_wrong_shapes_and_arguments(device, make, error, match):
    with pytest.raises(error, match=match):
        make(device)
    still_usable(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (np.ones(3, dtype=np.complex64), TypeError, "complex64"),
        (["a", "b"], TypeError, "<U1"),
        (np.array([object(), 1], dtype=object), TypeError, "object"),
        ([[1, 2], [3]], (TypeError, ValueError), None),
        (np.ones((0, 3)), ValueError, "empty"),
        ([], ValueError, "empty"),
    ],
    ids=["complex", "strings", "object", "ragged", "empty-array", "empty-list"],
)
def test_wrong_dtypes_and_empty_data(device, data, error, match):
    with pytest.raises(error, match=match):
        mt.tensor(data, device)
    still_usable(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("shape", "error"),
    [((0,), ValueError), ((2, 0), ValueError), ((-1, 3), ValueError), ((2.5,), TypeError), (("2",), TypeError)],
)
def test_bad_creation_shapes(device, shape, error):
    for make in (lambda: mt.zeros(shape, device), lambda: mt.randn(shape, device=device)):
        with pytest.raises(error, match="shape|dimension"):
            make()
    with pytest.raises(TypeError, match="full"):
        mt.full((2,), "1", device)
    still_usable(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        (4, IndexError, "row 4 is out of range for 4 rows"),
        (-5, IndexError, "out of range"),
        (slice(3, 1), IndexError, "selects no rows"),
        (slice(4, None), IndexError, "selects no rows"),
        (slice(0, 4, 2), IndexError, "step-1"),
        ([], IndexError, "non-empty"),
        ([0, 4], IndexError, r"\[-4, 4\)"),
        ([-5], IndexError, "must lie in"),
        ([0.5, 1.0], IndexError, "float64"),
        ([[0, 1]], IndexError, "1-D"),
        ((0, 6), IndexError, "out of range for shape"),
        ((0,), IndexError, "one integer per axis"),
        ((0, slice(None)), IndexError, "one integer per axis"),
    ],
    ids=repr,
)
def test_bad_indices(device, index, error, match):
    t = mt.ones((4, 6), device)
    with pytest.raises(error, match=match):
        t[index]
    still_usable(device)


@pytest.mark.gpu
def test_mixed_devices():
    a, b = mt.ones((2, 2)), mt.ones((2, 2), "cuda", requires_grad=True)
    for op in (lambda: a + b, lambda: b * a, lambda: a @ b, lambda: mt.cross_entropy_with_softmax(b, a)):
        with pytest.raises(ValueError, match="different devices"):
            op()
    with pytest.raises(ValueError, match="on cuda"):
        (b * 2.0).sum().backward(mt.ones((), "cpu"))
    with pytest.raises(ValueError, match="one device"):
        mt.optim.SGD([mt.ones(2, requires_grad=True), mt.ones(2, "cuda", requires_grad=True)], lr=0.1)
    still_usable("cuda")


def test_unknown_device():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        mt.zeros((2,), device="tpu")
    still_usable()


@pytest.mark.skipif(mt.cuda_available(), reason="needs a machine WITHOUT CUDA")
def test_cuda_requested_without_a_gpu():
    reason = mt.cuda_unavailable_reason()
    assert reason, "cuda_unavailable_reason() must say why"
    for make in (
        lambda: mt.zeros((2, 2), device="cuda"),
        lambda: mt.tensor([1.0], device=mt.Device("cuda")),
        lambda: mt.ones((2,)).to("cuda"),
        lambda: mt.randn((2,), device="cuda"),
    ):
        with pytest.raises(mt.CudaUnavailableError) as info:
            make()
        message = str(info.value)
        assert message.startswith("CUDA was requested but cannot be used") and reason in message
        assert message.count("\n") == 0 or len(message) < 400
    assert not mt.cuda_available()
    mt.synchronize()  # a no-op without CUDA work
    still_usable()


@pytest.mark.parametrize("stage", [-1, mt.MAX_STAGE + 1, 100])
def test_bad_stage_numbers(stage):
    with pytest.raises(ValueError, match=f"stage must be in 0..{mt.MAX_STAGE}, got {stage}"):
        mt.set_stage(stage)
    with pytest.raises(ValueError, match="stage must be in"), mt.use_stage(stage):
        pass
    assert mt.get_stage() == mt.DEFAULT_STAGE
    still_usable()


@pytest.mark.parametrize("stage", [1.0, "3", True, None])
def test_stage_must_be_an_int(stage):
    with pytest.raises(TypeError, match="stage must be an int"):
        mt.set_stage(stage)
    assert mt.get_stage() == mt.DEFAULT_STAGE


def test_use_stage_restores_after_an_error():
    with pytest.raises(RuntimeError), mt.use_stage(2):
        assert mt.get_stage() == 2
        raise RuntimeError("inside")
    assert mt.get_stage() == mt.DEFAULT_STAGE


def test_bad_optimizer_arguments():
    p = mt.ones((3,), requires_grad=True)
    cases = [
        (lambda: mt.optim.SGD([], lr=0.1), ValueError, "no parameters"),
        (lambda: mt.optim.SGD([mt.ones(3)], lr=0.1), TypeError, "requires_grad=True"),
        (lambda: mt.optim.SGD([np.ones(3)], lr=0.1), TypeError, "Tensor"),
        (lambda: mt.optim.SGD([p], lr=0), ValueError, "learning rate"),
        (lambda: mt.optim.SGD([p], lr=-1e-3), ValueError, "learning rate"),
        (lambda: mt.optim.SGD([p], lr="fast"), ValueError, "learning rate"),
        (lambda: mt.optim.RmsProp([p], lr=1e-3, decay=1.0), ValueError, "decay"),
        (lambda: mt.optim.RmsProp([p], lr=1e-3, decay=-0.1), ValueError, "decay"),
        (lambda: mt.optim.SGD([p], lr=0.1).clip_gradients(0.0), ValueError, "max_norm"),
        (lambda: mt.optim.SGD([p], lr=0.1).clip_gradients("1"), ValueError, "max_norm"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()
    still_usable()
