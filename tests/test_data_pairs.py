"""Sentence pairs keep both texts: truncation is the tokenizer's ``longest_first``, and the log counts what it cut.

The reproducer: premises of 40-80 words, the label carried by the hypothesis only, ``data.max_length=32``.
"""

from __future__ import annotations

import json
import logging
import random

import pandas as pd
import pytest
from tokenizers import Tokenizer

from attnbench.data import TextClassificationDataModule

FILLER = ("the committee met on a grey morning and spoke at length about budgets roads schools parks and the "
          "weather while nobody in the room took notes or asked any question at all").split()


def long_premise_pairs(n: int, seed: int) -> pd.DataFrame:
    """``n`` rows: a premise of 40-80 filler words; the hypothesis ``it is yes|no`` decides the label."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        answer = rng.choice(["yes", "no"])
        premise = " ".join(rng.choice(FILLER) for _ in range(rng.randint(40, 80))) + f" row {i}"
        rows.append({"premise": premise, "hypothesis": f"it is {answer}", "label": answer})
    return pd.DataFrame(rows)


@pytest.fixture
def pair_module(tmp_path):
    files = {}
    for split, n, seed in (("train", 400, 0), ("test", 60, 1)):
        path = tmp_path / f"{split}.jsonl"
        long_premise_pairs(n, seed).to_json(path, orient="records", lines=True)
        files[split] = str(path)
    return TextClassificationDataModule(
        name="pairs", hub_id=None, local_dir=None, data_files=files, text_column="premise",
        text_pair_column="hypothesis", label_column="label", test_split="test", val_size=20, max_length=32,
        cache_dir=str(tmp_path / "cache"), tokenizer={"vocab_size": 300, "min_frequency": 1})


def test_long_premises_leave_the_separator_and_the_whole_hypothesis(pair_module, caplog):
    with caplog.at_level(logging.INFO, logger="attnbench"):
        pair_module.setup()
    tok = Tokenizer.from_file(str(pair_module.cache_dir / "tokenizer.json"))
    sep, yes, no = (tok.token_to_id(t) for t in ("[SEP]", "yes", "no"))
    for split in ("train", "val", "test"):
        data = pair_module.splits[split]
        assert len(data) > 0
        for ids, label in zip(data.input_ids, data.labels):
            assert len(ids) == 32
            # the premise is cut, never the 3-token hypothesis: "<premise[:28]> [SEP] it is yes|no"
            assert ids[-4] == sep and ids[-1] == (yes if pair_module.label_names[label] == "yes" else no)
            assert tok.decode(ids[-3:]).split()[:2] == ["it", "is"]
    meta = json.loads((pair_module.cache_dir / "meta.json").read_text())
    train_cut = meta["truncation"]["train"]
    assert train_cut["hypothesis"] == {"rows": 0, "tokens": 0}
    assert train_cut["premise"]["rows"] == len(pair_module.splits["train"])
    # every premise loses exactly its tokens past 28: its untruncated length - 28
    tok.no_truncation()
    premise_tokens = sum(len(tok.encode(t, add_special_tokens=False).ids)
                         for t in long_premise_pairs(400, 0)["premise"]) - 28 * 400
    assert train_cut["premise"]["tokens"] + meta["truncation"]["val"]["premise"]["tokens"] == premise_tokens
    assert ("truncation removed, per text column: premise" in caplog.text
            and "hypothesis 0 tokens from 0 rows." in caplog.text)


def test_longest_first_cuts_the_longer_text_of_a_pair(tmp_path):
    """Both texts longer than half of max_length: both are cut to share it (HF tokenizers' longest_first)."""
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rows = [{"premise": " ".join(words * 2), "hypothesis": " ".join(reversed(words * 2)), "label": i % 2}
            for i in range(40)]
    for i, r in enumerate(rows):
        r["premise"] += f" p{i}"
    path = tmp_path / "train.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    dm = TextClassificationDataModule(
        name="both", hub_id=None, local_dir=None, data_files=str(path), text_column="premise",
        text_pair_column="hypothesis", test_split=None, test_size=4, val_size=4, max_length=17,
        cache_dir=str(tmp_path / "cache"), tokenizer={"vocab_size": 200, "min_frequency": 1})
    dm.setup()
    tok = Tokenizer.from_file(str(dm.cache_dir / "tokenizer.json"))
    ids = dm.splits["train"].input_ids[0]
    assert len(ids) == 17 and ids.index(tok.token_to_id("[SEP]")) == 8  # 8 premise + [SEP] + 8 hypothesis


@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe", "bytes", "word_level"])
def test_every_tokenizer_kind_keeps_the_whole_hypothesis(tmp_path, kind):
    files = {}
    for split, n, seed in (("train", 120, 0), ("test", 30, 1)):
        path = tmp_path / f"{split}.jsonl"
        long_premise_pairs(n, seed).to_json(path, orient="records", lines=True)
        files[split] = str(path)
    dm = TextClassificationDataModule(
        name="pairs", hub_id=None, local_dir=None, data_files=files, text_column="premise",
        text_pair_column="hypothesis", test_split="test", val_size=10, max_length=32,
        cache_dir=str(tmp_path / "cache"), tokenizer={"kind": kind, "vocab_size": 300, "min_frequency": 1})
    dm.setup()
    tok = Tokenizer.from_file(str(dm.cache_dir / "tokenizer.json"))
    sep = tok.token_to_id("[SEP]")
    for ids, label in zip(dm.splits["test"].input_ids, dm.splits["test"].labels):
        assert len(ids) <= 32 and ids.count(sep) == 1
        assert tok.decode(ids[ids.index(sep) + 1 :]).split() == ["it", "is", dm.label_names[label]]


def test_a_max_length_too_short_for_a_pair_is_refused():
    from attnbench.data import DataConfigError

    with pytest.raises(DataConfigError, match=r"data.max_length=2 cannot hold a sentence pair .* >= 3"):
        TextClassificationDataModule(name="p", text_column="a", text_pair_column="b", max_length=2)
