"""Negative (non-squared) Euclidean distance score."""

from __future__ import annotations

import torch
from torch import Tensor

from attnbench.attention.base import ScoreFunction
from attnbench.attention.registry import register


@register("l2")
class L2Score(ScoreFunction):
    """``score(q, k) = −‖q − k‖₂``, computed with ``torch.cdist``.

    The L2 distance of Kim, Papamakarios, Mnih 2021 without the square. The
    square root keeps it out of SDPA; ``torch.cdist`` still computes it from
    one GEMM (‖q‖² + ‖k‖² − 2q·k) for large inputs, so memory is O(Lq·Lk),
    never O(Lq·Lk·d), and its gradient at zero distance is zero, not NaN.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk. No parameters.
    Half-precision inputs are computed in float32 (CPU ``cdist`` has no
    bfloat16 kernel for short sequences, and the GEMM expansion loses the
    small distances to cancellation in 8-bit mantissas).
    """

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        if query.dtype in (torch.float16, torch.bfloat16):
            return -torch.cdist(query.float(), key.float(), p=2.0).to(query.dtype)
        return -torch.cdist(query, key, p=2.0)
