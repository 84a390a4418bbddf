"""Evaluation samplers under DDP: each process gets its own rows of a split, none repeated, longest first."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler


class LengthSortedSampler(torch.utils.data.Sampler):
    """Every index of a split once, longest first (ties keep index order): evaluation batches with little padding.

    Args:
        lengths: token count of each example, indexed by dataset index.
    """

    def __init__(self, lengths: Sequence[int]) -> None:
        self.lengths = list(lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(range(len(self.lengths)), key=lambda i: -self.lengths[i]))


class LengthSortedShardSampler(UnrepeatedDistributedSampler):
    """This process's rows of a split (``UnrepeatedDistributedSampler``: none repeated), longest first.

    A ``DistributedSampler`` subclass, so Lightning leaves the loader as it is.

    Args:
        dataset: the split.
        lengths: token count of each example, indexed by dataset index.
        **kwargs: ``num_replicas``, ``rank`` (as ``DistributedSampler``).
    """

    def __init__(self, dataset: Any, lengths: Sequence[int], **kwargs: Any) -> None:
        super().__init__(dataset, shuffle=False, **kwargs)
        self.lengths = list(lengths)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(super().__iter__(), key=lambda i: -self.lengths[i]))


def eval_sampler(dataset: Any, trainer: Any, lengths: Sequence[int] | None = None) -> Any:
    """The sampler of a validation/test loader: under DDP each process gets its own rows, none repeated.

    Lightning otherwise gives evaluation loaders a ``DistributedSampler``, which pads the split with repeated rows
    to a multiple of the number of processes: 63 rows on 2 processes are evaluated as 64 (val/acc 39/64 instead of
    39/63). ``UnrepeatedDistributedSampler`` (Lightning's, made for prediction) gives process ``r`` the rows
    ``r, r + W, r + 2W, ...``; the shards differ by at most one row, and the metrics (torchmetrics, summed states)
    count every row exactly once. Lightning leaves a loader that already has a ``DistributedSampler`` as it is.

    Args:
        dataset: the split (``len`` is used).
        trainer: the attached Trainer, or ``None``.
        lengths: token counts of the examples; when given, each process's rows come longest first
            (``data.batching=length_grouped``).

    Returns:
        The sampler, or ``None`` (sequential order) in a single process without ``lengths``.
    """
    kwargs = getattr(trainer, "distributed_sampler_kwargs", None) if trainer is not None else None
    if not kwargs or int(kwargs.get("num_replicas", 1)) <= 1 or len(dataset) < int(kwargs["num_replicas"]):
        # one process (or fewer rows than processes: Lightning's padded sampler, which needs no row)
        return LengthSortedSampler(lengths) if lengths is not None else None
    replicas = dict(num_replicas=int(kwargs["num_replicas"]), rank=int(kwargs["rank"]))
    if lengths is not None:
        return LengthSortedShardSampler(dataset, lengths, **replicas)
    return UnrepeatedDistributedSampler(dataset, shuffle=False, **replicas)
