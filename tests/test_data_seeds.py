"""Which seed each piece of the data pipeline follows, against independently built references.

- ``data.max_train_samples`` / ``data.max_eval_samples`` pick their subset with ``data.split_seed`` only: the runs of
  one sweep with seeds 0 and 1 must evaluate the SAME rows, or the paired Δ of report.py compares different test
  sets.
- The training order follows the run ``seed`` and the epoch: the data module's batches equal an
  ``EpochShuffleSampler(split, seed)`` (``batching=random``) or a
  ``LengthGroupedBatchSampler(EpochShuffleSampler(split, seed), ..., seed=seed)`` (``batching=length_grouped``)
  built here by hand, for every epoch given to ``set_epoch``.
"""

from __future__ import annotations

import datasets
import pytest
import torch
from hydra.utils import instantiate

from attnbench.data.samplers import EpochShuffleSampler, LengthGroupedBatchSampler

from .test_faults import compose_cfg, toy  # noqa: F401  (the toy dataset fixture)


def _datamodule(toy_overrides, seed: int, *overrides: str):
    cfg = compose_cfg([*toy_overrides, *overrides])
    dm = instantiate(cfg.data, seed=seed)
    dm.prepare_data()
    dm.setup("fit")
    return dm, cfg


@pytest.mark.parametrize("split_seed", [1234, 7])
def test_the_sample_caps_follow_the_split_seed_not_the_run_seed(toy, split_seed):  # noqa: F811
    caps = ("data.max_train_samples=30", "data.max_eval_samples=10", f"data.split_seed={split_seed}")
    dm0, _ = _datamodule(toy, 0, *caps)
    dm1, _ = _datamodule(toy, 1, *caps)
    full = {s: datasets.load_from_disk(str(dm0.cache_dir / s)) for s in ("train", "val", "test")}
    for split, n in (("train", 30), ("val", 10), ("test", 10)):
        assert len(full[split]) > n  # the cap applies
        expected = full[split].shuffle(seed=split_seed).select(range(n))["row_id"]  # independent of the module
        assert dm0.splits[split].row_ids == expected, split
        assert dm1.splits[split].row_ids == expected, split  # another run seed: the same rows
    other, _ = _datamodule(toy, 0, *caps[:2], f"data.split_seed={split_seed + 1}")
    # another split_seed: another carve and another subset (the row ids of the capped test split differ)
    assert other.splits["test"].row_ids != dm0.splits["test"].row_ids


@pytest.mark.parametrize("batching", ["random", "length_grouped"])
def test_the_training_batches_are_the_samplers_of_the_run_seed_and_epoch(toy, batching):  # noqa: F811
    # megabatch_size=2 makes several megabatches (16 of 8 rows here), so both the megabatch contents and the
    # shuffled batch order are visible in the batches
    for seed in (0, 1, 5):
        dm, cfg = _datamodule(toy, seed, f"data.batching={batching}", "data.megabatch_size=2")
        split = dm.splits["train"]
        loader = dm.train_dataloader()
        for epoch in (0, 1, 3):
            sampler = EpochShuffleSampler(split, seed)
            if batching == "random":
                sampler.set_epoch(epoch)
                order = list(sampler)
                expected = [order[i : i + cfg.data.batch_size] for i in range(0, len(order), cfg.data.batch_size)]
            else:
                lengths = [len(ids) for ids in split.input_ids]
                batch_sampler = LengthGroupedBatchSampler(sampler, cfg.data.batch_size, False, lengths,
                                                          megabatch_size=2, shuffle=True, seed=seed)
                batch_sampler.sampler.set_epoch(epoch)
                expected = batch_sampler.batches()
                # by hand, the documented algorithm: the epoch's order cut into megabatches of 2 batches, each
                # sorted by length (longest first, stable), cut into batches, then all batches permuted by a
                # generator of (seed, epoch) only, a stream apart from the sampler's (samplers.py)
                order, span, bs = list(sampler), 2 * cfg.data.batch_size, cfg.data.batch_size
                by_hand = []
                for start in range(0, len(order), span):
                    mega = sorted(order[start : start + span], key=lambda i: -lengths[i])
                    by_hand += [mega[b : b + bs] for b in range(0, len(mega), bs)]
                perm = torch.randperm(len(by_hand), generator=torch.Generator().manual_seed(
                    (seed * 1_000_003 + epoch) * 2 + 1)).tolist()
                assert expected == [by_hand[i] for i in perm], (seed, epoch)
            # what Lightning does before each epoch: set_epoch on the sampler (of the batch sampler)
            inner = loader.batch_sampler.sampler if batching == "length_grouped" else loader.sampler
            inner.set_epoch(epoch)
            got = [batch["labels"].tolist() for batch in loader]
            assert got == [[split.labels[i] for i in b] for b in expected], (seed, epoch)
            # and the rows themselves (labels alone could coincide): compare the index lists
            assert [list(b) for b in loader.batch_sampler] == [list(b) for b in expected], (seed, epoch)
