"""Negative squared Euclidean distance score."""

from __future__ import annotations

import math

from torch import Tensor

from attnbench.attention.base import ScoreFunction, sdpa_attend
from attnbench.attention.registry import register


@register("euclidean")
class EuclideanScore(ScoreFunction):
    """``score(q, k) = −‖q − k‖² / √d_k``.

    The squared-distance ("RBF") kernel of Tsai et al. 2019, *Transformer
    Dissection*, and the L2 self-attention of Kim, Papamakarios, Mnih 2021,
    *The Lipschitz Constant of Self-Attention*, scaled like ``scaled_dot``.

    Cost: −‖q−k‖² = 2q·k − ‖q‖² − ‖k‖². Under a softmax over keys the ‖q‖²
    term is constant per row and cancels, so the fast path is one GEMM plus a
    per-key bias: SDPA with ``scale = 2/√d`` and the additive float mask
    −‖k‖²/√d (B×H×1×Lk, differentiable). Query, key and value keep their head
    size, so SDPA keeps its fused kernel; nothing of size Lq×Lk×d is built.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk. No parameters.
    """

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        dots = query @ key.transpose(-2, -1)
        q_sq = query.square().sum(-1, keepdim=True)  # B×H×Lq×1
        k_sq = key.square().sum(-1).unsqueeze(-2)  # B×H×1×Lk
        return (2.0 * dots - q_sq - k_sq) * (1.0 / math.sqrt(self.head_dim))

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        inv_sqrt_d = 1.0 / math.sqrt(self.head_dim)
        key_bias = (key.square().sum(-1) * -inv_sqrt_d).unsqueeze(-2)  # B×H×1×Lk
        return sdpa_attend(query, key, value, key_padding_mask, dropout_p, scale=2.0 * inv_sqrt_d, key_bias=key_bias)
