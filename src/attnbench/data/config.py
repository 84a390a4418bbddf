"""Every ``data.*`` key, its default and its allowed range, in one place (:class:`DataConfig`).

The keys mirror :func:`datasets.load_dataset` where they can: a Hub dataset is ``hub_id`` (``path``) plus
``hub_config`` (``name``); local files are ``builder`` (``csv``, ``tsv``, ``json``/``jsonl``, ``parquet``,
``text``) plus ``data_files`` (a path, a list of paths, or ``{split: path(s)}``), as in
``load_dataset("csv", data_files={"train": "train.csv"})``. This is the only place data keys are validated:
the data module builds a :class:`DataConfig` from its arguments, and a run may call :meth:`DataConfig.check`
on ``cfg.data`` before any data work.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Mapping

from attnbench.data.errors import DataConfigError

BATCHING = ("random", "length_grouped")
TOKENIZER_KINDS = ("wordpiece", "byte_bpe", "bytes", "word_level")
TOKENIZER_DEFAULTS = {"kind": "wordpiece", "vocab_size": 16000, "lowercase": True, "min_frequency": 2}
# builder name -> (datasets builder, extra load_dataset arguments); file extensions map to the same names
BUILDERS = {"csv": ("csv", {}), "tsv": ("csv", {"delimiter": "\t"}), "json": ("json", {}), "jsonl": ("json", {}),
            "parquet": ("parquet", {}), "text": ("text", {})}
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "jsonl", ".parquet": "parquet",
              ".txt": "text"}
VAL_SPLIT_NAMES = ("validation", "valid", "dev", "val")  # what ``val_split: auto`` looks for


def _plain(value: Any) -> Any:
    """OmegaConf containers (what Hydra's ``instantiate`` passes) as plain dicts and lists."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class DataConfig:
    """The data keys (``conf/data/*.yaml``), with their defaults; constructing one validates it.

    Source: ``generator`` when set (a generated task, :mod:`attnbench.data.generated`: ``assoc_recall`` with
    ``num_pairs``, ``num_keys``, ``num_values``, ``num_train`` training rows, ``val_size`` and ``test_size`` rows of
    validation and test, ``split_seed`` as its seed; nothing is read or downloaded). Else the first that has the
    data is used: ``data_files`` (local files read by ``builder``);
    ``<local_dir>/<name>/<split>.parquet``; the Hub (``hub_id``, ``hub_config``); the packaged default data
    (SST-2 and TREC, when ``packaged`` and ``name``/``hub_id`` are theirs).

    Splits: ``train_split`` is trained on. ``val_split``: ``auto`` uses the source's own validation split when
    it has one (a split named ``validation``, ``valid``, ``dev`` or ``val`` that is not ``test_split``), a name
    uses that split, ``null`` always carves validation from train (``val_size``, ``split_seed``). ``test_split``:
    the held-out split reported as ``test/*``; ``null`` carves a stratified test set from train (``test_size``)
    or, with ``cv_folds`` = k, holds out fold ``fold`` of a stratified k-fold partition.

    Raises:
        DataConfigError: a key outside its range, naming the key and the range; a ``data_files`` entry that is not
            an existing file or a split named without a ``data_files`` entry are refused by
            :meth:`check_data_files`, when the source is resolved.
    """

    name: str
    hub_id: str | None = None
    hub_config: str | None = None
    builder: str | None = None
    data_files: Any = None
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    train_split: str = "train"
    val_split: str | None = "auto"
    test_split: str | None = "test"
    test_size: float = 0.1
    cv_folds: int | None = None
    fold: int = 0
    local_dir: str | None = None
    packaged: bool = True
    cache_dir: str = "~/.cache/attnbench"
    val_size: float = 0.05
    split_seed: int = 1234
    max_length: int = 128
    batch_size: int = 64
    eval_batch_size: int = 256
    num_workers: int = 0
    tokenizer: dict[str, Any] = field(default_factory=dict)
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    batching: str = "random"
    megabatch_size: int = 50
    generator: str | None = None
    num_pairs: int = 8
    num_keys: int = 32
    num_values: int = 16
    num_train: int = 40000

    def __post_init__(self) -> None:
        self.data_files = _plain(self.data_files)
        self.tokenizer = {**TOKENIZER_DEFAULTS, **dict(_plain(self.tokenizer) or {})}
        for key in ("max_length", "batch_size", "eval_batch_size", "max_train_samples", "max_eval_samples"):
            value, nullable = getattr(self, key), "samples" in key
            if not ((value is None and nullable) or (_is_int(value) and value >= 1)):
                raise DataConfigError(f"data.{key} must be an integer >= 1{' or null' if nullable else ''}, "
                                      f"got {value!r}")
        if self.batching not in BATCHING:
            raise DataConfigError(f"data.batching must be one of {', '.join(BATCHING)}, got {self.batching!r}")
        if not (_is_int(self.megabatch_size) and self.megabatch_size >= 1):
            raise DataConfigError(f"data.megabatch_size must be an integer >= 1, got {self.megabatch_size!r}")
        if not (_is_int(self.num_workers) and self.num_workers >= 0):
            raise DataConfigError(f"data.num_workers must be an integer >= 0, got {self.num_workers!r}")
        for key in ("val_size", "test_size"):
            value = getattr(self, key)
            # a value >= 1 is a row count: 1.5 is neither, and is refused rather than truncated to 1 row
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or (
                    value >= 1 and not float(value).is_integer()):
                raise DataConfigError(f"data.{key} must be a fraction in (0, 1) or a row count >= 1, got {value}")
        if not _is_int(self.split_seed):
            raise DataConfigError(f"data.split_seed must be an integer, got {self.split_seed!r}")
        if self.tokenizer["kind"] not in TOKENIZER_KINDS:
            raise DataConfigError(f"data.tokenizer.kind must be 'wordpiece', 'byte_bpe', 'bytes' or 'word_level', "
                                  f"got {self.tokenizer['kind']!r}")
        for key in ("vocab_size", "min_frequency"):  # the wordpiece, byte_bpe and word_level trainers' settings
            if not _is_int(self.tokenizer[key]) or self.tokenizer[key] < 1:
                raise DataConfigError(f"data.tokenizer.{key} must be an integer >= 1, got {self.tokenizer[key]!r}")
        if self.generator is not None:
            self._check_generator()
        for key in ("name", "text_column", "label_column", "train_split"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                kind = type(value).__name__
                typed = ("" if value is None or isinstance(value, str) else
                         f" ({'an' if kind[0] in 'aeiou' else 'a'} {kind}: the command line reads it as one; quote it "
                         f"as a string, data.{key}='\"{str(value).lower() if kind == 'bool' else value}\"')")
                raise DataConfigError(f"data.{key} must be a non-empty string, got {value!r}{typed}")
        if self.test_split is not None and self.test_split == self.train_split:
            raise DataConfigError(f"data.test_split={self.test_split!r} is data.train_split too: name another split, "
                                  "or set data.test_split=null to carve a test set from the training split")
        if self.val_split not in (None, "auto") and self.val_split in (self.train_split, self.test_split):
            raise DataConfigError(f"data.val_split={self.val_split!r} is also data.train_split or data.test_split; "
                                  "name another split, or use auto / null (carved from train)")
        if self.text_pair_column is not None and self.text_pair_column == self.text_column:
            raise DataConfigError("data.text_pair_column must name a column other than data.text_column")
        if self.text_pair_column is not None and self.max_length < 3:
            raise DataConfigError(f"data.max_length={self.max_length} cannot hold a sentence pair (a token of each "
                                  "text and [SEP]): set data.max_length >= 3")
        if self.cv_folds is not None:
            if not (_is_int(self.cv_folds) and self.cv_folds >= 2):
                raise DataConfigError(f"data.cv_folds must be an integer >= 2 or null, got {self.cv_folds!r}")
            if self.test_split is not None:
                raise DataConfigError(f"data.cv_folds={self.cv_folds} holds out folds of the training split, but "
                                      f"data.test_split={self.test_split!r} names a test split: set "
                                      "data.test_split=null for cross-validation")
        if not (_is_int(self.fold) and 0 <= self.fold < (self.cv_folds or 1)):
            raise DataConfigError(f"data.fold must be an integer in [0, {(self.cv_folds or 1) - 1}] "
                                  f"(data.cv_folds={self.cv_folds}), got {self.fold!r}")
        if self.builder is not None and self.builder not in BUILDERS:
            raise DataConfigError(f"data.builder must be one of {', '.join(BUILDERS)} (or null: from the file "
                                  f"extension), got {self.builder!r}")
        self._files_keyed = isinstance(self.data_files, Mapping)  # {split: path}: messages name data_files.<split>
        if self.data_files is not None:
            self.data_files = self.files_by_split()
            if self.train_split not in self.data_files:
                raise DataConfigError(f"data.data_files has no {self.train_split!r} entry (data.train_split); it has "
                                      f"{list(self.data_files)}")
            if self.builder is None:
                self.builder = self._builder_from_extension()

    def _check_generator(self) -> None:
        """The keys of a generated task (:mod:`attnbench.data.generated`): its name, sizes and settings."""
        from attnbench.data.generated import GENERATORS, check_assoc_recall, split_sizes

        if self.generator not in GENERATORS:
            raise DataConfigError(f"data.generator must be one of {', '.join(GENERATORS)} or null, got "
                                  f"{self.generator!r}")
        if self.data_files is not None:
            raise DataConfigError("data.generator makes the rows: unset data.data_files (or data.generator)")
        if not (_is_int(self.num_train) and self.num_train >= 1):
            raise DataConfigError(f"data.num_train must be an integer >= 1, got {self.num_train!r}")
        check_assoc_recall(self.num_pairs, self.num_keys, self.num_values,
                           split_sizes(self.num_train, self.val_size, self.test_size))
        needed = self.num_pairs + 1
        if self.tokenizer["kind"] == "word_level" and self.max_length < needed:
            raise DataConfigError(f"data.max_length={self.max_length} cuts assoc_recall examples of {needed} words "
                                  f"(data.num_pairs={self.num_pairs} pairs and the query): set data.max_length >= "
                                  f"{needed}")

    def check_data_files(self) -> None:
        """``data.data_files``' files exist (``~`` and relative paths resolved from the launch directory,
        :func:`attnbench.paths.user_path`), then it has an entry for every split named (test, validation).

        Run where the source is resolved (:func:`attnbench.data.sources.resolve_source`: the command line's
        preflight before torch, and the data module), not at construction: the keys alone compose and check
        without the files (a documented command with placeholder names). The files come first, so that a
        misspelt path is said as such, not as a missing split entry.

        Raises:
            DataConfigError: naming the first missing file and its key (``data.data_files.<split>`` when the user
                wrote ``{split: path}``), or the missing split entry and the fix.
        """
        from attnbench.paths import user_path

        if self.data_files is None:
            return
        for split, paths in self.data_files.items():
            key = f"data.data_files.{split}" if self._files_keyed else "data.data_files"
            for path in paths:
                resolved = user_path(path)
                if not resolved.is_file():
                    where = ("" if os.path.isabs(os.path.expanduser(path))
                             else f"; from the launch directory: {resolved}")
                    raise DataConfigError(f"{key}: no file {path} (split {split!r}{where}). Set {key} to an existing "
                                          "file (the syntax, with examples: docs/data.md).")
        for split in (self.test_split, None if self.val_split == "auto" else self.val_split):
            if split is not None and split not in self.data_files:
                raise DataConfigError(
                    f"data.data_files has no {split!r} entry; it has {list(self.data_files)}. Add it, or set "
                    + ("data.test_split=null to carve a test set" if split == self.test_split else
                       "data.val_split=null to carve validation") + " from the training split")

    # ------------------------------------------------------------------------------------------------ helpers
    def files_by_split(self) -> dict[str, list[str]]:
        """``data_files`` as ``{split: [path, ...]}`` (a bare path or list is the training split)."""
        files = self.data_files
        if isinstance(files, (str, PurePath)):
            files = {self.train_split: [str(files)]}
        elif isinstance(files, (list, tuple)):
            files = {self.train_split: [str(f) for f in files]}
        elif isinstance(files, Mapping):
            files = {str(k): [str(v)] if isinstance(v, (str, PurePath)) else [str(f) for f in v]
                     for k, v in files.items()}
        else:
            raise DataConfigError(f"data.data_files must be a path, a list of paths or {{split: path}}, got {files!r}")
        if not files or any(not v for v in files.values()):
            raise DataConfigError(f"data.data_files names no file: {self.data_files!r}")
        return files

    def _builder_from_extension(self) -> str:
        found = set()
        for paths in self.data_files.values():
            for path in paths:
                suffix = PurePath(path).suffix.lower()
                if suffix not in EXTENSIONS:
                    raise DataConfigError(f"data.builder is null and the extension of {path} is not one of "
                                          f"{', '.join(EXTENSIONS)}: set data.builder (one of {', '.join(BUILDERS)})")
                found.add(EXTENSIONS[suffix])
        if len(found) > 1:
            raise DataConfigError(f"data.data_files mixes formats {sorted(found)}: one data.builder reads them all")
        return found.pop()

    @classmethod
    def check(cls, data: Mapping[str, Any]) -> "DataConfig":
        """Validate a ``data`` config mapping (e.g. ``cfg.data``; ``_target_`` and ``seed`` are ignored).

        Raises:
            DataConfigError: a key outside its range, or a key that is not a data key (with the keys there are).
        """
        data = dict(_plain(data))
        data.pop("_target_", None)
        data.pop("seed", None)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DataConfigError(f"unknown data key(s) {unknown}; the data keys are {sorted(known)}")
        return cls(**data)
