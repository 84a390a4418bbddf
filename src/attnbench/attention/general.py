"""Bilinear ("general") score (Luong et al. 2015)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnbench.attention.base import ScoreFunction, sdpa_attend


class GeneralScore(ScoreFunction):
    """``score(q, k) = qᵀ W k`` with a learned W ∈ R^{d×d} per head.

    Luong, Pham, Manning 2015, eq. 8 ("general"). W is initialised to the
    identity, so training starts from the unscaled ``dot`` score. Inside a
    Transformer head W is algebraically redundant with the query/key
    projections (W_qᵀ W W_k is again one bilinear form); it is kept so the
    product can measure Luong's three scores side by side.

    Parameters: ``weight`` H×d×d.
    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk.
    Fast path: SDPA on (q W) and k with ``scale=1``. float16/bfloat16 inputs
    are computed in float32 (qW rounded to 16 bits carries the logit's whole
    magnitude into the rounding).
    """

    name = "general"
    float32_methods = ("scores", "attend")

    def __init__(self, n_heads: int, head_dim: int) -> None:
        super().__init__(n_heads, head_dim)
        self.weight = nn.Parameter(torch.eye(head_dim).repeat(n_heads, 1, 1))

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return (query @ self.weight.to(query.dtype)) @ key.transpose(-2, -1)

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """Σ_i q_i (W k)_i for every pair, float64 (Luong et al. 2015, eq. 8)."""
        w = self.weight.double()  # H×d×d
        k_w = torch.einsum("hij,bhkj->bhki", w, key)  # W k for every key
        return (query.unsqueeze(-2) * k_w.unsqueeze(-3)).sum(-1)

    def work(self, batch: int, n_queries: int, n_keys: int, value_dim: int) -> dict[str, int]:
        """qW (2·B·H·Lq·d² FLOPs), then QKᵀ and PV as every matrix-multiply score."""
        return {"flops": super().work(batch, n_queries, n_keys, value_dim)["flops"]
                + 2 * batch * self.n_heads * n_queries * self.head_dim**2}

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        return sdpa_attend(query @ self.weight.to(query.dtype), key, value, key_padding_mask, dropout_p, scale=1.0)
