"""Uniform attention: the control that switches content-based attention off."""

from __future__ import annotations

from torch import Tensor

from attnbench.attention.base import ScoreFunction, sdpa_attend


class UniformScore(ScoreFunction):
    """``score(q, k) = 0`` for every pair: each query gives every non-padding key the weight 1/n.

    Attention becomes the masked mean of the values, ``out_i = (1/n) Σ_{j not padding} v_j``, the same for
    every query of a sequence. It is the control of the comparison: a task on which ``scaled_dot`` does not
    beat ``uniform`` cannot tell score functions apart, because what the model learns there does not depend
    on which keys a query selects. The rest of the model (projections, values, MLP, pooling) is unchanged, so
    the difference to any other score function is the content-based weighting alone.

    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk (zeros). No parameters.
    ``scores`` of float16/bfloat16 inputs are float32. The scores are written as 0·q and 0·k, so that
    query and key get (zero) gradients as under every other score function.

    Fast path: SDPA with a zero query, whose logits 0·k are exactly zero, so its softmax is exactly 1/n
    over the non-padding keys (:func:`~attnbench.attention.base.sdpa_attend` masks padding and gives zero
    rows where every key is padding). Without attention dropout every query's row is the same, so one zero
    query is attended and its row broadcast to the Lq queries: O(Lk·d) instead of O(Lq·Lk·d). With dropout
    each query draws its own mask, so all Lq zero queries go through SDPA.
    """

    name = "uniform"
    float32_methods = ("scores",)

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return query[..., :1] * 0.0 + (key[..., :1] * 0.0).transpose(-2, -1)  # B×H×Lq×1 + B×H×1×Lk

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """0 · Σ_c q_c k_c for every pair, float64: zero, as a function of q and k (their gradients exist)."""
        return 0.0 * (query.unsqueeze(-2) * key.unsqueeze(-3)).sum(-1)

    def work(self, batch: int, n_queries: int, n_keys: int, value_dim: int) -> dict[str, int]:
        """Without dropout, one masked mean of the values per sequence and head: 2·B·H·Lk·d_v FLOPs (the
        Lq copies of the row are a broadcast, no work)."""
        return {"flops": 2 * batch * self.n_heads * n_keys * value_dim}

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        if dropout_p > 0.0:
            return sdpa_attend(query * 0.0, key, value, key_padding_mask, dropout_p, scale=1.0)
        one_query = query[..., :1, :] * 0.0  # B×H×1×d
        out = sdpa_attend(one_query, key, value, key_padding_mask, 0.0, scale=1.0)  # B×H×1×d_v
        return out.expand(*out.shape[:-2], query.shape[-2], out.shape[-1])
