"""Capacity curves (``experiment=capacity``): test accuracy against memory load per score function and head dim.

The input is the report's per-variant table (:func:`attnbench.analysis.stats.summarise`, or its ``report.csv``
read back): one row per (``data.num_pairs``, ``model.head_dim``, ``attention``) with ``n``, ``acc_mean`` and
``acc_ci`` (the half-width of the 95% Student-t interval over seeds). A column the runs did not vary (one head
dim) may be absent: its rows are one curve.

Where a curve falls below :data:`THRESHOLD` is given as a bracket from the seeds' intervals, not a fitted crossing:
*holds to* P, the largest load such that every tested load up to P has its interval's lower end >= 0.9, and *below
from* Q, the smallest tested load whose interval's upper end is < 0.9. The crossing lies in (P, Q]; loads between
P and Q whose interval holds 0.9 are undetermined. With one seed (no interval) both ends come from the mean and the
table says so.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from attnbench.analysis.stats import STATUS_OK
from attnbench.analysis.tables import attention_order, md_table

#: the memory load (pairs per example) and the head dim columns of the capacity experiment's report
LOAD, HEAD_DIM = "data.num_pairs", "model.head_dim"
#: the accuracy a curve is said to fall below
THRESHOLD = 0.9


def with_head_dim(table: pd.DataFrame, fixed: dict[str, str] | None) -> pd.DataFrame:
    """``table`` with its ``model.head_dim`` column; where the runs did not vary it (the report names only varied
    settings), its one value from the report's fixed settings (``fixed``), so that the curve is labelled by its d_k.
    ``table`` unchanged when it has the column or ``fixed`` lacks it (or holds ``null``: d_model / n_heads)."""
    value = (fixed or {}).get(HEAD_DIM)
    if HEAD_DIM in table or value in (None, "", "null", "None"):
        return table
    return table.assign(**{HEAD_DIM: value})


def _numeric(table: pd.DataFrame) -> pd.DataFrame:
    table = table.copy()
    for column in (LOAD, HEAD_DIM, "n", "acc_mean", "acc_ci"):
        if column in table:
            table[column] = pd.to_numeric(table[column], errors="coerce")
    return table


def curves(table: pd.DataFrame) -> dict[Any, dict[str, pd.DataFrame]]:
    """``head dim -> attention -> points`` (head dims ascending, score functions by
    :func:`attnbench.analysis.tables.attention_order`); points: ``load``, ``mean``, ``lo``, ``hi``, ``n`` by load
    ascending (``lo``/``hi`` NaN for one seed). Head dim ``None`` where the table has no such column.

    Raises:
        ValueError: the table has no ``data.num_pairs`` or ``attention`` column (not a capacity report).
    """
    for column in (LOAD, "attention", "acc_mean"):
        if column not in table:
            raise ValueError(f"a capacity table needs a {column!r} column (columns: {', '.join(table.columns)}): "
                             f"report runs that sweep {LOAD} and attention (experiment=capacity)")
    table = _numeric(table)
    table = table[table["acc_mean"].notna()]
    dks = sorted(table[HEAD_DIM].dropna().unique()) if HEAD_DIM in table else [None]
    out: dict[Any, dict[str, pd.DataFrame]] = {}
    for dk in dks:
        rows = table if dk is None else table[table[HEAD_DIM] == dk]
        out[int(dk) if dk is not None else None] = {
            name: pd.DataFrame({"load": group[LOAD].astype(int), "mean": group["acc_mean"],
                                "lo": group["acc_mean"] - group["acc_ci"], "hi": group["acc_mean"] + group["acc_ci"],
                                "n": group["n"].astype(int)}).sort_values("load").reset_index(drop=True)
            for name in attention_order(rows["attention"]) for group in [rows[rows["attention"] == name]]}
    return out


def crossing(points: pd.DataFrame, threshold: float = THRESHOLD) -> tuple[int | None, int | None, bool]:
    """``(holds_to, below_from, from_means)`` of one curve (module docstring): the largest load up to which every
    tested load's lower interval end is >= ``threshold`` (None: not even the smallest), the smallest load whose
    upper end is < ``threshold`` (None: none tested), and whether means stood in for interval ends (a load
    with one seed)."""
    from_means = bool(points["lo"].isna().any())
    lo = points["lo"].fillna(points["mean"])
    hi = points["hi"].fillna(points["mean"])
    holding = points["load"][(lo >= threshold).cummin()]  # the loads before the first one whose lower end is below
    holds_to = int(holding.iloc[-1]) if len(holding) else None
    below = [int(load) for load, high in zip(points["load"], hi) if high < threshold]
    return holds_to, (below[0] if below else None), from_means


def _bracket(points: pd.DataFrame) -> str:
    holds_to, below_from, from_means = crossing(points)
    first, last = int(points["load"].iloc[0]), int(points["load"].iloc[-1])
    if holds_to is None and below_from == first:
        text = f"below from the smallest load ({first})"
    elif holds_to is None:
        text = f"not shown to hold at {first}" + (f"; below from {below_from}" if below_from else "")
    elif below_from is None:
        text = f"holds to {holds_to}" + (" (the largest load tested)" if holds_to == last else "; not shown below")
    else:
        text = f"holds to {holds_to}, below from {below_from}"
    return text + (" (1 seed: from means)" if from_means else "")


def render_capacity(table: pd.DataFrame) -> str:
    """Markdown: per head dim, one row per score function, test accuracy mean [95% interval] at each load (seeds in
    brackets where fewer than the most any cell has), and where the curve falls below 90% (:func:`crossing`)."""
    lines: list[str] = []
    for dk, by_attention in curves(table).items():
        loads = sorted({int(x) for points in by_attention.values() for x in points["load"]})
        most = max(int(points["n"].max()) for points in by_attention.values())
        rows = []
        for name, points in by_attention.items():
            cells = []
            for load in loads:
                at = points[points["load"] == load]
                if at.empty:
                    cells.append("–")
                    continue
                p = at.iloc[0]
                cell = f"{p['mean']:.3f}" + ("" if math.isnan(p["lo"]) else f" [{p['lo']:.3f}, {p['hi']:.3f}]")
                cells.append(cell + (f" ({int(p['n'])} seed{'s' * int(p['n'] > 1)})" if p["n"] < most else ""))
            rows.append([f"`{name}`", *cells, _bracket(points)])
        lines += [md_table([f"d_k = {dk if dk is not None else 'one value'}", *(f"{load} pairs" for load in loads),
                            f"falls below {THRESHOLD:.0%}"], rows), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def capacity_figure(table: pd.DataFrame, title: str = "", runs: pd.DataFrame | None = None) -> Any:
    """A matplotlib Figure (no pyplot state), ``title`` wrapped above it: one panel per head dim, test accuracy (mean
    over seeds, 95% interval as error bars; none for one seed) against ``data.num_pairs``, one line per score
    function (the report's colours and markers), and :data:`THRESHOLD` as a dashed line.

    ``runs``: the report's per-run table (``attention``, ``data.num_pairs``, ``test/acc``, and ``model.head_dim``
    where it varies; ``status``, where present, keeps the finished runs); each run's accuracy is drawn as a small dot beside its score function's mean, so that a cell
    whose seeds split into solved and failed (a wide interval around a mean no seed reached) shows as such."""
    from matplotlib.figure import Figure

    from attnbench.analysis.report import _score_styles

    by_dk = curves(table)
    names = sorted({name for by_attention in by_dk.values() for name in by_attention})
    styles = _score_styles(names)
    fig = Figure(figsize=(5.2 * len(by_dk) + 1.2, 4.2), layout="constrained")
    axes = fig.subplots(1, len(by_dk), sharey=True, squeeze=False)
    for ax, (dk, by_attention) in zip(axes[0], by_dk.items()):
        for i, (name, points) in enumerate(by_attention.items()):
            # each score function a little aside (±1.2 pairs), so that its bars and seed dots are not hidden
            shift = 0.0 if len(by_attention) < 2 else 2.4 * (i / (len(by_attention) - 1) - 0.5)
            err = [(points["mean"] - points["lo"]).fillna(0), (points["hi"] - points["mean"]).fillna(0)]
            ax.errorbar(points["load"] + shift, points["mean"], yerr=err, capsize=3, label=name, **styles[name])
            if runs is not None and {"attention", LOAD, "test/acc"} <= set(runs.columns):
                mine = runs[(runs["attention"].astype(str) == name)
                            & pd.to_numeric(runs["test/acc"], errors="coerce").notna()]
                if "status" in mine:  # finished runs only: a run stopped early has a partial test/acc
                    mine = mine[mine["status"] == STATUS_OK]
                if dk is not None and HEAD_DIM in mine:
                    mine = mine[pd.to_numeric(mine[HEAD_DIM], errors="coerce") == dk]
                ax.scatter(pd.to_numeric(mine[LOAD], errors="coerce") + shift, pd.to_numeric(mine["test/acc"]),
                           s=14, facecolors="none", edgecolors=styles[name].get("color"), linewidths=0.8, zorder=3)
        ax.axhline(THRESHOLD, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("key→value pairs per example (data.num_pairs)")
        ax.set_title(f"d_k = {dk}" if dk is not None else "")
        ax.set_ylim(0, 1.02)
        ax.set_xticks(sorted({int(x) for points in by_attention.values() for x in points["load"]}))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy (mean, 95% CI over seeds; dots: seeds)" if runs is not None
                          else "test accuracy (mean, 95% CI over seeds)")
    fig.legend(*axes[0][-1].get_legend_handles_labels(), fontsize=8, loc="outside right center")
    if title:  # wrapped to the figure's width: about 13 characters of 8-point text per inch
        import textwrap

        fig.suptitle(textwrap.fill(title, int(13 * fig.get_figwidth())), fontsize=8)
    return fig
