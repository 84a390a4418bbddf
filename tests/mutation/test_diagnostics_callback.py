"""AttentionDiagnostics' Lightning hooks in process: probe batch, per-layer statistics, logging steps, summary.

The per-layer statistics are compared with the pair-by-pair float64 reference of tests/test_diagnostics.py,
computed on layer inputs rebuilt here by hand (embedding, then each residual attention layer in eval mode); the
probe batch with hand-padded ids; the summary's means and max with Python's statistics over the layers.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from attnbench.attention import MultiHeadAttention
from attnbench.callbacks.diagnostics import AttentionDiagnostics, attention_statistics
from tests.test_diagnostics import _reference_statistics as _reference_with_grad

ROOT = Path(__file__).resolve().parents[2]
STATS = ("entropy", "entropy_norm", "max_score", "saturated_frac")


def _reference_statistics(attn, x, mask):
    with torch.no_grad():
        return _reference_with_grad(attn, x, mask)


class _Tiny(torch.nn.Module):
    """Embedding, dropout, two residual attention layers (float64): enough to need eval mode in the probe."""

    def __init__(self, score="scaled_dot", vocab=11, d_model=6):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(vocab, d_model)
        self.drop = torch.nn.Dropout(0.5)
        self.layers = torch.nn.ModuleList([MultiHeadAttention(d_model=d_model, n_heads=2, score=score)
                                           for _ in range(2)])
        self.double()
        with torch.no_grad():
            self.emb.weight.mul_(3.0)  # scores large enough that some rows saturate
        self.modes: list[bool] = []

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, ids, mask, return_intermediates=False):
        self.modes.append(self.training)
        x = self.drop(self.emb(ids))
        intermediates = []
        for layer in self.layers:
            out = layer(x, mask, return_intermediates=return_intermediates)
            if return_intermediates:
                out, layer_intermediates = out
                intermediates.append(layer_intermediates)
            x = x + out
        return (x, intermediates) if return_intermediates else x


def _layer_inputs(model, ids, mask):
    """The input of each attention layer, recomputed without hooks (dropout is the identity in eval mode)."""
    with torch.no_grad():
        x = model.emb(ids)
        inputs = []
        for layer in model.layers:
            inputs.append(x)
            x = x + layer(x, mask)
    return inputs


def _datamodule(rows, pad_id=0):
    return SimpleNamespace(splits={"val": [(ids, label) for ids, label in rows]}, pad_id=pad_id)


VAL = [([3, 4, 5], 0), ([6], 1), ([7, 8, 9, 10], 0), ([2, 3], 1), ([5, 6, 7], 0)]


class _Logger:
    def __init__(self):
        self.calls = []

    def log_metrics(self, metrics, step):
        self.calls.append((dict(metrics), step))


def _trainer(datamodule, step=0, sanity=False, loggers=None):
    return SimpleNamespace(datamodule=datamodule, global_step=step, sanity_checking=sanity,
                           loggers=loggers if loggers is not None else [_Logger(), _Logger()])


def test_defaults_are_the_configured_interval_and_probe_and_a_64_mib_block(monkeypatch):
    conf = yaml.safe_load((ROOT / "conf" / "callbacks" / "default.yaml").read_text())["attention_diagnostics"]
    cb = AttentionDiagnostics()
    assert (cb.every_n_steps, cb.probe_size) == (conf["every_n_steps"], conf["probe_size"]) == (100, 32)
    assert cb.block_bytes == 67_108_864
    assert cb.summary == {} and cb._probe is None
    attn = MultiHeadAttention(d_model=4, n_heads=1, score="dot")
    budgets = []
    monkeypatch.setattr("attnbench.callbacks.diagnostics.query_block_size",
                        lambda size, budget, n, per_row: budgets.append(budget) or n)
    with torch.no_grad():
        attention_statistics(attn(torch.randn(1, 3, 4), None, return_intermediates=True)[1])  # default budget
    assert budgets == [67_108_864]


def test_settings_are_cast_to_int_and_checked():
    cb = AttentionDiagnostics(every_n_steps="7", probe_size=2.0, block_bytes="4096")
    assert (cb.every_n_steps, cb.probe_size, cb.block_bytes) == (7, 2, 4096)
    assert all(type(v) is int for v in (cb.every_n_steps, cb.probe_size, cb.block_bytes))
    AttentionDiagnostics(every_n_steps=1, probe_size=1)  # the smallest valid values
    for every, probe in ((0, 1), (1, 0), (-3, 5), (5, -1)):
        with pytest.raises(ValueError, match="every_n_steps and probe_size must be >= 1"):
            AttentionDiagnostics(every_n_steps=every, probe_size=probe)


def test_probe_batch_is_the_first_validation_rows_padded_by_hand():
    cb = AttentionDiagnostics(probe_size=3)
    cb.on_fit_start(_trainer(_datamodule(VAL, pad_id=1)), None)
    assert cb._probe["input_ids"].tolist() == [[3, 4, 5, 1], [6, 1, 1, 1], [7, 8, 9, 10]]
    assert cb._probe["padding_mask"].tolist() == [[False, False, False, True], [False, True, True, True],
                                                  [False, False, False, False]]
    cb = AttentionDiagnostics(probe_size=2)  # the longest of the first two is 3 tokens wide
    cb.on_fit_start(_trainer(_datamodule(VAL)), None)
    assert cb._probe["input_ids"].tolist() == [[3, 4, 5], [6, 0, 0]]
    assert cb._probe["padding_mask"].tolist() == [[False, False, False], [False, True, True]]
    cb = AttentionDiagnostics(probe_size=32)  # more than the split holds: all of it
    cb.on_fit_start(_trainer(_datamodule(VAL)), None)
    assert cb._probe["input_ids"].shape == (5, 4) and cb._probe["input_ids"][4].tolist() == [5, 6, 7, 0]


def test_without_a_datamodule_there_is_no_probe():
    cb = AttentionDiagnostics()
    cb._probe = {"input_ids": torch.zeros(1, 1, dtype=torch.long)}  # from an earlier fit
    cb.on_fit_start(_trainer(None), None)
    assert cb._probe is None
    assert cb.probe(_Tiny()) == {}
    trainer = _trainer(None)
    cb.on_train_end(trainer, _Tiny())
    assert cb.summary == {} and all(logger.calls == [] for logger in trainer.loggers)


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
def test_probe_statistics_of_each_layer_match_the_float64_reference(score):
    model = _Tiny(score)
    model.train()
    cb = AttentionDiagnostics(probe_size=4, block_bytes=2 * 2 * 2 * 4 * 8)  # blocks of a few query rows
    cb.on_fit_start(_trainer(_datamodule(VAL)), model)
    got = cb.probe(model)
    assert model.modes == [False] and model.training is True  # eval for the probe, training mode restored
    ids, mask = cb._probe["input_ids"], cb._probe["padding_mask"]
    assert set(got) == {f"diag/layer{i}/{s}" for i in range(2) for s in STATS}
    for i, x in enumerate(_layer_inputs(model, ids, mask)):
        want = _reference_statistics(model.layers[i], x, mask)
        for stat in STATS:
            assert got[f"diag/layer{i}/{stat}"] == pytest.approx(want[stat], rel=1e-9, abs=1e-12), (i, stat)
    model.eval()
    cb.probe(model)
    assert model.training is False  # eval mode kept


def test_probe_restores_training_mode_when_the_forward_fails():
    model = _Tiny()
    cb = AttentionDiagnostics(probe_size=2)
    cb._probe = {"input_ids": torch.tensor([[99]]), "padding_mask": torch.tensor([[False]])}  # id out of range
    model.train()
    with pytest.raises(IndexError):
        cb.probe(model)
    assert model.training is True


def test_probe_of_a_layer_called_without_a_mask():
    class NoMask(_Tiny):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([self.layers[0]])

        def forward(self, ids, mask, return_intermediates=False):
            x = self.emb(ids)
            out, intermediates = self.layers[0](x, return_intermediates=True)
            return (out, [intermediates]) if return_intermediates else out

    model = NoMask()
    cb = AttentionDiagnostics(probe_size=2)
    cb.on_fit_start(_trainer(_datamodule([([1, 2, 3], 0), ([4, 5, 6], 1)])), model)
    got = cb.probe(model)
    x = model.emb(cb._probe["input_ids"]).detach()
    want = _reference_statistics(model.layers[0], x, torch.zeros(2, 3, dtype=torch.bool))
    for stat in STATS:
        assert got[f"diag/layer0/{stat}"] == pytest.approx(want[stat], rel=1e-9), stat
    assert "diag/layer1/entropy" not in got


def _grads(model, ids):
    model.zero_grad()
    model(ids, torch.zeros_like(ids, dtype=torch.bool)).square().sum().backward()


def test_logs_gradients_and_probe_every_n_steps_at_the_step():
    model = _Tiny()
    model.train()
    cb = AttentionDiagnostics(every_n_steps=3, probe_size=3)
    loggers = [_Logger(), _Logger()]
    cb.on_fit_start(_trainer(_datamodule(VAL), loggers=loggers), model)
    _grads(model, torch.tensor([[1, 2, 3, 4]]))
    for step in range(7):
        cb.on_before_optimizer_step(_trainer(None, step=step, loggers=loggers), model, None)
    cb.on_before_optimizer_step(_trainer(None, step=9, sanity=True, loggers=loggers), model, None)
    assert [step for _, step in loggers[0].calls] == [0, 3, 6]
    assert loggers[0].calls == loggers[1].calls  # every logger
    logged, _ = loggers[0].calls[1]
    w, b = model.layers[1].qkv_proj.weight.grad.double(), model.layers[1].qkv_proj.bias.grad.double()
    inner = model.layers[1].inner_dim
    # the callback sums squares in float32 (.float()): ~100 terms, relative error below 100 · 2^-24 ≈ 6e-6
    assert logged["diag/layer1/query_grad_norm"] == pytest.approx(
        math.sqrt(sum(float(v) ** 2 for v in torch.cat([w[:inner].flatten(), b[:inner]]))), rel=1e-5)
    assert logged["diag/layer1/key_grad_norm"] == pytest.approx(
        math.sqrt(sum(float(v) ** 2 for v in torch.cat([w[inner:2 * inner].flatten(), b[inner:2 * inner]]))),
        rel=1e-5)
    assert set(logged) == {f"diag/layer{i}/{s}" for i in range(2)
                           for s in (*STATS, "query_grad_norm", "key_grad_norm")}
    ids, mask = cb._probe["input_ids"], cb._probe["padding_mask"]
    want = _reference_statistics(model.layers[0], _layer_inputs(model, ids, mask)[0], mask)
    assert logged["diag/layer0/entropy"] == pytest.approx(want["entropy"], rel=1e-9)


def test_train_end_summary_averages_layers_and_takes_the_largest_score():
    model = _Tiny()
    cb = AttentionDiagnostics(probe_size=5)
    loggers = [_Logger()]
    cb.on_fit_start(_trainer(_datamodule(VAL), loggers=loggers), model)
    cb.on_train_end(_trainer(None, step=42, loggers=loggers), model)
    ids, mask = cb._probe["input_ids"], cb._probe["padding_mask"]
    per_layer = [_reference_statistics(layer, x, mask) for layer, x in zip(model.layers,
                                                                            _layer_inputs(model, ids, mask))]
    s = cb.summary
    for stat in ("entropy", "entropy_norm", "saturated_frac"):
        assert s[f"diag/{stat}"] == pytest.approx(sum(p[stat] for p in per_layer) / 2, rel=1e-6), stat
    assert s["diag/max_score"] == pytest.approx(max(p["max_score"] for p in per_layer), rel=1e-6)
    assert per_layer[0]["max_score"] != pytest.approx(per_layer[1]["max_score"], rel=1e-3)  # max ≠ first/last
    assert s["diag/layer1/entropy"] == pytest.approx(per_layer[1]["entropy"], rel=1e-9)
    assert len(s) == 2 * 4 + 4
    assert loggers[0].calls == [(s, 42)]


def test_train_end_summary_skips_undefined_layers_in_the_mean():
    """Single-key probe rows: entropy_norm and saturated_frac are NaN in every layer; the summary says NaN."""
    model = _Tiny()
    cb = AttentionDiagnostics(probe_size=2)
    cb.on_fit_start(_trainer(_datamodule([([4], 0), ([5], 1)])), model)
    cb.on_train_end(_trainer(None), model)
    assert math.isnan(cb.summary["diag/entropy_norm"]) and math.isnan(cb.summary["diag/saturated_frac"])
    assert cb.summary["diag/entropy"] == 0.0  # one key: weight 1, entropy 0
