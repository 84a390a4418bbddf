#!/usr/bin/env python
"""Turn any set of attnbench runs into a Markdown report with error bars, plots and attention maps.

    attnbench report outputs/compare_cpu/multiruns/2026-11-29_12-00-00
    attnbench report outputs/train/runs                       # a folder of single runs
    attnbench report RUN_DIR RUN_DIR ... --out report/         # any run dirs
    attnbench report DIR --baseline scaled_dot --wandb          # + a W&B summary run of the group
    attnbench report --wandb-project me/attnbench --wandb-group train-2026-11-29_12-00-00 --out report/

Reads every run (a dir with ``.hydra/`` or ``metrics.json``): its composed config (``.hydra/config.yaml``),
config-group choices (``.hydra/hydra.yaml``) and overrides (``.hydra/overrides.yaml``), ``metrics.json`` and
``csv/metrics.csv``. The jobs a sweep asked for come from ``<dir>/multirun.yaml`` (the sweeper's params and
the command line), so a job that failed (no ``metrics.json``) or never started is listed in the report, never
silently dropped.

A *variant* is one combination of the settings that differ between the runs, other than ``seed`` (e.g.
``data=sst2, attention=additive``); settings are config keys that can change a result (paths, loggers, names
and progress bars do not). The settings every run shares are stated in the report and in every plot title.
Per variant the report gives the statistics of :func:`attnbench.analysis.stats.summarise` (seeds, test accuracy
mean ± sample std and its 95% Student-t interval, the paired difference to the baseline score function, rates,
memory, parameters, the attention diagnostics; test macro-F1 where a test set is imbalanced,
:func:`macro_f1_cells`); the power-and-equivalence section (:func:`equivalence_text`: per comparison the minimum
detectable difference, a TOST at ``--margin`` points, the hosts, one verdict); the ``uniform`` control's section
(:func:`attnbench.analysis.stats.control_gaps`); and the runs ``trainer.max_time`` stopped before their budget,
marked *unfinished* (:func:`stopped_table`). Plots (PNG, next to ``report.md``; :func:`figures`): ``pareto.png``
(test accuracy vs training tokens/s per setting), ``head_dim.png`` and ``seq_len.png`` (when ``model.head_dim`` /
``data.max_length`` are swept), ``capacity.png`` (:mod:`attnbench.analysis.capacity`) and
``attention_maps[_<setting>]_s<i>.png`` (:mod:`attnbench.viz.attention_maps`).

Writes ``report.md``, ``report.csv`` (one row per variant), ``jobs.csv`` (one row per job, its status,
settings and metrics), ``equivalence.csv`` (per score function against the baseline: Δ in points, its interval,
the minimum detectable difference, the TOST p at ``--margin`` and the verdict; :func:`equivalence_text`) and the
plots into ``--out`` (default: the one folder given), and prints the Markdown.
``--wandb`` logs them into a summary run (:mod:`attnbench.analysis.wandb_report`). Exit status 0 when at least
one job finished, 1 otherwise (and for a path without runs or an unreachable W&B, with one ``Error:`` line).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from attnbench.run.console import human_seconds
from attnbench.run.loggers import csv_log_segments

# The statistics (mean_ci, summarise) and the status names live in the package, where mutation testing reaches them.
from attnbench.analysis.stats import (  # noqa: F401  (re-exported: report.mean_ci, report.STATUS_OK, ...)
    ACC,
    REPLICATE_KEYS,
    HOST_COLUMNS,
    SETTING_GROUPS,
    STATUS_FAILED,
    STATUS_INCOMPLETE,
    STATUS_MISSING,
    STATUS_OK,
    MIN_CPU_SHARE,
    DEFAULT_MARGIN,
    NO_DISCRIMINATION,
    control_gaps,
    equivalence,
    macro_f1,
    convergence_counts,
    disturbed_runs,
    flatten_config,
    inexact_resumes,
    join_log_segments,
    resume_record,
    val_loss_epochs,
    format_setting,
    headline,
    mean_ci,
    split_settings,
    stopped_runs,
    summarise,
)

from attnbench.analysis.capacity import LOAD, THRESHOLD, capacity_figure, render_capacity, with_head_dim
from attnbench.analysis.tables import md_table
from attnbench.paths import atomic_target, write_text_atomically

# Hydra keys that never define a variant
IGNORED_KEYS = {"hydra.sweep.dir", "hydra.run.dir", "hydra.mode"}


# --------------------------------------------------------------------------- reading a multirun


def _parse_overrides(lines: Iterable[str]) -> dict[str, list[str]]:
    """``key -> values`` of Hydra override strings; a sweep (``a,b``, ``range(...)``) gives several values.

    Raises:
        ValueError: an override Hydra's own parser rejects.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(list(lines)):
        if override.is_delete():
            continue
        key = override.get_key_element().lstrip("+~")
        if key in IGNORED_KEYS:
            continue
        if override.is_sweep_override():
            texts = [str(v) for v in override.sweep_string_iterator()]
            try:  # a choice sweep's values; other sweeps (range, interval) keep Hydra's text
                values = list(override.sweep_iterator())
            except Exception:  # noqa: BLE001
                values = texts
            parsed[key] = [_override_text(v, t) for v, t in zip(values, texts)] if len(values) == len(texts) else texts
        else:
            parsed[key] = [_override_text(override.value(), override.get_value_element_as_str())]
    return parsed


def _override_text(value: Any, text: str) -> str:
    """An override's value as its config would read (:func:`attnbench.analysis.stats.format_setting`): Hydra writes a
    bool override as ``True``/``False`` where the composed config reads ``true``/``false``; a run's overrides and
    its config (and runs launched either way) must name one setting alike. Other values keep Hydra's text."""
    return format_setting(value) if isinstance(value, bool) else text


def expected_jobs(multirun_dir: Path) -> tuple[list[dict[str, str]], list[str]]:
    """The jobs a sweep asked for, from ``multirun.yaml``: (one ``key -> value`` dict per job, swept keys).

    Follows Hydra's basic sweeper: the sweeper's ``params`` first, command-line
    overrides replace a param of the same key; jobs are the Cartesian product.
    Returns ``([], [])`` when ``multirun.yaml`` is absent.
    """
    if not (multirun_dir / "multirun.yaml").is_file():
        return [], []
    hydra_cfg = (_load_yaml(multirun_dir / "multirun.yaml") or {}).get("hydra", {})
    params = hydra_cfg.get("sweeper", {}).get("params") or {}
    lines = [f"{k}={v}" for k, v in params.items()]
    lines += list(hydra_cfg.get("overrides", {}).get("task") or [])
    choices = _parse_overrides(lines)  # later (command-line) values win, as in Hydra
    swept = [k for k, values in choices.items() if len(values) > 1]
    keys = list(choices)
    jobs = [dict(zip(keys, combo)) for combo in itertools.product(*(choices[k] for k in keys))]
    return jobs, swept


def _last_error(job_dir: Path) -> str | None:
    """The last ERROR line of a job's ``train.log`` without its time/logger prefix; ``None`` if there is none."""
    log = job_dir / "train.log"
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()] if log.is_file() else []
    errors = [line for line in lines if "][ERROR]" in line or line.startswith(("Traceback", "Error"))]
    return errors[-1].split("][ERROR] ", 1)[-1][:200] if errors else None


def _failure_record(job_dir: Path) -> dict[str, Any]:
    """The job's ``failure.json`` (every failed run writes one, a bug's traceback included; a single run's bug
    leaves no ERROR line in ``train.log``), or ``{}`` when it has none or it cannot be read."""
    path = job_dir / "failure.json"
    try:
        record = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    if isinstance(record.get("error"), str):
        record["error"] = " ".join(record["error"].split())[:200]
    return record


def _csv_history(job_dir: Path, columns: tuple[str, ...]) -> pd.DataFrame | None:
    """The run's logged ``step`` and ``columns`` (those it has) over every segment of its CSV log (a resumed run has
    one per segment: :func:`attnbench.run.loggers.csv_log_segments`, joined by
    :func:`attnbench.analysis.stats.join_log_segments`); None without a readable log.

    Rows of the test loop (any ``test/*`` value) are left out: their ``step`` counts test batches (50, 100, ...),
    not training steps, so they would supersede a resumed run's earlier rows from step 50 on."""
    frames = []
    for path in csv_log_segments(job_dir):
        try:
            frame = pd.read_csv(path, usecols=lambda c: c == "step" or c in columns or c.startswith("test/"))
        except (ValueError, pd.errors.EmptyDataError, OSError):
            continue
        tests = [c for c in frame.columns if c.startswith("test/") and c not in columns]
        if tests:
            frame = frame[frame[tests].isna().all(axis=1)].drop(columns=tests).reset_index(drop=True)
        frames.append(frame)
    frames = [frame for frame in frames if "step" in frame]
    return join_log_segments(frames) if frames else None


def _last_csv_step(job_dir: Path) -> int | None:
    history = _csv_history(job_dir, ())
    if history is None:
        return None
    steps = pd.to_numeric(history["step"], errors="coerce").dropna()
    return int(steps.max()) if len(steps) else None


def _val_history(job_dir: Path) -> dict[str, Any]:
    """The run's validation history from its CSV log, every segment of a resumed run included
    (:func:`_csv_history`; :func:`attnbench.analysis.stats.val_loss_epochs`): epochs validated, the epoch of the
    lowest ``val/loss``, the last validated epoch; ``{}`` without a readable log or any ``val/loss`` in it."""
    history = _csv_history(job_dir, ("epoch", "val/loss"))
    return {} if history is None else val_loss_epochs(history)


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text()) if path.is_file() else None
    except yaml.YAMLError:
        return None


_PLAIN_REFERENCE = re.compile(r"\$\{[\w.]+\}")


def _load_config(path: Path) -> Any:
    """A run's ``.hydra/config.yaml`` with its interpolations resolved, as plain containers.

    Hydra writes the composed config unresolved (``max_epochs: ${budget.${data.name}}``); compared as text, two
    runs of one sweep would look alike where their values differ (3 vs 20 epochs). Each value is resolved
    within the run's own config. Kept as text: a value that calls a resolver (``${hydra:...}``, ``${now:...}``,
    ``${oc.env:...}``: it would be resolved in the report's process, not the run's), and a plain reference to
    another key (``lr: ${optim.lr}``, ``module.attention: ${attention}``), which repeats that key's setting. ``None`` when the file is missing or not YAML.
    """
    from omegaconf import OmegaConf

    raw = _load_yaml(path)
    if not isinstance(raw, dict):
        return raw
    cfg = OmegaConf.create(raw)

    def resolve(node: Any, prefix: str) -> Any:
        if isinstance(node, dict):
            return {k: resolve(v, f"{prefix}{k}.") for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v, f"{prefix}{i}.") for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node and ":" not in node and not _PLAIN_REFERENCE.fullmatch(node):
            try:
                value = OmegaConf.select(cfg, prefix[:-1], throw_on_missing=False)
            except Exception:  # noqa: BLE001 - an unknown resolver or a missing key: keep the text
                return node
            return node if OmegaConf.is_config(value) else value  # a whole section (${attention}) is a copy
        return node

    return resolve(raw, "")


def run_settings(job_dir: Path) -> tuple[dict[str, str], list[str]]:
    """A run's settings (``key -> value`` text) and the keys its command line set, from its ``.hydra/`` files.

    The settings are its composed config flattened to dotted keys (``.hydra/config.yaml``), the config-group
    choices that name a setting (``attention``, ``data``, ``model``, ... from ``.hydra/hydra.yaml``; else the
    config's ``attention.name`` / ``data.name``), and its overrides (``.hydra/overrides.yaml``, which win:
    they are what the sweep asked for). Values as :func:`attnbench.analysis.stats.format_setting` writes them.
    Empty when the run has no ``.hydra/``.
    """
    hydra_dir = job_dir / ".hydra"
    config = _load_config(hydra_dir / "config.yaml")
    flat = flatten_config(config) if isinstance(config, dict) else {}
    choices = ((_load_yaml(hydra_dir / "hydra.yaml") or {}).get("hydra", {}).get("runtime", {}).get("choices") or {})
    settings: dict[str, str] = {}  # the group choices first: they name the settings their keys belong to
    for group in SETTING_GROUPS:
        if choices.get(group) is not None:
            settings[group] = str(choices[group])
        elif f"{group}.name" in flat and group in ("attention", "data"):
            settings[group] = flat[f"{group}.name"]
    settings.update(flat)
    overrides = _load_yaml(hydra_dir / "overrides.yaml") or []
    try:
        parsed = _parse_overrides(overrides)
    except Exception:  # noqa: BLE001 - an override Hydra cannot parse any more: the config still tells
        parsed = {}
    settings.update({k: v[0] for k, v in parsed.items()})
    return settings, list(parsed)


def read_job(job_dir: Path) -> dict[str, Any]:
    """One job's record: ``job``, ``dir``, ``status``, its settings (:func:`run_settings`), and its metrics.

    ``status`` is ``finished`` when ``metrics.json`` exists and reads as a JSON object; otherwise
    ``failed`` when ``metrics.json`` is damaged (the error names it, and a warning on stderr), when its
    ``failure.json`` says so (the error in ``error``) or, for a run without one, ``train.log``
    has an ERROR line; ``incomplete`` otherwise (interrupted: Ctrl-C, SIGTERM; killed; or still running); both carry
    ``last_step``, the last step in the CSV log. Every job with a CSV log carries its validation history
    (``val/epochs_validated``, ``val/loss_lowest_epoch``, ``val/last_epoch``: :func:`_val_history`); a resumed run
    its ``resume`` record as the ``resume/*`` columns (:func:`attnbench.analysis.stats.resume_record`: exact or not,
    batches replayed and unseen). ``_settings`` holds the names
    of the setting columns, ``_explicit`` those set on the command line.
    """
    record: dict[str, Any] = {"job": job_dir.name, "dir": str(job_dir)}
    settings, explicit = run_settings(job_dir)
    config = _load_yaml(job_dir / ".hydra" / "config.yaml")
    if isinstance(config, dict):
        record["_batch_size"] = (config.get("data") or {}).get("batch_size")
    metrics_file = job_dir / "metrics.json"
    record.update(_val_history(job_dir))
    metrics, damaged = None, None
    if metrics_file.is_file():
        try:
            metrics = json.loads(metrics_file.read_text())
            if not isinstance(metrics, dict):
                raise ValueError(f"a JSON {type(metrics).__name__}, not an object")
        except (OSError, ValueError) as err:  # truncated, not JSON, unreadable: listed as failed, named
            metrics, damaged = None, f"{metrics_file} is damaged ({err}); restore it or re-run the job"
            print(f"Warning: {damaged}", file=sys.stderr)
    if metrics is not None:
        record.update(resume_record(metrics.pop("resume", None)))  # counts, not a dict's text, in jobs.csv
        for key in ("attention", "data", "seed"):  # a run dir without .hydra/: what metrics.json says, as text
            if key not in settings and metrics.get(key) is not None:
                settings[key] = format_setting(metrics[key])
        record.update({k: v for k, v in metrics.items() if k not in settings})  # its settings, as text, win
        record["status"] = STATUS_OK
    else:
        failure = _failure_record(job_dir)
        if failure:  # what the run said of its end: "interrupted" (Ctrl-C, SIGTERM, also logged as an ERROR
            # line) is not a failure; its record (attnbench reproduce) has failure.json, not train.log
            record["error"] = (failure.get("error") or _last_error(job_dir)) if failure.get("status") == "failed" \
                else None
        else:  # a run from before failure.json: its log's last ERROR line
            record["error"] = _last_error(job_dir)
        record["error"] = damaged or record["error"]
        record["status"] = STATUS_FAILED if record["error"] else STATUS_INCOMPLETE
        record["last_step"] = _last_csv_step(job_dir)
    record.update(settings)
    record["_settings"], record["_explicit"] = tuple(settings), tuple(explicit)
    record["_config"] = isinstance(config, dict)
    return record


def _is_run_dir(path: Path) -> bool:
    return (path / ".hydra").is_dir() or (path / "metrics.json").is_file()


def _is_sweep(path: Path) -> bool:
    """A multirun dir: its ``multirun.yaml``, or run dirs one level down."""
    return (path / "multirun.yaml").is_file() or any(p.is_dir() and _is_run_dir(p) for p in path.iterdir())


def _job_order(path: Path) -> tuple[int, str]:
    head = path.name.split("_", 1)[0]
    return (int(head) if head.isdigit() else 1 << 30, path.name)


def _read_sweep(multirun_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The records of one multirun's jobs (finished, failed, missing) and the keys its ``multirun.yaml`` sweeps."""
    job_dirs = sorted((p for p in multirun_dir.iterdir() if p.is_dir() and _is_run_dir(p)), key=_job_order)
    expected, swept = expected_jobs(multirun_dir)
    records = [read_job(p) for p in job_dirs]
    seen = {tuple(str(r.get(k)) for k in swept) for r in records}
    for job in expected:
        combo = tuple(job[k] for k in swept)
        if combo not in seen:
            seen.add(combo)
            records.append({**job, "job": "(not started)", "status": STATUS_MISSING})
    return records, swept


def find_runs(path: Path) -> list[Path]:
    """What ``path`` holds: itself when it is a run dir, else its run dirs and multirun dirs, one level down
    (a multirun dir, a folder of single runs such as ``outputs/train/runs``, or a folder of multiruns).

    Raises:
        FileNotFoundError: ``path`` does not exist or holds no run (naming what a run dir holds).
    """
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a Hydra multirun dir, a folder of runs or a run dir (no such folder); "
                                "pass run dirs, a folder of runs (outputs/train/runs) or a multirun dir "
                                "(outputs/<task>/multiruns/<date>).")
    if _is_run_dir(path) or _is_sweep(path):
        return [path]
    found = sorted((p for p in path.iterdir() if p.is_dir() and (_is_run_dir(p) or _is_sweep(p))), key=_job_order)
    if not found:
        raise FileNotFoundError(
            f"{path} is not a Hydra multirun dir and holds no runs (no multirun.yaml, no run dirs with .hydra/ "
            "or metrics.json); pass the folder printed by `python train.py -m ...` (outputs/<task>/multiruns/<date>), "
            "a folder of single runs (outputs/train/runs) or run dirs."
        )
    return found


def read_runs(paths: Iterable[Path]) -> tuple[pd.DataFrame, list[str], dict[str, str]]:
    """Every run under ``paths`` (:func:`find_runs` each), as a DataFrame; the swept keys; the settings held fixed.

    Swept keys: those a ``multirun.yaml`` sweeps, then every other relevant setting that differs between the
    runs (:func:`attnbench.analysis.stats.split_settings`); fixed: the relevant settings all runs share. A run
    found twice (two paths to it) counts once.

    Raises:
        FileNotFoundError: a path holds no run.
    """
    records: list[dict[str, Any]] = []
    swept: list[str] = []
    seen_dirs: set[Path | None] = set()
    for path in paths:
        for found in find_runs(Path(path)):
            found_records, found_swept = ([read_job(found)], []) if _is_run_dir(found) else _read_sweep(found)
            for r in found_records:  # a job never started has no dir
                where = Path(r["dir"]).resolve() if r.get("dir") else None
                if where is None or where not in seen_dirs:
                    seen_dirs.add(where)
                    records.append(r)
            swept += [k for k in found_swept if k not in swept]
    return _frame(records, swept)


def _frame(records: list[dict[str, Any]], swept: list[str]) -> tuple[pd.DataFrame, list[str], dict[str, str]]:
    """The job table, swept keys (``swept`` first) and fixed settings of ``records`` (see :func:`read_runs`)."""
    known = [{k: r[k] for k in r["_settings"]} for r in records if r.get("_settings")]
    full = [s for s, r in zip(known, [r for r in records if r.get("_settings")]) if r.get("_config")] or known
    partial = [s for s in known if not any(s is f for f in full)]  # run dirs without .hydra/: a few keys only
    explicit = {k for r in records for k in r.get("_explicit") or ()}
    varying, fixed = split_settings(full, explicit)
    varying += [k for k in fixed if any(k in s and s[k] != fixed[k] for s in partial)]
    swept = list(swept) + [k for k in varying if k not in swept]
    for k in swept:
        fixed.pop(k, None)
    frame = pd.DataFrame.from_records(records)
    for k in swept:  # a run without the key (a group option other groups lack) shows "–", never a dropped row
        if k not in frame:
            frame[k] = None
    return frame, swept, fixed


def read_multirun(multirun_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """All jobs of a multirun (or any folder of runs), finished, failed and missing, as a DataFrame; the swept keys.

    Raises:
        FileNotFoundError: ``multirun_dir`` holds neither ``multirun.yaml`` nor run dirs.
    """
    jobs, swept, _ = read_runs([multirun_dir])
    return jobs, swept


class WandbUnavailable(RuntimeError):
    """The W&B API cannot be reached (offline machine, no credentials, unknown project)."""


def _wandb_stopped_by(summary: dict[str, Any], config: dict[str, Any]) -> str | None:
    """What a run dir's ``metrics.json`` says as ``stopped_by``, for a W&B run (its summary holds numbers only):
    ``"max_time"`` where its config set ``trainer.max_time`` and it ended before its budget
    (``train/steps_done < train/steps_planned``: the rule of :func:`attnbench.run.train.stop_reason`; a run that
    failed otherwise is not ``finished``), else ``None``."""
    if isinstance(summary.get("stopped_by"), str) and summary["stopped_by"]:
        return summary["stopped_by"]
    done, planned = summary.get("train/steps_done"), summary.get("train/steps_planned")
    capped = (config.get("trainer") or {}).get("max_time") not in (None, "", "null")
    if capped and _finite(done) and _finite(planned) and float(done) < float(planned):
        return "max_time"
    return None


def _wandb_val_history(*segments: Any) -> dict[str, Any]:
    """A W&B run's validation history (:func:`attnbench.analysis.stats.val_loss_epochs` of its logged ``epoch`` and
    ``val/loss``, ``run.history(keys=...)``), as a run dir's CSV log gives it; ``{}`` where the run has no history
    or it cannot be read (the report stands without it). An offline-resumed run is one W&B run per segment, oldest
    first: their histories are joined on Lightning's ``trainer/global_step``
    (:func:`attnbench.analysis.stats.join_log_segments`), a later segment replacing the replayed steps."""
    frames = []
    for run in segments:
        history = getattr(run, "history", None)
        if not callable(history):
            continue
        try:
            frame = pd.DataFrame(history(keys=["epoch", "val/loss", "trainer/global_step"], pandas=True))
        except Exception:  # noqa: BLE001 - a history the API cannot give: no columns, no failed report
            continue
        frames.append(frame.rename(columns={"trainer/global_step": "step"}))
    if not frames:
        return {}
    if len(frames) > 1 and all("step" in frame for frame in frames):
        return val_loss_epochs(join_log_segments(frames))
    return val_loss_epochs(frames[-1])  # one segment, or segments without steps: the last one's own history


def _resumed_chains(runs: list[Any]) -> list[list[Any]]:
    """The jobs among W&B runs, each as its segments oldest first. An offline-resumed run continues as a new W&B
    run whose config names the one whose checkpoint it resumed (``resumed_from``, :mod:`attnbench.run.loggers`):
    runs linked so are one job. Its last segment is the newest run of the group that finished with a ``test/acc``
    (else the newest run no other run resumes from; newest by ``created_at`` where the API gives it), and its
    segments are that run and the runs it resumed from, back to the first; a segment abandoned beside them (it
    crashed before its first checkpoint, so the next one resumed from the same run) is no job of its own. A link
    to a run outside ``runs``, to itself or round in a cycle ends the chain."""
    by_id = {str(run.id): run for run in runs if getattr(run, "id", None) is not None}

    def previous(run: Any) -> Any:
        earlier = by_id.get(str((run.config or {}).get("resumed_from")))
        return earlier if earlier is not run else None

    group = {id(run): id(run) for run in runs}  # union-find over the links: one group per job

    def root(key: int) -> int:
        while group[key] != key:
            group[key] = group[group[key]]
            key = group[key]
        return key

    for run in runs:
        if (earlier := previous(run)) is not None:
            group[root(id(run))] = root(id(earlier))
    members: dict[int, list[Any]] = {}
    for run in runs:
        members.setdefault(root(id(run)), []).append(run)
    chains = []
    for group_runs in members.values():
        resumed = {id(earlier) for run in group_runs if (earlier := previous(run)) is not None}
        finished = [r for r in group_runs if r.state == "finished" and ACC in dict(r.summary or {})]
        last = max(finished or [r for r in group_runs if id(r) not in resumed] or group_runs,
                   key=lambda r: str(getattr(r, "created_at", "") or ""))
        segments = [last]
        while (earlier := previous(segments[0])) is not None and earlier not in segments:
            segments.insert(0, earlier)
        chains.append(segments)
    return chains


def read_wandb(project: str, group: str | None, api: Any = None) -> tuple[pd.DataFrame, list[str], dict[str, str]]:
    """Runs of a W&B project (optionally one group) through the public API, as :func:`read_job` records.

    Each run's settings are its run config (the resolved Hydra config train.py stores), flattened, with
    ``attention`` and ``data`` taken from ``attention.name`` and ``data.name``; its metrics are the numbers of
    its summary, and its validation history the ``val/*`` epoch columns (:func:`_wandb_val_history`). A run resumed
    offline is one W&B run per segment, each naming the one it continues (``resumed_from`` in its config): it is
    read as one job, the last segment's, with every segment's history. A run whose
    state is not ``finished`` counts as failed; one the wall-time cap stopped before its
    budget is marked ``stopped_by`` as its ``metrics.json`` would be (:func:`_wandb_stopped_by`). Runs of ``job_type`` ``report``
    (summary runs written by ``--wandb``) are skipped.

    Args:
        api: a ``wandb.Api``-like object (``runs(path, filters=...)``); default: ``wandb.Api()``.

    Raises:
        WandbUnavailable: the API cannot be created or queried (one line saying why and what to do).
    """
    try:
        if api is None:
            import wandb

            api = wandb.Api(timeout=20)
        filters = {"group": group} if group else {}
        runs = list(api.runs(project, filters=filters))
    except Exception as err:  # noqa: BLE001 - any failure here means "W&B not reachable"
        raise WandbUnavailable(
            f"cannot read W&B project {project!r}{f' group {group!r}' if group else ''}: "
            f"{type(err).__name__}: {' '.join(str(err).split())[:300]}. Reading runs from W&B needs network access "
            "and credentials (`wandb login` or WANDB_API_KEY); offline, pass the run dirs instead."
        ) from None
    records = []
    for segments in _resumed_chains([run for run in runs if getattr(run, "job_type", None) != "report"]):
        run = segments[-1]
        config = dict(run.config or {})
        settings = flatten_config(config)
        for name in ("attention", "data"):
            if f"{name}.name" in settings:
                settings[name] = settings[f"{name}.name"]
        record: dict[str, Any] = {"job": run.name, "dir": getattr(run, "url", None),
                                  "_batch_size": (config.get("data") or {}).get("batch_size")}
        summary = {k: v for k, v in dict(run.summary).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in settings}
        record.update(summary)
        # where its rates were measured (text: Throughput.measured_on), which the paired multiples pair on
        record.update({k: v for k, v in dict(run.summary).items() if k in HOST_COLUMNS and isinstance(v, str)})
        record.update(_wandb_val_history(*segments))
        if stopped_by := _wandb_stopped_by(dict(run.summary), config):
            record["stopped_by"] = stopped_by
        record["status"] = STATUS_OK if run.state == "finished" and ACC in summary else STATUS_FAILED
        if record["status"] == STATUS_FAILED:
            record["error"] = f"W&B state {run.state}" + ("" if ACC in summary else f", no {ACC} in its summary")
        record.update(settings)
        record["_settings"], record["_explicit"], record["_config"] = tuple(settings), (), True
        records.append(record)
    if not records:
        raise WandbUnavailable(f"W&B project {project!r}{f' group {group!r}' if group else ''} has no runs; "
                               "check --wandb-project (entity/project) and --wandb-group.")
    return _frame(records, [])


# --------------------------------------------------------------------------- Markdown and plots


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}"
    return str(value)


ONE_SEED = "1 seed, no interval"
# marks a figure of a run that trainer.max_time stopped before its step budget (metrics.json: stopped_by)
STOPPED_MARK = "unfinished"


def stopped_table(jobs: pd.DataFrame, swept: list[str]) -> str:
    """The runs ``trainer.max_time`` stopped before their budget, one Markdown row each: steps done of planned,
    measured seconds per training step, measured training time, the extrapolated time of the whole budget
    (planned steps / measured steps per second; training steps only) and the test accuracy at the stop, marked
    as not final, with the number of rows it was measured on (``test_batches_if_stopped`` tests fewer than the
    split). Empty when no run stopped."""
    stopped = jobs[(jobs["status"] == STATUS_OK) & stopped_runs(jobs)]
    disturbed = disturbed_runs(stopped, "train/cpu_share")

    def cells(r: pd.Series) -> list[str]:
        done, planned = r.get("train/steps_done"), r.get("train/steps_planned")
        rate, seconds = r.get("train/steps_per_sec"), r.get("train/time_sec")
        sec_step = 1.0 / rate if _finite(rate) and rate > 0 else math.nan
        whole = planned / rate if _finite(planned) and _finite(rate) and rate > 0 else math.nan
        # a disturbed run's rate understates it: said in the cells that rest on it
        mark = f" (disturbed: cpu share {r.get('train/cpu_share'):.2f})" if disturbed[r.name] else ""
        # how many rows the accuracy is of: fewer than the split's with test_batches_if_stopped
        tested = f"; {r.get('test/samples'):,.0f} test rows" if _finite(r.get("test/samples")) else ""
        if _finite(r.get("test/limited_to_batches")) and _finite(r.get("test/tokens_per_sec")):
            # its rate is of its first batches only (the longest rows): kept out of the variant's test_tok_s
            tested += (f", {r.get('test/tokens_per_sec'):,.0f} test tok/s on its first "
                       f"{r.get('test/limited_to_batches'):,.0f} batches")
        return [f"trainer.{r['stopped_by']}", f"{_fmt(done, 0)} / {_fmt(planned, 0)}",
                "–" if math.isnan(sec_step) else f"{sec_step:.3g}{mark}",
                human_seconds(seconds) if _finite(seconds) else "–",
                human_seconds(whole) + mark if not math.isnan(whole) else "–",
                f"{r.get(ACC):.4f} ({STOPPED_MARK}{tested})" if _finite(r.get(ACC)) else "–"]

    return _jobs_table(stopped, swept, ["stopped by", "steps done / planned", "s/step (measured)",
                                        "training time (measured)", "whole budget (extrapolated)",
                                        "test acc at the stop (not final)"], cells)


def _jobs_table(jobs: pd.DataFrame, swept: list[str], headers: list[str], cells: Any) -> str:
    """One Markdown row per job of ``jobs``: its name, its ``swept`` settings and ``cells(row)`` under ``headers``;
    ``""`` when ``jobs`` is empty."""
    if jobs.empty:
        return ""
    return md_table(["job", *swept, *headers],
                    ([str(r.get("job")), *(str(r.get(k)) for k in swept), *cells(r)] for _, r in jobs.iterrows()))


def resumed_table(jobs: pd.DataFrame, swept: list[str]) -> str:
    """The finished runs resumed inexactly (:func:`attnbench.analysis.stats.inexact_resumes`), one Markdown row each:
    the epoch they resumed in, its batches done before the checkpoint of its batch count, and how many of that
    epoch's batches the resumed run replayed (seen twice) and never saw. Empty when there is none."""
    finished = jobs[jobs["status"] == STATUS_OK]

    def cells(r: pd.Series) -> list[str]:
        replayed = _fmt(r.get("resume/replayed_batches"), 0)
        if replayed in ("0", "0.0"):  # inexact without a replay: a checkpoint without RNG states (not attnbench's)
            replayed = "0 (checkpoint without RNG states: dropout and batch order differ)"
        return [_fmt(r.get("resume/epoch"), 0),
                f"{_fmt(r.get('resume/batches_done'), 0)} / {_fmt(r.get('resume/batches_per_epoch'), 0)}",
                replayed, _fmt(r.get("resume/unseen_batches"), 0)]

    return _jobs_table(finished[inexact_resumes(finished)], swept, ["resumed in epoch", "batches done / per epoch",
                                                                     "batches replayed", "batches unseen"], cells)


def convergence_text(jobs: pd.DataFrame) -> str:
    """One sentence: in how many finished runs ``val/loss`` was lowest before the last validated epoch, still
    falling at it, or logged for one epoch only (:func:`attnbench.analysis.stats.convergence_counts`); empty when no
    run has a validation history."""
    c = convergence_counts(jobs)
    known = c["before_last"] + c["still_falling"] + c["one_epoch"]
    if not known:
        return ""
    text = (f"Convergence (from each run's `csv/metrics.csv`; jobs.csv: `val/epochs_validated`, "
            f"`val/loss_lowest_epoch`, `val/last_epoch`): `val/loss` was lowest before the last validated epoch in "
            f"{c['before_last']} of the {known + c['unknown']} finished runs, lowest at the last (still falling) in "
            f"{c['still_falling']}")
    if c["one_epoch"]:
        text += f", and {c['one_epoch']} run(s)' log holds one validated epoch only (cannot tell)"
    if c["unknown"]:
        text += f"; {c['unknown']} run(s) have no validation history"
    return text + "."


def disturbed_table(jobs: pd.DataFrame, swept: list[str]) -> str:
    """The finished runs whose training or test thread had less than :data:`MIN_CPU_SHARE` of a CPU core over
    its measured time (paused, or its core shared), one Markdown row each with both shares; their rates are left
    out of the throughput columns. Empty when there is none."""
    finished = jobs[jobs["status"] == STATUS_OK]
    flagged = finished[disturbed_runs(finished, "train/cpu_share") | disturbed_runs(finished, "test/cpu_share")]
    return _jobs_table(flagged, swept, ["train cpu share", "test cpu share", "train tok/s (left out)"],
                       lambda r: [_fmt(r.get("train/cpu_share"), 2), _fmt(r.get("test/cpu_share"), 2),
                                  _fmt(r.get("train/tokens_per_sec"), 0)])


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _paired_multiple(row: pd.Series, column: str) -> str:
    """``<column>_ratio`` with the number of pairs it is the median of (``<column>_ratio_n``, where the report has
    it): ``0.47 (4)``; ``–`` without a pair."""
    ratio, pairs = row.get(f"{column}_ratio"), row.get(f"{column}_ratio_n")
    if not _finite(ratio):
        return "–"
    return f"{ratio:.2f}" + (f" ({int(pairs)})" if pairs is not None and pd.notna(pairs) else "")


def markdown_table(table: pd.DataFrame, variant_keys: list[str], baseline: str,
                   f1: list[str] | None = None) -> str:
    """The per-variant table as Markdown (accuracy as mean ± std and its 95% CI ``[lo, hi]``; the paired Δ as
    ``mean [lo, hi]``, its 95% CI; "1 seed, no interval" where n = 1); ``f1``: one macro-F1 cell per row of
    ``table`` (:func:`macro_f1_cells`), a column beside the accuracy's interval where given."""
    has_diag = "entropy_norm" in table and table["entropy_norm"].notna().any()
    has_stopped = "n_stopped" in table and (table["n_stopped"] > 0).any()
    has_ratio = "train_tok_s_ratio" in table and table["train_tok_s_ratio"].notna().any()
    ratio_header = f"× {baseline} (paired; pairs)"
    headers = [*variant_keys, "seeds", "test acc (mean ± std)", "95% CI", *(["test macro-F1"] if f1 else []),
               f"Δ vs {baseline} (paired, 95% CI)",
               "train tok/s", *([ratio_header] if has_ratio else []), "train steps/s", "test tok/s",
               *([ratio_header] if has_ratio else []), "peak mem (MiB)", "params"]
    if has_stopped:
        headers += ["s/step", f"whole budget at that rate ({STOPPED_MARK})"]
    if has_diag:
        headers += ["entropy (norm.)", "saturated rows", "max \\|score\\|"]
    rows = []
    for i, (_, r) in enumerate(table.iterrows()):
        n_stopped = int(r.get("n_stopped", 0) or 0)
        if int(r.n) == 0 and n_stopped:
            acc, ci = (f"{STOPPED_MARK}: stopped by max_time at {_fmt(r.steps_done, 0)} of "
                       f"{_fmt(r.steps_planned, 0)} steps ({n_stopped} seed{'s' * (n_stopped > 1)})"), "–"
        elif not math.isnan(r.acc_ci):
            acc, ci = f"{r.acc_mean:.4f} ± {_fmt(r.acc_std)}", f"[{r.acc_mean - r.acc_ci:.4f}, {r.acc_mean + r.acc_ci:.4f}]"
        elif int(r.n) == 1:
            acc, ci = f"{r.acc_mean:.4f}", ONE_SEED
        else:
            acc, ci = f"{r.acc_mean:.4f} ± {_fmt(r.acc_std)}", "–"
        if r.get("attention") == baseline or math.isnan(r.diff_mean):
            diff = "–"
        elif math.isnan(r.diff_ci):
            diff = f"{r.diff_mean:+.4f} ({ONE_SEED})"
        else:
            # the mean and its interval, as the header says (a "± half-width" read as a std beside the acc column)
            diff = f"{r.diff_mean:+.4f} [{r.diff_mean - r.diff_ci:+.4f}, {r.diff_mean + r.diff_ci:+.4f}]"
        if n_stopped and int(r.n):
            acc += f" (+{n_stopped} {STOPPED_MARK}, left out)"
        cells = [_fmt(r[k]) if r[k] is not None else "–" for k in variant_keys]
        cells += [str(int(r.n)), acc, ci, *([f1[i]] if f1 else []), diff, _fmt(r.get("train_tok_s"), 0),
                  *([_paired_multiple(r, "train_tok_s")] if has_ratio else []), _fmt(r.get("train_steps_s"), 2),
                  _fmt(r.get("test_tok_s"), 0), *([_paired_multiple(r, "test_tok_s")] if has_ratio else []),
                  _fmt(r.get("peak_mem_mb"), 0), _fmt(r.get("params"), 0)]
        if has_stopped:
            sec = r.get("sec_per_step")
            cells += ["–" if sec is None or math.isnan(sec) else f"{sec:.3g}",
                      "–" if not n_stopped or math.isnan(r.extrapolated_sec) else
                      f"{human_seconds(r.extrapolated_sec)} ({STOPPED_MARK})"]
        if has_diag:
            cells += [_fmt(r.get("entropy_norm"), 3), _fmt(r.get("saturated_frac"), 3), _fmt(r.get("max_score"), 1)]
        rows.append(cells)
    return md_table(headers, rows)


def macro_f1_cells(jobs: pd.DataFrame, table: pd.DataFrame, variant_keys: list[str]) -> tuple[list[str] | None, int]:
    """The macro-F1 column of the per-variant table: for each row of ``table`` the mean test macro-F1 over its
    seeds (:func:`attnbench.analysis.stats.macro_f1`) where its test set is imbalanced (its largest class above
    1.2 / classes: accuracy alone flatters there) or its runs do not record their class balance; ``–`` where the
    test set is balanced or no run records a macro-F1. Returns (the cells, or None for no column where no row has
    a value; how many of the shown rows do not record their class balance)."""
    cells, unrecorded = [], 0
    for _, r in table.iterrows():
        value, skewed = macro_f1(jobs, {k: r[k] for k in variant_keys})
        shown = skewed is not False and not math.isnan(value)
        cells.append(f"{value:.4f}" if shown else "–")
        unrecorded += shown and skewed is None
    return (cells if any(c != "–" for c in cells) else None), unrecorded


def control_text(jobs: pd.DataFrame, swept: list[str]) -> str:
    """The control section's Markdown: per setting, :data:`~attnbench.experiments.registry.BASELINE` minus the
    :data:`~attnbench.experiments.registry.CONTROL` (paired by seed, 95% interval) and the verdict of
    :func:`~attnbench.analysis.stats.control_gaps`; ``""`` where the runs hold no such pair."""
    from attnbench.experiments.registry import BASELINE, CONTROL

    gaps = control_gaps(jobs, swept, BASELINE, CONTROL)
    if gaps.empty:
        return ""
    setting_keys = [c for c in gaps.columns if c not in ("n", "gap", "gap_lo", "gap_hi", "baseline_acc",
                                                          "control_acc", "discriminates", "verdict")]
    headers = [*setting_keys, "paired seeds", f"{BASELINE} test acc", f"{CONTROL} test acc",
               f"{BASELINE} − {CONTROL} (paired, 95% CI)", "verdict"]
    rows = [[*(_fmt(r[k]) for k in setting_keys), str(int(r.n)), f"{r.baseline_acc:.4f}", f"{r.control_acc:.4f}",
             f"{r.gap:+.4f} ({ONE_SEED})" if math.isnan(r.gap_lo)
             else f"{r.gap:+.4f} [{r.gap_lo:+.4f}, {r.gap_hi:+.4f}]",
             f"**{r.verdict}**" if r.verdict == NO_DISCRIMINATION else r.verdict] for _, r in gaps.iterrows()]
    return "\n".join([
        f"## Does attention matter here? (the `{CONTROL}` control)", "",
        f"`{CONTROL}` gives every non-padding key the same weight: attention without content, a masked mean of the "
        f"values. Where `{BASELINE}` does not beat it beyond the 95% interval of their paired difference (same "
        f"seed and setting), the setting is marked *{NO_DISCRIMINATION}*: what the score functions differ in is "
        "not what the task's accuracy rests on, and a null difference between them there says nothing about them.",
        "", md_table(headers, rows)])


def _points(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:+.2f}"


def hosts_text(row: pd.Series) -> str:
    """A comparison's hosts as a cell: ``1 host``, ``not recorded``, or ``k hosts`` with how its pairs were made
    (same host / cross-host), and the cross-host SD added (``σ_h``, points) or ``unmeasured``."""
    if row.pairs_unrecorded == row.n:
        return "not recorded"
    parts = [f"{int(row.hosts)} host{'s' * (row.hosts != 1)}"]
    if row.pairs_cross or row.hosts > 1:
        parts.append(f"{int(row.pairs_same)} same-host pair(s), {int(row.pairs_cross)} cross-host"
                     + (f", {int(row.pairs_unrecorded)} unrecorded" if row.pairs_unrecorded else ""))
    if row.pairs_cross:
        parts.append("σ_h unmeasured" if math.isnan(row.host_var) else
                     f"σ_h {math.sqrt(row.host_var):.2f} added ({int(row.host_df)} df)")
    return "; ".join(parts)


def equivalence_rule(margin: float, baseline: str) -> str:
    """The verdict rule of the equivalence table, as the report states it."""
    return (f"Each score function against `{baseline}`, per setting, paired by seed, in points of test accuracy "
            f"(1 point = 0.01). MDD: the minimum detectable difference, the true difference a two-sided paired t "
            f"test at α = 0.05 finds with 80% power given the observed SD of the paired differences and n. TOST: "
            f"the p of two one-sided t tests that the difference lies within ±{margin:g} (the declared margin, "
            "`--margin`). The verdict is the first rule that applies: fewer than 2 pairs, *undetermined*; runs on "
            "more than one host with no measure of what a host changes, *undetermined (cross-host, unmeasured)*; "
            f"TOST p < 0.05 and MDD ≤ {margin:g}, *equivalent within ±{margin:g}* (a difference the interval "
            "resolves but smaller than the margin counts as equivalent, and says so); the 95% interval excluding "
            "0, *better* or *worse*; MDD above the margin, *undetermined (MDD > margin)*: the setting cannot "
            "support \"equivalent\" at this margin whatever it measured, which leaves settings with too few "
            "seeds or too small a test set (such as a 500-question test) out of the equivalence verdict; "
            "otherwise *undetermined*. Hosts (`train_host`, where each run trained): a pair's runs on one host "
            "(a baseline twin of the seed reran the baseline there where needed), or not recorded (runs from "
            "before hosts were: paired by seed alone, as one host); where a pair crosses hosts, the variance of "
            "one configuration's accuracy between hosts (σ_h², pooled over the setting's runs of one score "
            "function and seed on several hosts) is added to the variance of the paired differences as 2σ_h²; "
            "without such runs it is unmeasured.")


def equivalence_text(jobs: pd.DataFrame, swept: list[str], baseline: str = "scaled_dot",
                     margin: float = DEFAULT_MARGIN) -> tuple[str, pd.DataFrame]:
    """The power-and-equivalence section's Markdown (:func:`attnbench.analysis.stats.equivalence`: Δ in points
    with its 95% interval, MDD, TOST p, hosts and the verdict per comparison, :func:`equivalence_rule` above it,
    and the settings whose every comparison has MDD above the margin named below it) and its table; ``""`` and
    an empty table where the runs hold no paired comparison."""
    table = equivalence(jobs, swept, baseline, margin)
    if table.empty:
        return "", table
    setting_keys = [c for c in table.columns if c not in EQUIVALENCE_FIGURES]
    setting_keys = [k for k in setting_keys if k != "attention"]
    headers = [*setting_keys, "attention", "pairs", f"Δ vs {baseline} (points, 95% CI)", "MDD (points)",
               f"TOST p (±{margin:g})", "hosts", "verdict"]
    rows = [[*(_fmt(r[k]) for k in setting_keys), f"`{r.attention}`", str(int(r.n)),
             f"{_points(r['diff'])} [{_points(r.lo)}, {_points(r.hi)}]" if not math.isnan(r.lo) else _points(r["diff"]),
             "–" if math.isnan(r.mdd) else f"{r.mdd:.2f}", "–" if math.isnan(r.tost_p) else f"{r.tost_p:.3f}",
             hosts_text(r), r.verdict] for _, r in table.iterrows()]
    lines = [f"## Power and equivalence (margin ±{margin:g} point{'s' * (margin != 1)})", "",
             equivalence_rule(margin, baseline), "", md_table(headers, rows)]
    if setting_keys:
        powerless = [", ".join(f"{k}={_fmt(v)}" for k, v in zip(setting_keys, key))
                     for key, group in table.groupby(setting_keys, sort=False, dropna=False)
                     for key in [key if isinstance(key, tuple) else (key,)] if (group["mdd"] > margin).all()]
        if powerless:
            lines += ["", f"Left out of the equivalence verdict by the power rule (MDD > {margin:g} in every "
                      f"comparison): {'; '.join(powerless)}."]
    return "\n".join(lines), table


#: equivalence table columns that are figures, not settings
EQUIVALENCE_FIGURES = ("attention", "n", "diff", "lo", "hi", "sd", "mdd", "tost_p", "margin", "hosts", "pairs_same",
                       "pairs_cross", "pairs_unrecorded", "host_var", "host_df", "verdict")


def fixed_text(fixed: dict[str, str]) -> str:
    """The settings held fixed as Markdown lines, one per top-level config key (``- data: max_length=64, ...``)."""
    if not fixed:
        return "Settings held fixed: none (every relevant setting differs between the runs, or none is known)."
    by_group: dict[str, list[str]] = {}
    for key, value in fixed.items():
        group, _, leaf = key.partition(".")
        by_group.setdefault(group, []).extend([f"{leaf}={value}"] if leaf else [])
    lines = ["Settings held fixed (every run has these; paths, loggers and names left out):", ""]
    for group, parts in by_group.items():
        choice = f" ({fixed[group]})" if group in fixed and parts else (f": {fixed[group]}" if group in fixed else "")
        lines.append(f"- **{group}**{choice}" + (f": {', '.join(parts)}" if parts else ""))
    return "\n".join(lines)


def _score_styles(names: Iterable[str]) -> dict[str, dict[str, str]]:
    """One colour and marker per score function, the same in every figure of every report: each registered score
    function (:func:`attnbench.attention.available`, sorted) keeps its place in the palette whichever of them a
    report holds; names the registry lacks (a run of a score function since removed) follow."""
    from matplotlib import colormaps

    from attnbench.attention import available

    known = sorted(available())
    order = known + sorted({str(n) for n in names} - set(known))
    colours = colormaps["tab10"].colors
    markers = "os^Dv<>pP*hX"
    return {name: {"color": colours[i % len(colours)], "marker": markers[i % len(markers)]}
            for i, name in enumerate(order)}


def _accuracy_points(ax: Any, x: pd.Series, group: pd.DataFrame, **style: Any) -> None:
    """Accuracy means at ``x``: with a 95% CI error bar where there are >= 2 seeds, a bare marker where one seed
    gives no interval (never a zero-length bar that reads as certainty)."""
    has_ci = group["acc_ci"].notna()
    label = style.pop("label", None)
    line = style.pop("line", False)
    marker = style.pop("marker", "o")
    linestyle = style.pop("linestyle", "-")  # the line's (line=True); the markers stand alone
    if has_ci.any():
        bars = ax.errorbar(x[has_ci], group.loc[has_ci, "acc_mean"], yerr=group.loc[has_ci, "acc_ci"], fmt=marker,
                           capsize=3, label=label, **style)
        style["color"] = bars[0].get_color()
        label = None
    if (~has_ci).any():
        (points,) = ax.plot(x[~has_ci], group.loc[~has_ci, "acc_mean"], marker, mfc="none", label=label, **style)
        style["color"] = points.get_color()
    if line:  # drawn last, in the markers' colour (drawn first, it took the next colour of the cycle for itself)
        ax.plot(x, group["acc_mean"], linestyle=linestyle, color=style["color"], alpha=0.6)


def _spans(values: pd.Series, factor: float = 3.0) -> bool:
    """Whether the positive, finite ``values`` span more than ``factor`` (max / min)."""
    values = values[(values > 0) & (values < float("inf"))]
    return bool(len(values)) and values.max() / values.min() > factor


def _multiple_axis(ax: Any, log: bool) -> None:
    """A rate-multiple x axis: logarithmic when ``log`` (the figure's multiples span more than 3x; one choice for
    every panel of a figure, so that equal multiples sit alike), ticks as plain numbers (0.1, 0.2, 0.5, 1), and a
    dotted line at 1 (the baseline)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    if log:
        ax.set_xscale("log")
        low, high = ax.get_xlim()
        ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10) if low <= t <= high]
        if len(ticks) < 3:  # a narrow panel (0.55x to 1x): tenths
            ticks = [t / 10 for t in range(1, 31) if low <= t / 10 <= high]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.axvline(1.0, color="grey", lw=0.8, ls=":", zorder=0)


def _numeric_first(key: Any) -> tuple:
    """A sort key for a setting's values: numbers by value (as numbers), before text (alphabetically)."""
    values = key if isinstance(key, tuple) else (key,)
    out = []
    for value in values:
        try:
            out.append((0, float(value), ""))
        except (TypeError, ValueError):
            out.append((1, 0.0, str(value)))
    return tuple(out)


def _title(setting: str, fixed: dict[str, str], width: int = 70) -> str:
    import textwrap

    text = textwrap.fill((setting + " | " if setting else "") + "fixed: " + headline(fixed), width)
    return text.replace("$", r"\$")  # a setting's text is not matplotlib mathtext


def figures(table: pd.DataFrame, variant_keys: list[str], fixed: dict[str, str] | None = None,
            baseline: str = "scaled_dot", notes: list[str] | None = None,
            jobs: pd.DataFrame | None = None) -> dict[str, Any]:
    """The plots that the swept keys allow, as ``{file name: matplotlib Figure}`` (no pyplot state).

    Every title names the settings held fixed (:func:`attnbench.analysis.stats.headline`); accuracy has a 95% CI
    bar only where >= 2 seeds give one (hollow markers: one seed, no interval). The accuracy-vs-throughput plot's
    x axis is the paired multiple of ``baseline``'s training tokens/s where the table has it (``train_tok_s_ratio``),
    else the median tokens/s. A variant whose every run was disturbed has no rate; where the table carries
    ``train_tok_s_disturbed`` (:func:`with_disturbed_rates`) and no variant has a paired multiple, such a variant is
    drawn at that rate, its legend entry marked ``(disturbed rate)``.

    ``notes`` (a list) receives one sentence for each figure the swept keys ask for that is not drawn, and for each
    variant a drawn ``pareto.png`` leaves out or draws at a disturbed rate, with the reason. ``jobs`` (the per-run
    table, optional) adds each run's accuracy as a dot to ``capacity.png``.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fixed = fixed or {}
    out: dict[str, Any] = {}
    one_seed = (table["n"] < 2).any() if "n" in table else False
    acc_label = "test accuracy (mean, 95% CI)" + ("; hollow: 1 seed, no interval" if one_seed else "")
    setting_keys = [k for k in variant_keys if k != "attention"]
    # the paired multiple of the baseline's rate where the report has one (summarise): rates of runs made at
    # different times are not comparable, pairs of one seed are
    paired = "train_tok_s_ratio" in table and table["train_tok_s_ratio"].notna().any()
    rate, rate_label = (("train_tok_s_ratio", f"training tokens/s ÷ {baseline}'s (same seed; median over seeds)")
                        if paired else ("train_tok_s", "training tokens/s"))
    styles = _score_styles(table["attention"].astype(str)) if "attention" in table else {}
    log_x = paired and _spans(table["train_tok_s_ratio"].dropna())
    notes = [] if notes is None else notes
    disturbed_rate = pd.Series(False, index=table.index)
    if not paired and "train_tok_s_disturbed" in table:  # variants whose every run was disturbed: marked
        disturbed_rate = table["train_tok_s"].isna() & table["train_tok_s_disturbed"].notna()
        table = table.assign(train_tok_s=table["train_tok_s"].where(~disturbed_rate, table["train_tok_s_disturbed"]),
                             _disturbed_rate=disturbed_rate)
    settings = list(table.groupby(setting_keys, sort=False, dropna=False)) if setting_keys else [((), table)]
    settings.sort(key=lambda item: _numeric_first(item[0]))  # d_k 16, 32, ..., 256, not 128, 16, 256, ...
    if "attention" not in table:
        notes.append("pareto.png is not drawn: the score function (attention) is not swept.")
    elif not ("train_tok_s" in table and table["train_tok_s"].notna().any()):
        notes.append("pareto.png is not drawn: no finished run has a training rate (train/tokens_per_sec > 0).")
    else:
        names = lambda rows: ", ".join(dict.fromkeys(rows["attention"].astype(str)))  # noqa: E731
        if disturbed_rate.any():
            notes.append(f"pareto.png: every run of {names(table[disturbed_rate])} was disturbed (train/cpu_share "
                         f"< {MIN_CPU_SHARE}): drawn at the median of those runs' rates, which understate the "
                         "machine's, and marked (disturbed rate) in its legend.")
        left_out = table[table[rate].isna() | table["acc_mean"].isna()]
        if len(left_out):
            notes.append(f"pareto.png leaves out {names(left_out)}: "
                         + ("no paired multiple of " + baseline + "'s rate" if paired else "no training rate")
                         + " or no finished accuracy.")
    if "train_tok_s" in table and table["train_tok_s"].notna().any() and "attention" in table:
        fig = Figure(figsize=(5.0 * len(settings), 4.4), layout="constrained")
        axes = fig.subplots(1, len(settings), squeeze=False)
        legend: dict[str, Any] = {}  # one legend for the figure: a score function's marker is the same in each panel
        for ax, (key, group) in zip(axes[0], settings):
            group = group.dropna(subset=[rate, "acc_mean"])
            for i in range(len(group)):  # a marker and colour per score function, no text that overlaps
                row = group.iloc[i:i + 1]
                name = str(row["attention"].iloc[0])
                label = f"{name} (disturbed rate)" if bool(row.get("_disturbed_rate", pd.Series([False])).iloc[0]) \
                    else name
                _accuracy_points(ax, row[rate], row, label=label, **styles[name])
            if paired:
                _multiple_axis(ax, log_x)
            key = key if isinstance(key, tuple) else (key,)
            ax.set_title(", ".join(f"{k}={v}" for k, v in zip(setting_keys, key)).replace("$", r"\$"), fontsize=9)
            ax.set_xlabel(rate_label, fontsize=8 if paired else None)
            ax.set_ylabel(acc_label, fontsize=8)
            handles, labels = ax.get_legend_handles_labels()
            legend.update((lab, h) for h, lab in zip(handles, labels) if lab not in legend)
        if legend:  # a setting whose runs have no rate draws nothing, and no empty legend
            fig.legend(list(legend.values()), list(legend.keys()), loc="outside lower center",
                       ncols=min(len(legend), 4 * len(settings)), fontsize=8, frameon=False)  # 4 to a 5-inch panel
        fig.suptitle(_title("", fixed, width=int(16 * 5.0 * len(settings))), fontsize=8)
        out["pareto.png"] = fig
    for key, name, panels in (
        ("model.head_dim", "head_dim.png", (("acc_mean", "test accuracy"), ("saturated_frac", "saturated rows"))),
        ("data.max_length", "seq_len.png", (("train_tok_s", "training tokens/s"), ("peak_mem_mb", "peak memory (MiB)"))),
    ):
        if key not in table or "attention" not in table:
            continue
        panels = [p for p in panels if p[0] in table and table[p[0]].notna().any()]
        if not panels:
            notes.append(f"{name} is not drawn: no finished run of the {key} sweep has any of its figures.")
            continue
        fig = Figure(figsize=(5.5 * len(panels), 4.6), layout="tight")
        axes = fig.subplots(1, len(panels), squeeze=False)
        # one line per score function per setting of the other swept keys (a line never joins two datasets)
        line_keys = ["attention"] + [k for k in variant_keys if k not in ("attention", key) and k in table]
        lines = list(table.groupby(line_keys, sort=False, dropna=False))  # tuple keys (a list groupby)
        others = list(dict.fromkeys(tuple(key[1:]) for key, _ in lines))
        for ax, (column, label) in zip(axes[0], panels):
            for i, (line_key, group) in enumerate(lines):
                line_label = ", ".join([str(line_key[0])]
                                       + [f"{k}={v}" for k, v in zip(line_keys[1:], line_key[1:])])
                group = group.assign(_x=pd.to_numeric(group[key], errors="coerce")).sort_values("_x")
                style = dict(styles[str(line_key[0])])  # the score function's colour and marker of every figure
                if len(line_keys) > 1:  # the other settings by line style: (colour, marker) stays the score function's
                    style["linestyle"] = ("-", "--", ":", "-.")[others.index(tuple(line_key[1:])) % 4]
                if column == "acc_mean":  # each line's points a little aside, so that the interval bars don't overlap
                    dodge = 2.0 ** ((i - (len(lines) - 1) / 2) * min(0.04, 0.3 / len(lines)))  # within ±11%
                    _accuracy_points(ax, group["_x"] * dodge, group, label=line_label, line=True, **style)
                else:
                    ax.plot(group["_x"], group[column], label=line_label, **style)
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 16, 32, ... rather than 2^4
            if column in ("train_tok_s", "peak_mem_mb"):
                ax.set_yscale("log")
            ax.set_xlabel(key)
            ax.set_ylabel(acc_label if column == "acc_mean" else label, fontsize=8)
            ax.set_title(_title("", fixed), fontsize=8)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        out[name] = fig
    if LOAD in table and "attention" in table:
        out["capacity.png"] = capacity_figure(with_head_dim(table, fixed), _title("", fixed, width=10_000),
                                              None if jobs is None else with_head_dim(jobs, fixed))
    return out


def with_disturbed_rates(table: pd.DataFrame, jobs: pd.DataFrame, variant_keys: list[str]) -> pd.DataFrame:
    """``table`` with ``train_tok_s_disturbed``: for a variant without a training rate (every run disturbed), the
    median over replicates of all its finished runs' ``train/tokens_per_sec`` (> 0), each replicate the median of
    its runs; NaN elsewhere. For the figures only: the report's tables leave disturbed rates out."""
    metric = "train/tokens_per_sec"
    done = jobs[jobs["status"] == STATUS_OK] if "status" in jobs else jobs
    if metric not in done or "train_tok_s" not in table or done.empty:
        return table
    done = done.assign(_rate=pd.to_numeric(done[metric], errors="coerce")).dropna(subset=["_rate"])
    done = done[done["_rate"] > 0]
    replicates = [k for k in REPLICATE_KEYS if k in done]
    keys = [k for k in variant_keys if k in done]
    rates = []
    for _, row in table.iterrows():
        runs = done
        for k in keys:
            runs = runs[runs[k].astype(str) == str(row[k])]
        if not pd.isna(row["train_tok_s"]) or runs.empty:
            rates.append(math.nan)
            continue
        per_replicate = runs.groupby(replicates, dropna=False)["_rate"].median() if replicates else runs["_rate"]
        rates.append(float(per_replicate.median()))
    return table.assign(train_tok_s_disturbed=rates)


def plot_all(table: pd.DataFrame, variant_keys: list[str], out: Path, fixed: dict[str, str] | None = None,
             baseline: str = "scaled_dot", notes: list[str] | None = None,
             jobs: pd.DataFrame | None = None) -> list[str]:
    """Write :func:`figures` as PNGs into ``out``; returns their file names (``notes``, ``jobs``: see
    :func:`figures`)."""
    written = []
    for name, fig in figures(table, variant_keys, fixed, baseline, notes, jobs).items():
        with atomic_target(out / name) as tmp:
            fig.savefig(tmp, dpi=120)
        written.append(name)
    return written


def build_report(jobs: pd.DataFrame, swept: list[str], source: str, out: Path, baseline: str = "scaled_dot",
                 fixed: dict[str, str] | None = None, attention_maps: bool = False,
                 margin: float = DEFAULT_MARGIN) -> str:
    """Write ``report.md``, ``report.csv`` (the per-variant table), ``jobs.csv`` and the plots into ``out``;
    return the Markdown.

    Args:
        fixed: the settings held fixed (:func:`read_runs`); stated in the report and in every plot title.
        attention_maps: also draw the attention maps of each finished run's best checkpoint, side by side
            across score functions (:func:`attnbench.viz.attention_maps.report_figures`).
        margin: the equivalence margin in points of accuracy (:func:`equivalence_text`); its table goes to
            ``equivalence.csv`` where the runs hold a paired comparison.
    """
    out.mkdir(parents=True, exist_ok=True)
    fixed = dict(fixed or {})
    variant_keys = [k for k in swept if k not in REPLICATE_KEYS]
    table = summarise(jobs, swept, baseline)
    counts = jobs["status"].value_counts().to_dict()
    n_stopped = int(table["n_stopped"].sum()) if "n_stopped" in table else 0
    n_resumed = int(table["n_inexact_resume"].sum()) if "n_inexact_resume" in table else 0
    n_repeats = int(table["n_repeats"].sum()) if "n_repeats" in table else 0
    convergence = convergence_text(jobs)
    lines = [
        f"# attnbench report: {source}",
        "",
        f"Jobs: {len(jobs)} — {counts.get(STATUS_OK, 0)} finished"
        + (f" ({n_stopped} of them stopped by trainer.max_time: unfinished)" if n_stopped else "")
        + (f" ({n_resumed} of them resumed mid-epoch: inexact, listed below)" if n_resumed else "")
        + (f" ({n_repeats} of them repeat a variant's seed: each seed counts once, as the mean of its runs' "
           "accuracy; `n_repeats` in report.csv)" if n_repeats else "")
        + f", {counts.get(STATUS_FAILED, 0)} failed, "
        f"{counts.get(STATUS_INCOMPLETE, 0)} incomplete (killed or still running), "
        f"{counts.get(STATUS_MISSING, 0)} not started. Swept: {', '.join(swept) or 'nothing'}.",
        "",
        f"Fixed: {headline(fixed)}.",
        "",
        *([convergence, ""] if convergence else []),
        *([f"Cross-validation: each variant's {jobs['data.fold'].nunique()} folds (data.fold) are replicates like "
           "seeds: the mean, interval and paired Δ run over (seed, fold) pairs. Folds share training rows, so the "
           "t interval is optimistic (Nadeau & Bengio 2003).", ""] if "data.fold" in swept else []),
        "Test accuracy over seeds: mean ± sample std, and the 95% Student-t confidence interval "
        f"({ONE_SEED!r} where one seed gives none). "
        f"Δ: the paired difference to `{baseline}` over the seeds both finished (same setting, same seed). "
        "Throughput (tokens/s, steps/s) is the median over seeds of the runs nothing disturbed (a CPU run whose "
        f"thread had less than {MIN_CPU_SHARE} of a core, `train/cpu_share` / `test/cpu_share`, is left out and "
        f"listed below); `× {baseline} (paired; pairs)` is the median over seeds of each run's rate divided by the "
        f"`{baseline}` run's of the same seed and setting measured on the same host (`train_host`, `test_host`: "
        "one machine in one boot; runs from before hosts were recorded have none and pair with each other), and "
        "in brackets how many such pairs there are (a machine that got faster or slower between sessions moves "
        "the two medians, not such pairs; a seed whose two runs ran on different machines has no pair); memory "
        "is the mean over seeds, on CPU the process's peak RSS.",
        "",
    ]
    if table.empty:
        lines += ["No job finished.", ""]
    else:
        f1, unrecorded = macro_f1_cells(jobs, table, variant_keys)
        lines += [markdown_table(table, variant_keys, baseline, f1), ""]
        if f1:
            lines += ["Test macro-F1 (mean over seeds) beside the accuracy where a test set is imbalanced (its largest "
                      "class above 1.2 / number of classes, from the runs' `test_largest_class_share` and "
                      "`num_classes`: accuracy alone flatters a classifier there) or its runs do not record their "
                      "class balance" + (f" ({unrecorded} of the rows shown: their runs record none)" if unrecorded
                                         else "") + ".", ""]
        control = control_text(jobs, swept)
        if control:
            lines += [control, ""]
        verdicts, verdict_table = equivalence_text(jobs, swept, baseline, margin)
        if verdicts:
            lines += [verdicts, ""]
            _write_csv(verdict_table, out / "equivalence.csv")
        elif (out / "equivalence.csv").is_file():  # an earlier report's verdicts are not this report's
            (out / "equivalence.csv").unlink()
        if LOAD in variant_keys and "attention" in variant_keys:
            lines += [f"## Capacity: test accuracy against memory load ({LOAD})", "",
                      "Mean over seeds [95% Student-t interval]. *Holds to* P: every load up to P has its interval's "
                      f"lower end >= {THRESHOLD}; *below from* Q: the smallest load whose upper end is < {THRESHOLD}; "
                      "the crossing lies between them (attnbench.analysis.capacity).", "",
                      render_capacity(with_head_dim(table, fixed))]
    problems = _jobs_table(jobs[jobs["status"] != STATUS_OK], swept, ["status", "last step", "error"], lambda r: [
        str(r["status"]), "–" if pd.isna(r.get("last_step")) else str(int(r["last_step"])),
        str(r["error"]).replace("|", "\\|") if isinstance(r.get("error"), str) else "–"])
    for title, intro, body in (
        ("Runs stopped by the wall-time cap (unfinished)",
         "`trainer.max_time` ended these runs before their step budget: their accuracy is not a final one "
         "and is left out of the table above. Instead: the measured seconds per training step and the time "
         "the whole budget would take at that rate (planned steps / measured steps per second; training "
         "steps only, validation and test not counted).", stopped_table(jobs, swept)),
        ("Runs left out of the throughput columns (disturbed)",
         f"The training or test thread of these runs ran on a CPU core for less than {MIN_CPU_SHARE:.0%} of "
         "the wall time of its measured steps (`train/cpu_share`, `test/cpu_share`): the process was paused "
         "or shared its core, so its wall-clock rates understate it. Their accuracy counts; their rates of "
         "that phase do not.", disturbed_table(jobs, swept)),
        ("Runs resumed mid-epoch (inexact)",
         "These runs were interrupted inside an epoch and resumed from a step checkpoint (`metrics.json`: "
         "`resume`, `exact: false`). The data loader cannot skip ahead, so the resumed epoch took its first "
         "batches again (replayed: seen twice) and never showed its last ones (unseen); from the next epoch "
         "on the batches are the uninterrupted run's. Their figures count in the tables above; they are not "
         "bit-identical to an uninterrupted run's. `n_inexact_resume` in report.csv counts them per variant.",
         resumed_table(jobs, swept)),
        ("Failed, incomplete or missing jobs", "", problems),
    ):
        if body:
            lines += [f"## {title}", "", *([intro, ""] if intro else []), body, ""]
    lines += ["## Settings", "", fixed_text(fixed), ""]
    notes: list[str] = []
    plots = (plot_all(with_disturbed_rates(table, jobs, variant_keys), variant_keys, out, fixed, baseline, notes, jobs)
             if not table.empty else [])
    if table.empty:
        notes.append("No figure is drawn: no job finished.")
    lines += [f"- {note}" for note in notes] + ([""] if notes else [])
    lines += [f"![{p}]({p})" for p in plots]
    if attention_maps and not table.empty:
        from attnbench.viz.attention_maps import report_figures

        figures, notes = report_figures(jobs, swept, out, fixed)
        if figures or notes:
            lines += ["", "## Attention maps", "",
                      "Attention weights of every layer and head (columns) on the same test sentences, one row per "
                      "score function (its lowest finished seed, best checkpoint); rows of a heatmap are queries, "
                      "columns keys, colour 0 (dark) to 1 (bright).", ""]
            lines += [f"- {note}" for note in notes]
            lines += [f"![{f}]({f})" for f in figures]
    markdown = "\n".join(lines).rstrip() + "\n"
    write_text_atomically(out / "report.md", markdown)
    keep = [c for c in jobs.columns if not c.startswith("_")]
    _write_csv(jobs[keep], out / "jobs.csv")
    _write_csv(table, out / "report.csv")
    return markdown


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    """``table`` as CSV at ``path``, written atomically (a temporary file beside it, then renamed)."""
    with atomic_target(path) as tmp:
        table.to_csv(tmp, index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Markdown report (mean ± std, 95% CI, paired Δ, cost, plots, attention maps) of any attnbench "
                    "runs: a multirun dir, a folder of single runs, run dirs, or a W&B project/group.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("runs", nargs="*", type=Path,
                        help="multirun dirs, folders of runs (outputs/train/runs) or run dirs")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: the one folder given, else ./report)")
    parser.add_argument("--baseline", default="scaled_dot", help="score function the paired differences refer to")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                        help="equivalence margin in points of test accuracy (1.0 = 0.01): the TOST bounds of the "
                             "power-and-equivalence table")
    parser.add_argument("--wandb-project", default=None, help="read runs from W&B instead (entity/project; online)")
    parser.add_argument("--wandb-group", default=None, help="with --wandb-project: only this group")
    parser.add_argument("--no-attention-maps", action="store_true",
                        help="skip the attention-map figures (they load each run's best checkpoint)")
    parser.add_argument("--wandb", action="store_true",
                        help="also log the tables and plots into a summary run (job_type report) of the runs' W&B "
                             "project and group (offline without credentials), and write wandb_workspace.json")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.margin) and args.margin > 0):
        parser.error(f"--margin {args.margin:g}: give a positive number of accuracy points (e.g. 1.0)")
    if args.wandb_project:
        try:
            jobs, swept, fixed = read_wandb(args.wandb_project, args.wandb_group)
        except WandbUnavailable as err:
            print(f"Error: {err}", file=sys.stderr)
            return 1
        source = f"W&B {args.wandb_project}" + (f" group {args.wandb_group}" if args.wandb_group else "")
        out = args.out or Path("report")
    elif args.runs:
        try:
            jobs, swept, fixed = read_runs(args.runs)
        except FileNotFoundError as err:
            print(f"Error: {err}", file=sys.stderr)
            return 1
        source = ", ".join(str(p) for p in args.runs)
        out = args.out or (args.runs[0] if len(args.runs) == 1 and not _is_run_dir(args.runs[0]) else Path("report"))
    else:
        parser.error("give run dirs, a folder of runs or a multirun dir, or --wandb-project")
    maps = not args.no_attention_maps and not args.wandb_project
    markdown = build_report(jobs, swept, source, out, args.baseline, fixed, attention_maps=maps, margin=args.margin)
    print(markdown)
    print(f"Wrote {out / 'report.md'}, {out / 'report.csv'} and {out / 'jobs.csv'}", file=sys.stderr)
    if args.wandb:
        from attnbench.analysis.wandb_report import log_summary_run

        try:
            where = log_summary_run(out, jobs, swept, fixed, source, project=args.wandb_project, group=args.wandb_group)
            print(f"W&B summary run: {where}", file=sys.stderr)
        except Exception as err:  # noqa: BLE001 - the report on disk stands without W&B
            print(f"Warning: W&B summary run not written: {type(err).__name__}: {err}", file=sys.stderr)
    return 0 if (jobs["status"] == STATUS_OK).any() else 1


if __name__ == "__main__":
    raise SystemExit(main())
