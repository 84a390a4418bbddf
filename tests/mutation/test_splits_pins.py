"""Held-out carving, stratified quotas, k-fold assignment and overlap counts (data/splits.py) on hand-made texts
whose right answer is counted by hand; the guarantees checked against a plain substring search."""

from __future__ import annotations

import random

import pytest

from attnbench.data import splits
from attnbench.data.splits import (carve_disjoint, carve_stratified, contained, cv_fold, fold_assignment, normal_form,
                                   overlap_counts)


def _plain(needles, haystacks):
    return [any(n in h for h in haystacks) for n in needles]


def _no_leak(texts, carving):
    held = [normal_form(texts[r]) for r in carving.val]
    train = [normal_form(texts[r]) for r in carving.train]
    assert not any(_plain(held, train))
    assert sorted(carving.train + carving.val) == list(range(len(texts)))
    assert carving.train == sorted(carving.train) and carving.val == sorted(carving.val)


def test_normal_form_collapses_whitespace_and_folds_case():
    assert normal_form("  A\tGood\n\nfilm  ") == "a good film"
    assert normal_form("STRASSE") == normal_form("straße")  # casefold, not lower
    assert normal_form("") == ""


def test_contained_by_hand_and_against_a_plain_search():
    haystacks = ["the good film", "naïve plot", "abc"]
    needles = ["good", "film", "the good film", "plot", "ïve", "c", "abcd", "good film the", "", "filmnaïve"]
    assert contained(needles, haystacks) == [True, True, True, True, True, True, False, False, True, False]
    assert contained([], haystacks) == [] and contained(["a"], []) == [False]
    rng = random.Random(3)
    words = ["ab", "ba", "a", "b", "aab"]
    hay = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(40)]
    ned = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) for _ in range(200)]
    ned += ["x" * 40, hay[0], hay[5][3:40] if len(hay[5]) > 40 else hay[5]]
    assert contained(ned, hay) == _plain(ned, hay)


def test_overlap_counts_by_hand():
    train = ["A good film", "bad  plot", "fine"]
    texts = ["a GOOD film", "good", "bad plot!", "fine", "Fine", "unseen"]
    # verbatim (normal form equal): "a good film", "fine", "fine"; substring adds "good"
    assert overlap_counts(train, texts) == {"n": 6, "verbatim": 3, "substring": 4, "substring_checked": 6}
    assert overlap_counts([], ["x"]) == {"n": 1, "verbatim": 0, "substring": 0, "substring_checked": 1}


def test_carving_of_sentences_and_their_phrases_by_hand():
    texts = ["the movie was great", "great", "movie was", "awful acting", "acting", "a plot", "The Movie  was great",
             "silly"]
    # units: S1 = {0, 6} with phrases "great" (1) and "movie was" (2); S2 = {3} with "acting" (4); "a plot" (5);
    # "silly" (7). Groups: S1 -> rows {0, 6, 1, 2} (4 rows), S2 -> {3, 4}, {5}, {7}
    for seed in range(6):
        for n_val in (1, 2, 3, 4, 5, 6):
            c = carve_disjoint(texts, n_val, seed)
            _no_leak(texts, c)
            assert c.phrase_level is True and c.containment_searched is True
            assert 1 <= len(c.val) <= n_val
            # identical texts on one side; a phrase only with its sentence
            assert (0 in c.val) == (6 in c.val)
            assert (1 in c.val) <= (0 in c.val) and (2 in c.val) <= (0 in c.val) and (4 in c.val) <= (3 in c.val)
    # every group larger than n_val = 1? no: {5} and {7} fit; with n_val = 4 a seed can take S1 whole
    assert any(carve_disjoint(texts, 4, s).val == [0, 1, 2, 6] for s in range(20))
    assert carve_disjoint(texts, 6, 0).info == {"units": 7, "maximal_units": 4}


def test_carving_fills_up_to_n_val_with_whole_groups():
    texts = [f"text number {i}" for i in range(10)]  # distinct, none inside another ("text number 1" is in "...10"?)
    c = carve_disjoint(texts, 4, 0)
    assert len(c.val) == 4 and c.phrase_level is False and c.moved_to_train == 0
    assert carve_disjoint(texts, 4, 0).val == c.val  # deterministic
    assert len({tuple(carve_disjoint(texts, 4, s).val) for s in range(8)}) > 1  # the seed decides which
    assert carve_disjoint(texts, 0, 0).val != []  # n_val 0: still one group, never an empty validation
    dup = ["same"] * 5 + ["other"]
    big = carve_disjoint(dup, 2, 0)
    assert big.val in ([5], [0, 1, 2, 3, 4])  # "same" (5 rows) does not fit 2; "other" does
    assert carve_disjoint(["same"] * 5, 2, 0).val == [0, 1, 2, 3, 4]  # all groups too large: one group


def test_final_pass_moves_substrings_and_what_the_moved_texts_contain():
    # validation candidates "good" (inside the training "goodness") and "oo" (inside "good" only): once "good"
    # moves to training, "oo" occurs in a training text too and moves in the second round
    norm = ["goodness", "good", "oo", "zzz"]
    train, held, moved = splits._move_contained_to_train(norm, [0], [1, 2, 3])
    assert (train, held, moved) == ([0, 1, 2], [3], 2)
    assert splits._move_contained_to_train(norm, [], [1, 2]) == ([], [1, 2], 0)
    assert splits._move_contained_to_train(norm, [0, 3], []) == ([0, 3], [], 0)


def test_stratified_quota_by_largest_remainder():
    # 7 of class 0, 3 of class 1, 3 held: quotas 2.1 and 0.9 -> 2 + 1 (the larger remainder gets the extra row)
    texts = [f"sentence {c} {i}" for i, c in enumerate("aaaaaaabbb")]
    labels = [0] * 7 + [1] * 3
    c = carve_stratified(texts, labels, 3, seed=0)
    _no_leak(texts, c)
    assert [labels[r] for r in c.val].count(0) == 2 and [labels[r] for r in c.val].count(1) == 1
    assert c.info == {"stratified": True}
    # 6 held of 10: 4.2 and 1.8 -> 4 + 2
    c = carve_stratified(texts, labels, 6, seed=1)
    assert sorted(labels[r] for r in c.val) == [0, 0, 0, 0, 1, 1]
    # 11 rows, 5 held: quotas 3.18, 1.36, 0.45 -> 3 + 1 + 0, the extra row to the largest remainder (class 2,
    # 0.45); class 2 has one row, which is never held out, so 4 rows are held
    texts3 = texts + ["lonely"]
    c = carve_stratified(texts3, labels + [2], 5, seed=0)
    assert 10 not in c.val and sorted(labels[r] for r in c.val) == [0, 0, 0, 1]
    c = carve_stratified(texts, labels, 1, seed=0)
    assert [labels[r] for r in c.val] == [0]
    # equal remainders: 5 and 5 rows, 1 held -> 0.5 each; ties go to the lower class id
    c = carve_stratified([f"t {i}" for i in range(10)], [0] * 5 + [1] * 5, 1, seed=0)
    assert [r < 5 for r in c.val] == [True]


def test_stratified_carving_moves_cross_class_substrings_to_train():
    texts = ["great movie", "meh film", "fine", "not a great movie at all"]
    labels = [1, 0, 1, 0]
    for seed in range(8):
        c = carve_stratified(texts, labels, 2, seed)
        _no_leak(texts, c)
        if 0 not in c.val and 1 not in c.val:
            continue
        assert 0 not in c.val or 3 in c.val  # "great movie" held only if the review quoting it is too
    moved = [carve_stratified(texts, labels, 2, s) for s in range(40)]
    assert any(c.moved_to_train == 1 and c.val == [1] for c in moved)  # "great movie" held with "meh film": moved
    assert all(c.phrase_level is False for c in moved)  # no containment within one class


def test_fold_assignment_greedy_by_hand():
    # 4 distinct texts, classes 0,0,1,1, k = 2: each fold gets one of each class
    texts, labels = ["a", "b", "c", "d"], [0, 0, 1, 1]
    for seed in range(5):
        folds = fold_assignment(texts, labels, 2, seed)
        assert sorted(folds[:2]) == [0, 1] and sorted(folds[2:]) == [0, 1]
    # a group of 3 identical texts goes first (largest) to fold 0; the singles then fill fold 1 up to 3 rows:
    # fold 1 holds the fewest rows of class 0 until it has 3, the ties go to the lower index
    texts = ["x", "x", "X ", "p", "q", "r"]
    labels = [0, 0, 0, 0, 0, 0]
    folds = fold_assignment(texts, labels, 2, 0)
    assert folds == [0, 0, 0, 1, 1, 1]
    # the majority class of a group decides where it goes: rows (0,0,1) count as class 0
    folds = fold_assignment(["y", "y", "y", "m", "n"], [0, 0, 1, 1, 1], 2, 0)
    assert folds[:3] == [0, 0, 0] and folds[3:] == [1, 1] or folds[:3] == [0, 0, 0] and sorted(folds[3:]) == [0, 1]
    assert len(set(fold_assignment([f"t{i}" for i in range(12)], [i % 2 for i in range(12)], 3, 7))) == 3


def test_fold_sizes_and_balance_and_seed():
    texts = [f"row {i}" for i in range(60)]
    labels = [int(i % 4 == 0) for i in range(60)]  # 15 of class 1
    folds = fold_assignment(texts, labels, 5, seed=2)
    for f in range(5):
        rows = [r for r in range(60) if folds[r] == f]
        assert len(rows) == 12 and sum(labels[r] for r in rows) == 3
    assert fold_assignment(texts, labels, 5, seed=2) == folds
    assert fold_assignment(texts, labels, 5, seed=3) != folds


def test_cv_fold_holds_out_one_fold_and_moves_substrings():
    texts = ["good", "a good film", "bad", "a bad film", "ok", "meh"]
    labels = [1, 1, 0, 0, 1, 0]
    folds = fold_assignment(texts, labels, 3, 0)
    total_moved = 0
    for f in range(3):
        c = cv_fold(texts, labels, 3, f, 0)
        _no_leak(texts, c)
        expected = [r for r in range(6) if folds[r] == f]
        assert set(c.val) <= set(expected)
        assert c.moved_to_train == len(expected) - len(c.val)
        assert c.info == {"cv_folds": 3, "fold": f} and c.phrase_level is False and c.containment_searched is True
        total_moved += c.moved_to_train
    assert total_moved >= 1  # "good"/"bad" never held out apart from their sentences


def test_containment_budget_falls_back_to_exact_units(monkeypatch):
    texts = ["one two three", "two three", "four five"]
    monkeypatch.setattr(splits, "NGRAM_BUDGET", 2)
    c = carve_disjoint(texts, 1, 0)
    assert c.containment_searched is False and c.phrase_level is False
    _no_leak(texts, c)  # the final substring pass still keeps "two three" out of validation alone
    monkeypatch.setattr(splits, "NGRAM_BUDGET", 6)  # "one two three": 3+2+1 = 6 joined for a = 0: within
    containers, cost = splits._containment(["one two three", "two three", "four five"])
    assert containers is None and cost > 6
    monkeypatch.setattr(splits, "NGRAM_BUDGET", 100)
    containers, cost = splits._containment(["one two three", "two three", "four five", "three"])
    assert containers == [[0], [0], [2], [0]]
    assert cost == (6 + 3 + 1) + (3 + 1)  # sum over starts a of (n-a)(n-a+1)/2 for the maximal units only


@pytest.mark.parametrize("major, minor", [(1, 0), (0, 1)])
def test_fold_assignment_places_a_mixed_group_by_its_majority_class(major, minor):
    """Two groups of 4 (one of the major class, one of the minor) take one fold each; a group of 3 with classes
    major, major, minor then goes to the fold with the fewest rows of its majority class: the one holding the
    minor-class group. Placing it by its minority class (or by the largest or smallest label) would send it to
    the other fold. Every seed (the equal-size order varies)."""
    texts = ["a"] * 4 + ["b"] * 4 + ["g"] * 3
    labels = [major] * 4 + [minor] * 4 + [major, major, minor]
    for seed in range(6):
        folds = fold_assignment(texts, labels, 2, seed)
        assert len(set(folds[:4])) == 1 and len(set(folds[4:8])) == 1 and len(set(folds[8:])) == 1
        assert folds[0] != folds[4]
        assert folds[8] == folds[4]  # with the class-0 group


def test_fold_assignment_breaks_class_ties_by_the_rows_a_fold_already_holds():
    """k = 2, groups by size: A (3 rows, class 0) to fold 0; B and C (2 rows of class 1 each) one per fold, so
    fold 0 holds 5 rows and fold 1 holds 2; D (1 row, class 2, no fold has any) goes to the smaller fold, 1."""
    texts = ["a"] * 3 + ["b"] * 2 + ["c"] * 2 + ["d"]
    labels = [0] * 3 + [1] * 4 + [2]
    for seed in range(6):
        folds = fold_assignment(texts, labels, 2, seed)
        assert folds[:3] == [0, 0, 0] and sorted([folds[3], folds[5]]) == [0, 1]
        assert folds[3] == folds[4] and folds[5] == folds[6]
        assert folds[7] == 1


def _partition(c, n):
    assert sorted(c.train + c.val) == list(range(n)) and not set(c.train) & set(c.val)


def test_stratified_carving_keeps_classes_it_skips_and_carves_the_rest():
    """A class too small to carve (one row, or a quota of 0) goes to training whole, before or after the classes
    that are carved, and the others are still carved."""
    texts = ["solo", "w1", "w2", "w3", "w4"]
    c = carve_stratified(texts, [0, 1, 1, 1, 1], 2, 0)  # quotas 0.4 and 1.6: class 0 gets 0 rows, class 1 gets 2
    _partition(c, 5)
    assert 0 in c.train and len(c.val) == 2 and set(c.val) <= {1, 2, 3, 4}
    c = carve_stratified(["w1", "w2", "w3", "w4", "solo"], [0, 0, 0, 0, 1], 2, 0)  # the skipped class comes last
    _partition(c, 5)
    assert 4 in c.train and len(c.val) == 2 and set(c.val) <= {0, 1, 2, 3}
    assert c.containment_searched is True and c.phrase_level is False and c.moved_to_train == 0


def test_stratified_carving_leaves_every_class_a_training_row():
    """n_held = all rows: each class's quota is its size, but at most size - 1 rows are held out."""
    texts = ["a1", "a2", "a3", "b1", "b2", "b3"]
    c = carve_stratified(texts, [0, 0, 0, 1, 1, 1], 6, 3)
    _partition(c, 6)
    assert len([r for r in c.train if r < 3]) == 1 and len([r for r in c.train if r >= 3]) == 1


def test_stratified_carving_follows_its_seed():
    texts = [f"text {i}" for i in range(40)]
    labels = [i % 2 for i in range(40)]
    runs = [carve_stratified(texts, labels, 10, seed) for seed in (5, 5, 6)]
    assert runs[0].val == runs[1].val and runs[0].train == runs[1].train
    assert runs[0].val != runs[2].val


def test_stratified_carving_reports_phrase_level_search_and_moves_of_any_class(monkeypatch):
    # class 0 has a phrase inside a sentence (phrase level), class 1 has none: the carving is phrase level
    texts = ["good film", "a good film indeed", "x1", "x2", "x3", "x4"]
    c = carve_stratified(texts, [0, 0, 1, 1, 1, 1], 3, 0)
    assert c.phrase_level is True and c.containment_searched is True
    # class 0 passes the containment budget (a 5-word text: 35 words joined), class 1 (1-word texts) does not
    monkeypatch.setattr("attnbench.data.splits.NGRAM_BUDGET", 10)
    c = carve_stratified(["one two three four five", "six", "y1", "y2", "y3", "y4"], [0, 0, 1, 1, 1, 1], 3, 0)
    assert c.containment_searched is False
    monkeypatch.undo()
    # "good" inside "goodness" (not as a word): held out by class 0's carving, moved back by its final pass;
    # class 1 (after it) moves nothing: the carving reports the one move
    texts = ["good", "goodness", "x1", "x2", "x3", "x4"]
    cases = [carve_stratified(texts, [0, 0, 1, 1, 1, 1], 3, seed) for seed in range(20)]
    moved_back = [c for c in cases if 0 not in c.val and 1 not in c.val]
    kept = [c for c in cases if 1 in c.val]
    assert moved_back and kept  # both orders occur over 20 seeds
    assert all(c.moved_to_train == 1 and 0 in c.train for c in moved_back)
    assert all(c.moved_to_train == 0 for c in kept)


def test_containment_lists_only_maximal_containers_whatever_the_input_order():
    """A shorter unit listed before the unit that contains it is not maximal: its containers are the longer unit
    only (the docstring's "indices of the maximal units that contain it")."""
    containers, cost = splits._containment(["good film", "a good film", "bad"])
    assert containers == [[1], [1], [2]]
    # words joined: "a good film" from each start a: (3-a)(4-a)/2 = 6 + 3 + 1; "bad": 1; "good film" skipped
    assert cost == 10 + 1


def test_containment_of_an_empty_text_and_of_a_repeated_phrase():
    # the empty text is a unit of its own (no empty n-gram is looked up), not "contained" in every text
    assert splits._containment(["good film", ""])[0] == [[0], [1]]
    # a phrase occurring twice in a sentence lists that sentence once
    assert splits._containment(["good film good film", "good film"])[0] == [[0], [0]]
