"""The report's "does not discriminate" mark: scaled_dot against the uniform control, paired by seed."""

from __future__ import annotations

import csv
import io
import math
import statistics

import pandas as pd
import pytest
from scipy import stats

from attnbench.analysis import report
from attnbench.analysis.stats import NO_DISCRIMINATION, control_gaps

SWEPT = ["data", "attention", "seed"]
# test accuracy per (data, attention): one value per seed 0, 1, 2
ACCURACY = {
    # attention does the work: a gap far outside the noise
    ("recall", "scaled_dot"): (1.000, 1.000, 0.999), ("recall", "uniform"): (0.220, 0.210, 0.230),
    # the control as good as content-based attention
    ("sst2", "scaled_dot"): (0.800, 0.820, 0.810), ("sst2", "uniform"): (0.810, 0.800, 0.815),
    # a positive mean gap whose paired interval still holds 0
    ("trec", "scaled_dot"): (0.850, 0.800, 0.860), ("trec", "uniform"): (0.800, 0.810, 0.820),
    # unpaired, the seeds' spread hides a gap; paired by seed it is the same +0.01 three times
    ("seedy", "scaled_dot"): (0.800, 0.850, 0.900), ("seedy", "uniform"): (0.790, 0.840, 0.890),
    # another score function is no control: no row for a setting without uniform
    ("nocontrol", "scaled_dot"): (0.9, 0.9, 0.9), ("nocontrol", "dot"): (0.5, 0.5, 0.5),
}


def _jobs(accuracy=ACCURACY, extra=()):
    rows = [{"data": data, "attention": attention, "seed": seed, "status": report.STATUS_OK, "test/acc": acc}
            for (data, attention), values in accuracy.items() for seed, acc in enumerate(values)]
    return pd.DataFrame([*rows, *extra])


def _paired(data):
    gaps = [b - c for b, c in zip(ACCURACY[(data, "scaled_dot")], ACCURACY[(data, "uniform")])]
    mean, std = statistics.fmean(gaps), statistics.stdev(gaps)
    half = stats.t.ppf(0.975, len(gaps) - 1) * std / math.sqrt(len(gaps))
    return mean, mean - half, mean + half


def test_gap_interval_and_verdict_by_hand():
    gaps = control_gaps(_jobs(), SWEPT).set_index("data")
    assert sorted(gaps.index) == ["recall", "seedy", "sst2", "trec"]
    for data in gaps.index:
        mean, lo, hi = _paired(data)
        row = gaps.loc[data]
        assert row.n == 3
        assert (row.gap, row.gap_lo, row.gap_hi) == pytest.approx((mean, lo, hi), abs=1e-12)
        assert row.baseline_acc == pytest.approx(statistics.fmean(ACCURACY[(data, "scaled_dot")]))
        assert row.control_acc == pytest.approx(statistics.fmean(ACCURACY[(data, "uniform")]))
    assert gaps.loc["recall", "discriminates"] == True  # noqa: E712 (a numpy bool)
    assert gaps.loc["seedy", "discriminates"] == True  # noqa: E712; the pairing, not the two means' spreads, decides
    assert gaps.loc["trec", "gap"] > 0 and gaps.loc["trec", "gap_lo"] < 0
    for data in ("sst2", "trec"):
        assert gaps.loc[data, "discriminates"] == False  # noqa: E712
        assert gaps.loc[data, "verdict"] == NO_DISCRIMINATION


def test_unpaired_seeds_and_one_seed():
    """Only seeds both finished pair; one such seed gives no interval and no verdict either way."""
    accuracy = {("one", "scaled_dot"): (0.9,), ("one", "uniform"): (0.2, 0.3)}
    failed = {"data": "one", "attention": "scaled_dot", "seed": 1, "status": report.STATUS_FAILED}
    gaps = control_gaps(_jobs(accuracy, [failed]), SWEPT)
    (row,) = gaps.itertuples()
    assert row.n == 1 and row.gap == pytest.approx(0.9 - 0.2) and math.isnan(row.gap_lo)
    assert row.discriminates is None and row.verdict.startswith("undetermined")


def test_report_section_marks_the_settings():
    text = report.control_text(_jobs(), SWEPT)
    lines = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert f"**{NO_DISCRIMINATION}**" in lines["sst2"] and f"**{NO_DISCRIMINATION}**" in lines["trec"]
    assert NO_DISCRIMINATION not in lines["recall"] and NO_DISCRIMINATION not in lines["seedy"]
    mean, lo, hi = _paired("recall")
    assert f"{mean:+.4f} [{lo:+.4f}, {hi:+.4f}]" in lines["recall"]
    # no uniform run, or attention not swept: no section
    assert report.control_text(_jobs({k: v for k, v in ACCURACY.items() if k[1] != "uniform"}), SWEPT) == ""
    assert report.control_text(_jobs(), ["data", "seed"]) == ""


def test_published_control_table_uses_the_same_rule(tmp_path):
    """attnbench tables renders a probe's report.csv with the report's verdict: summarise's diff of the uniform row
    negated, its interval, and the mark where the interval reaches 0."""
    from attnbench.analysis import tables

    for data, expected in (("recall", "scaled_dot beats uniform: attention matters here"),
                           ("trec", NO_DISCRIMINATION)):
        jobs = _jobs({k: v for k, v in ACCURACY.items() if k[0] == data})
        report.summarise(jobs, ["attention", "seed"]).to_csv(tmp_path / f"{data}.csv", index=False)
        rows = list(csv.DictReader(io.StringIO((tmp_path / f"{data}.csv").read_text())))
        text = tables.render_control(rows, task=data)
        mean, lo, hi = _paired(data)
        base, control = (statistics.fmean(ACCURACY[(data, name)]) for name in ("scaled_dot", "uniform"))
        assert f"{base:.4f} ± " in text and f"{control:.4f} ± " in text
        assert text.splitlines()[2].startswith(f"| {data} | 3 | ")
        assert text.splitlines()[2].endswith(f"| {tables._sign(mean)} "
                                                 f"[{tables._sign(lo)}, {tables._sign(hi)}] | {expected} |")
