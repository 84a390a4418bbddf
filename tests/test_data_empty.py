"""Texts that tokenize to nothing are empty texts: dropped and counted, never scored from a lone [PAD]."""

from __future__ import annotations

import json
import logging

import pytest

from attnbench.data.tokenizer import token_counts

from .test_data_faults import rows, toy_module, write_split

# each is non-empty and not whitespace to str.strip(), BERT's normalizer leaves nothing of it, and it holds no
# visible character (attnbench.data.rows.has_visible_character)
INVISIBLE = ["\u200b\u200b", "\ufeff", "\u00ad\u00ad\u00ad", "\u2060", "\u200d\u200c", "\x00\x07\x1b",
             "\u0301\u0300", "\u200b \ufeff \u00ad", "\u2063\u2064", "\U000e0001"]


@pytest.mark.parametrize("kind", ["wordpiece", "bytes", "byte_bpe", "word_level"])
def test_invisible_texts_are_dropped_and_counted(tmp_path, caplog, kind):
    """Whatever the tokenizer: `bytes` and `byte_bpe` give an invisible text's bytes tokens, and kept it (scored
    from zero-width spaces); a text with no visible character carries no content for any of them."""
    train = rows(40)
    for i, text in enumerate(INVISIBLE):
        train["text"][3 * i] = text
    test = rows(10)
    test["text"][4] = "\u200b\ufeff"
    write_split(tmp_path / "data", "train", train)
    write_split(tmp_path / "data", "test", test)
    dm = toy_module(tmp_path / "data", tmp_path / "cache", tokenizer={"kind": kind, "vocab_size": 300,
                                                                       "min_frequency": 1})
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm.setup()
    kept = set(dm.splits["train"].row_ids) | set(dm.splits["val"].row_ids)
    assert kept == set(range(40)) - {3 * i for i in range(len(INVISIBLE))}
    assert 4 not in dm.splits["test"].row_ids and len(dm.splits["test"]) == 9
    assert all(ids for split in dm.splits.values() for ids in split.input_ids)
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    assert meta["bad_rows"]["train"]["dropped_empty"] == len(INVISIBLE) and meta["bad_rows"]["test"]["dropped_empty"] == 1
    assert f"train {len(INVISIBLE)}, test 1." in caplog.text and "no visible character" in caplog.text


def test_a_pair_whose_second_text_tokenizes_to_nothing_is_dropped(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"premise": [f"the film number {i} was good" for i in range(60)],
                       "hypothesis": ["it was good"] * 60, "label": [i % 2 for i in range(60)]})
    df.loc[7, "hypothesis"] = "\ufeff\u200b"
    path = tmp_path / "train.jsonl"
    df.to_json(path, orient="records", lines=True)
    dm = toy_module(tmp_path / "nowhere", tmp_path / "cache", data_files=str(path), text_column="premise",
                    text_pair_column="hypothesis", test_split=None, test_size=6)
    dm.setup()
    kept = {r for split in dm.splits.values() for r in split.row_ids}
    assert kept == set(range(60)) - {7}


@pytest.mark.parametrize("kind, lowercase, expected", [
    ("wordpiece", True, [0, 0, 0, 0, 1, 2]),
    ("wordpiece", False, [0, 0, 0, 1, 1, 2]),  # combining accents are kept without lowercase's accent stripping
    ("bytes", True, [1, 1, 1, 1, 1, 1]),  # one word of bytes per text: every byte is a token, none invisible
])
def test_token_counts_follow_the_tokenizer_kind(kind, lowercase, expected):
    texts = ["\u200b\u200b", "\ufeff", "\x00\x07", "\u0301\u0300", "a", "a\u200bb!"]
    assert token_counts(texts, kind, lowercase) == expected
