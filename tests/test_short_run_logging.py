"""A run with fewer optimizer steps than trainer.log_every_n_steps still logs its per-step series."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from .conftest import REPO_ROOT, train_env


def _wandb_history(run_dir) -> list[dict]:
    """The history rows of an offline W&B run, read back from its .wandb log with `wandb leet inspect --json`."""
    wandb_bin = __import__("pathlib").Path(sys.executable).with_name("wandb")
    proc = subprocess.run([str(wandb_bin), "leet", "inspect", "--json", str(run_dir)], capture_output=True, text=True,
                          check=True, timeout=120)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


@pytest.mark.slow
def test_short_run_logs_train_loss_to_csv_and_wandb(tmp_path, data_dir, cache_dir):
    """The issue's case: 48 training rows, batch 16, 2 epochs = 6 optimizer steps < log_every_n_steps (50)."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "train.py", "model=tiny", "data.batch_size=16", "data.max_train_samples=48",
         "data.max_eval_samples=32", "trainer.max_epochs=2", "trainer.enable_progress_bar=false",
         "~callbacks.attention_diagnostics", f"hydra.run.dir={out}"],
        cwd=REPO_ROOT, env=train_env(data_dir, cache_dir), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())

    csv = pd.read_csv(out / "csv" / "metrics.csv")
    losses = csv.dropna(subset=["train/loss"])
    assert len(losses) >= 1
    # the row of the last step (step 5 of 0..5) holds the loss the summary reports as the last step's
    assert losses["step"].iloc[-1] == 5
    assert losses["train/loss"].iloc[-1] == pytest.approx(metrics["train/loss"], rel=1e-6)
    assert csv.filter(like="lr-AdamW").notna().any(axis=None)  # the learning-rate series too

    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    history = [row for row in _wandb_history(runs[0]) if "train/loss" in row]
    assert len(history) >= 1
    assert history[-1]["trainer/global_step"] == 5
    assert history[-1]["train/loss"] == pytest.approx(metrics["train/loss"], rel=1e-6)
