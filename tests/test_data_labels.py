"""Labels a classifier cannot use get one message naming what they are (float, missing, mixed) and the split."""

from __future__ import annotations

import datasets
import pytest

from attnbench.data import DataConfigError

from .test_data_faults import assert_nothing_cached, files_module, rows, toy_module, write_split


def features(label_type: str) -> datasets.Features:
    return datasets.Features({"text": datasets.Value("string"), "label": datasets.Value(label_type)})


def write_labels(root, train_labels, test_labels, train_type, test_type=None) -> None:
    for split, labels, kind in (("train", train_labels, train_type), ("test", test_labels, test_type or train_type)):
        write_split(root, split, {"text": rows(len(labels))["text"], "label": labels}, features=features(kind))


def refused(tmp_path) -> str:
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache").prepare_data()
    assert_nothing_cached(tmp_path / "cache")
    return str(err.value)


@pytest.mark.parametrize("train, test, train_type, test_type, message", [
    # the three
    ([0.0, 1.0] * 15, [0.0, 1.0] * 5, "float64", None,
     "toy/train: label column 'label' holds floats (0.0, 1.0); class labels are integers 0..K-1 or class-name "
     "strings. They are whole numbers: store the column as integers"),
    ([0.0, 1.0, None] * 10, [0.0, 1.0] * 5, "float64", None,
     "toy/train: 10 of 30 rows have no label (None or NaN) in label column 'label' (rows 2, 5, 8, 11, 14, ...)."),
    (["0", "1"] * 15, [0, 1] * 5, "string", "int64",
     "toy: label column 'label' holds strings in train ('0', '1') but integers in test (0, 1); labels are matched "
     "by value across splits ('1' is not 1)"),
    # other instances of the kind
    ([0.2, 0.7, 0.9] * 10, [0.5] * 10, "float64", None,
     "toy/train: label column 'label' holds floats (0.2, 0.7, 0.9); class labels are integers 0..K-1 or "
     "class-name strings. Fractional values are not classes"),
    ([0, 1] * 15, [0, 1, 0, float("nan"), 1] * 2, "int64", "float64",
     "toy/test: 2 of 10 rows have no label (None or NaN) in label column 'label' (rows 3, 8)."),
    (["neg", "pos"] * 15, ["neg", None] * 5, "string", None,
     "toy/test: 5 of 10 rows have no label (None or NaN) in label column 'label' (rows 1, 3, 5, 7, 9)."),
    ([-2, 0, 1] * 10, [0, 1] * 5, "int64", None,
     "toy/train: 10 of 30 rows have negative labels (-2) in label column 'label'. Integer labels must run 0..K-1"),
    ([-1, 1] * 15, [0, 1] * 5, "int64", None,
     "toy/train: 15 of 30 rows have negative labels (-1) in label column 'label'. Labels of -1 mark an unlabeled"),
    ([0, 1] * 15, [0, 1, 2, 3, 1] * 2, "int64", None,
     "toy/test: 4 of 10 rows have labels outside the class set 0..1 (2, 3). These classes are in test only: train "
     "has the classes ['0', '1']"),
    (["neg", "pos"] * 15, ["neg", "pos", "mixed"] * 3 + ["neg"], "string", None,
     "toy/test: 3 of 10 rows have labels outside the class set 0..1 ('mixed'). This class is in test only"),
    ([0, 1, 10**12] * 10, [0, 1] * 5, "int64", None,
     "toy/train: 10 of 30 rows have labels outside the class set 0..2 (1000000000000). Integer labels must run "
     "0..K-1 without gaps (train has ['0', '1', '1000000000000'])"),
    (["neg", "pos"] * 15, [0, 1] * 5, "string", "int64",
     "toy: label column 'label' holds strings in train ('neg', 'pos') but integers in test (0, 1)"),
    (["neg", "pos", "1"] * 10, ["neg", "pos"] * 5, "string", None,
     "toy/train: label column 'label' mixes numbers ('1') and names ('neg', 'pos'); labels are matched by value"),
    ([True, False] * 15, [0, 1] * 5, "bool", "int64",
     "toy: label column 'label' holds booleans in train (False, True) but integers in test (0, 1)"),
])
def test_unusable_labels_are_named_with_their_split(tmp_path, train, test, train_type, test_type, message):
    write_labels(tmp_path / "data", train, test, train_type, test_type)
    assert message in refused(tmp_path)


def test_boolean_labels_are_two_classes(tmp_path):
    write_labels(tmp_path / "data", [True, False, False] * 10, [False, True] * 5, "bool")
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    dm.setup()
    assert dm.label_names == ["False", "True"]
    assert dm.splits["test"].labels == [0, 1] * 5
    assert sorted(dm.splits["train"].labels + dm.splits["val"].labels) == [0] * 20 + [1] * 10


def test_numeric_strings_alone_are_class_names(tmp_path):
    write_labels(tmp_path / "data", ["1", "2", "5"] * 10, ["5", "1"] * 5, "string")
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    dm.setup()
    assert dm.label_names == ["1", "2", "5"] and dm.splits["test"].labels == [2, 0] * 5


@pytest.mark.parametrize("fmt, train, test, message", [
    # a CSV column with an empty cell is read as floats with a NaN: the missing label is named, not "3 classes"
    ("csv", [0, 1, None] * 10, [0, 1] * 5, "toy/train: 10 of 30 rows have no label (None or NaN)"),
    ("jsonl", [0.0, 1.0] * 15, [0, 1] * 5, "toy/train: label column 'label' holds floats (0.0, 1.0)"),
    ("jsonl", ["0", "1"] * 15, [0, 1] * 5,
     "toy: label column 'label' holds strings in train ('0', '1') but integers in test (0, 1)"),
])
def test_label_types_in_csv_and_jsonl(tmp_path, fmt, train, test, message):
    with pytest.raises(DataConfigError) as err:
        files_module(tmp_path, fmt, {"text": rows(30)["text"], "label": train},
                     {"text": rows(10)["text"], "label": test}).prepare_data()
    assert message in str(err.value)
    assert_nothing_cached(tmp_path / "cache")


def write_json(path, labels, array: bool = False) -> str:
    """Rows of ``labels`` (Python values, written as they are: "1" a string, 1 a number) as JSON Lines, or as
    one JSON array of objects."""
    import json

    records = [{"text": t, "label": y} for t, y in zip(rows(len(labels))["text"], labels)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records) if array else "".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.mark.parametrize("train, test, array, message", [
    (["0", 1, "1", 0] * 8, [0, 1] * 5, False,
     "toy: labels in split 'train' mix types: str ('0', '1') and int (0, 1); make them one type (all integers "
     "0..K-1 or all class names in label column 'label')"),
    ([0, "1", 1, "0"] * 8, [0, 1] * 5, True,
     "toy: labels in split 'train' mix types: int (0, 1) and str ('0', '1'); make them one type"),
    ([0, 1] * 15, [0, 1, "neg", 1, "pos"] * 2, False,
     "toy: labels in split 'test' mix types: int (0, 1) and str ('neg', 'pos'); make them one type"),
    ([True, 0, 1, False] * 8, [0, 1] * 5, False,
     "toy: labels in split 'train' mix types: bool (False, True) and int (0, 1); make them one type"),
    ([[0], 1, 0, [1]] * 8, [0, 1] * 5, False,
     "toy: labels in split 'train' mix types: list ([0], [1]) and int (0, 1); make them one type"),
    (["a", "b", "c", "d", 1] * 6, ["a"] * 10, False,
     "toy: labels in split 'train' mix types: str ('a', 'b', 'c', ...) and int (1); make them one type"),
    # the kinds fixed before, in the same files: missing, float, mixed across splits
    (["0", None, "1", 1] * 8, [0, 1] * 5, False,
     "toy/train: 8 of 32 rows have no label (None or NaN) in label column 'label' (rows 1, 5, 9, 13, 17, ...)"),
    ([0, 1.5, 1] * 10, [0, 1] * 5, False,
     "toy/train: label column 'label' holds floats (0.0, 1.0, 1.5); class labels are"),
    (["0", "1"] * 15, [0, 1] * 5, False,
     "toy: label column 'label' holds strings in train ('0', '1') but integers in test (0, 1)"),
])
def test_labels_of_mixed_types_in_one_split_are_named(tmp_path, train, test, array, message):
    ext = "json" if array else "jsonl"
    files = {"train": write_json(tmp_path / "files" / f"train.{ext}", train, array),
             "test": write_json(tmp_path / "files" / f"test.{ext}", test, array)}
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "nowhere", tmp_path / "cache", data_files=files).prepare_data()
    assert message in str(err.value)
    assert_nothing_cached(tmp_path / "cache")


def test_mixed_json_labels_without_their_files_are_named(tmp_path):
    """Read from elsewhere than local files (a Hub JSON repo), a column the JSON loader stored as JSON text still
    says which split mixes types, from the values it kept."""
    from attnbench.data.rows import check_columns_and_labels

    path = write_json(tmp_path / "train.jsonl", ["0", 1, "1", 0] * 8)
    raw = datasets.DatasetDict({"train": datasets.load_dataset("json", data_files=path, split="train",
                                                               cache_dir=str(tmp_path / "hf"))})
    assert isinstance(raw["train"].features["label"], datasets.Json)
    with pytest.raises(DataConfigError) as err:
        check_columns_and_labels(raw, "toy", "train", ["text"], "label")
    assert str(err.value).startswith("toy: labels in split 'train' mix JSON types, such as strings and numbers "
                                     "(values 0, 1; the datasets JSON loader reads a string that is valid JSON")
