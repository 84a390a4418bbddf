"""Negative squared Euclidean distance score."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
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
    per-key bias −‖k‖²: it runs through SDPA on augmented vectors
    q' = [√2·q, 1], k' = [√2·k, −‖k‖²] (so q'·k' = 2q·k − ‖k‖²), with the
    value padded by one zero column so that SDPA keeps its fused kernel, which
    needs equal query/value head sizes.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk. No parameters.
    """

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        dots = query @ key.transpose(-2, -1)
        q_sq = query.square().sum(-1, keepdim=True)  # B×H×Lq×1
        k_sq = key.square().sum(-1).unsqueeze(-2)  # B×H×1×Lk
        return (2.0 * dots - q_sq - k_sq) * (1.0 / math.sqrt(self.head_dim))

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        sqrt2 = math.sqrt(2.0)
        k_sq = key.square().sum(-1, keepdim=True)
        query_aug = torch.cat([query * sqrt2, torch.ones_like(query[..., :1])], dim=-1)
        key_aug = torch.cat([key * sqrt2, -k_sq], dim=-1)
        value_aug = F.pad(value, (0, query_aug.shape[-1] - value.shape[-1]))
        out = sdpa_attend(
            query_aug, key_aug, value_aug, key_padding_mask, dropout_p, scale=1.0 / math.sqrt(self.head_dim)
        )
        return out[..., : value.shape[-1]]
