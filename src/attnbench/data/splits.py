"""Held-out splits that share no source text with training, and the overlap counts the data log states.

GLUE SST-2's training split is *phrases*: every treebank sentence plus many of its sub-phrases, so a random carve
puts most validation phrases inside some training phrase and validation accuracy overstates test accuracy. The
carving here works on source text, for any dataset:

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
   a plain substring of the training texts (e.g. "good" in "goodness", or an
   IMDB review quoted inside a longer one), so no validation text is contained
   in any training text. It always runs in full, on every dataset: the search
   (:func:`contained`) hashes every window of the training texts once
   (Karp-Rabin) instead of scanning them once per validation text.

The overlap counts (:func:`overlap_counts`) use the same exact search on every
text of the split (no sampling).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

NGRAM_BUDGET = 40_000_000  # words joined into n-grams by the containment search (SST-2: 16 M) before it gives up
ANCHOR_BYTES = 32  # longest anchor window hashed per needle (bytes of UTF-8)
_CHUNK = 1 << 20  # window starts hashed per step (temporary arrays of 8 MB)
_TABLE_BITS = 24  # prefilter: a bit per top-24-bit hash value
_MAX_PLACES = 64  # anchor occurrences in one chunk compared one by one; past it, one plain search of the needle
_BASE = 0x9E3779B97F4A7C15  # odd, so it has an inverse modulo 2**64


def contained(needles: Sequence[str], haystacks: Sequence[str]) -> list[bool]:
    """For each needle, whether it occurs as a substring of some haystack (exact, every needle searched).

    Method (Karp & Rabin 1987, "Efficient randomized pattern-matching algorithms", with verification): the
    haystacks are UTF-8 encoded and joined with the byte 0xFF, which occurs in no UTF-8 text, so no match
    spans two haystacks. Each needle of ``L`` bytes gets one *anchor*, its middle window of
    ``k = min(L, ANCHOR_BYTES)`` bytes. The polynomial hash modulo 2**64 of every ``k``-byte window of the
    joined haystacks comes from one prefix sum (vectorised with numpy, one pass per distinct ``k``); windows
    whose hash equals some anchor's are candidates, and a needle counts as contained only when the bytes at a
    candidate equal the whole needle. A needle that occurs has its anchor's window hash at that place, so
    nothing is missed; hash collisions only add candidates that the byte comparison rejects. A needle whose
    anchor is common (more than ``_MAX_PLACES`` places in a chunk, e.g. repetitive text) is decided by one
    plain search of the joined bytes instead, so no needle costs more than one pass over the haystack.

    Cost: one numpy pass over the haystack bytes per distinct anchor length (at most ``ANCHOR_BYTES``),
    plus byte comparisons at the candidates (IMDB's 25,000 test reviews in its 31 MB of training text: ~2 s).

    Args:
        needles: texts to look for (``n`` of them).
        haystacks: texts to look in.

    Returns:
        ``n`` booleans, in the order of ``needles``. The empty needle is contained when there is a haystack.
    """
    found = [False] * len(needles)
    if not haystacks:
        return found
    hay = b"\xff".join(h.encode("utf-8", "surrogatepass") for h in haystacks)
    n = len(hay)
    groups: dict[int, list[tuple[int, bytes, int, int]]] = {}  # k -> (needle, bytes, anchor offset, anchor hash)
    binv = pow(_BASE, -1, 1 << 64)
    for i, text in enumerate(needles):
        b = text.encode("utf-8", "surrogatepass")
        if not b:
            found[i] = True
            continue
        if len(b) > n:
            continue
        k = min(len(b), ANCHOR_BYTES)
        off = (len(b) - k) // 2
        h, p = 0, 1
        for c in b[off:off + k]:  # sum_t c_t * binv**t  (mod 2**64)
            h = (h + c * p) & 0xFFFFFFFFFFFFFFFF
            p = (p * binv) & 0xFFFFFFFFFFFFFFFF
        groups.setdefault(k, []).append((i, b, off, h))
    if not groups:
        return found
    # Window hashes, one chunk of window starts at a time: with P[j] = sum_{t<j} hay[a+t] * binv**t, the window
    # at a+i has hash (P[i+k] - P[i]) * BASE**i (mod 2**64: numpy's uint64 arithmetic wraps).
    span = _CHUNK + max(groups) - 1
    binv_pow = np.full(span, binv, dtype=np.uint64)
    binv_pow[0] = 1
    np.cumprod(binv_pow, out=binv_pow)
    base_pow = np.full(_CHUNK, _BASE, dtype=np.uint64)
    base_pow[0] = 1
    np.cumprod(base_pow, out=base_pow)
    shift = np.uint64(64 - _TABLE_BITS)
    table = np.zeros(1 << _TABLE_BITS, dtype=bool)  # prefilter on the top bits of every anchor hash
    pending: dict[int, dict[int, list[tuple[int, bytes, int]]]] = {}  # k -> anchor hash -> needles
    for k, group in groups.items():
        for i, b, off, h in group:
            pending.setdefault(k, {}).setdefault(h, []).append((i, b, off))
            table[h >> (64 - _TABLE_BITS)] = True
    wanted = {k: np.fromiter(d, dtype=np.uint64, count=len(d)) for k, d in pending.items()}
    prefix = np.zeros(span + 1, dtype=np.uint64)
    for a in range(0, n, _CHUNK):
        if not pending:
            break
        m = min(span, n - a)
        codes = np.frombuffer(hay, dtype=np.uint8, count=m, offset=a).astype(np.uint64)
        np.cumsum(codes * binv_pow[:m], out=prefix[1:m + 1])
        for k in sorted(pending):
            w = min(_CHUNK, m - k + 1)  # windows starting in this chunk
            if w <= 0:
                continue
            h = (prefix[k:k + w] - prefix[:w]) * base_pow[:w]
            cand = np.flatnonzero(table[h >> shift])
            hc = h[cand]
            keep = np.isin(hc, wanted[k])
            cand, hc = cand[keep], hc[keep]
            if not len(cand):
                continue
            order = np.argsort(hc, kind="stable")  # by hash, then position
            cand, hc = cand[order] + a, hc[order]
            starts = np.flatnonzero(np.r_[True, hc[1:] != hc[:-1]]).tolist()
            by_hash = pending[k]
            for s, t in zip(starts, starts[1:] + [len(hc)]):
                hv = int(hc[s])
                places = cand[s:t].tolist()
                left = []
                for i, b, off in by_hash[hv]:
                    if len(places) > _MAX_PLACES and len(b) > k:  # a common anchor (repetitive text): decide now
                        found[i] = b in hay
                    elif any(q >= off and hay[q - off:q - off + len(b)] == b for q in places):
                        found[i] = True
                    else:
                        left.append((i, b, off))
                if left:
                    by_hash[hv] = left
                else:
                    del by_hash[hv]
            if by_hash:
                wanted[k] = np.fromiter(by_hash, dtype=np.uint64, count=len(by_hash))
            else:
                del pending[k]
    return found


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
        A :class:`Carving`. Guarantee: no validation text (normal form) equals, or occurs as a substring
        of, a training text (normal form), on any data (the final pass searches every validation text).
    """
    unit_of: dict[str, int] = {}
    units: list[str] = []
    rows: list[list[int]] = []
    norm = [normal_form(text) for text in texts]
    for row, key in enumerate(norm):
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
    train = sorted(r for u in range(len(units)) if not in_val[u] for r in rows[u])
    val = sorted(r for u in range(len(units)) if in_val[u] for r in rows[u])
    train, val, moved = _move_contained_to_train(norm, train, val)
    return Carving(train, val, phrase_level, searched, moved, {"units": len(units), "maximal_units": len(maximal)})


def overlap_counts(train_texts: Sequence[str], texts: Sequence[str]) -> dict[str, int]:
    """How many of ``texts`` occur in ``train_texts``: identical, and as a substring of one.

    Both in normal form (:func:`normal_form`), counted over every text (exact; :func:`contained`).
    ``verbatim``: equal to some training text. ``substring``: contained in some training text, identical ones
    included, so ``substring >= verbatim``. ``substring_checked``: texts searched, always ``n`` (every text
    is searched).

    Returns:
        ``{"n", "verbatim", "substring", "substring_checked"}`` (counts of texts).
    """
    train_norm = [normal_form(t) for t in train_texts]
    train_set = set(train_norm)
    norm = [normal_form(t) for t in texts]
    return {"n": len(norm), "verbatim": sum(t in train_set for t in norm),
            "substring": sum(contained(norm, train_norm)), "substring_checked": len(norm)}


def _move_contained_to_train(norm: Sequence[str], train: list[int], held: list[int]) -> tuple[list[int], list[int], int]:
    """The final pass of every carving: held-out rows whose text (normal form ``norm``) occurs in a training text
    move to training. The texts moved can contain other held-out texts, so the search runs again in the moved texts
    only (the rest of training was searched already), until none moves. Returns (train, held, moved rows)."""
    held_set, moved = set(held), 0
    haystacks = sorted({norm[r] for r in train})
    while held_set and haystacks:
        needles = sorted({norm[r] for r in held_set})
        hits = {t for t, hit in zip(needles, contained(needles, haystacks)) if hit}
        leaving = [r for r in held_set if norm[r] in hits]
        moved += len(leaving)
        held_set.difference_update(leaving)
        haystacks = sorted(hits)
    train = sorted(set(train) | (set(held) - held_set))
    return train, sorted(held_set), moved


def carve_stratified(texts: Sequence[str], labels: Sequence[int], n_held: int, seed: int) -> Carving:
    """A held-out set (a carved test split) with about the class proportions of ``labels``, sharing no text with
    the rest.

    Each class's rows are carved with :func:`carve_disjoint` (``n_held`` × the class share, same seed), so
    identical and contained texts stay together within a class; a final pass over all classes then moves to
    training every held-out text that occurs in a training text of any class (the guarantee of
    :func:`carve_disjoint`: no held-out text equals or is a substring of a training text).

    Args:
        texts: one text per row; labels: the row's class id.
        n_held: rows to hold out (at most: whole groups of texts only; per class, its share rounded by largest
            remainder).
        seed: seed of the carving (``data.split_seed``).

    Returns:
        A :class:`Carving` whose ``val`` is the held-out rows.
    """
    n = len(texts)
    by_class: dict[int, list[int]] = {}
    for row, y in enumerate(labels):
        by_class.setdefault(int(y), []).append(row)
    train: list[int] = []
    held: list[int] = []
    phrase_level, searched, moved = False, True, 0
    # rows per class: n_held * class share, rounded by largest remainder so that they add up to n_held
    quota = {y: n_held * len(rows) / n for y, rows in by_class.items()}
    alloc = {y: int(q) for y, q in quota.items()}
    for y in sorted(quota, key=lambda y: (alloc[y] - quota[y], y))[: n_held - sum(alloc.values())]:
        alloc[y] += 1
    for y in sorted(by_class):
        rows = by_class[y]
        n_c = alloc[y]
        if n_c < 1 or len(rows) < 2:
            train += rows
            continue
        carving = carve_disjoint([texts[r] for r in rows], min(n_c, len(rows) - 1), seed)
        train += [rows[i] for i in carving.train]
        held += [rows[i] for i in carving.val]
        phrase_level |= carving.phrase_level
        searched &= carving.containment_searched
        moved += carving.moved_to_train
    norm = [normal_form(t) for t in texts]
    train, held, moved_across = _move_contained_to_train(norm, train, held)
    return Carving(train, held, phrase_level, searched, moved + moved_across, {"stratified": True})


def fold_assignment(texts: Sequence[str], labels: Sequence[int], k: int, seed: int) -> list[int]:
    """The fold (0..k-1) of every row: stratified k-fold over groups of identical texts.

    Rows with the same text (normal form) form one group and share a fold. Groups, in a seeded random order and
    then largest first, go one by one to the fold with the fewest rows of the group's (majority) class, ties to
    the fold with fewest rows, then the lowest index: folds of near-equal size and class balance (the greedy of
    scikit-learn's ``StratifiedGroupKFold``, simplified). Texts contained in other texts are handled when a fold
    is held out (:func:`cv_fold`).

    Args:
        texts, labels: one per row; k: folds (>= 2); seed: ``data.split_seed``.
    """
    groups: dict[str, list[int]] = {}
    for row, text in enumerate(texts):
        groups.setdefault(normal_form(text), []).append(row)
    units = list(groups.values())
    random.Random(seed).shuffle(units)
    units.sort(key=len, reverse=True)  # stable: equal sizes keep the seeded order
    classes = sorted({int(y) for y in labels})
    per_class = [[0] * len(classes) for _ in range(k)]
    size = [0] * k
    index = {y: i for i, y in enumerate(classes)}
    fold_of = [0] * len(texts)
    for rows in units:
        counts: dict[int, int] = {}
        for r in rows:
            counts[int(labels[r])] = counts.get(int(labels[r]), 0) + 1
        y = index[max(sorted(counts), key=counts.get)]
        f = min(range(k), key=lambda f: (per_class[f][y], size[f], f))
        for r in rows:
            fold_of[r] = f
            per_class[f][index[int(labels[r])]] += 1
        size[f] += len(rows)
    return fold_of


def cv_fold(texts: Sequence[str], labels: Sequence[int], k: int, fold: int, seed: int) -> Carving:
    """Fold ``fold`` of :func:`fold_assignment` held out (``val``), the other folds for training (``train``).

    Held-out texts that occur inside a training text move to training (the final pass of
    :func:`carve_disjoint`), so the guarantee is the same as for a carved split; ``moved_to_train`` counts them.
    """
    folds = fold_assignment(texts, labels, k, seed)
    held = [r for r, f in enumerate(folds) if f == fold]
    train = [r for r, f in enumerate(folds) if f != fold]
    train, held, moved = _move_contained_to_train([normal_form(t) for t in texts], train, held)
    return Carving(train, held, False, True, moved, {"cv_folds": k, "fold": fold})
