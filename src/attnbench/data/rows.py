"""Rows as the model sees them: texts cleaned by the bad-row policy, labels checked and numbered.

Policy (counted per split in the log and in the cache's ``meta.json``): texts with no visible character (empty,
whitespace only, or only format and control characters such as U+200B ZERO WIDTH SPACE, U+FEFF and U+00AD SOFT
HYPHEN, or lone combining marks: :func:`has_visible_character`) and nulls are dropped whatever the tokenizer,
as are texts the tokenizer cuts into no token (the data module's check); bytes that are not valid UTF-8 are decoded with U+FFFD replacement characters. Labels outside the class set, a single class, missing
columns, and labels that are missing (None, NaN), floats or of mixed types (within a split or across splits) stop
the job with a :class:`DataConfigError` naming the split."""

from __future__ import annotations

import logging
import math
import unicodedata
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

    ``None`` and texts with no visible character (:func:`has_visible_character`) are left out of the kept
    indices;
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
        if value and has_visible_character(value):
            keep.append(i)
    return texts, keep, invalid


#: Unicode general categories of characters that show nothing on their own: separators (spaces, line and
#: paragraph separators), control characters (Cc), format characters (Cf: U+200B-U+200F, U+2060-U+2064, U+FEFF,
#: U+00AD, bidirectional marks, tags) and marks (Mn, Mc, Me: combining accents and variation selectors, which only
#: modify the character before them)
INVISIBLE_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Mc", "Me"})


def has_visible_character(text: str) -> bool:
    """Whether ``text`` holds a character outside :data:`INVISIBLE_CATEGORIES` (a letter, number, punctuation or
    symbol, a private-use or unassigned code point): a text of spaces, zero-width and other format or control
    characters, or of lone combining marks, carries no content for any tokenizer, also for those that would give
    its bytes tokens (``bytes``, ``byte_bpe``)."""
    return any(unicodedata.category(ch) not in INVISIBLE_CATEGORIES for ch in text)


def column(ds: datasets.Dataset, name: str) -> list[Any]:
    """A whole column as a Python list, read through Arrow in one go (respects indices mappings)."""
    return ds.with_format("arrow")[name].to_pylist()


def check_columns_and_labels(raw: datasets.DatasetDict, name: str, train_split: str, text_columns: list[str],
                             label_column: str) -> list[str]:
    """The class names, after checking that every split has the columns and only labels of those classes.

    Classes: a ``ClassLabel``'s names (other splits' ids re-numbered by name, :func:`align_class_names`), the
    sorted distinct strings of a string column, ``"False", "True"`` of a boolean column, or ``"0".."K-1"`` of an
    integer column. Every split's labels are of one kind first (:func:`check_label_types`).

    Raises:
        DataConfigError: a missing column (naming the columns there are), missing, float or mixed-type labels
            (:func:`check_label_types`), negative labels, labels outside the class set (with the hint for -1,
            gaps, or classes only in a test or validation split), fewer than two classes.
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
    labels_of = {split: column(ds, label_column) for split, ds in raw.items()}
    kind = check_label_types(labels_of, name, train_split, label_column)
    train_labels = labels_of[train_split]
    if isinstance(feature, datasets.ClassLabel):
        names = list(feature.names)
    elif kind == "str":
        names = sorted(set(train_labels))  # string labels: classes in sorted order
    elif kind == "bool":
        names = ["False", "True"]
    else:
        negative = sorted({y for y in train_labels if y < 0})
        if negative:
            raise DataConfigError(
                f"{name}/{train_split}: {sum(y < 0 for y in train_labels):,} of {len(train_labels):,} rows have "
                f"negative labels ({', '.join(map(str, negative[:5]))}) in label column {label_column!r}."
                + (_UNLABELED_HINT if -1 in negative else
                   " Integer labels must run 0..K-1; renumber them, or store the column as strings."))
        names = [str(x) for x in sorted(set(train_labels))]
    present = set(train_labels)
    if len(names) < 2 or len(present) < 2:  # before the range check: 'only 1 class' says more
        raise DataConfigError(
            f"{name}/{train_split}: only {len(present)} class(es) present in label column "
            f"{label_column!r} ({sorted(map(str, present))[:5]}); a classifier needs >= 2. Check "
            "data.label_column, or the file (was it filtered to one class?)."
        )
    for split, labels in labels_of.items():
        if kind == "str":
            bad_values = [y for y in labels if y not in names]
        elif kind == "bool":
            bad_values = []
        else:
            bad_values = [y for y in labels if not 0 <= y < len(names)]
        if bad_values:
            examples = sorted(set(bad_values), key=lambda y: (str(type(y)), y))[:5]
            shown = ", ".join(map(repr, examples))
            if any(isinstance(y, int) and y < 0 for y in bad_values):
                hint = _UNLABELED_HINT
            elif isinstance(feature, datasets.ClassLabel):
                hint = (f" Labels must be integers 0..{len(names) - 1} ({names[:10]}); fix the file or set "
                        "data.label_column.")
            elif split == train_split:
                hint = (f" Integer labels must run 0..K-1 without gaps (train has {names[:10]}); renumber them or "
                        "store the column as a datasets.ClassLabel or as strings.")
            else:
                hint = (f" {'These classes are' if len(examples) > 1 else 'This class is'} in {split} only: "
                        f"{train_split} has the classes {names[:10]}, and a classifier cannot predict a class it "
                        f"never trained on. Remove those rows from {split}, or add rows of that class to "
                        f"{train_split}.")
            raise DataConfigError(
                f"{name}/{split}: {len(bad_values):,} of {len(labels):,} rows have labels outside the class "
                f"set 0..{len(names) - 1} ({shown}).{hint}"
            )
    return names


_UNLABELED_HINT = (" Labels of -1 mark an unlabeled split (like SST-2's Hub test split): it cannot be trained or "
                   "tested on; use a labeled split as data.test_split (SST-2: validation).")
_KIND_WORDS = {"int": "integers", "str": "strings", "bool": "booleans", "float": "floats"}


def _label_kind(y: Any) -> str:
    """``missing`` (None, NaN), ``bool``, ``int``, ``float``, ``str``, or the Python type's name."""
    if y is None or (isinstance(y, float) and math.isnan(y)):
        return "missing"
    if isinstance(y, bool):
        return "bool"
    for kind, types in (("int", int), ("float", float), ("str", str)):
        if isinstance(y, types):
            return kind
    return type(y).__name__


def check_label_types(labels_of: dict[str, list[Any]], name: str, train_split: str, label_column: str) -> str:
    """The one type of every split's labels: ``int``, ``str`` or ``bool``.

    Args:
        labels_of: split -> its labels (Python values, as :func:`column` reads them), the training split first
            or anywhere.

    Raises:
        DataConfigError: naming the split, the label column and examples, for the first of: missing labels
            (``None``, NaN), float labels (classes are integers or names), one split mixing types (integers
            and strings, or strings that are numbers beside class names), splits of different types
            (``"0"``/``"1"`` in one, ``0``/``1`` in another).
    """
    col = repr(label_column)
    kinds: dict[str, str] = {}
    for split in [train_split] + [s for s in labels_of if s != train_split]:
        labels = labels_of[split]
        by_kind: dict[str, list[int]] = {}
        for i, y in enumerate(labels):
            by_kind.setdefault(_label_kind(y), []).append(i)
        where = f"{name}/{split}"
        if "missing" in by_kind:
            rows = by_kind["missing"]
            raise DataConfigError(
                f"{where}: {len(rows):,} of {len(labels):,} rows have no label (None or NaN) in label column {col} "
                f"(rows {', '.join(map(str, rows[:5]))}{', ...' if len(rows) > 5 else ''}). Fill in or remove "
                "those rows, or set data.label_column.")
        if "float" in by_kind:
            values = sorted({labels[i] for i in by_kind["float"]})
            whole = all(float(v).is_integer() for v in values)
            raise DataConfigError(
                f"{where}: label column {col} holds floats ({', '.join(map(repr, values[:5]))}"
                f"{', ...' if len(values) > 5 else ''}); class labels are integers 0..K-1 or class-name strings. "
                + ("They are whole numbers: store the column as integers (pandas: df[col].astype(int); a column "
                   "with a missing value is read as floats)." if whole else
                   "Fractional values are not classes: bin them into classes, or set data.label_column."))
        strings = [labels[i] for i in by_kind.get("str", [])]
        numeric = sorted({y for y in strings if _is_number(y)})
        if len(by_kind) > 1 or (numeric and len(numeric) < len(set(strings))):
            parts = [f"{_KIND_WORDS.get(k, k)} ({', '.join(repr(labels[i]) for i in rows[:3])})"
                     for k, rows in sorted(by_kind.items())] if len(by_kind) > 1 else [
                f"numbers ({', '.join(map(repr, numeric[:3]))})",
                f"names ({', '.join(repr(y) for y in sorted(set(strings) - set(numeric))[:3])})"]
            raise DataConfigError(
                f"{where}: label column {col} mixes {' and '.join(parts)}; labels are matched by value, so "
                "every label must be of one kind: all integers 0..K-1 or all class names. Fix the file, or set "
                "data.label_column.")
        if labels:
            kinds[split] = next(iter(by_kind))
    if len(set(kinds.values())) > 1:
        def said(split: str) -> str:
            values = sorted(set(labels_of[split]))[:3]
            return f"{_KIND_WORDS.get(kinds[split], kinds[split])} in {split} ({', '.join(map(repr, values))})"

        raise DataConfigError(
            f"{name}: label column {col} holds {said(train_split)} but "
            + " and ".join(said(s) for s in kinds if kinds[s] != kinds.get(train_split)) +
            "; labels are matched by value across splits ('1' is not 1), so every split needs the same kind. "
            "Store them alike (e.g. all as integers), or set data.label_column.")
    return kinds.get(train_split, "int")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def align_class_names(raw: datasets.DatasetDict, name: str, train_split: str, label_column: str,
                  names: list[str]) -> None:
    """Make every split's ``ClassLabel`` ids mean the training split's class names (in place).

    A split listing the same names in another order is re-numbered by name
    (``datasets.Dataset.align_labels_with_mapping``); taking its ids as they
    are would flip every label of a reordered test split.

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
