"""The PyTorch peers of the benchmark: the whole-step CUDA graph trains as eager PyTorch does."""

from __future__ import annotations

import pytest
from conftest import needs_mnist

from minitorch_cuda import torch_reference
from minitorch_cuda.train import Protocol, load_to

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch_reference.available(), reason="needs PyTorch with CUDA"),
    needs_mnist,
]


def test_graph_replay_trains_like_eager_pytorch():
    data = load_to("cuda")
    protocol = Protocol()
    graphed = torch_reference.TorchGraphTrainer(protocol, data, seed=0)
    eager = torch_reference.TorchTrainer(protocol, data, seed=0)
    # the graphed trainer took one warm-up step on the first batch before capturing: so does eager
    xb, yb = eager.x[: protocol.batch_size], eager.y[: protocol.batch_size]
    torch.nn.functional.cross_entropy(eager.net(xb), yb).backward()
    torch.nn.utils.clip_grad_norm_(eager.net.parameters(), protocol.max_norm)
    eager.optim.step()
    eager.optim.zero_grad(set_to_none=True)

    torch.manual_seed(1)
    graph_loss = graphed.epoch(30)
    torch.manual_seed(1)
    eager_loss = eager.epoch(30)
    assert graph_loss == pytest.approx(eager_loss, rel=1e-4)
    for g, e in zip(graphed.net.parameters(), eager.net.parameters()):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


def test_graph_replay_handles_the_ragged_last_batch():
    """An epoch ends with a 48-row batch: its loss is the mean over those rows, as eager's."""
    data = load_to("cuda")
    graphed = torch_reference.TorchGraphTrainer(Protocol(), data, seed=0)
    loss = graphed.epoch()  # the whole epoch, tail included
    assert 0.0 < loss < 2.5
    assert torch.all(graphed.static_w == 1.0 / graphed.protocol.batch_size), "the weights were not restored"
    assert graphed.accuracy() > 0.85
