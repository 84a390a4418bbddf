"""What a user sees on the console of a run, and what the run leaves in its CSV log (issue 14)."""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.run.console import format_summary, human_bytes, human_seconds

from .conftest import REPO_ROOT, train_env

TINY = ["model=tiny", "data.max_train_samples=320", "data.max_eval_samples=64"]
NOISE = ("litlogger", "anonymous setting", "GPU available", "TPU available", "FLOPs", "Summary: {",
         "Seed set to", "Restoring states", "UserWarning")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, data_dir, cache_dir):
    """A 7-step run (max_steps stops it in its 2nd epoch of 5 batches, max_epochs=3): its console and dir."""
    run_dir = tmp_path_factory.mktemp("console") / "run"
    proc = subprocess.run(
        [sys.executable, "train.py", *TINY, "trainer.max_epochs=3", "trainer.max_steps=7",
         "callbacks.run_stats.warmup_steps=2", f"hydra.run.dir={run_dir}"],
        cwd=REPO_ROOT, env=train_env(data_dir, cache_dir), capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr, run_dir


@pytest.mark.slow
def test_summary_printed_once_headline_first_in_human_units(tiny_run):
    console, run_dir = tiny_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert console.count("attnbench · scaled_dot-sst2-s0 · done") == 1
    lines = console.split("attnbench · scaled_dot-sst2-s0 · done\n", 1)[1].splitlines()
    labels = [line.split("  ")[1] if line.startswith("  ") else None for line in lines[:7]]
    assert [label.strip() for label in labels] == ["test/acc", "val/acc_best", "train tokens/s", "test tokens/s",
                                                    "peak memory", "parameters", "total time"]
    values = {line[2:18].strip(): line[18:].strip() for line in lines[:7]}
    assert values["test/acc"] == f"{metrics['test/acc']:.4f}"
    assert values["val/acc_best"] == f"{metrics['val/acc_best']:.4f}"
    for phase in ("train", "test"):  # a rate whose thread had under 0.9 of a core (a shared core) is marked
        share = metrics[f"{phase}/cpu_share"]
        mark = f"  (disturbed: cpu share {share:.2f} < 0.9; reports leave this rate out)" if share < 0.9 else ""
        assert values[f"{phase} tokens/s"] == f"{metrics[f'{phase}/tokens_per_sec']:,.0f}" + mark
    assert values["peak memory"] == human_bytes(metrics["perf/peak_mem_bytes"])
    assert re.fullmatch(r"\d+\.\d (MiB|GiB)", values["peak memory"])
    assert values["total time"] == human_seconds(metrics["time/total_sec"])
    assert f"All {len([k for k in metrics if '/' in k])} figures: {run_dir}/metrics.json" in console
    # the full set is not printed: a diagnostic and f1 live in metrics.json only
    assert "diag/entropy" in metrics and "diag/entropy" not in console and "test/f1_macro" not in console
    # ... and the last line of train.log holds them all
    logged = (run_dir / "train.log").read_text().splitlines()[-1]
    assert json.loads(logged.split("] Summary: ", 1)[1]) == {k: round(v, 6) for k, v in metrics.items() if "/" in k}


@pytest.mark.slow
def test_no_library_noise(tiny_run):
    console, _ = tiny_run
    for noise in NOISE:
        assert noise not in console, noise


@pytest.mark.slow
def test_progress_bar_counts_to_the_max_steps_stop(tiny_run):
    """5 batches an epoch, max_steps=7: the run stops in epoch 1 after 2 of its batches."""
    console, _ = tiny_run
    bars = re.findall(r"Epoch (\d+)/(\d+)\s+\S+\s+(\d+)/(\d+)", console)
    assert bars, console
    assert {(e, last) for e, last, _, _ in bars} == {("0", "1"), ("1", "1")}
    assert {(e, n, total) for e, _, n, total in bars} == {("0", "5", "5"), ("1", "2", "2")}


@pytest.mark.slow
def test_csv_log_holds_the_whole_run_figures(tiny_run):
    """csv/metrics.csv ends with one row holding the figures of metrics.json that are not per-step series."""
    _, run_dir = tiny_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    last = {k: v for k, v in rows[-1].items() if v != ""}
    for key in ("train/tokens_per_sec", "test/tokens_per_sec", "perf/peak_mem_bytes", "model/params",
                "time/total_sec", "train/samples_per_sec", "diag/entropy"):
        assert key in last, (key, sorted(last))
        assert math.isclose(float(last[key]), metrics[key], rel_tol=1e-9), key
    assert int(last["step"]) == 7
    # every figure of metrics.json is somewhere in the CSV log
    logged = {k for row in rows for k, v in row.items() if v != ""}
    assert {k for k in metrics if "/" in k and not k.startswith(("best_", "wandb_"))} <= logged


def test_format_summary_units():
    assert human_bytes(776548352) == "740.6 MiB"
    assert human_bytes(3 * 2**30) == "3.0 GiB"
    assert human_seconds(24.12) == "24.1 s"
    assert human_seconds(125) == "2 min 05 s"
    assert human_seconds(3725) == "1 h 02 min"
    text = format_summary({"test/acc": 0.80512, "time/total_sec": 130.0}, {"run_name": "r", "output_dir": "/o"})
    lines = text.splitlines()
    assert lines[1].split() == ["test/acc", "0.8051"] and lines[3].split() == ["train", "tokens/s", "-"]
    assert lines[7].split() == ["total", "time", "2", "min", "10", "s"]


def test_an_imbalanced_test_set_shows_the_macro_f1_beside_the_accuracy():
    """Issue 38: on an imbalanced dataset the headline showed test/acc only, which always answering the largest
    class nearly reaches; the macro-F1 goes beside it, and a balanced test set keeps the one figure."""
    summary = {"test/acc": 0.86, "test/f1_macro": 0.4624}
    info = {"run_name": "r", "output_dir": "/o", "num_classes": 2}
    imbalanced = format_summary(summary, {**info, "test_largest_class_share": 0.866}).splitlines()[1]
    assert imbalanced.split() == ["test/acc", "0.8600", "(macro-F1", "0.4624;", "the", "largest", "class", "is",
                                  "87%", "of", "the", "test", "set)"]
    assert format_summary(summary, {**info, "test_largest_class_share": 0.51}).splitlines()[1].split() == [
        "test/acc", "0.8600"]


def test_a_sweeps_summary_shows_the_macro_f1_beside_an_imbalanced_accuracy(tmp_path):
    """The sweep's end-of-run lines showed test/acc only; a job with an imbalanced test set (its metrics.json:
    num_classes, test_largest_class_share) gets its macro-F1 beside it, as the single run's headline does."""
    from attnbench.run.hydra_callbacks import sweep_summary

    records = [{"num": 0, "status": "completed", "output_dir": str(tmp_path / "0_a"), "trained": True,
                "metrics": {"test/acc": 0.86, "test/f1_macro": 0.4624, "num_classes": 2,
                            "test_largest_class_share": 0.866, "test/tokens_per_sec": 1000.0}},
               {"num": 1, "status": "completed", "output_dir": str(tmp_path / "1_b"), "trained": True,
                "metrics": {"test/acc": 0.8, "test/f1_macro": 0.79, "num_classes": 2,
                            "test_largest_class_share": 0.51}}]
    text, failed = sweep_summary(tmp_path, records)
    assert failed == 0 and text.splitlines()[1:3] == [
        "  ok      0_a  test/acc 0.8600 (macro-F1 0.4624)  train tokens/s -  test tokens/s 1,000",
        "  ok      1_b  test/acc 0.8000  train tokens/s -  test tokens/s -"]


def _train(args, env, expect=0):
    proc = subprocess.run([sys.executable, "train.py", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_a_data_fault_leaves_failure_json(tmp_path, cache_dir):
    """A data failure (a split file missing, Hub unreachable) stops before training: one `Error:` line, no
    traceback, and failure.json in the run dir (before: only .hydra/ and train.log)."""
    data = tmp_path / "data" / "sst2"
    data.mkdir(parents=True)
    (data / "train.parquet").write_bytes(b"")  # validation.parquet missing
    env = train_env(tmp_path / "data", cache_dir)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")  # the Hub fails at once instead of after retries
    run_dir = tmp_path / "run"
    proc = _train([*TINY, "logger=csv", "data.packaged=false", f"hydra.run.dir={run_dir}"], env, expect=1)  # no packaged copy
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "missing: validation.parquet" in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    failure = json.loads((run_dir / "failure.json").read_text())
    assert failure["status"] == "failed" and failure["error_type"] == "DataUnavailableError"
    assert failure["where"] == "before training" and failure["checkpoint"] is None
    assert f"Error: {failure['error']}" == errors[0]
    assert not (run_dir / "metrics.json").exists()


def test_config_value_error_leaves_failure_json_and_loads_no_torch(tmp_path):
    """A bad value is answered before torch and Lightning load (fast); the run dir Hydra made gets failure.json."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-X", "importtime", "train.py", "data.batch_size=0", "logger=csv",
                           f"hydra.run.dir={run_dir}"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 1
    assert "Error: data.batch_size must be an integer >= 1, got 0" in proc.stderr.splitlines()
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported and not {"torch", "pytorch_lightning"} & imported
    assert json.loads((run_dir / "failure.json").read_text())["error"] == "data.batch_size must be an integer >= 1, got 0"


def test_help_loads_no_torch():
    proc = subprocess.run([sys.executable, "-X", "importtime", "train.py", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    shipped = sorted(path.stem for path in (REPO_ROOT / "conf" / "attention").glob("*.yaml"))  # one YAML each
    assert proc.returncode == 0 and f"attention: {', '.join(shipped)}" in proc.stdout
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported and not {"torch", "pytorch_lightning", "wandb", "datasets"} & imported


@pytest.mark.slow
def test_a_warning_is_one_line_without_its_source(tmp_path, data_dir, cache_dir):
    """`logger.wandb.mode=online` without credentials: W&B falls back to offline with a warning, printed as one
    log line (no `file.py:123: UserWarning` and no source line)."""
    env = train_env(data_dir, cache_dir)
    env["NETRC"] = str(tmp_path / "no-netrc")
    proc = _train([*TINY, "trainer.max_steps=2", "logger.wandb.mode=online", f"hydra.run.dir={tmp_path / 'run'}"],
                  env)
    console = proc.stdout + proc.stderr
    assert "W&B could not start online" in console
    assert not re.search(r"\.py:\d+: \w*Warning", console) and "warnings.warn(" not in console
    assert "W&B could not start online (no API key" in (tmp_path / "run" / "train.log").read_text()


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_a_finished_run_keeps_one_copy_of_its_final_checkpoint(tmp_path, data_dir, cache_dir):
    """One epoch: the best checkpoint is the last one; last.ckpt becomes a link to it (one 4 MB file, not two), and
    a run resumed from that last.ckpt in another dir starts at epoch 1 and trains it. (That an epoch-end epoch file
    and last.ckpt resume to the same outcome as an uninterrupted run is tests/test_resume.py's.)"""
    env = train_env(data_dir, cache_dir)
    short, resumed = tmp_path / "short", tmp_path / "resumed"
    base = [*TINY, "logger=csv", "callbacks.run_stats.warmup_steps=2"]
    _train([*base, "trainer.max_epochs=1", f"hydra.run.dir={short}"], env)
    files = sorted((short / "checkpoints").iterdir())
    best = Path(json.loads((short / "metrics.json").read_text())["best_checkpoint"])
    last = short / "checkpoints" / "last.ckpt"
    assert last.is_symlink() and last.resolve() == best.resolve() and len(files) == 3  # best's sha256 sidecar too
    assert [f.name for f in files if not f.is_symlink()] == [best.name, f"{best.name}.sha256"]
    _train([*base, "trainer.max_epochs=2", f"hydra.run.dir={resumed}", f"ckpt_path={last}"], env)
    metrics = json.loads((resumed / "metrics.json").read_text())
    assert Path(metrics["resumed_from"]).resolve() == best.resolve()
    assert metrics["resume"] == {"epoch": 1, "batches_done": 0, "batches_per_epoch": 5, "exact": True}
    assert "Resumed at the start of epoch 1 (step 5)" in (resumed / "train.log").read_text()
    with open(resumed / "csv" / "metrics.csv", newline="") as f:
        steps = {int(row["step"]) for row in csv.DictReader(f) if row.get("val/acc")}
    assert steps == {9}  # only epoch 1's validation (Lightning logs it at step index global_step - 1 = 9)


@pytest.mark.slow
def test_last_checkpoint_kept_when_the_best_is_older(tiny_run):
    """The tiny run validated at step 5 (epoch end) and stopped at step 7: best (step 5) and last (step 7) differ,
    so both files stay."""
    _, run_dir = tiny_run
    last = run_dir / "checkpoints" / "last.ckpt"
    best = Path(json.loads((run_dir / "metrics.json").read_text())["best_checkpoint"])
    assert "step5" in best.name and last.is_file() and not last.is_symlink()


@pytest.mark.slow
def test_wandb_history_ends_with_the_same_whole_run_row(tiny_run):
    """The W&B run (offline, read back from its .wandb file) gets the same last row as csv/metrics.csv."""
    from .test_short_run_logging import _wandb_history

    _, run_dir = tiny_run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    (wandb_run,) = (run_dir / "wandb").glob("offline-run-*")
    values = _wandb_history(wandb_run)[-1]
    for key in ("train/tokens_per_sec", "test/tokens_per_sec", "perf/peak_mem_bytes", "model/params",
                "time/total_sec"):
        assert math.isclose(float(values[key]), metrics[key], rel_tol=1e-9), key
    assert values["trainer/global_step"] == 7
