"""``attnbench``: one command for everything a user runs, each subcommand a module of this package.

    attnbench train attention=additive trainer.max_steps=20     # = python train.py ... (Hydra overrides)
    attnbench report outputs/compare/multiruns/<date>            # tables, intervals, plots of any runs
    attnbench reproduce --dry-run                                # every published experiment: the plan
    attnbench bench attention --quick                            # the cost of one attention call
    attnbench tables --check                                     # are the docs' generated tables current?

:data:`COMMANDS` maps each name to ``(module, one-line help)``; a name whose value is itself such a table
(``bench``) takes a second word. A subcommand's module is imported only when it runs, so ``attnbench --help``
loads neither torch nor pandas. Every module's ``main(argv)`` parses its own arguments (``attnbench report
--help``); ``train`` hands its arguments to the Hydra app (:func:`attnbench.run.cli.main`) unchanged.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence

Table = dict[str, "tuple[str, str] | Table"]

#: name -> (module whose ``main`` runs it, one-line help), or a nested table of the same shape
COMMANDS: Table = {
    "train": ("attnbench.run.cli", "train one run or a Hydra sweep (-m): attnbench train attention=additive"),
    "report": ("attnbench.analysis.report", "a Markdown report with intervals and plots of any set of runs"),
    "reproduce": ("attnbench.experiments.reproduce", "run (or --dry-run: plan) the published experiments"),
    "bench": {
        "attention": ("attnbench.bench.attention", "time, memory and FLOPs of one attention call per score function"),
        "train": ("attnbench.bench.train", "training tokens/s of each score function on the same batches"),
        "short": ("attnbench.bench.short", "inference latency at short sequences (the fused CPU kernels)"),
        "gpu-check": ("attnbench.bench.gpu_check", "a short check of training and the benchmark on a GPU"),
    },
    "tables": ("attnbench.analysis.tables", "regenerate the docs' tables from result files (--check: stale ones)"),
}


def usage(table: Table, prog: str) -> str:
    """The help text of ``table``: one line per command."""
    width = max(len(name) for name in table)
    lines = [f"usage: {prog} <command> [args ...]", "", "commands:"]
    for name, entry in table.items():
        text = entry[1] if isinstance(entry, tuple) else f"{', '.join(entry)} (attnbench {name} <name> --help)"
        lines.append(f"  {name:<{width}}  {text}")
    lines += ["", f"{prog} <command> --help: that command's options"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand ``argv`` names (default ``sys.argv[1:]``); returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    table, prog = COMMANDS, "attnbench"
    while True:
        if not args or args[0] in ("-h", "--help"):
            print(usage(table, prog))
            return 0 if args else 2
        name, args = args[0], args[1:]
        if name not in table:
            close = difflib.get_close_matches(name, list(table), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            print(f"Error: {prog}: unknown command {name!r}{hint} (choose one of: {', '.join(table)})",
                  file=sys.stderr)
            return 2
        entry, prog = table[name], f"{prog} {name}"
        if isinstance(entry, tuple):
            break
        table = entry
    module = importlib.import_module(entry[0])
    sys.argv = [prog, *args]  # argparse's usage line and Hydra's own parser read it
    if entry[0] == "attnbench.run.cli":
        module.main()  # the Hydra app parses sys.argv itself and exits on an error
        return 0
    result = module.main(args)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
