#!/usr/bin/env python
"""Regenerate the README/docs tables that come from result files, so their numbers cannot drift.

A generated table sits between two markers in any ``*.md`` file of the repository root or ``docs/``::

    <!-- generated: docs/results/attention_cost_cpu.json -->
    | ... the table ... |
    <!-- end generated -->

The marker names the source file (relative to the repository root); :data:`RENDERERS` maps it to the function
that renders the table from it (derived columns, e.g. ratios to a baseline, are computed here, never typed).

    python scripts/readme_tables.py           # rewrite every generated table in place
    python scripts/readme_tables.py --check   # exit 1 and print a diff where a table differs from its source

tests/test_readme_tables.py runs ``--check``'s logic, so a hand-edited number (or an edited source without a
re-run) fails the suite. Tables whose numbers come from runs whose result files are not in the repository are
listed in :data:`NOT_GENERATED` with the reason; they are not marked.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent

MARKER = re.compile(r"<!-- generated: (?P<source>[^ ]+) -->\n(?P<body>.*?)<!-- end generated -->", re.S)

#: tables with measured numbers that are NOT generated, and why (their result files are not in the repository)
NOT_GENERATED = {
    "README Results: score functions × {sst2, trec}": "not generated: the compare sweep's report.csv (outputs/, "
    "ignored by git) is not in the repository; commit it under docs/results/ and add a renderer",
    "README Results: head_dim sweep (accuracy, diagnostics)": "not generated: the head_dim_sweep report.csv is not "
    "in the repository",
    "README Results: long-context (n=512/1024 steps/s, tok/s, RSS)": "not generated: the long_context runs' "
    "metrics.json / report.csv are not in the repository",
    "README Cost: B=1 additive naive/fast/compiled table": "not generated: bench_attention.py's JSON output of that "
    "run is not in the repository (the table has no derived column to drift)",
    "README Cost: tokens/s random vs length_grouped (MFU)": "not generated: scripts/bench_train.py's output of that "
    "run is not in the repository (helper H re-measures it)",
}


def _fmt_ratio(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def _fmt_num(value: float) -> str:
    """104 -> '104', 22.1 -> '22.1' (as the measurement was written down)."""
    return f"{value:g}"


def render_attention_cost(data: dict) -> str:
    """Time and peak memory of each score function, and both as multiples of the baseline row (SDPA)."""
    rows = data["rows"]
    base = next(r for r in rows if r["name"] == data["baseline"])
    lines = ["| B=4, H=4, fwd+bwd | time | × SDPA | peak memory | × SDPA |", "|---|---|---|---|---|"]
    for r in rows:
        mem_ratio = r["peak_mib"] / base["peak_mib"]
        lines.append(f"| {r['name']} | {_fmt_num(r['time_ms'])} ms | {_fmt_ratio(r['time_ms'] / base['time_ms'])} | "
                     f"{_fmt_num(r['peak_mib'])} MiB | {_fmt_ratio(mem_ratio, 1 if mem_ratio >= 10 else 2)} |")
    return "\n".join(lines) + "\n"


def _signed(value: float) -> str:
    return ("+" if value > 0 else "−" if value < 0 else "±") + f"{abs(value):.4f}"


def render_batching_accuracy(data: dict) -> str:
    """Test accuracy of the two batching modes per seed, the paired difference (length_grouped − random), and its
    mean with the 95% Student-t interval over the seeds (scipy, as the report computes it)."""
    from scipy import stats

    acc = {(r["batching"], r["seed"]): r["test/acc"] for r in data["runs"]}
    seeds = sorted({seed for _, seed in acc})
    lines = ["| seed | `random` | `length_grouped` | difference |", "|---|---|---|---|"]
    diffs = []
    for seed in seeds:
        diffs.append(acc["length_grouped", seed] - acc["random", seed])
        lines.append(f"| {seed} | {acc['random', seed]:.4f} | {acc['length_grouped', seed]:.4f} | "
                     f"{_signed(diffs[-1])} |")
    n = len(diffs)
    mean = sum(diffs) / n
    half = stats.t.ppf(0.975, n - 1) * stats.tstd(diffs) / n ** 0.5 if n > 1 else float("nan")
    lines.append(f"| mean (95% t interval, n = {n}) | {sum(acc['random', s] for s in seeds) / n:.4f} | "
                 f"{sum(acc['length_grouped', s] for s in seeds) / n:.4f} | {_signed(mean)} "
                 f"[{_signed(mean - half)}, {_signed(mean + half)}] |")
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[dict], str]] = {
    "docs/results/attention_cost_cpu.json": render_attention_cost,
    "docs/results/batching_accuracy_sst2.json": render_batching_accuracy,
}


def markdown_files(root: Path = REPO_ROOT) -> list[Path]:
    """``*.md`` in the repository root and anywhere under ``docs/``."""
    return sorted([*root.glob("*.md"), *(root / "docs").rglob("*.md")])


def render(source: str, root: Path = REPO_ROOT) -> str:
    """The table for ``source`` (a path relative to ``root``). Raises KeyError for a source with no renderer."""
    if source not in RENDERERS:
        raise KeyError(f"no renderer for generated table source {source!r}; known: {sorted(RENDERERS)}")
    return RENDERERS[source](json.loads((root / source).read_text(encoding="utf-8")))


def regenerate(text: str, root: Path = REPO_ROOT) -> str:
    """``text`` with every generated block replaced by what its source renders to."""
    return MARKER.sub(lambda m: f"<!-- generated: {m['source']} -->\n{render(m['source'], root)}"
                      "<!-- end generated -->", text)


def sources_in(text: str) -> list[str]:
    return [m["source"] for m in MARKER.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="report differences instead of writing; exit 1 if any")
    parser.add_argument("--root", type=Path, default=REPO_ROOT)
    args = parser.parse_args(argv)
    differ = False
    for path in markdown_files(args.root):
        old = path.read_text(encoding="utf-8")
        new = regenerate(old, args.root)
        if new == old:
            continue
        differ = True
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path),
                                                       f"{path} (generated)"))
        else:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {path.relative_to(args.root)}")
    for table, why in NOT_GENERATED.items():
        print(f"{table}: {why}", file=sys.stderr)
    return 1 if differ and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
