"""Scaled dot-product score (Vaswani et al. 2017)."""

from __future__ import annotations

import math

from torch import Tensor

from attnbench.attention.base import ScoreFunction, float32_when_low_precision, sdpa_attend
from attnbench.attention.registry import register


@register("scaled_dot")
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

    @float32_when_low_precision
    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return (query @ key.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        return sdpa_attend(query, key, value, key_padding_mask, dropout_p, scale=1.0 / math.sqrt(self.head_dim))
