"""What the loaders iterate: a tokenized split in memory, the epoch shuffle, length-grouped batches, padding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler

from attnbench.data.errors import DataConfigError

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
        seed: the run's seed (``seed``, passed to the data module explicitly).
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

    Training (``megabatch_size`` set): the index order of ``sampler`` (a new random permutation each epoch) is cut
    into *megabatches* of ``megabatch_size`` batches; each megabatch is sorted by length (longest first) and cut
    into batches of ``batch_size``; then the order of all batches of the epoch is shuffled: Hugging Face
    ``Trainer``'s ``group_by_length`` (``LengthGroupedSampler``) with fairseq's shuffled batch order, so neither the
    batches' members nor their order follow a length curriculum. Evaluation (``megabatch_size=None``,
    ``shuffle=False``): batches sorted by length, longest first. There are as many batches as a plain
    ``BatchSampler`` makes (only the epoch's last can be short, unless ``drop_last``).

    Determinism: the batch-order shuffle draws from a generator seeded by the sampler's ``(seed, epoch)`` only
    (Lightning calls ``set_epoch`` on ``batch_sampler.sampler``), never from the global RNG, so a run resumed from
    an epoch-end checkpoint sees the same batches. DDP: Lightning (``use_distributed_sampler``) rebuilds this batch
    sampler with a ``DistributedSampler`` as ``sampler``; each process then groups its own shard.

    Args:
        sampler: yields dataset indices (``EpochShuffleSampler``, ``SequentialSampler`` or Lightning's
            ``DistributedSampler``).
        batch_size: examples per batch (>= 1); drop_last: drop the epoch's last short batch.
        lengths: token count of every dataset example (indexed by dataset index).
        megabatch_size: batches per megabatch (>= 1), or ``None`` for one megabatch (evaluation: fully sorted).
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


def _sampler_epoch(loader: DataLoader) -> int:
    """The epoch whose order ``loader``'s training sampler yields (``set_epoch``'s last argument; 0 if none)."""
    for sampler in (getattr(loader.batch_sampler, "sampler", None), loader.sampler):
        if sampler is not None and hasattr(sampler, "epoch"):
            return int(sampler.epoch)
    return 0


class _SkipBatches:
    """``batch_sampler`` without the first ``loader``'s pending skip batches of the epoch (same ``len``).

    The skip is read when iteration starts (after Lightning's ``set_epoch``), and only used if the epoch is
    the one the skip was recorded for.
    """

    def __init__(self, batch_sampler: Any, loader: ResumableDataLoader) -> None:
        self.batch_sampler = batch_sampler
        self.loader = loader

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        skip = self.loader._take_skip()
        for k, batch in enumerate(self.batch_sampler):  # index lists only: no row is read or collated
            if k >= skip:
                yield batch


class ResumableDataLoader(DataLoader):
    """The training ``DataLoader``: a mid-epoch checkpoint records how far into the epoch it was, and a resume
    from it continues with the next batch of the same order.

    This is Lightning's resumable-loader interface (``state_dict``/``load_state_dict`` on a loader,
    ``pytorch_lightning.loops.fit_loop.FitLoop.on_save_checkpoint``: the state is stored in the checkpoint's
    fit-loop state as ``combined_loader`` and given back to the loader when a fit restarts from it). Since an
    epoch's batches are a function of (seed, epoch) only (:class:`EpochShuffleSampler`,
    :class:`LengthGroupedBatchSampler`, Lightning's ``DistributedSampler`` under DDP), skipping the first
    ``batches_done`` batches of the epoch's order gives exactly the batches the uninterrupted run went on
    with. Skipped batches are skipped as index lists: no row is read, collated or sent to a worker.

    State: ``{"epoch": int, "batches_done": int, "batches_per_epoch": int}`` — batches of epoch ``epoch``
    this loader has delivered (counted where they leave the loader, so worker prefetch does not count).
    :class:`attnbench.run.resume.ResumeState` may correct ``batches_done`` on resume to the
    count Lightning's loop continues from (:meth:`resume_at`), which differs only for a checkpoint taken
    inside a training step (Ctrl-C there).

    Same arguments as :class:`torch.utils.data.DataLoader`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._delivered = 0  # batches of the current epoch delivered (including skipped ones)
        self._epoch = 0
        self._skip: tuple[int, int] | None = None  # (epoch, batches to skip) pending for the next iteration
        self.restored: dict[str, int] | None = None  # the state given by load_state_dict (None: none restored)
        self.started_at: tuple[int, int] | None = None  # (epoch, first batch) of the order the last iteration took

    @property
    def _index_sampler(self):  # type: ignore[override]
        return _SkipBatches(super()._index_sampler, self) if self._auto_collation else super()._index_sampler

    def _take_skip(self) -> int:
        epoch = _sampler_epoch(self)
        pending, self._skip = self._skip, None
        skip = pending[1] if pending is not None and pending[0] == epoch else 0
        self._epoch, self._delivered = epoch, skip
        self.started_at = (epoch, skip)
        return skip

    def __iter__(self):
        # DataLoader's iterator is made at the first fetch, not at iter(): with workers it reads the epoch's order
        # and starts prefetching as soon as it exists, and Lightning calls iter() before it restores the loader's
        # state and sets the sampler's epoch on resume.
        def delivered():
            for batch in DataLoader.__iter__(self):
                self._delivered += 1
                yield batch

        return delivered()

    def state_dict(self) -> dict[str, int]:
        """Where the loader is: ``{"epoch", "batches_done", "batches_per_epoch"}`` (see the class docstring)."""
        return {"epoch": self._epoch, "batches_done": self._delivered, "batches_per_epoch": len(self)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue epoch ``state_dict["epoch"]`` after its first ``batches_done`` batches when it is next iterated."""
        self.restored = {k: int(v) for k, v in state_dict.items()}
        self.resume_at(self.restored["epoch"], self.restored["batches_done"])

    def resume_at(self, epoch: int, batches_done: int) -> None:
        """Make the next iteration, if it is of epoch ``epoch``, start at batch ``batches_done`` of its order."""
        self._skip = (int(epoch), max(int(batches_done), 0))


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
