"""Scaled dot-product score (Vaswani et al. 2017)."""

from __future__ import annotations

import math

from torch import Tensor

from attnbench.attention.base import ScoreFunction, sdpa_attend


class ScaledDotScore(ScoreFunction):
    """``score(q, k) = qᵀk / √d_k``.

    Vaswani et al. 2017, *Attention Is All You Need*, §3.2.1, eq. 1: the
    1/√d_k factor keeps the logits' variance at 1 when q and k have
    unit-variance components, so the softmax does not saturate as d_k grows.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk. No parameters.
    ``scores`` of float16/bfloat16 inputs are float32 (16-bit logits lose the
    softmax's resolution); :func:`~attnbench.attention.base.sdpa_attend` says how
    the fast path treats 16-bit inputs.
    Fast path: SDPA with ``scale=1/√d``.
    """

    name = "scaled_dot"
    float32_methods = ("scores",)

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return (query @ key.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """Σ_c q_c k_c / √d for every pair, float64 (Vaswani et al. 2017, eq. 1)."""
        return (query.unsqueeze(-2) * key.unsqueeze(-3)).sum(-1) / math.sqrt(query.shape[-1])

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        return sdpa_attend(query, key, value, key_padding_mask, dropout_p, scale=1.0 / math.sqrt(self.head_dim))
