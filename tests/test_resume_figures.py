"""A resumed run's whole-run figures cover the whole run: the training rate counts the measured steps before
the interruption too (Throughput keeps its counters in each checkpoint), and a run resumed from the checkpoint its
training ended with (killed while testing) still reports its rate and its final attention diagnostics."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from attnbench.errors import RunInterrupted

from .test_faults import run_in_process, toy  # noqa: F401 - toy is a fixture

RATE_KEYS = ("train/samples", "train/tokens", "train/time_sec", "train/steps_per_sec", "train/tokens_per_sec",
             "train/cpu_share")


def _metrics(run_dir) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow
def test_a_run_resumed_after_its_training_ended_keeps_its_rate_and_diagnostics(toy, tmp_path):  # noqa: F811
    """Killed after the checkpoint of its last epoch (no metrics.json yet): resumed, Lightning's fit loop has
    nothing left to train. Before: its metrics.json had no train/* rates and no diag/* figures (a long_context
    job resumed this way showed '–' for them in the report)."""
    first = tmp_path / "first"
    run_in_process(toy, first, "trainer.max_epochs=1")
    killed = tmp_path / "killed-while-testing"
    shutil.copytree(first, killed, ignore=shutil.ignore_patterns("metrics.json"))
    # the checkpoint keeps the peak memory so far; made larger than any process here reaches, it must come back as
    # the run's peak (a whole run's peak is its processes' largest, not the test-only process's)
    ckpt_path = (killed / "checkpoints" / "last.ckpt").resolve()
    ckpt = torch.load(ckpt_path, weights_only=False)
    (state,) = [state for state in ckpt["callbacks"].values() if "peak_mem_bytes" in state]
    assert state["peak_mem_bytes"] > 0
    state["peak_mem_bytes"] = 2**50
    torch.save(ckpt, ckpt_path)
    ckpt_path.with_name(ckpt_path.name + ".sha256").unlink(missing_ok=True)  # edited: its SHA-256 sidecar is stale
    run_in_process(toy, killed, "trainer.max_epochs=1", "ckpt_path=last")
    before, after = _metrics(first), _metrics(killed)
    assert after["perf/peak_mem_bytes"] == 2**50
    assert after["resumed_from"]
    assert {k: after.get(k) for k in RATE_KEYS} == {k: before[k] for k in RATE_KEYS}
    diagnostics = sorted(k for k in before if k.startswith("diag/"))
    assert "diag/max_score" in diagnostics and "diag/layer0/entropy" in diagnostics
    assert {k: after.get(k) for k in diagnostics} == pytest.approx({k: before[k] for k in diagnostics}, rel=1e-6)


def test_a_run_resumed_mid_training_counts_the_steps_before_and_after(toy, tmp_path):  # noqa: F811
    """10 steps, then resumed to 20: with one warm-up step per process start (the toy's warmup_steps=1),
    9 + 9 measured steps. The resume continues epoch 0 (22 batches of its 175 rows, 21 of 8 and one of 7, in
    shuffled order) at its batch 10 (exact mid-epoch resume; the warm-up): the measured steps are batches 1-9
    and 11-19 of the epoch's order, among them its short batch: 17 * 8 + 7 rows. Before: 9 steps (the steps
    after the checkpoint only); 144 rows while a mid-epoch resume restarted the order (batches 0-9 again)."""
    run_dir = tmp_path / "run"
    run_in_process(toy, run_dir, "trainer.max_epochs=-1", "trainer.max_steps=10")
    assert _metrics(run_dir)["train/samples"] == 9 * 8
    (run_dir / "metrics.json").unlink()
    run_in_process(toy, run_dir, "trainer.max_epochs=-1", "trainer.max_steps=20", "ckpt_path=last")
    metrics = _metrics(run_dir)
    assert metrics["train/steps_done"] == 20
    assert metrics["resume"] == {"epoch": 0, "batches_done": 10, "batches_per_epoch": 22, "exact": True}
    assert metrics["train/samples"] == 17 * 8 + 7
    assert metrics["train/steps_per_sec"] * metrics["train/time_sec"] == pytest.approx(18, rel=1e-9)


def test_a_resume_interrupted_before_training_writes_no_step_0_checkpoint(toy, tmp_path):  # noqa: F811
    """Ctrl-C after Lightning restored the checkpoint's weights and callbacks (before on_fit_start) but before its
    step, loops and optimizer (after it). Before: interrupted.ckpt was written there with global_step 0, no
    optimizer state and the trained weights; as the newest file ckpt_path=last resumed from it and trained all
    20 steps again (train/samples 223 over 28 measured steps, not 18). Now nothing is written, the message names
    the last checkpoint, and the resume continues from step 10: 9 + 9 measured steps of 8 rows."""
    run_dir = tmp_path / "run"
    run_in_process(toy, run_dir, "trainer.max_epochs=-1", "trainer.max_steps=10")
    (run_dir / "metrics.json").unlink()
    with pytest.raises(RunInterrupted) as err:
        run_in_process(toy, run_dir, "trainer.max_epochs=-1", "trainer.max_steps=20", "ckpt_path=last",
                       "+callbacks.stop._target_=tests.resume_helpers.CtrlCAtFitStart")
    assert not (run_dir / "checkpoints" / "interrupted.ckpt").exists()
    assert "no new checkpoint written (interrupted before training started" in str(err.value)
    assert "the last one is" in str(err.value) and "step10" in str(err.value)  # a checkpoint of step 10
    run_in_process(toy, run_dir, "trainer.max_epochs=-1", "trainer.max_steps=20", "ckpt_path=last")
    metrics = _metrics(run_dir)
    assert metrics["resumed_from"].endswith("last.ckpt")
    assert metrics["train/steps_done"] == 20
    assert metrics["resume"] == {"epoch": 0, "batches_done": 10, "batches_per_epoch": 22, "exact": True}
    assert metrics["train/samples"] == 17 * 8 + 7
    assert metrics["train/steps_per_sec"] * metrics["train/time_sec"] == pytest.approx(18, rel=1e-9)


def test_a_checkpoint_written_before_the_restored_counters_are_applied_keeps_them():
    """Throughput adds a restored checkpoint's counters at on_train_start; a checkpoint written before that (any
    trainer.save_checkpoint between the restore and the start of training) must carry them on, and the earlier
    processes' peak. Before: it held this process's zero counters and its own peak only."""
    from attnbench.callbacks.throughput import Throughput

    stats = Throughput(warmup_steps=1)
    stats._device = torch.device("cpu")
    earlier = {"world_size": 1, "peak_mem_bytes": 2**50, "_train_time": 1.5, "_train_cpu": 1.25,
               "_train_samples": 72, "_train_tokens": 288, "_train_steps": 9}
    stats.load_state_dict(earlier)
    # a checkpoint from before checkpoints named the host of their measured steps: that host is unknown
    assert stats.state_dict() == {**earlier, "hosts": ["unknown"]}
    stats._world_size = 2  # a DDP process does not count a single-process checkpoint's steps (class docstring)
    assert stats.state_dict() == {**earlier, "world_size": 2, "_train_time": 0.0, "_train_cpu": 0.0,
                                  "_train_samples": 0, "_train_tokens": 0, "_train_steps": 0, "hosts": []}


@pytest.mark.slow
def test_a_run_resumed_between_epochs_reports_the_validation_history_of_the_whole_run(toy, tmp_path):  # noqa: F811
    """Stopped after epoch 0 and resumed to 2 epochs: the report's validation history (from the CSV log, which a
    resume writes in segments) is the uninterrupted run's. Before: 1 epoch validated (the last segment's only)."""

    
    from attnbench.analysis import report

    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run_in_process(toy, whole, "trainer.max_epochs=2")
    run_in_process(toy, resumed, "trainer.max_epochs=1")
    (resumed / "metrics.json").unlink()
    run_in_process(toy, resumed, "trainer.max_epochs=2", "ckpt_path=last")
    assert (resumed / "csv" / "metrics.part1.csv").is_file()
    history = report._val_history(resumed)
    assert history["val/epochs_validated"] == 2 and history["val/last_epoch"] == 1
    assert history == report._val_history(whole)
