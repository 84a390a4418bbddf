#!/usr/bin/env python
"""Turn a Hydra multirun of attnbench jobs into a Markdown report with error bars and plots.

    python scripts/report.py outputs/compare_cpu/multiruns/2026-11-29_12-00-00
    python scripts/report.py DIR --out report/ --baseline scaled_dot
    python scripts/report.py --wandb-project me/attnbench --wandb-group train-2026-11-29_12-00-00 --out report/

Reads every job of the sweep (``<dir>/<num>_<run_name>/``): its overrides
(``.hydra/overrides.yaml``), ``metrics.json`` and ``csv/metrics.csv``. The
jobs the sweep asked for come from ``<dir>/multirun.yaml`` (the sweeper's
params and the command line), so a job that failed (no ``metrics.json``) or
never started is listed in the report, never silently dropped.

A *variant* is one combination of the swept settings other than ``seed``
(e.g. ``data=sst2, attention=additive``). Per variant the report gives the
number of seeds, test accuracy mean ± sample std and its 95% confidence
interval (Student t over seeds), the paired difference to the baseline score
function (same setting and seed) with its 95% interval, train and inference
tokens/s, training steps/s, peak memory and parameters, and, when the
attention diagnostics ran, the final attention entropy, saturation and
largest score. Plots (PNG, next to ``report.md``):

- ``pareto.png``: test accuracy vs training tokens/s per setting, with the
  Pareto front (no variant both faster and more accurate);
- ``head_dim.png``: test accuracy and saturation vs ``model.head_dim`` (when swept);
- ``seq_len.png``: training tokens/s and peak memory vs ``data.max_length`` (when swept).

Writes ``report.md``, ``jobs.csv`` (one row per job, its status and metrics)
and the plots into ``--out`` (default: the multirun dir), and prints the
Markdown. Exit status 0 when at least one job finished, 1 otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

# The statistics (mean_ci, summarise) and the status names live in the package, where mutation testing reaches them.
from attnbench.report_stats import (  # noqa: F401  (re-exported: report.mean_ci, report.STATUS_OK, ...)
    ACC,
    STATUS_FAILED,
    STATUS_INCOMPLETE,
    STATUS_MISSING,
    STATUS_OK,
    mean_ci,
    summarise,
)

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
            parsed[key] = [str(v) for v in override.sweep_string_iterator()]
        else:
            parsed[key] = [override.get_value_element_as_str()]
    return parsed


def expected_jobs(multirun_dir: Path) -> tuple[list[dict[str, str]], list[str]]:
    """The jobs a sweep asked for, from ``multirun.yaml``: (one ``key -> value`` dict per job, swept keys).

    Follows Hydra's basic sweeper: the sweeper's ``params`` first, command-line
    overrides replace a param of the same key; jobs are the Cartesian product.
    Returns ``([], [])`` when ``multirun.yaml`` is absent.
    """
    path = multirun_dir / "multirun.yaml"
    if not path.is_file():
        return [], []
    cfg = yaml.safe_load(path.read_text()) or {}
    hydra_cfg = cfg.get("hydra", {})
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
    if not log.is_file():
        return None
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "][ERROR]" in line or line.startswith(("Traceback", "Error"))]
    if not errors:
        return None
    return errors[-1].split("][ERROR] ", 1)[-1][:200]


def _last_csv_step(job_dir: Path) -> int | None:
    path = job_dir / "csv" / "metrics.csv"
    if not path.is_file():
        return None
    try:
        steps = pd.read_csv(path, usecols=["step"])["step"].dropna()
    except (ValueError, pd.errors.EmptyDataError):
        return None
    return int(steps.max()) if len(steps) else None


def read_job(job_dir: Path) -> dict[str, Any]:
    """One job's record: ``job``, ``status``, its overrides (``key -> value``), and its metrics.

    ``status`` is ``finished`` when ``metrics.json`` exists; otherwise
    ``failed`` when ``train.log`` has an ERROR line (in ``error``) and
    ``incomplete`` when it has none (killed, or still running); both carry
    ``last_step``, the last step in the CSV log.
    """
    record: dict[str, Any] = {"job": job_dir.name, "dir": str(job_dir)}
    overrides_file = job_dir / ".hydra" / "overrides.yaml"
    if overrides_file.is_file():
        lines = yaml.safe_load(overrides_file.read_text()) or []
        record.update({k: v[0] for k, v in _parse_overrides(lines).items()})
    config_file = job_dir / ".hydra" / "config.yaml"
    if config_file.is_file():
        cfg = yaml.safe_load(config_file.read_text()) or {}
        record["_batch_size"] = cfg.get("data", {}).get("batch_size")
    metrics_file = job_dir / "metrics.json"
    if metrics_file.is_file():
        record.update(json.loads(metrics_file.read_text()))
        record["status"] = STATUS_OK
    else:
        record["error"] = _last_error(job_dir)
        record["status"] = STATUS_FAILED if record["error"] else STATUS_INCOMPLETE
        record["last_step"] = _last_csv_step(job_dir)
    return record


def read_multirun(multirun_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """All jobs of a multirun, finished, failed and missing, as a DataFrame; and the swept keys.

    Raises:
        FileNotFoundError: ``multirun_dir`` holds neither ``multirun.yaml`` nor job dirs.
    """
    job_dirs = sorted(
        (p for p in multirun_dir.iterdir() if p.is_dir() and (p / ".hydra").is_dir()),
        key=lambda p: (int(p.name.split("_", 1)[0]) if p.name.split("_", 1)[0].isdigit() else 1 << 30, p.name),
    ) if multirun_dir.is_dir() else []
    expected, swept = expected_jobs(multirun_dir)
    if not job_dirs and not expected:
        raise FileNotFoundError(
            f"{multirun_dir} is not a Hydra multirun dir (no multirun.yaml, no job dirs with .hydra/); "
            "pass the folder printed by `python train.py -m ...` (outputs/<task>/multiruns/<date>)."
        )
    records = [read_job(p) for p in job_dirs]
    if not swept:  # no multirun.yaml: the keys that differ between jobs
        keys = {k for r in records for k in r if "=" not in k and not k.startswith(("_", "job", "dir"))}
        swept = sorted(k for k in keys if "/" not in k and len({str(r.get(k)) for r in records}) > 1)
    seen = {tuple(str(r.get(k)) for k in swept) for r in records}
    for job in expected:
        combo = tuple(job[k] for k in swept)
        if combo not in seen:
            seen.add(combo)
            records.append({**job, "job": "(not started)", "status": STATUS_MISSING})
    return pd.DataFrame.from_records(records), swept


def read_wandb(project: str, group: str | None) -> tuple[pd.DataFrame, list[str]]:
    """Runs of a W&B project (optionally one group) through the public API, as :func:`read_job` records.

    Needs network access and credentials. A run whose state is not
    ``finished`` counts as failed. Swept keys: the run-config keys
    ``attention.name``, ``data.name``, ``seed``, ``model.head_dim`` and
    ``data.max_length`` that differ between runs.
    """
    import wandb

    filters = {"group": group} if group else {}
    records = []
    for run in wandb.Api().runs(project, filters=filters):
        config = run.config or {}
        record: dict[str, Any] = {
            "job": run.name, "dir": run.url, "attention": config.get("attention", {}).get("name"),
            "data": config.get("data", {}).get("name"), "seed": str(config.get("seed")),
            "model.head_dim": str(config.get("model", {}).get("head_dim")),
            "data.max_length": str(config.get("data", {}).get("max_length")),
            "_batch_size": config.get("data", {}).get("batch_size"),
        }
        summary = {k: v for k, v in dict(run.summary).items() if isinstance(v, (int, float))}
        record.update(summary)
        record["status"] = STATUS_OK if run.state == "finished" and ACC in summary else STATUS_FAILED
        if record["status"] == STATUS_FAILED:
            record["error"] = f"W&B state {run.state}"
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    swept = [k for k in ("data", "data.max_length", "model.head_dim", "attention", "seed")
             if k in frame and frame[k].nunique() > 1]
    return frame, swept


# --------------------------------------------------------------------------- Markdown and plots


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}"
    return str(value)


def markdown_table(table: pd.DataFrame, variant_keys: list[str], baseline: str) -> str:
    """The per-variant table as Markdown (accuracy as mean ± std [95% CI])."""
    has_diag = "entropy_norm" in table and table["entropy_norm"].notna().any()
    headers = [*variant_keys, "seeds", "test acc (mean ± std)", "95% CI", f"Δ vs {baseline} (paired, 95% CI)",
               "train tok/s", "train steps/s", "test tok/s", "peak mem (MiB)", "params"]
    if has_diag:
        headers += ["entropy (norm.)", "saturated rows", "max \\|score\\|"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for _, r in table.iterrows():
        ci = (f"[{r.acc_mean - r.acc_ci:.4f}, {r.acc_mean + r.acc_ci:.4f}]" if not math.isnan(r.acc_ci) else "–")
        if r.get("attention") == baseline or math.isnan(r.diff_mean):
            diff = "–"
        elif math.isnan(r.diff_ci):
            diff = f"{r.diff_mean:+.4f} (1 seed)"
        else:
            diff = f"{r.diff_mean:+.4f} ± {r.diff_ci:.4f}"
        cells = [str(r[k]) for k in variant_keys]
        cells += [str(int(r.n)), f"{r.acc_mean:.4f} ± {_fmt(r.acc_std)}", ci, diff, _fmt(r.get("train_tok_s"), 0),
                  _fmt(r.get("train_steps_s"), 2), _fmt(r.get("test_tok_s"), 0), _fmt(r.get("peak_mem_mb"), 0),
                  _fmt(r.get("params"), 0)]
        if has_diag:
            cells += [_fmt(r.get("entropy_norm"), 3), _fmt(r.get("saturated_frac"), 3), _fmt(r.get("max_score"), 1)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both speed (x) and accuracy (y), sorted by x."""
    front = [p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points)]
    return sorted(front)


def plot_all(table: pd.DataFrame, variant_keys: list[str], out: Path) -> list[str]:
    """Write the plots that the swept keys allow; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    setting_keys = [k for k in variant_keys if k != "attention"]
    settings = table.groupby(setting_keys, sort=False) if setting_keys else [((), table)]
    settings = list(settings)
    if "train_tok_s" in table and table["train_tok_s"].notna().any() and "attention" in table:
        fig, axes = plt.subplots(1, len(settings), figsize=(5.5 * len(settings), 4.2), squeeze=False)
        for ax, (key, group) in zip(axes[0], settings):
            group = group.dropna(subset=["train_tok_s", "acc_mean"])
            yerr = group["acc_ci"].fillna(0.0)
            ax.errorbar(group["train_tok_s"], group["acc_mean"], yerr=yerr, fmt="o", capsize=3)
            for _, r in group.iterrows():
                ax.annotate(str(r["attention"]), (r["train_tok_s"], r["acc_mean"]), textcoords="offset points",
                            xytext=(4, 4), fontsize=8)
            front = _pareto(list(zip(group["train_tok_s"], group["acc_mean"])))
            if front:
                ax.plot(*zip(*front), "--", color="grey", lw=1, label="Pareto front")
            key = key if isinstance(key, tuple) else (key,)
            ax.set_title(", ".join(f"{k}={v}" for k, v in zip(setting_keys, key)) or "all jobs")
            ax.set_xlabel("training tokens/s")
            ax.set_ylabel("test accuracy (mean, 95% CI)")
            ax.legend(loc="lower left", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "pareto.png", dpi=120)
        plt.close(fig)
        written.append("pareto.png")
    for key, name, panels in (
        ("model.head_dim", "head_dim.png", (("acc_mean", "test accuracy"), ("saturated_frac", "saturated rows"))),
        ("data.max_length", "seq_len.png", (("train_tok_s", "training tokens/s"), ("peak_mem_mb", "peak memory (MiB)"))),
    ):
        if key not in table or "attention" not in table:
            continue
        panels = [p for p in panels if p[0] in table and table[p[0]].notna().any()]
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
        for ax, (column, label) in zip(axes[0], panels):
            for attention, group in table.groupby("attention", sort=False):
                group = group.assign(_x=pd.to_numeric(group[key], errors="coerce")).sort_values("_x")
                if column == "acc_mean":
                    ax.errorbar(group["_x"], group[column], yerr=group["acc_ci"].fillna(0.0), marker="o",
                                capsize=3, label=str(attention))
                else:
                    ax.plot(group["_x"], group[column], marker="o", label=str(attention))
            ax.set_xscale("log", base=2)
            if column in ("train_tok_s", "peak_mem_mb"):
                ax.set_yscale("log")
            ax.set_xlabel(key)
            ax.set_ylabel(label)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(name)
    return written


def build_report(jobs: pd.DataFrame, swept: list[str], source: str, out: Path, baseline: str = "scaled_dot") -> str:
    """Write ``report.md``, ``jobs.csv`` and the plots into ``out``; return the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    variant_keys = [k for k in swept if k != "seed"]
    table = summarise(jobs, swept, baseline)
    counts = jobs["status"].value_counts().to_dict()
    lines = [
        f"# attnbench report: {source}",
        "",
        f"Jobs: {len(jobs)} — {counts.get(STATUS_OK, 0)} finished, {counts.get(STATUS_FAILED, 0)} failed, "
        f"{counts.get(STATUS_INCOMPLETE, 0)} incomplete (killed or still running), "
        f"{counts.get(STATUS_MISSING, 0)} not started. Swept: {', '.join(swept) or 'nothing'}.",
        "",
        "Test accuracy over seeds: mean ± sample std, and the 95% Student-t confidence interval. "
        f"Δ: the paired difference to `{baseline}` over the seeds both finished (same setting, same seed). "
        "Throughput and memory are means over seeds; peak memory on CPU is the process's peak RSS.",
        "",
    ]
    if table.empty:
        lines += ["No job finished.", ""]
    else:
        lines += [markdown_table(table, variant_keys, baseline), ""]
    problems = jobs[jobs["status"] != STATUS_OK]
    if len(problems):
        lines += ["## Failed, incomplete or missing jobs", "", "| job | " + " | ".join(swept) + " | status | last step | error |",
                  "|" + "---|" * (len(swept) + 4)]
        for _, r in problems.iterrows():
            cells = [str(r.get("job"))] + [str(r.get(k)) for k in swept]
            step = r.get("last_step")
            step = "–" if step is None or (isinstance(step, float) and math.isnan(step)) else str(int(step))
            error = r.get("error")
            error = str(error).replace("|", "\\|") if isinstance(error, str) else "–"
            cells += [str(r["status"]), step, error]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    plots = plot_all(table, variant_keys, out) if not table.empty else []
    lines += [f"![{p}]({p})" for p in plots]
    markdown = "\n".join(lines).rstrip() + "\n"
    (out / "report.md").write_text(markdown)
    keep = [c for c in jobs.columns if not c.startswith("_")]
    jobs[keep].to_csv(out / "jobs.csv", index=False)
    return markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Markdown report (mean ± std, 95% CI, paired Δ, cost, plots) of an attnbench multirun.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("multirun_dir", nargs="?", type=Path, help="a Hydra multirun dir (outputs/<task>/multiruns/<date>)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: the multirun dir)")
    parser.add_argument("--baseline", default="scaled_dot", help="score function the paired differences refer to")
    parser.add_argument("--wandb-project", default=None, help="read runs from W&B instead (entity/project; online)")
    parser.add_argument("--wandb-group", default=None, help="with --wandb-project: only this group")
    args = parser.parse_args(argv)
    if args.wandb_project:
        jobs, swept = read_wandb(args.wandb_project, args.wandb_group)
        source = f"W&B {args.wandb_project}" + (f" group {args.wandb_group}" if args.wandb_group else "")
        out = args.out or Path("report")
    elif args.multirun_dir is not None:
        try:
            jobs, swept = read_multirun(args.multirun_dir)
        except FileNotFoundError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        source = str(args.multirun_dir)
        out = args.out or args.multirun_dir
    else:
        parser.error("give a multirun dir, or --wandb-project")
    markdown = build_report(jobs, swept, source, out, args.baseline)
    print(markdown)
    print(f"Wrote {out / 'report.md'} and {out / 'jobs.csv'}", file=sys.stderr)
    return 0 if (jobs["status"] == STATUS_OK).any() else 1


if __name__ == "__main__":
    raise SystemExit(main())
