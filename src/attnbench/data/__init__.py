"""Text-classification data: any dataset by config (Hub, local files, packaged default), token batches out.

The package, one job per module: :mod:`.config` (the typed ``data.*`` keys, validated in one place),
:mod:`.sources` (where rows come from), :mod:`.rows` (bad-row policy, label checks), :mod:`.splits`
(group-aware carving, stratified test carving, k-fold), :mod:`.tokenizer`, :mod:`.cache`, :mod:`.samplers`,
:mod:`.datamodule` (the LightningDataModule that orders them).
"""

from __future__ import annotations

import importlib
from typing import Any

from attnbench.data.config import BATCHING, DataConfig
from attnbench.data.errors import DataConfigError, DataUnavailableError

# Everything else loads on first use (PEP 562), so that the config checks (`DataConfig`, no torch) answer in a
# second: `from attnbench.data import TextClassificationDataModule` imports the datamodule then.
_LAZY = {
    "CACHE_VERSION": "cache",
    "SPLITS": "datamodule", "TextClassificationDataModule": "datamodule",
    "SplitStats": "rows", "clean_texts": "rows", "column": "rows",
    "EpochShuffleSampler": "samplers", "LengthGroupedBatchSampler": "samplers", "PadCollator": "samplers",
    "ResumableDataLoader": "samplers", "TokenizedSplit": "samplers",
    "PAD_TOKEN": "tokenizer", "SEP_TOKEN": "tokenizer", "UNK_TOKEN": "tokenizer", "canonical_token_ids": "tokenizer",
    "continuing_symbols": "tokenizer", "encode_ids_counting": "tokenizer",
    "train_tokenizer": "tokenizer",
}


def __getattr__(name: str) -> Any:
    if name == "datasets":  # tests patch ``attnbench.data.datasets.load_dataset``
        return importlib.import_module("datasets")
    if name in _LAZY:
        return getattr(importlib.import_module(f"attnbench.data.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'attnbench.data' has no attribute {name!r}")


__all__ = sorted([*_LAZY, "BATCHING", "DataConfig", "DataConfigError", "DataUnavailableError"])
