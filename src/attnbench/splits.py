"""Held-out splits that share no source text with training, and the overlap counts the data log states.

Why: GLUE SST-2's training split is *phrases* — every treebank sentence plus
many of its sub-phrases. A random 5% carve put 88.7% of the validation phrases
inside some training phrase, so val/acc (0.917) overstated test/acc (0.812) and
checkpoint selection optimised the leak. The carving here works on source
text, for any dataset:

1. Texts are compared in a normal form (whitespace collapsed, case folded).
   Identical texts form one *unit* and always land on the same side.
2. Containment (phrase-level data): a unit that occurs as a run of whole words
   inside a longer unit is *contained*; units contained in no other unit are
   *maximal* (SST-2: the sentences). Validation is built from whole maximal
   units, taken in a seeded random order; a contained unit joins validation
   only when *every* unit that contains it is in validation, otherwise it stays
   in training. The search enumerates the word n-grams of maximal units only
   (16 M words joined on SST-2, seconds); on long texts (IMDB) it stops at a budget
   and carving falls back to step 1 (reviews are not phrases of each other).
3. A final pass moves to training every validation text that still occurs as
   a plain substring of the training texts (e.g. "good" in "goodness"), so no
   validation text is contained in any training text.

The overlap counts (:func:`overlap_counts`) use a joined-string search
(``text in "\\n".join(train_texts)``); above a budget of characters scanned
they are computed on a seeded sample and say so.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

NGRAM_BUDGET = 40_000_000  # words joined into n-grams by the containment search (SST-2: 16 M) before it gives up
SCAN_BUDGET = 20_000_000_000  # cost units of one overlap count (SST-2 validation: 1.4e10) before sampling
CARVE_SCAN_BUDGET = 100_000_000_000  # ... of each round of the carving's final substring pass before skipping it


def scan_cost(haystack_chars: int, needle: str) -> float:
    """Estimated cost of ``needle in haystack``: the haystack's characters, more for long needles.

    Measured (2-core CI machine, loaded): 2.6e9 characters/s for SST-2 phrases
    (~50 characters), 0.5e9/s for IMDB reviews (~1,300): roughly ``1 + len/256``
    times the haystack.
    """
    return haystack_chars * (1 + len(needle) / 256)


def normal_form(text: str) -> str:
    """``text`` with runs of whitespace collapsed to one space and case folded: the form texts are compared in."""
    return " ".join(text.split()).casefold()


@dataclass
class Carving:
    """Result of :func:`carve_disjoint`.

    Attributes:
        train, val: row indices (into the carved split) of each side, ascending.
        phrase_level: whether some text was found inside another text (containment grouping applied).
        containment_searched: False when the containment search stopped at :data:`NGRAM_BUDGET`.
        moved_to_train: validation rows moved back by the final substring pass.
    """

    train: list[int]
    val: list[int]
    phrase_level: bool
    containment_searched: bool
    moved_to_train: int = 0
    info: dict = field(default_factory=dict)


def _containment(units: list[str]) -> tuple[list[list[int]] | None, int]:
    """For each unit, the indices of the maximal units that contain it (itself if maximal).

    Returns ``(None, n)`` when the search passed :data:`NGRAM_BUDGET` after joining ``n`` words.
    """
    index = {u: i for i, u in enumerate(units)}
    order = sorted(range(len(units)), key=lambda i: (-len(units[i].split()), units[i]))
    containers: list[list[int]] = [[] for _ in units]
    cost = 0
    for i in order:
        if containers[i]:  # contained in a longer unit: its sub-phrases are contained in that unit too
            continue
        containers[i].append(i)
        words = units[i].split()
        n = len(words)
        seen = set()
        for a in range(n):
            for b in range(a + 1, n + 1 if a else n):
                j = index.get(" ".join(words[a:b]))
                if j is not None and j != i and j not in seen:
                    seen.add(j)
                    containers[j].append(i)
            cost += (n - a) * (n - a + 1) // 2  # words joined for this start
            if cost > NGRAM_BUDGET:
                return None, cost
    return containers, cost


def carve_disjoint(texts: Sequence[str], n_val: int, seed: int) -> Carving:
    """Split rows into train and validation with no validation text contained in a training text.

    Args:
        texts: the texts of the split to carve (one per row).
        n_val: the validation size to aim for (rows); the result has at most ``n_val`` rows, fewer when
            whole groups do not add up (and after the final substring pass), more only when every group is
            larger than ``n_val`` (then validation is one group).
        seed: seed of the random order of the groups.

    Returns:
        A :class:`Carving`. Guarantees: no validation text (normal form) equals, or occurs as a substring
        of, a training text — unless the substring pass was over :data:`CARVE_SCAN_BUDGET` (then identical texts
        and whole-word containment within the n-gram budget are still excluded).
    """
    unit_of: dict[str, int] = {}
    units: list[str] = []
    rows: list[list[int]] = []
    for row, text in enumerate(texts):
        key = normal_form(text)
        u = unit_of.get(key)
        if u is None:
            u = unit_of[key] = len(units)
            units.append(key)
            rows.append([])
        rows[u].append(row)
    containers, _ = _containment(units)
    searched = containers is not None
    if containers is None:
        containers = [[i] for i in range(len(units))]
    maximal = sorted(i for i in range(len(units)) if containers[i] == [i])
    phrase_level = len(maximal) < len(units)
    contained_in: dict[int, list[int]] = {}
    for j, cs in enumerate(containers):
        if cs != [j]:
            for i in cs:
                contained_in.setdefault(i, []).append(j)
    remaining = [len(cs) for cs in containers]
    in_val = [False] * len(units)
    rng = random.Random(seed)
    rng.shuffle(maximal)
    count = 0
    for i in maximal:
        if count >= n_val:
            break
        gain = [i] + [j for j in contained_in.get(i, ()) if remaining[j] == 1]
        size = sum(len(rows[u]) for u in gain)
        if count + size > n_val:
            continue  # a smaller group later may still fit
        for j in contained_in.get(i, ()):
            remaining[j] -= 1
        for u in gain:
            in_val[u] = True
        count += size
    if count == 0 and maximal:  # every group is larger than n_val: one group rather than no validation at all
        i = maximal[0]
        for u in [i] + [j for j in contained_in.get(i, ()) if remaining[j] == 1]:
            in_val[u] = True
    # Final pass: a validation text that is a plain substring of some training text goes to training.
    moved = 0
    while True:
        train_units = [units[u] for u in range(len(units)) if not in_val[u]]
        val_units = [u for u in range(len(units)) if in_val[u]]
        joined = "\n".join(train_units)
        if sum(scan_cost(len(joined), units[u]) for u in val_units) > CARVE_SCAN_BUDGET:
            break
        leaking = [u for u in val_units if units[u] in joined]
        if not leaking:
            break
        for u in leaking:
            in_val[u] = False
            moved += len(rows[u])
    train = sorted(r for u in range(len(units)) if not in_val[u] for r in rows[u])
    val = sorted(r for u in range(len(units)) if in_val[u] for r in rows[u])
    return Carving(train, val, phrase_level, searched, moved, {"units": len(units), "maximal_units": len(maximal)})


def overlap_counts(train_texts: Sequence[str], texts: Sequence[str], seed: int = 0) -> dict[str, int]:
    """How many of ``texts`` occur in ``train_texts``: identical, and as a substring of one.

    Both in normal form (:func:`normal_form`). ``verbatim``: equal to some training text (exact count over
    all of ``texts``). ``substring``: contained in some training text (equal included), found by searching
    the training texts joined with newlines; when the estimated cost (:func:`scan_cost`) passes
    :data:`SCAN_BUDGET` a seeded sample of ``substring_checked`` texts is searched and ``substring`` counts within it.

    Returns:
        ``{"n", "verbatim", "substring", "substring_checked"}`` (counts of texts).
    """
    train_norm = [normal_form(t) for t in train_texts]
    train_set = set(train_norm)
    norm = [normal_form(t) for t in texts]
    joined = "\n".join(train_norm)
    checked = list(range(len(norm)))
    costs = [scan_cost(len(joined), t) for t in norm]
    if sum(costs) > SCAN_BUDGET:
        k = max(1, int(SCAN_BUDGET / (sum(costs) / len(costs))))
        checked = sorted(random.Random(seed).sample(checked, min(k, len(checked))))
    return {"n": len(norm), "verbatim": sum(t in train_set for t in norm),
            "substring": sum(norm[i] in joined for i in checked), "substring_checked": len(checked)}
