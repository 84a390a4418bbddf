"""Shared fixtures: the real datasets under ATTNBENCH_DATA_DIR (default ../shared/data)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import attnbench.config  # noqa: F401 - registers the run schema that conf/train.yaml names (train_schema)

REPO_ROOT = Path(__file__).resolve().parents[1]


def signed(x: float, digits: int = 4) -> str:
    """``+0.0046`` / ``−0.0126`` (U+2212), as the docs print a paired difference."""
    return f"{x:+.{digits}f}".replace("-", "\u2212")


def fmt_interval(row: dict, digits: int = 4) -> str:
    """A report row's paired Δ and its 95% interval (``diff_mean`` ± ``diff_ci``) as the docs print them:
    ``−0.0033 [−0.0062, −0.0005]``."""
    mean, half = float(row["diff_mean"]), float(row["diff_ci"])
    return f"{signed(mean, digits)} [{signed(mean - half, digits)}, {signed(mean + half, digits)}]"


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as in a terminal: a runner that starts pytest in the background (``cmd &`` in a script, some CI
    runners) starts it with SIGINT ignored, and every ``train.py`` a test starts inherits that across ``exec``, so
    the tests that stop a run with SIGINT would see it finish instead. A handled signal resets to its default in
    the child; an ignored one does not."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Folder with the local Parquet mirrors; the tests need the real data."""
    path = Path(os.environ.get("ATTNBENCH_DATA_DIR", REPO_ROOT.parent / "shared" / "data")).resolve()
    if not (path / "sst2" / "train.parquet").is_file():
        pytest.fail(f"real data not found at {path}; set ATTNBENCH_DATA_DIR to the folder with sst2/, imdb/, trec/")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One tokenizer/tokenized-split cache for the tests that train through `train.py` (built once)."""
    return tmp_path_factory.mktemp("attnbench-cache")


def train_env(data_dir: Path, cache_dir: Path) -> dict[str, str]:
    """Environment of a `train.py` subprocess: real data, the shared cache, W&B offline whatever the machine."""
    env = {**os.environ, "ATTNBENCH_DATA_DIR": str(data_dir), "ATTNBENCH_CACHE_DIR": str(cache_dir)}
    env.pop("WANDB_API_KEY", None)
    env["WANDB_MODE"] = "offline"
    return env
