"""Plain float64 reference implementations of every score function.

Written straight from each formula, pair by pair through broadcasting, with
none of the algebraic shortcuts of the fast paths (no ‖q−k‖² expansion, no
SDPA, no cdist). Tests compare the modules against these.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnbench.attention.base import ScoreFunction


def reference_scores(score_fn: ScoreFunction, query: Tensor, key: Tensor) -> Tensor:
    """Scores of ``score_fn`` for ``query`` (B×H×Lq×d) and ``key`` (B×H×Lk×d), in float64.

    Reads the module's parameters (cast to float64) and recomputes the formula
    of the paper named in its docstring. Returns B×H×Lq×Lk float64.

    Raises:
        NotImplementedError: for a score function without a reference here.
    """
    q = query.double()
    k = key.double()
    d = q.shape[-1]
    q_i = q.unsqueeze(-2)  # B×H×Lq×1×d
    k_j = k.unsqueeze(-3)  # B×H×1×Lk×d
    name = score_fn.name
    if name == "dot":
        return (q_i * k_j).sum(-1)
    if name == "scaled_dot":
        return (q_i * k_j).sum(-1) / math.sqrt(d)
    if name == "general":
        w = score_fn.weight.double()  # H×d×d
        k_w = torch.einsum("hij,bhkj->bhki", w, k)  # W k for every key
        return (q_i * k_w.unsqueeze(-3)).sum(-1)
    if name == "additive":
        wq = score_fn.w_query.double()  # H×d×d_a
        wk = score_fn.w_key.double()
        v = score_fn.v.double()  # H×d_a
        hq = torch.einsum("bhqd,hda->bhqa", q, wq).unsqueeze(-2)
        hk = torch.einsum("bhkd,hda->bhka", k, wk).unsqueeze(-3)
        return (torch.tanh(hq + hk) * v[None, :, None, None, :]).sum(-1)
    if name == "euclidean":
        return -((q_i - k_j) ** 2).sum(-1) / math.sqrt(d)
    if name == "l2":
        return -((q_i - k_j) ** 2).sum(-1).sqrt()
    if name == "cosine":
        tau = score_fn.log_temperature.double().exp()[None, :, None, None]
        eps = score_fn.eps
        q_hat = q / q.norm(dim=-1, keepdim=True).clamp_min(eps)
        k_hat = k / k.norm(dim=-1, keepdim=True).clamp_min(eps)
        return tau * (q_hat.unsqueeze(-2) * k_hat.unsqueeze(-3)).sum(-1)
    raise NotImplementedError(f"no float64 reference for score function {name!r}")


def reference_attention(
    score_fn: ScoreFunction, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None
) -> Tensor:
    """``softmax(scores)·value`` in float64 with padding keys excluded, looping over sequences.

    Args:
        query: B×H×Lq×d; key: B×H×Lk×d; value: B×H×Lk×d_v.
        key_padding_mask: optional bool B×Lk, True = padding.

    Returns:
        B×H×Lq×d_v float64; a sequence whose keys are all padding gets zeros.
    """
    scores = reference_scores(score_fn, query, key)
    v = value.double()
    out = torch.zeros(*scores.shape[:-1], v.shape[-1], dtype=torch.float64)
    for b in range(scores.shape[0]):
        keep = torch.ones(scores.shape[-1], dtype=torch.bool)
        if key_padding_mask is not None:
            keep = ~key_padding_mask[b]
        if not keep.any():
            continue
        weights = torch.softmax(scores[b][..., keep], dim=-1)
        out[b] = weights @ v[b][:, keep]
    return out
