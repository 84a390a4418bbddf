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
import subprocess
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
    (entry / "meta.json.sha256").unlink()  # unchecked, as in an entry written before sidecars
    return entry / "tokenizer.json"  # the tokenizer no longer matches the entry


def _flip_middle(path: Path) -> Path:
    """Invert one byte in the middle of ``path`` (the same length: the file still parses)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def _same_length_edit(path: Path, old: str, new: str) -> Path:
    """Replace the first ``old`` by ``new`` (of the same length) in the text file ``path``."""
    text = path.read_text()
    assert len(old) == len(new) and old in text
    path.write_text(text.replace(old, new, 1))
    return path


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
    # damage that still parses: only the SHA-256 sidecars find it
    "train arrow byte flipped": lambda e: _flip_middle(_data_file(e, "train")),
    "test arrow byte flipped": lambda e: _flip_middle(_data_file(e, "test")),
    "tokenizer.json token renamed": lambda e: _same_length_edit(e / "tokenizer.json", '"the":', '"thx":'),
    "meta.json label renamed": lambda e: _same_length_edit(e / "meta.json", '"0"', '"9"'),
    "tokenizer.json sidecar garbage": lambda e: (_write(e / "tokenizer.json.sha256", "not a digest"),
                                                 e / "tokenizer.json")[1],
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


def test_a_flipped_byte_still_parses_into_other_rows(pristine, tmp_path):
    """Why the sidecars are needed: an Arrow file with one byte inverted in its payload loads without an error
    and holds other token ids, which a reader without the digest check would train on."""
    _, entry, rows, _ = pristine
    copy = tmp_path / entry.name
    shutil.copytree(entry, copy)
    _flip_middle(_data_file(copy, "train"))
    damaged = datasets.load_from_disk(str(copy / "train"))
    clean = datasets.load_from_disk(str(entry / "train"))
    assert len(damaged) == len(clean) and damaged["input_ids"] != clean["input_ids"]


def test_every_file_of_an_entry_has_a_sha256sum_sidecar(pristine):
    """Each file of the entry has ``<file>.sha256`` in sha256sum's format: ``sha256sum -c`` accepts all."""
    _, entry, _, files = pristine
    data_files = sorted(name for name in files if not name.endswith(".sha256"))
    assert data_files == sorted(name[: -len(".sha256")] for name in files if name.endswith(".sha256"))
    assert {"meta.json", "tokenizer.json", "train/data-00000-of-00001.arrow"} <= set(data_files)
    for name in data_files:
        side = entry / f"{name}.sha256"
        proc = subprocess.run(["sha256sum", "-c", side.name], cwd=side.parent, capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0 and proc.stdout == f"{Path(name).name}: OK\n", proc.stdout + proc.stderr


def test_an_entry_without_sidecars_is_read_as_before(pristine, tmp_path, caplog):
    """An entry written before sidecars (or with its sidecars deleted) is a cache hit, read unchecked; reading
    adds no sidecar to it."""
    local, entry, rows, files = pristine
    cache = tmp_path / "cache"
    copy = cache / entry.name
    shutil.copytree(entry, copy)
    for side in copy.rglob("*.sha256"):
        side.unlink()
    before = _files(copy)
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm = _load(_module(local, cache))
    assert dm.cache_hit is True and _rows(dm) == rows
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert _files(copy) == before


def test_a_run_on_a_damaged_cache_rebuilds_it_and_ends_as_on_the_pristine_one(pristine, tmp_path, caplog):
    """Two one-epoch runs on the same config: the second meets a training Arrow file with one byte inverted. It
    still parses, into other token ids (a run trained on them ends with val/loss 0.72264 and test/loss 0.75001
    instead of 0.72313 and 0.75035); the run logs one warning naming the file, rebuilds the entry, and its
    metrics equal the first run's."""
    from hydra import compose, initialize_config_dir

    from attnbench.run.train import train

    from .conftest import REPO_ROOT

    local, _, _, _ = pristine
    cache = tmp_path / "cache"

    def run(out: Path) -> dict:
        overrides = ["data=sst2", f"data.local_dir={local}", f"data.cache_dir={cache}", "data.max_length=32",
                     "data.max_train_samples=null", "data.max_eval_samples=10", "data.batch_size=32", "model=tiny",
                     "logger=csv", "trainer.max_epochs=1",
                     "trainer.enable_progress_bar=false", "trainer.num_sanity_val_steps=0",
                     "callbacks.run_stats.warmup_steps=1", "~callbacks.attention_diagnostics",
                     "~callbacks.attention_maps", f"+output_dir={out}"]
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            train(compose("train", overrides=overrides))
        return json.loads((out / "metrics.json").read_text())

    first = run(tmp_path / "first")
    (entry,) = cache.iterdir()
    damaged = _flip_middle(_data_file(entry, "train"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attnbench"):
        second = run(tmp_path / "second")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                and "cache" in r.getMessage()]
    assert len(warnings) == 1 and str(damaged) in warnings[0] and "Rebuilding" in warnings[0], warnings
    assert "sha256" in warnings[0]
    for key in ("test/acc", "test/loss", "val/loss", "train/loss"):
        assert second[key] == first[key], key
