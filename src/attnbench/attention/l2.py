"""Negative (non-squared) Euclidean distance score."""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.attention.base import ScoreFunction, blocked_attend, validated_chunking


class L2Score(ScoreFunction):
    """``score(q, k) = −‖q − k‖₂``, computed with ``torch.cdist``.

    The L2 distance of Kim, Papamakarios, Mnih 2021 without the square. The
    square root keeps it out of SDPA; ``torch.cdist`` still computes it from
    one GEMM (‖q‖² + ‖k‖² − 2q·k) for large inputs, so memory is O(Lq·Lk),
    never O(Lq·Lk·d), and its gradient at zero distance is zero, not NaN.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk. No parameters.
    Fast path: queries in blocks whose B×H×block×Lk scores fit ``chunk_bytes``
    (recomputed in the backward), so long sequences never hold all Lq×Lk
    scores and their softmax at once.

    Args:
        n_heads: H.
        head_dim: d.
        chunk_size: queries per block; ``None`` picks the most that fit ``chunk_bytes``.
        chunk_bytes: memory budget of one block's scores (bytes); default 64 MiB.

    Half-precision inputs (or autocast) are computed in float32, softmax
    included, and ``scores`` returns float32 logits (CPU ``cdist`` has no
    bfloat16 kernel for short sequences, the GEMM expansion loses the small
    distances to cancellation in 8-bit mantissas, and a bfloat16 distance of
    magnitude 32 has a resolution of 0.25).
    """

    name = "l2"
    float32_methods = ("scores", "attend")

    def __init__(self, n_heads: int, head_dim: int, chunk_size: int | None = None,
                 chunk_bytes: int = 64 * 2**20) -> None:
        super().__init__(n_heads, head_dim)
        self.chunk_size, self.chunk_bytes = validated_chunking("l2", chunk_size, chunk_bytes)

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return -torch.cdist(query, key, p=2.0)

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """−√(Σ_c (q_c − k_c)²) for every pair, float64, straight from the definition (no cdist).

        At q = k the square root's derivative is infinite; its gradient there is 0, as ``torch.cdist``'s
        (the square root is taken of 1 where the distance is 0, and that branch is masked).
        """
        sq = ((query.unsqueeze(-2) - key.unsqueeze(-3)) ** 2).sum(-1)
        zero = sq == 0
        return -torch.where(zero, 0.0, torch.where(zero, 1.0, sq).sqrt())

    def work(self, batch: int, n_queries: int, n_keys: int, value_dim: int) -> dict[str, int]:
        """The matrix multiplies of ‖q‖² + ‖k‖² − 2q·k and PV (2·B·H·Lq·Lk·(d + d_v) FLOPs) and one square
        root per pair, B·H·Lq·Lk."""
        return {**super().work(batch, n_queries, n_keys, value_dim),
                "sqrt": batch * self.n_heads * n_queries * n_keys}

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        block = self.block_size(query.shape[0], query.shape[-2], key.shape[-2], query.element_size())
        return blocked_attend(self.scores, query, key, value, key_padding_mask, dropout_p, block)
