"""The published experiments as data, and the command that reproduces them.

- :mod:`attnbench.experiments.registry`: each experiment's stages, score functions, datasets and budgets, read
  from ``conf/experiment/<stage>.yaml``; the score functions default to every discovered one.
- :mod:`attnbench.experiments.reproduce`: ``attnbench reproduce``: every stage's jobs, resumable, then the
  reports and (``--publish``) the published tables.
- :func:`code_commit`: the commit a result came from.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

#: the source checkout this package runs from (``<checkout>/src/attnbench/experiments/__init__.py``), or None for
#: an installed copy (site-packages), whose commit is unknown
_HERE = Path(__file__).resolve().parents[3]
CHECKOUT = _HERE if (_HERE / "src" / "attnbench").is_dir() and (_HERE / "conf").is_dir() else None


def code_commit() -> str:
    """HEAD's 12-digit sha of the checkout this package runs from, with ``+dirty`` when its src/, conf/,
    scripts/ or train.py differ from HEAD, or ``unknown (not a git checkout)`` (an installed package, or no git):
    the code a result came from."""
    if CHECKOUT is None:
        return "unknown (not a git checkout)"
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=CHECKOUT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "conf", "scripts", "train.py"],
                               cwd=CHECKOUT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return sha + ("+dirty" if dirty else "")
