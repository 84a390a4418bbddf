"""Additive (MLP) score (Bahdanau et al. 2015; Luong's "concat")."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnbench.attention.base import ScoreFunction
from attnbench.attention.registry import register


@register("additive")
class AdditiveScore(ScoreFunction):
    """``score(q, k) = vᵀ tanh(W_q q + W_k k)``: a one-hidden-layer MLP per pair.

    Bahdanau, Cho, Bengio 2015, *Neural Machine Translation by Jointly Learning
    to Align and Translate*, appendix A.1.2 (``v_aᵀ tanh(W_a s + U_a h)``);
    Luong et al. 2015 call it "concat".

    Args:
        n_heads: H.
        head_dim: d.
        hidden_dim: d_a, the MLP's hidden size; ``None`` means d_a = head_dim.

    Parameters (per head): ``w_query`` H×d×d_a, ``w_key`` H×d×d_a, ``v`` H×d_a.
    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk.

    Cost: the projections are GEMMs, but ``tanh`` of the pairwise sum is
    elementwise work on a B×H×Lq×Lk×d_a tensor — it cannot be folded into a
    matrix multiply, which is the point the product measures.
    """

    def __init__(self, n_heads: int, head_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__(n_heads, head_dim)
        hidden_dim = head_dim if hidden_dim is None else int(hidden_dim)
        if hidden_dim < 1:
            raise ValueError(f"additive: attention.hidden_dim must be >= 1 (or null for head_dim), got {hidden_dim}")
        self.hidden_dim = hidden_dim
        bound = 1.0 / math.sqrt(head_dim)
        self.w_query = nn.Parameter(torch.empty(n_heads, head_dim, hidden_dim).uniform_(-bound, bound))
        self.w_key = nn.Parameter(torch.empty(n_heads, head_dim, hidden_dim).uniform_(-bound, bound))
        v_bound = 1.0 / math.sqrt(hidden_dim)
        self.v = nn.Parameter(torch.empty(n_heads, hidden_dim).uniform_(-v_bound, v_bound))

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        q_proj = query @ self.w_query  # B×H×Lq×d_a
        k_proj = key @ self.w_key  # B×H×Lk×d_a
        hidden = torch.tanh(q_proj.unsqueeze(-2) + k_proj.unsqueeze(-3))  # B×H×Lq×Lk×d_a
        return (hidden @ self.v[None, :, None, :, None]).squeeze(-1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, hidden_dim={self.hidden_dim}"
