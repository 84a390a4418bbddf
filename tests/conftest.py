"""Shared fixtures.

Data: the default suite needs only SST-2 and TREC, which ship inside the package (``src/attnbench/data/default/``,
:data:`attnbench.data.sources.PACKAGED_DIR`, byte-identical to the Hub's Parquet exports), so it runs on a fresh
clone with nothing exported and no network. ``data_dir`` is ``ATTNBENCH_DATA_DIR`` when set (it must hold
``sst2/`` and ``trec/``), else that packaged copy, which has the local mirror's layout
(``<dir>/<name>/<split>.parquet``); the session sets ``ATTNBENCH_DATA_DIR`` to it when unset, so every
``train.py`` a test starts reads local files and never asks the Hub.

Tests that need the full mirror (IMDB, or the mirror itself: ``scripts/mirror_data.py``'s output) take the
``mirror_dir`` fixture, which marks them ``mirror``: deselected by default (``pyproject.toml``), run by CI
(``.ci/run``). Selected without a mirror they fail, naming what to set; they never skip.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import attnbench.config  # noqa: F401 - registers the run schema that conf/train.yaml names (train_schema)
from attnbench.data.sources import PACKAGED_DIR

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_ENV = "ATTNBENCH_DATA_DIR"
#: the full mirror's files (``scripts/mirror_data.py`` for each preset)
MIRROR_FILES = ("sst2/train.parquet", "sst2/validation.parquet", "trec/train.parquet", "trec/test.parquet",
                "imdb/train.parquet", "imdb/test.parquet")
#: the files the default suite reads, in ``data_dir``
DEFAULT_FILES = MIRROR_FILES[:4]


def signed(x: float, digits: int = 4) -> str:
    """``+0.0046`` / ``−0.0126`` (U+2212), as the docs print a paired difference."""
    return f"{x:+.{digits}f}".replace("-", "\u2212")


def fmt_interval(row: dict, digits: int = 4) -> str:
    """A report row's paired Δ and its 95% interval (``diff_mean`` ± ``diff_ci``) as the docs print them:
    ``−0.0033 [−0.0062, −0.0005]``."""
    mean, half = float(row["diff_mean"]), float(row["diff_ci"])
    return f"{signed(mean, digits)} [{signed(mean - half, digits)}, {signed(mean + half, digits)}]"


_EXPORTED = os.environ.get(DATA_ENV)  # as the user exported it, before pytest_configure fills it in


def _missing(folder: Path, files: tuple[str, ...]) -> list[str]:
    return [f for f in files if not (folder / f).is_file()]


def _data_dir() -> Path:
    return Path(_EXPORTED).resolve() if _EXPORTED else PACKAGED_DIR


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as in a terminal: a runner that starts pytest in the background (``cmd &`` in a script, some CI
    runners) starts it with SIGINT ignored, and every ``train.py`` a test starts inherits that across ``exec``, so
    the tests that stop a run with SIGINT would see it finish instead. A handled signal resets to its default in
    the child; an ignored one does not.

    ``ATTNBENCH_DATA_DIR`` unset: set to the packaged copy (module docstring), so in-process configs
    (``${oc.env:ATTNBENCH_DATA_DIR,null}``) and subprocesses read local files; tests of the unset case remove it
    themselves."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.setdefault(DATA_ENV, str(PACKAGED_DIR))


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes ``mirror_dir`` is marked ``mirror`` (deselected by default)."""
    for item in items:
        if "mirror_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mirror)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Folder in the mirror layout with SST-2 and TREC: ``ATTNBENCH_DATA_DIR`` when exported, else the packaged
    copy (module docstring)."""
    path = _data_dir()
    missing = _missing(path, DEFAULT_FILES)
    if missing:
        pytest.fail(f"{DATA_ENV}={_EXPORTED} lacks {', '.join(missing)}: point it at a mirror with sst2/ and trec/ "
                    f"(scripts/mirror_data.py), or unset it to use the copy packaged with attnbench", pytrace=False)
    return path


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    """The full local mirror (SST-2, TREC, IMDB): ``ATTNBENCH_DATA_DIR`` when exported, else ``../shared/data``
    beside the repository. Missing files fail the test with what to set: a ``mirror`` test never passes by
    checking less."""
    path = Path(_EXPORTED).resolve() if _EXPORTED else REPO_ROOT.parent / "shared" / "data"
    missing = _missing(path, MIRROR_FILES)
    if missing:
        pytest.fail(f"this test needs the full data mirror; {path} lacks {', '.join(missing)}. Set {DATA_ENV} to a "
                    f"folder with sst2/, trec/ and imdb/ (scripts/mirror_data.py writes it), or deselect it with "
                    f"-m 'not mirror'", pytrace=False)
    return path


@pytest.fixture(scope="session")
def generated_mirror(tmp_path_factory, data_dir) -> Path:
    """A folder in the full mirror's layout for tests of where data is found, not of what it holds: ``sst2/`` and
    ``trec/`` are ``data_dir``'s (symlinks), ``imdb/{train,test}.parquet`` are 40 generated reviews each with
    IMDB's schema (``text``, ``label`` as ``ClassLabel(neg, pos)``)."""
    import datasets

    root = tmp_path_factory.mktemp("generated-mirror")
    for name in ("sst2", "trec"):
        (root / name).symlink_to(data_dir / name, target_is_directory=True)
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos"])})
    words = [("dull", "tedious", "clumsy", "forgettable"), ("moving", "sharp", "funny", "beautiful")]
    (root / "imdb").mkdir()
    for split, offset in (("train", 0), ("test", 1)):
        labels = [(i + offset) % 2 for i in range(40)]
        texts = [f"A {words[y][i % 4]} film; the plot was {words[y][(i + 1) % 4]} and the cast {words[y][(i + 2) % 4]}."
                 f" Review {split} {i}." for i, y in enumerate(labels)]
        datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features).to_parquet(
            str(root / "imdb" / f"{split}.parquet"))
    return root


#: SST-2 as the data tests prepare it (``split="validation"`` is the test set)
SST2 = dict(name="sst2", hub_id="stanfordnlp/sst2", text_column="sentence", label_column="label",
            train_split="train", test_split="validation")


@pytest.fixture(scope="session")
def sst2(data_dir, tmp_path_factory):
    """``data_dir``'s whole SST-2 prepared once for the session at ``max_length=64`` in a fresh cache:
    ``(data module, cache folder)``. The build (67,349 rows carved and tokenized) is a cache miss; other modules of
    the same data and ``max_length`` read the same entry, since sample caps and the batching mode are applied when
    reading and are not part of the cache key (:meth:`TextClassificationDataModule._cache_spec`)."""
    from attnbench.data import TextClassificationDataModule

    cache = tmp_path_factory.mktemp("sst2-cache")
    dm = TextClassificationDataModule(**SST2, local_dir=str(data_dir), cache_dir=str(cache), max_length=64)
    dm.prepare_data()
    dm.setup()
    return dm, cache


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One tokenizer/tokenized-split cache for the tests that train through `train.py` (built once)."""
    return tmp_path_factory.mktemp("attnbench-cache")


def train_env(data_dir: Path, cache_dir: Path) -> dict[str, str]:
    """Environment of a `train.py` subprocess: ``data_dir``'s data, the shared cache, W&B offline whatever the
    machine."""
    env = {**os.environ, DATA_ENV: str(data_dir), "ATTNBENCH_CACHE_DIR": str(cache_dir)}
    env.pop("WANDB_API_KEY", None)
    env["WANDB_MODE"] = "offline"
    return env
