"""Optimizers: gradient clipping, SGD and RmsProp, updating parameters in place."""

from __future__ import annotations

import numbers

from .tensor import Tensor


class Optimizer:
    def __init__(self, params: list[Tensor], lr: float):
        params = list(params)
        if not params:
            raise ValueError("the optimizer got no parameters")
        if not all(isinstance(p, Tensor) and p.requires_grad for p in params):
            raise TypeError("every parameter must be a Tensor with requires_grad=True")
        if len({p.device for p in params}) != 1:
            raise ValueError("all parameters must live on one device")
        if not isinstance(lr, numbers.Real) or lr <= 0:
            raise ValueError(f"learning rate must be a positive number, got {lr!r}")
        self.params, self.lr = params, float(lr)
        self.backend = params[0].backend

    def _with_grads(self) -> list[Tensor]:
        return [p for p in self.params if p.grad is not None]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def clip_gradients(self, max_norm: float) -> None:
        """Scale all gradients together so that their global L2 norm is at most ``max_norm``."""
        if not isinstance(max_norm, numbers.Real) or max_norm <= 0:
            raise ValueError(f"max_norm must be a positive number, got {max_norm!r}")
        grads = [p.grad.data for p in self._with_grads()]
        if grads:
            self.backend.clip_gradients(grads, float(max_norm))

    def step(self) -> None:
        raise NotImplementedError

    def clip_and_step(self, max_norm: float) -> None:
        """``clip_gradients(max_norm)`` then ``step()``; optimizers with a fused kernel do both at once."""
        self.clip_gradients(max_norm)
        self.step()


class SGD(Optimizer):
    def step(self) -> None:
        for p in self._with_grads():
            self.backend.sgd_step(p.data, p.grad.data, self.lr)


class RmsProp(Optimizer):
    """v = decay * v + (1 - decay) * g^2;  p -= lr * g / (sqrt(v) + eps)."""

    def __init__(self, params: list[Tensor], lr: float = 1e-3, decay: float = 0.999, eps: float = 1e-8):
        super().__init__(params, lr)
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay!r}")
        self.decay, self.eps = float(decay), float(eps)
        self.state = [self.backend.full(p.shape, 0.0) for p in self.params]

    def step(self) -> None:
        if self.backend.fusion_enabled():
            self._fused_step(None)
            return
        for p, v in zip(self.params, self.state):
            if p.grad is not None:
                self.backend.rmsprop_step(p.data, p.grad.data, v, self.lr, self.decay, self.eps)

    def clip_and_step(self, max_norm: float) -> None:
        if not self.backend.fusion_enabled():
            super().clip_and_step(max_norm)
            return
        if not isinstance(max_norm, numbers.Real) or max_norm <= 0:
            raise ValueError(f"max_norm must be a positive number, got {max_norm!r}")
        self._fused_step(float(max_norm))

    def _fused_step(self, max_norm: float | None) -> None:
        """Clipping (if ``max_norm``) and the update of every parameter in two launches."""
        pairs = [(p, v) for p, v in zip(self.params, self.state) if p.grad is not None]
        if pairs:
            params, grads, states = [p.data for p, _ in pairs], [p.grad.data for p, _ in pairs], [v for _, v in pairs]
            self.backend.rmsprop_multi(params, grads, states, self.lr, self.decay, self.eps, max_norm)
