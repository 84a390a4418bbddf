"""The data's identity: a setting that changes the tokenized splits is applied and is in the cache key, and a
setting outside the key changes nothing that is cached (docs/data.md, Tokenizer and cache: "cached ... under a
key of every setting that changes them (source, columns, splits, carving, tokenizer settings, max_length)").

A key that differs proves nothing by itself: each test here builds the data and compares what was built (the
vocabulary, the token ids, the labels, the rows), so a setting that reaches the key but not the trainer (or the
reverse) fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import string
from collections import Counter
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import pytest

from attnbench.data import TextClassificationDataModule
from attnbench.data.config import TOKENIZER_DEFAULTS, DataConfig
from attnbench.data.tokenizer import train_tokenizer

# ------------------------------------------------------------------------------------- min_frequency applied
COMMON = ["the", "film", "was", "good", "bad", "actor", "story", "plot", "great", "dull", "scene", "music"]


def corpus(n: int = 200, seed: int = 0) -> list[str]:
    """``n`` texts of common words, each with one made-up word of 6-9 letters that occurs in no other text."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        unique = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(6, 9)))
        words = [rng.choice(COMMON) for _ in range(5)] + [unique]
        rng.shuffle(words)
        texts.append(" ".join(words))
    return texts


def learned_word_starts(kind: str, vocab: dict[str, int]) -> list[str]:
    """The learned tokens that start a word, as the word's letters (multi-letter; specials and ``##``/mid-word
    pieces excluded): WordPiece's tokens without ``##``, byte-level BPE's tokens after ``Ġ`` (its space)."""
    if kind == "wordpiece":
        return [t for t in vocab if not t.startswith(("##", "[")) and len(t) >= 2]
    return [t[1:] for t in vocab if t.startswith("Ġ") and len(t) >= 3]


@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe"])
def test_min_frequency_reaches_the_trainer(kind):
    """``data.tokenizer.min_frequency`` (default 2; docs/data.md, Defaults) is applied by every kind that learns
    a vocabulary: with 2, no learned word-initial token starts fewer than 2 words of the corpus (counted here
    with a Counter over the corpus' words, independently of the tokenizer); with 1, the words seen once are
    learned whole, so the vocabularies differ. (``bytes`` learns nothing and ignores it.)"""
    texts = corpus()
    words = Counter(w for t in texts for w in t.split())
    once = {w for w, c in words.items() if c == 1}
    assert len(once) >= 150  # the made-up words

    def starts(token: str) -> int:  # word occurrences that begin with token
        return sum(c for w, c in words.items() if w.startswith(token))

    vocab = {mf: train_tokenizer(texts, kind, 5000, True, mf, 32).get_vocab() for mf in (1, 2)}
    assert set(vocab[1]) != set(vocab[2])
    learned1, learned2 = learned_word_starts(kind, vocab[1]), learned_word_starts(kind, vocab[2])
    assert len(once & set(learned1)) >= 100, "min_frequency=1 should learn the words seen once whole"
    rare = sorted(t for t in learned2 if starts(t) < 2)
    assert not rare, f"{kind} with min_frequency=2 learned tokens that start fewer than 2 words: {rare[:10]}"
    assert all(starts(t) >= 2 for t in learned2) and COMMON[0] in learned2


def test_bytes_ignores_min_frequency_and_vocab_size():
    """docs/data.md: ``bytes`` learns nothing (258 ids with [PAD] and [UNK]) whatever min_frequency/vocab_size."""
    texts = corpus(20)
    a = train_tokenizer(texts, "bytes", 5000, True, 1, 32).get_vocab()
    b = train_tokenizer(texts, "bytes", 100, True, 2, 32).get_vocab()
    assert a == b and len(a) == 258


# ----------------------------------------------------------------------------------------- toy files, builds
def toy_frame(n: int = 48, seed: int = 0) -> pd.DataFrame:
    """Mixed-case texts of 6-24 words (longer than ``max_length`` 16 sometimes), two text and label columns."""
    rng = random.Random(seed)
    vocab = ["Good", "bad", "Film", "plot", "ACTOR", "music", "Scene", "dull", "great", "story", "long", "Short",
             "odd", "new", "old", "Funny", "sad", "slow", "fast", "Dark"]
    rows = []
    for i in range(n):
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(6, 24))) + f" number{i}"
        other = " ".join(rng.choice(vocab) for _ in range(rng.randint(3, 8))) + f" item{i}"
        rows.append({"text": text, "label": i % 2, "text2": other, "label2": (i // 2) % 2,
                     "pair": " ".join(rng.choice(vocab) for _ in range(4))})
    return pd.DataFrame(rows)


def write_files(root: Path, frame: pd.DataFrame, fmt: str = "csv") -> dict[str, str]:
    """train/train2/validation/test files of ``frame`` (disjoint row ranges) in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    parts = {"train": frame.iloc[:30], "train2": frame.iloc[6:36], "validation": frame.iloc[30:38],
             "test": frame.iloc[38:]}
    files = {}
    for split, part in parts.items():
        path = root / f"{split}.{fmt}"
        part.to_csv(path, index=False) if fmt == "csv" else part.to_parquet(path, index=False)
        files[split] = str(path)
    return files


def build(cache: Path, **data: Any) -> tuple[Path, bool, dict]:
    """Build the cache of ``data`` (toy defaults below) in ``cache``: (its folder, whether it was a hit, what it
    holds: the vocabulary, every split's token ids, labels and source rows, and the label names)."""
    args = {"name": "toy", "hub_id": None, "local_dir": None, "cache_dir": str(cache), "val_size": 4,
            "max_length": 16, "tokenizer": {"vocab_size": 120, "min_frequency": 1}, **data}
    module = TextClassificationDataModule(**args)
    module.prepare_data()
    folder = module.cache_dir
    held = {"vocab": json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"],
            "label_names": json.loads((folder / "meta.json").read_text())["label_names"]}
    for split in ("train", "val", "test"):
        ds = datasets.load_from_disk(str(folder / split))
        held[split] = (ds["input_ids"], ds["label"], ds["row_id"])
    return folder, module.cache_hit, held


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    files = write_files(root / "files", toy_frame())
    only = {s: files[s] for s in ("train", "test")}
    return root, files, only


# --------------------------------------------------------------------------------- data edited in place
@contextlib.contextmanager
def same_mtimes(folder: Path):
    """Rewrite the files under ``folder`` inside the ``with`` and give them back their old modification times:
    an edit within the file system's timestamp resolution (1-2 s on some), which HF ``datasets``' fingerprint of
    a local file (its path and mtime) does not see."""
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    yield
    for path, mtime_ns in before.items():
        os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_data_file_edited_in_place_is_rebuilt(tmp_path, fmt):
    """docs/data.md: the cache key includes the source data (its fingerprint), not only its path: a local file
    rewritten in place with other rows (its modification time kept) is a cache miss, and the next build holds
    the new rows and words
    (``data.data_files`` as CSV; the ``<local_dir>/<name>/<split>.parquet`` mirror layout for Parquet)."""
    frame = toy_frame()
    if fmt == "csv":
        files = write_files(tmp_path / "files", frame)
        data = {"data_files": {s: files[s] for s in ("train", "test")}}
    else:
        root = tmp_path / "mirror"
        write_files(root / "toy", frame, "parquet")
        data = {"local_dir": str(root), "hub_id": "nobody/toy"}
    first, hit, before = build(tmp_path / "cache", **data)
    assert hit is False
    edited = frame.assign(text=frame["text"].str.replace("plot", "zeppelin", regex=False) + " zeppelin")
    edited = pd.concat([edited, edited.iloc[:6].assign(text="zeppelin rows added")], ignore_index=True)
    with same_mtimes(tmp_path / "files" if fmt == "csv" else root / "toy"):
        write_files(tmp_path / "files", edited) if fmt == "csv" else write_files(root / "toy", edited, "parquet")
    second, hit, after = build(tmp_path / "cache", **data)
    assert hit is False and second != first, "an edited data file reused the stale cache"
    assert "zeppelin" in after["vocab"] and "zeppelin" not in before["vocab"]
    assert len(after["test"][0]) == len(edited) - 38 != len(before["test"][0])
    third, hit, again = build(tmp_path / "cache", **data)
    assert hit is True and third == second and again == after


# ------------------------------------------------------------------------ every setting: key vs built data
# Settings in the cache key that change what is built: (base overrides, the changed value). The base is the
# toy: train.csv/test.csv, validation carved (val_size 4), max_length 16, WordPiece 120 (its corpus has 150:
# the size binds), min_frequency 1.
CHANGES = {
    "data_files": ({}, "train2"),  # another file as train
    "text_column": ({}, "text2"),
    "text_pair_column": ({}, "pair"),
    "label_column": ({}, "label2"),
    "train_split": ({"files": ("train", "train2", "test")}, "train2"),
    "val_split": ({"files": ("train", "validation", "test")}, None),  # the file's split -> carved
    "test_split": ({}, None),  # the test file -> a carved test set
    "test_size": ({"test_split": None}, 6),
    "cv_folds": ({"test_split": None}, 3),
    "fold": ({"test_split": None, "cv_folds": 3}, 1),
    "val_size": ({}, 8),
    "split_seed": ({}, 7),
    "max_length": ({}, 4),
    "tokenizer.kind": ({}, "byte_bpe"),
    "tokenizer.vocab_size": ({}, 60),
    "tokenizer.lowercase": ({}, False),
    "tokenizer.min_frequency": ({"tokenizer": {"vocab_size": 5000, "min_frequency": 1}}, 2),  # a size that does not bind: all merges
}
# Settings in the key that name where or what the data is without changing these rows (over-keying costs a
# rebuild, never a stale cache), with why.
IDENTITY = {
    "name": "the dataset's name: the mirror layout's folder <local_dir>/<name>/ and the cache folder's prefix",
    "builder": "the same bytes read by another builder are another table (or an error)",
    "generator": "a generated task instead of read rows (its settings and seed key it: test_data_generated.py)",
}
# Settings outside the key: applied after the cache is read, or only where the data is looked up; changing them
# must leave the built data identical (checked by a fresh build in another cache folder).
NO_EFFECT = {
    "hub_id": "x/y", "hub_config": "other", "local_dir": "/nonexistent", "packaged": False, "batch_size": 3,
    "eval_batch_size": 5, "num_workers": 1, "max_train_samples": 5, "max_eval_samples": 2, "batching": "random",
    "megabatch_size": 3, "cache_dir": None,
    # a generated task's settings: read rows ignore them (with data.generator set, they are in the key and
    # change the rows: tests/test_data_generated.py)
    "num_pairs": 4, "num_keys": 12, "num_values": 5, "num_train": 100,
}


def settings() -> set[str]:
    names = {f.name for f in dataclasses.fields(DataConfig)} - {"tokenizer"}
    return names | {f"tokenizer.{k}" for k in TOKENIZER_DEFAULTS}


def test_every_data_setting_is_classified():
    """Every ``data.*`` key of ``DataConfig`` (and every tokenizer setting) is in exactly one of CHANGES,
    IDENTITY, NO_EFFECT: a new setting cannot join the data without a test of whether the key must hold it."""
    groups = [set(CHANGES), set(IDENTITY), set(NO_EFFECT)]
    assert sum(map(len, groups)) == len(set().union(*groups)), "a setting is classified twice"
    assert set().union(*groups) == settings()


def overrides(files: dict[str, str], base: dict, key: str | None = None, value: Any = None) -> dict[str, Any]:
    names = base.get("files", ("train", "test"))
    data = {"data_files": {s: files[s] for s in names}, **{k: v for k, v in base.items() if k != "files"}}
    if key is None:
        return data
    if key == "data_files":
        data["data_files"] = {**data["data_files"], "train": files[value]}
    elif key.startswith("tokenizer."):
        data["tokenizer"] = {"vocab_size": 120, "min_frequency": 1, **base.get("tokenizer", {}),
                             key.split(".", 1)[1]: value}
    else:
        data[key] = value
    return data


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_a_keyed_setting_changes_the_built_data(toy, key):
    """Each setting in the cache key that the docs say changes the tokenized splits (source, columns, splits,
    carving, tokenizer settings, max_length) gives another cache folder *and* other built data (vocabulary,
    ids, labels or rows), so it is really applied; the same setting again is a hit."""
    root, files, _ = toy
    base, value = CHANGES[key]
    cache = root / f"cache-{key}"
    first, _, before = build(cache, **overrides(files, base))
    other, hit, after = build(cache, **overrides(files, base, key, value))
    assert hit is False and other != first, f"data.{key}={value!r} reused the cache of the base config"
    assert after != before, f"data.{key}={value!r} is in the key but built the same data"
    again, hit, _ = build(cache, **overrides(files, base, key, value))
    assert hit is True and again == other


@pytest.mark.parametrize("key", sorted(NO_EFFECT))
def test_a_setting_outside_the_key_changes_nothing_cached(toy, key):
    """A ``data.*`` setting that is not in the cache key (batching, batch sizes, sample caps, where the data
    would be looked up otherwise, the cache folder) leaves the cache key and, built from scratch in another
    cache folder, every built byte the same: no setting that changes the data is missing from the key."""
    root, files, _ = toy
    first, _, before = build(root / f"base-{key}", **overrides(files, {}))
    value = NO_EFFECT[key]
    data = overrides(files, {}, key, value)
    cache = root / f"other-{key}"
    if key == "cache_dir":
        data["cache_dir"] = str(root / f"elsewhere-{key}")
    other, hit, after = build(cache, **data)
    assert hit is False and other.name == first.name, f"data.{key}={value!r} changed the cache key"
    assert after == before, f"data.{key}={value!r} is not in the cache key but changed the built data"


def test_identity_settings_are_in_the_key(toy, tmp_path):
    """``data.name`` names the cache folder (two datasets never share one): another name is another folder."""
    root, files, _ = toy
    first, _, before = build(tmp_path, **overrides(files, {}))
    other, hit, after = build(tmp_path, **overrides(files, {}, "name", "toy2"))
    assert hit is False and other != first and after == before


def test_a_same_size_edit_of_the_labels_is_rebuilt(tmp_path):
    """An in-place edit that keeps the file's size, row count and modification time (every label flipped, one
    byte for one byte) is still another source: a cache miss whose built labels are the flipped ones."""
    frame = toy_frame()
    files = write_files(tmp_path / "files", frame)
    data = {"data_files": {s: files[s] for s in ("train", "test")}}
    first, _, before = build(tmp_path / "cache", **data)
    size = Path(files["train"]).stat().st_size
    with same_mtimes(tmp_path / "files"):
        write_files(tmp_path / "files", frame.assign(label=1 - frame["label"]))
    assert Path(files["train"]).stat().st_size == size
    second, hit, after = build(tmp_path / "cache", **data)
    assert hit is False and second != first
    assert after["test"][1] == [1 - y for y in before["test"][1]] and after["test"][0] == before["test"][0]


def test_the_mirror_layouts_folder_and_name_pick_the_data_and_are_in_the_key(tmp_path):
    """``data.local_dir`` and ``data.name`` choose the Parquet files (``<local_dir>/<name>/<split>.parquet``):
    another folder or name with other rows is another cache with other data, never the first one's."""
    write_files(tmp_path / "a" / "toy", toy_frame(seed=0), "parquet")
    write_files(tmp_path / "b" / "toy", toy_frame(seed=1), "parquet")
    write_files(tmp_path / "a" / "toy2", toy_frame(seed=2), "parquet")
    cache = tmp_path / "cache"
    first, _, base = build(cache, local_dir=str(tmp_path / "a"), hub_id="nobody/toy")
    for other in ({"local_dir": str(tmp_path / "b")}, {"local_dir": str(tmp_path / "a"), "name": "toy2"}):
        folder, hit, held = build(cache, **{"local_dir": str(tmp_path / "a"), "hub_id": "nobody/toy", **other})
        assert hit is False and folder != first and held != base, other
