"""A resumed run's whole-run figures cover the whole run: the training rate counts the measured steps before
the interruption too (RunStats keeps its counters in each checkpoint), and a run resumed from the checkpoint its
training ended with (killed while testing) still reports its rate and its final attention diagnostics."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from .test_faults import run_in_process, toy  # noqa: F401 - toy is a fixture

RATE_KEYS = ("train/samples", "train/tokens", "train/time_sec", "train/steps_per_sec", "train/tokens_per_sec",
             "train/cpu_share")


def _metrics(run_dir) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


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
    9 + 9 measured steps of 8 rows. Before: 9 (the steps after the checkpoint only)."""
    run_dir = tmp_path / "run"
    run_in_process(toy, run_dir, "trainer.max_epochs=-1", "trainer.max_steps=10")
    assert _metrics(run_dir)["train/samples"] == 9 * 8
    (run_dir / "metrics.json").unlink()
    run_in_process(toy, run_dir, "trainer.max_epochs=-1", "trainer.max_steps=20", "ckpt_path=last")
    metrics = _metrics(run_dir)
    assert metrics["train/steps_done"] == 20
    assert metrics["train/samples"] == (9 + 9) * 8
    assert metrics["train/steps_per_sec"] * metrics["train/time_sec"] == pytest.approx(18, rel=1e-9)
