"""The generated tables of the power-and-equivalence answer: per stage's jobs.csv, shared against tuned lr, the
tuned-lr grid, and the literature beside the numbers; each from files under a repository root, or a plain
sentence where a stage is not published."""

from __future__ import annotations

import csv
import json
import statistics

import pandas as pd
import pytest
from scipy import stats

from attnbench.analysis import tables


def _write(root, stage, rows):
    path = root / "docs" / "results" / "cpu" / f"{stage}_jobs.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _row(data, attention, seed, acc, lr="0.001", **extra):
    return {"job": f"{attention}-{data}-s{seed}", "status": "finished", "data": data, "attention": attention,
            "seed": str(seed), "test/acc": str(acc), "optim.lr": lr, "train_host": "", "stopped_by": "", **extra}


BASE = [0.800, 0.812, 0.795, 0.808, 0.803]


def _compare(shift, lr=None):
    lr = lr or {}
    return ([_row("sst2", "scaled_dot", s, x, lr.get("scaled_dot", "0.001")) for s, x in enumerate(BASE)]
            + [_row("sst2", "dot", s, x + d, lr.get("dot", "0.001")) for s, (x, d) in enumerate(zip(BASE, shift))])


def test_equivalence_table_of_a_jobs_csv_in_points():
    shift = [-0.004, -0.002, -0.006, -0.003, -0.005]
    text = tables.render_equivalence(_compare(shift))
    line = next(l for l in text.splitlines() if l.startswith("| sst2 | `dot`"))
    diffs = [100 * d for d in shift]
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = stats.t.ppf(0.975, 4) * sd / 5 ** 0.5
    assert f"{tables._sign(mean, 2)} [{tables._sign(mean - half, 2)}, {tables._sign(mean + half, 2)}]" in line
    assert line.endswith("| not recorded | equivalent within ±1 (resolved, smaller than the margin) |")


def test_lr_answers_say_when_the_tuned_stage_is_not_published(tmp_path):
    assert "has not been published" in tables.render_lr_answers(tmp_path)
    _write(tmp_path, "compare", _compare([-0.01] * 5))
    text = tables.render_lr_answers(tmp_path)
    assert "`compare_tuned` stage has not been published" in text
    line = next(l for l in text.splitlines() if l.startswith("| sst2 | `dot`"))
    assert line.endswith("| – | not published | – |") and "| 0.001 | −1.00 " in line
    # each score function at its own lr: paired with scaled_dot all the same
    _write(tmp_path, "compare_tuned", _compare([0.001, 0.002, 0.0, 0.001, 0.001],
                                               {"dot": "0.0003", "scaled_dot": "0.003"}))
    text = tables.render_lr_answers(tmp_path)
    assert "has not been published" not in text
    line = next(l for l in text.splitlines() if l.startswith("| sst2 | `dot`"))
    assert "| 0.0003 | +0.10 [" in line
    assert next(l for l in text.splitlines() if l.startswith("| sst2 | `scaled_dot`")).endswith(
        "| 0.001 | – | baseline | 0.003 | – | baseline |")


def test_tuned_lr_grid_and_the_chosen_lr(tmp_path):
    assert "`tune_lr` stage has not been published" in tables.render_tuned_lr(tmp_path)
    choice = {"metric": "val/acc_best", "shared_lr": 0.001,
              "chosen": {"sst2": {"scaled_dot": 0.001, "dot": 0.0003}},
              "values": {"sst2": {"dot": {"0.0003": 0.79, "0.001": 0.79, "0.003": 0.70},
                                  "scaled_dot": {"0.0003": 0.80, "0.001": 0.82, "0.003": 0.81},
                                  "cosine": {"0.0003": 0.8, "0.001": None, "0.003": 0.81}}},
              "incomplete": ["sst2/cosine"]}
    path = tmp_path / "docs" / "results" / "cpu" / "tune_lr_chosen_lr.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(choice))
    text = tables.render_tuned_lr(tmp_path)
    lines = {l.split(" | ")[1]: l for l in text.splitlines() if l.startswith("| sst2")}
    assert list(lines) == ["`scaled_dot`", "`cosine`", "`dot`"]
    assert lines["`scaled_dot`"] == "| sst2 | `scaled_dot` | 0.8000 | **0.8200** | 0.8100 | 0.001 | not published |"
    assert lines["`dot`"] == "| sst2 | `dot` | **0.7900** | 0.7900 | 0.7000 | 0.0003 | not published |"
    assert lines["`cosine`"] == "| sst2 | `cosine` | 0.8000 | – | 0.8100 | not chosen: runs missing | not published |"
    assert "lr 0.001 (shared)" in text and "Not chosen yet (a grid value's run missing): sst2/cosine." in text
    _write(tmp_path, "compare_tuned", _compare([0.0] * 5, {"dot": "0.001", "scaled_dot": "0.001"}))
    text = tables.render_tuned_lr(tmp_path)
    assert "| 0.0003 | 0.001 (not the chosen lr) |" in text and text.count("| 0.001 | 0.001 |") == 1


@pytest.mark.parametrize("lo, hi, expects, verdict", [
    ([0.1, -1.0], [0.5, 1.0], "better", "agree"), ([0.1, -1.0], [0.5, 1.0], "worse", "disagree"),
    ([0.1, -2.0], [0.5, -1.0], "better", "mixed"), ([-0.1, -1.0], [0.5, 1.0], "worse", "not resolved")])
def test_literature_verdict_rule(lo, hi, expects, verdict):
    table = pd.DataFrame({"lo": lo, "hi": hi, "verdict": ["x", "x"]})
    assert tables.literature_verdict(table, expects) == verdict
    unmeasured = table.assign(verdict="undetermined (cross-host, unmeasured)")
    assert tables.literature_verdict(unmeasured, expects) == "not resolved"


def test_literature_table_from_the_published_stages(tmp_path):
    text = tables.render_literature(tmp_path)
    assert "the `compare` stage is not published" in text and "not comparable: attnbench's `euclidean`" in text
    rows = _compare([0.0] * 5) + [_row("sst2", "cosine", s, x + 0.01 + 0.001 * s) for s, x in enumerate(BASE)]
    _write(tmp_path, "compare", rows)
    henry = next(l for l in tables.render_literature(tmp_path).splitlines() if l.startswith("| Henry"))
    assert henry.endswith("| agree (expects cosine better) |") and "sst2: +1.20 [" in henry


def test_literature_anchor_on_large_d_k_reads_the_largest_d_k_the_sweep_published(tmp_path):
    """Vaswani's anchor (unscaled dot at large d_k) pairs at the sweep's largest d_k, whichever grid was published:
    dot 2 points below scaled_dot at d_k 128 (the largest here), equal at 16."""
    rows = [_row("sst2", a, s, x - (0.02 + 0.001 * s if a == "dot" and dk == "128" else 0.0),
                 **{"model.head_dim": dk})
            for dk in ("16", "128") for a in ("scaled_dot", "dot") for s, x in enumerate(BASE[:3])]
    _write(tmp_path, "head_dim_sweep", rows)
    vaswani = next(l for l in tables.render_literature(tmp_path).splitlines() if l.startswith("| Vaswani"))
    assert "model.head_dim = 128 (the largest)" in vaswani and "| 128: −2.10 [" in vaswani
    assert vaswani.endswith("| agree (expects dot worse) |")


def test_lr_answers_of_a_dataset_the_tuned_stage_leaves_out(tmp_path):
    _write(tmp_path, "compare", _compare([0.0] * 5) + [_row("trec", a, s, 0.8) for a in ("scaled_dot", "dot")
                                                         for s in range(3)])
    _write(tmp_path, "compare_tuned", _compare([0.0] * 5))
    line = next(l for l in tables.render_lr_answers(tmp_path).splitlines() if l.startswith("| trec | `dot`"))
    assert line.endswith("| – | not run | – |")


def _d_a_rows():
    """scaled_dot and additive at d_a = d_k (hidden_dim null), 128 and 512 on SST-2, 3 seeds; additive d_a=512
    trains at a quarter of scaled_dot's rate except one run whose thread lost its core."""
    base = [0.80, 0.81, 0.79]
    rows = []
    for s, x in enumerate(base):
        rows.append(_row("sst2", "scaled_dot", s, x, **{"attention.hidden_dim": "", "model.head_dim": "32",
                                                         "model/params": "1000", "train/tokens_per_sec": "400",
                                                         "train/cpu_share": "1.0"}))
        for d_a, shift, params in (("null", -0.01, "1100"), ("128", -0.005 + 0.001 * s, "1300"),
                                   ("512", 0.0, "2100")):
            share = "0.5" if d_a == "512" and s == 0 else "0.99"
            rows.append(_row("sst2", "additive", s, x + shift, **{"attention.hidden_dim": d_a, "model.head_dim": "32",
                                                                 "model/params": params, "train/tokens_per_sec":
                                                                 "10" if share == "0.5" else "100",
                                                                 "train/cpu_share": share}))
    return rows


def test_d_a_table_pairs_each_hidden_size_with_scaled_dot_and_with_additive_at_d_k():
    text = tables.render_d_a(_d_a_rows())
    lines = [l for l in text.splitlines() if l.startswith("| sst2 |")]
    assert [l.split(" | ")[2:4] for l in lines] == [["`scaled_dot`", "–"], ["`additive`", "= d_k"],
                                                   ["`additive`", "128"], ["`additive`", "512"]]
    default, da128, da512 = lines[1:]
    assert "| 32 | `additive` | = d_k | 1,100 | 3 | 0.7900 [" in default
    # d_a = d_k: -1 point on every seed (sd 0): the interval is the point; vs itself nothing
    assert "| −1.00 [−1.00, −1.00] " in default and default.split(" | ")[8] == "–"
    diffs = [100 * (-0.005 + 0.001 * s) for s in range(3)]
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = stats.t.ppf(0.975, 2) * sd / 3 ** 0.5
    assert f"| {tables._sign(mean, 2)} [{tables._sign(mean - half, 2)}, {tables._sign(mean + half, 2)}] " in da128
    vs_default = [d + 1.0 for d in diffs]  # against additive at d_a = d_k, which is 1 point below scaled_dot
    assert f"| {tables._sign(statistics.fmean(vs_default), 2)} [" in da128
    # the rate: median of the undisturbed runs (100 tok/s) over scaled_dot's 400
    assert da512.endswith("| 0.25 |") and "| 2,100 | 3 | 0.8000 [" in da512


def test_d_a_table_needs_additive_at_its_default_hidden_size():
    rows = [r for r in _d_a_rows() if not (r["attention"] == "additive" and r["attention.hidden_dim"] == "null")]
    with pytest.raises(ValueError, match="no finished additive run at its default d_a"):
        tables.render_d_a(rows)


def test_d_a_table_counts_a_baseline_twin_as_its_seed_and_takes_rates_on_one_host():
    """A d_a run on a second host beside its scaled_dot twin there: the twin is no fourth seed (scaled_dot's mean is
    of the per-seed means), and the rate multiple is taken per host, never between hosts."""
    rows = [dict(r, train_host="A") for r in _d_a_rows()]
    for r in rows:
        if r["attention"] == "additive" and r["attention.hidden_dim"] == "512":
            r["train_host"], r["train/cpu_share"], r["train/tokens_per_sec"] = "B", "0.99", "30"
    rows.append(_row("sst2", "scaled_dot", 0, 0.82, **{"attention.hidden_dim": "", "model.head_dim": "32",
                                                        "model/params": "1000", "train/tokens_per_sec": "120",
                                                        "train/cpu_share": "1.0", "train_host": "B"}))
    lines = [l for l in tables.render_d_a(rows).splitlines() if l.startswith("| sst2 |")]
    base, da512 = lines[0], lines[-1]
    assert "| 3 | 0.8033 [" in base  # seeds 0-2: (0.80 + 0.82) / 2, 0.81, 0.79
    assert da512.endswith("| 0.25 |")  # 30 / 120 on host B, not 30 / 400 across hosts
