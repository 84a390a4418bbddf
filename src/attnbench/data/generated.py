"""Generated tasks: datasets made from their settings and a seed, with nothing to download.

``assoc_recall`` (associative recall as text classification): an example is ``num_pairs`` key->value pairs, each
written as one word ``k<key>=v<value>``, then the query word ``k<key>=?`` of one of those keys; the label is the
value that key was paired with (``num_values`` classes, named ``v0``..``v<num_values-1>``). Keys are distinct
within an example (drawn from ``num_keys``), values are drawn with replacement, the query is one of the example's
keys, each uniformly at random. With a word-level tokenizer each pair is one token, so recall is one hop of
attention: the query's token must find the token of its pair among the others. Anchors: the associative
retrieval task of Ba et al. 2016 ("Using Fast Weights to Attend to the Recent Past") and the multi-query
associative recall of Zoology (Arora et al. 2023), where attention solves recall that attention-free models
cannot.

Splits are disjoint as examples: two examples are the same when they hold the same set of pairs and the same
query (the order of the pairs aside). The test split is drawn first, then validation, then train, from one
``random.Random(seed)`` stream that skips every example drawn before, so the test and validation rows of a seed do
not depend on the training size.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any

from attnbench.data.errors import DataConfigError

GENERATORS = ("assoc_recall",)
GENERATOR_VERSION = 1  # part of the cache key: a change of the generation changes it
SPLIT_NAMES = ("train", "validation", "test")


def split_sizes(num_train: int, val_size: float, test_size: float) -> dict[str, int]:
    """Rows per generated split: ``num_train``; ``val_size`` and ``test_size`` as row counts (>= 1) or fractions of
    ``num_train`` (< 1), rounded, at least 1."""
    def rows(size: float) -> int:
        return max(1, round(size * num_train)) if size < 1 else int(size)

    return {"train": int(num_train), "validation": rows(val_size), "test": rows(test_size)}


def distinct_examples(num_pairs: int, num_keys: int, num_values: int) -> int:
    """How many different ``assoc_recall`` examples exist: key sets x value assignments x query keys."""
    return math.comb(num_keys, num_pairs) * num_values ** num_pairs * num_pairs


def check_assoc_recall(num_pairs: Any, num_keys: Any, num_values: Any, sizes: dict[str, int]) -> None:
    """Refuse settings that cannot make the asked splits.

    Raises:
        DataConfigError: a setting that is not an integer in range (``1 <= num_pairs <= num_keys``,
            ``num_values >= 2``), or more rows asked than half of the distinct examples (drawing them without
            repeats stays fast below that).
    """
    for key, value, low in (("num_pairs", num_pairs, 1), ("num_keys", num_keys, 1), ("num_values", num_values, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise DataConfigError(f"data.{key} must be an integer >= {low} for data.generator=assoc_recall, "
                                  f"got {value!r}")
    if num_pairs > num_keys:
        raise DataConfigError(f"data.num_pairs={num_pairs} must be <= data.num_keys={num_keys}: the keys of an "
                              "example are distinct")
    total, exist = sum(sizes.values()), distinct_examples(num_pairs, num_keys, num_values)
    if 2 * total > exist:
        raise DataConfigError(
            f"assoc_recall: {total:,} rows asked (train {sizes['train']:,}, validation {sizes['validation']:,}, "
            f"test {sizes['test']:,}) but only {exist:,} distinct examples exist with data.num_pairs={num_pairs}, "
            f"data.num_keys={num_keys}, data.num_values={num_values}; ask at most half of them (lower "
            "data.num_train / data.val_size / data.test_size, or raise data.num_keys or data.num_values).")


def assoc_recall(num_pairs: int, num_keys: int, num_values: int, sizes: dict[str, int], seed: int
                 ) -> dict[str, dict[str, list]]:
    """The ``assoc_recall`` splits (module docstring): ``{split: {"text": [...], "label": [...]}}``.

    Args:
        num_pairs: pairs per example (the memory load); num_keys: key vocabulary; num_values: value vocabulary,
            the number of classes.
        sizes: rows per split (:func:`split_sizes`).
        seed: the generation seed (``data.split_seed``).

    Raises:
        DataConfigError: as :func:`check_assoc_recall`.
    """
    check_assoc_recall(num_pairs, num_keys, num_values, sizes)
    rng = random.Random(seed)
    seen: set[tuple[frozenset, int]] = set()
    out: dict[str, dict[str, list]] = {}
    for split in ("test", "validation", "train"):
        texts: list[str] = []
        labels: list[int] = []
        while len(texts) < sizes[split]:
            keys = rng.sample(range(num_keys), num_pairs)
            values = [rng.randrange(num_values) for _ in keys]
            query = rng.randrange(num_pairs)
            identity = (frozenset(zip(keys, values)), keys[query])
            if identity in seen:
                continue
            seen.add(identity)
            texts.append(" ".join(f"k{k}=v{v}" for k, v in zip(keys, values)) + f" k{keys[query]}=?")
            labels.append(values[query])
        out[split] = {"text": texts, "label": labels}
    return {split: out[split] for split in SPLIT_NAMES}


def generated_splits(cfg) -> tuple[Any, list]:
    """The splits of ``cfg.generator`` as a ``datasets.DatasetDict`` (``text``, ``label`` as a ``ClassLabel``),
    and the source key (generator, its settings, seed, :data:`GENERATOR_VERSION`).

    Each split's fingerprint is a digest of the key and the split name, so the cache key is the same in every
    process (an in-memory dataset otherwise gets a random one).
    """
    import datasets

    sizes = split_sizes(cfg.num_train, cfg.val_size, cfg.test_size)
    settings = {"num_pairs": cfg.num_pairs, "num_keys": cfg.num_keys, "num_values": cfg.num_values,
                "sizes": sizes, "seed": cfg.split_seed}
    key = ["generated", cfg.generator, settings, GENERATOR_VERSION]
    rows = assoc_recall(cfg.num_pairs, cfg.num_keys, cfg.num_values, sizes, cfg.split_seed)
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=[f"v{i}" for i in range(cfg.num_values)])})
    splits = {}
    for split, data in rows.items():
        ds = datasets.Dataset.from_dict(data, features=features)
        digest = hashlib.sha256(json.dumps([key, split], sort_keys=True).encode()).hexdigest()[:16]
        splits[split] = datasets.Dataset(ds.data, info=ds.info, split=split, fingerprint=digest)
    return datasets.DatasetDict(splits), key
