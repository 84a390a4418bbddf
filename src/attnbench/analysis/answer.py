"""The answer in a few lines, generated from the published result files (``<!-- generated: results:answer -->``).

Each bullet reads one stage's published files under ``docs/results/cpu/`` (``<stage>_jobs.csv``: one row per run;
``<stage>.csv``: the report's table) and states its verdicts with the rule of
:func:`attnbench.analysis.stats.equivalence` (paired by seed, ±1-point margin): accuracy (``compare_tuned``, else
``compare``), what tuning the learning rate changed, cost (``compare``'s paired rate multiples), unscaled ``dot``
by d_k (``head_dim_sweep``), additive's hidden size (``d_a``), the capacity curves (``capacity``), the ``uniform``
control on long IMDB inputs (``long_context``), and whether any GPU result is published. A stage not published yet
is named as such; no number is written by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

from attnbench.analysis.stats import DEFAULT_MARGIN
from attnbench.analysis.tables import BASELINE, PAIRED_BY, TUNED_STAGE, _d_a_label, _interval, _published, _verdicts

#: the control score function and additive, which the answer names on their own
CONTROL, ADDITIVE = "uniform", "additive"


def _short(verdict: str) -> str:
    """A verdict as the answer says it: ``equivalent within ±1``, ``worse``, ``better`` or ``undetermined`` (with
    its reason in brackets where the verdict gives one)."""
    for word in ("worse", "better"):
        if verdict.startswith(word):
            return word
    return verdict.replace(" (resolved, smaller than the margin)", "")


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _missing(stage: str) -> str:
    return f"*not measured: the `{stage}` stage is not published*"


def accuracy(root: Path) -> str:
    """Each score function against ``scaled_dot`` on every dataset the power rule keeps (MDD ≤ margin)."""
    stage = TUNED_STAGE if _published(root, TUNED_STAGE) is not None else "compare"
    rows = _published(root, stage)
    if rows is None:
        return f"**Accuracy:** {_missing('compare')}."
    table = _verdicts(rows, PAIRED_BY[stage])
    powered = table.groupby("data", sort=False)["mdd"].transform(lambda m: (m <= DEFAULT_MARGIN).any())
    left_out = list(dict.fromkeys(table.loc[~powered, "data"]))
    table = table[powered]
    how = "each score function at its own tuned lr" if stage == TUNED_STAGE else "one shared lr"
    text = (f"**Accuracy** (`{stage}`: {how}, up to {int(table['n'].max()) if len(table) else 0} paired seeds, "
            f"against `{BASELINE}` at a ±{DEFAULT_MARGIN:g}-point margin):")
    additive = table[table["attention"] == ADDITIVE]
    if len(additive):
        text += f" `{ADDITIVE}` is " + "; ".join(f"*{_short(r.verdict)}* on {r.data} ({_interval(r)} points)"
                                                 for _, r in additive.iterrows()) + "."
    same: dict[str, list[str]] = {}
    for attention, group in table[~table["attention"].isin([ADDITIVE, CONTROL])].groupby("attention", sort=True):
        words = [_short(v) for v in group["verdict"]]
        if len(set(words)) == 1:
            same.setdefault(words[0], []).append(attention)
        else:
            text += f" `{attention}`: " + ", ".join(f"{w} on {d}" for w, d in zip(words, group["data"])) + "."
    text += "".join(f" {word[0].upper()}{word[1:]} on every dataset: {_names(names)}." for word, names in same.items())
    control: dict[str, list[str]] = {}
    for _, r in table[table["attention"] == CONTROL].iterrows():
        control.setdefault(_short(r.verdict), []).append(str(r.data))
    for verdict, datasets in control.items():
        text += (f" The `{CONTROL}` control is *{verdict}* on {' and '.join(datasets)}"
                 + (": attention matters there." if verdict == "worse" else
                    ": there the task cannot tell score functions apart." if verdict.startswith("equivalent") else "."))
    if left_out:
        text += f" Left out (MDD > {DEFAULT_MARGIN:g} point): {', '.join(left_out)}."
    return text


def learning_rate(root: Path) -> str:
    """How many verdicts tuning the learning rate changed, and which."""
    shared, tuned = _published(root, "compare"), _published(root, TUNED_STAGE)
    if shared is None or tuned is None:
        return f"**Learning rate:** {_missing(TUNED_STAGE if shared is not None else 'compare')}."
    before = {(r.data, r.attention): _short(r.verdict) for _, r in _verdicts(shared, ["data"]).iterrows()}
    after = {(r.data, r.attention): _short(r.verdict) for _, r in _verdicts(tuned, ["data"]).iterrows()}
    both = [k for k in after if k in before]
    changed = [f"`{a}` on {d}: {before[(d, a)]} → {after[(d, a)]}" for d, a in both if before[(d, a)] != after[(d, a)]]
    return (f"**Learning rate:** tuning it per score function on validation changed {len(changed)} of {len(both)} "
            "verdicts" + (": " + "; ".join(changed) if changed else "") + ".")


def cost(root: Path) -> str:
    """``additive``'s training and inference tokens/s as paired multiples of ``scaled_dot``'s in ``compare``."""
    import pandas as pd

    path = root / "docs" / "results" / "cpu" / "compare.csv"
    if not path.is_file():
        return f"**Cost:** {_missing('compare')}."
    report = pd.read_csv(path)
    additive = report[report["attention"] == ADDITIVE]
    def multiple(value: float) -> str:
        return "–" if math.isnan(value) else f"{value:.2f}×"

    cells = [f"{multiple(r['train_tok_s_ratio'])} / {multiple(r['test_tok_s_ratio'])} on {r['data']}"
             for _, r in additive.iterrows() if not math.isnan(r["train_tok_s_ratio"])]
    if not cells:
        return ("**Cost:** `compare` has no undisturbed paired rate of `additive`: see [Cost](docs/cost.md) for "
                "the benchmarks.")
    return (f"**Cost:** `{ADDITIVE}` trains / infers at " + ", ".join(cells) + f" the tokens/s of `{BASELINE}` "
            "(paired, one host), because it computes one `tanh` per (query, key, hidden unit) where the others are "
            "matrix multiplies ([Cost](docs/cost.md): each path against its own limit).")


def head_dim(root: Path) -> str:
    """Unscaled ``dot`` against ``scaled_dot`` at each d_k."""
    rows = _published(root, "head_dim_sweep")
    if rows is None:
        return f"**Scaling by 1/√d_k:** {_missing('head_dim_sweep')}."
    table = _verdicts(rows, PAIRED_BY["head_dim_sweep"])
    dot = table[table["attention"] == "dot"]
    cells = [f"d_k {int(float(r['model.head_dim']))}: *{_short(r.verdict)}* ({_interval(r)})"
             for _, r in dot.sort_values("model.head_dim", key=lambda s: s.astype(float)).iterrows()]
    text = f"**Scaling by 1/√d_k:** unscaled `dot` against `{BASELINE}`: " + "; ".join(cells) + "."
    path = root / "docs" / "results" / "cpu" / "head_dim_sweep.csv"
    if path.is_file():
        import pandas as pd

        report = pd.read_csv(path)
        largest = report[report["model.head_dim"] == report["model.head_dim"].max()].set_index("attention")
        if {"dot", BASELINE} <= set(largest.index):
            dot, base = largest.loc["dot"], largest.loc[BASELINE]
            text += (f" At d_k {int(dot['model.head_dim'])} its largest logit reaches {dot['max_score']:.0f} "
                     f"({BASELINE}: {base['max_score']:.0f}) and {dot['saturated_frac']:.0%} of its attention rows put "
                     f"over 99% of the weight on one key ({BASELINE}: {base['saturated_frac']:.0%}).")
    return text


def hidden_size(root: Path) -> str:
    """``additive`` at each d_a against ``additive`` at d_a = d_k (:func:`attnbench.analysis.tables.render_d_a`)."""
    rows = _published(root, "d_a")
    if rows is None:
        return f"**Additive's hidden size:** {_missing('d_a')}."
    default = _d_a_label({"attention": ADDITIVE})
    table = _verdicts([{**r, "attention": _d_a_label(r)} for r in rows], ["data"], baseline=default)
    wider = table[table["attention"].str.startswith(f"{ADDITIVE} d_a=")]
    cells = [f"d_a {r.attention.rsplit('=', 1)[1]} on {r.data}: *{_short(r.verdict)}* ({_interval(r)})"
             for _, r in wider.iterrows()]
    return "**Additive's hidden size** (d_a at fixed d_k, against d_a = d_k): " + "; ".join(cells) + "."


def capacity(root: Path) -> str:
    """Per d_k: the largest load where ``scaled_dot`` holds 90%, the score functions that do not hold to it, and
    ``uniform``'s gap to ``scaled_dot``."""
    import pandas as pd

    from attnbench.analysis.capacity import curves, crossing

    path = root / "docs" / "results" / "cpu" / "capacity.csv"
    if not path.is_file():
        return f"**Where attention must work:** {_missing('capacity')}."
    table = pd.read_csv(path)
    parts, gaps = [], []
    for dk, by_attention in curves(table).items():
        base = by_attention.get(BASELINE)
        if base is None:
            continue
        if CONTROL in by_attention:
            merged = base.merge(by_attention[CONTROL], on="load")
            gaps += list(100 * (merged["mean_x"] - merged["mean_y"]))
        holds = crossing(base)[0]
        short = [f"`{a}` to {crossing(p)[0] or 'none'}" for a, p in by_attention.items()
                 if a not in (BASELINE, CONTROL) and (crossing(p)[0] or 0) < (holds or 0)]
        if holds is None:
            parts.append(f"at d_k {dk} `{BASELINE}` is not shown to hold 90% even at the smallest load")
            continue
        parts.append(f"at d_k {dk} `{BASELINE}` holds ≥ 90% to {holds} pairs"
                     + (f", {', '.join(short)}" if short else ", and so does every score function"))
    text = "**Where attention must work** (associative recall, `capacity`): " + "; ".join(parts) + "."
    if gaps:
        text += f" `{CONTROL}` stays {min(gaps):.0f}–{max(gaps):.0f} points below `{BASELINE}`."
    return text


def long_context(root: Path) -> str:
    """``uniform`` against ``scaled_dot`` on IMDB at each published length."""
    rows = _published(root, "long_context")
    if rows is None:
        return f"**The control on long inputs:** {_missing('long_context')}."
    table = _verdicts(rows, ["data.max_length"])
    control = table[table["attention"] == CONTROL]
    if control.empty:
        return f"**The control on long inputs:** `long_context` has no `{CONTROL}` run."
    parts = []
    for _, r in control.iterrows():
        verdict = _short(r.verdict)
        parts.append(f"at n = {int(float(r['data.max_length']))} `{CONTROL}` is *{verdict}* against `{BASELINE}` "
                     f"({_interval(r)})" + (": this task, solved without content-based attention, cannot rank "
                                            "score functions" if verdict.startswith("equivalent") else
                                            ": attention matters there" if verdict == "worse" else ""))
    return "**The control on long inputs:** on IMDB " + "; ".join(parts) + "."


def gpu(root: Path) -> str:
    found = sorted(p.name for p in (root / "docs" / "results" / "gpu").glob("*.json"))
    return ("**GPU:** " + (f"published: {', '.join(found)} ([Cost](docs/cost.md))." if found else
                           "no GPU result is published: every figure is from CPU runs."))


def render_answer(root: Path, page_dir: str = "") -> str:
    """The bullets of :mod:`attnbench.analysis.answer`, one per published stage (or a line saying it is not).

    Args:
        root: the repository checkout whose ``docs/results/`` is read.
        page_dir: the folder of the page that shows the answer, relative to ``root`` (``""``: README.md;
            ``"docs"``: a page under docs/): the links to ``docs/...`` are made relative to it.
    """
    bullets = [accuracy, learning_rate, cost, head_dim, hidden_size, capacity, long_context, gpu]
    text = "".join(f"- {bullet(root)}\n" for bullet in bullets)
    return text.replace("](docs/", "](") if page_dir == "docs" else text

