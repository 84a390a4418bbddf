"""The LightningDataModule: any text-classification dataset by config, padded token batches out. It only orders
the jobs of the other modules of :mod:`attnbench.data`.

Splits (:class:`~attnbench.data.config.DataConfig`): validation, and a test set where the source has no test
split, are carved from train so that no held-out text equals or occurs inside a training text
(:mod:`attnbench.data.splits`); class names are matched by name across splits.

Tokenizer: trained on the training rows only; every split is tokenized once and cached on disk with the tokenizer
(:mod:`attnbench.data.cache`: the key hashes everything that changes the result, a damaged entry is rebuilt).
Reading writes nothing into the entry (the sample caps select rows in memory).

Lightning's rule: :meth:`prepare_data` (one process per node) only writes the cache; :meth:`setup` (every
process) finds the cache itself and never relies on anything ``prepare_data`` stored.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, NamedTuple

import datasets
import pytorch_lightning as pl
import tokenizers
import torch
from torch.utils.data import DataLoader

from attnbench.data.cache import cache_key, read_or_rebuild, reading, write_atomically
from attnbench.data.config import DataConfig
from attnbench.data.errors import DataConfigError
from attnbench.data.rows import SplitStats, check_columns_and_labels, clean_texts, column, label_ids
from attnbench.data.samplers import (
    EpochShuffleSampler,
    LengthGroupedBatchSampler,
    PadCollator,
    ResumableDataLoader,
    TokenizedSplit,
)
from attnbench.data.sources import Source, load_source, local_root
from attnbench.data.splits import Carving, carve_disjoint, carve_stratified, cv_fold, overlap_counts
from attnbench.data.tokenizer import (
    NO_TEXT_TOKENS,
    PAD_TOKEN,
    SEP_TOKEN,
    encode_ids_counting,
    token_counts,
    train_tokenizer,
)
from attnbench.distributed import eval_sampler
from attnbench.paths import user_path

log = logging.getLogger("attnbench.data")

SPLITS = ("train", "val", "test")
COLUMNS = ("input_ids", "label", "row_id")  # of each cached split
PAIR_COLUMNS = ("attnbench_first_text", "attnbench_second_text")  # sentence pairs' cleaned texts, while building


class CacheEntry(NamedTuple):
    """A cache entry read whole: its folder, ``meta.json``, the splits (sample caps applied) and the tokenizer."""

    folder: Path
    meta: dict[str, Any]
    splits: dict[str, TokenizedSplit]
    tokenizer: tokenizers.Tokenizer


def check_meta(meta: Any) -> None:
    """Raise ``ValueError`` unless ``meta`` (a parsed ``meta.json``) has the fields a reader uses, of their types."""
    if not isinstance(meta, dict):
        raise ValueError(f"expected a JSON object, got {type(meta).__name__}")
    missing = [k for k in ("label_names", "vocab_size", "pad_id", "counts") if k not in meta]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    names, counts = meta["label_names"], meta["counts"]
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise ValueError(f"label_names is not a list of class names: {names!r}")
    if not all(type(meta[k]) is int and meta[k] >= 0 for k in ("vocab_size", "pad_id")):
        raise ValueError(f"vocab_size {meta['vocab_size']!r} and pad_id {meta['pad_id']!r} must be integers")
    if not (isinstance(counts, dict) and all(type(counts.get(s)) is int for s in SPLITS)):
        raise ValueError(f"counts has no row count per split: {counts!r}")
    for key in ("bad_rows", "truncation", "leakage"):
        if not isinstance(meta.get(key) or {}, dict):
            raise ValueError(f"{key} is not a JSON object")


def check_tokenizer(tokenizer: tokenizers.Tokenizer, meta: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless ``tokenizer`` is the one ``meta`` describes: ``vocab_size`` ids, each of which
    maps to a token that maps back to it, and ``[PAD]`` at ``pad_id``."""
    n = tokenizer.get_vocab_size()
    if n != meta["vocab_size"]:
        raise ValueError(f"{n} tokens, meta.json says {meta['vocab_size']}")
    if tokenizer.token_to_id(PAD_TOKEN) != meta["pad_id"]:
        raise ValueError(f"{PAD_TOKEN} has id {tokenizer.token_to_id(PAD_TOKEN)}, meta.json says {meta['pad_id']}")
    lost = next((i for i in range(n) if tokenizer.token_to_id(tokenizer.id_to_token(i) or "") != i), None)
    if lost is not None:
        raise ValueError(f"id {lost} does not map back to itself through its token")


class TextClassificationDataModule(pl.LightningDataModule):
    """LightningDataModule over any text-classification dataset (Hub, local files, packaged default data).

    Args:
        seed: the run's seed (``cfg.seed``): the order of the training batches of each epoch is a function of
            ``(seed, epoch)`` only (:class:`EpochShuffleSampler`).
        **data: the ``data.*`` keys, kept as :attr:`cfg` (a :class:`attnbench.data.config.DataConfig`, where their
            meaning, defaults and ranges are documented).

    Raises:
        DataConfigError: at construction, a key outside its range; from :meth:`prepare_data` / :meth:`setup`,
            missing columns, labels outside the class set, bad sizes.
        DataUnavailableError: from :meth:`prepare_data` / :meth:`setup`: no local files, no Hub, no packaged copy.
    """

    def __init__(self, seed: int = 0, **data: Any) -> None:
        super().__init__()
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise DataConfigError(f"seed must be an integer, got {seed!r}")
        self.cfg = DataConfig(**data)
        self.seed = int(seed)
        cfg = self.cfg
        self.name, self.max_length, self.batch_size = cfg.name, cfg.max_length, cfg.batch_size
        self.local_dir = local_root(cfg)
        self.cache_root = user_path(cfg.cache_dir)
        self.splits: dict[str, TokenizedSplit] = {}
        self.label_names: list[str] = []
        self.vocab_size = 0
        self.pad_id = 0
        self.cache_dir: Path | None = None  # where setup() read the splits (prepare_data reports it too)
        self.cache_hit: bool | None = None  # whether nothing was tokenized (a report; setup never reads it)
        self.tokenizer: tokenizers.Tokenizer | None = None  # the cached tokenizer, set by setup()
        self._located: tuple[Path, Source] | None = None
        self._entry: CacheEntry | None = None  # read by prepare_data(), handed to setup() in the same process

    # ------------------------------------------------------------------ cache
    def _cache_spec(self, source: Source) -> dict[str, Any]:
        """What the tokenized splits depend on (the source key holds each local file's SHA-256,
        :func:`~attnbench.data.sources.file_sha256`)."""
        cfg, roles = self.cfg, source.roles
        spec: dict[str, Any] = {
            "source": source.key,
            "fingerprints": {s: getattr(source.splits[s], "_fingerprint", None) for s in source.splits},
            "columns": [cfg.text_column, cfg.label_column],
            "splits": [cfg.train_split, cfg.test_split],
            "val_size": cfg.val_size,
            "split_seed": cfg.split_seed,
            "tokenizer": cfg.tokenizer,
            "tokenizers_version": tokenizers.__version__,  # another release may segment differently
            "max_length": cfg.max_length,
        }
        # settings added for any dataset: in the key only when used
        if cfg.text_pair_column is not None:
            spec["text_pair_column"] = [cfg.text_pair_column, SEP_TOKEN, "longest_first"]
        if roles["val"] is not None:
            spec["val_split"] = roles["val"]
        if roles["test"] is None:
            spec["test_carving"] = {"cv_folds": cfg.cv_folds, "fold": cfg.fold} if cfg.cv_folds else {
                "test_size": cfg.test_size}
        return spec

    def _locate(self) -> tuple[Path, Source]:
        """The cache folder of this config and its loaded source (computed once per instance, by any process)."""
        if self._located is None:
            source = load_source(self.cfg, self.local_dir)
            self._located = (self.cache_root / cache_key(self.cfg.name, self._cache_spec(source)), source)
        return self._located

    def _ensure_cache(self) -> tuple[Path, bool]:
        """The cache folder, read whole (kept for :meth:`setup`) or else (re)built and read; and whether it was
        whole already."""
        target, source = self._locate()
        self._entry, hit = read_or_rebuild(target, self._read_entry, lambda folder: self._build_cache(source, folder))
        return target, hit

    def _read_entry(self, folder: Path) -> CacheEntry:
        """Every part of the cache entry ``folder``, checked against its ``meta.json``; the sample caps applied
        (rows chosen in memory by a shuffle with ``split_seed``, so nothing is written into ``folder``).

        Raises:
            attnbench.data.cache.CacheDamaged: naming the first part that fails to read or does not match ``meta.json``.
        """
        cfg = self.cfg
        with reading(folder / "meta.json"):
            meta = json.loads((folder / "meta.json").read_text())
            check_meta(meta)
        caps = {"train": cfg.max_train_samples, "val": cfg.max_eval_samples, "test": cfg.max_eval_samples}
        splits: dict[str, TokenizedSplit] = {}
        for split in SPLITS:
            with reading(folder / split):
                ds = datasets.load_from_disk(str(folder / split))
                if len(ds) != meta["counts"][split] or not set(COLUMNS) <= set(ds.column_names):
                    raise ValueError(f"{len(ds)} rows with columns {ds.column_names}; meta.json says "
                                     f"{meta['counts'][split]} rows with columns {list(COLUMNS)}")
                if caps[split] is not None and caps[split] < len(ds):
                    ds = ds.shuffle(seed=cfg.split_seed, keep_in_memory=True).select(range(int(caps[split])))
                splits[split] = TokenizedSplit(*(column(ds, c) for c in COLUMNS))
        with reading(folder / "tokenizer.json"):
            tokenizer = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
            check_tokenizer(tokenizer, meta)
        return CacheEntry(folder, meta, splits, tokenizer)

    # ----------------------------------------------------------------- building
    def _train_tokenizer(self, texts: list[str]):
        """A tokenizer trained on ``texts`` (:func:`attnbench.data.tokenizer.train_tokenizer` with this config)."""
        t, pair = self.cfg.tokenizer, self.cfg.text_pair_column is not None
        return train_tokenizer(texts, t["kind"], t["vocab_size"], t["lowercase"], t["min_frequency"],
                               self.max_length, (SEP_TOKEN,) if pair else (), SEP_TOKEN if pair else None)

    def _clean(self, ds: datasets.Dataset, split: str, stats: SplitStats, source_split: str
               ) -> tuple[datasets.Dataset, list[str]]:
        """Rows of ``ds`` with non-empty text(s) (policy in :mod:`.rows`), and their texts as ``str``.

        A text is empty when it is null, has no visible character (:func:`~attnbench.data.rows.has_visible_character`),
        or the tokenizer cuts it into no token at all. Sentence
        pairs: both texts must be non-empty; the model sees ``"<first> [SEP] <second>"``, truncated
        longest text first (:func:`~attnbench.data.tokenizer.encode_ids_counting`). The returned texts are
        ``"<first> [SEP] <second>"`` (what carving and the overlap counts compare); the two cleaned texts are
        kept in the columns :data:`PAIR_COLUMNS` of the returned rows, for the tokenizer.
        """
        cfg = self.cfg
        where = f"{self.name}/{source_split}"
        texts, keep, invalid = clean_texts(column(ds, cfg.text_column), cfg.text_column, where)
        keep = self._with_tokens(texts, keep)
        if cfg.text_pair_column is not None:
            seconds, keep2, invalid2 = clean_texts(column(ds, cfg.text_pair_column), cfg.text_pair_column, where)
            keep = sorted(set(keep) & set(self._with_tokens(seconds, keep2)))
            invalid += invalid2
            ds = ds.add_column(PAIR_COLUMNS[0], texts).add_column(PAIR_COLUMNS[1], seconds)
            texts = [f"{a} {SEP_TOKEN} {b}" for a, b in zip(texts, seconds)]
        stats.add(split, "dropped_empty", len(texts) - len(keep))
        stats.add(split, "invalid_utf8", invalid)
        if not keep:
            columns = cfg.text_column + (f"/{cfg.text_pair_column}" if cfg.text_pair_column else "")
            raise DataConfigError(f"{where}: all {len(texts):,} texts in column {columns!r} are empty (or tokenize "
                                  "to nothing); set data.text_column to the column with the texts.")
        if len(keep) < len(texts):
            ds = ds.select(keep)
            texts = [texts[i] for i in keep]
        return ds, texts

    def _with_tokens(self, texts: list[str], keep: list[int]) -> list[int]:
        """The indices of ``keep`` whose text the tokenizer cuts into at least one token
        (:func:`~attnbench.data.tokenizer.token_counts`): texts of only zero-width or control characters, or of
        characters the normalizer removes, are empty texts too."""
        t = self.cfg.tokenizer
        counts = token_counts([texts[i] for i in keep], t["kind"], t["lowercase"])
        return [i for i, n in zip(keep, counts) if n > 0]

    def _carve(self, train: datasets.Dataset, texts: list[str]) -> tuple[datasets.Dataset, datasets.Dataset, Carving]:
        """Validation carved from ``train`` (whose texts are ``texts``) sharing no source text with what is left.

        See :mod:`attnbench.data.splits`: identical texts stay together, a phrase goes with the sentences that
        contain it, and no validation text is a substring of a training text.

        Raises:
            DataConfigError: ``data.val_size`` leaves no rows for one side.
        """
        cfg = self.cfg
        n = len(train)
        n_val = round(cfg.val_size * n) if cfg.val_size < 1 else int(cfg.val_size)
        if not 1 <= n_val < n:
            raise DataConfigError(f"data.val_size={cfg.val_size} leaves no rows for train or val ({n} rows)")
        carving = carve_disjoint(texts, n_val, cfg.split_seed)
        if not carving.val or not carving.train:
            raise DataConfigError(
                f"{self.name}/{cfg.train_split}: no validation set of about {n_val} rows shares no text with the "
                f"training rows (the texts are all contained in each other); raise data.val_size.")
        if len(carving.val) < n_val:
            log.info("%s: validation has %d rows (data.val_size asks %d): whole groups of texts that share source "
                     "text go to one side.", self.name, len(carving.val), n_val)
        return train.select(carving.train), train.select(carving.val), carving

    def _hold_out_test(self, train: datasets.Dataset, texts: list[str], names: list[str]
                       ) -> tuple[datasets.Dataset, datasets.Dataset, Carving]:
        """No test split: a stratified carved test set (``data.test_size``) or fold ``data.fold`` of k."""
        cfg = self.cfg
        labels = label_ids(column(train, cfg.label_column), names)
        n = len(train)
        if cfg.cv_folds:
            if n < cfg.cv_folds:
                raise DataConfigError(f"data.cv_folds={cfg.cv_folds} needs at least as many rows; "
                                      f"{self.name}/{cfg.train_split} has {n}")
            carving = cv_fold(texts, labels, cfg.cv_folds, cfg.fold, cfg.split_seed)
            what = f"fold {cfg.fold} of {cfg.cv_folds} (stratified, identical texts in one fold)"
        else:
            n_test = round(cfg.test_size * n) if cfg.test_size < 1 else int(cfg.test_size)
            if not 1 <= n_test < n:
                raise DataConfigError(f"data.test_size={cfg.test_size} leaves no rows for train or test ({n} rows)")
            carving = carve_stratified(texts, labels, n_test, cfg.split_seed)
            what = f"a stratified carve of data.test_size={cfg.test_size}"
        if not carving.val or not carving.train:
            raise DataConfigError(f"{self.name}/{cfg.train_split}: no test set shares no text with the training rows "
                                  "(the texts are all contained in each other); raise data.test_size or use a test "
                                  "split (data.test_split).")
        log.info("%s: no test split; test is %s of %s: %d rows held out, %d left%s.", self.name, what,
                 cfg.train_split, len(carving.val), len(carving.train),
                 f" ({carving.moved_to_train} held-out rows whose text occurs in a training text moved to training)"
                 if carving.moved_to_train else "")
        return train.select(carving.train), train.select(carving.val), carving

    def _build_cache(self, source: Source, target: Path) -> None:
        cfg = self.cfg
        raw, roles = source.splits, source.roles
        text_columns = [cfg.text_column] + ([cfg.text_pair_column] if cfg.text_pair_column else [])
        json_files = cfg.data_files if cfg.data_files and cfg.builder in ("json", "jsonl") else None
        names = check_columns_and_labels(raw, self.name, roles["train"], text_columns, cfg.label_column, json_files)
        stats = SplitStats()

        def with_row_ids(split: str) -> datasets.Dataset:
            return raw[split].add_column("row_id", list(range(len(raw[split]))))

        train_src, train_texts = self._clean(with_row_ids(roles["train"]), "train", stats, roles["train"])
        test_info: dict[str, Any] = {}
        if roles["test"] is not None:
            test_src, test_texts = self._clean(with_row_ids(roles["test"]), "test", stats, roles["test"])
        else:
            train_src, test_src, held = self._hold_out_test(train_src, train_texts, names)
            test_texts = [train_texts[i] for i in held.val]
            train_texts = [train_texts[i] for i in held.train]
            test_info = {"test_from": roles["train"], "test_moved_to_train": held.moved_to_train, **held.info}
        if roles["val"] is not None:
            val, val_texts = self._clean(with_row_ids(roles["val"]), "val", stats, roles["val"])
            train, texts = train_src, {"train": train_texts, "val": val_texts, "test": test_texts}
            carving_info: dict[str, Any] = dict(val_from=roles["val"], phrase_level=False, containment_searched=True,
                                                moved_to_train=0)
        else:
            train, val, carving = self._carve(train_src, train_texts)
            texts = {"train": [train_texts[i] for i in carving.train], "val": [train_texts[i] for i in carving.val],
                     "test": test_texts}
            carving_info = dict(phrase_level=carving.phrase_level, containment_searched=carving.containment_searched,
                                moved_to_train=carving.moved_to_train, **carving.info)
        leakage = {split: overlap_counts(texts["train"], texts[split]) for split in ("val", "test")}
        leakage.update(carving_info, **test_info)
        log.info("Training a %s tokenizer on %d training texts", cfg.tokenizer["kind"], len(train))
        pair = cfg.text_pair_column is not None
        tokenizer = self._train_tokenizer(  # a pair's two texts are two training texts
            column(train, PAIR_COLUMNS[0]) + column(train, PAIR_COLUMNS[1]) if pair else texts["train"])

        def write(tmp: Path) -> None:
            tokenizer.save(str(tmp / "tokenizer.json"))
            counts: dict[str, int] = {}
            truncation: dict[str, dict[str, dict[str, int]]] = {}
            for split, ds in (("train", train), ("val", val), ("test", test_src)):
                if pair:
                    ids, truncated, removed, no_text = encode_ids_counting(
                        tokenizer, column(ds, PAIR_COLUMNS[0]), column(ds, PAIR_COLUMNS[1]))
                else:
                    ids, truncated, removed, no_text = encode_ids_counting(tokenizer, texts[split])
                stats.add(split, "truncated", truncated)
                truncation[split] = dict(zip(text_columns, removed))
                rows = {"input_ids": ids, "label": label_ids(column(ds, cfg.label_column), names),
                        "row_id": column(ds, "row_id")}
                if no_text:  # the last check of the empty-text policy: no row is scored from no text
                    stats.add(split, "dropped_no_text_tokens", len(no_text))
                    keep = sorted(set(range(len(ids))) - set(no_text))
                    if not keep:
                        raise DataConfigError(
                            f"{self.name}/{roles[split] or roles['train']}: all {len(ids):,} texts tokenize to no "
                            f"token that shows text (only {', '.join(NO_TEXT_TOKENS)} or spaces); set "
                            "data.text_column to the column with the texts.")
                    rows = {k: [v[i] for i in keep] for k, v in rows.items()}
                out = datasets.Dataset.from_dict(rows)
                out.save_to_disk(str(tmp / split))
                counts[split] = len(out)
            meta = {
                "label_names": names,
                "vocab_size": tokenizer.get_vocab_size(),
                "pad_id": tokenizer.token_to_id(PAD_TOKEN),
                "counts": counts,
                "source": source.where,
                "roles": roles,
                "bad_rows": stats.counts,
                "truncation": truncation,  # split -> text column -> {rows, tokens} that truncation removed
                "leakage": leakage,
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2))

        progress = datasets.utils.logging.is_progress_bar_enabled()
        datasets.disable_progress_bars()  # "Saving the dataset" bars are noise in a training log
        try:
            write_atomically(target, write)
        finally:
            if progress:
                datasets.enable_progress_bars()

    # -------------------------------------------------------------- lightning
    def prepare_data(self) -> None:
        """Load the source, then tokenize and cache it unless a whole cache for this config exists (a damaged
        one is rebuilt).

        Needs nothing from :meth:`setup` and :meth:`setup` needs nothing from it: every process's :meth:`setup`
        finds the cache by its key, and only uses the entry read here when it runs in the same process.
        """
        if self._entry is not None or self.splits:  # Lightning calls it again in fit and test: read and said once
            return
        target, hit = self._ensure_cache()
        if hit:
            log.info("Reusing tokenized %s from cache %s", self.name, target)
        else:
            log.info("Tokenized %s cached in %s", self.name, target)
        self.cache_dir, self.cache_hit = target, hit

    def setup(self, stage: str | None = None) -> None:
        """Read the cached splits and tokenizer into memory (once), applying the sample caps; builds the cache if
        absent and rebuilds it if damaged."""
        if self.splits:
            return
        if self._entry is None:
            target, hit = self._ensure_cache()
            if self.cache_hit is None:
                self.cache_hit = hit
        entry, self._entry = self._entry, None
        self.cache_dir = entry.folder
        meta = entry.meta
        self.label_names = meta["label_names"]
        self.vocab_size = meta["vocab_size"]
        self.pad_id = meta["pad_id"]
        self.tokenizer = entry.tokenizer
        self.splits = dict(entry.splits)
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
            log.warning("%s: dropped empty texts (null, no visible character: only whitespace, zero-width, format or "
                        "control characters, or no token once tokenized): %s.", self.name, per_split("dropped_empty"))
        if per_split("dropped_no_text_tokens"):
            log.warning("%s: dropped texts that tokenize to no token that shows text (only %s or spaces, e.g. a "
                        "text \"[PAD]\", which the tokenizer matches as its special token): %s.", self.name,
                        ", ".join(NO_TEXT_TOKENS), per_split("dropped_no_text_tokens"))
        if per_split("invalid_utf8"):
            log.warning("%s: texts with bytes that are not UTF-8, decoded with U+FFFD replacement characters: %s.",
                        self.name, per_split("invalid_utf8"))
        if per_split("truncated"):
            removed: dict[str, dict[str, int]] = {}
            for by_column in (meta.get("truncation") or {}).values():
                for col, c in by_column.items():
                    total = removed.setdefault(col, {"rows": 0, "tokens": 0})
                    total["rows"] += c["rows"]
                    total["tokens"] += c["tokens"]
            what = "; truncation removed, per text column: " + ", ".join(
                f"{col} {c['tokens']:,} tokens from {c['rows']:,} rows" for col, c in removed.items()) if removed else ""
            log.info("%s: texts longer than data.max_length=%d tokens, truncated: %s (raise data.max_length to "
                     "keep more of them)%s.", self.name, self.max_length, per_split("truncated"), what)

    def _log_leakage(self, meta: dict[str, Any]) -> None:
        """One log line: how many validation and test texts occur in the training texts (counts before caps)."""
        cfg = self.cfg
        leak = meta.get("leakage")
        if not leak:
            return

        def part(split: str) -> str:
            c = leak[split]
            return (f"{split} {c['verbatim']:,} of {c['n']:,} identical to a training text, "
                    f"{c['substring']:,} contained as a substring")

        how = "identical texts kept on one side"
        contained = leak.get("units", 0) - leak.get("maximal_units", 0)
        if leak["phrase_level"] and contained > 0:
            how += (f", and the {contained:,} of {leak['units']:,} distinct texts that occur inside a longer text "
                    "kept with a text containing them")
        if not leak["containment_searched"]:
            how += " (texts too long for the containment search)"
        if leak.get("moved_to_train"):
            how += f"; {leak['moved_to_train']:,} validation rows whose text occurs in a training text moved to train"
        caps = " Counted on the full splits, before data.max_*_samples." if (
            cfg.max_train_samples or cfg.max_eval_samples) else ""
        val = (f"validation: the dataset's split {leak['val_from']}" if leak.get("val_from") else
               f"validation carved from {cfg.train_split}, {how}")
        log.info("%s: overlap with the training texts: %s; %s (%s).%s", self.name, part("val"), part("test"), val,
                 caps)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        # The order and the loader's own seed never touch the global RNG (see EpochShuffleSampler).
        cfg = self.cfg
        seed = self.seed
        data = self.splits[split]
        common = dict(generator=torch.Generator().manual_seed(seed), collate_fn=PadCollator(self.pad_id),
                      num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0)
        lengths = [len(ids) for ids in data.input_ids]
        if not shuffle:
            # evaluation: every row exactly once under DDP (attnbench.distributed.eval_sampler); with
            # length_grouped, each process's rows sorted by length so that batches carry little padding
            sampler = eval_sampler(data, self.trainer, lengths if cfg.batching == "length_grouped" else None)
            return DataLoader(data, batch_size=cfg.eval_batch_size, sampler=sampler, **common)
        # training: a mid-epoch checkpoint records the loader's place in the epoch's order (ResumableDataLoader)
        sampler = EpochShuffleSampler(data, seed)
        if cfg.batching == "random":
            return ResumableDataLoader(data, batch_size=self.batch_size, sampler=sampler, **common)
        batch_sampler = LengthGroupedBatchSampler(sampler, self.batch_size, False, lengths,
                                                  megabatch_size=cfg.megabatch_size, shuffle=True, seed=seed)
        return ResumableDataLoader(data, batch_sampler=batch_sampler, **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
