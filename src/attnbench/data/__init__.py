"""Text-classification data: any dataset by config (Hub, local files, packaged default), token batches out.

The package, one job per module: :mod:`.config` (the typed ``data.*`` keys, validated in one place),
:mod:`.sources` (where rows come from), :mod:`.rows` (bad-row policy, label checks), :mod:`.splits`
(group-aware carving, stratified test carving, k-fold), :mod:`.tokenizer`, :mod:`.cache`, :mod:`.samplers`,
:mod:`.datamodule` (the LightningDataModule that orders them).
"""

from __future__ import annotations

import datasets  # noqa: F401 - tests patch ``attnbench.data.datasets.load_dataset``

from attnbench.data.cache import CACHE_VERSION
from attnbench.data.config import BATCHING, DataConfig
from attnbench.data.datamodule import SPLITS, TextClassificationDataModule
from attnbench.data.errors import DataConfigError, DataUnavailableError
from attnbench.data.rows import SplitStats, clean_texts, column
from attnbench.data.samplers import EpochShuffleSampler, LengthGroupedBatchSampler, PadCollator, TokenizedSplit
from attnbench.data.tokenizer import (PAD_TOKEN, SEP_TOKEN, UNK_TOKEN, canonical_token_ids, continuing_symbols,
                                      encode_ids, encode_ids_counting, train_tokenizer)

__all__ = [
    "BATCHING", "CACHE_VERSION", "PAD_TOKEN", "SEP_TOKEN", "SPLITS", "UNK_TOKEN", "DataConfig", "DataConfigError",
    "DataUnavailableError", "EpochShuffleSampler", "LengthGroupedBatchSampler", "PadCollator", "SplitStats",
    "TextClassificationDataModule", "TokenizedSplit", "canonical_token_ids", "clean_texts", "column",
    "continuing_symbols", "encode_ids", "encode_ids_counting", "train_tokenizer",
]
