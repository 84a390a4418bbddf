"""Multi-head attention with a pluggable score function."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attnbench.attention.base import ScoreFunction
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
    -> B×L×d_model``.

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

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        query, key, value = self.project(x)
        dropout_p = self.attn_dropout if self.training else 0.0
        out = self.score_fn.attend(query, key, value, key_padding_mask=key_padding_mask, dropout_p=dropout_p)
        b, _, length, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, length, self.inner_dim))


def attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The :class:`MultiHeadAttention` layers of ``model``, in forward order (``model.modules()`` order)."""
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


@torch.no_grad()
def layer_inputs(model: nn.Module, *inputs: Tensor) -> list[tuple[Tensor, Tensor | None]]:
    """What each attention layer of ``model`` receives when ``model(*inputs)`` runs, in eval mode (no dropout).

    Forward pre-hooks capture each layer's ``x`` (B×L×d_model) and ``key_padding_mask`` (bool B×L or None).
    A ``torch.compile``d model (``nn.Module.compile``) runs eagerly here
    (``torch.compiler.set_stance("force_eager")``): compiled code does not call hooks registered after it was
    compiled. The model's train/eval mode is restored afterwards.

    Returns:
        One ``(x, key_padding_mask)`` per layer, in :func:`attention_layers` order.

    Raises:
        RuntimeError: a layer was not called by ``model(*inputs)``.
    """
    layers = attention_layers(model)
    captured: dict[int, tuple[Tensor, Tensor | None]] = {}
    def capture(i: int):  # the mask given by position or by name (forward(x, key_padding_mask=...))
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["x"]
            captured[i] = (x, args[1] if len(args) > 1 else kwargs.get("key_padding_mask"))
        return hook

    handles = [layer.register_forward_pre_hook(capture(i), with_kwargs=True) for i, layer in enumerate(layers)]
    force_eager = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    was_training = model.training
    model.eval()
    try:
        with force_eager("force_eager") if force_eager is not None else contextlib.nullcontext():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    missing = [i for i in range(len(layers)) if i not in captured]
    if missing:
        raise RuntimeError(f"attention layer(s) {missing} of {type(model).__name__} were not called by its forward")
    return [captured[i] for i in range(len(layers))]
