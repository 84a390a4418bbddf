"""contained (data/splits.py) on the inputs its survived mutants needed: lone surrogates (texts decoded with
"surrogateescape"/"surrogatepass" upstream), the 0xFF haystack separator, and the chunk / common-anchor boundaries
(module constants made small), each checked against a plain `any(needle in h for h in haystacks)`."""

from __future__ import annotations

import random

import pytest

from attnbench.data import splits
from attnbench.data.splits import contained


def _plain(needles, haystacks):
    return [any(n in h for h in haystacks) for n in needles]


def test_lone_surrogates_in_needles_and_haystacks_are_searched_not_refused():
    # a lone surrogate has no strict UTF-8 encoding: the search encodes with "surrogatepass" on both sides
    haystacks = ["x\ud800y", "a\udfffbc", "plain"]
    needles = ["\ud800", "a\udfffb", "\ud800y", "\udfff\ud800", "plain", "zz", "\udc80"]
    assert contained(needles, haystacks) == [True, True, True, False, True, False, False]
    assert contained(needles, haystacks) == _plain(needles, haystacks)
    # surrogates only in the haystacks, or only in the needles
    assert contained(["y", "q"], ["x\ud800y"]) == [True, False]
    assert contained(["\ud800", "ab"], ["xab"]) == [False, True]


def test_no_match_spans_two_haystacks_nor_the_separator():
    # haystacks are joined with the single byte 0xFF: nothing but that byte may sit between them
    haystacks = ["ab", "cd", "XX"]
    needles = ["XX", "bX", "Xc", "bc", "b\xffc", "abXX", "X", "ab", "cd"]
    assert contained(needles, ["ab", "cd"]) == [False] * 7 + [True, True]
    assert contained(needles, haystacks) == _plain(needles, haystacks)


@pytest.mark.parametrize("chunk, max_places", [(8, 2), (13, 1), (64, 3)])
def test_chunk_and_common_anchor_boundaries_agree_with_a_plain_search(monkeypatch, chunk, max_places):
    # small chunks put needles and windows across chunk boundaries and at the last window; a small _MAX_PLACES
    # sends repetitive anchors to the plain-search branch; needle lengths cover k = 1 .. ANCHOR_BYTES and beyond
    monkeypatch.setattr(splits, "_CHUNK", chunk)
    monkeypatch.setattr(splits, "_MAX_PLACES", max_places)
    rng = random.Random(chunk)
    alphabet = "ab é\ud800"
    hay = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 70))) for _ in range(12)]
    hay.append("ab" * 40)  # one anchor at many places
    joined = "\n".join(hay)
    needles = []
    for length in range(1, splits.ANCHOR_BYTES + 12):
        start = rng.randrange(max(1, len(joined) - length))
        needles.append(joined[start:start + length])  # often inside, sometimes across two haystacks
        needles.append("".join(rng.choice(alphabet) for _ in range(length)))
    needles += [h for h in hay if h] + [hay[-1][1:], hay[-1] + "a", hay[0][-1:], hay[-2][-5:]]
    assert contained(needles, hay) == _plain(needles, hay)
