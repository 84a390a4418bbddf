"""A finished run's figures against values computed outside the code that wrote them (issue 16, breaker row 9).

One in-process ``train()`` on the toy dataset of test_faults.py, timed from outside. Every time figure must lie
inside that outside window (catches wrong units: ms under a ``_sec`` key, or a time divided twice); every count
must equal a recount of the split from an independently built data module, and every rate that count over its
own time; ``test/acc`` must equal the accuracy of the saved best checkpoint on the test split recomputed here,
one unpadded sentence at a time. None of these compare ``metrics.json`` with the dict it was written from.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from hydra.utils import instantiate

from .test_faults import compose_cfg, run_in_process, toy  # noqa: F401 - toy is a fixture used here

EPOCHS = 2


@pytest.fixture(scope="module")
def timed_run(toy, tmp_path_factory):  # noqa: F811
    """(summary, metrics.json, outside wall seconds, data module built here from the run's config)."""
    out = tmp_path_factory.mktemp("figures") / "run"
    overrides = [f"trainer.max_epochs={EPOCHS}", "callbacks.run_stats.warmup_steps=0"]
    t0 = time.perf_counter()
    summary = run_in_process(toy, out, *overrides)
    wall = time.perf_counter() - t0
    metrics = json.loads((out / "metrics.json").read_text())
    cfg = compose_cfg([*toy, "logger=csv", *overrides])
    datamodule = instantiate(cfg.data, seed=int(cfg.seed))
    datamodule.prepare_data()
    datamodule.setup("fit")
    datamodule.setup("test")
    return summary, metrics, wall, datamodule


def _tokens(split) -> int:
    """Non-padding tokens of a split, counted from its rows (``(ids, label)``): every id is a real token."""
    return sum(len(ids) for ids, _ in split)


def test_every_time_figure_lies_inside_the_outside_wall_time(timed_run):
    """Pins (breaker row 9, "wrong units"): ``time/total_sec``, ``train/time_sec`` and the test time implied by
    ``test/samples / test/samples_per_sec`` are positive seconds inside the wall time measured around
    ``train()`` from outside; ``time/total_sec`` covers all but the part of ``train()`` before its own clock
    starts and after it stops (writing metrics.json, printing): the gap, measured 0.5 s of a 2.8 s call here,
    grows with load (1.1 s with 4 processes sharing a core), so only a relative bound is pinned: at least a tenth
    of the call. A figure in ms (x1000) or a time divided by 1000 still fails, by a factor of 100 either way."""
    summary, metrics, wall, _ = timed_run
    for figures in (summary, metrics):
        total = figures["time/total_sec"]
        assert wall / 10 <= total <= wall, (total, wall)
        train_sec = figures["train/time_sec"]
        test_sec = figures["test/samples"] / figures["test/samples_per_sec"]
        assert test_sec == pytest.approx(figures["test/tokens"] / figures["test/tokens_per_sec"], rel=1e-9)
        assert 0 < train_sec and 0 < test_sec and train_sec + test_sec <= total, (train_sec, test_sec, total)
        for key, value in figures.items():  # any other time figure a later change adds
            if key.endswith("_sec") and "_per_" not in key and isinstance(value, float):
                assert 0 < value <= wall, (key, value, wall)


def test_counts_and_rates_equal_a_recount_of_the_splits(timed_run):
    """Pins (row 9's kind, "a value compared with itself"): ``test/samples`` and ``test/tokens`` are the test
    split's rows and non-padding tokens counted here from an independently built data module; with
    ``warmup_steps=0`` every training step is measured, so ``train/samples`` / ``train/tokens`` are
    ``max_epochs`` x the train split's rows / tokens and ``train/steps_per_sec`` counts ⌈rows / batch_size⌉
    steps per epoch; each rate is its count over its own time (the time pinned by the test above)."""
    summary, metrics, _, dm = timed_run
    train, test = dm.splits["train"], dm.splits["test"]
    assert len(test) == 40  # the toy fixture's test file: 40 rows
    steps = EPOCHS * -(-len(train) // dm.batch_size)
    for figures in (summary, metrics):
        assert figures["test/samples"] == len(test)
        assert figures["test/tokens"] == _tokens(test)
        assert figures["train/samples"] == EPOCHS * len(train)
        assert figures["train/tokens"] == EPOCHS * _tokens(train)
        test_sec = figures["test/samples"] / figures["test/samples_per_sec"]
        assert figures["test/tokens_per_sec"] == pytest.approx(_tokens(test) / test_sec, rel=1e-9)
        train_sec = figures["train/time_sec"]
        assert figures["train/samples_per_sec"] == pytest.approx(EPOCHS * len(train) / train_sec, rel=1e-9)
        assert figures["train/tokens_per_sec"] == pytest.approx(EPOCHS * _tokens(train) / train_sec, rel=1e-9)
        assert figures["train/steps_per_sec"] == pytest.approx(steps / train_sec, rel=1e-9)


def test_test_accuracy_is_the_best_checkpoints_accuracy_on_the_test_split(timed_run):
    """Pins ``test/acc`` to an independent computation: the best checkpoint (``metrics.json``'s
    ``best_checkpoint``) loaded here, each test sentence classified alone (no padding, no batching), compared
    with its label; the fraction correct of the 40 rows (a multiple of 1/40, so the tolerance 1e-6 is float32
    rounding only)."""
    from attnbench.models.module import TextClassifierModule

    _, metrics, _, dm = timed_run
    module = TextClassifierModule.load_from_checkpoint(metrics["best_checkpoint"], map_location="cpu",
                                                      weights_only=False).eval()
    correct = 0
    with torch.no_grad():
        for ids, label in dm.splits["test"]:
            x = torch.tensor([list(ids)], dtype=torch.long)
            correct += int(module(x, torch.zeros_like(x, dtype=torch.bool)).argmax(-1).item() == int(label))
    assert metrics["test/acc"] == pytest.approx(correct / len(dm.splits["test"]), abs=1e-6)


def test_the_cpu_share_is_recorded_and_is_a_share(timed_run):
    """``train/cpu_share`` and ``test/cpu_share`` (thread CPU seconds over wall seconds of the measured steps;
    their arithmetic by hand: tests/test_disturbed_runs.py) reach metrics.json and the summary as a share of one
    core. Only the range is pinned: a parallel test worker or other load may share this process's core (at ~20
    processes per core the share falls below 0.05, so the lower bound is only "some CPU time was counted"), and
    over this toy run's short loops (tens of ms) the two clocks' granularity puts an undisturbed share at
    0.98-1.003."""
    summary, metrics, _, _ = timed_run
    for key in ("train/cpu_share", "test/cpu_share"):
        assert 0 < metrics[key] <= 1.05, (key, metrics[key])
        assert summary[key] == metrics[key]


def test_the_host_of_each_rate_reaches_metrics_json_and_not_the_metric_rows(timed_run):
    """``train_host`` / ``test_host`` (:func:`attnbench.callbacks.throughput.machine_boot`: the machine and boot the
    rates were measured on, which the report pairs on) are text: in ``metrics.json``, not in the numeric summary
    (the CSV log, the console's figure count)."""
    from attnbench.callbacks.throughput import BOOT_ID, machine_boot

    summary, metrics, _, _ = timed_run
    assert metrics["train_host"] == metrics["test_host"] == machine_boot()
    assert ("/" in machine_boot()) == BOOT_ID.is_file()  # Linux: hostname/boot id; elsewhere the hostname
    assert "train_host" not in summary and "test_host" not in summary
