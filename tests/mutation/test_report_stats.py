"""The report's statistics (attnbench.analysis.stats) against hand counts and Student-t table values.

Written to kill the mutants `scripts/mutation.sh` found surviving in ``mean_ci`` and ``summarise``:
every expected number below is computed by hand in the comment next to it, and the t quantiles are
table values (not scipy's output).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from attnbench.analysis.stats import ACC, STATUS_FAILED, STATUS_OK, mean_ci, summarise

T_975 = {1: 12.706204736174705, 2: 4.302652729911275, 3: 3.182446305284263}  # two-sided 95%, df
T_95_DF2 = 2.919985580355516  # two-sided 90%, 2 degrees of freedom
# scipy's t.ppf agrees with these table values to 4e-11 relative (measured): intervals are compared at 1e-9
T_REL = 1e-9


# --------------------------------------------------------------------------- mean_ci


def test_mean_ci_empty_and_single_value():
    mean, std, half, n = mean_ci([])
    assert n == 0 and math.isnan(mean) and math.isnan(std) and math.isnan(half)
    mean, std, half, n = mean_ci([0.7])
    assert (mean, n) == (0.7, 1) and math.isnan(std) and math.isnan(half)


def test_mean_ci_two_values_by_hand():
    # [1, 3]: mean 2, sample std sqrt(((1-2)^2 + (3-2)^2) / 1) = sqrt(2), half = t(df=1) * sqrt(2) / sqrt(2)
    mean, std, half, n = mean_ci([1.0, 3.0])
    assert (mean, n) == (2.0, 2)
    assert std == pytest.approx(math.sqrt(2.0), rel=1e-12)
    assert half == pytest.approx(T_975[1], rel=T_REL)


def test_mean_ci_skips_missing_values_and_takes_the_level():
    # None and NaN are jobs without the metric: [0.5, 0.6, 0.8] remain; mean 19/30,
    # deviations -4/30, -1/30, 5/30: sum of squares 42/900, / 2 = 21/900 -> std sqrt(21)/30
    values = [0.5, None, 0.6, float("nan"), 0.8]
    mean, std, half, n = mean_ci(values)
    assert n == 3
    assert mean == pytest.approx(19 / 30, rel=1e-12)
    assert std == pytest.approx(math.sqrt(21) / 30, rel=1e-12)
    assert half == pytest.approx(T_975[2] * math.sqrt(21) / 30 / math.sqrt(3), rel=T_REL)
    _, _, half90, _ = mean_ci(values, level=0.90)
    assert half90 == pytest.approx(T_95_DF2 * math.sqrt(21) / 30 / math.sqrt(3), rel=T_REL)


def test_mean_ci_four_values_uses_n_minus_one():
    # [2, 4, 4, 6]: mean 4; squares 4+0+0+4 = 8; sample variance 8/3 (population would be 2)
    mean, std, half, n = mean_ci(pd.Series([2, 4, 4, 6]))
    assert (mean, n) == (4.0, 4)
    assert std == pytest.approx(math.sqrt(8 / 3), rel=1e-12)
    assert half == pytest.approx(T_975[3] * math.sqrt(8 / 3) / 2, rel=T_REL)


# --------------------------------------------------------------------------- summarise


def _job(attention, seed, acc, status=STATUS_OK, **metrics):
    return {"attention": attention, "seed": seed, "status": status, ACC: acc, **metrics}


def test_summarise_cost_and_diagnostic_columns_by_hand():
    jobs = pd.DataFrame([
        _job("dot", 0, 0.70, **{"train/tokens_per_sec": 1000.0, "test/tokens_per_sec": 4000.0,
                                "perf/peak_mem_bytes": 3 * 2**20, "model/params": 10.0, "diag/entropy_norm": 0.5,
                                "diag/saturated_frac": 0.25, "diag/max_score": 2.0, "train/samples_per_sec": 64.0,
                                "_batch_size": 32}),
        _job("dot", 1, 0.74, **{"train/tokens_per_sec": 3000.0, "test/tokens_per_sec": "8000",
                                "perf/peak_mem_bytes": 5 * 2**20, "model/params": 10.0, "diag/entropy_norm": 0.7,
                                "diag/saturated_frac": 0.75, "diag/max_score": 4.0, "train/samples_per_sec": 96.0,
                                "_batch_size": "32"}),
        # a failed job's numbers never count, even when it wrote some
        _job("dot", 2, 0.10, status=STATUS_FAILED, **{"train/tokens_per_sec": 1e9, "model/params": 1e9}),
    ])
    table = summarise(jobs, ["attention", "seed"], baseline="scaled_dot")
    assert table["attention"].tolist() == ["dot"]
    row = table.iloc[0]
    assert row["n"] == 2
    assert row["acc_mean"] == pytest.approx(0.72, rel=1e-12)
    assert row["acc_std"] == pytest.approx(math.sqrt(0.0008), rel=1e-9)  # deviations ±0.02
    assert row["train_tok_s"] == pytest.approx(2000.0, rel=1e-12)
    assert row["test_tok_s"] == pytest.approx(6000.0, rel=1e-12)  # a string "8000" is read as a number
    assert row["peak_mem_mb"] == pytest.approx(4.0, rel=1e-12)  # bytes / 2^20
    assert row["params"] == 10.0
    assert row["entropy_norm"] == pytest.approx(0.6, rel=1e-12)
    assert row["saturated_frac"] == pytest.approx(0.5, rel=1e-12)
    assert row["max_score"] == pytest.approx(3.0, rel=1e-12)
    # steps/s derived from samples/s over the batch size: 64/32 = 2, 96/32 = 3 -> mean 2.5
    assert row["train_steps_s"] == pytest.approx(2.5, rel=1e-12)
    # no scaled_dot baseline in the sweep: no paired difference
    assert math.isnan(row["diff_mean"]) and math.isnan(row["diff_ci"]) and math.isnan(row["diff_n"])


def test_summarise_logged_steps_per_sec_wins_over_the_derived_one():
    jobs = pd.DataFrame([
        _job("dot", 0, 0.7, **{"train/steps_per_sec": 5.0, "train/samples_per_sec": 64.0, "_batch_size": 32}),
        _job("dot", 1, 0.7, **{"train/steps_per_sec": None, "train/samples_per_sec": 96.0, "_batch_size": 32}),
        _job("dot", 2, 0.7, **{"train/steps_per_sec": 7.0, "train/samples_per_sec": 96.0, "_batch_size": "n/a"}),
    ])
    row = summarise(jobs, ["attention", "seed"]).iloc[0]
    # 5 (logged), 3 (derived 96/32), 7 (logged; the unreadable batch size is never used): mean 5
    assert row["train_steps_s"] == pytest.approx(5.0, rel=1e-12)


def test_summarise_without_samples_leaves_steps_per_sec_missing():
    jobs = pd.DataFrame([_job("dot", 0, 0.7, **{"train/tokens_per_sec": 10.0})])
    row = summarise(jobs, ["attention", "seed"]).iloc[0]
    assert math.isnan(row["train_steps_s"])
    assert "peak_mem_mb" not in row.index and "entropy_norm" not in row.index  # not logged: no column


def test_summarise_no_finished_job_gives_an_empty_table_with_the_variant_columns():
    jobs = pd.DataFrame([_job("dot", 0, 0.7, status=STATUS_FAILED), _job("additive", 0, 0.7, status=STATUS_FAILED)])
    table = summarise(jobs, ["seed", "data", "attention"])
    assert len(table) == 0 and list(table.columns) == ["data", "attention"]


def test_summarise_keeps_the_sweep_order_and_variants_with_a_missing_setting():
    # rows come in the order the variants first appear (the sweep's order), not sorted by name;
    # a variant whose head_dim is missing (None) is still a row of its own, never dropped
    rows = []
    for seed in (0, 1):
        rows.append({**_job("scaled_dot", seed, 0.80 + 0.01 * seed), "model.head_dim": 64})
        rows.append({**_job("additive", seed, 0.70 + 0.03 * seed), "model.head_dim": 64})
        rows.append({**_job("additive", seed, 0.50), "model.head_dim": None})
    table = summarise(pd.DataFrame(rows), ["model.head_dim", "attention", "seed"])
    assert table["attention"].tolist() == ["scaled_dot", "additive", "additive"]
    assert len(table) == 3
    missing = table[table["model.head_dim"].isna()].iloc[0]
    assert missing["n"] == 2 and missing["acc_mean"] == pytest.approx(0.50)
    additive = table[(table["attention"] == "additive") & table["model.head_dim"].notna()].iloc[0]
    # paired with scaled_dot at head_dim 64: differences -0.10, -0.08 -> mean -0.09, std 0.02/sqrt(2)
    assert additive["diff_mean"] == pytest.approx(-0.09, rel=1e-9)
    assert additive["diff_ci"] == pytest.approx(T_975[1] * (0.02 / math.sqrt(2)) / math.sqrt(2), rel=1e-9)
    assert additive["diff_n"] == 2


def test_summarise_without_seed_column_or_attention_key_has_no_difference():
    jobs = pd.DataFrame([_job("scaled_dot", 0, 0.8), _job("additive", 0, 0.7)]).drop(columns=["seed"])
    table = summarise(jobs, ["attention"])
    assert table["n"].tolist() == [1, 1]
    assert table["diff_mean"].isna().all()
    jobs = pd.DataFrame([_job("scaled_dot", 0, 0.8), _job("scaled_dot", 1, 0.6)])
    table = summarise(jobs, ["seed"])  # nothing but seeds swept: one row over every finished job
    assert len(table) == 1 and table.iloc[0]["n"] == 2 and table.iloc[0]["acc_mean"] == pytest.approx(0.7)
    assert math.isnan(table.iloc[0]["diff_mean"])


def test_summarise_pairs_only_seeds_both_variants_finished_and_takes_the_baseline_name():
    jobs = pd.DataFrame([
        _job("dot", 0, 0.60), _job("dot", 1, 0.64), _job("dot", 2, 0.90),
        _job("additive", 0, 0.70), _job("additive", 1, 0.71),
        _job("additive", 2, 0.10, status=STATUS_FAILED),
    ])
    table = summarise(jobs, ["attention", "seed"], baseline="dot").set_index("attention")
    # seeds 0 and 1 only: differences +0.10, +0.07 -> mean 0.085, std 0.03/sqrt(2)
    assert table.loc["additive", "diff_n"] == 2
    assert table.loc["additive", "diff_mean"] == pytest.approx(0.085, rel=1e-9)
    assert table.loc["additive", "diff_ci"] == pytest.approx(T_975[1] * 0.03 / 2, rel=1e-9)
    assert table.loc["dot", "diff_mean"] == 0.0 and table.loc["dot", "diff_n"] == 3


def test_summarise_with_batch_size_but_no_samples_per_sec():
    # the batch size alone cannot give steps/s: no error, the column stays missing
    jobs = pd.DataFrame([_job("dot", 0, 0.7, **{"_batch_size": 32, "train/tokens_per_sec": 5.0})])
    row = summarise(jobs, ["attention", "seed"]).iloc[0]
    assert math.isnan(row["train_steps_s"]) and row["train_tok_s"] == 5.0


def test_summarise_reads_unreadable_metrics_as_missing():
    jobs = pd.DataFrame([_job("dot", 0, 0.7, **{"train/tokens_per_sec": "n/a"}),
                         _job("dot", 1, 0.7, **{"train/tokens_per_sec": 10.0})])
    assert summarise(jobs, ["attention", "seed"]).iloc[0]["train_tok_s"] == 10.0


# --------------------------------------------------------------------------- the settings of a set of runs

from attnbench.analysis.stats import (  # noqa: E402
    flatten_config,
    format_setting,
    headline,
    is_relevant,
    split_settings,
)


def test_format_setting_writes_values_as_hydra_override_strings():
    assert [format_setting(v) for v in (None, float("nan"), True, False, 0.001, 1e-08, 64, "sst2")] == \
        ["null", "null", "true", "false", "0.001", "1e-08", "64", "sst2"]
    assert format_setting([0.9, 0.98]) == "[0.9,0.98]" and format_setting({"a": 1}) == '{"a":1}'
    assert format_setting((1, 2)) == "[1,2]"
    # an element JSON cannot encode (a path, a date in a list) is written as its text, not an error
    from datetime import date
    from pathlib import PurePosixPath
    assert format_setting([PurePosixPath("/data/sst2"), date(2024, 5, 1), 3]) == '["/data/sst2","2024-05-01",3]'


def test_flatten_config_dotted_keys():
    config = {"data": {"name": "sst2", "tokenizer": {"kind": "bytes"}, "max_train_samples": None},
              "seed": 3, "optim": {"betas": [0.9, 0.98]}, "empty": {}}
    assert flatten_config(config) == {"data.name": "sst2", "data.tokenizer.kind": "bytes",
                                      "data.max_train_samples": "null", "seed": "3", "optim.betas": "[0.9,0.98]",
                                      "empty": "{}"}
    assert flatten_config(None) == {}


def test_is_relevant_leaves_out_paths_loggers_and_names():
    for key in ("logger", "logger.wandb.group", "hydra.run.dir", "data.local_dir", "data.cache_dir",
                "data._target_", "attention._target_", "run_name", "_batch_size", "trainer.enable_progress_bar",
                "callbacks.run_stats.warmup_steps"):
        assert not is_relevant(key), key
    # only a leaf both starting and ending with "_" is Hydra's (_target_); "lambda_" or "_scale" are settings
    for key in ("data", "data.max_length", "data.local_dir_x", "loggerx", "seed", "trainer.max_steps", "optim.lr",
                "optim.lambda_", "model._scale"):
        assert is_relevant(key), key


def test_split_settings_swept_and_fixed_by_hand():
    runs = [
        {"attention": "additive", "attention.name": "additive", "attention.hidden_dim": "32", "seed": "0",
         "data": "sst2", "data.name": "sst2", "data.max_length": "64", "data.local_dir": "/a", "model.d_model": "64"},
        {"attention": "dot", "attention.name": "dot", "seed": "1", "data": "sst2", "data.name": "sst2",
         "data.max_length": "128", "data.local_dir": "/b", "model.d_model": "64"},
    ]
    swept, fixed = split_settings(runs)
    # data.max_length differs; attention.* follows the swept attention group; seed and attention go last
    assert swept == ["data.max_length", "attention", "seed"]
    # data.name equals the data choice: left out; data.local_dir is a path: left out
    assert fixed == {"data": "sst2", "model.d_model": "64"}
    swept, _ = split_settings(runs, explicit=["attention.hidden_dim"])  # set on the command line: it counts
    assert swept == ["attention.hidden_dim", "data.max_length", "attention", "seed"]
    swept, fixed = split_settings(runs[:1])
    assert swept == [] and fixed["attention.hidden_dim"] == "32" and "attention.name" not in fixed
    assert split_settings([]) == ([], {})


def test_split_settings_a_key_some_runs_lack_is_swept_and_a_renamed_group_name_is_fixed():
    runs = [{"model": "small", "model.head_dim": "16", "data": "x", "data.name": "sst2"},
            {"model": "small", "data": "x", "data.name": "sst2"}]
    swept, fixed = split_settings(runs)
    assert swept == ["model.head_dim"]
    assert fixed == {"model": "small", "data": "x", "data.name": "sst2"}  # data.name differs from the choice: kept


def test_headline_order_and_limit():
    fixed = {"optim.lr": "0.001", "seed": "0", "data": "sst2", "trainer.max_steps": "150", "model.d_ff": "256"}
    assert headline(fixed) == "data=sst2, seed=0, trainer.max_steps=150, optim.lr=0.001"
    assert headline(fixed, limit=2) == "data=sst2, seed=0"
    assert headline({"model.d_ff": "256"}) == "nothing held fixed"
    # all twelve headline keys fixed: a title shows the first ten (the default limit)
    every = {k: str(i) for i, k in enumerate(("data", "model", "attention", "seed", "trainer.max_steps",
                                               "trainer.max_epochs", "data.max_train_samples", "data.max_length",
                                               "model.head_dim", "data.batch_size", "optim.lr",
                                               "data.tokenizer.kind"))}
    assert headline(every).split(", ") == [f"{k}={v}" for k, v in list(every.items())[:10]]


def test_hydra_instantiation_keys_are_no_settings():
    """``module._recursive_``, ``module.optimizer._partial_`` and ``attention._target_`` say how a config is
    built, not what a run measures: neither swept nor held fixed."""
    from attnbench.analysis.stats import is_relevant

    for key in ("module._recursive_", "module.optimizer._partial_", "attention._target_", "_meta"):
        assert not is_relevant(key), key
    for key in ("optim.lr", "data.fold", "model.head_dim", "attention.hidden_dim", "data.val_size"):
        assert is_relevant(key), key
