"""What README.md and docs/running.md say of the main job (``python train.py``): its figures are those of the
published ``compare`` runs that have its settings, and the console sample is what the documented tiny run prints."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from attnbench.report_stats import flatten_config, is_relevant

from .conftest import REPO_ROOT, train_env

README = REPO_ROOT / "README.md"
RUNNING = REPO_ROOT / "docs" / "running.md"


def flat(text: str) -> str:
    return " ".join(text.split())


def _jobs(stage: str) -> list[dict[str, str]]:
    with open(REPO_ROOT / "docs" / "results" / "cpu" / f"{stage}_jobs.csv", newline="") as f:
        return list(csv.DictReader(f))


def _min_s(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s"


def test_compare_scaled_dot_on_sst2_has_the_main_jobs_settings():
    """The claim "`compare`'s `scaled_dot` runs on SST-2 have exactly its settings (on a CPU machine)": every setting
    that can change a measurement composes to the same value, bar the accelerator (``auto`` is the CPU there)."""
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None):
        main = compose("train")
        job = compose("train", overrides=["experiment=compare", "trainer=cpu", "data=sst2", "attention=scaled_dot"])
    main_flat = flatten_config(OmegaConf.to_container(main, resolve=True))
    job_flat = flatten_config(OmegaConf.to_container(job, resolve=True))
    differ = {k: (main_flat.get(k), job_flat.get(k)) for k in set(main_flat) | set(job_flat)
              if is_relevant(k) and main_flat.get(k) != job_flat.get(k)}
    assert differ == {"trainer.accelerator": ("auto", "cpu")}, differ


def test_the_main_jobs_figures_are_the_published_runs():
    runs = [r for r in _jobs("compare") if r["data"] == "sst2" and r["attention"] == "scaled_dot"]
    assert len(runs) == 5
    val = sorted(float(r["val/acc_best"]) for r in runs)
    test = sorted(float(r["test/acc"]) for r in runs)
    secs = sorted(float(r["time/total_sec"]) for r in runs)
    running, readme = flat(RUNNING.read_text()), flat(README.read_text())
    assert (f"val/acc_best {val[0]:.4f}–{val[-1]:.4f} and test/acc {test[0]:.4f}–{test[-1]:.4f} (3 epochs × 1,000 "
            f"steps), in {_min_s(secs[0])} to {_min_s(secs[-1])} each") in running
    assert (f"3 epochs; {_min_s(secs[0])} to {_min_s(secs[-1])} on one CPU core, test/acc {test[0]:.4f}–{test[-1]:.4f} "
            f"over 5 seeds") in readme


def test_the_additive_speed_in_running_md_is_the_published_ratio():
    with open(REPO_ROOT / "docs" / "results" / "cpu" / "compare.csv", newline="") as f:
        rows = {(r["data"], r["attention"]): r for r in csv.DictReader(f)}
    additive, base = rows[("sst2", "additive")], rows[("sst2", "scaled_dot")]
    assert float(base["train_tok_s_ratio"]) == 1.0
    # the report's paired multiples (median over seeds of run / same-seed scaled_dot run), as Results quotes them
    train, test = float(additive["train_tok_s_ratio"]), float(additive["test_tok_s_ratio"])
    assert (f"`attention=additive` trains at {train:.2f}× `scaled_dot`'s tokens/s on SST-2 ({test:.2f}× at "
            f"inference") in flat(RUNNING.read_text())


def _sample(text: str) -> dict[str, str]:
    block = text.split("attnbench · scaled_dot-sst2-s0 · done\n", 1)[1].split("```", 1)[0]
    values = {line[2:18].strip(): line[18:].strip() for line in block.splitlines()[:7]}
    values["figures"] = re.search(r"^All (\d+) figures:", block, re.M).group(1)
    return values


@pytest.mark.slow  # a training run (about 20 s)
def test_the_console_sample_is_what_the_documented_tiny_run_prints(tmp_path, data_dir, cache_dir):
    """README's and running.md's sample headline: the tiny run running.md names, run now, prints the same accuracy
    figures (deterministic) and the same number of figures; the rates, memory and time are the machine's."""
    command = re.search(r"this one is a tiny run:\s+`([^`]+)`", RUNNING.read_text()).group(1).split()
    assert f"`{' '.join(command)}`" in flat(README.read_text())
    proc = subprocess.run([sys.executable, "train.py", "attention=scaled_dot", *command,
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO_ROOT, env=train_env(data_dir, cache_dir),
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = _sample(proc.stdout + proc.stderr)
    for doc in (README, RUNNING):
        shown = _sample(doc.read_text())
        for key in ("test/acc", "val/acc_best", "train tokens/s", "parameters", "figures"):
            assert shown[key] == printed[key], (doc.name, key, shown[key], printed[key])
