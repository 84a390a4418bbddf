"""The epoch shuffle, length-grouped batches, padding, the cache key and folder, and the resume arithmetic,
against hand counts and properties stated in the docstrings (not read back from the code under test).

Written for the mutation scope of issue 16 (data/samplers.py, data/cache.py, run/resume.py,
run/resume.py); all CPU, no data files, well under a second each.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import SequentialSampler

from attnbench.run import resume as rs
from attnbench.data import cache as cache_mod
from attnbench.data.errors import DataConfigError
from attnbench.data.samplers import EpochShuffleSampler, LengthGroupedBatchSampler, PadCollator, TokenizedSplit
from attnbench.errors import ConfigError
from attnbench.run.resume import checkpoint_extras, resolve_checkpoint


def _data(n: int) -> TokenizedSplit:
    return TokenizedSplit(input_ids=[[1] * (i % 5 + 1) for i in range(n)], labels=[i % 2 for i in range(n)],
                          row_ids=list(range(n)))


# ----------------------------------------------------------------------------------------------- samplers


def test_tokenized_split_length_and_items():
    data = TokenizedSplit(input_ids=[[5, 6], [7]], labels=[1, 0], row_ids=[10, 3])
    assert len(data) == 2
    assert data[0] == ([5, 6], 1) and data[1] == ([7], 0)


def test_epoch_order_depends_on_seed_and_epoch_only():
    """README: a new order every epoch, a function of (seed, epoch) only — never of the global RNG."""
    n = 40
    orders = {}
    for seed in range(4):
        for epoch in range(4):
            torch.manual_seed(1000 + 7 * seed + epoch)  # the global RNG differs every time: must not matter
            sampler = EpochShuffleSampler(_data(n), seed=seed)
            sampler.set_epoch(epoch)
            order = list(sampler)
            assert sorted(order) == list(range(n))  # a permutation: every example once
            again = EpochShuffleSampler(_data(n), seed=seed)
            torch.rand(13)
            again.set_epoch(epoch)
            assert list(again) == order  # the same (seed, epoch): the same order in a fresh sampler
            orders[(seed, epoch)] = tuple(order)
    # every (seed, epoch) pair of the grid has its own order (16 permutations of 40: a collision means the
    # seed or the epoch was dropped or the two were mixed so that pairs coincide)
    assert len(set(orders.values())) == 16


def test_epoch_sampler_starts_at_epoch_zero_and_casts_its_arguments():
    sampler = EpochShuffleSampler(_data(30), seed="3")
    assert sampler.seed == 3 and sampler.epoch == 0
    explicit = EpochShuffleSampler(_data(30), seed=3)
    explicit.set_epoch(0)
    assert list(sampler) == list(explicit)
    sampler.set_epoch(2.0)
    assert sampler.epoch == 2 and isinstance(sampler.epoch, int)
    default = EpochShuffleSampler(_data(30))
    assert default.seed == 0
    assert list(default) == list(EpochShuffleSampler(_data(30), seed=0))
    assert list(default) != list(sampler)


class _ListSampler:
    def __init__(self, order):
        self.order = list(order)

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


def test_length_grouping_by_hand_without_shuffle():
    lengths = [3, 9, 1, 7, 5, 2, 8, 4]  # dataset index -> tokens
    sampler = _ListSampler([0, 1, 2, 3, 4, 5, 6, 7])
    # megabatch = 2 batches x 2 = 4 indices: [0,1,2,3] sorted longest first -> [1,3,0,2]; [4,5,6,7] -> [6,4,7,5]
    grouped = LengthGroupedBatchSampler(sampler, batch_size=2, drop_last=False, lengths=lengths, megabatch_size=2,
                                        shuffle=False)
    assert grouped.batches() == [[1, 3], [0, 2], [6, 4], [7, 5]]
    assert list(grouped) == grouped.batches()
    # one megabatch (evaluation): all 8 sorted longest first, batches of 3, the last short one kept
    whole = LengthGroupedBatchSampler(sampler, batch_size=3, drop_last=False, lengths=lengths, megabatch_size=None,
                                      shuffle=False)
    assert whole.batches() == [[1, 6, 3], [4, 7, 0], [5, 2]]
    dropped = LengthGroupedBatchSampler(sampler, batch_size=3, drop_last=True, lengths=lengths, megabatch_size=None,
                                        shuffle=False)
    assert dropped.batches() == [[1, 6, 3], [4, 7, 0]]
    # a full last batch is kept under drop_last
    even = LengthGroupedBatchSampler(sampler, batch_size=4, drop_last=True, lengths=lengths, megabatch_size=None,
                                     shuffle=False)
    assert even.batches() == [[1, 6, 3, 4], [7, 0, 5, 2]]
    # ties keep the sampler's order (stable sort)
    ties = LengthGroupedBatchSampler(_ListSampler([2, 0, 1]), batch_size=1, drop_last=False, lengths=[4, 4, 4],
                                     megabatch_size=None, shuffle=False)
    assert ties.batches() == [[2], [0], [1]]


def test_length_grouping_of_an_empty_or_one_batch_epoch():
    empty = LengthGroupedBatchSampler(_ListSampler([]), batch_size=2, drop_last=True, lengths=[], megabatch_size=None,
                                      shuffle=True)
    assert empty.batches() == []
    one = LengthGroupedBatchSampler(_ListSampler([1, 0]), batch_size=4, drop_last=False, lengths=[1, 2],
                                    megabatch_size=3, shuffle=True)
    assert one.batches() == [[1, 0]]


def test_length_grouping_defaults_and_validation():
    grouped = LengthGroupedBatchSampler(_ListSampler(range(4)), batch_size=1, drop_last=False, lengths=[1] * 4)
    assert grouped.megabatch_size == 50 and grouped.shuffle is True and grouped.seed == 0
    assert LengthGroupedBatchSampler(_ListSampler(range(4)), 1, False, [1] * 4, megabatch_size=1).megabatch_size == 1
    for bad in (0, -1, 2.0, "3"):
        with pytest.raises(DataConfigError, match="data.megabatch_size"):
            LengthGroupedBatchSampler(_ListSampler(range(4)), 1, False, [1] * 4, megabatch_size=bad)


def test_batch_order_shuffle_follows_seed_and_epoch_of_the_sampler():
    n, lengths = 64, [i % 9 + 1 for i in range(64)]

    def order(seed, epoch, fallback=0, with_attrs=True):
        sampler = _ListSampler(range(n))
        if with_attrs:
            sampler.seed, sampler.epoch = seed, epoch
        grouped = LengthGroupedBatchSampler(sampler, batch_size=4, drop_last=False, lengths=lengths,
                                            megabatch_size=2, shuffle=True, seed=fallback)
        return grouped.batches()

    fixed = LengthGroupedBatchSampler(_ListSampler(range(n)), 4, False, lengths, megabatch_size=2, shuffle=False)
    unshuffled = fixed.batches()
    base = order(1, 0)
    assert sorted(map(tuple, base)) == sorted(map(tuple, unshuffled))  # the same batches ...
    assert base != unshuffled  # ... in a shuffled order
    torch.manual_seed(99)
    assert order(1, 0) == base  # not the global RNG
    distinct = {tuple(map(tuple, order(s, e))) for s in range(3) for e in range(3)}
    assert len(distinct) == 9  # every (seed, epoch) its own batch order
    # no seed/epoch on the sampler: the fallback seed and epoch 0
    assert order(None, None, fallback=2, with_attrs=False) == order(2, 0)
    assert order(None, None, fallback=2, with_attrs=False) != order(None, None, fallback=3, with_attrs=False)
    # the batch order is not the sampler's own stream (seed·1,000,003 + epoch): with an EpochShuffleSampler both
    # draws would otherwise be the same permutation of different lengths, correlated for equal lengths
    sampler = EpochShuffleSampler(_data(n), seed=5)
    sampler.set_epoch(1)
    perm = list(sampler)
    grouped = LengthGroupedBatchSampler(sampler, batch_size=1, drop_last=False, lengths=[1] * n, megabatch_size=1,
                                        shuffle=True)
    got = [b[0] for b in grouped.batches()]
    assert sorted(got) == list(range(n))
    assert [perm[i] for i in perm] != got


def test_pad_collator_by_hand():
    collate = PadCollator(pad_id=7)
    out = collate([([4, 5, 6], 1), ([], 0), ([9], 2)])
    assert out["input_ids"].tolist() == [[4, 5, 6], [7, 7, 7], [9, 7, 7]]
    assert out["input_ids"].dtype == torch.long
    # an empty text counts as one (pad) token so no row is all padding
    assert out["padding_mask"].tolist() == [[False, False, False], [False, True, True], [False, True, True]]
    assert out["labels"].tolist() == [1, 0, 2] and out["labels"].dtype == torch.long
    assert out["num_tokens"] == 3 + 1 + 1 and isinstance(out["num_tokens"], int)


# ------------------------------------------------------------------------------------------------ cache


def test_cache_key_is_a_sha256_of_the_sorted_spec_with_the_version():
    spec = {"max_length": 64, "tokenizer": {"kind": "wordpiece", "vocab_size": 8000}, "seed": 0}
    key = cache_mod.cache_key("sst2", spec)
    name, digest = key.rsplit("-", 1)
    assert name == "sst2" and len(digest) == 16 and int(digest, 16) >= 0
    # an independent spelling of the docstring: JSON with sorted keys, version and name inside
    text = json.dumps({"tokenizer": {"vocab_size": 8000, "kind": "wordpiece"}, "seed": 0, "name": "sst2",
                       "version": cache_mod.CACHE_VERSION, "max_length": 64}, sort_keys=True)
    assert digest == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert cache_mod.cache_key("sst2", dict(reversed(list(spec.items())))) == key  # key order does not matter
    assert cache_mod.cache_key("trec", spec).split("-")[1] != digest  # the name is hashed, not only prefixed
    for changed in ({**spec, "max_length": 65}, {**spec, "tokenizer": {"kind": "bytes", "vocab_size": 8000}},
                    {**spec, "extra": None}):
        assert cache_mod.cache_key("sst2", changed) != key


def test_cache_key_changes_with_the_cache_version(monkeypatch):
    key = cache_mod.cache_key("x", {"a": 1})
    monkeypatch.setattr(cache_mod, "CACHE_VERSION", cache_mod.CACHE_VERSION + 1)
    assert cache_mod.cache_key("x", {"a": 1}) != key


def test_cache_key_of_values_json_cannot_encode_uses_their_text():
    from pathlib import Path

    assert cache_mod.cache_key("x", {"p": Path("/a/b")}) == cache_mod.cache_key("x", {"p": "/a/b"})


def test_write_atomically_is_complete_or_absent(tmp_path):
    target = tmp_path / "deep" / "sst2-abc"

    def write(folder):
        assert folder.parent == target.parent and folder.name.startswith(".sst2-abc-") and folder.is_dir()
        (folder / "data").write_text("x")
        (folder / "meta.json").write_text("{}")

    cache_mod.write_atomically(target, write)
    assert cache_mod.is_complete(target) and (target / "data").read_text() == "x"
    assert sorted(p.name for p in target.parent.iterdir()) == ["sst2-abc"]  # no temporary folder left

    def fail(folder):
        (folder / "data").write_text("half")
        raise KeyboardInterrupt

    other = tmp_path / "deep" / "trec-abc"
    with pytest.raises(KeyboardInterrupt):
        cache_mod.write_atomically(other, fail)
    assert sorted(p.name for p in target.parent.iterdir()) == ["sst2-abc"]


def test_write_atomically_makes_missing_parent_folders(tmp_path):
    target = tmp_path / "a" / "b" / "c" / "sst2-abc"  # none of a/b/c exists yet
    cache_mod.write_atomically(target, lambda folder: (folder / "meta.json").write_text("{}"))
    assert (target / "meta.json").read_text() == "{}"


def test_write_atomically_keeps_the_winner_of_a_race_and_refuses_an_incomplete_target(tmp_path):
    target = tmp_path / "sst2-abc"
    target.mkdir()
    (target / "meta.json").write_text("{\"first\": 1}")
    (target / "keep").write_text("winner")

    def write(folder):
        (folder / "meta.json").write_text("{}")

    cache_mod.write_atomically(target, write)  # rename fails (non-empty target), the target is complete: fine
    assert (target / "keep").read_text() == "winner"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sst2-abc"]

    broken = tmp_path / "trec-abc"
    broken.mkdir()
    (broken / "partial").write_text("no meta.json")
    with pytest.raises(OSError):
        cache_mod.write_atomically(broken, write)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sst2-abc", "trec-abc"]
    assert not cache_mod.is_complete(broken)
    assert not cache_mod.is_complete(tmp_path / "missing")


def test_write_atomically_cleanup_never_replaces_the_outcome(tmp_path):
    """Removing our temporary folder is best effort: when it is already gone, the writer's own error still
    propagates, and a cache another process completed is still used."""
    import shutil

    def fail_after_removing(folder):
        shutil.rmtree(folder)
        raise ValueError("the writer's error")

    with pytest.raises(ValueError, match="the writer's error"):
        cache_mod.write_atomically(tmp_path / "sst2-abc", fail_after_removing)
    assert list(tmp_path.iterdir()) == []

    target = tmp_path / "trec-abc"
    target.mkdir()
    (target / "meta.json").write_text("{}")  # completed by another process meanwhile
    cache_mod.write_atomically(target, lambda folder: shutil.rmtree(folder))  # our rename then fails
    assert cache_mod.is_complete(target) and sorted(p.name for p in tmp_path.iterdir()) == ["trec-abc"]


# ------------------------------------------------------------------------------------------------ resume


def test_resolve_checkpoint_none_last_and_paths(tmp_path, monkeypatch, caplog):
    assert resolve_checkpoint(None, tmp_path) is None
    assert resolve_checkpoint("", tmp_path) is None
    with caplog.at_level(logging.WARNING):
        assert resolve_checkpoint("last", tmp_path) is None
    assert "no checkpoint" in caplog.text
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    now = time.time()
    for i, name in enumerate(["last-v1.ckpt", "interrupted.ckpt", "last.ckpt", "epoch=3.ckpt"]):
        (folder / name).write_bytes(b"x")
    # mtimes: interrupted newest, then last.ckpt, then last-v1; epoch=3 newer than all but never a candidate
    for name, age in [("last-v1.ckpt", 30), ("last.ckpt", 20), ("interrupted.ckpt", 10), ("epoch=3.ckpt", 0)]:
        os.utime(folder / name, (now - age, now - age))
    assert resolve_checkpoint("last", tmp_path) == str(folder / "interrupted.ckpt")
    os.utime(folder / "last-v1.ckpt", (now - 5, now - 5))
    assert resolve_checkpoint("last", tmp_path) == str(folder / "last-v1.ckpt")
    (folder / "interrupted.ckpt").unlink()
    (folder / "last-v1.ckpt").unlink()
    assert resolve_checkpoint("last", tmp_path) == str(folder / "last.ckpt")
    # a file path, relative to the launch directory: absolute and resolved
    monkeypatch.chdir(tmp_path)
    assert resolve_checkpoint("checkpoints/epoch=3.ckpt", tmp_path / "elsewhere") == str(
        (folder / "epoch=3.ckpt").resolve())
    with pytest.raises(ConfigError, match="ckpt_path=nope.ckpt"):
        resolve_checkpoint("nope.ckpt", tmp_path)
    with pytest.raises(ConfigError):
        resolve_checkpoint("checkpoints", tmp_path)  # a folder is not a checkpoint file


def test_checkpoint_extras_reads_attnbench_state_step_and_epoch(tmp_path):
    path = tmp_path / "a.ckpt"
    torch.save({"attnbench": {"wandb_run": {"id": "r1"}}, "global_step": 17, "epoch": 2}, path)
    assert checkpoint_extras(str(path)) == {"wandb_run": {"id": "r1"}, "global_step": 17, "epoch": 2}
    torch.save({"state_dict": {}}, path)
    assert checkpoint_extras(str(path)) == {"global_step": 0, "epoch": 0}
    torch.save({"attnbench": None, "global_step": 3.0, "epoch": 1}, path)
    extras = checkpoint_extras(str(path))
    assert extras == {"global_step": 3, "epoch": 1} and isinstance(extras["global_step"], int)


def test_rng_states_round_trip_through_torch_save(tmp_path):
    torch.manual_seed(3)
    np.random.seed(4)
    random.seed(5)
    np.random.normal()  # leaves a cached Gaussian (has_gauss=1): part of the state
    states = rs.collect_rng_states()
    assert set(states) >= {"torch", "numpy", "python"}
    path = tmp_path / "rng.pt"
    torch.save(states, path)
    want = (torch.rand(3), np.random.rand(3), np.random.normal(), random.random())
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rs.set_rng_states(torch.load(path, weights_only=True))
    got = (torch.rand(3), np.random.rand(3), np.random.normal(), random.random())
    assert torch.equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert got[2] == want[2] and got[3] == want[3]


def test_score_and_scalar_metrics():
    assert rs._score(0.123456) == "0.1235" and rs._score(torch.tensor(0.5)) == "0.5000"
    assert rs._score(None) == "None" and rs._score("n/a") == "n/a"
    w = torch.tensor(2.0, requires_grad=True)
    metrics = {"a": w * 1, "b": torch.tensor([1.0, 2.0]), "c": 3.0, "d": torch.tensor([7], dtype=torch.int64)}
    out = rs._scalar_metrics(metrics)
    assert set(out) == {"a", "d"}
    assert out["a"].item() == 2.0 and not out["a"].requires_grad and out["d"].dtype == torch.int64
    metrics["d"] += 1
    assert out["d"].item() == 7  # a copy


def test_same_path_follows_links_and_user(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert rs._same_path(tmp_path / "link", str(tmp_path / "real"))
    assert not rs._same_path(tmp_path / "link", tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert rs._same_path("~/real", tmp_path / "real")


def _trainer(batches, accumulate, epoch, global_step=0, samplers=()):
    loaders = [SimpleNamespace(sampler=s, batch_sampler=None) for s in samplers]
    return SimpleNamespace(num_training_batches=batches, accumulate_grad_batches=accumulate, current_epoch=epoch,
                           callback_metrics={}, global_step=global_step, train_dataloader=loaders,
                           fit_loop=SimpleNamespace())


def _resume(trainer, step, extras=True, metrics=None):
    cb = rs.ResumeState(wandb_run={"id": "w"})
    checkpoint = {"global_step": step}
    if extras:
        checkpoint["attnbench"] = {"rng_states": rs.collect_rng_states(), "callback_metrics": metrics}
    trainer.state = SimpleNamespace(fn="validate")  # not fitting: no checkpoint-dir carrying
    cb.on_load_checkpoint(trainer, None, checkpoint)
    cb.on_train_start(trainer, SimpleNamespace(device=torch.device("cpu")))
    return cb


@pytest.mark.parametrize("batches, accumulate, epoch, step, want", [
    # epoch-end checkpoints: nothing of the epoch done, exact
    (10, 1, 2, 20, {"epoch": 2, "batches_done": 0, "batches_per_epoch": 10, "exact": True}),
    # accumulate 3 over 10 batches: ceil(10/3) = 4 steps per epoch; step 9 in epoch 2 = 1 step = 3 batches done
    (10, 3, 2, 9, {"epoch": 2, "batches_done": 3, "batches_per_epoch": 10, "exact": False,
                   "replayed_batches": [0, 2], "unseen_batches": [7, 9], "reason": rs.OLD_CHECKPOINT_REASON}),
    # 7 of 10 done: the remaining 3 steps replay batches 0-2 and never see batches 7-9
    (10, 1, 1, 17, {"epoch": 1, "batches_done": 7, "batches_per_epoch": 10, "exact": False,
                    "replayed_batches": [0, 2], "unseen_batches": [7, 9], "reason": rs.OLD_CHECKPOINT_REASON}),
    # 2 of 10 done: 8 steps left take batches 0-7; batches 0-1 replayed, 8-9 unseen
    (10, 1, 0, 2, {"epoch": 0, "batches_done": 2, "batches_per_epoch": 10, "exact": False,
                   "replayed_batches": [0, 1], "unseen_batches": [8, 9], "reason": rs.OLD_CHECKPOINT_REASON}),
    # 1 of 10 done (the smallest mid-epoch resume): batch 0 replayed, batch 9 unseen
    (10, 1, 0, 1, {"epoch": 0, "batches_done": 1, "batches_per_epoch": 10, "exact": False,
                   "replayed_batches": [0, 0], "unseen_batches": [9, 9], "reason": rs.OLD_CHECKPOINT_REASON}),
    # a max_steps run resumed at the end of epoch 1 (Lightning reports current_epoch 1 with all 10 done)
    (10, 1, 1, 20, {"epoch": 2, "batches_done": 0, "batches_per_epoch": 10, "exact": True}),
    # the checkpoint's step is behind the epoch count: nothing done, never negative
    (10, 1, 3, 25, {"epoch": 3, "batches_done": 0, "batches_per_epoch": 10, "exact": True}),
])
def test_resume_replay_by_hand(batches, accumulate, epoch, step, want):
    cb = _resume(_trainer(batches, accumulate, epoch), step)
    assert cb.replay == want
    assert cb._align_log_step is (want["batches_done"] == 0)
    assert cb._resumed_from_step is None and cb._rng_states is None


def test_resume_without_rng_states_is_not_exact_and_warns(caplog):
    with caplog.at_level(logging.WARNING):
        cb = _resume(_trainer(10, 1, 2), 20, extras=False)
    assert cb.replay == {"epoch": 2, "batches_done": 0, "batches_per_epoch": 10, "exact": False}
    assert "no RNG states" in caplog.text


def test_resume_restores_rng_and_last_metrics_and_samplers_follow_the_epoch():
    torch.manual_seed(11)
    sampler = EpochShuffleSampler(_data(12), seed=1)
    trainer = _trainer(10, 1, 2, samplers=[sampler])
    cb = rs.ResumeState()
    checkpoint = {"global_step": 20}
    cb.on_save_checkpoint(SimpleNamespace(callback_metrics={"val/acc": torch.tensor(0.75), "v": torch.ones(2)}),
                          None, checkpoint)
    assert checkpoint["attnbench"]["wandb_run"] is None
    want = torch.rand(4)
    torch.manual_seed(0)
    trainer.state = SimpleNamespace(fn="validate")
    cb.on_load_checkpoint(trainer, None, checkpoint)
    cb.on_train_start(trainer, SimpleNamespace(device=torch.device("cpu")))
    assert torch.equal(torch.rand(4), want)  # the global RNG is where it was when the checkpoint was written
    assert set(trainer.callback_metrics) == {"val/acc"} and trainer.callback_metrics["val/acc"].item() == 0.75
    # Lightning's counter may run one ahead after a resume: the sampler takes trainer.current_epoch instead
    sampler.set_epoch(3)
    assert sampler.epoch == 2
    assert sampler.set_epoch.follows_current_epoch is True
    wrapped = sampler.set_epoch
    rs._samplers_follow_current_epoch(trainer)
    assert sampler.set_epoch is wrapped  # not wrapped twice


def test_fresh_fit_is_left_alone():
    cb = rs.ResumeState()
    trainer = _trainer(10, 1, 0)
    cb.on_train_start(trainer, None)
    assert cb.replay is None and cb._align_log_step is False


def test_log_step_is_aligned_once_after_an_epoch_end_resume():
    cb = _resume(_trainer(10, 1, 2, global_step=20), 20)
    loop = SimpleNamespace(_batches_that_stepped=21)
    trainer = SimpleNamespace(optimizers=[object()], global_step=20, fit_loop=SimpleNamespace(epoch_loop=loop))
    cb.on_train_epoch_start(trainer, None)
    assert loop._batches_that_stepped == 20 and cb._align_log_step is False
    loop._batches_that_stepped = 21
    cb.on_train_epoch_start(trainer, None)  # only the first epoch after the resume
    assert loop._batches_that_stepped == 21
    # a loop without Lightning's private counter (another Lightning version): nothing to align, no error
    cb._align_log_step = True
    cb.on_train_epoch_start(SimpleNamespace(optimizers=[object()], global_step=20,
                                            fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace())), None)
    assert cb._align_log_step is False
    # two optimizers or a counter that is right: unchanged
    for optimizers, stepped in (([object(), object()], 21), ([object()], 20), ([object()], 22)):
        cb._align_log_step = True
        loop._batches_that_stepped = stepped
        cb.on_train_epoch_start(SimpleNamespace(optimizers=optimizers, global_step=20,
                                                fit_loop=SimpleNamespace(epoch_loop=loop)), None)
        assert loop._batches_that_stepped == stepped


def test_samplers_inside_batch_samplers_follow_too_and_odd_loaders_are_skipped():
    inner = EpochShuffleSampler(_data(8), seed=0)
    batch_sampler = LengthGroupedBatchSampler(inner, 2, False, [1] * 8)
    loaders = [SimpleNamespace(batch_sampler=batch_sampler), SimpleNamespace()]  # no sampler attributes at all
    trainer = SimpleNamespace(current_epoch=4, train_dataloader=loaders)
    rs._samplers_follow_current_epoch(trainer)
    inner.set_epoch(9)
    assert inner.epoch == 4  # the length-grouped loader's sampler (Lightning sets it via batch_sampler.sampler)
    rs._samplers_follow_current_epoch(SimpleNamespace(current_epoch=0))  # no loader yet
    rs._samplers_follow_current_epoch(SimpleNamespace(current_epoch=0, train_dataloader=None))


def test_checkpoint_extras_reads_full_lightning_checkpoints(tmp_path):
    """A Lightning checkpoint pickles arbitrary objects (hyper-parameters): it must load, not only tensors."""
    import argparse

    path = tmp_path / "l.ckpt"
    torch.save({"hyper_parameters": argparse.Namespace(lr=0.1), "state_dict": {"w": torch.ones(2)},
                "attnbench": {"wandb_run": None}, "global_step": 5, "epoch": 1}, path)
    assert checkpoint_extras(str(path)) == {"wandb_run": None, "global_step": 5, "epoch": 1}


def test_a_resume_is_called_exact_only_if_the_loader_started_where_the_checkpoint_left_off(caplog):
    """The first training batch after a mid-epoch resume: a loader that started elsewhere in the epoch's order (or
    at another epoch) turns resume.exact to false, with where it started and where it should have."""
    for started_at, exact in (((1, 7), True), ((0, 0), False), ((1, 0), False)):
        cb = rs.ResumeState()
        cb.replay = {"epoch": 1, "batches_done": 7, "batches_per_epoch": 13, "exact": True}
        cb._expected_start = (1, 7)
        trainer = SimpleNamespace(global_step=20, train_dataloader=SimpleNamespace(started_at=started_at))
        cb.on_train_batch_start(trainer, None, None, 0)
        assert cb.replay["exact"] is exact and cb._expected_start is None
        if not exact:
            assert cb.replay["reason"] == (f"the training loader started epoch {started_at[0]} at batch "
                                           f"{started_at[1]}, not at batch 7 of epoch 1")
