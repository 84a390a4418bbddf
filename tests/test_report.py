"""attnbench report on a small synthetic multirun: statistics by hand, failed and missing jobs listed."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml

from attnbench.analysis import report


T_975_DF2 = 4.302652729911275  # Student t quantile, 97.5%, 2 degrees of freedom
T_975_DF1 = 12.706204736174705

# test/acc per (attention, seed); additive seed 2 fails, euclidean seed 2 never starts
ACC = {("scaled_dot", 0): 0.80, ("scaled_dot", 1): 0.82, ("scaled_dot", 2): 0.81,
       ("additive", 0): 0.78, ("additive", 1): 0.81,
       ("euclidean", 0): 0.79, ("euclidean", 1): 0.83}


def _job(root, num, attention, seed, metrics=None, log="", csv_steps=()):
    job = root / f"{num}_{attention}-sst2-s{seed}"
    (job / ".hydra").mkdir(parents=True)
    overrides = [f"seed={seed}", f"attention={attention}", "data=sst2", "trainer.max_steps=400"]
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"data": {"batch_size": 64}}))
    (job / "train.log").write_text(log)
    if csv_steps:
        (job / "csv").mkdir()
        pd.DataFrame({"step": list(csv_steps), "train/loss": [0.5] * len(csv_steps)}).to_csv(
            job / "csv" / "metrics.csv", index=False)
    if metrics is not None:
        (job / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def multirun(tmp_path):
    root = tmp_path / "multirun"
    root.mkdir()
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {
        "sweeper": {"params": {"seed": "0,1,2", "attention": "scaled_dot,additive,euclidean"}},
        "overrides": {"task": ["data=sst2", "trainer.max_steps=400"]},
    }}, sort_keys=False))
    num = 0
    for seed in range(3):
        for attention in ("scaled_dot", "additive", "euclidean"):
            if (attention, seed) in ACC:
                speed = {"scaled_dot": 8000.0, "additive": 2000.0, "euclidean": 7000.0}[attention]
                _job(root, num, attention, seed, metrics={
                    "test/acc": ACC[attention, seed], "train/tokens_per_sec": speed + seed,
                    "train/samples_per_sec": speed / 10, "test/tokens_per_sec": 5 * speed,
                    "perf/peak_mem_bytes": 2.0**30, "model/params": 1000.0,
                    "diag/entropy_norm": 0.9, "diag/saturated_frac": 0.01, "diag/max_score": 3.0,
                })
            elif attention == "additive":
                _job(root, num, attention, seed, csv_steps=(49, 99, 149),
                     log="[2026-11-29 12:00:00,000][attnbench][INFO] Training additive\n"
                         "[2026-11-29 12:00:09,000][attnbench][ERROR] Loss became NaN at step 150: lower optim.lr\n")
            else:
                continue  # euclidean seed 2: the sweep was killed before it started
            num += 1
    return root


def test_statistics_by_hand(multirun):
    jobs, swept = report.read_multirun(multirun)
    assert swept == ["seed", "attention"]
    table = report.summarise(jobs, swept).set_index("attention")

    sd = table.loc["scaled_dot"]
    assert sd.n == 3 and sd.acc_mean == pytest.approx(0.81)
    assert sd.acc_std == pytest.approx(0.01)
    assert sd.acc_ci == pytest.approx(T_975_DF2 * 0.01 / math.sqrt(3))

    add = table.loc["additive"]  # seeds 0 and 1 finished; paired with scaled_dot's seeds 0 and 1
    diffs = [0.78 - 0.80, 0.81 - 0.82]
    assert add.n == 2 and add.diff_n == 2
    assert add.diff_mean == pytest.approx(-0.015)
    assert add.diff_ci == pytest.approx(T_975_DF1 * abs(diffs[0] - diffs[1]) / math.sqrt(2) / math.sqrt(2))
    assert add.train_tok_s == pytest.approx(2000.5)
    assert add.train_steps_s == pytest.approx(200.0 / 64)  # samples/s over the configured batch size
    assert add.peak_mem_mb == pytest.approx(1024.0)


def test_failed_and_missing_jobs_are_listed(multirun, tmp_path):
    jobs, swept = report.read_multirun(multirun)
    status = {(r.attention, r.seed): r.status for r in jobs.itertuples()}
    assert status["additive", "2"] == "failed"
    assert status["euclidean", "2"] == "missing"
    assert sum(s == "finished" for s in status.values()) == 7 and len(status) == 9

    out = tmp_path / "out"
    markdown = report.build_report(jobs, swept, str(multirun), out)
    assert "Jobs: 9 — 7 finished, 1 failed, 0 incomplete (killed or still running), 1 not started." in markdown
    assert "| 7_additive-sst2-s2 | 2 | additive | failed | 149 | Loss became NaN at step 150: lower optim.lr |" \
        in markdown
    assert "| (not started) | 2 | euclidean | missing | – | – |" in markdown
    assert "| scaled_dot | 3 | 0.8100 ± 0.0100 | [0.7852, 0.8348] | – |" in markdown
    assert "| additive | 2 | 0.7950 ± 0.0212 |" in markdown
    assert (out / "report.md").read_text() == markdown
    assert len(pd.read_csv(out / "jobs.csv")) == 9
    assert (out / "pareto.png").stat().st_size > 10_000


def test_cli_exit_status_and_bad_dir(multirun, tmp_path, capsys):
    assert report.main([str(multirun), "--out", str(tmp_path / "r")]) == 0
    assert "attnbench report" in capsys.readouterr().out
    assert report.main([str(tmp_path / "nowhere")]) == 1
    assert "is not a Hydra multirun dir" in capsys.readouterr().err


def test_head_dim_and_length_plots(tmp_path):
    root = tmp_path / "sweep"
    num = 0
    for head_dim in (16, 64):
        for attention in ("dot", "scaled_dot"):
            job = root / f"{num}_{attention}-dk{head_dim}"
            (job / ".hydra").mkdir(parents=True)
            (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(
                [f"model.head_dim={head_dim}", f"attention={attention}", "seed=0"]))
            (job / "metrics.json").write_text(json.dumps({
                "test/acc": 0.8 - (0.01 * head_dim / 16 if attention == "dot" else 0), "train/tokens_per_sec": 1e3,
                "diag/saturated_frac": head_dim / 1000}))
            num += 1
    jobs, swept = report.read_multirun(root)  # no multirun.yaml: the keys that differ are the swept ones
    assert set(swept) == {"model.head_dim", "attention"}
    markdown = report.build_report(jobs, swept, str(root), tmp_path / "out")
    assert "![head_dim.png](head_dim.png)" in markdown
    assert (tmp_path / "out" / "head_dim.png").stat().st_size > 10_000


def test_a_setting_some_runs_lack_still_pairs():
    """Runs from before a config key existed (trainer.max_time added later) have NaN in its column; the paired Δ
    must pair NaN with NaN. Before: `base[k] == NaN` matched no run and every Δ of those runs was '–'."""
    rows = []
    for seed, (sd, dot) in enumerate(((0.80, 0.78), (0.82, 0.79), (0.81, 0.80))):
        for attention, acc in (("scaled_dot", sd), ("dot", dot)):
            rows.append({"attention": attention, "seed": seed, "data": "sst2", "trainer.max_time": math.nan,
                         "status": report.STATUS_OK, "test/acc": acc})
        rows.append({"attention": "dot", "seed": seed, "data": "trec", "trainer.max_time": "null",
                     "status": report.STATUS_OK, "test/acc": 0.5})  # no trec baseline: no Δ there
    table = report.summarise(pd.DataFrame(rows), ["attention", "seed", "data", "trainer.max_time"])
    sst2_dot = table[(table["attention"] == "dot") & (table["data"] == "sst2")].iloc[0]
    diffs = [0.78 - 0.80, 0.79 - 0.82, 0.80 - 0.81]
    assert sst2_dot.diff_n == 3
    assert sst2_dot.diff_mean == pytest.approx(sum(diffs) / 3)
    trec_dot = table[(table["attention"] == "dot") & (table["data"] == "trec")].iloc[0]
    assert math.isnan(trec_dot.diff_mean)


@pytest.mark.parametrize("damage", [lambda t: t[:40], lambda t: "", lambda t: "[1, 2]"])
def test_a_damaged_metrics_file_is_named_and_its_job_listed_as_failed(multirun, tmp_path, capsys, damage):
    """A truncated, empty or non-object metrics.json: the report names the file in one warning, lists the job as
    failed with that message, and reports the other runs."""
    metrics = next(multirun.glob("1_*/metrics.json"))
    metrics.write_text(damage(metrics.read_text()))
    assert report.main([str(multirun), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"Warning: {metrics} is damaged (" in err and "Traceback" not in err
    jobs = pd.read_csv(tmp_path / "r" / "jobs.csv")
    row = jobs[jobs["job"] == metrics.parent.name].iloc[0]
    assert row["status"] == "failed" and str(metrics) in row["error"] and "re-run the job" in row["error"]
    assert (jobs["status"] == "finished").sum() == 6
