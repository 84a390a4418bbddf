"""Power and equivalence of the report's paired comparisons: MDD, TOST, the verdict rule, and the hosts."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from attnbench.analysis import report
from attnbench.analysis.stats import (cross_host_variance, equivalence, min_detectable_difference, paired_verdict,
                                      tost_p)

DIFFS = np.array([0.2, -0.1, 0.4, 0.0, 0.3])  # paired differences, points


def _power(d: float, n: int, alpha: float = 0.05) -> float:
    """Two-sided power of a one-sample t test at standardised effect d (both tails)."""
    crit = stats.t.ppf(1 - alpha / 2, n - 1)
    nc = d * math.sqrt(n)
    return stats.nct.sf(crit, n - 1, nc) + stats.nct.sf(crit, n - 1, -nc)


@pytest.mark.parametrize("n, statsmodels_d", [(2, 11.549889754978167), (5, 1.6819970833232674),
                                              (10, 0.9960019107624178)])
def test_mdd_has_80_percent_power_and_matches_statsmodels(n, statsmodels_d):
    # statsmodels_d: TTestPower().solve_power(nobs=n, alpha=0.05, power=0.8, alternative="two-sided"), statsmodels 0.14.4
    sd = 0.65
    mdd = min_detectable_difference(sd, n)
    assert _power(mdd / sd, n) == pytest.approx(0.8, abs=1e-9)
    assert mdd == pytest.approx(statsmodels_d * sd, rel=1e-6)
    assert math.isnan(min_detectable_difference(sd, 1)) and min_detectable_difference(0.0, 5) == 0.0


def test_tost_p_by_hand_and_statsmodels():
    n, mean, sd = len(DIFFS), DIFFS.mean(), DIFFS.std(ddof=1)
    se = sd / math.sqrt(n)
    by_hand = max(1 - stats.t.cdf((mean + 1.0) / se, n - 1), stats.t.cdf((mean - 1.0) / se, n - 1))
    assert tost_p(mean, se, n - 1, 1.0) == pytest.approx(by_hand, rel=1e-12)
    # statsmodels 0.14.4 ttost_paired(x, x - DIFFS/100, -0.01, 0.01)[0] (the same differences as fractions)
    assert tost_p(mean / 100, se / 100, n - 1, 0.01) == pytest.approx(0.00041163427210293466, rel=1e-9)


def test_verdict_precedence():
    # equivalent: 90% interval inside ±1 and MDD <= 1
    v = paired_verdict(0.16, 0.2, 5, 1.0)
    assert v["verdict"] == "equivalent within ±1" and v["mdd"] <= 1
    # a resolved difference smaller than the margin is equivalent, and says so
    v = paired_verdict(-0.5, 0.2, 5, 1.0)
    assert v["hi"] < 0 and v["verdict"] == "equivalent within ±1 (resolved, smaller than the margin)"
    # a resolved difference at the margin: worse
    v = paired_verdict(-1.5, 0.3, 5, 1.0)
    assert v["verdict"] == "worse than scaled_dot"
    assert paired_verdict(1.5, 0.3, 5, 1.0)["verdict"] == "better than scaled_dot"
    # too little power: TOST alone would pass (interval inside ±1) but MDD > 1
    v = paired_verdict(0.0, 0.8, 5, 1.0)
    assert v["tost_p"] < 0.05 and v["mdd"] > 1.0
    assert v["verdict"] == f"undetermined (MDD {v['mdd']:.2f} > 1)"
    # enough power, the interval reaches past a margin
    v = paired_verdict(0.5, 0.55, 5, 1.0)
    assert v["lo"] < 0 and v["mdd"] <= 1 and v["tost_p"] > 0.05 and v["verdict"] == "undetermined"
    # cross-host unmeasured: nothing is claimed, even a resolved difference
    assert paired_verdict(-1.5, 0.3, 5, 1.0, unmeasured_hosts=True)["verdict"] == "undetermined (cross-host, unmeasured)"
    assert paired_verdict(0.1, math.nan, 1, 1.0)["verdict"].startswith("undetermined (1 paired seed")


def _run(data, attention, seed, acc, host=None):
    return {"data": data, "attention": attention, "seed": seed, "status": report.STATUS_OK, "test/acc": acc,
            "train_host": host}


SWEPT = ["data", "attention", "seed"]


def test_equivalence_pairs_on_one_host_and_adds_measured_host_variance():
    base = [0.800, 0.810, 0.790, 0.820]
    runs = [_run("a", "scaled_dot", s, x, "h1") for s, x in enumerate(base)]
    # every additive run on h1: same-host pairs
    runs += [_run("a", "additive", s, x - 0.003 + 0.001 * s, "h1") for s, x in enumerate(base)]
    # dot's seeds 2, 3 on h2, where a baseline twin of seed 2 ran (0.4 points apart), seed 3 has none: cross
    runs += [_run("a", "dot", s, x + 0.002, "h1" if s < 2 else "h2") for s, x in enumerate(base)]
    runs += [_run("a", "scaled_dot", 2, 0.794, "h2")]
    table = equivalence(pd.DataFrame(runs), SWEPT).set_index("attention")
    additive = table.loc["additive"]
    diffs = [100 * ((x - 0.003 + 0.001 * s) - x) for s, x in enumerate(base)]
    assert additive.pairs_same == 4 and additive.pairs_cross == 0 and math.isnan(additive.host_var)
    assert additive["diff"] == pytest.approx(statistics.fmean(diffs)) and additive.sd == pytest.approx(statistics.stdev(diffs))
    dot = table.loc["dot"]
    # seed 2 pairs with its twin on h2 (0.794), seed 3 with the mean of its baseline runs (one, on h1): cross
    dot_diffs = [0.2, 0.2, 100 * (0.792 - 0.794), 0.2]
    host_var = (100 * 0.004) ** 2 / 2  # the twins 0.790 (h1) and 0.794 (h2): one group, 1 df
    assert (dot.pairs_same, dot.pairs_cross, dot.host_df) == (3, 1, 1)
    assert dot.host_var == pytest.approx(host_var)
    assert dot["diff"] == pytest.approx(statistics.fmean(dot_diffs))
    assert dot.sd == pytest.approx(math.sqrt(statistics.variance(dot_diffs) + 2 * host_var))
    half = stats.t.ppf(0.975, 3) * dot.sd / 2
    assert (dot.lo, dot.hi) == pytest.approx((dot["diff"] - half, dot["diff"] + half))
    assert dot.mdd == pytest.approx(min_detectable_difference(dot.sd, 4))


def test_cross_host_without_twins_is_unmeasured_and_unrecorded_hosts_pair_by_seed():
    runs = [_run("a", "scaled_dot", s, 0.80 + 0.001 * s, "h1") for s in range(4)]
    runs += [_run("a", "dot", s, 0.80 + 0.001 * s, "h2") for s in range(4)]
    runs += [_run("b", "scaled_dot", s, 0.80 + 0.001 * s) for s in range(4)]
    runs += [_run("b", "dot", s, 0.801 + 0.001 * s) for s in range(4)]
    table = equivalence(pd.DataFrame(runs), SWEPT).set_index("data")
    assert table.loc["a", "verdict"] == "undetermined (cross-host, unmeasured)" and table.loc["a", "pairs_cross"] == 4
    assert table.loc["b", "pairs_unrecorded"] == 4 and table.loc["b", "hosts"] == 0
    assert table.loc["b", "verdict"] == "equivalent within ±1 (resolved, smaller than the margin)"
    assert report.hosts_text(table.loc["b"]) == "not recorded"


def test_cross_host_variance_pools_groups():
    runs = pd.DataFrame([{"attention": "x", "seed": 0, "test/acc": 1.0, "_host": "h1"},
                         {"attention": "x", "seed": 0, "test/acc": 2.0, "_host": "h2"},
                         {"attention": "x", "seed": 1, "test/acc": 1.0, "_host": "h1"},
                         {"attention": "x", "seed": 1, "test/acc": 4.0, "_host": math.nan},
                         {"attention": "x", "seed": 1, "test/acc": 4.0, "_host": "h3"},
                         {"attention": "x", "seed": 2, "test/acc": 5.0, "_host": "h1"},  # one host: no measure
                         {"attention": "x", "seed": 2, "test/acc": 9.0, "_host": "h1"}])
    var, df = cross_host_variance(runs, ["attention", "seed"])
    assert df == 3 and var == pytest.approx((0.5 + 6.0) / 3)


def test_report_writes_the_table_with_the_declared_margin(tmp_path):
    runs = [_run("a", "scaled_dot", s, 0.80 + 0.01 * s) for s in range(5)]
    runs += [_run("a", "dot", s, 0.80 + 0.01 * s - 0.001 * (s % 2)) for s in range(5)]
    jobs = pd.DataFrame(runs)
    text = report.build_report(jobs, ["data", "attention", "seed"], "test", tmp_path, margin=0.5)
    assert "## Power and equivalence (margin ±0.5 points)" in text
    saved = pd.read_csv(tmp_path / "equivalence.csv")
    assert list(saved["margin"]) == [0.5] and saved["verdict"][0].startswith("equivalent within ±0.5")
    diffs = [-0.1 * (s % 2) for s in range(5)]
    assert saved["diff"][0] == pytest.approx(statistics.fmean(diffs))
    with pytest.raises(SystemExit):
        report.main(["--margin", "0", str(tmp_path)])


def test_a_learning_rate_tuned_per_score_function_still_pairs_with_the_baseline():
    """compare at each score function's own lr: optim.lr varies with attention alone, so it is no pairing key;
    a grid of lrs per score function (the tuning stage) keeps it one."""
    from attnbench.analysis.stats import paired_setting_keys, summarise

    lr = {"scaled_dot": "0.001", "dot": "0.0003"}
    runs = [{**_run(d, a, s, 0.8 + 0.01 * s + (0.002 if a == "dot" else 0.0)), "optim.lr": lr[a]}
            for d in ("a", "b") for a in lr for s in range(3)]
    jobs = pd.DataFrame(runs)
    swept = ["data", "optim.lr", "attention", "seed"]
    assert paired_setting_keys(jobs, ["data", "optim.lr", "attention"]) == ["data"]
    table = summarise(jobs, swept).set_index(["data", "attention"])
    assert table.loc[("a", "dot"), "diff_mean"] == pytest.approx(0.002) and table.loc[("a", "dot"), "diff_n"] == 3
    verdicts = equivalence(jobs, swept).set_index("data")
    assert verdicts.loc["b", "diff"] == pytest.approx(0.2) and verdicts.loc["b", "n"] == 3
    grid = pd.DataFrame([{**r, "optim.lr": x} for r in runs for x in ("0.001", "0.003")])
    assert paired_setting_keys(grid, ["data", "optim.lr", "attention"]) == ["data", "optim.lr"]


def test_macro_f1_column_where_the_test_set_is_imbalanced():
    from attnbench.analysis.stats import imbalanced, summarise

    assert imbalanced(0.276, 6) is True and imbalanced(0.509, 2) is False and imbalanced(None, 2) is None
    runs = []
    for data, share, classes in (("trec", 0.276, 6), ("imdb", 0.5, 2), ("norecord", math.nan, math.nan)):
        for attention in ("scaled_dot", "dot"):
            for seed, f1 in enumerate((0.70, 0.74)):
                runs.append({**_run(data, attention, seed, 0.8), "test/f1_macro": f1 + (0.01 if attention == "dot" else 0),
                             "test_largest_class_share": share, "num_classes": classes})
    # a seed run twice (a baseline twin) counts once
    runs.append({**_run("trec", "scaled_dot", 1, 0.8), "test/f1_macro": 0.78, "test_largest_class_share": 0.276,
                 "num_classes": 6})
    jobs = pd.DataFrame(runs)
    table = summarise(jobs, SWEPT)
    cells, unrecorded = report.macro_f1_cells(jobs, table, ["data", "attention"])
    shown = dict(zip(zip(table["data"], table["attention"]), cells))
    assert shown[("trec", "scaled_dot")] == f"{statistics.fmean([0.70, (0.74 + 0.78) / 2]):.4f}"
    assert shown[("trec", "dot")] == "0.7300" and shown[("norecord", "dot")] == "0.7300"
    assert shown[("imdb", "dot")] == "–" and unrecorded == 2
    balanced = jobs[jobs["data"] == "imdb"]
    assert report.macro_f1_cells(balanced, summarise(balanced, SWEPT), ["data", "attention"])[0] is None
