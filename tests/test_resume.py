"""Resume after a hard kill, and determinism: same seed, same metrics (CPU, trainer.deterministic=true)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, train_env

RUN = [
    "model=tiny",
    "data.max_train_samples=960",
    "data.max_eval_samples=128",
    "data.batch_size=16",
    "data.max_length=32",
    "trainer.max_epochs=3",
    "trainer.deterministic=true",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=10",
    "callbacks.run_stats.warmup_steps=5",
    "~callbacks.attention_diagnostics",
    "logger=csv",
]
# The training outcome: everything but timings, throughput and memory.
COMPARED = ("train/loss", "train/acc", "val/loss", "val/acc", "val/acc_best", "val/f1_macro",
            "test/acc", "test/f1_macro", "test/loss")


def _train(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "train.py", *args], check=False, cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"train.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir, cache_dir):
    """An uninterrupted deterministic run."""
    root = tmp_path_factory.mktemp("resume")
    env = train_env(data_dir, cache_dir)
    _train([*RUN, f"hydra.run.dir={root / 'reference'}"], env)
    return root, env, _metrics(root / "reference")


def test_same_seed_same_metrics(reference):
    """trainer.deterministic=true on CPU: a second run of the same seed gives identical metrics."""
    root, env, first = reference
    _train([*RUN, f"hydra.run.dir={root / 'again'}"], env)
    second = _metrics(root / "again")
    print("same seed twice: " + ", ".join(f"{k} {second[k]:.6f}/{first[k]:.6f}" for k in ("test/acc", "val/loss")))
    assert {k: second[k] for k in COMPARED} == {k: first[k] for k in COMPARED}


def test_resume_after_sigkill_matches_uninterrupted_run(reference):
    """SIGKILL after the first epoch-end checkpoint; `ckpt_path=last` into the same dir ends exactly where the
    uninterrupted run ends."""
    root, env, uninterrupted = reference
    run_dir = root / "killed"
    last = run_dir / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen([sys.executable, "train.py", *RUN, f"hydra.run.dir={run_dir}"], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not last.exists():  # written atomically (fsspec transaction): complete once it exists
            assert proc.poll() is None, f"the run ended before its first checkpoint:\n{proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not (run_dir / "metrics.json").exists(), "the run finished before it was killed"

    resumed_proc = _train([*RUN, f"hydra.run.dir={run_dir}", "ckpt_path=last"], env)
    resumed = _metrics(run_dir)
    assert resumed["resumed_from"] == str(last.resolve())
    log = (run_dir / "train.log").read_text()
    assert "Resumed at the start of epoch" in log, resumed_proc.stdout[-2000:]
    print("resumed vs uninterrupted: " + ", ".join(f"{k} {resumed[k]:.6f}/{uninterrupted[k]:.6f}" for k in COMPARED))
    assert {k: resumed[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}
    assert Path(resumed["best_checkpoint"]).parent == run_dir / "checkpoints"


def test_wandb_run_resumes_online_and_continues_offline(monkeypatch, tmp_path):
    """The W&B id stored in a checkpoint: resumed under that id online; offline, a new run that names it."""
    import pytorch_lightning.loggers as pl_loggers

    import attnbench.loggers as loggers_mod
    from attnbench.loggers import make_wandb_logger

    calls = []

    class FakeLogger:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        @property
        def experiment(self):
            return type("Run", (), {"id": calls[-1].get("id", "new"), "url": ""})()

    monkeypatch.setattr(pl_loggers, "WandbLogger", FakeLogger)
    # pretend credentials and a reachable server (without them online falls back to offline at once)
    monkeypatch.setattr(loggers_mod, "wandb_credentials_available", lambda: True)
    monkeypatch.setattr(loggers_mod, "wandb_server_unreachable", lambda *a, **k: None)
    make_wandb_logger(tmp_path, "run", {"seed": 0}, mode="online", resume={"id": "abc123", "mode": "online"})
    assert calls[-1]["id"] == "abc123" and calls[-1]["resume"] == "allow" and calls[-1]["mode"] == "online"
    make_wandb_logger(tmp_path, "run", {"seed": 0}, mode="offline", resume={"id": "abc123", "mode": "offline"})
    assert "id" not in calls[-1] and calls[-1]["config"]["resumed_from"] == "abc123"


def test_csv_log_of_a_resumed_run_is_kept(tmp_path):
    from attnbench.loggers import make_csv_logger

    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text("step,val/acc\n79,0.7\n")
    logger = make_csv_logger(tmp_path)
    logger.log_metrics({"val/acc": 0.8}, step=158)
    logger.save()
    assert (tmp_path / "csv" / "metrics.part1.csv").read_text() == "step,val/acc\n79,0.7\n"
    assert "158" in (tmp_path / "csv" / "metrics.csv").read_text()


def test_resolve_checkpoint(tmp_path):
    from attnbench.errors import ConfigError
    from attnbench.resume import resolve_checkpoint

    assert resolve_checkpoint(None, tmp_path) is None
    assert resolve_checkpoint("last", tmp_path) is None  # nothing yet: start from scratch (warns)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert resolve_checkpoint("last", tmp_path) == str(tmp_path / "checkpoints" / "last.ckpt")
    # a Ctrl-C/SIGTERM checkpoint written after it is newer: `last` resumes from there
    os.utime(tmp_path / "checkpoints" / "last.ckpt", (1_000_000_000, 1_000_000_000))
    (tmp_path / "checkpoints" / "interrupted.ckpt").write_bytes(b"")
    assert resolve_checkpoint("last", tmp_path) == str(tmp_path / "checkpoints" / "interrupted.ckpt")
    with pytest.raises(ConfigError, match="no such checkpoint file"):
        resolve_checkpoint(str(tmp_path / "missing.ckpt"), tmp_path)
