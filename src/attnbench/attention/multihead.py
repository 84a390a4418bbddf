"""Multi-head attention with a pluggable score function."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from attnbench.attention.base import ScoreFunction, masked_softmax
from attnbench.attention.registry import build_score_function


class MultiHeadAttention(nn.Module):
    """Project, split heads, attend with any :class:`ScoreFunction`, merge heads.

    Vaswani et al. 2017, §3.2.2, with the query–key score replaced by the
    chosen score function. This module never branches on the score
    function's name: everything variant-specific lives in the score function.

    Args:
        d_model: model width.
        n_heads: number of heads H.
        head_dim: size d of each head's query/key/value; ``None`` means
            d_model / n_heads (the usual tie, which then needs ``d_model``
            divisible by ``n_heads``). Setting it decouples d_k from the model
            width (the projections map d_model -> H·head_dim -> d_model), which
            is how Vaswani et al. 2017 Table 3 (B) varies d_k.
        score: the score function's config, as :func:`~attnbench.attention.registry.build_score_function`
            takes it: the ``conf/attention/<name>.yaml`` mapping (``_target_``, ``name``, options), or a
            registered name (``dot``, ``additive``, ...).
        score_options: further keyword options of that score function, merged over ``score``'s.
        attn_dropout: dropout probability on the attention weights.
        bias: whether the q/k/v/output projections have biases.

    Shapes: ``forward(x: B×L×d_model, key_padding_mask: bool B×L, True = pad)
    -> B×L×d_model``; ``forward(..., return_intermediates=True)`` also returns the layer's logits and
    weights (:class:`AttentionIntermediates`).

    Raises:
        ValueError: if ``head_dim`` is ``None`` and ``d_model`` is not divisible
            by ``n_heads``, or ``head_dim`` < 1.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        score: str | Mapping[str, Any],
        score_options: dict[str, Any] | None = None,
        attn_dropout: float = 0.0,
        bias: bool = True,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        if head_dim is None:
            if d_model % n_heads != 0:
                raise ValueError(
                    f"d_model={d_model} is not divisible by n_heads={n_heads}; "
                    "set model.d_model to a multiple of model.n_heads (or set model.head_dim)."
                )
            head_dim = d_model // n_heads
        if int(head_dim) < 1:
            raise ValueError(f"model.head_dim must be >= 1 (or null for d_model / n_heads), got {head_dim}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.head_dim = int(head_dim)
        self.inner_dim = n_heads * self.head_dim
        self.attn_dropout = attn_dropout
        self.qkv_proj = nn.Linear(d_model, 3 * self.inner_dim, bias=bias)
        self.out_proj = nn.Linear(self.inner_dim, d_model, bias=bias)
        self.score_fn: ScoreFunction = build_score_function(
            score, n_heads=n_heads, head_dim=self.head_dim, **(score_options or {})
        )

    def split_heads(self, x: Tensor) -> Tensor:
        """B×L×d_model -> B×H×L×head_dim."""
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.head_dim).transpose(1, 2)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Query, key and value heads of ``x`` (B×L×d_model): three B×H×L×head_dim tensors."""
        query, key, value = self.qkv_proj(x).chunk(3, dim=-1)
        return self.split_heads(query), self.split_heads(key), self.split_heads(value)

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, return_intermediates: bool = False
    ) -> Tensor | tuple[Tensor, AttentionIntermediates]:
        """Attention output of ``x``, and on request the logits and weights behind it.

        Args:
            x: B×L×d_model.
            key_padding_mask: optional bool B×L, True = padding.
            return_intermediates: also return an :class:`AttentionIntermediates` record.

        Returns:
            B×L×d_model; with ``return_intermediates``, ``(output, intermediates)``. The output comes from the
            score function's fast path (``score_fn.attend``) either way, so asking for the intermediates
            does not change a bit of it.
        """
        query, key, value = self.project(x)
        dropout_p = self.attn_dropout if self.training else 0.0
        out = self.score_fn.attend(query, key, value, key_padding_mask=key_padding_mask, dropout_p=dropout_p)
        b, _, length, _ = out.shape
        out = self.out_proj(out.transpose(1, 2).reshape(b, length, self.inner_dim))
        if not return_intermediates:
            return out
        return out, self.intermediates(query, key, key_padding_mask)

    def intermediates(self, query: Tensor, key: Tensor, key_padding_mask: Tensor | None) -> AttentionIntermediates:
        """Logits and weights of ``query`` (B×H×Lq×d) against ``key`` (B×H×Lk×d) by the score function's definition.

        The logits are ``score_fn.scores``, computed in query blocks of ``score_fn.block_size`` rows (its own
        memory budget, e.g. ``additive``'s hidden tensor), with ``-inf`` at padding keys; the weights are their
        :func:`~attnbench.attention.base.masked_softmax` (before attention dropout; zero rows for sequences that
        are all padding). ``score_fn``'s tests compare its fast path with these definitions.
        """
        b, _, n_queries, _ = query.shape
        rows = self.score_fn.block_size(b, n_queries, key.shape[-2], query.element_size())
        scores = torch.cat([self.score_fn.scores(query[:, :, start:start + rows], key)
                            for start in range(0, n_queries, rows)], dim=-2)
        weights = masked_softmax(scores, key_padding_mask)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        return AttentionIntermediates(logits=scores, weights=weights, key_padding_mask=key_padding_mask)


class AttentionIntermediates(NamedTuple):
    """What one attention layer computed on one batch, handed back on request (``return_intermediates=True``).

    Attributes:
        logits: B×H×Lq×Lk scores before the softmax (``score_fn.scores``; float32 for 16-bit inputs), ``-inf``
            at padding keys.
        weights: B×H×Lq×Lk softmax of the logits over the non-padding keys, before attention dropout; each
            row sums to 1, or is zero where every key of the sequence is padding.
        key_padding_mask: the layer's bool B×Lk mask (True = padding), or ``None``; with ``pooling=cls`` it
            includes the prepended [CLS] position.
    """

    logits: Tensor
    weights: Tensor
    key_padding_mask: Tensor | None


def attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The :class:`MultiHeadAttention` layers of ``model``, in forward order (``model.modules()`` order)."""
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


@torch.no_grad()
def attention_intermediates(model: nn.Module, *inputs: Tensor) -> list[AttentionIntermediates]:
    """Every attention layer's :class:`AttentionIntermediates` for ``model(*inputs)``, in eval mode (no dropout).

    ``model`` takes ``return_intermediates=True`` and then returns ``(output, [one record per layer])``, as
    :class:`attnbench.models.model.TransformerClassifier` does. A ``torch.compile``d model
    (``nn.Module.compile``) runs eagerly here (``torch.compiler.set_stance("force_eager")``), so the request
    costs no recompilation. The model's train/eval mode is restored afterwards.

    Returns:
        One record per attention layer, in forward order.
    """
    force_eager = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    was_training = model.training
    model.eval()
    try:
        with force_eager("force_eager") if force_eager is not None else contextlib.nullcontext():
            _, intermediates = model(*inputs, return_intermediates=True)
    finally:
        model.train(was_training)
    return list(intermediates)
