"""The benchmark protocol in PyTorch: the peers every stage is measured against.

Same network, initialization scheme, loss, optimizer, clipping and per-step
loss read-back as ``minitorch_cuda.train``; data uploaded once and shuffled on
the device every epoch. ``TorchTrainer`` runs eagerly; ``TorchGraphTrainer``
replays the whole step (forward, loss, backward, clipping, RmsProp) as one CUDA
graph, the peer of stages 11-13, which replay theirs.
"""

from __future__ import annotations

import time

import numpy as np

from .train import Protocol


def available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


class TorchTrainer:
    def __init__(self, protocol: Protocol, data, seed: int = 0):
        import torch

        self.torch, self.protocol = torch, protocol
        torch.manual_seed(seed)
        sizes = (784, *protocol.hidden, 10)
        layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
            linear = torch.nn.Linear(n_in, n_out)
            torch.nn.init.xavier_normal_(linear.weight)
            torch.nn.init.zeros_(linear.bias)
            layers.append(linear)
            if i < len(sizes) - 2:
                layers.append(torch.nn.ReLU() if protocol.activation == "relu" else torch.nn.Sigmoid())
        self.net = torch.nn.Sequential(*layers).cuda()
        self.optim = self.rmsprop()
        self.x = torch.from_numpy(data.x_train.numpy()).cuda()
        self.y = torch.from_numpy(data.y_train.numpy()).cuda()
        self.x_test = torch.from_numpy(data.x_test.numpy()).cuda()
        self.labels_test = data.labels_test

    def rmsprop(self, capturable: bool = False):
        """The protocol's RmsProp over the network's parameters. ``capturable``: its step count
        stays on the device, so that a CUDA graph can hold the update (no read-back to the host)."""
        p = self.protocol
        return self.torch.optim.RMSprop(self.net.parameters(), lr=p.lr, alpha=p.decay, eps=1e-8, capturable=capturable)

    def epoch(self, max_batches: int | None = None) -> float:
        torch, p = self.torch, self.protocol
        order = torch.randperm(len(self.x), device="cuda")
        x, y = self.x[order], self.y[order]
        total, steps = 0.0, 0
        for start in range(0, len(x), p.batch_size):
            xb, yb = x[start : start + p.batch_size], y[start : start + p.batch_size]
            loss = torch.nn.functional.cross_entropy(self.net(xb), yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), p.max_norm)
            self.optim.step()
            self.optim.zero_grad(set_to_none=True)
            total += loss.item()
            steps += 1
            if steps == max_batches:
                break
        return total / steps

    def accuracy(self) -> float:
        with self.torch.no_grad():
            predictions = self.net(self.x_test).argmax(dim=1).cpu().numpy()
        return float((predictions == self.labels_test).mean())


class TorchGraphTrainer(TorchTrainer):
    """The protocol's step captured once as a CUDA graph and replayed per batch.

    A graph has fixed shapes, so the batch lives in static buffers and the loss is
    a weighted sum with weights 1/rows on the batch's rows: the ragged last batch
    (48 of 64 rows) zeroes the padding rows' weights, which is the mean over its 48
    rows, so every step replays the same graph. Copying the batch in and reading the
    loss back stay outside the graph, as the protocol's read-back requires."""

    def __init__(self, protocol: Protocol, data, seed: int = 0):
        super().__init__(protocol, data, seed)
        torch, batch = self.torch, protocol.batch_size
        self.optim = self.rmsprop(capturable=True)  # the update inside the graph
        self.static_x = self.x[:batch].clone()
        self.static_y = self.y[:batch].clone()
        self.static_w = torch.full((batch,), 1.0 / batch, device="cuda")
        # grads and optimizer state must exist before capture: the documented warm-up on a
        # side stream, here one step on the first batch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_loss = self._step()

    def _step(self):
        torch, p = self.torch, self.protocol
        per_row = torch.nn.functional.cross_entropy(self.net(self.static_x), self.static_y, reduction="none")
        loss = (per_row * self.static_w).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), p.max_norm, foreach=True)
        self.optim.step()
        self.optim.zero_grad(set_to_none=False)  # the graph's gradient buffers stay in place
        return loss

    def epoch(self, max_batches: int | None = None) -> float:
        torch, batch = self.torch, self.protocol.batch_size
        order = torch.randperm(len(self.x), device="cuda")
        x, y = self.x[order], self.y[order]
        total, steps = 0.0, 0
        for start in range(0, len(x), batch):
            rows = min(batch, len(x) - start)
            self.static_x[:rows].copy_(x[start : start + rows])
            self.static_y[:rows].copy_(y[start : start + rows])
            if rows < batch:
                self.static_w[:rows], self.static_w[rows:] = 1.0 / rows, 0.0
            self.graph.replay()
            total += self.static_loss.item()
            steps += 1
            if rows < batch:
                self.static_w.fill_(1.0 / batch)
            if steps == max_batches:
                break
        return total / steps


def cublas_seconds(M: int, N: int, K: int, repeats: int, tf32: bool = False) -> float | None:
    """Median seconds of one torch.matmul of an M x K by a K x N matrix on the GPU (cuBLAS), by
    the benchmark's timer (cuda/timing.py); None without PyTorch. ``tf32``: TF32 against the
    TF32 kernels, else FP32 against FP32."""
    try:
        import torch
    except ImportError:
        return None
    from .cuda import timing

    a = torch.randn(M, K, device="cuda")
    b = torch.randn(K, N, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return timing.seconds_per_call(lambda: torch.matmul(a, b), repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def run_protocol(protocol: Protocol, data, epochs: int, warmup_batches: int, progress=None) -> dict:
    """Warm up, then time ``epochs`` full epochs; report the median and the test accuracy."""
    import torch

    trainer = TorchTrainer(protocol, data)
    trainer.epoch(warmup_batches)
    times = []
    for _ in range(epochs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        trainer.epoch()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if progress:
            progress.update(1)
    batches = -(-len(trainer.x) // protocol.batch_size)
    median = float(np.median(times))
    return {
        "name": f"PyTorch {torch.__version__} eager",
        "batches_per_epoch": batches,
        "epoch_seconds": times,
        "median_s": median,
        "s_per_step": median / batches,
        "test_accuracy": trainer.accuracy(),
    }
