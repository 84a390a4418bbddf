"""Runs that ``trainer.max_time`` stopped before their step budget, in the report's summary (``summarise``).

Fast in-process twins of the end-to-end ``tests/test_max_time.py``: a job table as ``attnbench report``
builds it from ``metrics.json`` (``stopped_by``: ``"max_time"`` when the cap stopped the fit, ``null`` when
it did not, absent in files written before the key existed; ``train/steps_done``, ``train/steps_planned``,
``train/steps_per_sec``), and every expected number computed by hand in the comment next to it.
Written to kill the mutants of ``stopped_runs`` and the cost columns of ``summarise`` that survived
``scripts/mutation.sh`` (docs/mutation.md).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from attnbench.analysis.stats import ACC, STATUS_FAILED, STATUS_OK, summarise

T_975_DF1 = 12.706204736174705  # two-sided 95% Student-t quantile, 1 degree of freedom (table value)


def _job(attention, seed, acc, stopped_by=None, rate=None, done=None, planned=None, status=STATUS_OK):
    row = {"attention": attention, "seed": seed, "status": status, ACC: acc, "stopped_by": stopped_by,
           "train/steps_per_sec": rate, "train/steps_done": done, "train/steps_planned": planned}
    return {k: v for k, v in row.items() if v is not None or k == "stopped_by"}


def _sweep() -> pd.DataFrame:
    rows = [
        # dot: seeds 0 and 1 ran to their budget (stopped_by null, and "" which is no reason either);
        # seeds 2 and 3 were stopped by the cap; seed 4 failed (never counted, even with stopped_by set)
        _job("dot", 0, 0.80, None, rate=2.0, done=100, planned=100),
        _job("dot", 1, 0.84, "", rate=4.0, done=100, planned=100),
        _job("dot", 2, 0.10, "max_time", rate=0.04, done=40, planned=100),  # 40 steps in 1,000 s
        _job("dot", 3, 0.20, "max_time", rate=0.5, done=30, planned=120),  # 30 steps in 60 s
        _job("dot", 4, 0.90, "max_time", rate=9.0, done=1, planned=1, status=STATUS_FAILED),
        # scaled_dot (the baseline): seeds 0-2 finished, seed 3 stopped at 50 of 200 steps in 200 s
        _job("scaled_dot", 0, 0.78, None, rate=1.0, done=100, planned=100),
        _job("scaled_dot", 1, 0.80, None, rate=1.0, done=100, planned=100),
        _job("scaled_dot", 2, 0.90, None, rate=1.0, done=100, planned=100),
        _job("scaled_dot", 3, 0.30, "max_time", rate=0.25, done=50, planned=200),
    ]
    return pd.DataFrame(rows)


def test_stopped_runs_are_counted_extrapolated_and_left_out_of_accuracy():
    table = summarise(_sweep(), ["attention", "seed"], baseline="scaled_dot").set_index("attention")
    dot, base = table.loc["dot"], table.loc["scaled_dot"]
    # accuracy from the runs that reached their budget only: dot seeds 0, 1 -> 0.82 (n 2)
    assert dot["n"] == 2 and dot["acc_mean"] == pytest.approx(0.82, rel=1e-12)
    assert dot["acc_std"] == pytest.approx(math.sqrt(0.0008), rel=1e-9)  # deviations ±0.02
    # scaled_dot seeds 0-2: (0.78 + 0.80 + 0.90) / 3 = 2.48 / 3
    assert base["n"] == 3 and base["acc_mean"] == pytest.approx(2.48 / 3, rel=1e-12)
    # stopped runs: dot seeds 2, 3 (the failed seed 4 and the "" / null seeds 0, 1 are not)
    assert dot["n_stopped"] == 2 and base["n_stopped"] == 1
    assert dot["steps_done"] == pytest.approx(35.0, rel=1e-12)  # (40 + 30) / 2
    assert dot["steps_planned"] == pytest.approx(110.0, rel=1e-12)  # (100 + 120) / 2
    # whole budget at the measured rate: 100 / 0.04 = 2,500 s and 120 / 0.5 = 240 s -> mean 1,370 s
    assert dot["extrapolated_sec"] == pytest.approx(1370.0, rel=1e-12)
    assert base["steps_done"] == 50.0 and base["steps_planned"] == 200.0
    assert base["extrapolated_sec"] == pytest.approx(800.0, rel=1e-12)  # 200 / 0.25
    # the rates count every finished run, stopped or not, as a median: dot (0.04, 0.5, 2, 4) -> (0.5 + 2) / 2
    assert dot["train_steps_s"] == pytest.approx(1.25, rel=1e-12)
    assert dot["sec_per_step"] == pytest.approx(1 / 1.25, rel=1e-12)
    # scaled_dot (0.25, 1, 1, 1) -> 1 step/s (its mean, 0.8125, would be pulled down by the stopped run's rate)
    assert base["sec_per_step"] == pytest.approx(1.0, rel=1e-12)
    # the paired difference uses the seeds both finished to their budget: dot seeds 0, 1 vs scaled_dot 0, 1
    # (dot's stopped seed 2 is not paired with scaled_dot's finished seed 2): +0.02, +0.04 -> mean 0.03
    assert dot["diff_n"] == 2
    assert dot["diff_mean"] == pytest.approx(0.03, rel=1e-9)
    assert dot["diff_ci"] == pytest.approx(T_975_DF1 * (0.02 / math.sqrt(2)) / math.sqrt(2), rel=1e-9)
    # scaled_dot with itself: seeds 0-2, differences 0
    assert base["diff_n"] == 3 and base["diff_mean"] == 0.0


def test_a_null_or_absent_stopped_by_is_no_stop():
    # metrics.json written before the key existed: no stopped_by column at all
    jobs = pd.DataFrame([_job("dot", 0, 0.7, rate=2.0), _job("dot", 1, 0.9, rate=2.0)]).drop(columns="stopped_by")
    row = summarise(jobs, ["attention", "seed"]).iloc[0]
    assert row["n"] == 2 and row["acc_mean"] == pytest.approx(0.8, rel=1e-12)
    assert row["n_stopped"] == 0
    # a column read from JSON null (None) and from a missing key (NaN) alike: nothing stopped
    jobs = pd.DataFrame([_job("dot", 0, 0.7, rate=2.0), _job("dot", 1, 0.9, rate=2.0)])
    jobs["stopped_by"] = pd.Series([None, math.nan], dtype=object)
    row = summarise(jobs, ["attention", "seed"]).iloc[0]
    assert row["n"] == 2 and row["n_stopped"] == 0


def test_no_stopped_run_gives_zero_and_missing_step_columns():
    jobs = pd.DataFrame([_job("dot", 0, 0.7, rate=0.5), _job("additive", 0, 0.6, rate=4.0)])
    table = summarise(jobs, ["attention", "seed"])
    assert table["attention"].tolist() == ["dot", "additive"]
    assert table["n_stopped"].tolist() == [0, 0]
    for column in ("steps_done", "steps_planned", "extrapolated_sec"):
        assert all(isinstance(v, float) and math.isnan(v) for v in table[column]), column
    assert table["sec_per_step"].tolist() == pytest.approx([2.0, 0.25], rel=1e-12)  # 1 / 0.5, 1 / 4


def test_seconds_per_step_of_a_zero_or_unreadable_rate():
    jobs = pd.DataFrame([
        _job("dot", 0, 0.7, rate=0.0), _job("dot", 1, 0.7, rate=0.0),  # no step measured: no time per step
        _job("additive", 0, 0.7, rate="n/a"), _job("additive", 1, 0.7, rate=0.8),  # "n/a" is read as missing
    ])
    table = summarise(jobs, ["attention", "seed"]).set_index("attention")
    assert math.isnan(table.loc["dot", "sec_per_step"])
    assert table.loc["additive", "sec_per_step"] == pytest.approx(1.25, rel=1e-12)  # 1 / 0.8


def test_a_stopped_run_without_a_known_budget_has_no_extrapolation():
    # steps_planned is written only when the budget is known (max_steps or epochs x batches): here it is not
    jobs = pd.DataFrame([_job("dot", 0, 0.7, "max_time", rate=0.5, done=20),
                         _job("dot", 1, 0.7, "max_time", rate="n/a", done="30")])
    row = summarise(jobs, ["attention", "seed"]).iloc[0]
    assert row["n"] == 0 and math.isnan(row["acc_mean"])
    assert row["n_stopped"] == 2
    assert row["steps_done"] == pytest.approx(25.0, rel=1e-12)  # (20 + "30" read as 30) / 2
    assert math.isnan(row["steps_planned"]) and math.isnan(row["extrapolated_sec"])
    assert row["sec_per_step"] == pytest.approx(2.0, rel=1e-12)  # the one readable rate, 0.5 steps/s
