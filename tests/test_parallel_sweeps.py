"""Sweeps that use every core: jobs side by side, each pinned to its own CPUs with as many threads, give the
metrics of the same jobs run one at a time, and each run records the CPUs it ran on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from attnbench.run.hydra_callbacks import split_cpus

from .conftest import REPO_ROOT, train_env

TINY = ["data=trec", "trainer.max_steps=4", "trainer.max_epochs=2", "data.max_train_samples=64",
        "data.max_eval_samples=32", "logger=csv", "trainer.enable_progress_bar=false"]
needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="needs Linux CPU affinity and 2 CPUs")


def outcome(metrics: dict) -> dict:
    """What a run computed (accuracies, losses, diagnostics, counts, the best checkpoint's name), without its
    time, rates and CPU share, which depend on the machine's load."""
    kept = {k: v for k, v in metrics.items()
            if "/" in k and not any(t in k for t in ("per_sec", "time", "cpu_share", "peak_mem"))}
    kept["best_checkpoint"] = os.path.basename(metrics["best_checkpoint"] or "")
    return kept


def test_split_cpus_gives_equal_disjoint_groups_and_refuses_more_jobs_than_cpus():
    assert split_cpus([0, 1, 2, 3, 5], 2) == [[0, 1], [2, 3]]
    assert split_cpus([4, 7], 2) == [[4], [7]]
    with pytest.raises(ValueError, match=r"hydra.launcher.n_jobs=3: this process may use 2 CPU\(s\)"):
        split_cpus([0, 1], 3)


@pytest.mark.slow  # two tiny jobs twice (about a minute on 2 cores)
@needs_two_cpus
def test_launcher_cores_pins_each_job_to_its_own_cpu_with_the_metrics_of_one_at_a_time(tmp_path, data_dir,
                                                                                          cache_dir):
    env = train_env(data_dir, cache_dir)
    sweep = ["attention=dot,additive", *TINY]
    both = subprocess.run([sys.executable, "train.py", "-m", "launcher=cores", *sweep,
                           f"hydra.sweep.dir={tmp_path / 'both'}"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert both.returncode == 0, both.stdout[-3000:] + both.stderr[-3000:]
    alone = subprocess.run([sys.executable, "train.py", "-m", *sweep, f"hydra.sweep.dir={tmp_path / 'alone'}"],
                           cwd=REPO_ROOT, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                           timeout=600)
    assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
    runs = {}
    for which in ("both", "alone"):
        for path in (tmp_path / which).glob("*/metrics.json"):
            metrics = json.loads(path.read_text())
            runs[which, metrics["attention"]] = metrics
    assert len(runs) == 4
    groups = [runs["both", a]["cpus"] for a in ("dot", "additive")]
    assert all(len(g) == 1 for g in groups) and groups[0] != groups[1]  # its own core each
    for attention in ("dot", "additive"):
        assert runs["both", attention]["torch_threads"] == runs["alone", attention]["torch_threads"] == 1
        assert outcome(runs["both", attention]) == outcome(runs["alone", attention]), attention
