"""Layers and the loss: the building blocks of the blog's MLP."""

from __future__ import annotations

import math

from . import functions as F
from .device import Device, as_device
from .tensor import Tensor, randn, zeros


class Module:
    def parameters(self) -> list[Tensor]:
        return []

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError


class FeedForward(Module):
    """``y = x @ W + b`` with W of shape (in, out), Xavier-normal initialized."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: str | Device | None = None,
        seed: int | None = None,
    ):
        device = as_device(device)
        std = math.sqrt(2.0 / (in_features + out_features))  # Glorot & Bengio (2010)
        self.weight = randn((in_features, out_features), std, seed, device, requires_grad=True)
        self.bias = zeros((out_features,), device, requires_grad=True) if bias else None

    def parameters(self) -> list[Tensor]:
        return [self.weight] + ([self.bias] if self.bias is not None else [])

    def forward(self, x: Tensor, relu: bool = False) -> Tensor:
        """``x @ W + b`` (then ReLU if asked). Where the backend fuses (CUDA, stage 10 on)
        a 2-D input takes one fused op; otherwise the separate ops of the blog."""
        if x.backend.fusion_enabled() and x.ndim == 2 and x.shape[1] == self.weight.shape[0]:
            params = (self.weight,) if self.bias is None else (self.weight, self.bias)
            return F.FusedLinear.apply(x, *params, relu=relu)
        y = x @ self.weight
        y = y + self.bias if self.bias is not None else y
        return y.relu() if relu else y


Linear = FeedForward


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Softmax(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.softmax()


class Sequential(Module):
    def __init__(self, *layers: Module):
        self.layers = list(layers)

    def parameters(self) -> list[Tensor]:
        return [p for layer in self.layers for p in layer.parameters()]

    def forward(self, x: Tensor) -> Tensor:
        i = 0
        while i < len(self.layers):
            layer = self.layers[i]
            follows = self.layers[i + 1] if i + 1 < len(self.layers) else None
            if isinstance(layer, FeedForward) and isinstance(follows, ReLU) and x.backend.fusion_enabled():
                x = layer.forward(x, relu=True)  # one fused launch for the pair
                i += 2
                continue
            x = layer(x)
            i += 1
        return x


def cross_entropy_with_softmax(logits: Tensor, target: Tensor) -> Tensor:
    """Mean cross-entropy of softmax(logits) against (one-hot or soft) targets."""
    if logits.ndim != 2 or logits.shape != target.shape:
        raise ValueError(
            f"cross entropy needs 2-D logits and targets of one shape, got {logits.shape} and {target.shape}"
        )
    return F.SoftmaxCrossEntropy.apply(logits, target)


class CrossEntropyWithSoftmax:
    """Loss on raw logits: softmax and cross-entropy in one op, stable and cheap to differentiate."""

    def __call__(self, logits: Tensor, target: Tensor) -> Tensor:
        return cross_entropy_with_softmax(logits, target)
