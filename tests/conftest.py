"""Shared fixtures: the real datasets under ATTNBENCH_DATA_DIR (default ../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Folder with the local Parquet mirrors; the tests need the real data."""
    path = Path(os.environ.get("ATTNBENCH_DATA_DIR", REPO_ROOT.parent / "shared" / "data")).resolve()
    if not (path / "sst2" / "train.parquet").is_file():
        pytest.fail(f"real data not found at {path}; set ATTNBENCH_DATA_DIR to the folder with sst2/, imdb/, trec/")
    return path
