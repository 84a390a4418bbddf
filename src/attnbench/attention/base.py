"""The score-function contract shared by every attention variant.

A *score function* turns queries and keys into unnormalised attention logits::

    scores(query: B×H×Lq×d, key: B×H×Lk×d) -> B×H×Lq×Lk

and :meth:`ScoreFunction.attend` turns them into the attention output
``softmax(scores)·value`` (B×H×Lq×d_v), with padding masked out. Subclasses
only have to define :meth:`ScoreFunction.scores`; they may override
:meth:`ScoreFunction.attend` with a faster path that never materialises more
than it must, as long as it equals the definition.

Mask convention (the ``nn.MultiheadAttention`` ``key_padding_mask`` one):
``key_padding_mask`` is a boolean B×Lk tensor with **True = padding**. SDPA's
boolean ``attn_mask`` means the opposite (True = attend); :func:`sdpa_attend`
is the one place that converts. A query whose keys are all padding yields a
zero output row, never NaN.

Low precision: a score function whose logits pass through a 16-bit
intermediate that carries their magnitude (‖k‖² of ``euclidean``, qW of
``general``, the distances of ``l2``) lists ``scores``/``attend`` in
``float32_methods`` and computes in float32 when its inputs are float16/bfloat16 or autocast is on
(:func:`float32_when_low_precision`): a
float16 ‖k‖² overflows above 65504, and a bfloat16 logit of magnitude 256 has
a resolution of 2, far coarser than the softmax needs. ``cosine`` normalises
and applies τ in float32. The rest depends on the device: on CPU,
:func:`sdpa_attend` (``dot``, ``scaled_dot``, ``cosine``) and ``additive``
compute in float32 too (CPU SDPA's 16-bit math keeps logits and softmax in 16
bits); on CUDA they keep their 16-bit fast paths (the fused SDPA kernels
accumulate QKᵀ and the softmax in float32; ``additive``'s logits are bounded,
|vᵀtanh(·)| ≤ ‖v‖₁). ``scores`` returns float32 logits for 16-bit inputs for
every score function but ``additive``. ``tests/test_attention.py`` checks
every score function, forward and backward, in float16 and bfloat16 (true and
autocast), head_dim 16/32/64, against float64 (CPU only).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


LOW_PRECISION = (torch.float16, torch.bfloat16)


def float32_when_low_precision(method: Callable) -> Callable:  # pragma: no mutate block
    """Wrap a score function's ``scores`` or ``attend``: 16-bit work is done in float32 (:func:`call_in_float32`).

    Applied by :class:`ScoreFunction` to the own ``scores``/``attend`` of a
    subclass that lists them in ``float32_methods``. Not written as a
    decorator, and the work is done by :func:`call_in_float32` at call time:
    mutation testing (mutmut 3) skips decorated methods and cannot reach code
    that runs only at class creation.
    """

    @functools.wraps(method)
    def wrapper(self: ScoreFunction, query: Tensor, key: Tensor, *args, **kwargs):
        return call_in_float32(method, self, query, key, *args, **kwargs)

    wrapper.computes_in_float32 = True  # type: ignore[attr-defined]  # ScoreFunction wraps a method once
    return wrapper


def call_in_float32(method: Callable, score_fn: ScoreFunction, query: Tensor, key: Tensor, *args, **kwargs):
    """``method(score_fn, query, key, *args, **kwargs)``, on float32 copies when any input is 16-bit.

    When any tensor argument is float16/bfloat16, or autocast is enabled on its
    device, the method runs on float32 copies of the tensors with autocast
    disabled (so autocast cannot cast its matmuls back to 16 bits). ``attend``
    returns the output in ``value``'s dtype; ``scores`` returns float32 logits
    (they stay in a precision that keeps the softmax's resolution). Parameters
    read inside the method must be cast with ``.to(query.dtype)`` (a no-op in
    float32). Float32 and float64 calls go straight through.
    """
    value = args[0] if args else kwargs.get("value")  # attend's value; scores has none
    value = value if isinstance(value, Tensor) else None
    low = query.dtype in LOW_PRECISION or key.dtype in LOW_PRECISION or (
        value is not None and value.dtype in LOW_PRECISION)
    if not low and not torch.is_autocast_enabled(query.device.type):  # float32/float64: straight through
        return method(score_fn, query, key, *args, **kwargs)

    def up(a):
        return a.float() if isinstance(a, Tensor) and a.dtype in LOW_PRECISION else a

    with torch.autocast(query.device.type, enabled=False):
        out = method(score_fn, up(query), up(key), *map(up, args), **{k: up(a) for k, a in kwargs.items()})
    return out.to(value.dtype) if value is not None and value.dtype in LOW_PRECISION else out


DEFAULT_BLOCK_BYTES = 64 * 2**20  # 64 MiB: memory budget of one query block when a score function sets none

# name -> class of every ScoreFunction subclass that sets ``name`` (filled by ScoreFunction.__init_subclass__;
# read through attnbench.attention.registry)
_REGISTRY: dict[str, type["ScoreFunction"]] = {}


class ScoreFunction(nn.Module):
    """Base class: one query–key score function for multi-head attention.

    Args:
        n_heads: number of heads H; parameters a score function owns are per head.
        head_dim: size d of each head's query and key vectors.

    The contract a subclass fills in (one module plus one ``conf/attention/<name>.yaml``
    whose ``_target_`` names the class; nothing else is edited):

    - ``name`` (class attribute): the ``attention=<name>`` choice. Setting it
      registers the class (:meth:`__init_subclass__`); a class outside this
      package is registered when its module is imported, i.e. when a YAML's
      ``_target_`` names it. A second class under a taken name is refused.
    - :meth:`scores` (required): logits B×H×Lq×Lk.
    - :meth:`attend` (optional): a faster ``softmax(scores)·value`` that equals
      the definition.
    - :meth:`reference_scores` (for the tests): the published formula in
      float64, pair by pair, none of the fast path's shortcuts.
    - memory-bounded blocking: :meth:`block_size` says how many queries fit a
      block; it counts :meth:`bytes_per_query` (one row of scores by default;
      override it when a block materialises more, as ``additive``'s hidden
      tensor) against ``chunk_bytes`` and the caller's budget, unless
      ``chunk_size`` fixes it.
    - ``float32_methods`` (class attribute, default ``()``): the names of the
      class's own methods among ``scores``/``attend`` that run on float32
      copies of float16/bfloat16 inputs with autocast off
      (:func:`float32_when_low_precision`, applied at class creation), e.g.
      for logits that pass through a 16-bit intermediate carrying their
      magnitude.
    """

    name: str = ""
    float32_methods: tuple[str, ...] = ()
    chunk_size: int | None = None  # queries per block; None = as many as fit the byte budget
    chunk_bytes: int | None = None  # byte budget of one block; None = the caller's (or DEFAULT_BLOCK_BYTES)

    def __init_subclass__(cls, **kwargs) -> None:  # pragma: no mutate block  (runs at class creation)
        """Wrap the subclass's own ``scores``/``attend`` for low precision if asked, and register its ``name``.

        Raises:
            ValueError: ``name`` is already registered to a different class.
        """
        super().__init_subclass__(**kwargs)
        for method in cls.float32_methods:
            own = cls.__dict__.get(method)
            if own is not None and not getattr(own, "computes_in_float32", False):
                setattr(cls, method, float32_when_low_precision(own))
        name = cls.__dict__.get("name")
        if not name:
            return
        taken = _REGISTRY.get(name)
        same_class = taken is not None and (taken.__module__, taken.__qualname__) == (cls.__module__, cls.__qualname__)
        if taken is not None and not same_class:  # the same class again (a module re-imported) replaces itself
            raise ValueError(
                f"score function {name!r} is already registered to {taken.__module__}.{taken.__qualname__}; "
                f"give {cls.__module__}.{cls.__qualname__} another name"
            )
        _REGISTRY[name] = cls

    def __init__(self, n_heads: int, head_dim: int) -> None:
        super().__init__()
        if n_heads < 1 or head_dim < 1:
            raise ValueError(
                f"{type(self).__name__}: n_heads and head_dim must be >= 1, got n_heads={n_heads}, "
                f"head_dim={head_dim}; change model.n_heads / model.d_model."
            )
        self.n_heads = n_heads
        self.head_dim = head_dim

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        """Attention logits.

        Args:
            query: B×H×Lq×d.
            key: B×H×Lk×d.

        Returns:
            scores: B×H×Lq×Lk, before masking and softmax.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement scores(query, key) -> B×H×Lq×Lk")

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """The score function's formula in float64, written straight from its source, for the tests.

        Args:
            query: B×H×Lq×d float64.
            key: B×H×Lk×d float64.

        Returns:
            B×H×Lq×Lk float64, computed pair by pair through broadcasting with the
            module's parameters cast to float64 (no algebraic shortcut of the fast path).

        Raises:
            NotImplementedError: the subclass has no reference formula.
        """
        raise NotImplementedError(f"no float64 reference formula for {type(self).__qualname__}")

    def bytes_per_query(self, batch: int, n_keys: int, element_size: int) -> int:
        """Bytes one query row of a block materialises: by default its B×H×1×Lk scores.

        Args:
            batch: B. n_keys: Lk. element_size: bytes per element of the inputs.
        """
        return batch * self.n_heads * n_keys * element_size

    def work(self, batch: int, n_queries: int, n_keys: int, value_dim: int) -> dict[str, int]:
        """The operations one forward :meth:`attend` cannot avoid, its roofline's numerator.

        ``"flops"``: multiply-adds counted as 2 FLOPs, work a matrix unit can do; any other key names a
        ``torch`` elementwise function (``"tanh"``, ``"sqrt"``) and counts its calls, work at that function's
        vectorised rate. By default a score that reduces to matrix multiplies: QKᵀ and PV,
        2·B·H·Lq·Lk·(d + d_v) FLOPs (softmax and O(L·d) work left out, Williams et al. 2009's roofline).

        Args:
            batch: B. n_queries: Lq. n_keys: Lk. value_dim: d_v.
        """
        return {"flops": 2 * batch * self.n_heads * n_queries * n_keys * (self.head_dim + value_dim)}

    def block_size(
        self, batch: int, n_queries: int, n_keys: int, element_size: int, budget_bytes: int | None = None
    ) -> int:
        """Queries per block so that one block's working set stays within the memory budget.

        ``chunk_size`` when set; otherwise the most queries whose
        :meth:`bytes_per_query` fit the budget: the tighter of the score
        function's own ``chunk_bytes`` and the caller's ``budget_bytes`` (e.g.
        the attention diagnostics' ``block_bytes``), whichever are set, else
        ``DEFAULT_BLOCK_BYTES``. Always in [1, n_queries].

        Args:
            batch: B. n_queries: Lq. n_keys: Lk. element_size: bytes per element.
            budget_bytes: the caller's budget (bytes), or ``None``.
        """
        budgets = [b for b in (self.chunk_bytes, budget_bytes) if b is not None]
        budget = min(budgets) if budgets else DEFAULT_BLOCK_BYTES
        return query_block_size(self.chunk_size, budget, n_queries, self.bytes_per_query(batch, n_keys, element_size))

    def attend(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        dropout_p: float = 0.0,
    ) -> Tensor:
        """Attention output ``softmax(scores(query, key))·value`` (the definition).

        Args:
            query: B×H×Lq×d.
            key: B×H×Lk×d.
            value: B×H×Lk×d_v.
            key_padding_mask: optional bool B×Lk, True marks padding keys.
            dropout_p: dropout probability applied to the attention weights.

        Returns:
            B×H×Lq×d_v; rows whose keys are all padding are zero.
        """
        weights = masked_softmax(self.scores(query, key), key_padding_mask)  # float32 for 16-bit inputs
        if dropout_p > 0.0:
            weights = F.dropout(weights, p=dropout_p, training=True)
        return (weights @ value.to(weights.dtype)).to(value.dtype)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, head_dim={self.head_dim}"


def masked_softmax(scores: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """Softmax over keys with padding excluded.

    Args:
        scores: B×H×Lq×Lk logits.
        key_padding_mask: optional bool B×Lk, True = padding.

    Returns:
        B×H×Lq×Lk attention weights; each row sums to 1, or is all zeros when
        every key of that sequence is padding (no NaN in values or gradients).
    """
    if key_padding_mask is None:
        return torch.softmax(scores, dim=-1)
    pad = key_padding_mask[:, None, None, :]
    all_pad = key_padding_mask.all(dim=-1)[:, None, None, None]
    # Unmask fully padded rows before the softmax (so it never sees a row of
    # -inf, which gives NaN), then zero them afterwards.
    weights = torch.softmax(scores.masked_fill(pad & ~all_pad, float("-inf")), dim=-1)
    return weights.masked_fill(all_pad, 0.0)


def validated_chunking(score: str, chunk_size: int | None, chunk_bytes: int) -> tuple[int | None, int]:
    """``(chunk_size, chunk_bytes)`` of a blocked fast path, as ints.

    Raises:
        ValueError: ``chunk_size`` < 1 (``None`` means automatic) or ``chunk_bytes`` < 1.
    """
    if chunk_size is not None and int(chunk_size) < 1:
        raise ValueError(f"{score}: attention.chunk_size must be >= 1 (or null for automatic), got {chunk_size}")
    if int(chunk_bytes) < 1:
        raise ValueError(f"{score}: attention.chunk_bytes must be >= 1, got {chunk_bytes}")
    return (None if chunk_size is None else int(chunk_size)), int(chunk_bytes)


def query_block_size(chunk_size: int | None, chunk_bytes: int, n_queries: int, bytes_per_query: int) -> int:
    """Queries per block: ``chunk_size``, or the most whose ``bytes_per_query`` fit in ``chunk_bytes``.

    Always in [1, n_queries]; ``bytes_per_query`` is what one query row of the
    block materialises (bytes).
    """
    if chunk_size is not None:
        return max(1, min(chunk_size, n_queries))
    return max(1, min(n_queries, chunk_bytes // max(1, bytes_per_query)))


def blocked_attend(
    pair_scores: Callable[[Tensor, Tensor], Tensor],
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor | None,
    dropout_p: float,
    block: int,
) -> Tensor:
    """``softmax(pair_scores(query, key))·value`` computed ``block`` queries at a time.

    Softmax runs over keys, so each query block is exact on its own. When
    gradients are needed, each block runs under ``torch.utils.checkpoint``:
    its intermediates are recomputed in the backward instead of stored, so
    memory is that of one block in the forward and the backward (about one
    extra forward of time); the dropout mask is replayed exactly.

    Args:
        pair_scores: ``(query_block B×H×b×d_q, key B×H×Lk×d_k) -> B×H×b×Lk``.
        query: B×H×Lq×d_q; key: B×H×Lk×d_k; value: B×H×Lk×d_v.
        key_padding_mask: optional bool B×Lk, True = padding.
        dropout_p: attention-weight dropout probability.
        block: queries per block (>= 1); ``block >= Lq`` means one plain pass.

    Returns:
        B×H×Lq×d_v.
    """

    def attend_block(q_block: Tensor, key: Tensor, value: Tensor) -> Tensor:
        weights = masked_softmax(pair_scores(q_block, key), key_padding_mask)
        if dropout_p > 0.0:
            weights = F.dropout(weights, p=dropout_p, training=True)
        return weights @ value

    n_queries = query.shape[-2]
    if block >= n_queries:
        return attend_block(query, key, value)
    recompute = torch.is_grad_enabled()
    outs = []
    for start in range(0, n_queries, block):
        q_block = query[..., start : start + block, :]
        if recompute:
            outs.append(checkpoint(attend_block, q_block, key, value, use_reentrant=False))
        else:
            outs.append(attend_block(q_block, key, value))
    return torch.cat(outs, dim=-2)


def sdpa_attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor | None,
    dropout_p: float,
    scale: float,
    key_bias: Tensor | None = None,
) -> Tensor:
    """``softmax(scale·query·keyᵀ + key_bias)·value`` through ``F.scaled_dot_product_attention``.

    The one place where the True = padding convention is converted to SDPA's
    ``attn_mask`` (boolean True = attend, or an additive float mask with −inf
    on padding when a ``key_bias`` is given).

    Args:
        query: B×H×Lq×d.
        key: B×H×Lk×d.
        value: B×H×Lk×d_v.
        key_padding_mask: optional bool B×Lk, True = padding.
        dropout_p: attention-weight dropout probability.
        scale: multiplier of the dot products (passed explicitly to SDPA).
        key_bias: optional float B×H×1×Lk added to every query's logits
            (differentiable), e.g. −‖k‖² for the ``euclidean`` score.

    Returns:
        B×H×Lq×d_v; zero rows where all keys are padding.

    Precision: on CPU, float16/bfloat16 inputs (or CPU autocast) are computed
    on float32 copies with autocast off, and the output is cast back to
    ``value``'s dtype when that is 16-bit (float32 otherwise): CPU SDPA runs its
    16-bit math with 16-bit logits and softmax, and a bfloat16 logit of
    magnitude 128 has a resolution of 1 (bfloat16 q/k gradients of ``dot`` were
    off by 30–40% at head_dim 64, input scale 4). On CUDA the 16-bit inputs go
    to the fused flash/memory-efficient kernels unchanged; those accumulate QKᵀ
    and the online softmax in float32 (Dao et al. 2022, *FlashAttention*, §3.1;
    not measured on a GPU here). Float32 and float64 inputs (without CPU
    autocast) take the same path as before.
    """
    if query.device.type == "cpu" and (
        torch.is_autocast_enabled("cpu") or any(t.dtype in LOW_PRECISION for t in (query, key, value))
    ):
        def up(t: Tensor | None) -> Tensor | None:
            return t.float() if t is not None and t.dtype in LOW_PRECISION else t

        with torch.autocast("cpu", enabled=False):
            out = sdpa_attend(up(query), up(key), up(value), key_padding_mask, dropout_p, scale, up(key_bias))
        return out.to(value.dtype) if value.dtype in LOW_PRECISION else out
    if key_padding_mask is None:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=key_bias, dropout_p=dropout_p, scale=scale)
    all_pad = key_padding_mask.all(dim=-1)
    pad = (key_padding_mask & ~all_pad[:, None])[:, None, None, :]
    attn_mask = ~pad if key_bias is None else key_bias.masked_fill(pad, float("-inf"))
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, scale=scale)
    if all_pad.device.type == "cpu" and not torch.compiler.is_compiling() and not bool(all_pad.any()):
        # nothing to zero (the usual case): skip a full pass over the output (no device sync on CPU). Under
        # torch.compile the test would break the graph; there the fill is fused into the graph instead.
        return out
    return out.masked_fill(all_pad[:, None, None, None], 0.0)
