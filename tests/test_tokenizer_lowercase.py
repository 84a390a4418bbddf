"""``data.tokenizer.lowercase`` applies to every tokenizer kind (wordpiece, byte_bpe, bytes): true maps "ABC" to the
ids of "abc", false keeps upper case apart. It is in the cache key, so a kind that ignored it would build a second
cache with identical data under another name."""

from __future__ import annotations

import pytest

from attnbench.data.tokenizer import train_tokenizer

TEXTS = ["abc abc def", "ABC Abc DEF", "the abc of it", "ABC and abc"] * 5
SPECIALS = 2  # [PAD] 0, [UNK] 1


def _ids(kind: str, lowercase: bool, text: str) -> list[int]:
    tok = train_tokenizer(TEXTS, kind, vocab_size=300, lowercase=lowercase, min_frequency=1, max_length=32)
    return tok.encode(text).ids


@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe", "bytes"])
def test_lowercase_true_maps_upper_to_lower_case_and_false_does_not(kind):
    assert _ids(kind, True, "ABC") == _ids(kind, True, "abc")
    assert _ids(kind, False, "ABC") != _ids(kind, False, "abc")


@pytest.mark.parametrize("lowercase, expected", [(True, "abc"), (False, "ABC")])
def test_byte_ids_by_hand(lowercase, expected):
    # bytes: one token per UTF-8 byte; the vocabulary is the specials then ByteLevel's alphabet in sorted order,
    # whose first 94 characters are the printable ASCII bytes 33 ("!") .. 126 ("~") mapped to themselves
    assert _ids("bytes", lowercase, "ABC") == [SPECIALS + b - 33 for b in expected.encode()]
