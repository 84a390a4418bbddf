"""The report's statistics: per-seed mean and Student-t interval, and the per-variant summary table.

Pure functions of a job table (no files, no plots), kept in the package so the
mutation tests (``scripts/mutation.sh``) can mutate them; ``scripts/report.py``
imports them and re-exports them as ``report.mean_ci`` / ``report.summarise``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

ACC = "test/acc"
STATUS_OK, STATUS_FAILED, STATUS_INCOMPLETE, STATUS_MISSING = "finished", "failed", "incomplete", "missing"


def mean_ci(values: Iterable[float], level: float = 0.95) -> tuple[float, float, float, int]:
    """(mean, sample std, half-width of the two-sided ``level`` Student-t interval, n).

    The half-width is NaN for n < 2 (no interval from one seed).
    """
    from scipy import stats

    x = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = sum(x) / n
    if n < 2:
        return mean, math.nan, math.nan, n
    std = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * std / math.sqrt(n)
    return mean, std, half, n


def summarise(jobs: pd.DataFrame, swept: list[str], baseline: str = "scaled_dot") -> pd.DataFrame:
    """One row per variant: accuracy statistics, paired difference to ``baseline``, cost and diagnostics.

    Columns: the variant keys, ``n`` (finished seeds), ``acc_mean``, ``acc_std``,
    ``acc_ci`` (95% half-width), ``diff_mean``/``diff_ci`` (paired over the seeds
    both variants finished, vs the same setting with ``attention=baseline``),
    ``train_tok_s``, ``test_tok_s`` (tokens/s), ``train_steps_s`` (steps/s),
    ``peak_mem_mb`` (MiB), ``params``, and ``entropy_norm``, ``saturated_frac``,
    ``max_score`` when logged.
    """
    variant_keys = [k for k in swept if k != "seed"]
    done = jobs[jobs["status"] == STATUS_OK].copy()
    if done.empty:
        return pd.DataFrame(columns=variant_keys)
    if "train/steps_per_sec" not in done:
        done["train/steps_per_sec"] = math.nan
    if "_batch_size" in done and "train/samples_per_sec" in done:
        derived = done["train/samples_per_sec"] / pd.to_numeric(done["_batch_size"], errors="coerce")
        done["train/steps_per_sec"] = done["train/steps_per_sec"].fillna(derived)
    setting_keys = [k for k in variant_keys if k != "attention"]
    rows = []
    groups = done.groupby(variant_keys, sort=False, dropna=False) if variant_keys else [((), done)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(variant_keys, key))
        row["acc_mean"], row["acc_std"], row["acc_ci"], row["n"] = mean_ci(group[ACC])
        row["diff_mean"] = row["diff_ci"] = row["diff_n"] = math.nan
        if "attention" in variant_keys and "seed" in done:
            base = done[done["attention"] == baseline]
            for k in setting_keys:
                base = base[base[k] == row[k]]
            paired = group.merge(base[["seed", ACC]], on="seed", suffixes=("", "_base"))
            if len(paired):
                row["diff_mean"], _, row["diff_ci"], row["diff_n"] = mean_ci(paired[ACC] - paired[f"{ACC}_base"])
        for column, metric, scale in (
            ("train_tok_s", "train/tokens_per_sec", 1.0), ("test_tok_s", "test/tokens_per_sec", 1.0),
            ("train_steps_s", "train/steps_per_sec", 1.0), ("peak_mem_mb", "perf/peak_mem_bytes", 2.0**-20),
            ("params", "model/params", 1.0), ("entropy_norm", "diag/entropy_norm", 1.0),
            ("saturated_frac", "diag/saturated_frac", 1.0), ("max_score", "diag/max_score", 1.0),
        ):
            if metric in group:
                row[column] = pd.to_numeric(group[metric], errors="coerce").mean() * scale
        rows.append(row)
    return pd.DataFrame(rows)
