"""Capacity curves: where each curve falls below 90%, from a hand-built report table, and the figure."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest
from scipy import stats

from attnbench.analysis import report
from attnbench.analysis.capacity import crossing, curves, render_capacity

LOADS = (8, 16, 24, 32)
# test accuracy per (d_k, attention, load): seeds 0, 1, 2
ACCURACY = {
    (8, "scaled_dot"): ((1.0, 1.0, 1.0), (0.99, 0.98, 0.99), (0.93, 0.85, 0.95), (0.70, 0.72, 0.71)),
    (8, "uniform"): ((0.31, 0.32, 0.30), (0.20, 0.21, 0.19), (0.15, 0.15, 0.16), (0.12, 0.13, 0.12)),
    (64, "scaled_dot"): ((1.0, 1.0, 1.0), (1.0, 1.0, 0.99), (0.98, 0.99, 0.98), (0.95, 0.96, 0.95)),
    (64, "uniform"): ((0.31, 0.32, 0.30), (0.20, 0.21, 0.19), (0.15, 0.15, 0.16), (0.12, 0.13, 0.12)),
}


def _jobs():
    return pd.DataFrame([{"data.num_pairs": load, "model.head_dim": dk, "attention": name, "seed": seed,
                          "status": report.STATUS_OK, "test/acc": acc}
                         for (dk, name), by_load in ACCURACY.items() for load, accs in zip(LOADS, by_load)
                         for seed, acc in enumerate(accs)])


def _table():
    return report.summarise(_jobs(), ["data.num_pairs", "model.head_dim", "attention", "seed"])


def _interval(values):
    mean, half = statistics.fmean(values), stats.t.ppf(0.975, 2) * statistics.stdev(values) / math.sqrt(3)
    return mean - half, mean + half


def test_curves_carry_the_seed_intervals():
    by_dk = curves(_table())
    assert list(by_dk) == [8, 64] and list(by_dk[8]) == ["scaled_dot", "uniform"]
    points = by_dk[8]["scaled_dot"]
    assert list(points["load"]) == list(LOADS)
    for (_, p), accs in zip(points.iterrows(), ACCURACY[(8, "scaled_dot")]):
        assert (p["lo"], p["hi"]) == pytest.approx(_interval(accs), abs=1e-12)


def test_crossing_brackets():
    by_dk = curves(_table())
    # d_k 8: 16 pairs' lower end 0.966 >= 0.9; 24 pairs' interval [0.76, 1.06] holds 0.9; 32 pairs' upper end < 0.9
    assert _interval(ACCURACY[(8, "scaled_dot")][2])[0] < 0.9 < _interval(ACCURACY[(8, "scaled_dot")][2])[1]
    assert crossing(by_dk[8]["scaled_dot"]) == (16, 32, False)
    assert crossing(by_dk[64]["scaled_dot"]) == (32, None, False)  # never below within the loads tested
    assert crossing(by_dk[8]["uniform"]) == (None, 8, False)
    one_seed = by_dk[8]["scaled_dot"].assign(lo=math.nan, hi=math.nan)  # no interval: the means decide
    assert crossing(one_seed) == (24, 32, True)


def test_markdown_and_figure(tmp_path):
    text = render_capacity(_table())

    assert "| d_k = 8 | 8 pairs | 16 pairs | 24 pairs | 32 pairs | falls below 90% |" in text
    lo, hi = _interval(ACCURACY[(8, "scaled_dot")][2])
    d8 = text.split("| d_k = 64")[0]
    assert f"0.910 [{lo:.3f}, {hi:.3f}]" in d8
    assert "holds to 16, below from 32 |" in d8 and "below from the smallest load (8) |" in d8
    assert "holds to 32 (the largest load tested) |" in text.split("| d_k = 64")[1]
    markdown = report.build_report(_jobs(), ["data.num_pairs", "model.head_dim", "attention", "seed"], "hand",
                                   tmp_path)
    assert "## Capacity" in markdown and (tmp_path / "capacity.png").stat().st_size > 10_000


def test_published_csv_renders_with_a_head_dim_from_its_jobs(tmp_path):
    """docs/results/<device>/capacity.csv renders through `attnbench tables`; a report of one head dim has no
    model.head_dim column (the report names only varied settings): it comes from capacity_jobs.csv."""
    from attnbench.analysis import tables

    jobs = _jobs()
    jobs = jobs[jobs["model.head_dim"] == 8]
    table = report.summarise(jobs.drop(columns="model.head_dim"), ["data.num_pairs", "attention", "seed"])
    pub = tmp_path / "docs" / "results" / "cpu"
    pub.mkdir(parents=True)
    table.to_csv(pub / "capacity.csv", index=False)
    jobs.to_csv(pub / "capacity_jobs.csv", index=False)
    text = tables.render("docs/results/cpu/capacity.csv", tmp_path)
    assert text.startswith("| d_k = 8 | 8 pairs |") and "holds to 16, below from 32 |" in text
    assert text == render_capacity(report.summarise(jobs, ["data.num_pairs", "model.head_dim", "attention", "seed"]))


def test_a_report_of_one_head_dim_names_it_from_the_fixed_settings(tmp_path):
    jobs = _jobs()
    jobs = jobs[jobs["model.head_dim"] == 64].drop(columns="model.head_dim")
    markdown = report.build_report(jobs, ["data.num_pairs", "attention", "seed"], "hand", tmp_path,
                                   fixed={"model.head_dim": "64"})
    assert "| d_k = 64 | 8 pairs |" in markdown and "holds to 32 (the largest load tested) |" in markdown


def test_a_partly_finished_stage_names_the_cells_with_fewer_seeds():
    """A cell with fewer seeds than the others (a capacity stage still running) says how many it has."""
    jobs = _jobs()
    jobs = jobs[~((jobs["model.head_dim"] == 8) & (jobs["attention"] == "uniform") & (jobs["data.num_pairs"] == 32)
                  & (jobs["seed"] > 0))]
    jobs = jobs[~((jobs["model.head_dim"] == 8) & (jobs["attention"] == "uniform") & (jobs["data.num_pairs"] == 24)
                  & (jobs["seed"] == 2))]
    text = render_capacity(report.summarise(jobs, ["data.num_pairs", "model.head_dim", "attention", "seed"]))
    d8_uniform = next(line for line in text.split("| d_k = 64")[0].splitlines() if line.startswith("| `uniform`"))
    assert "(1 seed)" in d8_uniform and "(2 seeds)" in d8_uniform


def test_the_figure_draws_each_run_as_a_dot_in_its_head_dims_panel():
    from attnbench.analysis.capacity import capacity_figure

    fig = capacity_figure(_table(), runs=_jobs())
    for ax, dk in zip(fig.axes, (8, 64)):
        from matplotlib.collections import PathCollection

        dots = [c for c in ax.collections if isinstance(c, PathCollection)]  # scatter; error bars are LineCollections
        accs = sorted(y for c in dots for _, y in c.get_offsets())
        expected = sorted(acc for (d, _), by_load in ACCURACY.items() if d == dk for accs_ in by_load for acc in accs_)
        assert accs == pytest.approx(expected)
