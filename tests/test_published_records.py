"""The published tables come back from the repository alone: ``attnbench reproduce --publish`` keeps each reported
run's record (the files ``attnbench report`` reads) in ``docs/results/cpu/runs/<stage>/``, and the report of those
records is the published ``<stage>.csv`` and ``<stage>_jobs.csv``, run for run (docs/results.md, "Run records").

The stages published before records were kept have none: their run dirs were lost with the machine that ran them.
They are named here, so that a stage published without its records fails the first test instead of passing by
having nothing to check (until one is published with records, the second test has no stage to check; the
mechanism itself is tested end to end in tests/test_reproduce.py, on real tiny runs).

Marked ``release``: they check committed results, not the code (CI and the release steps run them,
docs/testing.md).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from .conftest import REPO_ROOT

PUB = REPO_ROOT / "docs" / "results" / "cpu"
#: published before ``--publish`` kept run records; their run dirs are gone (docs/results.md says so). A stage
#: published again with its records leaves this set.
WITHOUT_RECORDS: set[str] = set()
#: where the runs lay when reported: the one column a report of the records writes differently
PATH_COLUMNS = ["dir", "best_checkpoint", "wandb_run_dir"]

from attnbench.analysis import report


def _stages_with_records() -> list[str]:
    runs = PUB / "runs"
    return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


@pytest.mark.release
def test_every_published_stage_has_its_run_records_or_is_named_as_lacking_them():
    published = {p.stem for p in PUB.glob("*.csv") if not p.stem.endswith("_jobs")}
    with_records = set(_stages_with_records())
    assert not with_records & WITHOUT_RECORDS
    assert with_records | WITHOUT_RECORDS == published


def _assert_records_recompute(folder, stage: str, tmp_path) -> None:
    """``folder/runs/<stage>`` reported again is ``folder/<stage>.csv`` and ``<stage>_jobs.csv`` (paths aside), and
    the records are exactly the runs of ``folder/manifest.json`` of that stage (its commit and command)."""
    jobs, swept, fixed = report.read_runs([folder / "runs" / stage])
    report.build_report(jobs, swept, str(folder.relative_to(REPO_ROOT) / "runs" / stage), tmp_path, fixed=fixed)
    assert (tmp_path / "report.csv").read_bytes() == (folder / f"{stage}.csv").read_bytes()
    again = pd.read_csv(tmp_path / "jobs.csv").drop(columns=PATH_COLUMNS, errors="ignore")
    published = pd.read_csv(folder / f"{stage}_jobs.csv").drop(columns=PATH_COLUMNS, errors="ignore")
    pd.testing.assert_frame_equal(again, published)
    manifest = json.loads((folder / "manifest.json").read_text())["jobs"]
    records = {f"{stage}/{p.name}" for p in (folder / "runs" / stage).iterdir() if p.is_dir()}
    assert records == {k for k in manifest if k.startswith(f"{stage}/")}
    assert len(records) == len(published)


@pytest.mark.release
@pytest.mark.parametrize("stage", _stages_with_records())
def test_the_published_tables_are_the_report_of_the_published_run_records(stage, tmp_path):
    _assert_records_recompute(PUB, stage, tmp_path)

def _archived_stages() -> list[tuple[str, str]]:
    """``(archive dir, stage)`` of each archived publication that kept its run records (``archive/<name>/runs/<stage>``)."""
    archive = PUB / "archive"
    return sorted((p.parent.parent.name, p.name) for p in archive.glob("*/runs/*") if p.is_dir())


@pytest.mark.release
@pytest.mark.parametrize("name,stage", _archived_stages())
def test_an_archived_table_is_the_report_of_its_archived_run_records(name, stage, tmp_path):
    """An earlier publication moved to ``archive/<name>/`` (replaced by a re-run) stays recomputable from its records,
    and its records are exactly the runs its archived manifest describes."""
    _assert_records_recompute(PUB / "archive" / name, stage, tmp_path)
