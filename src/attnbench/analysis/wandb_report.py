"""``attnbench report --wandb``: the report's tables and plots in a W&B summary run of the runs' group, and
the specification of a saved workspace for that group.

The summary run has ``job_type="report"`` and joins the runs' project and group (from their configs:
``logger.wandb.project``/``entity`` and the group each run joined, ``wandb_group`` in ``metrics.json``), so
the group's dashboard shows the comparison next to the runs. It logs ``report/variants`` (``report.csv``: one
row per variant, as a ``wandb.Table``), ``report/jobs`` (``jobs.csv``'s status and headline metrics), every
plot of the report as an image (``report/<name>``) and the attention-map figures (``attention_maps/<name>``).
It runs online when credentials exist, offline otherwise (:func:`attnbench.run.loggers.resolve_wandb_mode`);
an offline run is uploaded with ``wandb sync <run dir>``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from attnbench.paths import write_text_atomically

WORKSPACE_FILE = "wandb_workspace.json"
JOB_COLUMNS = ("job", "status", "attention", "seed", "test/acc", "val/acc_best", "train/tokens_per_sec",
               "test/tokens_per_sec", "perf/peak_mem_bytes", "error")


def _one(jobs: pd.DataFrame, column: str) -> str | None:
    """The one value a column holds over the jobs (ignoring missing ones), else ``None``."""
    if column not in jobs:
        return None
    values = {str(v) for v in jobs[column].dropna() if str(v) not in ("", "null", "None", "nan")}
    return values.pop() if len(values) == 1 else None


def summary_target(jobs: pd.DataFrame, project: str | None = None, group: str | None = None) -> dict[str, Any]:
    """Where the summary run goes: ``{"project", "entity", "group", "mode"}``, from the arguments, else the
    one value the runs share (project ``attnbench`` and no group when they share none)."""
    from attnbench.run.loggers import resolve_wandb_mode

    entity = None
    if project and "/" in project:
        entity, project = project.split("/", 1)
    mode = _one(jobs, "logger.wandb.mode") or "auto"
    return {
        "project": project or _one(jobs, "logger.wandb.project") or "attnbench",
        "entity": entity or _one(jobs, "logger.wandb.entity"),
        "group": group or _one(jobs, "wandb_group") or _one(jobs, "logger.wandb.group"),
        "mode": resolve_wandb_mode(mode if mode in ("auto", "online", "offline", "disabled") else "auto"),
    }


def _clean(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy W&B tables accept: NaN as ``None``, every column of one JSON type."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v))
                                              else str(v))
    return frame.astype(object).where(frame.notna(), None)


def workspace_spec(target: dict[str, Any], swept: list[str], fixed: dict[str, str], n_layers: int) -> dict[str, Any]:
    """A saved-workspace specification for the runs' group (panels a comparison needs), as plain JSON data.

    Panels: test accuracy vs training tokens/s, one colour per score function; test accuracy per seed, one bar
    group per score function; and per layer the attention diagnostics (normalised entropy, saturated rows,
    largest score) against the training step. Metric names are those train.py logs; ``config.<key>`` names a
    run-config key. Creating it on the server needs credentials and the ``wandb-workspaces`` package
    (``attnbench report --wandb`` only writes this file).
    """
    runs = {"project": target["project"], "entity": target["entity"],
            "filters": {"group": target["group"], "job_type": {"$ne": "report"}}}
    diag = [f"diag/layer{i}/{stat}" for stat in ("entropy_norm", "saturated_frac", "max_score") for i in range(n_layers)]
    return {
        "name": f"attnbench comparison: {target['group'] or target['project']}",
        "runset": runs,
        "swept": swept,
        "fixed": fixed,
        "sections": [
            {"name": "accuracy and cost", "panels": [
                {"type": "scatter", "title": "test accuracy vs training tokens/s per score function",
                 "x": "train/tokens_per_sec", "y": "test/acc", "color": "config.attention.name"},
                {"type": "bar", "title": "test accuracy per seed", "metric": "test/acc",
                 "group_by": "config.attention.name", "x": "config.seed"},
                {"type": "table", "title": "report/variants", "key": "report/variants", "run": "job_type=report"},
            ]},
            {"name": "attention diagnostics vs step", "panels": [
                {"type": "line", "title": f"{metric} vs step", "x": "trainer/global_step", "y": [metric],
                 "group_by": "config.attention.name"} for metric in diag
            ]},
        ],
    }


def log_summary_run(out: Path, jobs: pd.DataFrame, swept: list[str], fixed: dict[str, str], source: str,
                    project: str | None = None, group: str | None = None) -> Path:
    """Log ``out``'s report (``report.csv``, ``jobs.csv``, PNGs) into a summary run; write ``wandb_workspace.json``.

    Returns:
        The summary run's local dir (``<out>/wandb/<offline-|>run-...``), where ``wandb sync`` uploads it from.

    Raises:
        whatever ``wandb.init`` raises (the caller prints one warning: the report on disk stands without W&B).
    """
    import wandb

    target = summary_target(jobs, project, group)
    variants = pd.read_csv(out / "report.csv")
    job_table = jobs[[c for c in JOB_COLUMNS if c in jobs]]
    layers = sorted({int(c.split("/")[1][5:]) for c in jobs.columns
                     if c.startswith("diag/layer") and c.split("/")[1][5:].isdigit()})
    spec = workspace_spec(target, swept, fixed, (max(layers) + 1) if layers else 0)
    write_text_atomically(out / WORKSPACE_FILE, json.dumps(spec, indent=2))
    run = wandb.init(
        project=target["project"], entity=target["entity"], group=target["group"], job_type="report",
        name=f"report-{target['group'] or Path(source.split(',')[0]).name}", dir=str(out), mode=target["mode"],
        config={"source": source, "swept": swept, "fixed": fixed}, reinit="finish_previous",
        settings=wandb.Settings(silent=True, console="off"),
    )
    try:
        logged: dict[str, Any] = {
            "report/variants": wandb.Table(dataframe=_clean(variants)),
            "report/jobs": wandb.Table(dataframe=_clean(job_table)),
        }
        for png in sorted(out.glob("*.png")):
            prefix = "attention_maps" if png.name.startswith("attention_maps") else "report"
            logged[f"{prefix}/{png.stem}"] = wandb.Image(str(png), caption=png.name)
        run.log(logged)
        run.summary["report/jobs_finished"] = int((jobs["status"] == "finished").sum())
        run.summary["report/jobs_total"] = len(jobs)
        where = Path(run.dir).parent
    finally:
        run.finish()
    return where
