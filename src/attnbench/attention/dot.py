"""Unscaled dot-product score (Luong et al. 2015, "dot")."""

from __future__ import annotations

from torch import Tensor

from attnbench.attention.base import ScoreFunction, sdpa_attend


class DotScore(ScoreFunction):
    """``score(q, k) = qᵀk``, no scaling.

    Luong, Pham, Manning 2015, *Effective Approaches to Attention-based NMT*,
    eq. 8 ("dot"). Its variance grows linearly with head_dim when q and k have
    unit-variance components, which is what ``scaled_dot`` corrects.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk. No parameters.
    ``scores`` of float16/bfloat16 inputs are float32 (16-bit logits lose the
    softmax's resolution); :func:`~attnbench.attention.base.sdpa_attend` says how
    the fast path treats 16-bit inputs.
    Fast path: SDPA with ``scale=1``.
    """

    name = "dot"
    float32_methods = ("scores",)

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return query @ key.transpose(-2, -1)

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """Σ_c q_c k_c for every pair, float64 (Luong et al. 2015, eq. 8)."""
        return (query.unsqueeze(-2) * key.unsqueeze(-3)).sum(-1)

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        return sdpa_attend(query, key, value, key_padding_mask, dropout_p, scale=1.0)
