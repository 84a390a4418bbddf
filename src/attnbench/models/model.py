"""Encoder-only Transformer text classifier with a pluggable attention score."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attnbench.attention import MultiHeadAttention
from attnbench.config import POOLINGS


class TransformerBlock(nn.Module):
    """Pre-LayerNorm Transformer encoder block (Xiong et al. 2020 placement).

    ``x + Attn(LN(x))`` then ``x + MLP(LN(x))``, with dropout on each residual
    branch. Shapes: x B×L×d_model, key_padding_mask bool B×L (True = pad).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        score: str | Mapping[str, Any],
        score_options: dict[str, Any] | None,
        dropout: float,
        attn_dropout: float,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, score, score_options, attn_dropout=attn_dropout,
                                       head_dim=head_dim)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None, return_intermediates: bool = False):
        """``x`` B×L×d_model -> B×L×d_model; with ``return_intermediates``, ``(x, AttentionIntermediates)``."""
        if return_intermediates:
            attended, intermediates = self.attn(self.attn_norm(x), key_padding_mask, return_intermediates=True)
        else:
            attended = self.attn(self.attn_norm(x), key_padding_mask)
        x = x + self.dropout(attended)
        x = x + self.dropout(self.mlp(self.mlp_norm(x)))
        return (x, intermediates) if return_intermediates else x


class TransformerClassifier(nn.Module):
    """Token + learned position embeddings, N pre-LN blocks, pooling, linear head.

    Args:
        vocab_size: tokenizer vocabulary size.
        num_classes: number of labels C.
        max_length: longest input in tokens (sizes the position table).
        score: the attention score function's config (``conf/attention/<name>.yaml``) or a
            registered name (see :func:`attnbench.attention.build_score_function`).
        score_options: further options of that score function.
        d_model: model width.
        n_heads: attention heads; must divide ``d_model`` unless ``head_dim`` is set.
        head_dim: per-head query/key/value size d_k; ``None`` = d_model / n_heads.
        n_layers: number of blocks.
        d_ff: MLP hidden width.
        dropout: dropout on embeddings, residual branches and before the head.
        attn_dropout: dropout on attention weights.
        pooling: ``"mean"`` (masked mean over non-padding tokens), ``"max"``
            (masked max over them), ``"cls"`` (a learned [CLS] vector
            prepended to every sequence), or ``"last"`` (the last non-padding
            token, e.g. a query placed at the end; padding is on the right).
        pad_id: token id used for padding (its embedding row stays zero).

    Shapes: ``forward(input_ids: B×L long, padding_mask: bool B×L, True = pad)
    -> logits B×C``. Padding tokens never influence a sequence's logits. ``return_intermediates=True``
    also returns each layer's attention logits and weights
    (:class:`attnbench.attention.multihead.AttentionIntermediates`), the logits unchanged.

    Raises:
        ValueError: for non-positive sizes, an unknown pooling, or dropout
            outside [0, 1).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_length: int,
        score: str | Mapping[str, Any],
        score_options: dict[str, Any] | None = None,
        d_model: int = 128,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 512,
        dropout: float = 0.1,
        attn_dropout: float = 0.0,
        pooling: str = "mean",
        pad_id: int = 0,
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        sizes = dict(vocab_size=vocab_size, num_classes=num_classes, max_length=max_length, d_model=d_model,
                     n_heads=n_heads, n_layers=n_layers, d_ff=d_ff)
        bad = {k: v for k, v in sizes.items() if int(v) < 1}
        if bad:
            raise ValueError(f"model sizes must be >= 1, got {bad}; fix these in conf/model or on the command line.")
        for name, p in (("dropout", dropout), ("attn_dropout", attn_dropout)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"model.{name} must be in [0, 1), got {p}")
        if pooling not in POOLINGS:
            raise ValueError(f"model.pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        self.pooling = pooling
        self.pad_id = pad_id
        n_positions = max_length + (1 if pooling == "cls" else 0)
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.position_embedding = nn.Embedding(n_positions, d_model)
        self.cls_embedding = nn.Parameter(torch.zeros(1, 1, d_model)) if pooling == "cls" else None
        self.embed_dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, d_ff, score, score_options, dropout, attn_dropout, head_dim)
            for _ in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(d_model, num_classes))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2/BERT-style init: N(0, 0.02) for embeddings and linear weights, zero biases."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()
        if self.cls_embedding is not None:
            nn.init.normal_(self.cls_embedding, std=0.02)

    def forward(self, input_ids: Tensor, padding_mask: Tensor, return_intermediates: bool = False):
        """Logits B×C; with ``return_intermediates``, ``(logits, [AttentionIntermediates per layer])``."""
        b, length = input_ids.shape
        x = self.token_embedding(input_ids)
        if self.cls_embedding is not None:
            x = torch.cat([self.cls_embedding.expand(b, -1, -1), x], dim=1)
            padding_mask = torch.cat([padding_mask.new_zeros(b, 1), padding_mask], dim=1)
            length += 1
        if length > self.position_embedding.num_embeddings:
            raise ValueError(
                f"input of {length} tokens is longer than the model's position table "
                f"({self.position_embedding.num_embeddings}); raise data.max_length."
            )
        x = self.embed_dropout(x + self.position_embedding.weight[:length])
        intermediates = []
        for block in self.blocks:
            if return_intermediates:
                x, layer_intermediates = block(x, padding_mask, return_intermediates=True)
                intermediates.append(layer_intermediates)
            else:
                x = block(x, padding_mask)
        x = self.final_norm(x)
        if self.cls_embedding is not None:
            pooled = x[:, 0]
        elif self.pooling == "last":  # right padding: the last real token is at length - 1
            last = (~padding_mask).sum(1).clamp_min(1) - 1
            pooled = x[torch.arange(b, device=x.device), last]
        elif self.pooling == "max":
            pooled = x.masked_fill(padding_mask.unsqueeze(-1), float("-inf")).amax(1)
            pooled = pooled.masked_fill(padding_mask.all(1, keepdim=True), 0.0)  # an all-padding row
        else:
            keep = (~padding_mask).unsqueeze(-1).to(x.dtype)
            pooled = (x * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        logits = self.head(pooled)
        return (logits, intermediates) if return_intermediates else logits
