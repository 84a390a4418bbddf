"""trainer.max_time: a per-job wall-time cap; a run it stops says so, and the report does not pass its accuracy
off as a final one (it shows the measured seconds per step and the extrapolated time of the whole budget)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from attnbench.errors import ConfigError
from attnbench.analysis import report
from attnbench.analysis.stats import ACC, STATUS_OK, summarise
from attnbench.run.console import format_summary, human_seconds
from attnbench.run.train import check_config

from .test_faults import compose_cfg, run_in_process, toy  # noqa: F401 - toy is a fixture

TOY_TRAIN_BATCHES = 22  # the toy data's training split after the validation carve: 176 rows in batches of 8


@pytest.mark.parametrize("value", ["00:00:00:00", "5min", "{hours:-1}", "{minute:5}", "{}", "0"])
def test_bad_max_time_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError) as err:
        check_config(compose_cfg([f"trainer.max_time={value}"]))
    assert str(err.value).startswith("trainer.max_time must be null, a duration 'DD:HH:MM:SS' > 0 or a mapping")


@pytest.mark.parametrize("value", ["null", "00:00:50:00", "01:00:00:00", "{minutes:50}", "{hours:1,seconds:0.5}"])
def test_good_max_time_passes(value):
    check_config(compose_cfg([f"trainer.max_time={value}"]))


def test_a_run_the_cap_stops_says_so_and_the_report_extrapolates(toy, tmp_path, capsys, monkeypatch):  # noqa: F811
    """10,000 epochs of 22 steps planned, 2 seconds allowed: the Timer stops the fit, metrics.json records
    stopped_by=max_time with the steps done and planned, and the report gives s/step and the extrapolated time
    instead of an accuracy. (The disturbed-run rule is off here: on a shared core this run's rate would be left
    out, which tests/test_disturbed_runs.py pins; this test is about the extrapolation.)"""
    monkeypatch.setattr("attnbench.analysis.stats.MIN_CPU_SHARE", 0.0)
    out = tmp_path / "stopped"
    run_in_process(toy, out, "trainer.max_epochs=10000", "trainer.max_time={seconds:2}")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped_by"] == "max_time"
    assert metrics["train/steps_planned"] == 10000 * TOY_TRAIN_BATCHES
    assert 1 <= metrics["train/steps_done"] < metrics["train/steps_planned"]
    logged = pd.read_csv(out / "csv" / "metrics.csv")
    assert metrics["train/steps_done"] == logged["step"].max()  # the whole-run row sits at the last step
    assert "stopped by trainer.max_time after" in capsys.readouterr().out

    report_dir = tmp_path / "report"
    assert report.main([str(out), "--out", str(report_dir), "--no-attention-maps"]) == 0
    table = pd.read_csv(report_dir / "report.csv")
    rate = metrics["train/steps_per_sec"]
    assert table.loc[0, "n"] == 0 and table.loc[0, "n_stopped"] == 1 and math.isnan(table.loc[0, "acc_mean"])
    assert table.loc[0, "steps_done"] == metrics["train/steps_done"]
    assert table.loc[0, "extrapolated_sec"] == pytest.approx(220_000 / rate, rel=1e-9)
    assert table.loc[0, "sec_per_step"] == pytest.approx(1 / rate, rel=1e-9)
    markdown = (report_dir / "report.md").read_text()
    assert "Jobs: 1 — 1 finished (1 of them stopped by trainer.max_time: unfinished), 0 failed" in markdown
    main_row = next(line for line in markdown.splitlines() if line.startswith("| 0 | unfinished"))
    steps = f"{metrics['train/steps_done']:,.0f}"
    assert f"unfinished: stopped by max_time at {steps} of 220,000 steps (1 seed)" in main_row
    assert f"{metrics[ACC]:.4f}" not in main_row  # no accuracy that reads as final
    assert f"{human_seconds(220_000 / rate)} (unfinished)" in main_row
    stopped_row = next(line for line in markdown.split("(unfinished)\n", 1)[1].splitlines()
                       if line.startswith("| stopped |"))
    assert f"| trainer.max_time | {steps} / 220,000 | {1 / rate:.3g} |" in stopped_row
    assert f"| {human_seconds(220_000 / rate)} | {metrics[ACC]:.4f} (unfinished; 40 test rows) |" in stopped_row


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "all"])
def test_bad_test_batches_if_stopped_is_refused_naming_the_key(value):
    """Out of range (the run's check) or of the wrong type (the schema, while composing): one message."""
    from hydra.errors import ConfigCompositionException

    from attnbench.config import type_error_message

    expected = "test_batches_if_stopped must be null or an integer >= 1, got "
    try:
        cfg = compose_cfg([f"test_batches_if_stopped={value}"])
    except ConfigCompositionException as err:
        assert type_error_message(err) == expected + (value if value == "1.5" else repr(value))
        return
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert str(err.value) == expected + value


@pytest.mark.parametrize("limit, stop, tested", [
    (None, True, 40),   # the whole toy test split (40 rows, 5 batches of 8)
    (2, True, 16),      # a run the cap stopped: its first 2 batches only
    (2, False, 40),     # a run that finished its budget is tested in full, whatever the setting
])
@pytest.mark.slow
def test_a_stopped_run_is_tested_on_test_batches_if_stopped(toy, tmp_path, limit, stop, tested):  # noqa: F811
    """``test_batches_if_stopped`` bounds the test of an unfinished run (its accuracy is not reported; for
    additive at long n the whole test would outlast the capped fit) and of nothing else; ``test/samples`` and the
    report's stopped-run table say how many rows were tested."""
    out = tmp_path / "run"
    budget = ["trainer.max_epochs=10000", "trainer.max_time={seconds:2}"] if stop else ["trainer.max_steps=3"]
    run_in_process(toy, out, "data.eval_batch_size=8", f"test_batches_if_stopped={limit or 'null'}", *budget)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped_by"] == ("max_time" if stop else None)
    assert metrics["test/samples"] == tested
    # the report keeps a rate of the first batches only apart from whole-split rates
    assert metrics.get("test/limited_to_batches") == (limit if tested < 40 else None)


@pytest.mark.parametrize("fraction, cap, tested", [
    (0.2, 2, 8),    # the user's own limit (1 of 5 batches) is the smaller: it stays
    (0.6, 2, 16),   # 3 of 5 batches: the cap's 2 are the smaller
])
@pytest.mark.slow
def test_a_fraction_limit_test_batches_is_never_raised_by_the_cap(toy, tmp_path, fraction, cap, tested):  # noqa: F811
    """``test_batches_if_stopped`` only ever lowers the test of a stopped run: with ``trainer.limit_test_batches``
    a fraction (Lightning: int(batches x fraction)), the smaller of the two counts. Before: the cap replaced any
    fraction, so ``limit_test_batches=0.2`` with the cap at 2 tested 16 rows (2 batches) instead of 8 (1 batch)."""
    out = tmp_path / "run"
    run_in_process(toy, out, "data.eval_batch_size=8", f"test_batches_if_stopped={cap}",
                   f"trainer.limit_test_batches={fraction}", "trainer.max_epochs=10000", "trainer.max_time={seconds:2}")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped_by"] == "max_time"
    assert metrics["test/samples"] == tested


def test_a_test_cut_to_its_first_batches_is_kept_out_of_the_test_rate():
    """test_tok_s compares score functions' inference rates over the whole test split; a stopped run tested on its
    first batches only (test_batches_if_stopped; under length-grouped batching the longest rows, a heavier
    workload) is left out of it and its rate shown in the stopped-run table instead. Before: the variant's median
    mixed the two workloads (1,000 tok/s over the split, 600 on the longest batches: test_tok_s 800)."""
    jobs = pd.DataFrame([
        {**_job("additive", 0, 0.70), "test/tokens_per_sec": 1000.0, "test/samples": 40.0},
        {**_job("additive", 1, 0.60, stopped=True), "test/tokens_per_sec": 600.0, "test/samples": 16.0,
         "test/limited_to_batches": 2.0},
        {**_job("l2", 0, 0.55, stopped=True), "test/tokens_per_sec": 500.0, "test/samples": 16.0,
         "test/limited_to_batches": 2.0},
        {**_job("dot", 0, 0.65, stopped=True), "test/tokens_per_sec": 900.0, "test/samples": 40.0},  # whole split
    ])
    jobs["job"] = [f"{a}-s{s}" for a, s in zip(jobs["attention"], jobs["seed"])]
    table = summarise(jobs, ["attention", "seed"]).set_index("attention")
    assert table.loc["additive", "test_tok_s"] == 1000.0
    assert math.isnan(table.loc["l2", "test_tok_s"])
    assert table.loc["dot", "test_tok_s"] == 900.0  # stopped, but tested on the whole split: comparable
    rows = report.stopped_table(jobs, ["attention", "seed"]).splitlines()
    (l2_row,) = [r for r in rows if r.startswith("| l2-s0 ")]
    assert l2_row.endswith("| 0.5500 (unfinished; 16 test rows, 500 test tok/s on its first 2 batches) |")
    (dot_row,) = [r for r in rows if r.startswith("| dot-s0 ")]
    assert dot_row.endswith("| 0.6500 (unfinished; 40 test rows) |")


def test_a_run_within_its_cap_is_not_marked(toy, tmp_path):  # noqa: F811
    out = tmp_path / "finished"
    run_in_process(toy, out, "trainer.max_steps=5", "trainer.max_time={minutes:10}")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped_by"] is None
    assert metrics["train/steps_done"] == metrics["train/steps_planned"] == 5


def _job(attention: str, seed: int, acc: float, stopped: bool = False) -> dict:
    job = {"attention": attention, "seed": seed, ACC: acc, "status": STATUS_OK, "train/steps_per_sec": 4.0,
           "stopped_by": "max_time" if stopped else None}
    if stopped:
        job.update({"train/steps_done": 100.0, "train/steps_planned": 1000.0})
    return job


def test_summarise_leaves_stopped_runs_out_of_accuracy_and_pairing():
    jobs = pd.DataFrame([
        _job("scaled_dot", 0, 0.80), _job("scaled_dot", 1, 0.84), _job("scaled_dot", 2, 0.50, stopped=True),
        _job("additive", 0, 0.70), _job("additive", 1, 0.60, stopped=True), _job("additive", 2, 0.90),
        _job("l2", 0, 0.55, stopped=True),
    ])
    jobs.loc[6, "train/steps_per_sec"] = 0.5  # l2 runs at 2 s per step
    table = summarise(jobs, ["attention", "seed"]).set_index("attention")
    assert table.loc["scaled_dot", "acc_mean"] == pytest.approx(0.82)  # (0.80 + 0.84) / 2, not the stopped 0.50
    assert table.loc["scaled_dot", "n"] == 2 and table.loc["scaled_dot", "n_stopped"] == 1
    # additive: seeds 0 and 2 finished, but scaled_dot's seed 2 stopped: only seed 0 pairs (0.70 - 0.80)
    assert table.loc["additive", "acc_mean"] == pytest.approx(0.80)
    assert table.loc["additive", "diff_mean"] == pytest.approx(-0.10) and table.loc["additive", "diff_n"] == 1
    # l2 never finished: no accuracy; 100 of 1,000 steps at 0.5 steps/s -> 2 s per step, 1,000 / 0.5 = 2,000 s
    assert table.loc["l2", "n"] == 0 and math.isnan(table.loc["l2", "acc_mean"])
    assert table.loc["l2", "steps_done"] == 100 and table.loc["l2", "steps_planned"] == 1000
    assert table.loc["l2", "sec_per_step"] == pytest.approx(2.0)
    assert table.loc["l2", "extrapolated_sec"] == pytest.approx(2000.0)
    assert table.loc["scaled_dot", "extrapolated_sec"] == pytest.approx(250.0)  # 1,000 / 4.0
    # a table without stopped runs: n_stopped 0, the three stop columns NaN
    plain = summarise(jobs[jobs["stopped_by"].isna()], ["attention", "seed"])
    assert (plain["n_stopped"] == 0).all() and plain["extrapolated_sec"].isna().all()


def test_console_title_names_the_stop():
    summary = {"train/steps_done": 120.0, "train/steps_planned": 4700.0}
    title = format_summary(summary, {"run_name": "r", "output_dir": "/o", "stopped_by": "max_time"}).splitlines()[0]
    assert title == "attnbench · r · stopped by trainer.max_time after 120 of 4,700 steps (not trained to its budget)"
    assert format_summary(summary, {"run_name": "r", "output_dir": "/o", "stopped_by": None}).startswith(
        "attnbench · r · done\n")
