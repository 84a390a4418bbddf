"""Text-classification data: HF ``datasets`` in, padded token batches out.

Where the rows come from: ``<local_dir>/<name>/<split>.parquet`` when those
files exist (``local_dir`` defaults to ``$ATTNBENCH_DATA_DIR``), otherwise the
Hugging Face Hub (``load_dataset(hub_id)``). Both give the same rows and
features.

Splits: validation is carved from the training split with a fixed seed
(``val_size``, ``split_seed``) so that no validation text equals or occurs
inside a training text (group-aware, see :mod:`attnbench.splits`); the
official held-out split (SST-2 ``validation``, IMDB/TREC ``test``) is only
ever used as the test set, its overlaps with training counted in the log.
Class names are matched by name across splits.

Tokenizer: trained on the carved training rows only with HF ``tokenizers``
(WordPiece, or byte-level BPE), then every split is tokenized once and cached
on disk (``cache_dir/<key>/``) with the tokenizer. The key hashes everything
that changes the result (source data fingerprint, columns, splits, carving,
tokenizer settings, ``max_length``), so a second run of the same config
re-tokenizes nothing and a changed setting never reuses a stale cache.

Bad rows (policy, counted per split in the log and in the cache's ``meta.json``):
empty or whitespace-only texts (and nulls) are dropped; bytes that are not
valid UTF-8 (a ``binary`` text column) are decoded with U+FFFD replacement
characters; texts longer than ``max_length`` tokens are truncated. Labels
outside the class set (e.g. ``-1`` of an unlabeled split), a dataset with a
single class, missing columns or unreadable files stop the job with a
:class:`DataConfigError` before anything is written to the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pytorch_lightning as pl
import tokenizers
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler

from attnbench.distributed import eval_sampler
from attnbench.errors import AttnbenchError
from attnbench.paths import user_path
from attnbench.splits import Carving, carve_disjoint, overlap_counts

log = logging.getLogger(__name__)

CACHE_VERSION = 5  # 2: empty texts dropped, binary texts decoded; 3: canonical token ids;
# 4: validation carved disjoint from training text, overlap counts in meta.json, deterministic WordPiece
# 5: the carving's final substring pass and the overlap counts search every text on every dataset (IMDB: a
#    validation review quoted in a training review moves to train; counts no longer sampled)
PAD_TOKEN, UNK_TOKEN = "[PAD]", "[UNK]"
SPLITS = ("train", "val", "test")
BATCHING = ("random", "length_grouped")


class DataUnavailableError(AttnbenchError, RuntimeError):
    """Neither local Parquet files nor the Hugging Face Hub could provide the dataset."""


class DataConfigError(AttnbenchError, ValueError):
    """The data configuration does not fit the dataset (columns, labels, sizes)."""


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


@dataclass
class TokenizedSplit(Dataset):
    """One split held in memory: token ids per example and integer labels.

    ``input_ids[i]`` is a list of at most ``max_length`` token ids; ``labels[i]``
    an int in [0, num_classes); ``row_ids[i]`` the row's index in its source split.
    """

    input_ids: list[list[int]]
    labels: list[int]
    row_ids: list[int]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        return self.input_ids[i], self.labels[i]


class EpochShuffleSampler(RandomSampler):
    """A new random order every epoch that depends on (seed, epoch) only, never on the global RNG.

    Lightning calls :meth:`set_epoch` before each epoch, so a run resumed from an
    epoch-end checkpoint sees the same batches as the uninterrupted run, however
    much randomness (dropout) was drawn before. Under DDP Lightning replaces it
    with a ``DistributedSampler`` (a ``RandomSampler`` subclass is recognised as
    "shuffle"), which has the same property.

    Args:
        data_source: the dataset (only its length is used).
        seed: the run's seed (``PL_GLOBAL_SEED``, set by ``seed_everything``).
    """

    def __init__(self, data_source: Dataset, seed: int = 0) -> None:
        super().__init__(data_source)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the order of epoch ``epoch`` (0-based)."""
        self.epoch = int(epoch)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        yield from torch.randperm(len(self.data_source), generator=generator).tolist()


class LengthGroupedBatchSampler(BatchSampler):
    """Batches of similar length: less padding, same examples per epoch, random order.

    Training (``megabatch_size`` set): the index order of ``sampler`` (a new
    random permutation each epoch) is cut into *megabatches* of
    ``megabatch_size`` batches; each megabatch is sorted by length (longest
    first) and cut into batches of ``batch_size``; then the order of all
    batches of the epoch is shuffled. This is Hugging Face ``Trainer``'s
    ``group_by_length`` (``LengthGroupedSampler``: megabatches of 50 batches)
    with fairseq's shuffled batch order, so neither the batches' members nor
    their order follow a length curriculum. Evaluation (``megabatch_size=None``,
    ``shuffle=False``): the whole order of ``sampler`` is one megabatch, i.e.
    batches sorted by length, longest first.

    Determinism: the batch-order shuffle draws from a generator seeded by the
    sampler's ``(seed, epoch)`` only (``set_epoch`` is called by Lightning on
    ``batch_sampler.sampler``), never from the global RNG, so a run resumed
    from an epoch-end checkpoint sees the same batches.

    DDP: Lightning (``use_distributed_sampler``) rebuilds this batch sampler
    with a ``DistributedSampler`` as ``sampler`` (its init arguments are
    captured); each process then groups its own shard, and every process gets
    ``ceil(ceil(N / world_size) / batch_size)`` batches.

    The number of batches equals a plain ``BatchSampler``'s (only the last
    batch of the epoch can be short, unless ``drop_last``).

    Args:
        sampler: yields dataset indices (``EpochShuffleSampler``,
            ``SequentialSampler`` or Lightning's ``DistributedSampler``).
        batch_size: examples per batch (>= 1).
        drop_last: drop the epoch's last short batch.
        lengths: token count of every dataset example (indexed by dataset index).
        megabatch_size: batches per megabatch (>= 1), or ``None`` for one
            megabatch (evaluation: fully sorted).
        shuffle: shuffle the order of the batches (training).
        seed: fallback seed when ``sampler`` has no ``seed`` attribute.
    """

    def __init__(self, sampler: Sampler[int], batch_size: int, drop_last: bool, lengths: list[int],
                 megabatch_size: int | None = 50, shuffle: bool = True, seed: int = 0) -> None:
        super().__init__(sampler, batch_size, drop_last)
        if megabatch_size is not None and not (isinstance(megabatch_size, int) and megabatch_size >= 1):
            raise DataConfigError(f"data.megabatch_size must be an integer >= 1, got {megabatch_size!r}")
        self.lengths = lengths
        self.megabatch_size = megabatch_size
        self.shuffle = bool(shuffle)
        self.seed = int(seed)

    def batches(self) -> list[list[int]]:
        """This epoch's batches (lists of dataset indices), in the order they are yielded."""
        order = list(iter(self.sampler))
        span = len(order) if self.megabatch_size is None else self.megabatch_size * self.batch_size
        span = max(span, 1)
        out: list[list[int]] = []
        for start in range(0, len(order), span):
            mega = sorted(order[start : start + span], key=lambda i: -self.lengths[i])  # stable: ties keep order
            out.extend(mega[b : b + self.batch_size] for b in range(0, len(mega), self.batch_size))
        if self.drop_last and out and len(out[-1]) < self.batch_size:
            out.pop()
        if self.shuffle and len(out) > 1:
            seed = int(getattr(self.sampler, "seed", self.seed))
            epoch = int(getattr(self.sampler, "epoch", 0))
            generator = torch.Generator().manual_seed((seed * 1_000_003 + epoch) * 2 + 1)  # not the sampler's stream
            out = [out[i] for i in torch.randperm(len(out), generator=generator).tolist()]
        return out

    def __iter__(self):
        yield from self.batches()


class PadCollator:
    """Dynamic padding: pads each batch to its own longest sequence.

    Returns a dict with ``input_ids`` (B×L long), ``padding_mask`` (B×L bool,
    True = padding), ``labels`` (B long) and ``num_tokens`` (int, non-padding
    tokens in the batch — what throughput counts).
    """

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, examples: list[tuple[list[int], int]]) -> dict[str, Any]:
        lengths = [max(len(ids), 1) for ids, _ in examples]
        width = max(lengths)
        ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        for row, (seq, _) in enumerate(examples):
            if seq:
                ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        lengths_t = torch.tensor(lengths)
        padding_mask = torch.arange(width)[None, :] >= lengths_t[:, None]
        labels = torch.tensor([label for _, label in examples], dtype=torch.long)
        return {"input_ids": ids, "padding_mask": padding_mask, "labels": labels, "num_tokens": int(sum(lengths))}


def continuing_symbols(tokenizer, texts: list[str], prefix: str) -> list[str]:
    """``prefix + c`` for every character ``c`` that occurs after the first position of a word, sorted.

    Words are what ``tokenizer``'s normalizer and pre-tokenizer make of ``texts`` (the words a trainer
    counts); ``texts`` are normalized and pre-tokenized in chunks of about 1 MB.
    """
    chars: set[str] = set()
    for start in range(0, len(texts), 2048):
        joined = "\n".join(texts[start : start + 2048])
        if tokenizer.normalizer is not None:
            joined = tokenizer.normalizer.normalize_str(joined)
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(joined):
            chars.update(word[1:])
    return [prefix + c for c in sorted(chars)]


def canonical_token_ids(tokenizer, keep_added: list[str] | None = None):
    """The same tokenizer with its vocabulary renumbered: special tokens first, then the rest sorted.

    Ids follow the vocabulary's sorted order, so the same token gets the same
    id — and, with one seed, the same embedding initialisation — and the
    saved ``tokenizer.json`` is the same bytes whatever order a trainer
    assigned them in. Only the ids change: WordPiece and BPE segment by token
    strings (and BPE's merges are stored as strings).

    Args:
        keep_added: the added (special) tokens to keep as such; other added tokens become plain vocabulary
            entries. ``None`` keeps them all.
    """
    from tokenizers import Tokenizer

    data = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    if keep_added is not None:
        data["added_tokens"] = [t for t in data.get("added_tokens", []) if t["content"] in keep_added]
    special = sorted((t["content"] for t in data.get("added_tokens", []) if t["content"] in vocab), key=vocab.get)
    ordered = special + sorted(t for t in vocab if t not in set(special))
    data["model"]["vocab"] = {token: i for i, token in enumerate(ordered)}
    for added in data.get("added_tokens", []):
        added["id"] = data["model"]["vocab"].get(added["content"], added["id"])
    return Tokenizer.from_str(json.dumps(data))


def encode_ids(tokenizer, texts: list[str], chunk: int = 1024) -> list[list[int]]:
    """Token ids of ``texts`` (truncated by the tokenizer), encoded ``chunk`` texts at a time.

    ``encode_batch`` keeps a full ``Encoding`` (tokens, offsets, masks) per text
    before truncation; on all 25,000 IMDB reviews at once that peaked at 4 GB of
    RSS, while chunks keep only the ids.
    """
    return encode_ids_counting(tokenizer, texts, chunk)[0]


def encode_ids_counting(tokenizer, texts: list[str], chunk: int = 1024) -> tuple[list[list[int]], int]:
    """:func:`encode_ids`, and how many of the texts were truncated to the tokenizer's maximum length."""
    ids: list[list[int]] = []
    truncated = 0
    for start in range(0, len(texts), chunk):
        for enc in tokenizer.encode_batch(texts[start : start + chunk]):
            ids.append(enc.ids)
            truncated += bool(enc.overflowing)
    return ids, truncated


def column(ds: datasets.Dataset, name: str) -> list[Any]:
    """A whole column as a Python list, read through Arrow in one go (respects indices mappings)."""
    return ds.with_format("arrow")[name].to_pylist()


def _resolve_local_dir(local_dir: str | os.PathLike | None) -> Path | None:
    if local_dir in (None, ""):
        return None
    return user_path(local_dir)


class TextClassificationDataModule(pl.LightningDataModule):
    """LightningDataModule over a Hugging Face text-classification dataset.

    Args:
        name: short name; the local folder is ``<local_dir>/<name>/``.
        hub_id: Hugging Face Hub dataset id (e.g. ``stanfordnlp/sst2``).
        text_column: column holding the text.
        label_column: column holding the ``ClassLabel``.
        train_split: source split that is carved into train and validation.
        test_split: official held-out split, reported as ``test/*``.
        hub_config: optional Hub configuration name.
        local_dir: folder of local Parquet mirrors; ``None`` means Hub only.
        cache_dir: where tokenizers and tokenized splits are cached.
        val_size: validation fraction (< 1) or row count (>= 1) carved from train.
        split_seed: seed of that carving (fixed, independent of the run's seed).
        max_length: truncate every text to at most this many tokens.
        batch_size: training batch size; ``eval_batch_size`` for val/test.
        num_workers: DataLoader worker processes.
        tokenizer: ``{kind: wordpiece|byte_bpe|bytes, vocab_size, lowercase, min_frequency}``
            (``bytes``: one token per UTF-8 byte, vocab_size ignored).
        max_train_samples, max_eval_samples: optional caps for short runs
            (``max_eval_samples`` applies to validation and test).
        batching: ``random`` (batches of a random permutation, dataset-order
            evaluation) or ``length_grouped`` (training batches of similar length
            drawn from random megabatches, evaluation batches sorted by length:
            :class:`LengthGroupedBatchSampler`).
        megabatch_size: batches per length-sorted megabatch (``length_grouped``).

    Raises (from :meth:`prepare_data` / :meth:`setup`):
        DataUnavailableError: no local files and the Hub unreachable.
        DataConfigError: missing columns, labels outside the class set, bad sizes.
    """

    def __init__(
        self,
        name: str,
        hub_id: str,
        text_column: str,
        label_column: str,
        train_split: str = "train",
        test_split: str = "test",
        hub_config: str | None = None,
        local_dir: str | None = None,
        cache_dir: str = "~/.cache/attnbench",
        val_size: float = 0.05,
        split_seed: int = 1234,
        max_length: int = 128,
        batch_size: int = 64,
        eval_batch_size: int = 256,
        num_workers: int = 0,
        tokenizer: dict[str, Any] | None = None,
        max_train_samples: int | None = None,
        max_eval_samples: int | None = None,
        batching: str = "random",
        megabatch_size: int = 50,
    ) -> None:
        super().__init__()
        for key, value in (("max_length", max_length), ("batch_size", batch_size), ("eval_batch_size", eval_batch_size),
                           ("max_train_samples", max_train_samples), ("max_eval_samples", max_eval_samples)):
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise DataConfigError(f"data.{key} must be an integer >= 1{' or null' if 'samples' in key else ''}, "
                                      f"got {value!r}")
        if batching not in BATCHING:
            raise DataConfigError(f"data.batching must be one of {', '.join(BATCHING)}, got {batching!r}")
        if isinstance(megabatch_size, bool) or not (isinstance(megabatch_size, int) and megabatch_size >= 1):
            raise DataConfigError(f"data.megabatch_size must be an integer >= 1, got {megabatch_size!r}")
        if not (isinstance(num_workers, int) and num_workers >= 0):
            raise DataConfigError(f"data.num_workers must be an integer >= 0, got {num_workers!r}")
        if isinstance(val_size, bool) or not isinstance(val_size, (int, float)) or not val_size > 0:
            raise DataConfigError(f"data.val_size must be a fraction in (0, 1) or a row count >= 1, got {val_size}")
        self.name = name
        self.hub_id = hub_id
        self.hub_config = hub_config
        self.text_column = text_column
        self.label_column = label_column
        self.train_split = train_split
        self.test_split = test_split
        self.local_dir = _resolve_local_dir(local_dir)
        self.cache_root = user_path(cache_dir)
        self.val_size = val_size
        self.split_seed = split_seed
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size)
        self.num_workers = int(num_workers)
        self.batching = batching
        self.megabatch_size = int(megabatch_size)
        self.tokenizer_cfg = {"kind": "wordpiece", "vocab_size": 16000, "lowercase": True, "min_frequency": 2}
        self.tokenizer_cfg.update(dict(tokenizer or {}))
        if self.tokenizer_cfg["kind"] not in ("wordpiece", "byte_bpe", "bytes"):
            raise DataConfigError(
                f"data.tokenizer.kind must be 'wordpiece', 'byte_bpe' or 'bytes', got {self.tokenizer_cfg['kind']!r}"
            )
        self.max_train_samples = max_train_samples
        self.max_eval_samples = max_eval_samples
        self.splits: dict[str, TokenizedSplit] = {}
        self.label_names: list[str] = []
        self.vocab_size = 0
        self.pad_id = 0
        self.cache_dir: Path | None = None
        self._source = ""
        self._missing_local: list[str] = []
        self.cache_hit: bool | None = None  # set by prepare_data: True when nothing was tokenized

    # ------------------------------------------------------------------ source
    def _local_files(self) -> dict[str, Path] | None:
        if self.local_dir is None:
            return None
        files = {s: self.local_dir / self.name / f"{s}.parquet" for s in (self.train_split, self.test_split)}
        missing = [str(p) for p in files.values() if not p.is_file()]
        self._missing_local = missing
        if missing:
            log.warning("Local data not found (%s); trying the Hugging Face Hub (%s).", ", ".join(missing), self.hub_id)
            return None
        return files

    def load_raw(self) -> datasets.DatasetDict:
        """The source splits ``{train_split, test_split}`` as a ``DatasetDict``.

        Raises:
            DataUnavailableError: neither local files nor the Hub are reachable.
        """
        files = self._local_files()
        if files is not None:
            log.info("Loading %s from local Parquet files in %s", self.name, self.local_dir / self.name)
            self._source = str(self.local_dir / self.name)
            return self._read_parquet(files)
        try:
            raw = datasets.load_dataset(self.hub_id, self.hub_config)
        except Exception as err:  # any failure here means "not reachable"
            if self.local_dir is None:
                local = "no local data dir (ATTNBENCH_DATA_DIR and data.local_dir are unset)"
            else:
                where = self.local_dir / self.name
                present = sorted(p.name for p in where.glob("*")) if where.is_dir() else []
                local = (f"no local Parquet files at {where}/{{{self.train_split},{self.test_split}}}.parquet (missing: "
                         f"{', '.join(Path(m).name for m in self._missing_local)}; the folder "
                         + (f"holds {present[:8]})" if present else "does not exist or is empty)"))
            raise DataUnavailableError(
                f"Cannot load dataset {self.name!r}: {local}, and the Hugging Face Hub ({self.hub_id}) "
                f"failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}. "
                "Fix: point ATTNBENCH_DATA_DIR (or data.local_dir=...) at a folder with "
                f"{self.name}/{self.train_split}.parquet and {self.name}/{self.test_split}.parquet, "
                "or run on a machine that reaches the Hub."
            ) from err
        self._source = f"hub:{self.hub_id}"
        missing = [s for s in (self.train_split, self.test_split) if s not in raw]
        if missing:
            raise DataConfigError(f"{self.hub_id} has no split(s) {missing}; it has {list(raw)}")
        return datasets.DatasetDict({s: raw[s] for s in (self.train_split, self.test_split)})

    def _read_parquet(self, files: dict[str, Path]) -> datasets.DatasetDict:
        """Read local Parquet files; an unreadable one is a :class:`DataConfigError` naming it."""
        splits = {}
        for split, path in files.items():
            try:
                splits[split] = datasets.load_dataset("parquet", data_files={split: str(path)}, split=split)
            except Exception as err:  # noqa: BLE001 - pyarrow/datasets raise many types for a bad file
                cause = str(err).splitlines()[0] if str(err) else ""
                raise DataConfigError(
                    f"Cannot read {path} as Parquet ({type(err).__name__}: {cause[:200]}). Re-export it, e.g. "
                    "pandas.read_csv(...).to_parquet(path), or point data.local_dir elsewhere."
                ) from None
        return datasets.DatasetDict(splits)

    # ------------------------------------------------------------------- cache
    def _cache_key(self, raw: datasets.DatasetDict) -> str:
        spec = {
            "version": CACHE_VERSION,
            "name": self.name,
            "source": [self.hub_id, self.hub_config, str(self.local_dir)],
            "fingerprints": {s: getattr(raw[s], "_fingerprint", None) for s in raw},
            "columns": [self.text_column, self.label_column],
            "splits": [self.train_split, self.test_split],
            "val_size": self.val_size,
            "split_seed": self.split_seed,
            "tokenizer": self.tokenizer_cfg,
            "tokenizers_version": tokenizers.__version__,  # another release may segment differently
            "max_length": self.max_length,
        }
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return f"{self.name}-{digest}"

    def _check_columns(self, raw: datasets.DatasetDict) -> list[str]:
        for split, ds in raw.items():
            for col in (self.text_column, self.label_column):
                if col not in ds.column_names:
                    raise DataConfigError(
                        f"{self.name}/{split} has no column {col!r}; its columns are {ds.column_names}. "
                        "Set data.text_column / data.label_column."
                    )
        feature = raw[self.train_split].features[self.label_column]
        if isinstance(feature, datasets.ClassLabel):
            self._align_class_names(raw, list(feature.names))
        train_labels = column(raw[self.train_split], self.label_column)
        string_labels = not isinstance(feature, datasets.ClassLabel) and bool(train_labels) and all(
            isinstance(y, str) for y in train_labels if y is not None)
        if isinstance(feature, datasets.ClassLabel):
            names = list(feature.names)
        elif string_labels:
            names = sorted({y for y in train_labels if y is not None})  # string labels: classes in sorted order
        else:
            names = [str(x) for x in sorted({y for y in train_labels if isinstance(y, int) and y >= 0})]
        for split, ds in raw.items():
            labels = column(ds, self.label_column)
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
                    f"{self.name}/{split}: {len(bad_values):,} of {len(labels):,} rows have labels outside the class "
                    f"set 0..{len(names) - 1} ({', '.join(examples)}).{hint}"
                )
        present = {y for y in train_labels}
        if len(names) < 2 or len(present) < 2:
            raise DataConfigError(
                f"{self.name}/{self.train_split}: only {len(present)} class(es) present in label column "
                f"{self.label_column!r} ({sorted(map(str, present))[:5]}); a classifier needs >= 2. Check "
                "data.label_column, or the file (was it filtered to one class?)."
            )
        return names

    def _align_class_names(self, raw: datasets.DatasetDict, names: list[str]) -> None:
        """Make every split's ``ClassLabel`` ids mean the training split's class names (in place).

        A split listing the same names in another order is re-numbered by name
        (``datasets.Dataset.align_labels_with_mapping``); before, its ids were
        taken as they were and every label of a reordered test split was flipped.

        Raises:
            DataConfigError: a split's class names are not the training split's.
        """
        for split, ds in list(raw.items()):
            other = ds.features[self.label_column]
            if split == self.train_split or not isinstance(other, datasets.ClassLabel) or list(other.names) == names:
                continue
            if sorted(other.names) != sorted(names):
                raise DataConfigError(
                    f"{self.name}/{split}: its class names {list(other.names)} are not those of "
                    f"{self.name}/{self.train_split} {names}; labels are matched by name, so the splits must name "
                    "the same classes. Fix the files' ClassLabel names, or set data.label_column / data.test_split.")
            log.info("%s/%s lists the classes in another order (%s) than %s (%s): its labels are matched by name.",
                     self.name, split, list(other.names), self.train_split, names)
            raw[split] = ds.align_labels_with_mapping({n: i for i, n in enumerate(names)}, self.label_column)

    def _label_ids(self, labels: list[Any], names: list[str]) -> list[int]:
        """Labels as class indices (string labels are mapped through ``names``)."""
        if labels and isinstance(labels[0], str):
            index = {n: i for i, n in enumerate(names)}
            return [index[y] for y in labels]
        return [int(y) for y in labels]

    def _train_tokenizer(self, texts: list[str]):
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

        cfg = self.tokenizer_cfg
        special = [PAD_TOKEN, UNK_TOKEN]
        if cfg["kind"] == "wordpiece":
            tok = Tokenizer(models.WordPiece(unk_token=UNK_TOKEN))
            tok.normalizer = normalizers.BertNormalizer(lowercase=bool(cfg["lowercase"]))
            tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            tok.decoder = decoders.WordPiece()
            # The trainer gives each continuing-subword symbol ("##e") its id when it first meets it while
            # walking the word counts, a hash map whose order Rust randomises per process, and breaks ties
            # between equally frequent merges by those ids: two processes learned different vocabularies.
            # Registering every such symbol up front, in sorted order (as extra special tokens, the trainer's
            # first ids), makes the ids, hence every tie, the same in every process. They are plain
            # vocabulary entries again afterwards (not added tokens), so "##e" in a text is not matched whole.
            continuing = continuing_symbols(tok, texts, "##")
            trainer = trainers.WordPieceTrainer(
                vocab_size=int(cfg["vocab_size"]), min_frequency=int(cfg["min_frequency"]),
                special_tokens=special + continuing, continuing_subword_prefix="##",
            )
        elif cfg["kind"] == "bytes":
            # One token per UTF-8 byte, nothing learned: the Long Range Arena "Text" setting (Tay et al. 2021).
            alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
            vocab = {token: i for i, token in enumerate(special + alphabet)}
            tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN))
            if cfg["lowercase"]:
                tok.normalizer = normalizers.Lowercase()
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
            tok.decoder = decoders.ByteLevel()
            tok.enable_truncation(self.max_length)
            return tok
        else:
            tok = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
            if cfg["lowercase"]:
                tok.normalizer = normalizers.Lowercase()
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
            tok.decoder = decoders.ByteLevel()
            trainer = trainers.BpeTrainer(
                vocab_size=int(cfg["vocab_size"]),
                min_frequency=int(cfg["min_frequency"]),
                special_tokens=special,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            )
        tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
        tok = canonical_token_ids(tok, keep_added=special)
        tok.enable_truncation(self.max_length)
        return tok

    def _carve(self, train: datasets.Dataset, texts: list[str]) -> tuple[datasets.Dataset, datasets.Dataset, Carving]:
        """Validation carved from ``train`` (whose texts are ``texts``) sharing no source text with what is left.

        See :mod:`attnbench.splits`: identical texts stay together, a phrase goes with the sentences that
        contain it, and no validation text is a substring of a training text.

        Raises:
            DataConfigError: ``data.val_size`` leaves no rows for one side.
        """
        n = len(train)
        n_val = round(self.val_size * n) if self.val_size < 1 else int(self.val_size)
        if not 1 <= n_val < n:
            raise DataConfigError(f"data.val_size={self.val_size} leaves no rows for train or val ({n} rows)")
        carving = carve_disjoint(texts, n_val, self.split_seed)
        if not carving.val or not carving.train:
            raise DataConfigError(
                f"{self.name}/{self.train_split}: no validation set of about {n_val} rows shares no text with the "
                f"training rows (the texts are all contained in each other); raise data.val_size.")
        if len(carving.val) < n_val:
            log.info("%s: validation has %d rows (data.val_size asks %d): whole groups of texts that share source "
                     "text go to one side.", self.name, len(carving.val), n_val)
        return train.select(carving.train), train.select(carving.val), carving

    def _clean(self, ds: datasets.Dataset, split: str, stats: SplitStats) -> tuple[datasets.Dataset, list[str]]:
        """Rows of ``ds`` with a non-empty text (policy above), and their texts as ``str``."""
        texts, keep, invalid = clean_texts(column(ds, self.text_column), self.text_column, f"{self.name}/{split}")
        stats.add(split, "dropped_empty", len(texts) - len(keep))
        stats.add(split, "invalid_utf8", invalid)
        if not keep:
            raise DataConfigError(f"{self.name}/{split}: all {len(texts):,} texts in column {self.text_column!r} "
                                  "are empty; set data.text_column to the column with the texts.")
        if len(keep) < len(texts):
            ds = ds.select(keep)
            texts = [texts[i] for i in keep]
        return ds, texts

    def _build_cache(self, raw: datasets.DatasetDict, target: Path) -> None:
        names = self._check_columns(raw)
        stats = SplitStats()
        train_src = raw[self.train_split].add_column("row_id", list(range(len(raw[self.train_split]))))
        test_src = raw[self.test_split].add_column("row_id", list(range(len(raw[self.test_split]))))
        train_src, _ = self._clean(train_src, "train", stats)
        test_src, test_texts = self._clean(test_src, "test", stats)
        train_texts = clean_texts(column(train_src, self.text_column), "", "")[0]
        train, val, carving = self._carve(train_src, train_texts)
        texts = {"train": [train_texts[i] for i in carving.train], "val": [train_texts[i] for i in carving.val],
                 "test": test_texts}
        leakage = {split: overlap_counts(texts["train"], texts[split]) for split in ("val", "test")}
        leakage.update(phrase_level=carving.phrase_level, containment_searched=carving.containment_searched,
                       moved_to_train=carving.moved_to_train, **carving.info)
        log.info("Training a %s tokenizer on %d training texts", self.tokenizer_cfg["kind"], len(train))
        tokenizer = self._train_tokenizer(texts["train"])
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        progress = datasets.utils.logging.is_progress_bar_enabled()
        datasets.disable_progress_bars()  # "Saving the dataset" bars are noise in a training log
        try:
            tokenizer.save(str(tmp / "tokenizer.json"))
            counts = {}
            for split, ds in (("train", train), ("val", val), ("test", test_src)):
                ids, truncated = encode_ids_counting(tokenizer, texts[split])
                stats.add(split, "truncated", truncated)
                out = datasets.Dataset.from_dict(
                    {"input_ids": ids, "label": self._label_ids(column(ds, self.label_column), names),
                     "row_id": column(ds, "row_id")}
                )
                out.save_to_disk(str(tmp / split))
                counts[split] = len(out)
            meta = {
                "label_names": names,
                "vocab_size": tokenizer.get_vocab_size(),
                "pad_id": tokenizer.token_to_id(PAD_TOKEN),
                "counts": counts,
                "source": self._source,
                "bad_rows": stats.counts,
                "leakage": leakage,
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
            try:
                tmp.rename(target)  # atomic: a cache dir is complete or absent
            except OSError:
                if not (target / "meta.json").is_file():  # another process won the race with a full cache
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if progress:
                datasets.enable_progress_bars()

    # -------------------------------------------------------------- lightning
    def prepare_data(self) -> None:
        """Load the source, then tokenize and cache it unless a cache for this config exists."""
        if self.cache_dir is not None and (self.cache_dir / "meta.json").is_file():
            return
        raw = self.load_raw()
        self.cache_root.mkdir(parents=True, exist_ok=True)
        target = self.cache_root / self._cache_key(raw)
        if (target / "meta.json").is_file():
            log.info("Reusing tokenized %s from cache %s", self.name, target)
            self.cache_hit = True
        else:
            self._build_cache(raw, target)
            log.info("Tokenized %s cached in %s", self.name, target)
            self.cache_hit = False
        self.cache_dir = target

    def setup(self, stage: str | None = None) -> None:
        """Read the cached splits into memory (once), applying the sample caps."""
        if self.splits:
            return
        if self.cache_dir is None:
            self.prepare_data()
        assert self.cache_dir is not None
        meta = json.loads((self.cache_dir / "meta.json").read_text())
        self.label_names = meta["label_names"]
        self.vocab_size = meta["vocab_size"]
        self.pad_id = meta["pad_id"]
        caps = {"train": self.max_train_samples, "val": self.max_eval_samples, "test": self.max_eval_samples}
        for split in SPLITS:
            ds = datasets.load_from_disk(str(self.cache_dir / split))
            if caps[split] is not None and caps[split] < len(ds):
                ds = ds.shuffle(seed=self.split_seed).select(range(int(caps[split])))
            self.splits[split] = TokenizedSplit(column(ds, "input_ids"), column(ds, "label"), column(ds, "row_id"))
        self._log_bad_rows(meta)
        self._log_leakage(meta)
        log.info(
            "%s: %s rows (train/val/test), %d classes %s, vocab %d",
            self.name,
            "/".join(str(len(self.splits[s])) for s in SPLITS),
            self.num_classes,
            self.label_names,
            self.vocab_size,
        )

    def _log_bad_rows(self, meta: dict[str, Any]) -> None:
        """One log line per kind of bad row found when the cache was built (counts before sample caps)."""
        counts = meta.get("bad_rows") or {}
        n = meta.get("counts", {})

        def per_split(key: str) -> str:
            return ", ".join(f"{s} {c[key]:,}" + (f" of {n[s]:,}" if key == "truncated" and s in n else "")
                             for s, c in sorted(counts.items(), key=lambda kv: SPLITS.index(kv[0])) if c.get(key))

        if per_split("dropped_empty"):
            log.warning("%s: dropped empty or whitespace-only texts: %s.", self.name, per_split("dropped_empty"))
        if per_split("invalid_utf8"):
            log.warning("%s: texts with bytes that are not UTF-8, decoded with U+FFFD replacement characters: %s.",
                        self.name, per_split("invalid_utf8"))
        if per_split("truncated"):
            log.info("%s: texts longer than data.max_length=%d tokens, truncated: %s (raise data.max_length to "
                     "keep more of them).", self.name, self.max_length, per_split("truncated"))

    def _log_leakage(self, meta: dict[str, Any]) -> None:
        """One log line: how many validation and test texts occur in the training texts (counts before caps)."""
        leak = meta.get("leakage")
        if not leak:
            return

        def part(split: str) -> str:
            c = leak[split]
            return (f"{split} {c['verbatim']:,} of {c['n']:,} identical to a training text, "
                    f"{c['substring']:,} contained as a substring")

        how = ("phrase-level data: a phrase went with the sentences containing it" if leak["phrase_level"] else
               "identical texts kept on one side" + ("" if leak["containment_searched"] else
                                                     " (texts too long for the phrase-containment search)"))
        caps = " Counted on the full splits, before data.max_*_samples." if (
            self.max_train_samples or self.max_eval_samples) else ""
        log.info("%s: overlap with the training texts: %s; %s (validation carved from %s, %s).%s", self.name,
                 part("val"), part("test"), self.train_split, how, caps)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        # The order and the loader's own seed never touch the global RNG (see EpochShuffleSampler).
        seed = int(os.environ.get("PL_GLOBAL_SEED", "0"))
        data = self.splits[split]
        common = dict(generator=torch.Generator().manual_seed(seed), collate_fn=PadCollator(self.pad_id),
                      num_workers=self.num_workers, persistent_workers=self.num_workers > 0)
        lengths = [len(ids) for ids in data.input_ids]
        if not shuffle:
            # evaluation: every row exactly once under DDP (attnbench.distributed.eval_sampler); with
            # length_grouped, each process's rows sorted by length so that batches carry little padding
            sampler = eval_sampler(data, self.trainer, lengths if self.batching == "length_grouped" else None)
            return DataLoader(data, batch_size=self.eval_batch_size, sampler=sampler, **common)
        sampler = EpochShuffleSampler(data, seed)
        if self.batching == "random":
            return DataLoader(data, batch_size=self.batch_size, sampler=sampler, **common)
        batch_sampler = LengthGroupedBatchSampler(sampler, self.batch_size, False, lengths,
                                                  megabatch_size=self.megabatch_size, shuffle=True, seed=seed)
        return DataLoader(data, batch_sampler=batch_sampler, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
