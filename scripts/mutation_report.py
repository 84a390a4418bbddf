#!/usr/bin/env python
"""Summarise a finished ``mutmut run`` into docs/mutation.md: score per module and every surviving mutant.

    python scripts/mutation_report.py [--out docs/mutation.md] [--wall-seconds N]

Reads mutmut's own results (``mutmut results --all true`` and ``mutmut show``,
run in the repository root after ``mutmut run``) and the reviewed list of
equivalent mutants in ``scripts/mutation_equivalent.txt`` (one
``<mutant name>  <why it is equivalent>`` per line). Writes:

- the score per module: killed / (all mutants − equivalent), where killed
  counts mutants a test failed on (or that timed out / crashed), and
  "no tests" and "survived" count against the score;
- the groups the targets are set for (docs/testing.md): score functions,
  report statistics (>= 90%); throughput/diagnostics arithmetic, data
  splits/samplers/cache key, resume state (>= 80%);
- every surviving mutant that is not listed as equivalent, with its diff
  (these are the ones to kill with a test, or to review and list);
- the equivalent mutants with their reasons.

Exit status 0 when every survivor is listed as equivalent and every target
is met, 1 otherwise (so CI or a reviewer sees a regression at once).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT_FILE = ROOT / "scripts" / "mutation_equivalent.txt"
KILLED = {"killed", "timeout", "segfault", "caught by type check"}

# (group, target, predicate on the mutant name)
GROUPS = [
    ("score functions and fast paths (attention/)", 0.90, lambda n: n.startswith("attnbench.attention.")),
    ("report statistics (analysis/stats.py)", 0.90, lambda n: n.startswith("attnbench.analysis.stats.")),
    ("throughput and diagnostics arithmetic (callbacks/run_stats.py, callbacks/diagnostics.py)", 0.80,
     lambda n: n.startswith(("attnbench.callbacks.run_stats.", "attnbench.callbacks.diagnostics."))),
    ("data splits, samplers, cache key (data/splits.py, samplers.py, cache.py)", 0.80,
     lambda n: n.startswith(("attnbench.data.splits.", "attnbench.data.samplers.", "attnbench.data.cache."))),
    ("resume state (callbacks/resume_state.py, run/resume.py)", 0.80,
     lambda n: n.startswith(("attnbench.callbacks.resume_state.", "attnbench.run.resume."))),
]


def module_of(name: str) -> str:
    """``attnbench.attention.base.x_masked_softmax__mutmut_3`` -> ``attnbench.attention.base``."""
    return name.split(".x", 1)[0] if ".x" in name else name.rsplit(".", 1)[0]


def function_of(name: str) -> str:
    """The mutated function, readable: ``RunStats.on_fit_end`` or ``masked_softmax``."""
    tail = re.sub(r"__mutmut_\d+$", "", name[len(module_of(name)) + 1:])
    if tail.startswith("xǁ"):  # method: xǁClassǁmethod
        return ".".join(tail[2:].split("ǁ"))
    return tail[2:] if tail.startswith("x_") else tail


def read_results() -> dict[str, str]:
    """``mutant name -> status`` from ``mutmut results --all true``."""
    out = subprocess.run(["mutmut", "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    results = {}
    for line in out.splitlines():
        match = re.match(r"^\s+(\S+__mutmut_\d+): (.+)$", line)
        if match:
            results[match.group(1)] = match.group(2).strip()
    return results


def read_equivalent(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    """``mutant name -> reason`` from the reviewed list (``#`` starts a comment)."""
    equivalent = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            equivalent[name] = reason.strip()
    return equivalent


def diff_of(name: str) -> str:
    """The mutant's diff (what ``mutmut show`` prints), without the header lines."""
    try:  # in-process: one ``mutmut show`` subprocess per mutant takes seconds on a busy machine
        from mutmut.__main__ import find_mutant, get_diff_for_mutant

        text = get_diff_for_mutant(name, path=find_mutant(name).path)
    except Exception:  # noqa: BLE001  (another mutmut version: fall back to its CLI)
        text = subprocess.run(["mutmut", "show", name], cwd=ROOT, capture_output=True, text=True).stdout
    lines = [line for line in text.splitlines() if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
    return "\n".join(lines)


def score(names: list[str], results: dict[str, str], equivalent: dict[str, str]) -> tuple[int, int, int, float]:
    """(killed, counted, equivalent, killed / counted) over ``names``; counted excludes the equivalent ones and
    those not run (a partial run: the page says how many were not run, and the exit status is 1)."""
    eq = sum(1 for n in names if n in equivalent and results[n] not in KILLED and results[n] != "not checked")
    killed = sum(1 for n in names if results[n] in KILLED)
    counted = sum(1 for n in names if results[n] != "not checked") - eq  # of the mutants run (a partial run)
    return killed, counted, eq, (killed / counted if counted else float("nan"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "mutation.md")
    parser.add_argument("--wall-seconds", type=float, default=None, help="wall time of the mutmut run (for the page)")
    parser.add_argument("--save-scores", type=Path, default=None,
                        help="also write {module: [killed, counted, score]} of this run as JSON (a baseline)")
    parser.add_argument("--before", type=Path, default=None,
                        help="a --save-scores JSON of an earlier run: adds its score per module as 'before'")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # mutmut reads pyproject.toml and mutants/ from the working directory

    results = read_results()
    if not results:
        print("no mutmut results: run `mutmut run` first (scripts/mutation.sh does both)", file=sys.stderr)
        return 1
    equivalent = read_equivalent()
    stale = sorted(n for n in equivalent if n not in results)

    by_module: dict[str, list[str]] = defaultdict(list)
    for name in results:
        by_module[module_of(name)].append(name)

    lines = ["# Mutation testing: latest run", "",
             "Generated by `scripts/mutation.sh` (mutmut; how and why: [testing.md](testing.md)). "
             "Score = killed / (mutants run − reviewed equivalent); \"no tests\" and \"survived\" count against it; "
             "mutants not run (a run stopped early) are counted in their column, not in the score.", ""]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    lines += ["Scope (`pyproject.toml` `[tool.mutmut]`): mutated "
              + ", ".join(f"`{p}`" for p in config["only_mutate"]) + "; tests run per mutant (those of "
              + ", ".join(f"`{t}`" for t in config["pytest_add_cli_args_test_selection"])
              + " that reach the mutated function).", ""]
    if args.wall_seconds is not None:
        n_run = sum(1 for s in results.values() if s != "not checked")
        lines += [f"Wall time of the run: {args.wall_seconds / 60:.1f} min ({n_run} of {len(results)} mutants run).", ""]
    before = json.loads(args.before.read_text()) if args.before else {}
    lines += ["| module | mutants | killed | survived | no tests | not run | equivalent | score |"
              + (" before |" if before else ""),
              "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if before else "")]
    saved = {}
    for module in sorted(by_module):
        names = by_module[module]
        counts = Counter(results[n] for n in names)
        killed, counted, eq, frac = score(names, results, equivalent)
        saved[module] = [killed, counted, frac]
        was = (f" {before[module][2]:.1%} |" if module in before else " – |") if before else ""
        lines.append(f"| `{module}` | {len(names)} | {killed} | {counts['survived']} | {counts['no tests']} "
                     f"| {counts['not checked']} | {eq} | {frac:.1%} |{was}")
    if args.save_scores:
        args.save_scores.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    lines += ["", "| target group | mutants | killed | equivalent | score | target |", "|---|---:|---:|---:|---:|---:|"]
    ok = True
    for group, target, pred in GROUPS:
        names = [n for n in results if pred(n)]
        killed, counted, eq, frac = score(names, results, equivalent)
        met = frac >= target
        ok &= met
        unrun = sum(1 for n in names if results[n] == "not checked")
        part = f" ({unrun} not run)" if unrun else ""
        lines.append(f"| {group} | {len(names)}{part} | {killed} | {eq} | {frac:.1%} | ≥ {target:.0%} {'✓' if met else '✗'} |")

    open_survivors = sorted(n for n, s in results.items()
                            if s not in KILLED and s != "not checked" and n not in equivalent)
    not_run = sorted(n for n, s in results.items() if s == "not checked")
    lines += ["", f"## Not killed and not reviewed ({len(open_survivors)})", ""]
    if not open_survivors:
        lines.append("None.")
    by_function: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in open_survivors:
        by_function[(module_of(name), function_of(name))].append(name)
    for (module, function), names in sorted(by_function.items()):
        lines += [f"### `{module}.{function}`", ""]
        for name in names:
            lines += [f"- `{name}` ({results[name]})", "", "```diff", diff_of(name), "```", ""]

    if not_run:
        lines += ["", f"## Not run ({len(not_run)}: the run was stopped before reaching them)", ""]
        by_module = Counter(module_of(n) for n in not_run)
        lines += [f"- `{m}`: {c}" for m, c in sorted(by_module.items())]

    reviewed = sorted(n for n in equivalent if n in results and results[n] not in KILLED)
    lines += ["", f"## Equivalent mutants ({len(reviewed)}, reviewed in `scripts/mutation_equivalent.txt`)", ""]
    for name in reviewed:
        lines.append(f"- `{name}` — {equivalent[name]}")
    if stale:
        lines += ["", "Listed as equivalent but no longer generated (or now killed; remove from the list):", ""]
        lines += [f"- `{n}`" for n in stale]

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: lines.index(f"## Not killed and not reviewed ({len(open_survivors)})")]))
    print(f"{len(open_survivors)} mutants not killed and not reviewed; full list in {args.out}")
    return 0 if ok and not open_survivors and not not_run else 1


if __name__ == "__main__":
    sys.exit(main())
