"""Resume after a hard kill, and determinism: same seed, same metrics (CPU, trainer.deterministic=true)."""

from __future__ import annotations

import json
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
    assert {k: resumed[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}
    assert Path(resumed["best_checkpoint"]).parent == run_dir / "checkpoints"
