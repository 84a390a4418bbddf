"""docs/results.md, "Is 2 epochs enough for IMDB?": every figure the paragraph quotes is recomputed from the run
records it publishes (docs/results/cpu/probes/imdb_epochs/) and from the compare stage's published records, and
the records are of the runs the paragraph says they are (epochs, seed, score function, data, commit)."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from omegaconf import OmegaConf

from .conftest import REPO_ROOT

PROBE = REPO_ROOT / "docs" / "results" / "cpu" / "probes" / "imdb_epochs"
COMPARE_RUNS = REPO_ROOT / "docs" / "results" / "cpu" / "runs" / "compare"
SEEDS = (0, 1)


def paragraph() -> str:
    text = " ".join((REPO_ROOT / "docs" / "results.md").read_text().split())
    start = text.index("#### Is 2 epochs enough for IMDB?")
    return text[start:text.index("<!-- generated", start)]


def record(epochs: int, seed: int) -> dict:
    return json.loads((PROBE / f"epochs{epochs}" / f"scaled_dot-imdb-s{seed}" / "metrics.json").read_text())


def validation_by_epoch(epochs: int, seed: int) -> list[tuple[int, float, float]]:
    """(epoch, val/acc, val/loss) of each validation the run's CSV log holds, in order."""
    path = PROBE / f"epochs{epochs}" / f"scaled_dot-imdb-s{seed}" / "csv" / "metrics.csv"
    return [(int(r["epoch"]), float(r["val/acc"]), float(r["val/loss"]))
            for r in csv.DictReader(path.open()) if r.get("val/acc")]


@pytest.mark.parametrize("epochs", [2, 6])
@pytest.mark.parametrize("seed", SEEDS)
def test_each_probe_record_is_the_run_the_paragraph_says(epochs, seed):
    run = PROBE / f"epochs{epochs}" / f"scaled_dot-imdb-s{seed}"
    config = OmegaConf.load(run / ".hydra" / "config.yaml")  # interpolations (max_length_by_data) resolved on access
    assert (config["attention"]["name"], config["data"]["name"], config["seed"]) == ("scaled_dot", "imdb", seed)
    assert config["trainer"]["max_epochs"] == epochs and config["data"]["max_length"] == 128
    assert config["task_name"] == "compare" and config["trainer"]["accelerator"] == "cpu"
    metrics = record(epochs, seed)
    assert metrics["stopped_by"] is None and metrics["train/steps_done"] == metrics["train/steps_planned"]
    assert metrics["test/samples"] == 25000 and metrics["train_host"] == metrics["test_host"]
    assert [e for e, _, _ in validation_by_epoch(epochs, seed)] == list(range(epochs))
    # the published compare run of this seed saw the same tokens (same data, same tokenizer, same batches)
    published = json.loads((COMPARE_RUNS / f"scaled_dot-imdb-s{seed}" / "metrics.json").read_text())
    assert metrics["test/tokens"] == published["test/tokens"]
    if epochs == 2:
        assert metrics["train/tokens"] == published["train/tokens"]


def test_all_four_probe_runs_ran_on_one_machine_on_the_commit_named():
    probe = json.loads((PROBE / "probe.json").read_text())
    hosts = {record(e, s)["train_host"] for e in (2, 6) for s in SEEDS}
    assert len(hosts) == 1 and sorted(probe["runs"]) == sorted(
        f"epochs{e}/scaled_dot-imdb-s{s}" for e in (2, 6) for s in SEEDS)
    text = paragraph()
    commit = probe["commit"]
    assert f"commit `{commit[:7]}`" in text and "training code is `43570ef`'s" in text
    try:  # the training code of the probe's commit is the one the training-code check covers
        changed = subprocess.run(["git", "diff", "--name-only", "43570ef", commit, "--", "src", "conf", "train.py"],
                                 cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError:
        pytest.skip("the clone lacks the probe's commit or 43570ef (shallow clone)")
    assert changed == ""


def test_the_paragraphs_figures_are_the_records():
    text = paragraph()
    six = [record(6, s)["test/acc"] for s in SEEDS]
    two = [record(2, s)["test/acc"] for s in SEEDS]
    assert f"Six epochs tested lower: {six[0]:.4f} and {six[1]:.4f} against {two[0]:.4f} and {two[1]:.4f}" in text
    deltas = [100 * (a - b) for a, b in zip(six, two)]
    assert all(d < 0 for d in deltas)
    assert f"(−{-deltas[0]:.1f} and −{-deltas[1]:.1f} points)" in text
    long_runs = [validation_by_epoch(6, s) for s in SEEDS]
    peaks = [max(v, key=lambda row: row[1]) for v in long_runs]
    assert all(epoch == 2 for epoch, _, _ in peaks)  # "peaked in the third epoch"
    assert f"peaked in the third epoch ({peaks[0][1]:.4f} and {peaks[1][1]:.4f}) and then fell" in text
    assert all(v[-1][1] < peak[1] for v, peak in zip(long_runs, peaks))
    first, last = [[v[i][2] for v in long_runs] for i in (0, -1)]
    assert all(min(loss for _, _, loss in v) == v[0][2] for v in long_runs)  # lowest after the first epoch
    assert (f"`val/loss` rose from {first[0]:.3f} and {first[1]:.3f} after the first epoch to {last[0]:.3f} "
            f"and {last[1]:.3f} after the sixth") in text
    for s in SEEDS:  # the 2-epoch run's best val/acc is its last epoch, as in every published IMDB run
        v = validation_by_epoch(2, s)
        assert max(v, key=lambda row: row[1])[0] == 1


def test_every_published_imdb_runs_best_checkpoint_is_its_last_epoch():
    import re

    rows = [r for r in csv.DictReader((REPO_ROOT / "docs/results/cpu/compare_jobs.csv").open()) if r["data"] == "imdb"]
    last = [int(re.search(r"epoch(\d+)", r["best_checkpoint"]).group(1)) == int(float(r["val/last_epoch"]))
            for r in rows]
    assert f"In all {len(rows)} IMDB runs the best-`val/acc` checkpoint is the last epoch's" in paragraph()
    assert all(last)


def test_the_cross_machine_comparison_quotes_the_published_runs():
    text = paragraph()
    published = [json.loads((COMPARE_RUNS / f"scaled_dot-imdb-s{s}" / "metrics.json").read_text())["test/acc"]
                 for s in SEEDS]
    twin = json.loads((COMPARE_RUNS / "scaled_dot-imdb-s0-on-vm-c4397b6f" / "metrics.json").read_text())["test/acc"]
    two = [record(2, s)["test/acc"] for s in SEEDS]
    assert (f"{two[0]:.4f} and {two[1]:.4f} against {published[0]:.4f} and {published[1]:.4f} "
            f"(seed 0's twin {twin:.4f})") in text
    row, = [r for r in csv.DictReader((REPO_ROOT / "docs/results/cpu/compare.csv").open())
            if r["data"] == "imdb" and r["attention"] == "scaled_dot"]
    std = float(row["acc_std"])
    gap = published[0] - two[0]
    assert f"Seed 0's gap, {100 * gap:.1f} points, is {gap / std:.1f} times IMDB `scaled_dot`'s std over seeds " \
           f"({std:.4f})" in text


def test_probe_json_holds_the_records_figures():
    """The summary probe.json keeps (which docs/results.md's generated table renders) is each run's record, copied
    exactly, and the published runs' figures are those runs' records."""
    probe = json.loads((PROBE / "probe.json").read_text())
    for name, run in probe["runs"].items():
        epochs, seed = int(name.split("/")[0][len("epochs"):]), int(name.rsplit("-s", 1)[1])
        v = validation_by_epoch(epochs, seed)
        assert run["val/acc_by_epoch"] == [acc for _, acc, _ in v]
        assert run["val/loss_by_epoch"] == [loss for _, _, loss in v]
        metrics = record(epochs, seed)
        assert (run["test/acc"], run["train/tokens"]) == (metrics["test/acc"], metrics["train/tokens"])
        assert f"trainer.max_epochs={epochs} attention=scaled_dot seed={seed}" in run["command"]
    for seed, published in probe["published_2_epoch_runs"].items():
        runs = [published] + ([published["twin"]] if "twin" in published else [])
        for run in runs:
            assert json.loads((REPO_ROOT / run["run"] / "metrics.json").read_text())["test/acc"] == run["test/acc"]
