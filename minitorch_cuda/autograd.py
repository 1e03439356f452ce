"""Reverse-mode automatic differentiation: graph nodes and the backward pass.

Each op is a ``Function`` with ``forward(backend, *arrays)`` and
``backward(backend, grad)`` working on backend arrays (numpy or device). When
any input requires a gradient, the output remembers the function that made it;
``Tensor.backward()`` walks that graph once in reverse topological order.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tensor import Tensor

_grad_enabled = True


def is_grad_enabled() -> bool:
    return _grad_enabled


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Run a block without recording the graph (evaluation, optimizer steps)."""
    global _grad_enabled
    previous, _grad_enabled = _grad_enabled, False
    try:
        yield
    finally:
        _grad_enabled = previous


class Function:
    """One node of the graph. Subclasses define forward and backward."""

    __slots__ = ("inputs", "saved")

    def forward(self, backend, *arrays, **kwargs):
        raise NotImplementedError

    def backward(self, backend, grad) -> tuple:
        """Gradients for each input (None where an input needs none)."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs: Tensor, **kwargs) -> Tensor:
        Tensor = _tensor_class()
        device = inputs[0].device
        for other in inputs[1:]:
            if other.device != device:
                raise ValueError(
                    f"{cls.__name__}: tensors are on different devices ({device} and {other.device}); "
                    "move one with .to(device) first"
                )
        fn = cls()
        out = Tensor(fn.forward(inputs[0].backend, *(t.data for t in inputs), **kwargs), device)
        if _grad_enabled and any(t.requires_grad for t in inputs):
            fn.inputs = inputs
            out.requires_grad = True
            out._node = fn
        return out


@functools.cache
def _tensor_class() -> type:
    """tensor.Tensor, imported on first use (tensor imports this module); cached because an
    import statement in ``apply`` cost every op microseconds (6 of a 10 us batch slice, measured
    on a development machine)."""
    from .tensor import Tensor

    return Tensor


def _topological_order(root: Tensor) -> list[Tensor]:
    """Tensors reachable from ``root``, each after all the tensors it was made from."""
    order, visited = [], set()
    stack = [(root, False)]
    while stack:
        tensor, expanded = stack.pop()
        if expanded:
            order.append(tensor)
            continue
        if id(tensor) in visited:
            continue
        visited.add(id(tensor))
        stack.append((tensor, True))
        if tensor._node is not None:
            stack.extend((t, False) for t in tensor._node.inputs if t.requires_grad)
    return order


def backward(root: Tensor, grad) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires it."""
    from .tensor import Tensor

    backend = root.backend
    pending = {id(root): grad}
    for tensor in reversed(_topological_order(root)):
        g = pending.pop(id(tensor), None)
        if g is None:
            continue
        node = tensor._node
        if node is None:  # a leaf: parameters and inputs created by the user
            if tensor.grad is None:
                tensor.grad = Tensor(g, tensor.device)
            else:
                tensor.grad.data = backend.binary("add", tensor.grad.data, g, "same")
            continue
        for inp, g_in in zip(node.inputs, node.backward(backend, g)):
            if g_in is None or not inp.requires_grad:
                continue
            if inp._node is None and inp.grad is None and backend.shares_memory(g_in, g):
                g_in = backend.copy(g_in)  # a leaf's grad is updated in place later: own it
            previous = pending.get(id(inp))
            pending[id(inp)] = g_in if previous is None else backend.binary("add", previous, g_in, "same")
