"""Throughput' whole-run throughput and attention_statistics' blocking, against hand counts.

Written to kill the mutants `scripts/mutation.sh` found surviving in src/attnbench/callbacks.py. Time is a
fake clock advanced by hand, so every rate is an exact ratio of hand-counted samples, tokens and seconds.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from attnbench.attention import MultiHeadAttention
from tests.test_diagnostics import layer_statistics
from attnbench.callbacks.throughput import Throughput, batch_size, num_tokens


class _Clock:
    """A fake ``time.perf_counter`` advanced by hand (seconds)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _batch(samples: int, tokens: int) -> dict[str, torch.Tensor]:
    return {"labels": torch.zeros(samples, dtype=torch.long), "num_tokens": torch.tensor(tokens)}


def _module(n_params: int = 0):
    return SimpleNamespace(device=torch.device("cpu"), parameters=lambda: iter([torch.zeros(n_params)]))


def _train(stats, trainer, module, clock, steps, start=0):
    for i, (samples, tokens, seconds) in enumerate(steps, start):
        batch = _batch(samples, tokens)
        stats.on_train_batch_start(trainer, module, batch, i)
        clock.t += seconds
        trainer.global_step += 1  # one optimizer step per batch (no accumulation)
        stats.on_train_batch_end(trainer, module, None, batch, i)


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr("attnbench.callbacks.throughput.time.perf_counter", clock)
    return clock


def test_batch_size_and_tokens_read_the_collated_batch():
    batch = {"labels": torch.zeros(7), "num_tokens": torch.tensor(123), "input_ids": torch.zeros(7, 50)}
    assert batch_size(batch) == 7 and isinstance(batch_size(batch), int)
    assert num_tokens(batch) == 123 and isinstance(num_tokens(batch), int)


def test_default_warmup_is_twenty_steps(clock):
    stats = Throughput()
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_fit_start(trainer, module)
    # 20 warm-up steps of 10 s each, then 4 steps of 0.5 s with 3 samples and 30 tokens each
    _train(stats, trainer, module, clock, [(1, 1, 10.0)] * 20 + [(3, 30, 0.5)] * 4)
    stats.on_fit_end(trainer, module)
    assert stats.summary["train/time_sec"] == pytest.approx(2.0, rel=1e-12)
    assert stats.summary["train/samples_per_sec"] == pytest.approx(12 / 2.0, rel=1e-12)
    assert stats.summary["train/tokens_per_sec"] == pytest.approx(120 / 2.0, rel=1e-12)
    assert stats.summary["train/steps_per_sec"] == pytest.approx(4 / 2.0, rel=1e-12)
    # the measured steps' hand counts, under the names metrics.json and the report read
    assert stats.summary["train/samples"] == 12 and stats.summary["train/tokens"] == 120


def test_epoch_boundary_and_validation_gaps_are_not_training_time(clock):
    stats = Throughput(warmup_steps=1)
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_fit_start(trainer, module)
    _train(stats, trainer, module, clock, [(2, 20, 3.0), (2, 20, 1.0)])  # step 1 warm-up, step 2: 1 s
    stats.on_train_epoch_end(trainer, module)
    clock.t += 100.0  # end of epoch: rebuilding the loader, checkpointing
    _train(stats, trainer, module, clock, [(4, 40, 1.0)], start=2)
    stats.on_validation_start(trainer, module)
    clock.t += 50.0
    _train(stats, trainer, module, clock, [(4, 40, 2.0)], start=3)
    stats.on_fit_end(trainer, module)
    # measured: steps 2-4, 1 + 1 + 2 = 4 s, 10 samples, 100 tokens
    assert stats.summary["train/time_sec"] == pytest.approx(4.0, rel=1e-12)
    assert stats.summary["train/samples_per_sec"] == pytest.approx(2.5, rel=1e-12)
    assert stats.summary["train/tokens_per_sec"] == pytest.approx(25.0, rel=1e-12)
    assert stats.summary["train/steps_per_sec"] == pytest.approx(0.75, rel=1e-12)


def test_data_loading_between_steps_is_training_time(clock):
    stats = Throughput(warmup_steps=0)
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_fit_start(trainer, module)
    _train(stats, trainer, module, clock, [(2, 10, 1.0)])
    clock.t += 3.0  # the next batch's loading, between on_train_batch_end and the next step: counted
    _train(stats, trainer, module, clock, [(2, 10, 1.0)], start=1)
    stats.on_fit_end(trainer, module)
    assert stats.summary["train/time_sec"] == pytest.approx(5.0, rel=1e-12)
    assert stats.summary["train/tokens_per_sec"] == pytest.approx(20 / 5.0, rel=1e-12)


def test_a_second_fit_starts_from_zero(clock):
    stats = Throughput(warmup_steps=0)
    trainer = SimpleNamespace(world_size=1, global_step=0)
    stats.on_fit_start(trainer, _module(5))
    _train(stats, trainer, _module(5), clock, [(10, 100, 1.0)] * 3)
    stats.on_fit_end(trainer, _module(5))
    stats.on_fit_start(trainer, _module(7))
    _train(stats, trainer, _module(7), clock, [(1, 8, 2.0)])
    stats.on_fit_end(trainer, _module(7))
    assert stats.summary["train/time_sec"] == pytest.approx(2.0, rel=1e-12)
    assert stats.summary["train/tokens_per_sec"] == pytest.approx(4.0, rel=1e-12)
    assert stats.summary["train/steps_per_sec"] == pytest.approx(0.5, rel=1e-12)
    assert stats.summary["model/params"] == 7.0


def test_only_warmup_steps_report_no_training_rate(clock):
    stats = Throughput(warmup_steps=5)
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_fit_start(trainer, module)
    _train(stats, trainer, module, clock, [(2, 10, 1.0)] * 5)
    stats.on_fit_end(trainer, module)
    assert not any(k.startswith("train/") for k in stats.summary)
    assert stats.summary["perf/peak_mem_bytes"] > 0


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="Linux only")
def test_peak_memory_is_at_least_the_resident_memory_after_fit_and_test(clock):
    stats = Throughput(warmup_steps=0)
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_fit_start(trainer, module)
    stats.on_fit_end(trainer, module)
    assert isinstance(stats.summary["perf/peak_mem_bytes"], float)
    assert stats.summary["perf/peak_mem_bytes"] >= _rss_bytes() * 0.99  # the high-water mark >= current RSS
    del stats.summary["perf/peak_mem_bytes"]
    stats.on_test_epoch_start(trainer, module)
    stats.on_test_epoch_end(trainer, module)
    assert stats.summary["perf/peak_mem_bytes"] >= _rss_bytes() * 0.99


def test_test_throughput_by_hand(clock):
    stats = Throughput()
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_test_epoch_start(trainer, module)
    for i, (samples, tokens) in enumerate([(8, 100), (8, 60), (3, 20)]):
        clock.t += 0.5
        stats.on_test_batch_end(trainer, module, None, _batch(samples, tokens), i)
    clock.t += 0.5
    stats.on_test_epoch_end(trainer, module)
    # 19 samples, 180 tokens in 2.0 s (the whole loop, first batch included)
    assert stats.summary["test/samples_per_sec"] == pytest.approx(9.5, rel=1e-12)
    assert stats.summary["test/tokens_per_sec"] == pytest.approx(90.0, rel=1e-12)
    assert stats.summary["test/samples"] == 19 and stats.summary["test/tokens"] == 180  # the hand counts
    # a second test loop starts from zero
    stats.on_test_epoch_start(trainer, module)
    clock.t += 4.0
    stats.on_test_batch_end(trainer, module, None, _batch(2, 8), 0)
    stats.on_test_epoch_end(trainer, module)
    assert stats.summary["test/samples_per_sec"] == pytest.approx(0.5, rel=1e-12)
    assert stats.summary["test/tokens_per_sec"] == pytest.approx(2.0, rel=1e-12)
    assert stats.summary["test/samples"] == 2 and stats.summary["test/tokens"] == 8


def test_empty_or_instant_test_loop_reports_no_rate(clock):
    stats = Throughput()
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_test_epoch_start(trainer, module)
    clock.t += 1.0
    stats.on_test_epoch_end(trainer, module)  # no batch: no rate
    assert "test/samples_per_sec" not in stats.summary and "test/tokens_per_sec" not in stats.summary
    stats.on_test_epoch_start(trainer, module)
    stats.on_test_batch_end(trainer, module, None, _batch(4, 40), 0)
    stats.on_test_epoch_end(trainer, module)  # no time passed on the clock: no division by zero
    assert "test/samples_per_sec" not in stats.summary


class _TwoRanks:
    """A strategy whose ``all_gather`` returns this rank's tensor stacked with another rank's."""

    root_device = torch.device("cpu")

    def __init__(self, other: list[float]) -> None:
        self.other = torch.tensor(other, dtype=torch.float64)
        self.gathered: list[torch.Tensor] = []

    def all_gather(self, local: torch.Tensor) -> torch.Tensor:
        assert local.dtype == torch.float64 and local.shape == (3,)
        self.gathered.append(local.clone())
        return torch.stack([local, self.other])  # world_size × 3, as Lightning returns it


def test_ddp_rates_count_every_process_over_the_slowest(clock):
    # this rank: steps 2-3 measured (warm-up 1): 2 s, 8 samples, 80 tokens; the other rank: 10 samples,
    # 120 tokens in 2.5 s. Whole job: 18 samples, 200 tokens over 2.5 s; 2 steps (every rank takes each step).
    strategy = _TwoRanks([10.0, 120.0, 2.5])
    trainer = SimpleNamespace(world_size=2, global_step=0, strategy=strategy)
    stats = Throughput(warmup_steps=1)
    module = _module()
    stats.on_fit_start(trainer, module)
    _train(stats, trainer, module, clock, [(4, 40, 9.0), (4, 40, 1.0), (4, 40, 1.0)])
    stats.on_fit_end(trainer, module)
    assert strategy.gathered[0].tolist() == [8.0, 80.0, 2.0]
    assert stats.summary["train/samples_per_sec"] == pytest.approx(18 / 2.5, rel=1e-12)
    assert stats.summary["train/tokens_per_sec"] == pytest.approx(200 / 2.5, rel=1e-12)
    assert stats.summary["train/steps_per_sec"] == pytest.approx(2 / 2.5, rel=1e-12)
    assert stats.summary["train/time_sec"] == pytest.approx(2.5, rel=1e-12)
    # test loop: this rank 6 samples / 30 tokens in 1 s, the other 10 / 120 in 2.5 s -> 16 and 150 over 2.5 s
    stats.on_test_epoch_start(trainer, module)
    stats.on_test_batch_end(trainer, module, None, _batch(6, 30), 0)
    clock.t += 1.0
    stats.on_test_epoch_end(trainer, module)
    assert stats.summary["test/samples_per_sec"] == pytest.approx(16 / 2.5, rel=1e-12)
    assert stats.summary["test/tokens_per_sec"] == pytest.approx(150 / 2.5, rel=1e-12)


def test_ddp_slowest_rank_is_the_max_not_the_first(clock):
    strategy = _TwoRanks([1.0, 1.0, 0.5])  # the other rank was faster: this rank's 4 s count
    trainer = SimpleNamespace(world_size=2, global_step=0, strategy=strategy)
    stats = Throughput(warmup_steps=0)
    module = _module()
    stats.on_fit_start(trainer, module)
    _train(stats, trainer, module, clock, [(3, 9, 4.0)])
    stats.on_fit_end(trainer, module)
    assert stats.summary["train/time_sec"] == pytest.approx(4.0, rel=1e-12)
    assert stats.summary["train/samples_per_sec"] == pytest.approx(4 / 4.0, rel=1e-12)


# --------------------------------------------------------------------------- attention_statistics blocks


@pytest.mark.parametrize("score, block_bytes, want_rows", [
    # per query row: B·H·Lk·element = 2·2·10·8 = 320 bytes of weights (float64)
    ("scaled_dot", 320 * 3 + 319, 3),
    ("scaled_dot", 320, 1),
    ("scaled_dot", 1, 1),  # never fewer than one row
    ("scaled_dot", 10**9, 10),
    ("l2", 320 * 4, 4),
    ("additive", 320 * 2 + 319, 2),  # the statistics' blocks count weights only, whatever made them
])
def test_statistics_blocks_fit_the_budget_and_match_one_block(score, block_bytes, want_rows, monkeypatch):
    import attnbench.callbacks.diagnostics as diagnostics

    torch.manual_seed(0)
    options = {"hidden_dim": 3} if score == "additive" else {}
    attn = MultiHeadAttention(d_model=8, n_heads=2, score=score, head_dim=4, score_options=options).double()
    x = torch.randn(2, 10, 8, dtype=torch.float64) * 2
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[1, 6:] = True
    seen = []
    block_size = diagnostics.query_block_size
    monkeypatch.setattr(diagnostics, "query_block_size", lambda *a: seen.append(block_size(*a)) or seen[-1])
    with torch.no_grad():
        got = layer_statistics(attn, x, mask, block_bytes=block_bytes)
        whole = layer_statistics(attn, x, mask, block_bytes=10**12)
    assert seen == [want_rows, 10]
    for name, value in whole.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name


def test_statistics_without_a_mask_equal_an_all_false_mask():
    torch.manual_seed(1)
    attn = MultiHeadAttention(d_model=6, n_heads=3, score="cosine").double()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        a = layer_statistics(attn, x, None)
        b = layer_statistics(attn, x, torch.zeros(2, 5, dtype=torch.bool))
    assert a == b


def test_statistics_of_single_key_sequences_are_nan_where_undefined():
    attn = MultiHeadAttention(d_model=4, n_heads=1, score="dot").double()
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.bool)
    mask[:, 0] = False  # one key per sequence: entropy 0, entropy_norm and saturation undefined
    with torch.no_grad():
        got = layer_statistics(attn, x, mask)
    assert got["entropy"] == 0.0
    assert math.isnan(got["entropy_norm"]) and math.isnan(got["saturated_frac"])
    mask[:] = True  # nothing but padding: no row at all
    with torch.no_grad():
        got = layer_statistics(attn, x, mask)
    assert math.isnan(got["entropy"]) and got["max_score"] == 0.0


# --------------------------------------------------------------------------- CUDA synchronisation, gradient norms


def test_clock_synchronises_cuda_before_reading_the_time(monkeypatch, clock):
    """Docstring: step times are CUDA-synchronised (kernels are asynchronous). Checked with a fake CUDA module."""
    synced = []
    monkeypatch.setattr("attnbench.callbacks.throughput.torch.cuda.synchronize", lambda device: synced.append(device))
    cuda = torch.device("cuda", 1)
    assert Throughput._now(SimpleNamespace(device=cuda)) == clock.t
    assert synced == [cuda]
    Throughput._now(SimpleNamespace(device=torch.device("cpu")))
    assert synced == [cuda]  # never on CPU


def test_gradient_norms_skip_layers_without_gradients_and_biases():
    from attnbench.callbacks.diagnostics import AttentionDiagnostics

    torch.manual_seed(0)
    model = torch.nn.Module()
    model.frozen = MultiHeadAttention(d_model=4, n_heads=2, score="dot")
    model.no_bias = MultiHeadAttention(d_model=4, n_heads=2, score="dot", bias=False)
    model.frozen_bias = MultiHeadAttention(d_model=4, n_heads=2, score="dot")
    model.frozen.requires_grad_(False)
    model.frozen_bias.qkv_proj.bias.requires_grad_(False)
    x = torch.randn(2, 3, 4)
    (model.no_bias(model.frozen(x)) + model.frozen_bias(x)).square().sum().backward()
    got = AttentionDiagnostics.gradient_norms(model)
    assert not any(k.startswith("diag/layer0/") for k in got)  # no gradient: left out, later layers still reported
    for i, layer in ((1, model.no_bias), (2, model.frozen_bias)):
        w = layer.qkv_proj.weight.grad.double()
        assert got[f"diag/layer{i}/query_grad_norm"] == pytest.approx(float(w[:4].norm()), rel=1e-6)
        assert got[f"diag/layer{i}/key_grad_norm"] == pytest.approx(float(w[4:8].norm()), rel=1e-6)


def test_test_throughput_of_a_sub_second_loop(clock):
    stats = Throughput()
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_test_epoch_start(trainer, module)
    stats.on_test_batch_end(trainer, module, None, _batch(5, 50), 0)
    clock.t += 0.25
    stats.on_test_epoch_end(trainer, module)
    assert stats.summary["test/samples_per_sec"] == pytest.approx(20.0, rel=1e-12)
    assert stats.summary["test/tokens_per_sec"] == pytest.approx(200.0, rel=1e-12)


def test_statistics_of_small_scores_and_two_key_sequences_match_the_reference():
    """max |score| below 1 with padding present, and a sequence of exactly two keys (log 2 < 1 still counts)."""
    from tests.test_diagnostics import _reference_statistics

    torch.manual_seed(3)
    attn = MultiHeadAttention(d_model=6, n_heads=2, score="scaled_dot").double()
    x = torch.randn(3, 5, 6, dtype=torch.float64) * 0.05  # scores of order 1e-3
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[0, 2:] = True  # two keys
    mask[1, 3:] = True
    with torch.no_grad():
        x[0, 2:] = 100.0  # padding positions with huge scores: never counted
        got = layer_statistics(attn, x, mask)
        want = _reference_statistics(attn, x, mask)
    assert want["max_score"] < 1.0
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-15), name
    # the two-key rows are in entropy_norm: with scores ~1e-3 every row is near uniform, entropy_norm ~ 1
    assert got["entropy_norm"] == pytest.approx(1.0, abs=1e-3)


def test_steps_per_sec_counts_optimizer_steps_under_gradient_accumulation(clock):
    """``train/steps_per_sec`` is in optimizer steps (``trainer.global_step``), the unit of ``trainer.max_steps``
    and ``train/steps_planned``: with accumulate_grad_batches=2 over 5 batches of 1 s the global step moves
    after batches 2, 4 and 5 (an epoch's last batch ends a step too). The one warm-up batch extends to the end of
    its optimizer step (batch 2), so no measured step is timed in part."""
    stats = Throughput(warmup_steps=1)
    trainer, module = SimpleNamespace(world_size=1, global_step=0), _module()
    stats.on_fit_start(trainer, module)
    for i, global_step_after in enumerate([0, 1, 1, 2, 3]):
        stats.on_train_batch_start(trainer, module, _batch(2, 10), i)
        clock.t += 1.0
        trainer.global_step = global_step_after
        stats.on_train_batch_end(trainer, module, None, _batch(2, 10), i)
    stats.on_fit_end(trainer, module)
    # measured: batches 3-5 (3 s, 6 samples, 30 tokens) and optimizer steps 2..3 (2 whole steps)
    assert stats.summary["train/time_sec"] == pytest.approx(3.0, rel=1e-12)
    assert stats.summary["train/steps_per_sec"] == pytest.approx(2 / 3.0, rel=1e-12)
    assert stats.summary["train/samples_per_sec"] == pytest.approx(6 / 3.0, rel=1e-12)
