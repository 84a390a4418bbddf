#!/usr/bin/env python
"""Regenerate the README/docs tables that come from result files, so their numbers cannot drift.

A generated table sits between two markers in any ``*.md`` file of the repository root or ``docs/``::

    <!-- generated: docs/results/cpu/attention_cost.json -->
    | ... the table ... |
    <!-- end generated -->

The marker names the source file (relative to the repository root); :data:`RENDERERS` maps it to the function
that renders the table from it (derived columns, e.g. ratios to a baseline, are computed here, never typed).
A source named ``config:<table>`` (:data:`CONFIG_RENDERERS`: ``config:groups``, ``config:defaults``,
``config:data-defaults``, ``config:model-presets``) is rendered from the config instead: ``conf/train.yaml``
composed with Hydra's compose API and its structured schema, the schema classes' own defaults, and, for the
model presets, the parameters of each built model; so the docs' defaults tables follow the code.

    attnbench tables           # rewrite every generated table in place
    attnbench tables --check   # exit 1 and print a diff where a table differs from its source

Sources named ``results:<table>`` are rendered from several published files under ``--root``: ``results:answer``
(the README's answer, :mod:`attnbench.analysis.answer`; ``results:answer-docs``: the same with links from docs/),
``results:lr-answers`` (the shared-lr and tuned-lr answers side by side), ``results:tuned-lr`` (the learning rate
each score function was tuned to), ``results:literature`` (:data:`LITERATURE` beside attnbench's measurements); a
stage's ``<stage>_jobs.csv`` of ``compare`` or ``compare_tuned`` renders its power-and-equivalence table, and
``d_a_jobs.csv`` the d_a table (:func:`render_d_a`). A stage
not published yet renders as a sentence saying so, never as numbers.

``--check`` (run by tests/test_readme_tables.py and CI) names every stale block, so a hand-edited number (or an
edited source without a re-run) fails. On a page with generated tables, a four-decimal number in the prose (a quoted accuracy,
paired Δ or interval end) must also appear in one of its generated tables (:func:`unsourced_prose_numbers`). Tables whose numbers come from runs whose result files are not in the repository are
listed in :data:`NOT_GENERATED` with the reason; they are not marked.

Sources are JSON (a renderer gets the parsed object) or CSV (a renderer gets the rows, a list of
``column -> text`` dicts). The experiments' tables come from ``attnbench report``'s ``report.csv`` (one row per
variant: the variant keys, ``n``, ``acc_mean``/``acc_std``/``acc_ci``, ``diff_mean``/``diff_ci``/``diff_n``,
``train_tok_s``/``test_tok_s``/``train_steps_s``, ``peak_mem_mb``, ``params``, the diagnostics and, for runs
``trainer.max_time`` stopped, ``n_stopped``/``steps_done``/``steps_planned``/``sec_per_step``/``extrapolated_sec``),
which ``attnbench reproduce`` copies to ``docs/results/<device>/<stage>.csv``. The renderers of the stages
``compare``, ``head_dim_sweep``, ``long_context`` and ``capacity`` are registered for
``docs/results/{cpu,gpu}/<stage>.csv`` (:data:`STAGE_RENDERERS`). To publish a stage's table once its CSV exists (after the one command ran):

1. commit ``docs/results/<device>/<stage>.csv`` (what ``attnbench reproduce`` wrote);
2. put the two markers where the table belongs (README.md or docs/results.md), e.g.
   ``<!-- generated: docs/results/cpu/compare.csv -->`` and ``<!-- end generated -->`` on the next line;
3. run ``attnbench tables`` (fills the table in) and drop the stage's entry from
   :data:`NOT_GENERATED`.

``--check`` then holds the table to its CSV; a CSV that exists with a renderer but no marker fails it, so a
committed result is never left unshown.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import difflib
import functools
import io
import json
import math
import re
import sys
from pathlib import Path
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, Callable

from attnbench.experiments.registry import BASELINE
from attnbench.paths import write_text_atomically

#: the repository whose pages are regenerated (``--root``): the current directory unless given
REPO_ROOT = Path(".")

MARKER = re.compile(r"<!-- generated: (?P<source>[^ ]+) -->\n(?P<body>.*?)<!-- end generated -->", re.S)

#: tables with measured numbers that are NOT generated, and why (their result files are not in the repository)
NOT_GENERATED = {
    "README Cost: B=1 additive naive/fast/compiled table": "not generated: bench_attention.py's JSON output of that "
    "run is not in the repository (the table has no derived column to drift)",
    "README Cost: tokens/s random vs length_grouped (MFU)": "not generated: attnbench bench train's output of that "
    "run is not in the repository",
}


def md_table(headers: list[str], rows: Iterable[Iterable[str]]) -> str:
    """A Markdown table of ``headers`` and ``rows`` (cells as text), without a trailing newline."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def _sign(value: float, digits: int = 4) -> str:
    return ("+" if value > 0 else "−" if value < 0 else "±") + f"{abs(value):.{digits}f}"


def render_batching_accuracy(data: dict) -> str:
    """Test accuracy of the two batching modes per seed, the paired difference (length_grouped − random), and its
    mean with the 95% Student-t interval over the seeds (scipy, as the report computes it); a last row gives the
    same mean and interval for the best validation accuracy (``val/acc_best``)."""
    from attnbench.analysis.stats import mean_ci

    def paired(metric: str) -> tuple[dict, list[int], str]:
        acc = {(r["batching"], r["seed"]): r[metric] for r in data["runs"]}
        seeds = sorted({seed for _, seed in acc})
        mean, _, half, n = mean_ci(acc["length_grouped", s] - acc["random", s] for s in seeds)
        return acc, seeds, (f"{sum(acc['random', s] for s in seeds) / n:.4f} | "
                            f"{sum(acc['length_grouped', s] for s in seeds) / n:.4f} | {_sign(mean)} "
                            f"[{_sign(mean - half)}, {_sign(mean + half)}]")

    acc, seeds, test_mean = paired("test/acc")
    lines = ["| seed | `random` | `length_grouped` | difference |", "|---|---|---|---|"]
    for seed in seeds:
        lines.append(f"| {seed} | {acc['random', seed]:.4f} | {acc['length_grouped', seed]:.4f} | "
                     f"{_sign(acc['length_grouped', seed] - acc['random', seed])} |")
    lines.append(f"| mean (95% t interval, n = {len(seeds)}) | {test_mean} |")
    lines.append(f"| `val/acc_best`: mean (95% t interval) | {paired('val/acc_best')[2]} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- report.csv of the experiments

#: report.csv columns that are figures, not variant keys (attnbench report, attnbench.analysis.stats.summarise)
FIGURE_COLUMNS = frozenset({
    "n", "acc_mean", "acc_std", "acc_ci", "diff_mean", "diff_ci", "diff_n", "train_tok_s", "test_tok_s",
    "train_steps_s", "peak_mem_mb", "params", "entropy_norm", "saturated_frac", "max_score", "sec_per_step",
    "n_stopped", "steps_done", "steps_planned", "extrapolated_sec", "n_disturbed", "n_inexact_resume",
    "train_tok_s_ratio", "test_tok_s_ratio", "train_steps_s_ratio", "n_repeats",
    "train_tok_s_ratio_n", "test_tok_s_ratio_n", "train_steps_s_ratio_n",
})

def attention_order(names: Iterable[str]) -> list[str]:
    """The order score functions are listed in: the baseline first, then by name (every table lists whichever
    score functions its source holds)."""
    return sorted(set(names), key=lambda name: (name != BASELINE, name))


def _num(value: str | None) -> float:
    """A CSV cell as a float; NaN for an empty cell."""
    return float(value) if value not in (None, "") else math.nan


def _by_setting(rows: list[dict[str, str]], key: str | None) -> dict[str, dict[str, dict[str, str]]]:
    """``setting value -> attention -> row`` of a report.csv, settings in numeric (else first-seen) order and score
    functions in :func:`attention_order`.

    Args:
        key: the setting column the table is organised by (``data``, ``model.head_dim``, ``data.max_length``), or
            ``None`` for a table of score functions alone.

    Raises:
        ValueError: a column the report.csv must have is missing, two rows share the setting and score
            function (another setting varies too: the table would hide it), or the report's paired columns refer
            to a baseline other than :data:`BASELINE` (its row's paired Δ is not 0 or its paired multiple not 1,
            or a setting without its row has paired values).
    """
    if not rows:
        raise ValueError("report.csv has no rows")
    for column in ("attention", "n", "acc_mean", *([key] if key else [])):
        if column not in rows[0]:
            raise ValueError(f"report.csv has no {column!r} column (columns: {', '.join(rows[0])})")
    table: dict[str, dict[str, dict[str, str]]] = {}
    for row in rows:
        setting = row[key] if key else ""
        if row["attention"] in table.setdefault(setting, {}):
            others = [c for c in row if c not in FIGURE_COLUMNS and c not in (key, "attention")]
            raise ValueError(f"two rows for {key}={setting}, attention={row['attention']}: another setting varies "
                             f"({', '.join(others) or 'none named'}); render one report per setting")
        table[setting][row["attention"]] = row
        if row["attention"] == BASELINE:  # paired with itself: Δ exactly 0 and multiples exactly 1, or no pair
            off = [c for c, one in (("diff_mean", 0.0), ("train_tok_s_ratio", 1.0), ("test_tok_s_ratio", 1.0))
                   if not math.isnan(_num(row.get(c))) and _num(row.get(c)) != one]
            if off:
                raise ValueError(f"report.csv's {BASELINE} row ({key}={setting}) has {', '.join(off)} = "
                                 f"{', '.join(row[c] for c in off)}: its paired columns refer to another baseline; "
                                 f"these tables say 'vs {BASELINE}': write the report with --baseline {BASELINE}")

    paired = ("diff_mean", "train_tok_s_ratio", "test_tok_s_ratio")
    for setting, by_attention in table.items():  # no baseline row: a report paired to scaled_dot pairs nothing here
        if BASELINE not in by_attention:
            off = sorted({f"{a} {c}" for a, row in by_attention.items() for c in paired
                          if not math.isnan(_num(row.get(c)))})
            if off:
                raise ValueError(f"report.csv has no {BASELINE} row for {key}={setting} but paired columns "
                                 f"({', '.join(off)}): they refer to another baseline; these tables say "
                                 f"'vs {BASELINE}': write the report with --baseline {BASELINE}")

    def setting_order(value: str) -> tuple:
        try:
            return (0, float(value), "")
        except ValueError:
            return (1, 0.0, "")

    ordered = sorted(table, key=setting_order) if all(setting_order(v)[0] == 0 for v in table) else list(table)
    return {s: {name: table[s][name] for name in attention_order(table[s])} for s in ordered}


def _acc(row: dict[str, str]) -> tuple[str, str]:
    """(test accuracy mean ± std, 95% interval) cells; an unfinished variant (every run stopped by
    ``trainer.max_time``) says so and how far it got instead."""
    n, stopped = int(_num(row["n"])), int(_num(row.get("n_stopped")) or 0) if row.get("n_stopped") else 0
    if n == 0 and stopped:
        return (f"unfinished (max_time): {_num(row['steps_done']):,.0f} of {_num(row['steps_planned']):,.0f} steps",
                "–")
    mean, std, half = _num(row["acc_mean"]), _num(row["acc_std"]), _num(row["acc_ci"])
    if math.isnan(mean):  # no finished run with a test accuracy (its runs record none)
        return "–", "no test accuracy"
    extra = f" (+{stopped} unfinished, left out)" if stopped else ""
    if n == 1 or math.isnan(half):
        return f"{mean:.4f}{extra}", "1 seed, no interval"
    return f"{mean:.4f} ± {std:.4f}{extra}", f"[{mean - half:.3f}, {mean + half:.3f}]"


def _delta(row: dict[str, str]) -> str:
    """The paired difference to the baseline with its 95% interval; "–" for the baseline itself or none."""
    mean, half = _num(row.get("diff_mean")), _num(row.get("diff_ci"))
    if row["attention"] == BASELINE or math.isnan(mean):
        return "–"
    if math.isnan(half):
        return f"{_sign(mean)} (1 seed, no interval)"
    return f"{_sign(mean)} [{_sign(mean - half)}, {_sign(mean + half)}]"


def _multiple(row: dict[str, str], base: dict[str, str] | None, column: str) -> float:
    """``row[column]`` as a multiple of the baseline's: the report's paired ratio ``<column>_ratio`` (median over
    seeds of run / same-seed baseline run, :func:`attnbench.analysis.stats.summarise`), else, in a report.csv
    without it, the ratio of the two medians; NaN where there is neither."""
    if f"{column}_ratio" in row:
        return _num(row[f"{column}_ratio"])
    return math.nan if base is None else _num(row.get(column)) / _num(base.get(column))


def _ratio(row: dict[str, str], base: dict[str, str] | None, column: str) -> str:
    """``row[column]`` as a multiple of the baseline's (:func:`_multiple`), with ``(k pairs)`` where
    the report paired fewer of its seeds than it has (``<column>_ratio_n``: a seed's runs disturbed, or run on two
    machines); the baseline row shows its absolute rate (its median over seeds)."""
    value = _num(row.get(column))
    if base is None or math.isnan(value):
        return "–"
    if row is base:
        return f"1.00 ({value:,.0f}/s)"
    multiple = _multiple(row, base, column)
    if math.isnan(multiple):
        return "–"
    pairs, seeds = _num(row.get(f"{column}_ratio_n")), _num(row.get("n"))
    return f"{multiple:.2f}" + (f" ({int(pairs)} pairs)" if pairs < seeds else "")


def _fixed(value: str, digits: int) -> str:
    number = _num(value)
    return "–" if math.isnan(number) else f"{number:.{digits}f}"


def render_compare(rows: list[dict[str, str]]) -> str:
    """Per dataset and score function: test accuracy mean ± std over seeds, its 95% t interval, the paired Δ to
    ``scaled_dot`` with its 95% interval, training and inference tokens/s as multiples of ``scaled_dot``'s (its
    own row: the absolute rate), and the attention diagnostics after training (normalised entropy, saturated
    rows, largest |score|)."""
    lines = [f"| data | attention | seeds | test acc (mean ± std) | 95% CI | Δ vs {BASELINE} (paired, 95% CI) | "
             "train tok/s × | test tok/s × | entropy (norm.) | saturated rows | max \\|score\\| |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for data, by_attention in _by_setting(rows, "data").items():
        base = by_attention.get(BASELINE)
        for attention, row in by_attention.items():
            acc, ci = _acc(row)
            lines.append(f"| {data} | `{attention}` | {int(_num(row['n']))} | {acc} | {ci} | {_delta(row)} | "
                         f"{_ratio(row, base, 'train_tok_s')} | {_ratio(row, base, 'test_tok_s')} | "
                         f"{_fixed(row.get('entropy_norm'), 3)} | {_fixed(row.get('saturated_frac'), 3)} | "
                         f"{_fixed(row.get('max_score'), 1)} |")
    return "\n".join(lines) + "\n"


def render_head_dim_sweep(rows: list[dict[str, str]]) -> str:
    """Three tables over d_k (``model.head_dim``): test accuracy mean [95% interval] per score function, the paired
    Δ to ``scaled_dot`` [95% interval], and the diagnostics after training (largest |score|, saturated rows,
    normalised entropy)."""
    table = _by_setting(rows, "model.head_dim")
    dks = list(table)
    attentions = list(dict.fromkeys(a for by_attention in table.values() for a in by_attention))
    head = " | ".join(f"d_k={int(float(d))}" for d in dks)
    sep = "|---|" + "---|" * len(dks)

    def acc_cell(row: dict[str, str] | None) -> str:
        if row is None:
            return "–"
        acc, ci = _acc(row)
        return acc.split(" ± ")[0] + ("" if ci == "–" else " (1 seed)" if ci.startswith("1 seed") else f" {ci}")

    lines = [f"| test acc (mean [95% CI]) | {head} |", sep]
    lines += [f"| `{a}` | " + " | ".join(acc_cell(table[d].get(a)) for d in dks) + " |" for a in attentions]
    lines += ["", f"| Δ vs {BASELINE} (paired, 95% CI) | {head} |", sep]
    lines += [f"| `{a}` | " + " | ".join(_delta(table[d][a]) if a in table[d] else "–" for d in dks) + " |"
              for a in attentions if a != BASELINE]
    lines += ["", f"| diagnostics after training | {head} |", sep]
    for column, label, digits in (("max_score", "max \\|score\\|", 1), ("saturated_frac", "saturated rows", 3),
                                  ("entropy_norm", "entropy (norm.)", 3)):
        lines += [f"| `{a}` {label} | " + " | ".join(_fixed(table[d][a].get(column), digits) if a in table[d] else "–"
                                                     for d in dks) + " |" for a in attentions]
    return "\n".join(lines) + "\n"


def render_long_context(rows: list[dict[str, str]]) -> str:
    """Per sequence length (``data.max_length``) and score function: test accuracy (or, for a run
    ``trainer.max_time`` stopped, how far it got), training tokens/s and its multiple of ``scaled_dot``'s,
    seconds per training step, the extrapolated time of the whole budget for an unfinished run, and peak memory."""
    lines = ["| n | attention | test acc | train tok/s (× scaled_dot) | s/step | whole budget | peak mem (MiB) |",
             "|---|---|---|---|---|---|---|"]
    for n, by_attention in _by_setting(rows, "data.max_length").items():
        base = by_attention.get(BASELINE)
        for attention, row in by_attention.items():
            acc, ci = _acc(row)
            if ci not in ("–", "1 seed, no interval"):
                acc = f"{acc} {ci}"
            tok = _num(row.get("train_tok_s"))
            multiple = math.nan if base is None or math.isnan(tok) else _multiple(row, base, "train_tok_s")
            ratio = "" if math.isnan(multiple) else f" ({multiple:.3f}×)"
            sec = _num(row.get("sec_per_step"))
            whole = _num(row.get("extrapolated_sec"))
            lines.append(f"| {int(float(n))} | `{attention}` | {acc} | "
                         f"{'–' if math.isnan(tok) else f'{tok:,.0f}'}{ratio} | "
                         f"{'–' if math.isnan(sec) else f'{sec:.3g}'} | "
                         f"{'finished' if math.isnan(whole) else f'{whole / 3600:.1f} h (extrapolated)'} | "
                         f"{_fixed(row.get('peak_mem_mb'), 0)} |")
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[..., str]] = {
    "docs/results/batching_accuracy_sst2.json": render_batching_accuracy,
}
#: the experiments' report tables, by stage (attnbench reproduce's names), for each device's folder
def render_train_throughput(data: dict) -> str:
    """``attnbench bench train --attention ... --json`` (the ``cost`` stage of attnbench reproduce): per score function
    the best training tokens/s of the interleaved runs, every run, and the best as a multiple of the first
    score function's (the reference; ``scaled_dot`` in attnbench reproduce)."""
    result = data["result"]
    names = list(result["best"])
    ref = result["best"][names[0]]
    lines = [f"| attention | train tokens/s (best of {result['repeats']}) | runs | × {names[0]} |", "|---|---|---|---|"]
    for name in names:
        runs = ", ".join(f"{x:,.0f}" for x in result["runs"][name])
        lines.append(f"| `{name}` | {result['best'][name]:,.0f} | {runs} | {result['best'][name] / ref:.2f} |")
    return "\n".join(lines) + "\n"


#: the attention benchmark's reference row (``F.scaled_dot_product_attention``): every multiple is of its figures
SDPA_ROW = ("sdpa_scaled_dot", "sdpa")


def bench_rows(cells: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The rows of the attention benchmark table, ``(score, path, label)``: SDPA, then every score function's
    fast path (``attend``), then every naive path (softmax of the materialised n×n scores), each in
    :func:`attention_order`: whichever the results hold."""
    present = {(score, path) for score, path, _ in cells}
    rows = [(*SDPA_ROW, "SDPA (`F.scaled_dot_product_attention`)")] if SDPA_ROW in present else []
    for path, label in (("fast", "`{}`"), ("naive", "`{}`, naive (n×n scores materialised)")):
        rows += [(name, path, label.format(name))
                 for name in attention_order(score for score, p in present if p == path)]
    return rows


def render_epoch_probe(data: dict) -> str:
    """A hand-run budget probe's ``probe.json`` (docs/results/cpu/probes/imdb_epochs/): per run (epochs, seed) its
    ``val/acc`` by epoch, the best one and its epoch (0-based), ``val/loss`` after the first and the last epoch,
    ``test/acc`` (of the best-``val/acc`` checkpoint), and the published 2-epoch run of the same seed
    (``published_2_epoch_runs``, with its twin where it has one).

    Raises:
        KeyError: a run without ``val/acc_by_epoch``, ``val/loss_by_epoch`` or ``test/acc``, or a seed with no
            published run: re-write the probe.json from the runs' records.
    """
    lines = ["| epochs | seed | `val/acc` by epoch | best `val/acc` (epoch, from 0) | `val/loss` first → last | test/acc "
             "| published 2-epoch run's test/acc |", "|---|---|---|---|---|---|---|"]
    runs = sorted(data["runs"].items(), key=lambda kv: (-len(kv[1]["val/acc_by_epoch"]), kv[0]))
    for name, run in runs:
        seed = name.rsplit("-s", 1)[1]
        acc, loss = run["val/acc_by_epoch"], run["val/loss_by_epoch"]
        best = max(range(len(acc)), key=acc.__getitem__)
        published = data["published_2_epoch_runs"][seed]
        shown = f"{published['test/acc']:.4f}" + (f" (twin {published['twin']['test/acc']:.4f})"
                                                  if "twin" in published else "")
        lines.append(f"| {len(acc)} | {seed} | {', '.join(f'{a:.4f}' for a in acc)} | {acc[best]:.4f} ({best}) | "
                     f"{loss[0]:.3f} → {loss[-1]:.3f} | {run['test/acc']:.4f} | {shown} |")
    return "\n".join(lines) + "\n"


def render_bench_attention(data: dict, n: int = 1024, d: int = 64) -> str:
    """``attnbench bench attention``'s ``results.json`` (the ``cost`` stage of attnbench reproduce, published as
    ``docs/results/<device>/attention_cost.json``): at ``n`` and head dim ``d``, per :func:`bench_rows` row the
    median time of one call (forward, and forward+backward) in ms and the forward+backward peak memory in MiB, each
    with its multiple of the SDPA row's. A cell the benchmark skipped (memory) or did not measure shows "–".

    Raises:
        KeyError: the results have no SDPA row at ``n``, ``d`` (both modes): nothing to take multiples of.
    """
    meta = data.get("meta", {})
    threads = (meta.get("config") or {}).get("threads", "?")
    if isinstance(threads, list):  # a run at several thread counts: the table of the most
        threads = max(threads)
    cells = {(r["score"], r["path"], r["mode"]): r for r in data["rows"]
             if r["n"] == n and r["d"] == d and r.get("threads", threads) == threads}

    def value(score: str, path: str, mode: str, key: str, scale: float) -> float | None:
        row = cells.get((score, path, mode))
        return row[key] * scale if row and row.get("status") == "ok" and row.get(key) is not None else None

    base = {mode: value("sdpa_scaled_dot", "sdpa", mode, "time_s", 1e3) for mode in ("fwd", "fwd_bwd")}
    base_mem = value("sdpa_scaled_dot", "sdpa", "fwd_bwd", "peak_mem_bytes", 2.0 ** -20)
    if None in base.values() or base_mem is None:
        raise KeyError(f"no SDPA row at n={n}, d={d} in both modes: the table's multiples need it")
    batch, heads = next(iter(cells.values()))["batch"], next(iter(cells.values()))["heads"]
    lines = [f"| B={batch}, H={heads}, n={n}, d={d}, {threads} thread(s) | fwd | × SDPA | "
             "fwd+bwd | × SDPA | fwd+bwd peak memory | × SDPA |", "|---|---|---|---|---|---|---|"]

    def fmt(x: float | None, unit: str) -> str:
        return "–" if x is None else f"{x:,.3g} {unit}" if x < 100 else f"{x:,.0f} {unit}"

    def times(x: float | None, ref: float) -> str:
        return "–" if x is None else f"{x / ref:.1f}" if x / ref >= 10 else f"{x / ref:.2f}"

    for score, path, name in bench_rows(cells):
        if not any((score, path, mode) in cells for mode in ("fwd", "fwd_bwd")):
            continue
        fwd, both = (value(score, path, mode, "time_s", 1e3) for mode in ("fwd", "fwd_bwd"))
        mem = value(score, path, "fwd_bwd", "peak_mem_bytes", 2.0 ** -20)
        lines.append(f"| {name} | {fmt(fwd, 'ms')} | {times(fwd, base['fwd'])} | {fmt(both, 'ms')} | "
                     f"{times(both, base['fwd_bwd'])} | {fmt(mem, 'MiB')} | {times(mem, base_mem)} |")
    return "\n".join(lines) + "\n"


def _work_text(work: dict[str, int]) -> str:
    """``{"flops": 1.07e9, "tanh": 6.7e7}`` as "1.07 GFLOP + 67.1 M tanh"."""
    parts = [f"{work['flops'] / 1e9:.3g} GFLOP"]
    parts += [f"{count / 1e6:,.3g} M {op}" for op, count in sorted(work.items()) if op != "flops"]
    return " + ".join(parts)


def render_roofline(data: dict) -> str:
    """``attnbench bench attention``'s ``results.json`` of one size (``docs/results/<device>/attention_roofline.json``):
    per thread count the rates measured in the run (the GEMM peak; each elementwise op in cache, the bound, and
    on a 64 MiB tensor), then per score function and pass the fastest time of one call, its bound (its work at
    those rates; forward + backward: 3× the forward's FLOPs and 2× its elementwise ops) and the fraction of the
    bound reached; under each table the ``additive``/SDPA ratio of both
    passes, measured (best against best) and at the limit (bound against bound), the latter also with the
    elementwise ops at their 64 MiB (memory-bound) rate.

    Raises:
        KeyError: a run without rates (not float32 on CPU) or without the SDPA row.
    """
    rows = [r for r in data["rows"] if r["status"] == "ok"]
    first = rows[0]
    out = []
    for threads in sorted({r["threads"] for r in rows}):
        rates = data["meta"]["rates"][str(threads)]
        mine = {(r["score"], r["path"], r["mode"]): r for r in rows if r["threads"] == threads}
        ops = "; ".join(f"`torch.{op}` {r['in_cache']:.2f} G/s in cache (the bound), {r['streaming']:.2f} G/s "
                        "on a 64 MiB tensor" for op, r in sorted(rates.items()) if op != "gemm_gflops")
        out += [f"**{threads} thread{'s' if threads > 1 else ''}**, B={first['batch']}, H={first['heads']}, "
                f"n={first['n']}, d=d_a={first['d']}: fp32 GEMM peak (`torch.mm` 2048²) "
                f"{rates['gemm_gflops']:.1f} GFLOP/s; {ops}.", "",
                "| score function | pass | time (ms, best) | forward work | bound (ms) | fraction of bound |",
                "|---|---|---:|---|---:|---:|"]
        for score, path, name in bench_rows(mine):
            for mode in ("fwd", "fwd_bwd"):
                r = mine.get((score, path, mode))
                if r is None or r.get("bound_s") is None:
                    continue
                out.append(f"| {name} | {mode.replace('_', '+')} | {r['time_min_s'] * 1e3:,.1f} | "
                           f"{_work_text(r['work'])} | {r['bound_s'] * 1e3:,.1f} | {r['bound_fraction']:.0%} |")
        out.append("")
        for mode in ("fwd", "fwd_bwd"):
            sdpa, additive = mine.get(("sdpa_scaled_dot", "sdpa", mode)), mine.get(("additive", "fast", mode))
            if sdpa is None or additive is None:
                continue
            streaming = sum(count / rates[op]["streaming"] for op, count in additive["work"].items() if op != "flops")
            streaming = (streaming * (2 if mode == "fwd_bwd" else 1) / 1e9
                         + additive["work"]["flops"] * (3 if mode == "fwd_bwd" else 1) / (rates["gemm_gflops"] * 1e9))
            out.append(f"- `additive` / SDPA, {mode.replace('_', '+')}: measured "
                       f"{additive['time_min_s'] / sdpa['time_min_s']:.1f}×, at the limit "
                       f"{additive['bound_s'] / sdpa['bound_s']:.1f}× (with the 64 MiB tanh rate as the bound: "
                       f"{streaming / sdpa['bound_s']:.1f}×)")
        out.append("")
    return "\n".join(out)


def render_exponents(data: dict) -> str:
    """``attnbench bench attention``'s ``results.json`` of an n and d sweep
    (``docs/results/<device>/attention_exponents.json``): per score function (fast path, forward) the fitted
    exponent of time in n and in d with its 95% interval (:func:`attnbench.bench.attention.fit_exponents`, OLS on
    log–log over every timing), at each thread count; over all sizes, and over the largest sizes where the run
    has them (``exponents`` entries with ``top``)."""
    fits = [f for f in data["exponents"] if f["mode"] == "fwd"]
    threads = sorted({f["threads"] for f in fits})
    columns = sorted({(f["axis"], f.get("top", False), t) for f in fits for t in [f["threads"]]},
                     key=lambda c: (c[0] != "n", c[1], c[2]))
    index = {(f["score"], f["path"], f["axis"], f.get("top", False), f["threads"]): f for f in fits}

    def head(axis: str, top: bool, t: int) -> str:
        sizes = next(f["sizes"] for f in fits if (f["axis"], f.get("top", False), f["threads"]) == (axis, top, t))
        fixed = next(f["fixed"] for f in fits if f["axis"] == axis)
        other = "d" if axis == "n" else "n"
        return f"{axis} {sizes[0]}–{sizes[-1]} ({other}={fixed}), {t} thr."

    first = data["rows"][0]
    lines = [f"B={first['batch']}, H={first['heads']}, forward, {len(threads)} thread count(s); exponent "
             "[95% interval] of time ∝ size^exponent", "",
             "| score function | " + " | ".join(head(*c) for c in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for score, path, name in bench_rows({(f["score"], f["path"], "fwd"): f for f in fits}):
        cells = []
        for axis, top, t in columns:
            f = index.get((score, path, axis, top, t))
            cells.append("–" if f is None else f"{f['exponent']:.2f} [{f['ci_low']:.2f}, {f['ci_high']:.2f}]")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_two_machines(before: list[dict[str, str]], now: list[dict[str, str]]) -> str:
    """The same ``compare`` jobs (same names: score function, data, seed) run on two machines, from the two
    ``compare_jobs.csv``: per dataset and score function, test accuracy (mean ± std over the seeds both ran) on
    each, the paired difference now − before by seed, and each machine's paired Δ to ``scaled_dot``; every
    interval is the 95% Student-t interval over the seeds (:func:`attnbench.analysis.stats.mean_ci`).

    Raises:
        ValueError: a job CSV without ``job``/``data``/``attention``/``test/acc``, no job name in both, a job
            name twice in one CSV, or two jobs of one score function, dataset and seed. A row counts only when it
            finished (``status``, where the CSV has it) and was not stopped by ``trainer.max_time``
            (``stopped_by``): a stopped run's accuracy is not a final one.
    """
    from collections import Counter

    from attnbench.analysis.stats import mean_ci

    def index(rows: list[dict[str, str]], which: str) -> dict[str, dict[str, str]]:
        for column in ("job", "data", "attention", "test/acc"):
            if rows and column not in rows[0]:
                raise ValueError(f"the {which} compare_jobs.csv has no {column!r} column")
        # a run the wall-time cap stopped (stopped_by) has a test/acc that is not a final one: the report leaves it
        # out of accuracy and pairing (attnbench.analysis.stats.summarise), and so does this table
        finished = [r for r in rows if r.get("test/acc") not in (None, "") and r.get("status") in (None, "", "finished")
                    and r.get("stopped_by") in (None, "")]
        repeated = sorted(job for job, count in Counter(r["job"] for r in finished).items() if count > 1)
        if repeated:  # one would silently replace the other
            raise ValueError(f"the {which} compare_jobs.csv has two finished rows of job {', '.join(repeated)}: "
                             "keep one run per job")
        return {r["job"]: r for r in finished}

    a, b = index(before, "archived"), index(now, "published")
    common = [job for job in a if job in b]
    if not common:
        raise ValueError("the two compare_jobs.csv share no job name")
    seed = {job: a[job].get("seed") or job.rsplit("-s", 1)[1] for job in common}  # the CSV's column, else the name's
    cells: dict[tuple[str, str], list[str]] = {}
    for job in common:
        cells.setdefault((a[job]["data"], a[job]["attention"]), []).append(job)
    for (data, name), jobs in cells.items():  # a seed twice would count twice and pair as one of the two
        counts = Counter(seed[j] for j in jobs)
        twins = sorted(j for j in jobs if counts[seed[j]] > 1)
        if twins:
            raise ValueError(f"data={data}, attention={name}: two jobs of one seed ({', '.join(twins)}); "
                             "keep one run per seed")

    def interval(values: list[float]) -> str:
        mean, _, half, _ = mean_ci(values)
        return f"{_sign(mean)} [{_sign(mean - half)}, {_sign(mean + half)}]"

    def delta(acc: dict[str, dict[str, str]], data: str, jobs: list[str]) -> str:
        base = {seed[j]: float(acc[j]["test/acc"]) for j in cells.get((data, BASELINE), [])}
        return interval([float(acc[j]["test/acc"]) - base[seed[j]] for j in jobs if seed[j] in base])

    lines = ["| data | attention | seeds | test acc before | test acc now | now − before (paired by seed) | "
             f"Δ vs {BASELINE} before | Δ vs {BASELINE} now |", "|---|---|---|---|---|---|---|---|"]
    datasets = list(dict.fromkeys(d for d, _ in cells))
    for data in datasets:
        names = attention_order(n for d, n in cells if d == data)
        for name in names:
            jobs = cells[data, name]
            acc_a = [float(a[j]["test/acc"]) for j in jobs]
            acc_b = [float(b[j]["test/acc"]) for j in jobs]
            mean_a, std_a, _, n = mean_ci(acc_a)
            mean_b, std_b, _, _ = mean_ci(acc_b)
            base = name == BASELINE
            lines.append(f"| {data} | `{name}` | {n} | {mean_a:.4f} ± {std_a:.4f} | {mean_b:.4f} ± {std_b:.4f} | "
                         f"{interval([y - x for x, y in zip(acc_a, acc_b)])} | "
                         f"{'–' if base else delta(a, data, jobs)} | {'–' if base else delta(b, data, jobs)} |")
    return "\n".join(lines) + "\n"


#: generated tables of one source against another published file: source -> the other file (relative paths)
COMPARED_WITH = {"docs/results/cpu/archive/compare-57b5f5b/compare_jobs.csv":
                 "docs/results/cpu/archive/compare-5seed/compare_jobs.csv"}


def render_capacity(rows: list[dict[str, str]]) -> str:
    """Per head dim, test accuracy mean [95% interval] of each score function at each memory load
    (``data.num_pairs``) and where its curve falls below 90% (:func:`attnbench.analysis.capacity.render_capacity`).

    Raises:
        ValueError: the report.csv has no ``data.num_pairs`` or ``attention`` column.
    """
    import pandas as pd

    from attnbench.analysis.capacity import render_capacity as capacity_table

    if not rows:
        raise ValueError("report.csv has no rows")
    return capacity_table(pd.DataFrame(rows))


def render_control(rows: list[dict[str, str]], task: str = "") -> str:
    """One row, named ``task``: test accuracy of ``scaled_dot`` and of the ``uniform`` control, their paired difference (the
    report's ``diff_*`` of the control's row, negated) with its 95% interval, and the verdict of
    :func:`attnbench.analysis.stats.control_verdict` ("this task does not discriminate score functions" where the
    interval reaches 0).

    Raises:
        ValueError: the report.csv lacks the ``scaled_dot`` or the ``uniform`` row.
    """
    from attnbench.analysis.stats import control_verdict
    from attnbench.experiments.registry import CONTROL

    (by_attention,) = _by_setting(rows, None).values()
    missing = [name for name in (BASELINE, CONTROL) if name not in by_attention]
    if missing:
        raise ValueError(f"report.csv has no row for {', '.join(missing)}: the control table pairs {BASELINE} "
                         f"with {CONTROL}")
    base, control = by_attention[BASELINE], by_attention[CONTROL]
    gap, half, n = -_num(control["diff_mean"]), _num(control["diff_ci"]), int(_num(control["diff_n"]))
    verdict = control_verdict(gap, half, n, BASELINE, CONTROL)[1]
    interval = "no interval" if math.isnan(half) else f"[{_sign(gap - half)}, {_sign(gap + half)}]"
    return (f"| task | paired seeds | `{BASELINE}` test acc | `{CONTROL}` test acc | {BASELINE} − {CONTROL} (paired, 95% CI) "
            "| verdict |\n|---|---|---|---|---|---|\n"
            f"| {task} | {n} | {_acc(base)[0]} | {_acc(control)[0]} | {_sign(gap)} {interval} | {verdict} |\n")


STAGE_RENDERERS: dict[str, Callable[[list[dict[str, str]]], str]] = {
    "compare": render_compare,
    "head_dim_sweep": render_head_dim_sweep,
    "long_context": render_long_context,
    "capacity": render_capacity,
}
RENDERERS.update({f"docs/results/{device}/{stage}.csv": renderer
                  for device in ("cpu", "gpu") for stage, renderer in STAGE_RENDERERS.items()})
RENDERERS["docs/results/cpu/train_throughput.json"] = render_train_throughput
RENDERERS["docs/results/cpu/train_pair_fused_additive.json"] = render_train_throughput
#: the uniform-control probes (3 seeds each, outside the published stages): their report.csv and the task they ran
CONTROL_PROBES = {"assoc_recall": "associative recall, 8 pairs (`data=assoc_recall model=recall`, 3 epochs)",
                  "trec": "TREC (`experiment=compare data=trec`, 10 epochs)"}
RENDERERS.update({f"docs/results/cpu/probes/uniform_control/{data}.csv": functools.partial(render_control, task=task)
                  for data, task in CONTROL_PROBES.items()})
RENDERERS["docs/results/cpu/probes/imdb_epochs/probe.json"] = render_epoch_probe
RENDERERS.update({f"docs/results/{device}/attention_cost.json": render_bench_attention for device in ("cpu", "gpu")})
RENDERERS.update({f"docs/results/{device}/attention_roofline.json": render_roofline for device in ("cpu", "gpu")})
RENDERERS.update({f"docs/results/{device}/attention_exponents.json": render_exponents for device in ("cpu", "gpu")})
RENDERERS.update({source: render_two_machines for source in COMPARED_WITH})


# --------------------------------------------------------------------------- power, equivalence, tuned lr, literature

#: the learning-rate stages of attnbench reproduce: the grid of ``optim.lr`` on validation (seed 0), and ``compare``'s
#: grid with each score function at its chosen lr; published as ``docs/results/<device>/<stage>[_jobs].csv``
TUNE_STAGE, TUNED_STAGE = "tune_lr", "compare_tuned"
#: the setting the tuning stage varies, and the validation figure a learning rate is chosen by (the highest wins)
LR_KEY, TUNE_METRIC = "optim.lr", "val/acc_best"
#: the setting of a stage's jobs.csv the equivalence tables pair within (besides attention and seed)
PAIRED_BY = {"compare": ["data"], TUNED_STAGE: ["data"], "head_dim_sweep": ["model.head_dim"]}


def _jobs_frame(rows: list[dict[str, str]]) -> Any:
    """A jobs.csv's rows as the job table :func:`attnbench.analysis.stats.equivalence` reads (empty cells NaN)."""
    import pandas as pd

    return pd.DataFrame(rows).replace("", float("nan"))


def _verdicts(rows: list[dict[str, str]], setting: list[str], baseline: str = BASELINE,
              margin: float | None = None) -> Any:
    """:func:`attnbench.analysis.stats.equivalence` of a jobs.csv's runs, paired within ``setting``.

    Raises:
        ValueError: the jobs.csv lacks a column the pairing needs.
    """
    from attnbench.analysis.stats import DEFAULT_MARGIN, equivalence

    for column in ("status", "attention", "seed", "test/acc", *setting):
        if rows and column not in rows[0]:
            raise ValueError(f"the jobs.csv has no {column!r} column")
    swept = [*setting, "attention", "seed"]
    return equivalence(_jobs_frame(rows), swept, baseline, DEFAULT_MARGIN if margin is None else margin)


def _interval(r: Any) -> str:
    """Δ and its 95% interval in points (``−0.72 [−1.48, +0.03]``)."""
    if math.isnan(r.lo):
        return f"{_sign(r['diff'], 2)} (1 seed, no interval)"
    return f"{_sign(r['diff'], 2)} [{_sign(r.lo, 2)}, {_sign(r.hi, 2)}]"


def render_equivalence(rows: list[dict[str, str]], setting: str = "data") -> str:
    """A stage's ``<stage>_jobs.csv`` (one row per run): per ``setting`` value and score function, Δ to
    ``scaled_dot`` in points with its 95% interval, the minimum detectable difference at 80% power, the TOST p at
    the default margin, the hosts and the verdict (:func:`attnbench.analysis.stats.equivalence`; the rule
    :func:`attnbench.analysis.report.equivalence_rule` under the table)."""
    import pandas as pd

    from attnbench.analysis.report import equivalence_rule, hosts_text
    from attnbench.analysis.stats import DEFAULT_MARGIN

    table = _verdicts(rows, [setting])
    if table.empty:
        raise ValueError(f"no score function pairs with {BASELINE} by seed")
    numeric = pd.to_numeric(table[setting], errors="coerce")
    if numeric.notna().all():  # d_k, lengths: in numeric order (16 before 128), each value written as it was
        table = table.iloc[numeric.to_numpy().argsort(kind="stable")]
    lines = [f"| {setting} | attention | pairs | Δ vs {BASELINE} (points, 95% CI) | MDD (points) | "
             f"TOST p (±{DEFAULT_MARGIN:g}) | hosts | verdict |", "|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r[setting]} | `{r.attention}` | {int(r.n)} | {_interval(r)} | "
                     f"{'–' if math.isnan(r.mdd) else f'{r.mdd:.2f}'} | "
                     f"{'–' if math.isnan(r.tost_p) else f'{r.tost_p:.3f}'} | {hosts_text(r)} | {r.verdict} |")
    powerless = [str(v) for v, group in table.groupby(setting, sort=False) if (group["mdd"] > DEFAULT_MARGIN).all()]
    lines += ["", equivalence_rule(DEFAULT_MARGIN, BASELINE)]
    if powerless:
        lines += ["", f"Left out of the equivalence verdict by the power rule (MDD > {DEFAULT_MARGIN:g} in every "
                      f"comparison): {setting} = {', '.join(powerless)}."]
    return "\n".join(lines) + "\n"


def _published(root: Path, stage: str, device: str = "cpu") -> list[dict[str, str]] | None:
    """The rows of ``docs/results/<device>/<stage>_jobs.csv`` under ``root``; None where it does not exist."""
    path = root / "docs" / "results" / device / f"{stage}_jobs.csv"
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))) if path.is_file() else None


def _not_published(stage: str, device: str = "cpu") -> str:
    return (f"*The `{stage}` stage has not been published: `docs/results/{device}/{stage}_jobs.csv` does not exist "
            f"(`attnbench reproduce --stages {stage} --publish` writes it); no number of it is shown.*")


def _lr_of(rows: list[dict[str, str]]) -> dict[tuple[str, str], str]:
    """``(data, attention) -> optim.lr`` of a stage's finished runs, one value each (``"several"`` where they
    differ)."""
    found: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        if r.get("status") in (None, "", "finished"):
            found.setdefault((r.get("data", ""), r["attention"]), set()).add(r.get(LR_KEY) or "–")
    return {k: v.pop() if len(v) == 1 else "several" for k, v in found.items()}


def render_lr_answers(root: Path) -> str:
    """The shared-lr and the tuned-lr answer side by side, per dataset and score function: Δ to ``scaled_dot`` (points,
    95% interval) and the verdict of :func:`render_equivalence`, from ``compare_jobs.csv`` (every score function at
    one lr) and ``compare_tuned_jobs.csv`` (each at its lr chosen on validation, :func:`render_tuned_lr`), and the
    lr each ran at. A stage not published yet is said so in its cells; nothing is filled in for it."""
    shared, tuned = _published(root, "compare"), _published(root, TUNED_STAGE)
    if shared is None and tuned is None:
        return _not_published("compare") + "\n"
    tables = {name: (_verdicts(rows, ["data"]).set_index(["data", "attention"]) if rows else None, rows)
              for name, rows in (("shared", shared), ("tuned", tuned))}
    keys: list[tuple[str, str]] = []
    for table, rows in tables.values():
        if table is not None:  # the baseline's rows too: the lr it trained at
            keys += [k for k in [*table.index, *((d, a) for d, a in _lr_of(rows) if a == BASELINE)] if k not in keys]
    keys.sort(key=lambda k: (k[0], k[1] != BASELINE, k[1]))

    def cells(name: str, key: tuple[str, str]) -> list[str]:
        table, rows = tables[name]
        if table is None:
            return ["–", "not published", "–"]
        lr = _lr_of(rows).get(key)
        if lr is None:  # the stage has no finished run of it (compare_tuned leaves TREC out)
            return ["–", "not run", "–"]
        if key[1] == BASELINE:
            return [lr, "–", "baseline"]
        if key not in table.index:
            return [lr, "–", "no pair"]
        r = table.loc[key]
        return [lr, _interval(r), r.verdict]

    lines = [f"| data | attention | shared lr | Δ vs {BASELINE}, shared lr (points) | verdict, shared lr | tuned lr | "
             f"Δ vs {BASELINE}, tuned lr (points) | verdict, tuned lr |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {data} | `{attention}` | " + " | ".join([*cells("shared", (data, attention)),
                                                        *cells("tuned", (data, attention))]) + " |"
              for data, attention in keys]
    out = "\n".join(lines) + "\n"
    if tuned is None:
        out += "\n" + _not_published(TUNED_STAGE) + "\n"
    return out


def render_tuned_lr(root: Path) -> str:
    """The learning rate each score function was tuned to, per dataset, from the tuning stage's choice
    (``docs/results/cpu/tune_lr_chosen_lr.json``, written by ``attnbench reproduce``: ``values``
    ``{data: {attention: {lr: val/acc_best}}}``, ``chosen`` ``{data: {attention: lr}}``, ``shared_lr``, ``metric``,
    ``incomplete``): the validation figure at every grid value, the chosen one in bold, and, where
    ``compare_tuned_jobs.csv`` is published, the lr its runs trained at, marked where it is not the chosen one. Says
    so plainly where the stage is not published.

    Raises:
        KeyError: a choice file without ``values`` or ``chosen``.
    """
    path = root / "docs" / "results" / "cpu" / f"{TUNE_STAGE}_chosen_lr.json"
    if not path.is_file():
        return (f"*The `{TUNE_STAGE}` stage has not been published: `docs/results/cpu/{path.name}` does not exist "
                f"(`attnbench reproduce --stages {TUNE_STAGE} --publish` writes it); no number of it is shown.*\n")
    data = json.loads(path.read_text(encoding="utf-8"))
    values, chosen = data["values"], data["chosen"]
    lrs = sorted({float(lr) for by_attention in values.values() for grid in by_attention.values() for lr in grid})
    ran = _lr_of(_published(root, TUNED_STAGE) or [])
    shared = data.get("shared_lr")
    lines = ["| data | attention | " + " | ".join(f"lr {lr:g}" + (" (shared)" if lr == shared else "") for lr in lrs)
             + f" | chosen lr | {TUNED_STAGE} ran at |", "|---|---|" + "---|" * (len(lrs) + 2)]
    for data_name, by_attention in values.items():
        for attention in attention_order(by_attention):
            grid = {float(lr): v for lr, v in by_attention[attention].items()}
            pick = chosen.get(data_name, {}).get(attention)
            at = ran.get((data_name, attention))
            shown = ("not published" if not ran else "–" if at is None else
                     at if pick is not None and float(at) == float(pick) else f"{at} (not the chosen lr)")
            lines.append(f"| {data_name} | `{attention}` | " + " | ".join(
                "–" if grid.get(lr) is None else f"**{grid[lr]:.4f}**" if pick is not None and lr == float(pick)
                else f"{grid[lr]:.4f}" for lr in lrs)
                + f" | {'not chosen: runs missing' if pick is None else f'{float(pick):g}'} | {shown} |")
    rule = (f"\nValidation figure: `{data.get('metric', TUNE_METRIC)}` of each run (seed 0); the highest is chosen, a "
            "tie going to the shared learning rate, then to the smaller one.")
    if data.get("incomplete"):
        rule += f" Not chosen yet (a grid value's run missing): {', '.join(data['incomplete'])}."
    return "\n".join(lines) + "\n" + rule + "\n"


#: a ``where`` value of :data:`LITERATURE`: the largest value of that setting the published stage holds (so an
#: anchor about "large d_k" follows a re-run that changes the grid instead of finding no pair)
LARGEST = "largest"
#: the literature's findings set beside attnbench's measurement of the same contrast: what the anchor found
#: (``finding``; ``verified``: where the numbers were checked, or why not), the score function and the one it is
#: compared with in attnbench (``compare`` vs ``against``, paired by seed), the published jobs.csv and the setting
#: rows it is read at (``stage``, ``where``), and the direction the anchor's finding predicts for ``compare``
#: (``expects``: better or worse); ``comparable: False`` with ``why`` where attnbench measures no counterpart
LITERATURE = (
    {"anchor": "Vaswani et al. 2017, §3.2.1",
     "finding": "for large d_k unscaled dot products grow large and push the softmax into regions of tiny gradients; "
                "scaling by 1/√d_k counters it (additive outperforms unscaled dot at larger d_k, after Britz et al.)",
     "verified": "quoted from the paper's text (search: pages)",
     "compare": "dot", "against": "scaled_dot", "stage": "head_dim_sweep", "where": {"model.head_dim": LARGEST},
     "expects": "worse"},
    {"anchor": "Britz et al. 2017",
     "finding": "additive 22.10–22.47 BLEU against unscaled multiplicative 22.03 / 22.33 / 21.78 / 18.22 at "
                "d = 128 / 256 / 512 / 1024 (WMT En→De): multiplicative falls behind at the largest d",
     "verified": "not verified: the search tools returned the paper's abstract, not its attention table",
     "compare": "additive", "against": "dot", "stage": "head_dim_sweep", "where": {"model.head_dim": LARGEST},
     "expects": "better"},
    {"anchor": "Luong et al. 2015",
     "finding": "global attention: dot ahead of general (and concat, an additive score, behind both); local: general "
                "best (WMT En↔De)",
     "verified": "not verified: the search tools returned the abstract, not the comparison table",
     "compare": "general", "against": "dot", "stage": "compare", "where": {}, "expects": "worse"},
    {"anchor": "Luong et al. 2015",
     "finding": "concat (an additive score) behind dot in global attention",
     "verified": "not verified (as above)",
     "compare": "additive", "against": "dot", "stage": "compare", "where": {}, "expects": "worse"},
    {"anchor": "Henry et al. 2020",
     "finding": "QK-norm (ℓ2-normalised queries and keys, a learned scale in place of 1/√d_k) +0.928 BLEU on "
                "average over 5 low-resource translation pairs",
     "verified": "abstract: 'improvements averaging 0.928 BLEU' (search: pages)",
     "compare": "cosine", "against": "scaled_dot", "stage": "compare", "where": {}, "expects": "better"},
    {"anchor": "Kim et al. 2021",
     "finding": "dot-product self-attention is not Lipschitz; L2 self-attention is, with tied W_Q = W_K",
     "verified": "abstract: dot-product not Lipschitz, L2 self-attention Lipschitz (search: pages); the tied-weight "
                 "condition not verified",
     "comparable": False,
     "why": "attnbench's `euclidean` and `l2` keep W_Q and W_K untied, and no run measures a Lipschitz constant"},
)


def literature_verdict(table: Any, expects: str) -> str:
    """Agree / disagree / not resolved of attnbench's paired comparisons (:func:`attnbench.analysis.stats.equivalence`
    rows, one per setting) with an anchor's direction ``expects`` (``better`` or ``worse``): *agree* where some
    setting's 95% interval excludes 0 in that direction and none in the other; *disagree* where some excludes 0
    the other way and none this way; *mixed* where both occur; *not resolved* where no interval excludes 0 (the
    equivalence verdicts say whether the difference is small). A setting whose runs crossed hosts with no measure of
    what a host changes (*cross-host, unmeasured*) resolves nothing."""
    table = table[~table["verdict"].str.contains("cross-host, unmeasured", regex=False)]
    up, down = int((table["lo"] > 0).sum()), int((table["hi"] < 0).sum())
    along, against = (up, down) if expects == "better" else (down, up)
    if along and against:
        return "mixed"
    return "agree" if along else "disagree" if against else "not resolved"


def render_release_check(root: Path, device: str = "cpu") -> str:
    """Per published stage, what the release check (``scripts/check_training_code.py``, its record
    ``docs/results/<device>/training_code_check.json``) found: how many (commit, configuration, score function)
    checks trained bit for bit as the code they were checked against (each row's ``head``), how many of the
    commits its published runs (the manifest) ran on were checked, and which score functions beyond ``scaled_dot``
    had their own check. Rows of commits no published run names (a replaced run's) are left out."""
    path = root / "docs" / "results" / device / "training_code_check.json"
    manifest_path = root / "docs" / "results" / device / "manifest.json"
    if not path.is_file():
        return f"*No release check is recorded: `{path.relative_to(root)}` does not exist.*\n"
    from attnbench.experiments.registry import TRAIN_STAGES

    record = json.loads(path.read_text(encoding="utf-8"))
    jobs = json.loads(manifest_path.read_text(encoding="utf-8"))["jobs"] if manifest_path.is_file() else {}
    stages = {key.split("/", 1)[0] for key in jobs} & set(TRAIN_STAGES)  # cost: benchmarks, no training
    rows = record["checks"]
    lines = ["| stage | commits of its runs checked | checks identical | checked against | score functions "
             "checked beyond `scaled_dot` |", "|---|---|---|---|---|"]
    for stage in sorted(stages):
        commits = {c.split("+")[0] for key, job in jobs.items() if key.startswith(f"{stage}/")
                   for c in job.get("commits", [])}
        mine = [r for r in rows if r["stage"] == stage and r["commit"] in commits]  # not a replaced run's
        if not mine:
            lines.append(f"| `{stage}` | none of {len(commits)} | – | – | – |")
            continue
        others = sorted({r.get("attention", BASELINE) for r in mine} - {BASELINE})
        lines.append(f"| `{stage}` | {len({r['commit'] for r in mine})} of {len(commits)} | "
                     f"{sum(bool(r['identical']) for r in mine)} of {len(mine)} | "
                     f"{', '.join(f'`{h}`' for h in sorted({r['head'] for r in mine}))} | "
                     f"{', '.join(f'`{a}`' for a in others) or '–'} |")
    meta = record.get("meta", {})
    lines += ["", f"Each check trains {meta.get('steps', '?')} steps (seed {meta.get('seed', '?')}) at the run's commit "
                  "and at the code it was checked against, and compares every weight and every logged value; the "
                  f"latest run of the check: `{meta.get('command', '?')}`, {meta.get('processor', '?')}, torch "
                  f"{meta.get('torch', '?')}."]
    return "\n".join(lines) + "\n"


def render_literature(root: Path) -> str:
    """The literature's findings (:data:`LITERATURE`) beside attnbench's paired measurement of the same contrast in
    the published jobs.csv, with agree / disagree / not resolved (:func:`literature_verdict`) or *not comparable*
    and why. A stage not published yet is said so."""
    lines = ["| anchor | their finding | attnbench's measurement (source) | attnbench | verdict |",
             "|---|---|---|---|---|"]
    for a in LITERATURE:
        if a.get("comparable", True) is False:
            lines.append(f"| {a['anchor']} | {a['finding']} | – | – | not comparable: {a['why']} |")
            continue
        source = f"docs/results/cpu/{a['stage']}_jobs.csv"
        rows = _published(root, a["stage"])
        where = ", ".join(f"{k} = {v}" for k, v in a["where"].items())
        link = f"[`{Path(source).name}`]({source.removeprefix('docs/')})"
        what = f"`{a['compare']}` − `{a['against']}`, test acc, paired by seed{', ' + where if where else ''} ({link})"
        if rows is None:
            lines.append(f"| {a['anchor']} | {a['finding']} | {what} | – | "
                         f"the `{a['stage']}` stage is not published |")
            continue
        setting = PAIRED_BY[a["stage"]]
        table = _verdicts(rows, setting, baseline=a["against"])
        table = table[table["attention"] == a["compare"]]
        for key, value in a["where"].items():
            if value == LARGEST:
                value = str(max((r[key] for r in rows if _is_number(r.get(key))), key=float, default=""))
                what = what.replace(f"{key} = {LARGEST}", f"{key} = {value} (the largest)")
            table = table[table[key].astype(str).map(lambda v: _num(v) == _num(value) if _is_number(v) else v == value)]
        if table.empty:
            lines.append(f"| {a['anchor']} | {a['finding']} | {what} | – | no such pair in {source} |")
            continue
        shown = "; ".join(f"{r[setting[0]]}: {_interval(r)}" for _, r in table.iterrows())
        lines.append(f"| {a['anchor']} | {a['finding']} | {what} | {shown} | "
                     f"{literature_verdict(table, a['expects'])} (expects {a['compare']} {a['expects']}) |")
    lines += ["", "Verdict: *agree* where a setting's 95% paired interval (in points) excludes 0 in the direction the "
                  "anchor's finding predicts and none the other way; *disagree* the reverse; *mixed* both; *not "
                  "resolved* where no interval excludes 0; *not comparable* where attnbench measures no counterpart. "
                  "The anchors measured BLEU on translation, attnbench test accuracy on classification: only the "
                  "direction is compared, never the size. Checked against the papers: "
              + "; ".join(f"{a['anchor']}: {a['verified']}" for a in LITERATURE) + "."]
    return "\n".join(lines) + "\n"


def _is_number(value: str) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


#: the setting of the ``d_a`` stage: additive's hidden size (``null``: its default, d_a = d_k)
D_A_KEY, ADDITIVE = "attention.hidden_dim", "additive"


def _d_a_of(row: dict[str, str]) -> float:
    """A run's d_a (``attention.hidden_dim``); -1 for additive's default (d_a = d_k), and for any other score
    function."""
    d_a = row.get(D_A_KEY) or ""
    return -1.0 if row["attention"] != ADDITIVE or d_a in ("", "null", "None") else float(d_a)


def _d_a_label(row: dict[str, str]) -> str:
    """``additive``'s variant name with its d_a (``additive d_a=128``; ``additive d_a=d_k`` at its default); any
    other score function's name as it is."""
    if row["attention"] != ADDITIVE:
        return row["attention"]
    d_a = _d_a_of(row)
    return f"{ADDITIVE} d_a=d_k" if d_a < 0 else f"{ADDITIVE} d_a={d_a:g}"


def _head_dims(runs: Any) -> Any:
    """d_k of each run: ``model.head_dim``, or ``model.d_model / model.n_heads`` where it is null (the model's
    default, :class:`attnbench.models.model.TransformerClassifier`); NaN where the jobs.csv has neither."""
    import pandas as pd

    def column(key: str) -> Any:
        return pd.to_numeric(runs[key], errors="coerce") if key in runs else pd.Series(math.nan, index=runs.index)

    return column("model.head_dim").fillna(column("model.d_model") / column("model.n_heads"))


def render_d_a(rows: list[dict[str, str]]) -> str:
    """The ``d_a`` stage's ``d_a_jobs.csv`` (one row per run): per dataset, ``scaled_dot`` and ``additive`` at each
    hidden size d_a (at fixed d_k = ``model.head_dim``): parameters, test accuracy mean [95% t interval], the paired
    Δ (points, 95% interval) and verdict against ``scaled_dot`` and against ``additive`` at its default d_a = d_k
    (:func:`attnbench.analysis.stats.equivalence`, pairs by seed; a seed's runs on several hosts, a baseline twin,
    count as one seed, their mean), and training tokens/s as a multiple of ``scaled_dot``'s: per host the ratio of
    the medians of the runs whose thread had its core (:func:`attnbench.analysis.stats.disturbed_runs`), the median
    over hosts where both ran.

    Raises:
        ValueError: the jobs.csv lacks a column the table needs, or has no finished ``additive`` run at d_a = d_k.
    """
    import pandas as pd

    from attnbench.analysis.report import equivalence_rule
    from attnbench.analysis.stats import DEFAULT_MARGIN, disturbed_runs, equivalence, mean_ci

    for column in ("status", "attention", "seed", "data", "test/acc"):
        if rows and column not in rows[0]:
            raise ValueError(f"the jobs.csv has no {column!r} column")
    finished = [r for r in rows if r["status"] == "finished"]
    default = f"{ADDITIVE} d_a=d_k"
    if not any(_d_a_label(r) == default for r in finished):
        raise ValueError(f"no finished {ADDITIVE} run at its default d_a ({D_A_KEY} null)")
    jobs = _jobs_frame([{**r, "attention": _d_a_label(r)} for r in rows])
    swept = ["data", "attention", "seed"]
    paired = {base: equivalence(jobs, swept, base, DEFAULT_MARGIN).set_index(["data", "attention"])
              for base in (BASELINE, default)}

    def delta(data: str, variant: str, base: str) -> str:
        if variant == base or (data, variant) not in paired[base].index:
            return "–"
        r = paired[base].loc[(data, variant)]
        return f"{_interval(r)} {r.verdict}"

    def cell(values: Any, fmt: str) -> str:
        values = pd.to_numeric(values, errors="coerce").dropna().unique()
        return "–" if len(values) == 0 else " / ".join(format(v, fmt) for v in sorted(values))

    lines = [f"| data | d_k | attention | d_a | params | seeds | test acc (mean [95% CI]) | Δ vs `{BASELINE}` "
             f"(points, 95% CI) | Δ vs `{ADDITIVE}` d_a = d_k (points, 95% CI) | train tok/s × `{BASELINE}` |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    def rate_multiple(runs: Any, variant: str) -> float:
        """Median over hosts of (variant's median rate / scaled_dot's) among one host's undisturbed runs."""
        if "train/tokens_per_sec" not in runs:
            return math.nan
        ok = runs[~disturbed_runs(runs)].assign(rate=lambda f: pd.to_numeric(f["train/tokens_per_sec"], errors="coerce"))
        hosts = ok["train_host"].fillna("") if "train_host" in ok else pd.Series("", index=ok.index)
        ratios = [on["rate"][on["attention"] == variant].median() / on["rate"][on["attention"] == BASELINE].median()
                  for _, on in ok.groupby(hosts)]
        ratios = [r for r in ratios if not math.isnan(r)]
        return float(pd.Series(ratios).median()) if ratios else math.nan

    done = jobs[jobs["status"] == "finished"]
    for data, runs in done.groupby("data", sort=False):
        shown = sorted({(r["attention"] != BASELINE, r["attention"], _d_a_of(r), _d_a_label(r))
                        for r in finished if r["data"] == data})
        for attention, d_a, variant in ((a, d, v) for _, a, d, v in shown):
            group = runs[runs["attention"] == variant]
            per_seed = pd.to_numeric(group["test/acc"], errors="coerce").groupby(group["seed"]).mean()  # twins: one
            mean, _, half, n = mean_ci(per_seed)
            interval = "" if math.isnan(half) else f" [{mean - half:.4f}, {mean + half:.4f}]"
            multiple = rate_multiple(runs, variant)
            lines.append(f"| {data} | {cell(_head_dims(group), '.0f')} | `{attention}` | "
                         f"{'–' if attention != ADDITIVE else '= d_k' if d_a < 0 else f'{d_a:g}'} | "
                         f"{cell(group.get('model/params'), ',.0f')} | {n} | {mean:.4f}{interval} | "
                         f"{delta(data, variant, BASELINE)} | {delta(data, variant, default)} | "
                         f"{'–' if math.isnan(multiple) else f'{multiple:.2f}'} |")
    return "\n".join(lines + ["", equivalence_rule(DEFAULT_MARGIN, BASELINE),
                              "", f"The second Δ pairs each d_a with `{ADDITIVE}` at d_a = d_k by the same rule."]) + "\n"


RENDERERS.update({f"docs/results/{device}/{stage}_jobs.csv": functools.partial(render_equivalence, setting=setting)
                  for device in ("cpu", "gpu")
                  for stage, setting in (("compare", "data"), (TUNED_STAGE, "data"), ("long_context", "data.max_length"),
                                         ("head_dim_sweep", "model.head_dim"))})
RENDERERS.update({f"docs/results/{device}/d_a_jobs.csv": render_d_a for device in ("cpu", "gpu")})


# --------------------------------------------------------------------------- tables of the composed config
#: the run keys of ``config:defaults`` besides every ``optim.*``/``compile.*`` field and every score function option
RUN_KEYS = ("seed", "trainer.max_epochs", "trainer.log_every_n_steps", "callbacks.attention_diagnostics.every_n_steps",
            "callbacks.attention_diagnostics.probe_size", "callbacks.last_checkpoint.every_n_train_steps")
#: ``data.*`` keys left out of ``config:data-defaults``: they name the dataset (its Presets table and YAML), they
#: are no default that carries over to another
DATA_IDENTITY_KEYS = ("name", "hub_id", "hub_config", "builder", "data_files", "text_column", "text_pair_column",
                      "label_column", "train_split", "test_split")
#: a score function's YAML keys that are no option of its constructor
SCORE_KEYS = ("_target_", "name")
_ABSENT = object()


def conf_dir(root: Path) -> Path:
    """The config folder the tables of ``root`` document: ``<root>/conf`` when it holds ``train.yaml`` (a
    checkout), else the installed package's (:func:`attnbench.config.config_dir`)."""
    from attnbench.config import config_dir

    return root / "conf" if (root / "conf" / "train.yaml").is_file() else config_dir()


@lru_cache(maxsize=None)
def composed(conf: Path, *overrides: str) -> dict[str, Any]:
    """``conf/train.yaml`` composed as ``python train.py <overrides>`` composes it, with its structured schema,
    as a plain dict with interpolations left as written (``${oc.env:ATTNBENCH_DATA_DIR,null}``), plus the
    chosen option of each config group under ``"choices"`` (``{"attention": "scaled_dot", ...}``, in
    ``train.yaml``'s order; ``None`` for an optional group left out)."""
    import attnbench.config  # noqa: F401 - registers the schema that train.yaml names (train_schema)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(str(conf.resolve()), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    choices = {group: option for group, option in reversed(cfg.hydra.runtime.choices.items()) if "/" not in group}
    plain = OmegaConf.to_container(cfg, resolve=False)
    del plain["hydra"]
    return {**plain, "choices": choices}


def _at(node: Any, key: str) -> Any:
    """``node``'s value at the dotted ``key``; :data:`_ABSENT` where a part is missing."""
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _yaml(value: Any) -> str:
    """A config value as YAML writes it: ``null``, ``true``, ``1e-8``, ``[0.9, 0.98]``; an interpolation as
    written."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return re.sub(r"e([+-])0*(\d)", lambda m: f"e{'' if m[1] == '+' else '-'}{m[2]}", repr(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value)


def defaults_table(keys: Iterable[str], sources: list[tuple[str, dict[str, Any], tuple[str, ...]]],
                   every: tuple[str, list[str]] | None = None) -> str:
    """A ``| key | default | holds for |`` table: one row per key and value, naming every source whose config
    has that value.

    Args:
        keys: dotted keys, in the table's order.
        sources: ``(label, config, sections)``: a config (a nested dict) and the top-level sections it speaks
            for (``("optim",)`` for ``OptimConfig``; ``()``: every key).
        every: ``(phrase, labels)``: a row that holds for all of ``labels`` names them as ``phrase`` instead.
    """
    lines = ["| key | default | holds for |", "|---|---|---|"]
    for key in keys:
        holders: dict[str, list[str]] = {}
        for label, config, sections in sources:
            value = _at(config, key)
            if value is not _ABSENT and (not sections or key.split(".")[0] in sections):
                holders.setdefault(_yaml(value), []).append(f"`{label}`")
        for value, labels in holders.items():
            if every and {f"`{label}`" for label in every[1]} <= set(labels):
                labels = [every[0], *(label for label in labels if label.strip("`") not in every[1])]
            lines.append(f"| `{key}` | `{value}` | {', '.join(labels)} |")
    return "\n".join(lines) + "\n"


def _options(conf: Path, group: str) -> list[str]:
    return sorted(path.stem for path in (conf / group).glob("*.yaml"))


def _keyword_defaults(target: str) -> dict[str, Any]:
    """The keyword defaults of the class or function ``target`` names (``attnbench.attention.l2.L2Score``)."""
    import importlib
    import inspect

    module, _, name = target.rpartition(".")
    parameters = inspect.signature(getattr(importlib.import_module(module), name)).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def render_config_groups(root: Path) -> str:
    """Each config group of ``train.yaml``: its options (the YAMLs in ``conf/<group>/``) and the option
    ``python train.py`` composes (none for an optional group)."""
    conf = conf_dir(root)
    lines = ["| group (`conf/<group>/`) | options | default |", "|---|---|---|"]
    for group, option in composed(conf)["choices"].items():
        options = ", ".join(f"`{name}`" for name in _options(conf, group))
        lines.append(f"| `{group}` | {options} | {f'`{option}`' if option else 'none'} |")
    return "\n".join(lines) + "\n"


def render_run_defaults(root: Path) -> str:
    """The defaults of the run's keys (:data:`RUN_KEYS`, every field of ``OptimConfig`` and ``CompileConfig``)
    and of every score function's options: ``train`` is what ``python train.py`` composes, ``OptimConfig`` /
    ``CompileConfig`` the schema classes' own defaults, ``attention=<name>`` that score function's YAML, and
    ``attnbench.<module>.<Class>`` its constructor's keyword default."""
    from attnbench.config import CompileConfig, OptimConfig

    conf = conf_dir(root)
    schemas = {"optim": OptimConfig, "compile": CompileConfig}
    keys = [*RUN_KEYS[:3], *(f"{section}.{f.name}" for section, schema in schemas.items()
                             for f in dataclasses.fields(schema)), *RUN_KEYS[3:]]
    sources = [("train", composed(conf), ()),
               *((schema.__name__, {section: dataclasses.asdict(schema())}, (section,))
                 for section, schema in schemas.items())]
    options: list[str] = []
    for name in _options(conf, "attention"):
        attention = composed(conf, f"attention={name}")["attention"]
        own = [key for key in attention if key not in SCORE_KEYS]
        options += [key for key in own if key not in options]
        sources.append((f"attention={name}", {"attention": attention}, ("attention",)))
        if own:
            defaults = _keyword_defaults(attention["_target_"])
            sources.append((attention["_target_"], {"attention": {k: v for k, v in defaults.items() if k in own}},
                            ("attention",)))
    return defaults_table([*keys, *(f"attention.{key}" for key in options)], sources)


def render_data_defaults(root: Path) -> str:
    """The defaults of every ``data.*`` key but those that name the dataset (:data:`DATA_IDENTITY_KEYS`):
    ``train`` is what ``python train.py`` composes (its ``data`` preset), ``data=<preset>`` each other preset
    (``every preset``: all of them), ``DataConfig`` the defaults of :class:`attnbench.data.config.DataConfig` (the Python API, and any data config
    that does not set the key)."""
    from attnbench.data.config import DataConfig

    conf = conf_dir(root)
    train = composed(conf)
    python_api = {"data": dataclasses.asdict(DataConfig(name="DataConfig"))}
    presets = [(f"data={name}", composed(conf, f"data={name}"), ()) for name in _options(conf, "data")
               if name != train["choices"]["data"]]
    keys = [f"data.{f.name}" for f in dataclasses.fields(DataConfig) if f.name not in DATA_IDENTITY_KEYS]
    keys = [sub for key in keys for sub in ([f"{key}.{k}" for k in python_api["data"]["tokenizer"]]
                                            if key == "data.tokenizer" else [key])]
    every = ("every preset", ["train", *(label for label, _, _ in presets)])
    return defaults_table(keys, [("train", train, ()), *presets, ("DataConfig", python_api, ())], every)


def render_model_presets(root: Path) -> str:
    """Each ``conf/model/`` preset, smallest first: its sizes, dropouts and pooling, its parameters besides the embeddings
    (built with ``scaled_dot`` and 2 classes: counted from the built model, not by hand) and its parameters in
    all with the embeddings of ``python train.py``'s data (``data.tokenizer.vocab_size`` tokens and
    ``data.max_length`` positions)."""
    from attnbench.models.model import TransformerClassifier

    conf = conf_dir(root)
    data = composed(conf)["data"]
    vocab, length = data["tokenizer"]["vocab_size"], data["max_length"]
    rows = []
    for name in _options(conf, "model"):
        m = composed(conf, f"model={name}")["model"]
        model = TransformerClassifier(vocab_size=vocab, num_classes=2, max_length=length, score="scaled_dot", **m)
        total = sum(p.numel() for p in model.parameters())
        embeddings = sum(p.numel() for n, p in model.named_parameters() if n.split(".")[0].endswith("embedding"))
        head_dim = m["head_dim"] if m["head_dim"] is not None else m["d_model"] // m["n_heads"]
        rows.append((total, f"| `{name}` | {m['d_model']} | {m['n_heads']} × {head_dim} | {m['n_layers']} | "
                            f"{m['d_ff']} | {m['dropout']} | {m['attn_dropout']} | {m['pooling']} | "
                            f"{total - embeddings:,} | {total:,} |"))
    lines = ["| `model=` | d_model | n_heads × head_dim | n_layers | d_ff | dropout | attn_dropout | pooling | "
             f"parameters besides the embeddings (`scaled_dot`, 2 classes) | in all, with `python train.py`'s "
             f"embeddings ({vocab:,} tokens, {length} positions) |", "|---|---|---|---|---|---|---|---|---|---|"]
    return "\n".join(lines + [row for _, row in sorted(rows)]) + "\n"


#: generated tables of the composed config (no result file): source name -> renderer of the checkout ``root``
#: the score functions that reduce to matrix multiplies besides SDPA's own (``uniform`` is O(n·d): no GEMM bound)
GEMM_SCORES = ("dot", "scaled_dot", "general", "cosine", "euclidean")


def _span(values: list[float], fmt: str) -> str:
    """``low–high`` of ``values`` in ``fmt``, or one value when both ends print alike."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}–{high}"


def render_cost_answer(root: Path) -> str:
    """The answer of the cost page (``docs/cost.md``), from the result files in ``root/docs/results/cpu/``: the
    roofline (``attention_roofline.json``: the ``additive``/SDPA ratios, best against best and at the limit; the
    fraction of its bound each score function reaches; one ``tanh`` in FLOPs of GEMM time), the exponents over
    the largest sizes (``attention_exponents.json``), the paired training run (``train_pair_fused_additive.json``)
    and the sweep on every core (``sweep_cores.json``).

    Raises:
        FileNotFoundError: one of those files is missing.
    """
    base = root / "docs" / "results" / "cpu"
    roof = json.loads((base / "attention_roofline.json").read_text(encoding="utf-8"))
    at = {(r["score"], r["mode"], r["threads"]): r for r in roof["rows"] if r["status"] == "ok"}
    first = next(iter(at.values()))
    threads = sorted({t for _, _, t in at})

    def ratio(mode: str, t: int, key: str) -> str:
        return f"{at[('additive', mode, t)][key] / at[('sdpa_scaled_dot', mode, t)][key]:.1f}×"

    def frac(scores: Iterable[str], mode: str, t: int) -> str:
        return _span([100 * at[(s, mode, t)]["bound_fraction"] for s in scores if (s, mode, t) in at], ".0f") + "%"

    def by_threads(fn: Callable[[int], str]) -> str:
        return " / ".join(fn(t) for t in threads)

    t_label = " / ".join(str(t) for t in threads) + " thread" + ("s" if threads != [1] else "")
    rates = roof["meta"]["rates"]
    tanh_cost = by_threads(lambda t: f"{rates[str(t)]['gemm_gflops'] / rates[str(t)]['tanh']['in_cache']:.0f}")
    lines = [
        f"- **At each score function's own limit** (one call, B={first['batch']}, H={first['heads']}, "
        f"n = {first['n']}, d = d_a = {first['d']}; figures at {t_label}): the same O(n²·d) count, but `additive` "
        f"does one `tanh` per (query, key, hidden unit), {at[('additive', 'fwd', threads[0])]['work']['tanh'] / 1e6:,.0f}"
        f" M of them, that no matrix unit computes; one `tanh` costs the time of about {tanh_cost} FLOPs at the "
        f"GEMM peak. With the fused CPU kernel `additive`'s forward takes **{by_threads(lambda t: ratio('fwd', t, 'time_min_s'))}** "
        f"SDPA's time, and **{by_threads(lambda t: ratio('fwd', t, 'bound_s'))}** at the limit; forward + backward "
        f"{by_threads(lambda t: ratio('fwd_bwd', t, 'time_min_s'))} measured, "
        f"{by_threads(lambda t: ratio('fwd_bwd', t, 'bound_s'))} at the limit. The fused forward reaches "
        f"{by_threads(lambda t: frac(['additive'], 'fwd', t))} of its bound (forward + backward "
        f"{by_threads(lambda t: frac(['additive'], 'fwd_bwd', t))}), SDPA "
        f"{by_threads(lambda t: frac(['sdpa_scaled_dot'], 'fwd', t))} "
        f"({by_threads(lambda t: frac(['sdpa_scaled_dot'], 'fwd_bwd', t))}).",
        f"- **The matrix-multiply scores** ({', '.join(f'`{s}`' for s in GEMM_SCORES)}) reach "
        f"{by_threads(lambda t: frac(GEMM_SCORES, 'fwd', t))} of their GEMM bound in the forward and "
        f"{by_threads(lambda t: frac(GEMM_SCORES, 'fwd_bwd', t))} with the backward, where SDPA itself reaches "
        f"{by_threads(lambda t: frac(['sdpa_scaled_dot'], 'fwd_bwd', t))} with the backward; `l2` (one `sqrt` per "
        f"pair, its n×n distances materialised) {by_threads(lambda t: frac(['l2'], 'fwd', t))} "
        f"({by_threads(lambda t: frac(['l2'], 'fwd_bwd', t))}).",
    ]
    exps = json.loads((base / "attention_exponents.json").read_text(encoding="utf-8"))["exponents"]
    top = {(f["score"], f["axis"], f["threads"]): f for f in exps if f.get("top") and f["mode"] == "fwd"}
    if top:
        t = min(t for _, _, t in top)

        def growth(axis: str) -> str:
            fits = {s: top[(s, axis, t)]["exponent"] for s, a, tt in top if a == axis and tt == t}
            sizes = next(f["sizes"] for f in top.values() if f["axis"] == axis)
            gemm = _span([fits[s] for s in GEMM_SCORES if s in fits], ".2f")
            rest = ", ".join(f"{axis}^{fits[s]:.2f} for `{s}`" for s in ("additive", "l2", "uniform") if s in fits)
            return f"in {axis} = {sizes[0]}–{sizes[-1]}: {axis}^{gemm} for the matrix-multiply scores, {rest}"

        lines.append(f"- **Growth** (forward, {t} thread, the largest sizes; 95% intervals in the table below): "
                     f"time grows {growth('n')}; {growth('d')}.")
    pair = json.loads((base / "train_pair_fused_additive.json").read_text(encoding="utf-8"))
    runs, best, meta = pair["result"]["runs"], pair["result"]["best"], pair["meta"]
    rounds = [a / s for a, s in zip(runs["additive"], runs["scaled_dot"])]
    lines.append(f"- **Training** (the main job's step, `model={pair['result']['model']}` on "
                 f"`data={pair['result']['data']}`, {meta['threads']} thread, fused kernel): `additive` trains at "
                 f"**{best['additive'] / best['scaled_dot']:.2f}×** `scaled_dot`'s tokens/s, best of "
                 f"{len(runs['additive'])} interleaved runs each (round by round "
                 f"{_span(rounds, '.2f')}×).")
    cases = []
    for path in sorted(base.glob("sweep_cores*.json")):
        sweep = json.loads(path.read_text(encoding="utf-8"))
        jobs = list(sweep["jobs"].values())
        alone = jobs[0]["one_at_a_time"]["torch_threads"]
        equal_acc = sum(j["side_by_side"]["test/acc"] == j["one_at_a_time"]["test/acc"] for j in jobs)
        metrics = ("bit-identical metrics" if all(j["identical_metrics"] for j in jobs) else
                   f"equal test accuracy in {equal_acc} of {len(jobs)} jobs")
        cases.append(f"**{sweep['ratio']:.2f}×** against {alone} thread{'s' if alone > 1 else ''} each, "
                     f"{sweep['steps']} steps a job ({sweep['wall_seconds']['side_by_side']:.0f} s against "
                     f"{sweep['wall_seconds']['one_at_a_time']:.0f} s; {metrics}; [`{path.name}`](results/cpu/{path.name}))")
    if cases:
        lines.append(f"- **Sweeps on every core:** `attnbench reproduce --jobs 2` runs two jobs at once, each pinned to "
                     f"its own core with one thread. The {len(jobs)} SST-2 jobs of `compare` (seed 0) took, as a "
                     "fraction of the wall time of the same jobs one after another: " + "; ".join(cases) + ".")
    return "\n".join(lines) + "\n"


def render_answer(root: Path, page_dir: str = "") -> str:
    """The answer's bullets from the published result files (:mod:`attnbench.analysis.answer`), its links
    relative to ``page_dir`` (``""``: the README; ``"docs"``: docs/results.md)."""
    from attnbench.analysis.answer import render_answer as answer

    return answer(root, page_dir)


CONFIG_RENDERERS: dict[str, Callable[[Path], str]] = {
    "results:answer": render_answer,
    "results:answer-docs": lambda root: render_answer(root, "docs"),
    "results:lr-answers": render_lr_answers,
    "results:tuned-lr": render_tuned_lr,
    "results:literature": render_literature,
    "results:release-check": render_release_check,
    "config:groups": render_config_groups,
    "config:defaults": render_run_defaults,
    "config:data-defaults": render_data_defaults,
    "config:model-presets": render_model_presets,
    "results:cost-answer": render_cost_answer,
}


def stale_blocks(text: str, root: Path = REPO_ROOT) -> list[str]:
    """The sources of ``text``'s generated blocks whose body differs from what the source renders to."""
    return [m["source"] for m in MARKER.finditer(text)
            if f"{m['body']}" != render(m["source"], root)]


def markdown_files(root: Path = REPO_ROOT) -> list[Path]:
    """``*.md`` in the repository root and anywhere under ``docs/``."""
    return sorted([*root.glob("*.md"), *(root / "docs").rglob("*.md")])


#: the setting column(s) each stage's table is organised by (the renderers' ``_by_setting`` key; capacity: two)
STAGE_SETTING = {"compare": "data", "head_dim_sweep": "model.head_dim", "long_context": "data.max_length",
                 "capacity": ("data.num_pairs", "model.head_dim")}


def fill_fixed_setting(rows: list[dict[str, str]], jobs_rows: list[dict[str, str]] | None, key: str,
                       source: str) -> list[dict[str, str]]:
    """``rows`` of a stage's report.csv with the setting column ``key`` filled in from its jobs.csv when the
    report lacks it: ``attnbench report`` writes only the settings that vary between runs as columns, so a
    report of one dataset (e.g. ``--grid data=sst2``) has no ``data`` column. The value every run of jobs.csv
    shares (its column ``key``, the run's composed config) is the table's one setting.

    Args:
        rows: report.csv's rows (one per variant).
        jobs_rows: ``<stage>_jobs.csv``'s rows (one per run), or ``None`` when that file does not exist.
        key: the setting column (:data:`STAGE_SETTING`), e.g. ``data``.
        source: the report.csv's path, named in the error.

    Raises:
        ValueError: the report lacks ``key`` and jobs.csv is missing, lacks it too, or holds more than one value
            of it (then the report should have had the column: regenerate it with attnbench report).
    """
    if not rows or key in rows[0]:
        return rows
    jobs_path = source[:-len(".csv")] + "_jobs.csv"
    values = sorted({r.get(key) or "" for r in jobs_rows or []} - {""})
    if len(values) != 1:
        found = "it is missing" if jobs_rows is None else (f"its {key!r} column holds {values}" if values
                                                           else f"it has no {key!r} column")
        raise ValueError(f"{source} has no {key!r} column and its one value cannot be taken from {jobs_path} "
                         f"({found}): publish the stage's report.csv together with its jobs.csv "
                         "(attnbench reproduce --publish copies both)")
    return [{key: values[0], **row} for row in rows]


#: a stage's published table, ``docs/results/<device>/<stage>.csv`` or ``<stage>_jobs.csv``: rendered as "not
#: published" while it does not exist
STAGE_FILE = re.compile(r"docs/results/(?P<device>[^/]+)/(?P<stage>[a-z_]+?)(?:_jobs)?\.csv")


def unpublished_stage(source: str, root: Path) -> tuple[str, str] | None:
    """``(stage, device)`` where ``source`` is a stage's table with a renderer (:data:`STAGE_FILE`) and the stage was
    never published: neither ``<stage>.csv`` nor ``<stage>_jobs.csv`` exists and the published manifest has no job
    of it. A stage with one of them, or with jobs, whose file is missing has lost it: None, as for any other
    source."""
    found = STAGE_FILE.fullmatch(source)
    if not found or source not in RENDERERS:
        return None
    stage, device = found["stage"], found["device"]
    folder = root / "docs" / "results" / device
    if (folder / f"{stage}.csv").is_file() or (folder / f"{stage}_jobs.csv").is_file():
        return None
    manifest = folder / "manifest.json"
    jobs = json.loads(manifest.read_text(encoding="utf-8")).get("jobs", {}) if manifest.is_file() else {}
    return None if any(key.startswith(f"{stage}/") for key in jobs) else (stage, device)


#: an archived stage table: ``docs/results/<device>/archive/<name>/<stage>.csv`` (:func:`render`)
ARCHIVED = re.compile(r"docs/results/(?P<device>[^/]+)/archive/[^/]+/(?P<stage>[^/]+)\.csv")


def render(source: str, root: Path = REPO_ROOT) -> str:
    """The table for ``source``: a name of :data:`CONFIG_RENDERERS` (the config of ``root``), else a path
    relative to ``root`` (an archived stage table, :data:`ARCHIVED`, renders as its stage's; a stage's table that
    does not exist yet, :data:`STAGE_FILE`, as a line saying it is not published). A stage's report.csv without its setting column
    (one dataset, one d_k, one length: report.py names only varying settings) takes it from the
    ``<stage>_jobs.csv`` beside it (:func:`fill_fixed_setting`). A source in :data:`COMPARED_WITH` is rendered
    against its other file (both read under ``root``).

    Raises:
        KeyError: a source with no renderer.
        ValueError: a report.csv the renderer cannot tabulate (a missing column, two rows of one variant);
            the message names the file and what to change.
    """
    if source in CONFIG_RENDERERS:
        return CONFIG_RENDERERS[source](root)
    archived = ARCHIVED.fullmatch(source)  # an earlier publication of a stage, with its _jobs.csv: as the stage's
    name = (f"docs/results/{archived['device']}/{archived['stage']}.csv" if archived and source not in RENDERERS
            else source)
    if name not in RENDERERS:
        raise KeyError(f"no renderer for generated table source {source!r}; known: "
                       f"{sorted(RENDERERS) + sorted(CONFIG_RENDERERS)}")
    def csv_rows(path: str) -> list[dict[str, str]]:
        return list(csv.DictReader(io.StringIO((root / path).read_text(encoding="utf-8"))))

    unpublished = unpublished_stage(source, root)
    if unpublished:  # a stage the page names before it is run
        return _not_published(*unpublished) + "\n"

    if source in COMPARED_WITH:
        try:
            return RENDERERS[name](csv_rows(source), csv_rows(COMPARED_WITH[source]))
        except ValueError as err:
            raise ValueError(f"{source} against {COMPARED_WITH[source]}: {err}") from None
    if source.endswith(".csv"):
        rows = csv_rows(source)
        stage = Path(source).stem
        if stage in STAGE_SETTING:
            jobs = source[:-len(".csv")] + "_jobs.csv"
            jobs_rows = csv_rows(jobs) if (root / jobs).is_file() else None
            keys = STAGE_SETTING[stage]
            for key in (keys,) if isinstance(keys, str) else keys:
                rows = fill_fixed_setting(rows, jobs_rows, key, source)
        try:
            return RENDERERS[name](rows)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None
    return RENDERERS[name](json.loads((root / source).read_text(encoding="utf-8")))


def regenerate(text: str, root: Path = REPO_ROOT) -> str:
    """``text`` with every generated block replaced by what its source renders to."""
    return MARKER.sub(lambda m: f"<!-- generated: {m['source']} -->\n{render(m['source'], root)}"
                      "<!-- end generated -->", text)


#: a number quoted from a report in prose: four decimals (accuracies, paired Δ, interval ends), optionally signed
QUOTED = re.compile(r"(?<![\d.])[+−-]?\d+\.\d{4}(?!\d)")


def unsourced_prose_numbers(text: str) -> list[str]:
    """Four-decimal numbers in the prose of a page with generated tables of results (not in a table row, a code
    block or a generated block) that no generated block of the page contains: a report's number retyped by hand that
    drifted from (or never came from) its source. Signs are compared as written (−0.0126 and -0.0126 match).
    A page whose generated blocks all come from the config (:data:`CONFIG_RENDERERS`) quotes no report."""
    results = [m for m in MARKER.finditer(text) if m["source"] not in CONFIG_RENDERERS]
    if not results:
        return []
    generated = " ".join(m["body"] for m in results).replace("−", "-")
    quoted = set(QUOTED.findall(generated))
    prose = re.sub(r"```.*?```", "", MARKER.sub("", text), flags=re.S)
    lines = [line for line in prose.splitlines() if not line.lstrip().startswith("|")]
    return [n for line in lines for n in QUOTED.findall(line) if n.replace("−", "-") not in quoted]


def sources_in(text: str) -> list[str]:
    return [m["source"] for m in MARKER.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="name every stale generated block and print its diff instead of writing; exit 1 if any")
    parser.add_argument("--root", type=Path, default=REPO_ROOT,
                        help="the repository checkout whose README.md and docs/ hold the tables (default: the "
                             "current directory)")
    args = parser.parse_args(argv)
    composed.cache_clear()  # the config as it is now, not as an earlier call in this process read it
    if not (args.root / "docs").is_dir():
        parser.error(f"{args.root.resolve()} has no docs/: run it from the repository's root, or pass --root <checkout>")
    differ = False
    shown = {source for path in markdown_files(args.root) for source in sources_in(path.read_text(encoding="utf-8"))}
    for source in sorted(s for s in RENDERERS if (args.root / s).is_file() and s not in shown):
        differ = True  # a committed result no page shows
        print(f"{source}: a result file with a renderer that no page shows: put its markers where it belongs "
              "(<!-- generated: SOURCE --> and <!-- end generated -->)")
    missing = sorted(s for s in shown if s not in CONFIG_RENDERERS and not (args.root / s).is_file()
                     and not unpublished_stage(s, args.root))  # a stage not yet published renders as such
    for source in missing:
        print(f"{source}: a generated block's source that does not exist (restore it, or remove the block)")
    if missing:
        return 1
    for path in markdown_files(args.root):
        old = path.read_text(encoding="utf-8")
        stray = unsourced_prose_numbers(old)
        if stray:
            differ = True
            print(f"{path}: numbers in the prose that no generated table of the page holds (quote them from the "
                  f"table, or generate them): {', '.join(stray)}")
        new = regenerate(old, args.root)
        if new == old:
            continue
        differ = True
        if args.check:
            for source in stale_blocks(old, args.root):
                print(f"{path}: stale generated block {source} (attnbench tables rewrites it)")
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path),
                                                       f"{path} (generated)"))
        else:
            write_text_atomically(path, new)
            print(f"rewrote {path.relative_to(args.root)}")
    for table, why in NOT_GENERATED.items():
        print(f"{table}: {why}", file=sys.stderr)
    return 1 if differ and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
