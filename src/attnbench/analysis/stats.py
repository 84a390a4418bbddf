"""The report's statistics: per-seed mean and Student-t interval, and the per-variant summary table.

Pure functions of a job table (no files, no plots); :mod:`attnbench.analysis.report` reads the runs and
re-exports them as ``report.mean_ci`` / ``report.summarise``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

# the disturbed-rate rule and the rates it vouches for: the training console prints the same marks
from attnbench.callbacks.throughput import MIN_CPU_SHARE, RATE_COLUMNS  # noqa: F401  (re-exported)

ACC = "test/acc"
STATUS_OK, STATUS_FAILED, STATUS_INCOMPLETE, STATUS_MISSING = "finished", "failed", "incomplete", "missing"
# Keys whose values are replicates of one variant, not variants: the seed, and the fold of k-fold
# cross-validation. The report averages over them and pairs runs on them.
REPLICATE_KEYS = ("seed", "data.fold")
#: the metric that names where each rate was measured (:func:`attnbench.callbacks.throughput.machine_boot`): a rate
#: pairs with its baseline's only when both were measured on one machine in one boot
HOST_OF_RATE = {"train/tokens_per_sec": "train_host", "test/tokens_per_sec": "test_host",
                "train/steps_per_sec": "train_host"}
HOST_COLUMNS = ("train_host", "test_host")


def _host_label(value: Any, run: Any) -> Any:
    """A host column's value for pairing: one machine's host as it is; a run that names none (recorded before
    hosts were) NaN, which pairs with NaN as before; a rate measured on several machines (a resume elsewhere,
    ``a/1+b/2``) or partly on an unknown one (``unknown``, a checkpoint older than hosts) is a mixture of
    machine speeds that no other run shares, so its own label (``run``: its index label) pairs it with nothing."""
    if not isinstance(value, str) or value == "":
        return math.nan
    return f"<mixed: run {run}>" if "+" in value or value == "unknown" else value
#: ``metrics.json``'s ``resume`` (:class:`attnbench.run.resume.ResumeState`) as jobs.csv columns: whether
#: the resume was exact, the epoch it resumed in, that epoch's batches done before the checkpoint and its batch
#: count, and the number of that epoch's batches the resumed run replayed and never saw (0 for an exact resume)
RESUME_COLUMNS = ("resume/exact", "resume/epoch", "resume/batches_done", "resume/batches_per_epoch",
                  "resume/replayed_batches", "resume/unseen_batches")
#: jobs.csv columns of a run's validation history (its ``csv/metrics.csv``): epochs with a ``val/loss``, the epoch
#: of its lowest ``val/loss`` and the last epoch with one (:func:`val_loss_epochs`)
VAL_HISTORY_COLUMNS = ("val/epochs_validated", "val/loss_lowest_epoch", "val/last_epoch")


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


def _baseline_runs(runs: pd.DataFrame, row: dict[str, Any], setting_keys: list[str], baseline: str) -> pd.DataFrame:
    """The runs of ``runs`` with ``attention == baseline`` and ``row``'s value of every key of ``setting_keys`` (a key
    some runs lack, added to the config later, is NaN: NaN pairs with NaN)."""
    base = runs[runs["attention"] == baseline]
    for k in setting_keys:
        base = base[base[k].isna()] if pd.isna(row[k]) else base[base[k] == row[k]]
    return base


def _per_replicate(runs: pd.DataFrame, replicates: list[str], metric: str, how: str) -> pd.DataFrame:
    """``runs``' ``metric`` (as numbers) reduced to one value per replicate (``how``: ``"mean"`` or ``"median"`` of the
    runs that share a replicate's values of ``replicates``; NaN values are skipped, NaN keys form a replicate). Two
    finished runs of one variant and seed (a job run again) are one replicate, not two: counted twice, they would
    narrow the interval and pair as a cross product. Columns: ``replicates``, ``metric``."""
    values = runs[replicates].copy()
    values[metric] = pd.to_numeric(runs[metric], errors="coerce")
    reduced = values.groupby(replicates, dropna=False, sort=False)[metric].agg(how).reset_index()
    return reduced.dropna(subset=[metric])


def _over_replicates(runs: pd.DataFrame, replicates: list[str], metric: str, how: str = "mean") -> pd.Series:
    """``runs``' ``metric`` (as numbers), one value per replicate: the ``how`` (``"mean"`` or ``"median"``) of the
    runs that share its values of ``replicates`` (:func:`_per_replicate`); without replicate keys, one value per
    run. What :func:`summarise` averages (the mean columns: memory, parameters, attention diagnostics, a stopped
    run's steps) or takes the median of (the rates, each replicate its median run), so that a seed run twice
    weighs as much as any other seed, as in the accuracy statistics."""
    if not replicates:
        return pd.to_numeric(runs[metric], errors="coerce")
    return _per_replicate(runs, replicates, metric, how)[metric]


def _is_missing(value: Any) -> bool:
    """Whether a setting's value is absent: None, NaN, or the text a CSV or config gives for none (``""``,
    ``null``, ``none``, ``nan``, any case, surrounding spaces ignored)."""
    if isinstance(value, str):
        return value.strip().lower() in ("", "null", "none", "nan")
    if value is None or isinstance(value, bool):
        return value is None
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _replicate_label(value: Any, key: str, run: Any) -> Any:
    """A replicate key's value as one canonical text, so that a seed read as ``0`` (a CSV's int), ``0.0`` (a float
    column with gaps) or ``"0"`` (a config's text) is one replicate and pairs with itself. A missing value
    (NaN, None, ``""``, ``"null"``) of ``data.fold`` is the fold-less value, shared by every such run; a missing
    seed is unknown: it is the run's own replicate (``run``: its index label), counted once and paired with
    nothing, as runs without any seed column are."""
    text = value.strip() if isinstance(value, str) else value
    if _is_missing(text):
        return f"<no {key}: run {run}>" if key == "seed" else math.nan
    if isinstance(text, bool):
        return format_setting(text)
    try:
        number = float(text)
    except (TypeError, ValueError):
        return text if isinstance(text, str) else format_setting(text)
    return str(int(number)) if number.is_integer() else repr(number)


def paired_setting_keys(runs: pd.DataFrame, variant_keys: list[str]) -> list[str]:
    """The variant keys a run and its baseline run must share to pair: every key but ``attention`` and those set
    per score function.

    A key is set per score function (such as ``optim.lr`` where each score function trains at its own tuned
    learning rate) when, within every combination of the other keys, each score function has one value of it and
    not all score functions have the same one: pairing on it would pair no score function with the baseline. A
    key with several values per score function (a learning-rate grid) stays a setting. ``runs``: the job table
    (its ``attention`` column and the keys)."""
    keys = [k for k in variant_keys if k != "attention"]
    if "attention" not in runs or runs.empty:
        return keys
    tuned = []
    for key in keys:
        others = [k for k in keys if k != key]
        values = runs[[*others, "attention", key]].astype(str)
        per_score = values.groupby([*others, "attention"], sort=False)[key].nunique()
        across = values.groupby(others, sort=False)[key].nunique() if others else pd.Series([values[key].nunique()])
        if (per_score == 1).all() and (across > 1).any():
            tuned.append(key)
    return [k for k in keys if k not in tuned]


def summarise(jobs: pd.DataFrame, swept: list[str], baseline: str = "scaled_dot") -> pd.DataFrame:
    """One row per variant: accuracy statistics, paired difference to ``baseline``, cost and diagnostics.

    A replicate is one value of :data:`REPLICATE_KEYS` present in ``jobs``: a seed, or a (seed, fold) pair of
    k-fold cross-validation (``data.fold``, Kim 2014's protocol for train-only datasets). Folds share training
    rows, so their t interval is optimistic (Nadeau & Bengio 2003, "Inference for the generalization error").

    Runs that share a variant and a replicate (a job run twice and both kept) count as one replicate: accuracy is
    their mean and a rate pairs as their median; ``n_repeats`` counts the variant's finished runs beyond one per
    replicate (0 when every run is its own replicate). Replicate keys are compared as text (:func:`_replicate_label`:
    seed ``0``, ``0.0`` and ``"0"`` are one replicate); a run without a seed is a replicate of its own that pairs
    with nothing (an unknown seed is no pair, and two unknown seeds are not one seed). A rate of 0 or less (or not
    a number) is no measurement: it is left out of the rate medians and the multiples.

    Columns: the variant keys, ``n`` (finished replicates), ``acc_mean``, ``acc_std``,
    ``acc_ci`` (95% half-width), ``diff_mean``/``diff_ci`` (paired over the replicates
    both variants finished, vs the same setting with ``attention=baseline``),
    ``train_tok_s``, ``test_tok_s`` (tokens/s), ``train_steps_s`` (steps/s),
    ``peak_mem_mb`` (MiB), ``params``, and ``entropy_norm``, ``saturated_frac``,
    ``max_score`` when logged; ``sec_per_step`` (seconds per training step, 1 / ``train_steps_s``);
    ``train_tok_s_ratio``, ``test_tok_s_ratio``, ``train_steps_s_ratio`` (where ``attention`` is swept): the
    variant's rate as a multiple of ``baseline``'s, **paired**: the median over replicates of run rate / the
    baseline run's rate of the same replicate and setting, measured on the same host (1.0 for the baseline
    itself; NaN without a pair; a replicate paired on two hosts gives the median of its two), and
    ``<column>_ratio_n``, the number of replicates with a pair.

    The three rates are the **median** over the variant's replicates (each replicate the median of its runs, so that
    a seed run twice counts once), not the mean: a wall-clock rate only ever errs low (a pause or a shared core
    stretches the same work). Runs whose ``train/cpu_share`` (``test/cpu_share`` for ``test_tok_s``) is below
    :data:`MIN_CPU_SHARE` are left out of them first (:func:`disturbed_runs`); ``n_disturbed`` counts the runs left
    out of any rate. A variant whose every run was disturbed has NaN rates. The ratios pair runs because a ratio of
    two medians compares runs made at different times, on a machine whose speed can change between sessions with no
    sign in ``cpu_share``. A pair is of two undisturbed runs measured on one host: the same machine in one boot
    (``train_host`` for the training rates, ``test_host`` for the test rate, :data:`HOST_OF_RATE`; a reproduction
    continued on another machine, or a resumed run's steps measured on two or on an unknown one, pair with nothing:
    :func:`_host_label`). Runs that record no host pair with each other by seed alone, with no check that they ran
    on one machine. The other columns are means over the replicates, each replicate the mean of its runs
    (:func:`_over_replicates`: a seed run twice, such as a baseline twin, counts once, as in the accuracy).
    ``n_inexact_resume`` counts the variant's finished runs resumed inexactly (:func:`inexact_resumes`: mid-epoch,
    some batches of one epoch replayed and as many unseen); their figures count, the report lists them.

    Runs a wall-time cap stopped before their step budget (``stopped_by`` set in ``metrics.json``, see
    ``trainer.max_time``) are left out of the accuracy statistics and of the pairing (their accuracy is not a
    final one) but counted in the cost columns, and add ``n_stopped`` (such runs), ``steps_done`` and
    ``steps_planned`` (their means over replicates) and ``extrapolated_sec``: the time the whole budget would
    take at their measured rate, mean over their replicates of ``train/steps_planned / train/steps_per_sec``
    (training steps only; validation and test not counted). ``n_stopped`` is 0 and the other three NaN where no
    run stopped. A stopped run tested on its first batches only (``test_batches_if_stopped``:
    ``test/limited_to_batches`` in its metrics) is left out of ``test_tok_s``: under length-grouped batching those
    batches hold the longest rows, a heavier workload than the whole split the other runs' rates are of (its own
    rate is in the stopped-run table).
    """
    variant_keys = [k for k in swept if k not in REPLICATE_KEYS]
    replicates = [k for k in REPLICATE_KEYS if k in jobs]  # what pairs a run with its baseline run
    done = jobs[jobs["status"] == STATUS_OK].copy()
    if done.empty:
        return pd.DataFrame(columns=variant_keys)
    if "train/steps_per_sec" not in done:
        done["train/steps_per_sec"] = math.nan
    if ACC not in done:  # runs that record no test accuracy (test skipped): n = 0, their costs still count
        done[ACC] = math.nan
    if "_batch_size" in done and "train/samples_per_sec" in done:
        derived = done["train/samples_per_sec"] / pd.to_numeric(done["_batch_size"], errors="coerce")
        done["train/steps_per_sec"] = done["train/steps_per_sec"].fillna(derived)
    for k in replicates:  # one seed one replicate, whichever reader typed it; an unknown seed pairs with nothing
        done[k] = [_replicate_label(v, k, i) for i, v in zip(done.index, done[k])]
    for k in HOST_COLUMNS:
        if k in done:
            done[k] = [_host_label(v, i) for i, v in zip(done.index, done[k])]
    if "data.fold" in replicates and "data.cv_folds" in done:
        # without cross-validation (cv_folds null) the fold names nothing: such a run is fold-less, like one from
        # before the key existed (NaN), so the two pair
        no_cv = done["data.cv_folds"].map(_is_missing).astype(bool)
        done.loc[no_cv, "data.fold"] = math.nan
    for _, metric, _ in RATE_COLUMNS:  # a rate <= 0 measured nothing: no median of it, no multiple (x / 0 = inf)
        if metric in done:
            rate = pd.to_numeric(done[metric], errors="coerce")
            done[metric] = rate.where(rate > 0)
    stopped = stopped_runs(done)
    disturbed = {share: disturbed_runs(done, share) for share in ("train/cpu_share", "test/cpu_share")}
    inexact = inexact_resumes(done)
    complete = done[~stopped]  # what accuracy and the paired differences are computed from
    partial_tests = (pd.to_numeric(done["test/limited_to_batches"], errors="coerce").notna()
                     if "test/limited_to_batches" in done else pd.Series(False, index=done.index))
    setting_keys = paired_setting_keys(done, variant_keys)
    rows = []
    groups = done.groupby(variant_keys, sort=False, dropna=False) if variant_keys else [((), done)]
    for key, group in groups:  # key: a tuple (pandas >= 2 gives tuple keys when grouping by a list)
        row: dict[str, Any] = dict(zip(variant_keys, key))
        halted = group[stopped[group.index]]
        group_complete = group[~stopped[group.index]]
        accuracy = _per_replicate(group_complete, replicates, ACC, "mean")[ACC] if replicates else group_complete[ACC]
        row["acc_mean"], row["acc_std"], row["acc_ci"], row["n"] = mean_ci(accuracy)
        row["n_repeats"] = len(group) - (len(group[replicates].drop_duplicates()) if replicates else len(group))
        row["diff_mean"] = row["diff_ci"] = row["diff_n"] = math.nan
        if "attention" in variant_keys and replicates:
            base = _baseline_runs(complete, row, setting_keys, baseline)
            paired = _per_replicate(group_complete, replicates, ACC, "mean").merge(
                _per_replicate(base, replicates, ACC, "mean"), on=replicates, suffixes=("", "_base"))
            if len(paired):
                row["diff_mean"], _, row["diff_ci"], row["diff_n"] = mean_ci(paired[ACC] - paired[f"{ACC}_base"])
        # the baseline's runs of this setting for the paired rate multiples (stopped ones too: rates count them)
        base_runs = (_baseline_runs(done, row, setting_keys, baseline)
                     if "attention" in variant_keys and replicates else None)
        for column, metric, share in RATE_COLUMNS:
            if metric in group:
                undisturbed = ~disturbed[share]
                if metric == "test/tokens_per_sec":  # a test cut to its first (longest) batches: another workload
                    undisturbed &= ~partial_tests
                kept = undisturbed[group.index]
                # the median over seeds of each seed's median run: a seed run twice (a twin) weighs as one seed
                row[column] = _over_replicates(group[kept], replicates, metric, "median").median()
                if base_runs is not None:
                    # one seed's runs on one host pair (a host column absent, or NaN in runs that record no host:
                    # they pair by the replicate alone)
                    on = [*replicates, *([HOST_OF_RATE[metric]] if HOST_OF_RATE[metric] in done else [])]
                    pairs = _per_replicate(group[kept], on, metric, "median").merge(
                        _per_replicate(base_runs[undisturbed[base_runs.index]], on, metric, "median"),
                        on=on, suffixes=("", "_base"))
                    pairs["ratio"] = pairs[metric] / pairs[f"{metric}_base"]
                    # one multiple per replicate (a seed paired on two machines: the median of its two), so that a
                    # seed run again elsewhere counts once
                    ratios = pairs.dropna(subset=["ratio"]).groupby(replicates, dropna=False)["ratio"].median()
                    row[f"{column}_ratio"] = float(ratios.median()) if len(ratios) else math.nan
                    row[f"{column}_ratio_n"] = len(ratios)
        row["n_disturbed"] = int((disturbed["train/cpu_share"] | disturbed["test/cpu_share"])[group.index].sum())
        row["n_inexact_resume"] = int(inexact[group.index].sum())
        for column, metric, scale in (
            ("peak_mem_mb", "perf/peak_mem_bytes", 2.0**-20),
            ("params", "model/params", 1.0), ("entropy_norm", "diag/entropy_norm", 1.0),
            ("saturated_frac", "diag/saturated_frac", 1.0), ("max_score", "diag/max_score", 1.0),
        ):
            if metric in group:  # a seed run twice (a baseline twin) is one trained model: it counts once
                row[column] = _over_replicates(group, replicates, metric).mean() * scale
        rate = row["train_steps_s"]
        row["sec_per_step"] = 1.0 / rate if rate > 0 else math.nan
        row["n_stopped"] = len(halted)
        row["steps_done"] = row["steps_planned"] = row["extrapolated_sec"] = math.nan
        if len(halted):
            # a column no stopped run has (steps_planned where the budget was not known) reads as all NaN
            numbers = halted.reindex(columns=["train/steps_done", "train/steps_planned", "train/steps_per_sec"])
            numbers = numbers.apply(pd.to_numeric, errors="coerce")
            numbers["extrapolated_sec"] = numbers["train/steps_planned"] / numbers["train/steps_per_sec"]
            numbers[replicates] = halted[replicates]
            row["steps_done"] = _over_replicates(numbers, replicates, "train/steps_done").mean()
            row["steps_planned"] = _over_replicates(numbers, replicates, "train/steps_planned").mean()
            steady = numbers[~disturbed["train/cpu_share"][halted.index]]  # a disturbed rate would inflate it
            row["extrapolated_sec"] = _over_replicates(steady, replicates, "extrapolated_sec").mean()
        rows.append(row)
    return pd.DataFrame(rows)


def disturbed_runs(jobs: pd.DataFrame, share: str = "train/cpu_share") -> pd.Series:
    """Which jobs' ``share`` (``train/cpu_share`` or ``test/cpu_share``) is below :data:`MIN_CPU_SHARE`: their
    thread was off a CPU core (paused, or its core shared) for part of the measured time, so their rates err
    low. A bool Series on ``jobs``' index; a job without the metric (GPU, DDP, older runs) is not disturbed."""
    if share not in jobs:
        return pd.Series(False, index=jobs.index)
    return pd.to_numeric(jobs[share], errors="coerce") < MIN_CPU_SHARE


def resume_record(resume: Any) -> dict[str, Any]:
    """``metrics.json``'s ``resume`` dict as the :data:`RESUME_COLUMNS` (``{}`` for a run that never resumed).

    ``replayed_batches`` / ``unseen_batches`` there are ``[first, last]`` batch indices of the resumed epoch
    (inclusive, :meth:`attnbench.run.resume.ResumeState.on_train_start`); here they are counts,
    ``last - first + 1``, and 0 where the resume replayed nothing (an epoch-end resume). E.g. ``{"epoch": 2,
    "batches_done": 498, "batches_per_epoch": 1001, "exact": False, "replayed_batches": [0, 497],
    "unseen_batches": [503, 1000]}`` -> exact False, 498 replayed, 498 unseen.
    """
    if not isinstance(resume, dict):
        return {}

    def count(span: Any) -> int:
        if isinstance(span, (list, tuple)) and len(span) == 2 and all(isinstance(v, int) for v in span):
            return span[1] - span[0] + 1
        return 0

    return {"resume/exact": bool(resume.get("exact", True)), "resume/epoch": resume.get("epoch"),
            "resume/batches_done": resume.get("batches_done"), "resume/batches_per_epoch": resume.get("batches_per_epoch"),
            "resume/replayed_batches": count(resume.get("replayed_batches")),
            "resume/unseen_batches": count(resume.get("unseen_batches"))}


def inexact_resumes(jobs: pd.DataFrame) -> pd.Series:
    """Which jobs were resumed inexactly: ``resume/exact`` (:func:`resume_record`) false, as a bool or as the text a
    CSV gives back (``False``/``false``). A mid-epoch resume replays the epoch's first batches and never shows its
    last ones; a checkpoint without RNG states changes dropout and data order. A bool Series on ``jobs``' index;
    a job that never resumed (no value) or resumed exactly is False."""
    if "resume/exact" not in jobs:
        return pd.Series(False, index=jobs.index)
    import numpy as np

    def inexact(v: Any) -> bool:
        if isinstance(v, (bool, np.bool_)):
            return not v
        return isinstance(v, str) and v.strip().lower() == "false"

    return jobs["resume/exact"].map(inexact).astype(bool)


def join_log_segments(segments: list[pd.DataFrame]) -> pd.DataFrame:
    """One run's logged history from the CSV logs of its segments, oldest first (an interrupted run resumed from a
    checkpoint writes one log per segment: :func:`attnbench.run.loggers.csv_log_segments`).

    A resumed segment replays the steps after its checkpoint, so each segment's rows supersede the earlier
    segments' rows from its first logged ``step`` on; a segment without rows supersedes nothing. Every segment
    needs a ``step`` column (``KeyError`` otherwise); columns are the union of the segments'. Returns the joined
    rows in order (index 0..n-1); an empty frame for no segments.
    """
    kept: list[pd.DataFrame] = []
    for later in segments:
        steps = pd.to_numeric(later["step"], errors="coerce").dropna()
        if not steps.empty:
            first = steps.min()
            kept = [seg[pd.to_numeric(seg["step"], errors="coerce") < first] for seg in kept]
        kept.append(later)
    return pd.concat(kept, ignore_index=True) if kept else pd.DataFrame()


def val_loss_epochs(history: pd.DataFrame) -> dict[str, Any]:
    """The :data:`VAL_HISTORY_COLUMNS` of one run's logged metrics (``csv/metrics.csv``: columns ``epoch`` and
    ``val/loss``, one row per logged step; rows without a ``val/loss`` are ignored).

    Returns ``{"val/epochs_validated": distinct epochs with a val/loss, "val/loss_lowest_epoch": the epoch of the
    lowest val/loss (the first, on a tie), "val/last_epoch": the last epoch with one}``; ``{}`` without any. Epochs
    count from 0. A run whose lowest epoch is below its last passed its lowest ``val/loss`` before its last epoch;
    equal (with >= 2 epochs validated): still falling at the end; with 1 epoch validated the log cannot tell.
    """
    if "epoch" not in history or "val/loss" not in history:
        return {}
    rows = history[["epoch", "val/loss"]].apply(pd.to_numeric, errors="coerce").dropna()
    if rows.empty:
        return {}
    lowest = rows.loc[rows["val/loss"].idxmin(), "epoch"]
    return {"val/epochs_validated": int(rows["epoch"].nunique()), "val/loss_lowest_epoch": int(lowest),
            "val/last_epoch": int(rows["epoch"].max())}


def convergence_counts(jobs: pd.DataFrame) -> dict[str, int]:
    """Over the finished runs with a validation history (:func:`val_loss_epochs` columns): ``before_last`` (lowest
    ``val/loss`` before the last validated epoch), ``still_falling`` (lowest at the last, >= 2 epochs validated),
    ``one_epoch`` (one epoch validated: the log cannot tell), ``unknown`` (finished runs without a history)."""
    done = jobs[jobs["status"] == STATUS_OK] if "status" in jobs else jobs
    counts = {"before_last": 0, "still_falling": 0, "one_epoch": 0, "unknown": 0}
    if not set(VAL_HISTORY_COLUMNS) <= set(done.columns):
        counts["unknown"] = len(done)
        return counts
    cols = done[list(VAL_HISTORY_COLUMNS)].apply(pd.to_numeric, errors="coerce")
    for n, lowest, last in cols.itertuples(index=False):
        if math.isnan(n):
            counts["unknown"] += 1
        elif n < 2:
            counts["one_epoch"] += 1
        elif lowest < last:
            counts["before_last"] += 1
        else:
            counts["still_falling"] += 1
    return counts


def stopped_runs(jobs: pd.DataFrame) -> pd.Series:
    """Which jobs a wall-time cap stopped before their budget: ``stopped_by`` (``metrics.json``) set to a
    non-empty string (``max_time``); a bool Series on ``jobs``' index, all False without the column."""
    if "stopped_by" not in jobs:
        return pd.Series(False, index=jobs.index)
    return jobs["stopped_by"].map(lambda v: isinstance(v, str) and v != "")


# --------------------------------------------------------------------------- the settings of a set of runs

# Config keys (dotted, or a dotted prefix) that never change what a run measures: where files go, how it is
# logged or shown, names. They are neither a swept setting nor a setting "held fixed".
IRRELEVANT_KEYS = (
    "hydra", "logger", "callbacks", "run_name", "task_name", "tags", "ckpt_path", "optimized_metric", "output_dir",
    "data.local_dir", "data.cache_dir", "data.num_workers", "data.hub_id", "data.hub_config",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.default_root_dir",
    "trainer.log_every_n_steps", "trainer.logger",
    # Guards and pointers whose effect each run records itself: a run the wall-time cap stopped says so
    # (stopped_by, train/steps_done; test/samples for test_batches_if_stopped) and a finished one is the same run
    # under any cap; an experiment's budget.<dataset> reaches the run as trainer.max_epochs / max_steps. As
    # settings they split runs of one variant into groups (jobs whose config lacks such a key).
    # max_length_by_data.<dataset> reaches the run as data.max_length, in the same way.
    "trainer.max_time", "test_batches_if_stopped", "budget", "max_length_by_data",
    # the W&B run an offline-resumed run continues (attnbench.run.loggers): a pointer, not a setting
    "resumed_from",
)
# Config groups whose choice (``attention=additive``) names a setting; the others (logger, callbacks, hydra/*)
# do not change what a run measures.
SETTING_GROUPS = ("data", "model", "attention", "trainer", "experiment")
# The fixed settings a plot title names (when held fixed), in this order: the rest are in report.md.
HEADLINE_KEYS = (
    "data", "model", "attention", "seed", "trainer.max_steps", "trainer.max_epochs", "data.max_train_samples",
    "data.max_length", "model.head_dim", "data.batch_size", "optim.lr", "data.tokenizer.kind",
)


def format_setting(value: Any) -> str:
    """One setting's value as text, as Hydra's override parser writes it (``null``, ``true``, ``0.001``, ``[1,2]``).

    Config values (YAML scalars) and override strings (``sweep_string_iterator``) of the same value give the
    same text, so a run's config and the sweep that asked for it agree.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple, dict)):
        import json

        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def is_relevant(key: str) -> bool:
    """Whether config key ``key`` (dotted) can change what a run measures (not a path, a logger or a name)."""
    leaf = key.split(".")[-1]
    if key.startswith("_") or leaf.startswith("_") and leaf.endswith("_"):  # Hydra's _target_, _partial_, ...
        return False
    return not any(key == k or key.startswith(k + ".") for k in IRRELEVANT_KEYS)


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}`` (values through :func:`format_setting`); lists stay one value.

    A W&B run config's ``{"value": ...}`` wrappers are not handled here: ``wandb.Api`` unwraps them.
    A value that only points at another key (``module.optimizer.lr: ${optim.lr}``, as Hydra saves
    ``.hydra/config.yaml`` unresolved) is left out: it is no setting of its own, the key it names is one.
    """
    flat: dict[str, str] = {}
    for key, value in (config or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_config(value, name + "."))
        elif not (isinstance(value, str) and _NODE_REFERENCE.fullmatch(value)):
            flat[name] = format_setting(value)
    return flat


_NODE_REFERENCE = re.compile(r"\$\{[A-Za-z_][\w.]*\}")  # ${optim.lr}; not a resolver call (${oc.env:X})


def split_settings(settings: list[dict[str, str]], explicit: Iterable[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The swept keys and the settings held fixed over a set of runs.

    Args:
        settings: one ``key -> value`` dict per run whose settings are known (its config, flattened, and its
            config-group choices such as ``attention``), values as :func:`format_setting` writes them.
        explicit: keys the user set on the command line (overrides); they count even under a swept group.

    Returns:
        ``(swept, fixed)``: ``swept`` lists the relevant keys (:func:`is_relevant`) whose values differ
        between runs, or which some runs lack, in the order they first appear, ``attention`` and ``seed`` last; a key under a swept config
        group (``attention.hidden_dim`` when ``attention`` itself differs) is left out, since the group's
        choice already names it, unless it is in ``explicit``. ``fixed`` maps every other relevant key
        that all runs share to its one value; ``<group>.name`` is left out when it equals the group's choice.
    """
    explicit = set(explicit)
    keys: list[str] = []
    for run in settings:
        keys.extend(k for k in run if k not in keys and is_relevant(k))
    varying = [k for k in keys if len({run.get(k) for run in settings}) > 1]
    swept_groups = {k for k in varying if k in SETTING_GROUPS}
    swept = [k for k in varying
             if k in explicit or not any(k.startswith(g + ".") for g in swept_groups)]
    swept.sort(key=lambda k: (k in REPLICATE_KEYS, k == "attention"))  # settings, score function, replicates
    fixed: dict[str, str] = {}
    if settings:
        for k in keys:
            if k in varying:
                continue
            group, _, leaf = k.partition(".")
            if leaf == "name" and settings[0].get(group) == settings[0][k]:
                continue
            fixed[k] = settings[0][k]
    return swept, fixed


def headline(fixed: dict[str, str], limit: int = 10) -> str:
    """The fixed settings a plot title shows: the first ``limit`` of :data:`HEADLINE_KEYS` held fixed, as
    ``key=value`` joined by ``", "`` (``"nothing held fixed"`` when none is)."""
    parts = [f"{k}={fixed[k]}" for k in HEADLINE_KEYS if k in fixed][:limit]
    return ", ".join(parts) if parts else "nothing held fixed"


#: the report's mark on a setting where the baseline does not beat the control beyond its paired interval
NO_DISCRIMINATION = "this task does not discriminate score functions"


def control_verdict(gap: float, half: float, n: int, baseline: str = "scaled_dot",
                    control: str = "uniform") -> tuple[bool | None, str]:
    """``(discriminates, verdict)`` of a paired gap ``baseline - control`` with 95% half-width ``half`` over ``n``
    paired replicates: True where the interval's lower end is above 0, None (undetermined) for n < 2 or no
    interval, else False with :data:`NO_DISCRIMINATION`."""
    if n < 2 or math.isnan(half):
        return None, f"undetermined: {n} paired seed, no interval"
    if gap - half > 0:
        return True, f"{baseline} beats {control}: attention matters here"
    return False, NO_DISCRIMINATION


def control_gaps(jobs: pd.DataFrame, swept: list[str], baseline: str = "scaled_dot",
                 control: str = "uniform") -> pd.DataFrame:
    """Per setting (the variant keys other than ``attention``), whether ``baseline`` beats the content-free
    ``control`` beyond its paired interval: the test-accuracy gap ``baseline - control`` paired by replicate (the
    same seed, fold and setting; :func:`summarise`'s paired difference), its mean and 95% Student-t interval.

    A setting *discriminates* score functions when the interval's lower end is above 0: content-based attention
    did measurably better than a mean of the values there. Otherwise the data cannot tell score functions apart
    by what attention contributes, and the setting gets :data:`NO_DISCRIMINATION`. Fewer than 2 paired
    replicates give no interval: undetermined (``discriminates`` None).

    Returns:
        One row per setting where both ``baseline`` and ``control`` finished runs: the setting keys, ``n`` (paired
        replicates), ``gap``, ``gap_lo``, ``gap_hi`` (accuracy as a fraction; NaN bounds for n < 2),
        ``baseline_acc``, ``control_acc`` (means over their finished replicates), ``discriminates`` (True, False
        or None) and ``verdict`` (text). Empty (those columns, no rows) when ``attention`` is not swept or either
        score function has no finished run.
    """
    variant_keys = [k for k in swept if k not in REPLICATE_KEYS]
    setting_keys = paired_setting_keys(jobs[jobs["status"] == STATUS_OK], variant_keys) if "status" in jobs else []
    columns = [*setting_keys, "n", "gap", "gap_lo", "gap_hi", "baseline_acc", "control_acc", "discriminates",
               "verdict"]
    if "attention" not in variant_keys:
        return pd.DataFrame(columns=columns)
    table = summarise(jobs, swept, baseline)
    if table.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for _, r in table[table["attention"] == control].iterrows():
        base = _baseline_runs(table, r, setting_keys, baseline)  # the baseline's row of this setting
        if base.empty or not r["diff_n"] > 0:  # NaN diff_n: no replicate of the baseline pairs with it
            continue
        gap, half, n = -float(r["diff_mean"]), float(r["diff_ci"]), int(r["diff_n"])
        row = {k: r[k] for k in setting_keys}
        row.update(n=n, gap=gap, gap_lo=gap - half, gap_hi=gap + half, baseline_acc=float(base["acc_mean"].iloc[0]),
                   control_acc=float(r["acc_mean"]))
        row["discriminates"], row["verdict"] = control_verdict(gap, half, n, baseline, control)
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- power and equivalence of a comparison

#: the equivalence margin of ``attnbench report --margin`` (points of accuracy: 1.0 is 0.01 of test accuracy)
DEFAULT_MARGIN = 1.0
#: the verdicts of :func:`paired_verdict` (the text of each cell begins with one of them)
BETTER, WORSE, EQUIVALENT, UNDETERMINED = "better", "worse", "equivalent", "undetermined"


def min_detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean of ``n`` paired differences of standard deviation ``sd`` that a two-sided paired
    t test at level ``alpha`` detects with probability ``power``, in ``sd``'s units; NaN for n < 2 or no ``sd``.

    The effect size d solves power(d) = ``power``, where power(d) = P(T > c) + P(T < -c), T noncentral t with
    n - 1 degrees of freedom and noncentrality d·√n, c the t quantile 1 - alpha/2 (the two-sided power of
    statsmodels' ``TTestPower().solve_power(nobs=n, alpha=alpha, power=power)``: 1.682 for n = 5); the result is
    d·``sd``. ``sd`` 0 gives 0.
    """
    from scipy import optimize, stats

    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    df, crit = n - 1, float(stats.t.ppf(1 - alpha / 2, n - 1))

    def shortfall(d: float) -> float:
        nc = d * math.sqrt(n)
        # P(T < -c) as P(T > c) at -nc: scipy's nct.cdf far in its tail is NaN where this is 0
        return float(stats.nct.sf(crit, df, nc) + stats.nct.sf(crit, df, -nc)) - power

    high = 1.0
    while shortfall(high) < 0:  # the power grows with d: double until it reaches ``power`` (d = 11.5 for n = 2)
        high *= 2
    return optimize.brentq(shortfall, 0.0, high, xtol=1e-12) * sd


def tost_p(mean: float, se: float, df: int, margin: float) -> float:
    """The p value of the two one-sided t tests (TOST, Schuirmann 1987) that a mean ``mean`` with standard error
    ``se`` and ``df`` degrees of freedom lies inside (-``margin``, +``margin``): the larger of P(T >= (mean +
    margin)/se) read as the test of mean <= -margin and P(T <= (mean - margin)/se) of mean >= +margin. For
    paired data (se = sd/√n, df = n - 1) it is statsmodels' ``ttost_paired(x, y, -margin, margin)[0]``.
    p < alpha is the same as the (1 - 2·alpha) t interval lying inside the margins. NaN for se NaN or df < 1."""
    from scipy import stats

    if not (df >= 1 and math.isfinite(se)):
        return math.nan
    if se == 0:
        return 0.0 if abs(mean) < margin else 1.0
    lower = float(stats.t.sf((mean + margin) / se, df))
    upper = float(stats.t.cdf((mean - margin) / se, df))
    return max(lower, upper)


def paired_verdict(mean: float, sd: float, n: int, margin: float, alpha: float = 0.05, power: float = 0.8,
                   unmeasured_hosts: bool = False, baseline: str = "scaled_dot") -> dict[str, Any]:
    """Interval, power and equivalence of ``n`` paired differences with mean ``mean`` and standard deviation
    ``sd`` (any unit; ``margin`` in the same unit), and the one verdict of the comparison.

    Returns ``lo``, ``hi`` (the two-sided 1 - ``alpha`` Student-t interval), ``mdd``
    (:func:`min_detectable_difference` at ``power``), ``tost_p`` (:func:`tost_p` at ±``margin``) and ``verdict``,
    the first rule that applies:

    1. n < 2: *undetermined* (no interval);
    2. ``unmeasured_hosts`` (runs of the comparison on more than one host, and no measure of what a host changes):
       *undetermined (cross-host, unmeasured)*: neither a difference nor an equivalence is claimed;
    3. TOST p < ``alpha`` and MDD <= margin: *equivalent within ±margin*; a difference the interval resolves but
       which is smaller than the margin is equivalent too (the cell says ``resolved, smaller than the margin``);
    4. the interval excludes 0: *better* (lo > 0) or *worse* (hi < 0) than ``baseline``;
    5. MDD > margin: *undetermined (MDD x.xx > margin)*: the comparison cannot support "equivalent" whatever it
       measured (so a setting whose test set is too small for the margin, such as TREC's 500 questions at 1
       point, drops out of the equivalence verdict by this rule);
    6. otherwise *undetermined*: the interval reaches past a margin.
    """
    from scipy import stats

    out: dict[str, Any] = {"lo": math.nan, "hi": math.nan, "mdd": math.nan, "tost_p": math.nan}
    if n < 2 or not math.isfinite(sd):
        out["verdict"] = f"{UNDETERMINED} ({n} paired seed{'s' * (n != 1)}, no interval)"
        return out
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(1 - alpha / 2, n - 1)) * se
    out.update(lo=mean - half, hi=mean + half, mdd=min_detectable_difference(sd, n, alpha, power),
               tost_p=tost_p(mean, se, n - 1, margin))
    resolved = out["lo"] > 0 or out["hi"] < 0
    if unmeasured_hosts:
        out["verdict"] = f"{UNDETERMINED} (cross-host, unmeasured)"
    elif out["tost_p"] < alpha and out["mdd"] <= margin:
        out["verdict"] = (f"{EQUIVALENT} within ±{margin:g}"
                          + (" (resolved, smaller than the margin)" if resolved else ""))
    elif resolved:
        out["verdict"] = f"{BETTER if out['lo'] > 0 else WORSE} than {baseline}"
    elif out["mdd"] > margin:
        out["verdict"] = f"{UNDETERMINED} (MDD {out['mdd']:.2f} > {margin:g})"
    else:
        out["verdict"] = UNDETERMINED
    return out


#: the host of a run's accuracy: where it trained (:func:`attnbench.callbacks.throughput.machine_boot`)
ACC_HOST = "train_host"


def _pair_hosts(variant: pd.DataFrame, base: pd.DataFrame) -> tuple[float, str, set]:
    """One replicate's paired difference (variant minus baseline accuracy, each the mean of its runs), its kind
    and the hosts of the runs it used.

    ``kind`` is ``same`` where the variant's runs all name one host and the replicate has baseline runs on it (a
    *baseline twin* of :mod:`attnbench.experiments.reproduce`): then only those baseline runs count; ``unrecorded``
    where no run of either names a host (runs recorded before hosts were); else ``cross`` (the baseline
    accuracy is then the mean of all its runs of the replicate)."""
    hosts = set(variant["_host"].dropna())
    if variant["_host"].notna().all() and len(hosts) == 1 and (base["_host"] == next(iter(hosts))).any():
        base, kind = base[base["_host"] == next(iter(hosts))], "same"
    else:
        kind = "unrecorded" if variant["_host"].isna().all() and base["_host"].isna().all() else "cross"
    return float(variant[ACC].mean()) - float(base[ACC].mean()), kind, hosts | set(base["_host"].dropna())


def cross_host_variance(runs: pd.DataFrame, keys: list[str]) -> tuple[float, int]:
    """The variance of one configuration's test accuracy between hosts, from its runs on several: (variance,
    degrees of freedom).

    A group is the runs that share ``keys`` (the variant and the replicate: one configuration and seed) and
    were not all on one recorded host (a host label differs, or some run names none while another does: a
    baseline twin and the run it twins). The variance is the pooled within-group variance of ``ACC``, Σ over
    groups of Σ (x - group mean)² / Σ (group size - 1): the spread one configuration shows between machines.
    (0.0, 0) without such a group. ``runs`` needs ``_host`` (the host label, NaN for none) and ``ACC``."""
    squares, df = 0.0, 0
    for _, group in runs.groupby(keys, dropna=False, sort=False):
        hosts = group["_host"]
        if len(group) < 2 or (hosts.notna().all() and hosts.nunique() == 1) or hosts.isna().all():
            continue
        x = group[ACC].astype(float)
        squares += float(((x - x.mean()) ** 2).sum())
        df += len(group) - 1
    return (squares / df, df) if df else (0.0, 0)


def equivalence(jobs: pd.DataFrame, swept: list[str], baseline: str = "scaled_dot",
                margin: float = DEFAULT_MARGIN, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """For every score function against ``baseline`` in every setting: the paired difference of test accuracy in
    points (100 × the fraction), its interval, the minimum detectable difference, the TOST p at ±``margin``
    points and the verdict of :func:`paired_verdict`.

    Pairs are replicates (seed, fold) both finished (runs stopped by ``trainer.max_time`` left out, as in
    :func:`summarise`). Each pair's hosts (``train_host``, :func:`_pair_hosts`) are ``same`` (the variant's run
    and a baseline run of the replicate on one host: only such baseline runs count), ``unrecorded`` (no run names
    a host) or ``cross``. A comparison with a ``cross`` pair takes the setting's cross-host variance of accuracy
    σ²_h (:func:`cross_host_variance` over every score function's runs of the setting) into its interval, MDD and
    TOST: the variance of the paired differences becomes s² + 2σ²_h (a difference of two runs on two hosts
    carries each host's deviation), with n - 1 degrees of freedom still. Where the setting has no twin to
    measure σ²_h, the verdict is *undetermined (cross-host, unmeasured)*.

    Returns:
        One row per (setting, score function other than ``baseline``) with a finished pair: the setting keys,
        ``attention``, ``n``, ``diff`` (points), ``lo``, ``hi``, ``sd`` (of the differences, host variance
        included), ``mdd`` (points), ``tost_p``, ``margin``, ``hosts`` (distinct hosts of the pairs' runs; 0 when
        none recorded), ``pairs_same``, ``pairs_cross``, ``pairs_unrecorded``, ``host_var`` (σ²_h in points²; NaN
        unmeasured or not needed), ``host_df`` and ``verdict``. Empty without ``attention`` swept.
    """
    variant_keys = [k for k in swept if k not in REPLICATE_KEYS]
    replicates = [k for k in REPLICATE_KEYS if k in jobs]
    setting_keys = (paired_setting_keys(jobs[jobs["status"] == STATUS_OK], variant_keys)
                    if "status" in jobs and "attention" in variant_keys else [])
    columns = [*setting_keys, "attention", "n", "diff", "lo", "hi", "sd", "mdd", "tost_p", "margin", "hosts",
               "pairs_same", "pairs_cross", "pairs_unrecorded", "host_var", "host_df", "verdict"]
    if "attention" not in variant_keys or not replicates or "status" not in jobs or ACC not in jobs:
        return pd.DataFrame(columns=columns)
    done = jobs[(jobs["status"] == STATUS_OK) & ~stopped_runs(jobs)].copy()
    done[ACC] = pd.to_numeric(done[ACC], errors="coerce") * 100.0
    done = done.dropna(subset=[ACC])
    for k in replicates:
        done[k] = [_replicate_label(v, k, i) for i, v in zip(done.index, done[k])]
    done["_host"] = ([_host_label(v, i) for i, v in zip(done.index, done[ACC_HOST])] if ACC_HOST in done
                     else math.nan)
    rows = []
    settings = done.groupby(setting_keys, dropna=False, sort=False) if setting_keys else [((), done)]
    for key, runs in settings:
        key = key if isinstance(key, tuple) else (key,)
        base = runs[runs["attention"] == baseline]
        host_var, host_df = cross_host_variance(runs, ["attention", *replicates])
        for attention, variant in runs[runs["attention"] != baseline].groupby("attention", sort=True):
            pairs = []
            for rep, group in variant.groupby(replicates, dropna=False, sort=False):
                rep = rep if isinstance(rep, tuple) else (rep,)
                mine = base
                for k, v in zip(replicates, rep):
                    mine = mine[mine[k].isna()] if pd.isna(v) else mine[mine[k] == v]
                if len(mine):
                    pairs.append(_pair_hosts(group, mine))
            if not pairs:
                continue
            diffs = [d for d, _, _ in pairs]
            kinds = [kind for _, kind, _ in pairs]
            n = len(diffs)
            mean = sum(diffs) / n
            sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else math.nan
            cross = "cross" in kinds
            unmeasured = cross and host_df == 0
            if cross and not unmeasured:
                sd = math.sqrt(sd**2 + 2 * host_var)
            row = dict(zip(setting_keys, key), attention=attention, n=n, diff=mean, sd=sd, margin=margin,
                       hosts=len(set().union(*(h for *_, h in pairs))), pairs_same=kinds.count("same"),
                       pairs_cross=kinds.count("cross"), pairs_unrecorded=kinds.count("unrecorded"),
                       host_var=host_var if cross and not unmeasured else math.nan,
                       host_df=host_df if cross else math.nan)
            verdict = paired_verdict(mean, sd, n, margin, alpha, power, unmeasured, baseline)
            rows.append({**row, **verdict})
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------- macro-F1 where accuracy flatters

#: a test set is imbalanced when its largest class holds more than this many times 1 / num_classes of it (the
#: single run's summary, :func:`attnbench.run.console.format_summary`, uses the same factor)
IMBALANCE_FACTOR = 1.2
F1 = "test/f1_macro"


def imbalanced(largest_share: Any, num_classes: Any) -> bool | None:
    """Whether a test set whose largest class is ``largest_share`` of it, of ``num_classes`` classes, is
    imbalanced (share > :data:`IMBALANCE_FACTOR` / num_classes); None where either is not a number (not
    recorded)."""
    try:
        share, classes = float(largest_share), float(num_classes)
    except (TypeError, ValueError):
        return None
    if math.isnan(share) or math.isnan(classes) or classes < 1:
        return None
    return share > IMBALANCE_FACTOR / classes


def macro_f1(jobs: pd.DataFrame, variant: dict[str, Any]) -> tuple[float, bool | None]:
    """(mean test macro-F1 over the variant's finished replicates, whether its test set is imbalanced).

    ``variant``: the variant's value of each variant key (a row of :func:`summarise`). Runs stopped by
    ``trainer.max_time`` are left out, as from the accuracy; a seed run twice counts once (the mean of its runs).
    Imbalance comes from the runs' ``test_largest_class_share`` and ``num_classes`` (:func:`imbalanced`; True if
    any run's test set is), None where no run records them. The F1 is NaN where no run records :data:`F1`."""
    runs = jobs[(jobs["status"] == STATUS_OK) & ~stopped_runs(jobs)] if "status" in jobs else jobs
    for key, value in variant.items():
        if key in runs:
            runs = runs[runs[key].isna()] if _is_missing(value) else runs[runs[key].astype(str) == str(value)]
    balance = [imbalanced(s, c) for s, c in zip(runs.get("test_largest_class_share", pd.Series(math.nan, runs.index)),
                                                runs.get("num_classes", pd.Series(math.nan, runs.index)))]
    known = [b for b in balance if b is not None]
    skewed = any(known) if known else None
    if F1 not in runs or runs.empty:
        return math.nan, skewed
    replicates = [k for k in REPLICATE_KEYS if k in runs]
    values = _over_replicates(runs.assign(**{k: runs[k].astype(str) for k in replicates}), replicates, F1)
    values = pd.to_numeric(values, errors="coerce").dropna()
    return (float(values.mean()) if len(values) else math.nan), skewed
