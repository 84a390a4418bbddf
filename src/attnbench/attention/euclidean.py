"""Negative squared Euclidean distance score."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnbench.attention import cpu_kernels
from attnbench.attention.base import ScoreFunction, sdpa_attend


class EuclideanScore(ScoreFunction):
    """``score(q, k) = −‖q − k‖² / √d_k``.

    The squared-distance ("RBF") kernel of Tsai et al. 2019, *Transformer
    Dissection*, and the L2 self-attention of Kim, Papamakarios, Mnih 2021,
    *The Lipschitz Constant of Self-Attention*, scaled like ``scaled_dot``.

    Cost: −‖q−k‖² = 2q·k − ‖q‖² − ‖k‖². Under a softmax over keys the ‖q‖²
    term is constant per row and cancels, leaving one GEMM plus a per-key bias
    −‖k‖²/√d. The fast path runs SDPA (``scale = 2/√d``) in one of two exact
    forms, chosen by measurement on torch 2.13 CPU:

    * bias as a float ``attn_mask`` (B×H×1×Lk): the fastest form (0.8–1.07×
      plain SDPA) whenever the mask needs no gradient (inference) or Lq·Lk is
      small; but a mask that needs a gradient sends SDPA to its unfused math
      kernel, which at n = 1024 costs 1.9× the time and O(n²) memory;
    * so for gradients at Lq·Lk > ``bias_mask_max_pairs`` (default 256²) the
      bias rides in an extra dimension: q' = [q, 1], k' = [k, −‖k‖²/2] and v
      padded with a zero column (so q', k', v' share a head size and SDPA
      keeps its fused kernel): q'·k' = q·k − ‖k‖²/2, 1.17× plain SDPA at
      n = 1024.

    Without gradients on CPU (float32), ‖k‖² is read off the strided key view
    by a fused kernel (:mod:`attnbench.attention.cpu_kernels`) instead of a
    copy and a norm.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk. No parameters.
    float16/bfloat16 inputs are computed in float32 (a float16 ‖k‖² overflows
    above 65504; the bias −‖k‖²/√d needs more than 16 bits of resolution).
    """

    name = "euclidean"
    float32_methods = ("scores", "attend")
    bias_mask_max_pairs: int = 256 * 256  # above this Lq·Lk, gradients use the extra-dimension form

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        dots = query @ key.transpose(-2, -1)
        q_sq = query.square().sum(-1, keepdim=True)  # B×H×Lq×1
        k_sq = key.square().sum(-1).unsqueeze(-2)  # B×H×1×Lk
        return (2.0 * dots - q_sq - k_sq) * (1.0 / math.sqrt(self.head_dim))

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """−Σ_c (q_c − k_c)² / √d for every pair, float64, without the ‖q‖² + ‖k‖² − 2q·k expansion."""
        return -((query.unsqueeze(-2) - key.unsqueeze(-3)) ** 2).sum(-1) / math.sqrt(query.shape[-1])

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        inv_sqrt_d = 1.0 / math.sqrt(self.head_dim)
        needs_grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad)
        if cpu_kernels.kernels_for(key) is not None:  # no gradient, float32 CPU: ‖k‖² read off the view in one pass
            k_sq = cpu_kernels.row_sq_norms(key)  # B×H×Lk
        else:
            # ‖k‖² from the norm of a contiguous copy: on CPU, elementwise passes over the head-split view of the
            # projection cost several times the copy (B=256, n=48, H=4, d=32, one thread: 1.1 ms vs 1.6 ms)
            key = key.contiguous()  # and SDPA then reads the copy
            k_sq = torch.linalg.vector_norm(key, dim=-1).square()  # B×H×Lk
        if not needs_grad or query.shape[-2] * key.shape[-2] <= self.bias_mask_max_pairs:
            key_bias = (k_sq * -inv_sqrt_d).unsqueeze(-2)  # B×H×1×Lk
            return sdpa_attend(query, key, value, key_padding_mask, dropout_p, scale=2.0 * inv_sqrt_d,
                               key_bias=key_bias)
        query_aug = torch.cat([query, torch.ones_like(query[..., :1])], dim=-1)
        key_aug = torch.cat([key, (-0.5 * k_sq).unsqueeze(-1)], dim=-1)
        value_aug = F.pad(value, (0, query_aug.shape[-1] - value.shape[-1]))
        out = sdpa_attend(query_aug, key_aug, value_aug, key_padding_mask, dropout_p, scale=2.0 * inv_sqrt_d)
        return out[..., : value.shape[-1]]
