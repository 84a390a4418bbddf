"""Bad data a user can meet: each gives one message that says what to change, and leaves no half-written cache."""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import pytest

import attnbench.data as data_mod
from attnbench.data import DataConfigError, DataUnavailableError, TextClassificationDataModule

WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull"]
POS_NEG = datasets.ClassLabel(names=["negative", "positive"])


def rows(n: int, offset: int = 0) -> dict[str, list]:
    """n short texts with alternating labels 0/1."""
    return {"text": [f"{WORDS[(i + offset) % 8]} movie {WORDS[(3 * i) % 8]} plot" for i in range(n)],
            "label": [i % 2 for i in range(n)]}


def write_split(root: Path, split: str, data: dict[str, list], features: datasets.Features | None = None,
                name: str = "toy") -> Path:
    """``<root>/<name>/<split>.parquet`` in the layout of ../shared/data (HF features in the schema metadata)."""
    if features is None:
        features = datasets.Features({"text": datasets.Value("string"), "label": POS_NEG})
    path = root / name / f"{split}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(data, features=features).to_parquet(str(path))
    return path


def toy_module(root: Path, cache: Path, **kwargs) -> TextClassificationDataModule:
    args = {"name": "toy", "hub_id": "nobody/toy", "text_column": "text", "label_column": "label",
            "train_split": "train", "test_split": "test", "local_dir": str(root), "cache_dir": str(cache),
            "val_size": 4, "max_length": 16, "tokenizer": {"vocab_size": 200, "min_frequency": 1}, **kwargs}
    return TextClassificationDataModule(**args)


@pytest.fixture
def hub_offline(monkeypatch):
    def offline(path, *args, **kwargs):
        if path == "parquet":  # local files still load
            return REAL_LOAD(path, *args, **kwargs)
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(data_mod.datasets, "load_dataset", offline)


REAL_LOAD = datasets.load_dataset


def assert_nothing_cached(cache: Path) -> None:
    assert not cache.exists() or not any(cache.iterdir()), list(cache.iterdir())


def test_local_dir_set_but_a_file_missing_names_it(tmp_path, hub_offline):
    write_split(tmp_path / "data", "train", rows(20))
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    with pytest.raises(DataUnavailableError) as err:
        dm.prepare_data()
    msg = str(err.value)
    assert "missing: test.parquet; the folder holds ['train.parquet']" in msg
    assert "Hugging Face Hub (nobody/toy) failed: ConnectionError" in msg and "data.local_dir" in msg
    assert_nothing_cached(tmp_path / "cache")


@pytest.mark.parametrize("key, value, message", [
    ("text_column", "sentence", ("toy/train has no column 'sentence'; its columns are ['text', 'label']. "
                                "Set data.text_column / data.label_column.")),
    ("label_column", "stars", "toy/train has no column 'stars'; its columns are ['text', 'label']."),
])
def test_missing_column_names_the_columns_there_are(tmp_path, key, value, message):
    for split in ("train", "test"):
        write_split(tmp_path / "data", split, rows(20))
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache", **{key: value}).prepare_data()
    assert message in str(err.value)
    assert_nothing_cached(tmp_path / "cache")


def test_empty_and_whitespace_texts_are_dropped_and_counted(tmp_path, caplog):
    train = rows(30)
    for i in (1, 5, 9):
        train["text"][i] = " \t\n" if i == 5 else ""
    test = rows(10)
    test["text"][0] = None
    write_split(tmp_path / "data", "train", train)
    write_split(tmp_path / "data", "test", test)
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm.setup()
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == 27 and len(dm.splits["test"]) == 9
    kept = set(dm.splits["train"].row_ids) | set(dm.splits["val"].row_ids)
    assert kept == set(range(30)) - {1, 5, 9}
    assert "toy: dropped empty texts (null, no visible character: only whitespace, zero-width, format or control characters, or no token once tokenized): train 3, test 1." in caplog.text


PLAIN = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("int64")})


@pytest.mark.parametrize("split, labels, message", [
    ("test", [-1] * 10, ("toy/test: 10 of 10 rows have labels outside the class set 0..1 (-1). Labels of -1 mark "
                        "an unlabeled split (like SST-2's Hub test split): it cannot be trained or tested on; use a "
                        "labeled split as data.test_split (SST-2: validation).")),
    ("test", [0, 1, 2, 1, 0] * 2, ("toy/test: 2 of 10 rows have labels outside the class set 0..1 (2). Labels must "
                                  "be integers 0..1 (['negative', 'positive']); fix the file or set "
                                  "data.label_column.")),
    ("train", [0, 1, 7, 1, 0] * 6, ("toy/train: 6 of 30 rows have labels outside the class set 0..2 (7). Integer "
                                   "labels must run 0..K-1 without gaps (train has ['0', '1', '7']); renumber them")),
])
def test_labels_outside_the_class_set(tmp_path, split, labels, message):
    data = {"train": rows(30), "test": rows(10)}
    data[split]["label"] = labels
    for name, d in data.items():  # a ClassLabel column cannot hold -1 or 2: such files carry plain ints
        write_split(tmp_path / "data", name, d, features=PLAIN if name == split else None)
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache").prepare_data()
    assert message in str(err.value)
    assert_nothing_cached(tmp_path / "cache")


def test_non_utf8_bytes_are_decoded_with_replacement_and_counted(tmp_path, caplog):
    binary = datasets.Features({"text": datasets.Value("binary"), "label": POS_NEG})
    train = {"text": [t.encode() for t in rows(30)["text"]], "label": rows(30)["label"]}
    train["text"][3] = b"caf\xe9 movie good"  # Latin-1, not UTF-8
    train["text"][4] = "naïve plot".encode()  # valid UTF-8 bytes
    write_split(tmp_path / "data", "train", train, features=binary)
    write_split(tmp_path / "data", "test", {"text": [b"good movie"] * 10, "label": [0, 1] * 5}, features=binary)
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm.setup()
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == 30
    assert "texts with bytes that are not UTF-8, decoded with U+FFFD replacement characters: train 1." in caplog.text


def test_texts_longer_than_max_length_are_truncated_and_counted(tmp_path, caplog):
    train = rows(30)
    train["text"][0] = " ".join(WORDS * 50)  # 400 words
    write_split(tmp_path / "data", "train", train)
    write_split(tmp_path / "data", "test", {"text": [" ".join(WORDS * 5)] * 4, "label": [0, 1, 0, 1]})
    dm = toy_module(tmp_path / "data", tmp_path / "cache", max_length=8)
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm.setup()
    assert max(len(ids) for s in ("train", "val", "test") for ids in dm.splits[s].input_ids) == 8
    assert "texts longer than data.max_length=8 tokens, truncated:" in caplog.text
    # what truncation removed, per column: each truncated text's untruncated length - 8
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(dm.cache_dir / "tokenizer.json"))
    tok.no_truncation()
    cut = sum(len(tok.encode(t).ids) - 8 for t in [train["text"][0]] + [" ".join(WORDS * 5)] * 4)
    assert cut > 5 * 30
    assert ("test 4 of 4 (raise data.max_length to keep more of them); truncation removed, per text column: "
            f"text {cut:,} tokens from 5 rows." in caplog.text)


def test_single_class_dataset_is_refused(tmp_path):
    write_split(tmp_path / "data", "train", {"text": rows(30)["text"], "label": [1] * 30})
    write_split(tmp_path / "data", "test", rows(10))
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache").prepare_data()
    assert ("toy/train: only 1 class(es) present in label column 'label' (['1']); a classifier needs >= 2."
            in str(err.value))
    assert_nothing_cached(tmp_path / "cache")


# ---------------------------------------------------------------- beyond the list: what a new user tried
def test_a_file_that_is_not_parquet_is_named(tmp_path):
    write_split(tmp_path / "data", "train", rows(20))
    bad = tmp_path / "data" / "toy" / "test.parquet"
    bad.write_text("text,label\ngood movie,1\n")  # a CSV saved under a .parquet name
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache").prepare_data()
    assert f"Cannot read {bad} as Parquet (" in str(err.value) and "to_parquet" in str(err.value)


def test_string_labels_become_classes(tmp_path):
    strings = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("string")})
    to_str = {0: "neg", 1: "pos"}
    for split, n in (("train", 30), ("test", 10)):
        d = rows(n)
        write_split(tmp_path / "data", split, {"text": d["text"], "label": [to_str[y] for y in d["label"]]},
                    features=strings)
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    dm.setup()
    assert dm.label_names == ["neg", "pos"]
    assert dm.splits["test"].labels == [0, 1] * 5


def test_numbers_in_the_text_column_are_refused(tmp_path):
    ints = datasets.Features({"text": datasets.Value("int64"), "label": POS_NEG})
    for split in ("train", "test"):
        write_split(tmp_path / "data", split, {"text": list(range(10)), "label": [0, 1] * 5}, features=ints)
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache").prepare_data()
    assert "toy/train: text column 'text' holds int values (e.g. 0), not text. Set data.text_column" in str(err.value)


@pytest.mark.parametrize("key, value, message", [
    ("max_length", 0, "data.max_length must be an integer >= 1, got 0"),
    ("batch_size", -4, "data.batch_size must be an integer >= 1, got -4"),
    ("max_train_samples", 0, "data.max_train_samples must be an integer >= 1 or null, got 0"),
    ("num_workers", -1, "data.num_workers must be an integer >= 0, got -1"),
])
def test_bad_sizes_are_refused_at_construction(tmp_path, key, value, message):
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path, tmp_path / "cache", **{key: value})
    assert str(err.value) == message


# ------------------------------------------------------------- the same faults in CSV and JSON Lines files (issue 12)
def write_file(root: Path, split: str, data: dict[str, list], fmt: str) -> str:
    """``<root>/<split>.<fmt>`` written with pandas (as a user exports their own data)."""
    import pandas as pd

    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{split}.{fmt}"
    df = pd.DataFrame(data)
    if fmt == "csv":
        df.to_csv(path, index=False)
    else:
        df.to_json(path, orient="records", lines=True)
    return str(path)


def files_module(tmp_path: Path, fmt: str, train: dict, test: dict, **kwargs) -> TextClassificationDataModule:
    files = {"train": write_file(tmp_path / "files", "train", train, fmt),
             "test": write_file(tmp_path / "files", "test", test, fmt)}
    return toy_module(tmp_path / "nowhere", tmp_path / "cache", data_files=files, **kwargs)


FORMATS = ["csv", "jsonl"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key, value, message", [
    ("text_column", "sentence", ("toy/train has no column 'sentence'; its columns are ['text', 'label']. "
                                "Set data.text_column / data.label_column.")),
    ("label_column", "stars", "toy/train has no column 'stars'; its columns are ['text', 'label']."),
])
def test_missing_column_in_csv_and_jsonl(tmp_path, fmt, key, value, message):
    with pytest.raises(DataConfigError) as err:
        files_module(tmp_path, fmt, rows(20), rows(10), **{key: value}).prepare_data()
    assert message in str(err.value)
    assert_nothing_cached(tmp_path / "cache")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("split, labels, message", [
    ("test", [-1] * 10, ("toy/test: 10 of 10 rows have labels outside the class set 0..1 (-1). Labels of -1 mark "
                        "an unlabeled split")),
    ("train", [0, 1, 7, 1, 0] * 6, ("toy/train: 6 of 30 rows have labels outside the class set 0..2 (7). Integer "
                                   "labels must run 0..K-1 without gaps (train has ['0', '1', '7']); renumber them")),
    ("train", [1] * 30, "toy/train: only 1 class(es) present in label column 'label' (['1']); a classifier needs >= 2."),
])
def test_label_faults_in_csv_and_jsonl(tmp_path, fmt, split, labels, message):
    data = {"train": rows(30), "test": rows(10)}
    data[split]["label"] = labels
    with pytest.raises(DataConfigError) as err:
        files_module(tmp_path, fmt, data["train"], data["test"]).prepare_data()
    assert message in str(err.value)
    assert_nothing_cached(tmp_path / "cache")


@pytest.mark.parametrize("fmt", FORMATS)
def test_string_labels_outside_the_training_classes_in_csv_and_jsonl(tmp_path, fmt):
    train = {"text": rows(30)["text"], "label": ["neg", "pos"] * 15}
    test = {"text": rows(10)["text"], "label": ["neg", "pos", "neutral", "pos", "neg"] * 2}
    with pytest.raises(DataConfigError) as err:
        files_module(tmp_path, fmt, train, test).prepare_data()
    assert ("toy/test: 2 of 10 rows have labels outside the class set 0..1 ('neutral'). This class is in test only: "
            "train has the classes ['neg', 'pos']") in str(err.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_texts_in_csv_and_jsonl_are_dropped_and_counted(tmp_path, fmt, caplog):
    train = rows(30)
    for i in (1, 5, 9):
        train["text"][i] = " \t " if i == 5 else ""
    test = rows(10)
    test["text"][0] = None
    dm = files_module(tmp_path, fmt, train, test)
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm.setup()
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == 27 and len(dm.splits["test"]) == 9
    assert "toy: dropped empty texts (null, no visible character: only whitespace, zero-width, format or control characters, or no token once tokenized): train 3, test 1." in caplog.text


@pytest.mark.parametrize("fmt", FORMATS)
def test_numbers_in_the_text_column_of_csv_and_jsonl_are_refused(tmp_path, fmt):
    with pytest.raises(DataConfigError) as err:
        files_module(tmp_path, fmt, {"text": list(range(10)), "label": [0, 1] * 5},
                     {"text": list(range(4)), "label": [0, 1] * 2}).prepare_data()
    assert "toy/train: text column 'text' holds int values (e.g. 0), not text. Set data.text_column" in str(err.value)


@pytest.mark.parametrize("fmt, content", [("csv", b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary"),
                                          ("jsonl", b'{"text": "good", "label": 1}\nnot json at all\n')])
def test_an_unreadable_csv_or_jsonl_file_is_named(tmp_path, fmt, content):
    dm = files_module(tmp_path, fmt, rows(20), rows(10))
    bad = tmp_path / "files" / f"test.{fmt}"
    bad.write_bytes(content)
    with pytest.raises(DataConfigError) as err:
        dm.prepare_data()
    assert f"Cannot read {bad} as {fmt.upper()} (" in str(err.value) and "data.data_files" in str(err.value)
    assert_nothing_cached(tmp_path / "cache")


def test_a_missing_data_file_is_named(tmp_path):
    """Refused where the source is resolved (the command line's preflight, before torch; here prepare_data)."""
    (tmp_path / "train.csv").write_text("text,label\ngood,1\n")
    dm = toy_module(tmp_path, tmp_path / "cache", data_files={"train": str(tmp_path / "train.csv"),
                                                                "test": str(tmp_path / "test.csv")})
    with pytest.raises(DataConfigError) as err:
        dm.prepare_data()
    assert str(err.value) == (f"data.data_files.test: no file {tmp_path / 'test.csv'} (split 'test'). Set "
                              "data.data_files.test to an existing file (the syntax, with examples: docs/data.md).")


@pytest.mark.parametrize("files, key", [({"train": "nope.csv"}, "data.data_files.train"),
                                        ("nope.csv", "data.data_files"), (["nope.csv"], "data.data_files")])
def test_a_misspelt_data_file_is_named_before_the_missing_test_entry(tmp_path, monkeypatch, files, key):
    """Before: `data.data_files={train: <misspelt>}` (no test entry) said "data.data_files has no 'test' entry"
    and nothing about the file; the missing file, relative to the launch directory, and its key come first."""
    monkeypatch.chdir(tmp_path)
    dm = toy_module(tmp_path, tmp_path / "cache", data_files=files)
    with pytest.raises(DataConfigError) as err:
        dm.prepare_data()
    assert str(err.value).startswith(f"{key}: no file nope.csv (split 'train'; from the launch directory: "
                                     f"{tmp_path.resolve() / 'nope.csv'}). Set {key} to an existing file")
    assert "'test' entry" not in str(err.value)
    (tmp_path / "nope.csv").write_text("text,label\ngood,1\n")  # the file there: then the split entries
    with pytest.raises(DataConfigError) as err:
        dm.prepare_data()
    assert str(err.value).startswith("data.data_files has no 'test' entry; it has ['train']. Add it, or set "
                                     "data.test_split=null")
    assert_nothing_cached(tmp_path / "cache")


@pytest.mark.parametrize("kwargs, message", [
    ({"test_split": "train"}, "data.test_split='train' is data.train_split too"),
    ({"cv_folds": 10}, "data.cv_folds=10 holds out folds of the training split, but data.test_split='test'"),
    ({"test_split": None, "cv_folds": 1}, "data.cv_folds must be an integer >= 2 or null, got 1"),
    ({"test_split": None, "cv_folds": 10, "fold": 10}, "data.fold must be an integer in [0, 9] (data.cv_folds=10), got 10"),
    ({"test_size": 0}, "data.test_size must be a fraction in (0, 1) or a row count >= 1, got 0"),
    ({"builder": "xlsx"}, "data.builder must be one of csv, tsv, json, jsonl, parquet, text"),
    ({"data_files": {"test": "a.csv"}}, "data.data_files has no 'train' entry (data.train_split); it has ['test']"),
    ({"data_files": "a.xlsx", "test_split": None}, "data.builder is null and the extension of a.xlsx is not one of"),
    ({"text_pair_column": "text"}, "data.text_pair_column must name a column other than data.text_column"),
])
def test_bad_split_and_source_keys_are_refused_at_construction(tmp_path, kwargs, message):
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path, tmp_path / "cache", **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("key, value", [("val_size", 1.5), ("test_size", 2.5), ("val_size", 0.0), ("test_size", -3)])
def test_a_size_that_is_neither_a_fraction_nor_a_row_count_is_refused(tmp_path, key, value):
    """`data.val_size=1.5` was taken as int(1.5) = 1 validation row, silently (checkpoints chosen on one text)."""
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path, tmp_path / "cache", **{key: value, "test_split": None})
    assert str(err.value) == f"data.{key} must be a fraction in (0, 1) or a row count >= 1, got {value}"


@pytest.mark.parametrize("key, value", [("val_size", 3), ("val_size", 3.0), ("test_size", 0.25), ("test_size", 1)])
def test_fractions_and_whole_row_counts_are_accepted(tmp_path, key, value):
    dm = toy_module(tmp_path, tmp_path / "cache", **{key: value, "test_split": None})
    assert getattr(dm.cfg if hasattr(dm, "cfg") else dm, key) == value


@pytest.mark.parametrize(("typed", "value", "quoted"), [("nan", float("nan"), "nan"), ("1", 1, "1"),
                                                        ("true", True, "true")])
def test_a_dataset_name_the_command_line_reads_as_a_number_says_to_quote_it(typed, value, quoted):
    """`data.name=nan` reached the check as the float nan and was told "must be a non-empty string, got nan", which
    reads like a string: the message names the type the command line made of it and the quoted override."""
    from attnbench.data.config import DataConfig

    with pytest.raises(DataConfigError) as err:
        DataConfig(name=value, hub_id="nobody/toy")
    assert str(err.value).startswith(f"data.name must be a non-empty string, got {value!r} (a")
    assert str(err.value).endswith(f"quote it as a string, data.name='\"{quoted}\"')")
