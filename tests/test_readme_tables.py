"""The repository's generated README/docs tables are current: ``attnbench tables --check`` passes on it."""

from __future__ import annotations

from attnbench.analysis import tables

from .conftest import REPO_ROOT


def test_every_generated_block_matches_its_source(capsys):
    """Fails, naming each stale block, when a number between ``<!-- generated: ... -->`` markers was edited by hand,
    its source changed without ``attnbench tables`` being re-run, a result file with a renderer is shown nowhere, or
    a page's prose quotes a report number its tables do not hold."""
    assert tables.main(["--check", "--root", str(REPO_ROOT)]) == 0, capsys.readouterr().out
