"""Texts that tokenize to nothing are empty texts: dropped and counted, never scored from a lone [PAD]."""

from __future__ import annotations

import json
import logging
import unicodedata

import pytest

from attnbench.data import DataConfigError
from attnbench.data.rows import DEFAULT_IGNORABLE, has_visible_character, is_invisible
from attnbench.data.tokenizer import token_counts

from .test_data_faults import assert_nothing_cached, rows, toy_module, write_split

# each is non-empty and not whitespace to str.strip(), and it holds no visible character
# (attnbench.data.rows.has_visible_character); BERT's normalizer leaves nothing of the first ten, but keeps the
# Hangul fillers (category Lo) and U+2800 BRAILLE PATTERN BLANK (So) as words
INVISIBLE = ["\u200b\u200b", "\ufeff", "\u00ad\u00ad\u00ad", "\u2060", "\u200d\u200c", "\x00\x07\x1b",
             "\u0301\u0300", "\u200b \ufeff \u00ad", "\u2063\u2064", "\U000e0001",
             "\u3164", "\u115f\u1160", "\uffa0\uffa0", "\u2800\u2800", "\u3164 \u2800\u3000", "\ufe0f\ufe00",
             "\U000e0100\U000e01ef", "\U000e0020\U000e007f", "\u180e\u061c", "\u206a\u206f"]


@pytest.mark.parametrize("kind", ["wordpiece", "bytes", "byte_bpe", "word_level"])
def test_invisible_texts_are_dropped_and_counted(tmp_path, caplog, kind):
    """Whatever the tokenizer: `bytes` and `byte_bpe` give an invisible text's bytes tokens, and kept it (scored
    from zero-width spaces); a text with no visible character carries no content for any of them."""
    train = rows(80)
    for i, text in enumerate(INVISIBLE):
        train["text"][3 * i] = text
    test = rows(10)
    test["text"][4] = "\u200b\ufeff\u3164"
    write_split(tmp_path / "data", "train", train)
    write_split(tmp_path / "data", "test", test)
    dm = toy_module(tmp_path / "data", tmp_path / "cache", tokenizer={"kind": kind, "vocab_size": 300,
                                                                       "min_frequency": 1})
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm.setup()
    kept = set(dm.splits["train"].row_ids) | set(dm.splits["val"].row_ids)
    assert kept == set(range(80)) - {3 * i for i in range(len(INVISIBLE))}
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


@pytest.mark.parametrize("char", [
    "\u3164", "\u115f", "\u1160", "\uffa0", "\ufe00", "\ufe0f", "\U000e0100", "\U000e01ef", "\u200b", "\u200c",
    "\u200d", "\ufeff", "\u00ad", "\u2060", "\u2064", "\u2066", "\u206f", "\U000e0000", "\U000e0001", "\U000e0fff",
    "\u034f", "\u17b4", "\u180b", "\u180f", "\U0001bca0", "\U0001d173", "\u2800", " ", "\t", "\u00a0", "\u3000",
    "\u2028", "\u0301"])
def test_characters_that_show_nothing_are_invisible(char):
    assert is_invisible(char) and not has_visible_character(char * 3)


@pytest.mark.parametrize("char", ["a", "\u3131", "\u2801", "\u28ff", "\U0001f600", "\ue000", "\u0600", "\u06dd",
                                  "\u0378", "-", "\u1161", "\uffa1", "\ufff9"])
def test_characters_with_a_glyph_are_visible(char):
    """Letters next to the fillers (U+3131, U+1161, U+FFA1), non-blank Braille cells, emoji, private use,
    unassigned code points, and the Cf prepended concatenation marks (U+0600, U+06DD: drawn above digits)."""
    assert not is_invisible(char) and has_visible_character("\u200b" + char)


def test_default_ignorable_table_is_unicode_derivation():
    """DerivedCoreProperties.txt defines Default_Ignorable_Code_Point as Other_Default_Ignorable_Code_Point + Cf
    + Variation_Selector - White_Space - U+FFF9..U+FFFB - U+13430..U+1343F - Prepended_Concatenation_Mark. Every
    format character and every variation selector that ``unicodedata`` knows, less those exceptions, is in the
    table; the table is sorted and its ranges disjoint."""
    assert all(a <= b < c for (a, b), (c, _) in zip(DEFAULT_IGNORABLE, DEFAULT_IGNORABLE[1:]))
    table = {c for a, b in DEFAULT_IGNORABLE for c in range(a, b + 1)}
    prepended = {*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2, 0x110BD, 0x110CD}
    excepted = {*range(0xFFF9, 0xFFFC), *range(0x13430, 0x13440), *prepended}
    format_chars = {c for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"}
    selectors = {c for c in range(0x110000) if "VARIATION SELECTOR" in unicodedata.name(chr(c), "")}
    assert len(selectors) == 16 + 240 + 4 and selectors <= table
    assert format_chars - excepted <= table
    assert not table & excepted
    # what is neither Cf nor a variation selector: Other_Default_Ignorable_Code_Point (fillers, reserved ranges)
    other = {chr(c) for c in table - format_chars - selectors if unicodedata.category(chr(c)) != "Cn"}
    assert other == {"\u034f", "\u115f", "\u1160", "\u17b4", "\u17b5", "\u3164", "\uffa0"}


def special_token_rows(n: int, special: str, at: tuple[int, ...]) -> dict[str, list]:
    data = rows(n)
    for i in at:
        data["text"][i] = special
    return data


@pytest.mark.parametrize("kind", ["wordpiece", "bytes", "byte_bpe", "word_level"])
def test_texts_of_special_tokens_only_are_dropped_after_tokenization(tmp_path, caplog, kind):
    """A text "[PAD]" has a visible character and words for the tokenizer's pre-tokenizer, but the trained
    tokenizer matches it as its special [PAD] token: it was scored from padding alone. `bytes` gives its five
    bytes tokens (its [PAD] is no added token), so it keeps it, as text."""
    write_split(tmp_path / "data", "train", special_token_rows(40, "[PAD]", (5, 17)))
    write_split(tmp_path / "data", "test", special_token_rows(10, "[PAD] [PAD]", (3,)))
    dm = toy_module(tmp_path / "data", tmp_path / "cache", tokenizer={"kind": kind, "vocab_size": 300,
                                                                       "min_frequency": 1})
    with caplog.at_level(logging.INFO, logger="attnbench"):
        dm.setup()
    pad = dm.tokenizer.token_to_id("[PAD]")
    kept = set(dm.splits["train"].row_ids) | set(dm.splits["val"].row_ids)
    assert all(set(ids) != {pad} for split in dm.splits.values() for ids in split.input_ids)
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    if kind == "bytes":
        assert kept == set(range(40)) and len(dm.splits["test"]) == 10
        assert "dropped_no_text_tokens" not in meta["bad_rows"]["train"]
        return
    assert kept == set(range(40)) - {5, 17} and 3 not in dm.splits["test"].row_ids and len(dm.splits["test"]) == 9
    dropped = {s: c.get("dropped_no_text_tokens", 0) for s, c in meta["bad_rows"].items()}
    assert dropped["train"] + dropped["val"] == 2 and dropped["test"] == 1
    assert meta["counts"]["test"] == 9 and meta["bad_rows"]["train"]["dropped_empty"] == 0
    assert "toy: dropped texts that tokenize to no token that shows text (only [PAD], [SEP] or spaces" in caplog.text
    per_split = ", ".join(f"{split} {dropped[split]}" for split in ("train", "val", "test") if dropped[split])
    assert f"special token): {per_split}." in caplog.text


@pytest.mark.parametrize("kind", ["wordpiece", "bytes", "byte_bpe", "word_level"])
def test_a_pair_whose_second_text_is_its_separator_is_dropped(tmp_path, kind):
    """For sentence pairs every tokenizer matches "[SEP]" as the separator: a hypothesis "[SEP]" is no text."""
    import pandas as pd

    df = pd.DataFrame({"premise": [f"the film number {i} was good" for i in range(60)],
                       "hypothesis": ["it was good"] * 60, "label": [i % 2 for i in range(60)]})
    df.loc[[7, 31], "hypothesis"] = "[SEP]"
    df.loc[12, "premise"] = "[SEP] [SEP]"
    path = tmp_path / "train.jsonl"
    df.to_json(path, orient="records", lines=True)
    dm = toy_module(tmp_path / "nowhere", tmp_path / "cache", data_files=str(path), text_column="premise",
                    text_pair_column="hypothesis", test_split=None, test_size=6,
                    tokenizer={"kind": kind, "vocab_size": 300, "min_frequency": 1})
    dm.setup()
    kept = {r for split in dm.splits.values() for r in split.row_ids}
    assert kept == set(range(60)) - {7, 12, 31}
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    assert sum(c.get("dropped_no_text_tokens", 0) for c in meta["bad_rows"].values()) == 3


def test_all_texts_special_tokens_only_is_one_message(tmp_path):
    write_split(tmp_path / "data", "train", rows(40))
    write_split(tmp_path / "data", "test", special_token_rows(10, "[PAD]", tuple(range(10))))
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache").prepare_data()
    assert str(err.value).startswith("toy/test: all 10 texts tokenize to no token that shows text (only [PAD], "
                                     "[SEP] or spaces); set data.text_column")
    assert_nothing_cached(tmp_path / "cache")


def test_a_text_of_unknown_words_is_kept(tmp_path):
    """[UNK] stands for a word the vocabulary lacks: a test text in a script training never saw is text."""
    write_split(tmp_path / "data", "train", rows(40))
    write_split(tmp_path / "data", "test", special_token_rows(10, "\u0436\u0436 \u4e2d", (2,)))
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    dm.setup()
    unk = dm.tokenizer.token_to_id("[UNK]")
    assert len(dm.splits["test"]) == 10
    assert dm.splits["test"].input_ids[dm.splits["test"].row_ids.index(2)] == [unk, unk]
