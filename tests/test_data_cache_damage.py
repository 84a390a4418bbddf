"""A damaged tokenized-data cache entry is named in one log line and rebuilt, never a traceback.

Data: the first rows of the packaged SST-2 (``data_dir``), written as a tiny local mirror, so that each rebuild
takes well under a second. Each case damages one part of a copy of a pristine entry, then a fresh data module
must log one warning naming the damaged part, rebuild the entry to the pristine bytes and rows, and leave an
entry that the next data module reads as a cache hit.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import datasets
import pandas as pd
import pytest

from attnbench.data import TextClassificationDataModule

SST2 = dict(name="sst2", hub_id="stanfordnlp/sst2", text_column="sentence", label_column="label",
            train_split="train", test_split="validation", max_length=32, max_train_samples=50, max_eval_samples=10)
SPLITS = ("train", "val", "test")


def _module(local_dir: Path, cache: Path) -> TextClassificationDataModule:
    return TextClassificationDataModule(**SST2, local_dir=str(local_dir), cache_dir=str(cache))


def _load(dm: TextClassificationDataModule) -> TextClassificationDataModule:
    dm.prepare_data()
    dm.setup()
    return dm


def _rows(dm: TextClassificationDataModule) -> dict:
    return {s: (dm.splits[s].input_ids, dm.splits[s].labels, dm.splits[s].row_ids) for s in SPLITS}


def _files(entry: Path) -> dict[str, bytes]:
    return {str(p.relative_to(entry)): p.read_bytes() for p in sorted(entry.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def pristine(data_dir, tmp_path_factory):
    """A tiny SST-2 mirror (300 training sentences, 60 test sentences), its cache entry, and what it holds."""
    local = tmp_path_factory.mktemp("tiny-sst2")
    (local / "sst2").mkdir()
    for split, n in (("train", 300), ("validation", 60)):
        pd.read_parquet(data_dir / "sst2" / f"{split}.parquet").head(n).to_parquet(local / "sst2" / f"{split}.parquet")
    dm = _load(_module(local, tmp_path_factory.mktemp("cache")))
    assert dm.cache_hit is False and [len(dm.splits[s]) for s in SPLITS] == [50, 10, 10]
    return local, dm.cache_dir, _rows(dm), _files(dm.cache_dir)


def _data_file(entry: Path, split: str) -> Path:
    return entry / split / "data-00000-of-00001.arrow"


def _truncate(path: Path, size: int | None = None) -> Path:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2 if size is None else size)
    return path.parent  # a split's files are named by their split folder


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path.parent if path.parent.name in SPLITS else path


def _remove(path: Path) -> Path:
    path.unlink()
    return path.parent if path.parent.name in SPLITS else path


def _meta_vocab_off_by_one(entry: Path) -> Path:
    meta = json.loads((entry / "meta.json").read_text())
    meta["vocab_size"] += 1
    (entry / "meta.json").write_text(json.dumps(meta))
    return entry / "tokenizer.json"  # the tokenizer no longer matches the entry


#: damage -> the path the warning names
DAMAGE = {
    "train arrow truncated": lambda e: _truncate(_data_file(e, "train")),
    "train arrow emptied": lambda e: _truncate(_data_file(e, "train"), 0),
    "test arrow truncated": lambda e: _truncate(_data_file(e, "test")),
    "train folder removed": lambda e: (shutil.rmtree(e / "train"), e / "train")[1],
    "meta.json garbage": lambda e: _write(e / "meta.json", "{garbage"),
    "meta.json a list": lambda e: _write(e / "meta.json", "[]"),
    "meta.json empty": lambda e: _write(e / "meta.json", "{}"),
    "meta.json removed": lambda e: _remove(e / "meta.json"),
    "meta.json vocab_size wrong": _meta_vocab_off_by_one,
    "val state.json garbage": lambda e: _write(e / "val" / "state.json", "xx"),
    "test dataset_info.json removed": lambda e: _remove(e / "test" / "dataset_info.json"),
    "tokenizer.json truncated": lambda e: _truncate(e / "tokenizer.json", 100) and e / "tokenizer.json",
    "tokenizer.json removed": lambda e: _remove(e / "tokenizer.json"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_named_once_and_rebuilt(pristine, tmp_path, caplog, damage):
    local, entry, rows, files = pristine
    cache = tmp_path / "cache"
    copy = cache / entry.name
    shutil.copytree(entry, copy)
    named = DAMAGE[damage](copy)

    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm = _load(_module(local, cache))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(named) in warnings[0] and "rebuil" in warnings[0].lower(), warnings
    assert "\n" not in warnings[0]
    assert dm.cache_dir == copy and dm.cache_hit is False
    assert _rows(dm) == rows
    assert _files(copy) == files  # the same bytes as the pristine entry
    assert os.listdir(cache) == [entry.name]  # no temporary or discarded folder left beside it

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnbench"):
        again = _load(_module(local, cache))
    assert again.cache_hit is True and _rows(again) == rows
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_reading_writes_nothing_into_the_entry_and_ignores_stale_index_files(pristine, tmp_path, caplog):
    """The sample caps select rows in memory: setup writes no ``cache-*.arrow`` index file into the entry, and a
    damaged one left there by other code is never read."""
    local, entry, rows, files = pristine
    assert not [name for name in files if "cache-" in name]
    cache = tmp_path / "cache"
    copy = cache / entry.name
    shutil.copytree(entry, copy)
    stale = []
    for split in SPLITS:  # what datasets' shuffle writes beside a dataset loaded from disk, then damaged
        datasets.load_from_disk(str(copy / split)).shuffle(seed=1234)  # data.split_seed's default
        stale += sorted((copy / split).glob("cache-*.arrow"))
    assert len(stale) == 3
    for path in stale:
        _truncate(path)
    before = _files(copy)

    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm = _load(_module(local, cache))
    assert dm.cache_hit is True and _rows(dm) == rows
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert _files(copy) == before
