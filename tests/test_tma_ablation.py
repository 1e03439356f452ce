"""The TMA kernel's ablation (experiments/tma_ablation.py) without a GPU: each variant's launch
switches, the shares the chapter shows, the figure, and the refusal where no GPU times it. The
builds are tests/test_wgmma_tma.py's (sm_90a, no spills); the timing is the lead's GPU run."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest

from minitorch_cuda.experiments import tma_ablation


def _record() -> dict:
    gflops = {"whole kernel": (600.0, 500.0), "TMA off": (300.0, 250.0), "one consumer": (450.0, 400.0),
              "no persistence": (540.0, 450.0), "narrower tile": (480.0, 420.0)}  # fmt: skip
    return {
        "device": {"name": "NVIDIA H100 80GB HBM3"},
        "recorded": "2026-12-07T12:00:00+00:00",
        "cublas_tf32_gflops": {"4096": 600.0, "2048": 625.0},
        "variants": {name: {"gflops": {"4096": g4, "2048": g2}} for name, (g4, g2) in gflops.items()},
    }


def test_each_variant_takes_one_feature_away() -> None:
    whole = tma_ablation.switches("whole kernel", 512)
    assert whole == {"bn": 256}
    changed = {
        name: set(tma_ablation.switches(name, 512).items()) - set(whole.items()) for name in tma_ablation.VARIANTS
    }
    assert changed == {
        "whole kernel": set(),
        "TMA off": {("tma", False)},
        "one consumer": {("consumers", 1)},
        "no persistence": {("blocks", 512)},  # a block per tile
        "narrower tile": {("bn", 128)},
    }


def test_shares_summary_and_figure_from_a_record() -> None:
    from minitorch_cuda.book import figures

    record = _record()
    shares = tma_ablation.fractions(record)
    assert shares["whole kernel"] == {"4096": 1.0, "2048": 0.8}
    assert shares["TMA off"]["4096"] == pytest.approx(0.5)
    text = tma_ablation.summary(record)
    assert "TMA off" in text and "50.0%" in text and "80.0%" in text
    ax = figures.ablation_bars(record)
    assert len(ax.patches) == len(tma_ablation.VARIANTS) * 2
    assert [t.get_text() for t in ax.get_yticklabels()] == list(tma_ablation.VARIANTS)


def test_it_refuses_where_no_gpu_can_time_it(monkeypatch, capsys) -> None:
    from minitorch_cuda.cuda import probe

    monkeypatch.setattr(probe, "cuda_unavailable_reason", lambda: "no GPU here")
    assert tma_ablation.main([]) == 2
    assert "needs a CUDA GPU: no GPU here" in capsys.readouterr().err
