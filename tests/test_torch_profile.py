"""PyTorch's profile of the protocol step (experiments/torch_profile.py): the summary of its
device-side events, on made-up events; the profile itself needs PyTorch with CUDA (a GPU test)."""

from __future__ import annotations

import types

import pytest

from minitorch_cuda.experiments.torch_profile import summarize


def _events(*pairs):
    return [types.SimpleNamespace(name=name, elapsed_us=us) for name, us in pairs]


def test_the_summary_counts_kernels_apart_from_copies_and_orders_them_by_time() -> None:
    events = _events(("gemm", 4.0), ("Memcpy DtoH (Device -> Pageable)", 2.0), ("relu", 1.0), ("gemm", 6.0),
                     ("Memset (Device)", 0.5), ("relu", 1.5))  # fmt: skip
    summary = summarize(events, steps=2)
    assert summary["kernels_per_step"] == 2.0 and summary["copies_per_step"] == 1.0
    assert summary["kernel_us_per_step"] == pytest.approx((4 + 1 + 6 + 1.5) / 2)
    assert [(k["name"], k["per_step"], k["avg_us"]) for k in summary["kernels"]] == [("gemm", 1.0, 5.0),
                                                                                    ("relu", 1.0, 1.25)]  # fmt: skip


@pytest.mark.gpu
def test_pytorch_eager_launches_kernels_every_step_and_its_graph_replays_them(tmp_path, monkeypatch) -> None:
    """On a GPU: a few steps of each peer, profiled; both launch the same kinds of kernels (a graph
    replays what it captured), and a step's kernels take less time than the step."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    from minitorch_cuda import torch_reference, train
    from minitorch_cuda.experiments.torch_profile import profile

    data = train.load_to("cuda")
    eager = profile(torch_reference.TorchTrainer, data, steps=5, warmup=3)
    graph = profile(torch_reference.TorchGraphTrainer, data, steps=5, warmup=3)
    assert eager["kernels_per_step"] >= 10 and graph["kernels_per_step"] >= 10
    assert 0 < eager["kernel_us_per_step"] < eager["wall_us_per_step"]
