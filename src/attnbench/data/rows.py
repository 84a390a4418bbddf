"""Rows as the model sees them: texts cleaned by the bad-row policy, labels checked and numbered.

Policy (counted per split in the log and in the cache's ``meta.json``): empty or whitespace-only texts (and
nulls) are dropped; bytes that are not valid UTF-8 are decoded with U+FFFD replacement characters. Labels outside
the class set, a single class, or missing columns stop the job with a :class:`DataConfigError`.
"""

from __future__ import annotations

import logging
from typing import Any

import datasets

from attnbench.data.errors import DataConfigError

log = logging.getLogger("attnbench.data")


class SplitStats:
    """Per-split counts of the bad-row policy: ``dropped_empty``, ``invalid_utf8``, ``truncated`` rows."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    def add(self, split: str, key: str, n: int) -> None:
        self.counts.setdefault(split, {}).setdefault(key, 0)
        self.counts[split][key] += int(n)


def clean_texts(values: list[Any], column_name: str, where: str) -> tuple[list[str], list[int], int]:
    """Texts of one split as ``str``, the indices of rows to keep, and the number of non-UTF-8 rows.

    ``None`` and empty or whitespace-only texts are left out of the kept indices;
    ``bytes`` are decoded as UTF-8, invalid sequences replaced by U+FFFD.

    Raises:
        DataConfigError: the column holds something other than text (e.g. numbers).
    """
    texts: list[str] = []
    keep: list[int] = []
    invalid = 0
    for i, value in enumerate(values):
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                value = bytes(value).decode("utf-8", errors="replace")
                invalid += 1
        elif value is not None and not isinstance(value, str):
            raise DataConfigError(
                f"{where}: text column {column_name!r} holds {type(value).__name__} values (e.g. {value!r}), not text. "
                "Set data.text_column to the column with the texts."
            )
        texts.append(value or "")
        if value and value.strip():
            keep.append(i)
    return texts, keep, invalid


def column(ds: datasets.Dataset, name: str) -> list[Any]:
    """A whole column as a Python list, read through Arrow in one go (respects indices mappings)."""
    return ds.with_format("arrow")[name].to_pylist()


def check_columns_and_labels(raw: datasets.DatasetDict, name: str, train_split: str, text_columns: list[str],
                             label_column: str) -> list[str]:
    """The class names, after checking that every split has the columns and only labels of those classes.

    Classes: a ``ClassLabel``'s names (other splits' ids re-numbered by name, :func:`align_class_names`), the
    sorted distinct strings of a string column, or ``"0".."K-1"`` of an integer column.

    Raises:
        DataConfigError: a missing column (naming the columns there are), labels outside the class set (with
            the hint for -1, gaps or unknown names), fewer than two classes.
    """
    for split, ds in raw.items():
        for col in (*text_columns, label_column):
            if col not in ds.column_names:
                raise DataConfigError(
                    f"{name}/{split} has no column {col!r}; its columns are {ds.column_names}. "
                    "Set data.text_column / data.label_column"
                    + (" / data.text_pair_column." if len(text_columns) > 1 else ".")
                )
    feature = raw[train_split].features[label_column]
    if isinstance(feature, datasets.ClassLabel):
        align_class_names(raw, name, train_split, label_column, list(feature.names))
    train_labels = column(raw[train_split], label_column)
    string_labels = not isinstance(feature, datasets.ClassLabel) and bool(train_labels) and all(
        isinstance(y, str) for y in train_labels if y is not None)
    if isinstance(feature, datasets.ClassLabel):
        names = list(feature.names)
    elif string_labels:
        names = sorted({y for y in train_labels if y is not None})  # string labels: classes in sorted order
    else:
        names = [str(x) for x in sorted({y for y in train_labels if isinstance(y, int) and y >= 0})]
    if len(names) < 2:  # before the range check: 'only 1 class' says more than 'outside 0..0'
        _refuse_single_class(names, train_labels, name, train_split, label_column)
    for split, ds in raw.items():
        labels = column(ds, label_column)
        if string_labels:
            bad_values = [y for y in labels if y not in names]
        else:
            bad_values = [y for y in labels
                          if not (isinstance(y, int) and not isinstance(y, bool) and 0 <= y < len(names))]
        if bad_values:
            examples = sorted({repr(y) for y in bad_values})[:5]
            hint = (" Labels of -1 mark an unlabeled split (like SST-2's Hub test split): it cannot be trained or "
                    "tested on; use a labeled split as data.test_split (SST-2: validation)."
                    if any(isinstance(y, int) and y < 0 for y in bad_values) else
                    f" Labels must be the class names {names[:10]}; fix the file or set data.label_column."
                    if string_labels else
                    f" Labels must be integers 0..{len(names) - 1} ({names[:10]}); fix the file or set "
                    "data.label_column." if isinstance(feature, datasets.ClassLabel) else
                    f" Integer labels must run 0..K-1 without gaps (train has {names[:10]}); renumber them or "
                    "store the column as a datasets.ClassLabel or as strings.")
            raise DataConfigError(
                f"{name}/{split}: {len(bad_values):,} of {len(labels):,} rows have labels outside the class "
                f"set 0..{len(names) - 1} ({', '.join(examples)}).{hint}"
            )
    _refuse_single_class(names, train_labels, name, train_split, label_column)
    return names

def align_class_names(raw: datasets.DatasetDict, name: str, train_split: str, label_column: str,
                  names: list[str]) -> None:
    """Make every split's ``ClassLabel`` ids mean the training split's class names (in place).

    A split listing the same names in another order is re-numbered by name
    (``datasets.Dataset.align_labels_with_mapping``); before, its ids were
    taken as they were and every label of a reordered test split was flipped.

    Raises:
        DataConfigError: a split's class names are not the training split's.
    """
    for split, ds in list(raw.items()):
        other = ds.features[label_column]
        if split == train_split or not isinstance(other, datasets.ClassLabel) or list(other.names) == names:
            continue
        if sorted(other.names) != sorted(names):
            raise DataConfigError(
                f"{name}/{split}: its class names {list(other.names)} are not those of "
                f"{name}/{train_split} {names}; labels are matched by name, so the splits must name "
                "the same classes. Fix the files' ClassLabel names, or set data.label_column / data.test_split.")
        log.info("%s/%s lists the classes in another order (%s) than %s (%s): its labels are matched by name.",
                 name, split, list(other.names), train_split, names)
        raw[split] = ds.align_labels_with_mapping({n: i for i, n in enumerate(names)}, label_column)

def label_ids(labels: list[Any], names: list[str]) -> list[int]:
    """Labels as class indices (string labels are mapped through ``names``)."""
    if labels and isinstance(labels[0], str):
        index = {n: i for i, n in enumerate(names)}
        return [index[y] for y in labels]
    return [int(y) for y in labels]


def _refuse_single_class(names: list[str], train_labels: list[Any], name: str, train_split: str,
                         label_column: str) -> None:
    present = {y for y in train_labels}
    if len(names) < 2 or len(present) < 2:
        raise DataConfigError(
            f"{name}/{train_split}: only {len(present)} class(es) present in label column "
            f"{label_column!r} ({sorted(map(str, present))[:5]}); a classifier needs >= 2. Check "
            "data.label_column, or the file (was it filtered to one class?)."
        )
