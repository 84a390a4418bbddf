"""Initial values and arithmetic that docstrings state, against independent computations: the score functions'
and the model's initialisation, ``RunStats``' throughput formula and the report's paired difference, each
computed a second way rather than read back from the object under test.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from attnbench.attention import build_score_function
from attnbench.callbacks.throughput import Throughput

from .conftest import REPO_ROOT

from attnbench.analysis import report


# --------------------------------------------------------------------------- score-function initial values


@pytest.mark.parametrize("head_dim", [1, 4, 16, 64, 256])
def test_cosine_temperature_starts_at_sqrt_head_dim(head_dim):
    """README/docstring: τ is initialised to √d (the logit range of scaled_dot at init), one τ per head."""
    fn = build_score_function("cosine", n_heads=3, head_dim=head_dim)
    tau = fn.log_temperature.detach().double().exp()
    assert tau.shape == (3,)
    torch.testing.assert_close(tau, torch.full((3,), math.sqrt(head_dim), dtype=torch.float64), rtol=1e-6, atol=0)
    # the scores of two equal unit vectors are exactly τ (cos = 1), independent of the code's own reference
    q = torch.zeros(1, 3, 1, head_dim)
    q[..., 0] = 5.0
    torch.testing.assert_close(fn.scores(q, q), torch.full((1, 3, 1, 1), math.sqrt(head_dim)), rtol=1e-6, atol=0)


def test_cosine_explicit_temperature_is_used():
    fn = build_score_function("cosine", n_heads=2, head_dim=8, init_temperature=10.0)
    torch.testing.assert_close(fn.log_temperature.detach().exp(), torch.full((2,), 10.0))


@pytest.mark.parametrize("head_dim", [1, 5, 32])
def test_general_weight_starts_as_identity(head_dim):
    """Docstring: W = I per head at init, so `general` starts as the unscaled `dot` score."""
    fn = build_score_function("general", n_heads=4, head_dim=head_dim)
    assert fn.weight.shape == (4, head_dim, head_dim)
    for h in range(4):
        assert torch.equal(fn.weight[h].detach(), torch.eye(head_dim))
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, 3, head_dim, generator=g), torch.randn(2, 4, 5, head_dim, generator=g)
    dot = build_score_function("dot", n_heads=4, head_dim=head_dim)
    torch.testing.assert_close(fn.scores(q, k), dot.scores(q, k), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- model initial values


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_model_init_is_normal_0_02_with_zero_biases(pooling):
    """TransformerClassifier.reset_parameters' docstring: "GPT-2/BERT-style init: N(0, 0.02) for embeddings and
    linear weights, zero biases" (and the padding row of the token embedding zero).

    Tolerance: the sample std of N values of N(0, 0.02²) has a standard error of 0.02/√(2N); every pooled
    sample here has N ≥ 8,000, so 5% (≥ 6 standard errors) fails only a wrong init, not an unlucky seed.
    """
    from attnbench.models.model import TransformerClassifier

    torch.manual_seed(0)
    model = TransformerClassifier(vocab_size=500, num_classes=3, max_length=128, score="scaled_dot", d_model=64,
                                  n_heads=4, n_layers=2, d_ff=128, pooling=pooling, pad_id=0)
    embedding = model.token_embedding.weight.detach().double()
    assert torch.count_nonzero(embedding[0]) == 0  # the padding row
    linear = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    samples = {"token embedding": embedding[1:].flatten(),
               "position embedding": model.position_embedding.weight.detach().double().flatten(),
               "linear weights": torch.cat([m.weight.detach().double().flatten() for m in linear])}
    if pooling == "cls":
        samples["linear weights"] = torch.cat([samples["linear weights"], model.cls_embedding.detach().double().flatten()])
    for name, values in samples.items():
        assert values.numel() >= 8_000, name
        assert abs(values.std().item() - 0.02) < 0.05 * 0.02, (name, values.std().item())
        assert abs(values.mean().item()) < 6 * 0.02 / math.sqrt(values.numel()), name
    biases = [m.bias for m in linear if m.bias is not None]
    assert biases and all(torch.count_nonzero(b) == 0 for b in biases)


# --------------------------------------------------------------------------- throughput arithmetic


class _Clock:
    """A fake ``time.perf_counter`` advanced by hand (seconds)."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_run_stats_throughput_formula_by_hand(monkeypatch):
    """train/tokens_per_sec = non-padding tokens of the steps after warm-up / their wall time (hand count)."""
    clock = _Clock()
    monkeypatch.setattr("attnbench.callbacks.throughput.time.perf_counter", clock)
    stats = Throughput(warmup_steps=2)
    module = SimpleNamespace(device=torch.device("cpu"), parameters=lambda: iter([torch.zeros(3, 4), torch.zeros(5)]))
    trainer = SimpleNamespace(world_size=1, global_step=0)
    stats.on_fit_start(trainer, module)
    # five steps: (batch size, non-padding tokens, seconds the step takes)
    steps = [(8, 100, 9.0), (8, 120, 5.0), (8, 50, 0.5), (4, 30, 0.25), (8, 70, 0.25)]
    for i, (b, tokens, seconds) in enumerate(steps):
        batch = {"labels": torch.zeros(b), "num_tokens": torch.tensor(tokens)}
        stats.on_train_batch_start(trainer, module, batch, i)
        clock.t += seconds
        trainer.global_step += 1  # one optimizer step per batch (no accumulation)
        stats.on_train_batch_end(trainer, module, None, batch, i)
    stats.on_fit_end(trainer, module)
    # steps 3-5 only: 150 tokens, 20 samples, 3 steps in 1.0 s
    assert stats.summary["train/tokens_per_sec"] == pytest.approx(150.0, rel=1e-12)
    assert stats.summary["train/samples_per_sec"] == pytest.approx(20.0, rel=1e-12)
    assert stats.summary["train/steps_per_sec"] == pytest.approx(3.0, rel=1e-12)
    assert stats.summary["train/time_sec"] == pytest.approx(1.0, rel=1e-12)
    assert stats.summary["model/params"] == 17.0


def test_run_stats_excludes_validation_gap(monkeypatch):
    """Time between the last step before validation and the first step after it is not training time."""
    clock = _Clock()
    monkeypatch.setattr("attnbench.callbacks.throughput.time.perf_counter", clock)
    stats = Throughput(warmup_steps=0)
    module = SimpleNamespace(device=torch.device("cpu"), parameters=lambda: iter([]))
    trainer = SimpleNamespace(world_size=1, global_step=0)
    stats.on_fit_start(trainer, module)
    batch = {"labels": torch.zeros(2), "num_tokens": torch.tensor(10)}
    for i in range(2):
        stats.on_train_batch_start(trainer, module, batch, i)
        clock.t += 0.5
        trainer.global_step += 1  # one optimizer step per batch (no accumulation)
        stats.on_train_batch_end(trainer, module, None, batch, i)
        stats.on_validation_start(trainer, module)
        clock.t += 60.0  # validation: excluded
    stats.on_fit_end(trainer, module)
    assert stats.summary["train/tokens_per_sec"] == pytest.approx(20 / 1.0, rel=1e-12)


# --------------------------------------------------------------------------- the report's paired difference


def test_paired_difference_across_settings_by_hand():
    """Δ to scaled_dot pairs each job with the baseline of the same data, head_dim and seed, never across them.

    The accuracies are chosen so that pairing across settings would give a different Δ: within every setting
    the variant is exactly 0.01 above the baseline, while the settings' baselines differ by 0.05-0.20.
    """
    rows = []
    base = {("sst2", 16): 0.80, ("sst2", 64): 0.75, ("trec", 16): 0.60, ("trec", 64): 0.85}
    for (data, head_dim), acc in base.items():
        for seed in range(3):
            jitter = 0.001 * seed
            rows.append({"data": data, "model.head_dim": head_dim, "attention": "scaled_dot", "seed": seed,
                         "status": report.STATUS_OK, "test/acc": acc + jitter})
            rows.append({"data": data, "model.head_dim": head_dim, "attention": "additive", "seed": seed,
                         "status": report.STATUS_OK, "test/acc": acc + jitter + 0.01 * (1 + seed)})
    jobs = pd.DataFrame(rows)
    table = report.summarise(jobs, ["data", "model.head_dim", "attention", "seed"])
    additive = table[table["attention"] == "additive"]
    assert len(additive) == 4
    t = 4.302652729911275  # Student t 97.5% quantile, 2 degrees of freedom
    for _, row in additive.iterrows():
        # differences 0.01, 0.02, 0.03: mean 0.02, sample std 0.01
        assert row["diff_mean"] == pytest.approx(0.02, abs=1e-12)
        assert row["diff_ci"] == pytest.approx(t * 0.01 / math.sqrt(3), rel=1e-9)
        assert row["diff_n"] == 3
    baseline = table[table["attention"] == "scaled_dot"]
    assert baseline["diff_mean"].tolist() == pytest.approx([0.0] * 4, abs=1e-12)
