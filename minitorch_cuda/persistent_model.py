"""Stage 13's model check: whether a model, its loss and its optimizer are of the kind the one-kernel
training step computes, and that step built for them.

The kernel (``cuda/persistent_step.py``) computes an ``nn.Sequential`` of FeedForward layers with
biases, each but the last followed by at most one ReLU or Sigmoid, under ``CrossEntropyWithSoftmax``,
with ``RmsProp`` or ``SGD`` over exactly the model's parameters. ``persistent_step`` checks that,
raising ``DoesNotFit`` naming the first part that does not fit, and hands the backend the layers as
arrays: the backend knows no ``nn`` or ``optim``. It needs CUDA: the trainer imports it only where
the backend runs whole steps as one kernel (``backend.persistent_step_enabled``).
"""

from __future__ import annotations

from . import nn, optim
from .cuda.persistent_step import DoesNotFit, PersistentStep, StepLayer

__all__ = ["DoesNotFit", "layer_chain", "persistent_step"]

ACTIVATIONS = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid"}  # the activations the kernel applies


def layer_chain(net: nn.Module) -> list[tuple[nn.FeedForward, str | None]]:
    """(layer, activation after it) per FeedForward of ``net``; DoesNotFit names the first misfit."""
    if type(net) is not nn.Sequential:
        raise DoesNotFit(f"the model is a {type(net).__name__}, not an nn.Sequential of FeedForward layers")
    chain: list[list] = []
    for i, module in enumerate(net.layers):
        kind = type(module)
        where = f"layer {i} ({kind.__name__})"
        if kind is nn.FeedForward:
            if module.bias is None:
                raise DoesNotFit(f"{where} has no bias")
            if chain and chain[-1][0].weight.shape[1] != module.weight.shape[0]:
                raise DoesNotFit(
                    f"{where} takes {module.weight.shape[0]} features, its input has {chain[-1][0].weight.shape[1]}"
                )
            chain.append([module, None])
        elif kind in ACTIVATIONS and i > 0 and type(net.layers[i - 1]) is nn.FeedForward:
            chain[-1][1] = ACTIVATIONS[kind]
        else:
            raise DoesNotFit(f"{where} is not a FeedForward or a ReLU or Sigmoid right after one")
    if not chain:
        raise DoesNotFit("the model has no FeedForward layer")
    if chain[-1][1]:
        raise DoesNotFit(
            f"the last layer ({type(net.layers[-1]).__name__}) is not a FeedForward: the loss takes its logits"
        )
    return [(layer, act) for layer, act in chain]


def _check_loss_and_optimizer(net: nn.Module, loss_fn, optimizer) -> None:
    if type(loss_fn) is not nn.CrossEntropyWithSoftmax:
        raise DoesNotFit(f"the loss is a {type(loss_fn).__name__}, not CrossEntropyWithSoftmax")
    if type(optimizer) not in (optim.RmsProp, optim.SGD):
        raise DoesNotFit(f"the optimizer is a {type(optimizer).__name__}, not RmsProp or SGD")
    params = net.parameters()
    if len(params) != len(optimizer.params) or any(p is not q for p, q in zip(params, optimizer.params)):
        raise DoesNotFit("the optimizer does not update exactly the model's parameters, in their order")
    if not all(p.device.kind == "cuda" and p.data.is_contiguous() for p in params):
        raise DoesNotFit("a parameter is not a contiguous CUDA tensor")


def persistent_step(
    net: nn.Module, loss_fn, optimizer, max_norm: float, max_rows: int, blocks: int = 0, split: bool = True,
    stage: bool = True, wide: bool = True,
) -> PersistentStep:  # fmt: skip
    """Stage 13's step of ``net`` under ``loss_fn`` and ``optimizer`` as one kernel, for up to
    ``max_rows`` rows a batch (``blocks``, ``split``, ``stage``, ``wide``: PersistentStep's); DoesNotFit
    names what the kernel does not compute."""
    chain = layer_chain(net)
    _check_loss_and_optimizer(net, loss_fn, optimizer)
    rmsprop = type(optimizer) is optim.RmsProp
    state = {id(p): v for p, v in zip(optimizer.params, optimizer.state)} if rmsprop else {}

    def states(layer: nn.FeedForward):
        return (state[id(layer.weight)], state[id(layer.bias)]) if rmsprop else None

    layers = [StepLayer(layer.weight.data, layer.bias.data, act, states(layer)) for layer, act in chain]
    return PersistentStep(layers, optimizer, rmsprop, max_norm, max_rows, blocks, split, stage, wide)
