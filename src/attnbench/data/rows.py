"""Rows as the model sees them: texts cleaned by the bad-row policy, labels checked and numbered.

Policy (counted per split in the log and in the cache's ``meta.json``): nulls and texts with no visible character
(empty, whitespace only, or only characters that show nothing: Default_Ignorable_Code_Point such as U+200B ZERO
WIDTH SPACE, U+FEFF, U+00AD SOFT HYPHEN, U+3164 HANGUL FILLER and variation selectors, other control
characters, U+2800 BRAILLE PATTERN BLANK, lone combining marks: :func:`is_invisible`) are dropped whatever the
tokenizer (``dropped_empty``), as are texts the tokenizer cuts into no token (the data module's check, also
``dropped_empty``) and, once tokenized, rows left with no token that shows text, only special tokens or spaces
(``dropped_no_text_tokens``); bytes that are not valid UTF-8 are decoded with U+FFFD replacement characters.
Labels outside the class set, a single class, missing columns, and labels that are missing (None, NaN), floats or
of mixed types (within a split or across splits) stop the job with a :class:`DataConfigError` naming the split."""

from __future__ import annotations

import bisect
import json
import logging
import math
import unicodedata
from typing import Any

import datasets

from attnbench.data.errors import DataConfigError

log = logging.getLogger("attnbench.data")


class SplitStats:
    """Per-split counts of the bad-row policy: ``dropped_empty``, ``invalid_utf8``, ``truncated`` rows, and
    ``dropped_no_text_tokens`` (only when some were dropped)."""

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


#: The Default_Ignorable_Code_Point ranges (first, last) of Unicode 14.0's DerivedCoreProperties.txt (the
#: version of Python 3.11's ``unicodedata``): characters a renderer shows as nothing when it does not support
#: them: U+00AD SOFT HYPHEN, the zero-width and bidirectional controls (U+200B-U+200F, U+202A-U+202E,
#: U+2060-U+206F), U+FEFF, the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), the variation selectors
#: (U+180B-U+180F, U+FE00-U+FE0F, U+E0100-U+E01EF) and the tag characters (U+E0000-U+E0FFF).
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_IGNORABLE_FIRST = [first for first, _ in DEFAULT_IGNORABLE]

#: Unicode general categories of characters that show nothing on their own: separators (Zs, Zl, Zp: with the
#: controls, every White_Space character), controls (Cc) and marks (Mn, Mc, Me: combining accents, which only
#: modify the character before them). Format characters (Cf) are Default_Ignorable_Code_Point but for the
#: prepended concatenation marks such as U+0600 ARABIC NUMBER SIGN, which are drawn.
INVISIBLE_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Mn", "Mc", "Me"})

#: Characters that draw an empty cell although their category is visible (So): U+2800 BRAILLE PATTERN BLANK
BLANK_SYMBOLS = frozenset({"\u2800"})


def is_invisible(ch: str) -> bool:
    """Whether the character ``ch`` shows nothing on its own: a Default_Ignorable_Code_Point
    (:data:`DEFAULT_IGNORABLE`), a character of :data:`INVISIBLE_CATEGORIES` (whitespace, controls, lone marks)
    or one of :data:`BLANK_SYMBOLS`."""
    if unicodedata.category(ch) in INVISIBLE_CATEGORIES or ch in BLANK_SYMBOLS:
        return True
    code = ord(ch)
    i = bisect.bisect_right(_IGNORABLE_FIRST, code) - 1
    return i >= 0 and code <= DEFAULT_IGNORABLE[i][1]


def has_visible_character(text: str) -> bool:
    """Whether ``text`` holds a character that is not :func:`is_invisible` (a letter, number, punctuation or
    symbol, a private-use or unassigned code point): a text of spaces, zero-width, filler, format or control
    characters, variation selectors or lone combining marks carries no content for any tokenizer, also for those
    that would give its bytes tokens (``bytes``, ``byte_bpe``)."""
    return not all(map(is_invisible, text))


def column(ds: datasets.Dataset, name: str) -> list[Any]:
    """A whole column as a Python list, read through Arrow in one go (respects indices mappings)."""
    return ds.with_format("arrow")[name].to_pylist()


def check_columns_and_labels(raw: datasets.DatasetDict, name: str, train_split: str, text_columns: list[str],
                             label_column: str, files: dict[str, list[str]] | None = None) -> list[str]:
    """The class names, after checking that every split has the columns and only labels of those classes.

    Classes: a ``ClassLabel``'s names (other splits' ids re-numbered by name, :func:`align_class_names`), the
    sorted distinct strings of a string column, ``"False", "True"`` of a boolean column, or ``"0".."K-1"`` of an
    integer column. Every split's labels are of one kind first (:func:`check_label_types`).

    Args:
        files: source split -> the JSON files it was read from, if any: a label column of several JSON types is
            checked on the values as written there (:func:`json_labels`).

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
    json_splits = [split for split, ds in raw.items() if isinstance(ds.features[label_column], datasets.Json)]
    for split in json_splits:
        stored = [None if v is None else json.loads(v) for v in labels_of[split]]
        written = json_labels(files[split], label_column) if files and files.get(split) else None
        labels_of[split] = written if written is not None and len(written) == len(stored) else stored
    kind = check_label_types(labels_of, name, train_split, label_column)
    if json_splits:  # datasets made a Json column of it: its JSON types differ, whether or not "1" and 1 show it
        split = json_splits[0]
        values = sorted(set(map(repr, labels_of[split])))[:5]
        raise DataConfigError(
            f"{name}: labels in split {split!r} mix JSON types, such as strings and numbers (values "
            f"{', '.join(values)}; the datasets JSON loader reads a string that is valid JSON, such as \"1\", as "
            f"its value); make them one type (all integers 0..K-1 or all class names in label column "
            f"{label_column!r}), or set data.label_column.")
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
        if len(by_kind) > 1:
            def examples(kind: str) -> str:  # keyed by repr: JSON lists and objects are no set members
                seen = {repr(labels[i]): labels[i] for i in by_kind[kind]}
                try:
                    values = sorted(seen, key=seen.__getitem__)
                except TypeError:  # lists, objects
                    values = sorted(seen)
                return f"{kind} ({', '.join(values[:3])}{', ...' if len(values) > 3 else ''})"

            first = {k: rows[0] for k, rows in by_kind.items()}
            raise DataConfigError(
                f"{name}: labels in split {split!r} mix types: "
                f"{' and '.join(examples(k) for k in sorted(by_kind, key=first.get))}; make them one type (all "
                f"integers 0..K-1 or all class names in label column {col}): labels are matched by value, so '1' "
                "and 1 would be two classes. Fix the file, or set data.label_column.")
        strings = [labels[i] for i in by_kind.get("str", [])]
        numeric = sorted({y for y in strings if _is_number(y)})
        if numeric and len(numeric) < len(set(strings)):
            names = sorted(set(strings) - set(numeric))
            raise DataConfigError(
                f"{where}: label column {col} mixes numbers ({', '.join(map(repr, numeric[:3]))}) and names "
                f"({', '.join(map(repr, names[:3]))}); labels are matched by value, so every label must be of one "
                "kind: all integers 0..K-1 or all class names. Fix the file, or set data.label_column.")
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


def json_labels(paths: list[str], label_column: str) -> list[Any] | None:
    """The values of ``label_column`` in JSON files as written: JSON Lines (one object a line) or one JSON array of
    objects (what the datasets JSON loader reads). Its own Arrow copy of a column of several JSON types stores each
    value as JSON text, and a string that is valid JSON (``"1"``) as that text: ``"1"`` and ``1`` become one.
    ``None`` when a file does not parse as either layout."""
    values: list[Any] = []
    try:
        for path in paths:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            try:
                records = json.loads(text)
            except json.JSONDecodeError:
                records = [json.loads(line) for line in text.splitlines() if line.strip()]
            if isinstance(records, dict):  # one object: a single row
                records = [records]
            values += [r.get(label_column) if isinstance(r, dict) else None for r in records]
    except (OSError, ValueError):  # a layout the loader read some other way: its stored values are used
        return None
    return values


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
