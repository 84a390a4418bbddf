"""``carve_disjoint``'s bookkeeping of phrases contained in several texts (``remaining``, ``contained_in``) and
its fallback when every group is larger than ``n_val``, on hand-made texts whose carving is worked out by hand.
Written to kill the mutants of ``carve_disjoint`` that ``scripts/mutation.sh`` left (docs/mutation.md)."""

from __future__ import annotations

from attnbench.data.splits import carve_disjoint, normal_form


def _no_leak(texts, carving):
    held = [normal_form(texts[r]) for r in carving.val]
    train = [normal_form(texts[r]) for r in carving.train]
    assert not any(h in t for h in held for t in train)
    assert sorted(carving.train + carving.val) == list(range(len(texts)))


def test_a_phrase_in_three_sentences_goes_to_validation_only_with_the_last_of_them():
    # "red fox" (row 3) is a phrase of the three sentences 0-2: it may join validation only once all three have.
    # n_val = 3, every group one row. In any order of the four sentences (0, 1, 2 and the unrelated 4), the
    # first two of 0-2 fit (one row each); the third would bring "red fox" along (2 rows: 4 > 3), so it is
    # skipped, and sentence 4 fills the third place. Validation: two of 0-2 and row 4; "red fox" stays in
    # training (it is in the third sentence), and the final substring pass has nothing to move.
    texts = ["red fox runs", "big red fox", "red fox jumps", "red fox", "a slow turtle"]
    for seed in range(12):
        carving = carve_disjoint(texts, n_val=3, seed=seed)
        _no_leak(texts, carving)
        assert len(carving.val) == 3 and 4 in carving.val and 3 in carving.train, seed
        assert len(set(carving.val) & {0, 1, 2}) == 2, seed
        assert carving.moved_to_train == 0, seed
        assert carving.phrase_level and carving.containment_searched


def test_every_group_larger_than_n_val_gives_one_whole_group():
    # groups: {"the old man" (row 0), "old man" (row 1, contained only in row 0)} and {"sea", "Sea"} (one text,
    # rows 2 and 3). n_val = 1: no group fits, so validation is one whole group, the first in the seed's order:
    # rows [0, 1] (the sentence with its phrase) or rows [2, 3]; never the sentence without its phrase.
    texts = ["the old man", "old man", "sea", "Sea"]
    seen = set()
    for seed in range(12):
        carving = carve_disjoint(texts, n_val=1, seed=seed)
        _no_leak(texts, carving)
        assert carving.val in ([0, 1], [2, 3]), (seed, carving.val)
        assert carving.moved_to_train == 0
        seen.add(tuple(carving.val))
    assert seen == {(0, 1), (2, 3)}  # both orders occur over these seeds
