"""The blog's MNIST benchmark protocol, shared by the benchmark, the tests and the book.

MLP 784-256-128-10 (ReLU), batch 64, CrossEntropyWithSoftmax,
RmsProp(lr=1e-4, decay=0.999), clip_gradients(1.0) every step, the loss read
back every step; the training split (90% of MNIST's 60,000 images) is uploaded
once and shuffled on the device every epoch.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import nn, optim
from .autograd import no_grad
from .data import load_mnist, one_hot, train_val_split
from .device import Device, as_device
from .tensor import Tensor, tensor


@dataclasses.dataclass(frozen=True)
class Protocol:
    hidden: tuple[int, ...] = (256, 128)
    activation: str = "relu"
    batch_size: int = 64
    lr: float = 1e-4
    decay: float = 0.999
    max_norm: float = 1.0
    seed: int = 0


@dataclasses.dataclass
class MnistOnDevice:
    x_train: Tensor
    y_train: Tensor  # one-hot
    x_val: Tensor
    x_test: Tensor
    labels_val: np.ndarray
    labels_test: np.ndarray


def load_to(device: str | Device, data_dir: str | Path | None = None) -> MnistOnDevice:
    """Read MNIST (from ``data_dir``, else as ``data.mnist_dir`` finds it), split 90/10
    and upload every split once."""
    device = as_device(device)
    x, labels, x_test, labels_test = load_mnist(data_dir)
    x_train, x_val, l_train, l_val = train_val_split(x, labels, 0.1, seed=42)
    return MnistOnDevice(
        tensor(x_train, device),
        tensor(one_hot(l_train), device),
        tensor(x_val, device),
        tensor(x_test, device),
        l_val,
        labels_test,
    )


def make_net(protocol: Protocol, device: str | Device, seed: int | None = None) -> nn.Sequential:
    sizes = (784, *protocol.hidden, 10)
    activation = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid}[protocol.activation]
    seed = protocol.seed if seed is None else seed
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.FeedForward(n_in, n_out, device=device, seed=seed + i))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class Trainer:
    """One network, its loss and optimizer, trained by the protocol."""

    def __init__(self, protocol: Protocol, device: str | Device, net: nn.Sequential | None = None):
        self.protocol = protocol
        self.net = net or make_net(protocol, device)
        self.loss_fn = nn.CrossEntropyWithSoftmax()
        self.optim = optim.RmsProp(self.net.parameters(), protocol.lr, protocol.decay)
        self.rng = np.random.default_rng(protocol.seed)
        self._graphed = None  # stage 11: the step captured in a CUDA graph, per batch shape
        self._persistent = None  # stage 13: the step as one kernel (False: the model does not fit)

    def step(self, xb: Tensor, yb: Tensor) -> float:
        """One training step and its loss, read back."""
        return self.queue_step(xb, yb)()

    def queue_step(self, xb: Tensor, yb: Tensor) -> Callable[[], float]:
        """Queue one training step; returns the call that reads its loss back (the one read-back
        per step: it waits for the device, or at stage 13 until the kernel hands the loss over,
        before the step's update is done). What the host does between the two runs while the
        device works (``epoch`` slices the next batch there); read the loss before queueing the
        next step, which may overwrite it."""
        persistent = self._persistent_step(xb)
        if persistent is not None:
            return persistent.queue(xb.data, yb.data)
        if xb.backend.graphs_enabled():
            if self._graphed is None:  # the graph sees device arrays; the step wraps them in tensors
                device = xb.device
                self._graphed = xb.backend.graphed_step(
                    lambda x, y: self.device_step(Tensor(x, device), Tensor(y, device)).data
                )
            return self._graphed.queue(xb.data, yb.data)  # replays the captured step
        return self.device_step(xb, yb).item

    def _persistent_step(self, xb: Tensor):
        """Stage 13's one-kernel step, where the backend runs whole steps as one kernel, built at the
        first such step for the model, loss and optimizer the trainer has then; None elsewhere or
        where the model does not fit (said once, in a warning naming the misfit: it trains with
        stage 12's kernels instead)."""
        if not xb.backend.persistent_step_enabled():
            return None
        if self._persistent is None:
            from .persistent_model import DoesNotFit, persistent_step

            try:
                self._persistent = persistent_step(
                    self.net, self.loss_fn, self.optim, self.protocol.max_norm, self.protocol.batch_size
                )
            except DoesNotFit as exc:
                warnings.warn(f"stage 13 cannot run this step as one kernel: {exc}; it runs on stage 12's kernels",
                              stacklevel=3)  # fmt: skip
                self._persistent = False
        return self._persistent or None

    def device_step(self, xb: Tensor, yb: Tensor) -> Tensor:
        """Everything of a step that stays on the device; returns the loss tensor."""
        loss = self.loss_fn(self.net(xb), yb)
        loss.backward()
        self.optim.clip_and_step(self.protocol.max_norm)
        self.optim.zero_grad()
        return loss

    def epoch(
        self,
        x: Tensor,
        y: Tensor,
        max_batches: int | None = None,
        order: np.ndarray | None = None,
        on_step: Callable[[float], None] | None = None,
    ) -> float:
        """Shuffle on the device (one gather of the whole split), then step through
        contiguous batches of it. Returns the mean loss. ``on_step(loss)`` is called
        after every step (a progress bar, for example). The next batch is sliced while the
        device runs the step before it (between queue_step and its read-back), so that the
        host's slicing is not on the path from one step to the next."""
        order = self.rng.permutation(len(x)) if order is None else order
        x_shuffled, y_shuffled = x[order], y[order]
        size = self.protocol.batch_size
        starts = list(range(0, len(x), size))[: max_batches or None]

        def batch(start: int) -> tuple[Tensor, Tensor]:
            stop = min(start + size, len(x))
            return x_shuffled[start:stop], y_shuffled[start:stop]

        total = 0.0
        read = self.queue_step(*batch(starts[0]))
        for i in range(len(starts)):
            following = batch(starts[i + 1]) if i + 1 < len(starts) else None
            loss = read()
            total += loss
            if on_step is not None:
                on_step(loss)
            if following is not None:
                read = self.queue_step(*following)
        return total / len(starts)


def accuracy(net: nn.Module, x: Tensor, labels: np.ndarray, batch: int = 2000) -> float:
    with no_grad():
        predictions = np.concatenate([net(x[i : i + batch]).numpy().argmax(axis=1) for i in range(0, len(x), batch)])
    return float((predictions == labels).mean())
