"""Plain float64 reference attention, from each score function's own formula.

Each score function carries its formula as
:meth:`~attnbench.attention.base.ScoreFunction.reference_scores`, written
straight from its source pair by pair through broadcasting, with none of the
algebraic shortcuts of the fast paths (no ‖q−k‖² expansion, no SDPA, no
cdist). Tests compare the modules against these.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.attention.base import ScoreFunction


def reference_scores(score_fn: ScoreFunction, query: Tensor, key: Tensor) -> Tensor:
    """Scores of ``score_fn`` for ``query`` (B×H×Lq×d) and ``key`` (B×H×Lk×d), in float64.

    Returns ``score_fn.reference_scores`` on float64 copies: B×H×Lq×Lk float64.

    Raises:
        NotImplementedError: for a score function without a reference formula.
    """
    return score_fn.reference_scores(query.double(), key.double())


def reference_attention(
    score_fn: ScoreFunction, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None
) -> Tensor:
    """``softmax(scores)·value`` in float64 with padding keys excluded, looping over sequences.

    Args:
        query: B×H×Lq×d; key: B×H×Lk×d; value: B×H×Lk×d_v.
        key_padding_mask: optional bool B×Lk, True = padding.

    Returns:
        B×H×Lq×d_v float64; a sequence whose keys are all padding gets zeros.
    """
    scores = reference_scores(score_fn, query, key)
    v = value.double()
    out = torch.zeros(*scores.shape[:-1], v.shape[-1], dtype=torch.float64)
    for b in range(scores.shape[0]):
        keep = torch.ones(scores.shape[-1], dtype=torch.bool)
        if key_padding_mask is not None:
            keep = ~key_padding_mask[b]
        if not keep.any():
            continue
        weights = torch.softmax(scores[b][..., keep], dim=-1)
        out[b] = weights @ v[b][:, keep]
    return out
