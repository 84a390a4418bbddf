"""Additive (MLP) score (Bahdanau et al. 2015; Luong's "concat")."""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
from torch import Tensor, nn

from attnbench.attention import cpu_kernels
from attnbench.attention.base import ScoreFunction, blocked_attend, float32_when_low_precision, validated_chunking


def additive_pair_scores(q_proj: Tensor, k_proj: Tensor, v: Tensor) -> Tensor:
    """vᵀtanh(q_proj_i + k_proj_j) for every pair.

    Args:
        q_proj: B×H×Lq×d_a (W_q q); k_proj: B×H×Lk×d_a (W_k k); v: H×d_a.

    Returns:
        B×H×Lq×Lk scores. Eagerly this builds the B×H×Lq×Lk×d_a hidden tensor;
        under ``torch.compile`` the add, tanh and reduction fuse into one loop.
    """
    hidden = torch.tanh(q_proj.unsqueeze(-2) + k_proj.unsqueeze(-3))  # B×H×Lq×Lk×d_a
    return (hidden @ v[None, :, None, :, None]).squeeze(-1)


@functools.cache
def _compiled() -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """``additive_pair_scores`` under ``torch.compile``, built once per process."""
    return torch.compile(additive_pair_scores, dynamic=True)


@functools.cache
def _triton_available() -> bool:
    """Whether Inductor can generate GPU kernels here (Triton importable); CPU runs never ask."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


class AdditiveScore(ScoreFunction):
    """``score(q, k) = vᵀ tanh(W_q q + W_k k)``: a one-hidden-layer MLP per pair.

    Bahdanau, Cho, Bengio 2015, *Neural Machine Translation by Jointly Learning
    to Align and Translate*, appendix A.1.2 (``v_aᵀ tanh(W_a s + U_a h)``);
    Luong et al. 2015 call it "concat".

    Args:
        n_heads: H.
        head_dim: d.
        hidden_dim: d_a, the MLP's hidden size; ``None`` means d_a = head_dim.
        chunk_size: queries per block in :meth:`attend`; ``None`` picks the
            largest block whose B×H×block×Lk×d_a hidden tensor fits in
            ``chunk_bytes``.
        chunk_bytes: memory budget of one block's hidden tensor (bytes) when
            ``chunk_size`` is ``None``; default 64 MiB.
        compile: score pairs with ``torch.compile`` (Inductor fuses add, tanh
            and the reduction with v, so the hidden tensor is never stored);
            the first call compiles (tens of seconds on a CPU).

    Parameters (per head): ``w_query`` H×d×d_a, ``w_key`` H×d×d_a, ``v`` H×d_a.
    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk.

    Cost: the projections are GEMMs, but ``tanh`` of the pairwise sum is
    elementwise work on a B×H×Lq×Lk×d_a tensor — it cannot be folded into a
    matrix multiply, which is the point the product measures.

    Fast paths (:meth:`attend`), after the projections (two GEMMs):

    - CPU, float32 or float64, ``dropout_p == 0``, plain eager execution, the
      extension built (:func:`~attnbench.attention.cpu_kernels.additive_attention`):
      one fused kernel, forward and backward, streams each query row over
      its keys (one tanh per pair and hidden unit, the row's softmax and
      weighted sum), and the backward recomputes tanh; memory
      O(B·H·L·(d_a + d)). This is the default on CPU in training and
      inference (``use_cpu_kernel = False`` on an instance turns it off).
    - Everywhere else (dropout in training — the kernel does not draw a
      dropout mask —, ``compile``, ``torch.compile``/``torch.func``, the
      extension not built or ``ATTNBENCH_CPU_KERNELS=0``): queries are
      processed in blocks (:func:`~attnbench.attention.base.blocked_attend`):
      each block's hidden tensor is recomputed in the backward instead of
      stored, so memory is O(B·H·block·Lk·d_a) in the forward and the
      backward, for about one extra forward of time; when everything fits in
      one block, no recomputation. ``chunk_size``/``chunk_bytes`` set the block.
    - CUDA with Triton installed: the pair scores run under ``torch.compile``
      (Inductor fuses the add, tanh and reduction with v into one generated
      kernel, so the hidden tensor is never stored) in one block; without
      Triton, the blocked path. Not measured: neither its speed nor what the
      compiled backward keeps in memory has been checked on a GPU.

    Precision: on CPU, float16/bfloat16 inputs (or autocast) run the fast path
    (the fused kernel when it applies) in float32 and return ``value``'s dtype: a 16-bit pre-activation
    W_q q + W_k k of magnitude ~12 is rounded by up to 2^-5 (bfloat16), and
    tanh' = 1 − tanh² at the rounded point puts dq off by up to 11% (input scale
    20, head_dim 256). On CUDA the 16-bit path is kept (it halves the memory of the
    B×H×block×Lk×d_a hidden tensor, the cost this score function measures);
    its logits are bounded, |vᵀtanh(·)| ≤ ‖v‖₁, so the forward keeps the
    softmax's resolution.
    """

    name = "additive"
    # the fused CPU kernel where it applies; False forces the blocked path (benchmarks compare the two)
    use_cpu_kernel: bool = True

    def __init__(
        self,
        n_heads: int,
        head_dim: int,
        hidden_dim: int | None = None,
        chunk_size: int | None = None,
        chunk_bytes: int = 64 * 2**20,
        compile: bool = False,
    ) -> None:
        super().__init__(n_heads, head_dim)
        hidden_dim = head_dim if hidden_dim is None else hidden_dim
        if isinstance(hidden_dim, bool) or not isinstance(hidden_dim, int) or hidden_dim < 1:
            raise ValueError(f"additive: attention.hidden_dim must be an integer >= 1 (or null for head_dim), "
                             f"got {hidden_dim!r}")
        if not isinstance(compile, bool):
            raise ValueError(f"additive: attention.compile must be true or false, got {compile!r}")
        self.hidden_dim = hidden_dim
        self.chunk_size, self.chunk_bytes = validated_chunking("additive", chunk_size, chunk_bytes)
        self.compile = compile
        bound = 1.0 / math.sqrt(head_dim)
        self.w_query = nn.Parameter(torch.empty(n_heads, head_dim, hidden_dim).uniform_(-bound, bound))
        self.w_key = nn.Parameter(torch.empty(n_heads, head_dim, hidden_dim).uniform_(-bound, bound))
        v_bound = 1.0 / math.sqrt(hidden_dim)
        self.v = nn.Parameter(torch.empty(n_heads, hidden_dim).uniform_(-v_bound, v_bound))

    def _uses_compile(self, device: torch.device) -> bool:
        """Pair scores through ``torch.compile``: asked for (``compile``), or on CUDA where Triton is installed."""
        return self.compile or (device.type == "cuda" and _triton_available())

    def _pair_scores(self, q_proj: Tensor, k_proj: Tensor) -> Tensor:
        """vᵀtanh(q_proj_i + k_proj_j): B×H×Lq×d_a, B×H×Lk×d_a -> B×H×Lq×Lk."""
        pair_scores = _compiled() if self._uses_compile(q_proj.device) else additive_pair_scores
        return pair_scores(q_proj, k_proj, self.v.to(q_proj.dtype))

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return self._pair_scores(query @ self.w_query, key @ self.w_key)

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """Σ_a v_a tanh((W_q q)_a + (W_k k)_a) for every pair, float64 (Bahdanau et al. 2015, A.1.2)."""
        hq = torch.einsum("bhqd,hda->bhqa", query, self.w_query.double()).unsqueeze(-2)
        hk = torch.einsum("bhkd,hda->bhka", key, self.w_key.double()).unsqueeze(-3)
        return (torch.tanh(hq + hk) * self.v.double()[None, :, None, None, :]).sum(-1)

    def bytes_per_query(self, batch: int, n_keys: int, element_size: int) -> int:
        """One query row of the hidden tensor: B×H×1×Lk×d_a elements."""
        return batch * self.n_heads * n_keys * self.hidden_dim * element_size

    def work(self, batch: int, n_queries: int, n_keys: int, value_dim: int) -> dict[str, int]:
        """One tanh per (query, key, hidden unit), B·H·Lq·Lk·d_a, no matrix unit computes; FLOPs: the
        projections 2·B·H·(Lq + Lk)·d·d_a, the pre-activation's add and vᵀtanh's multiply-add
        3·B·H·Lq·Lk·d_a, and PV 2·B·H·Lq·Lk·d_v."""
        pairs = batch * self.n_heads * n_queries * n_keys
        projections = 2 * batch * self.n_heads * (n_queries + n_keys) * self.head_dim * self.hidden_dim
        return {"flops": projections + pairs * (3 * self.hidden_dim + 2 * value_dim),
                "tanh": pairs * self.hidden_dim}

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        # CPU: 16-bit inputs (or autocast) are computed in float32; on CUDA the 16-bit fast path is kept
        method = self._attend_float32 if query.device.type == "cpu" else self._attend
        return method(query, key, value, key_padding_mask, dropout_p)

    def _attend(self, query, key, value, key_padding_mask, dropout_p):  # attend() passes every argument
        # one GEMM per head over all B·L rows (a broadcast `@` runs B·H small ones and sums B of them for the
        # weights' gradient: 3.6x slower forward + backward at B=64, L=12, d=d_a=32)
        q_proj = torch.einsum("bhld,hda->bhla", query, self.w_query.to(query.dtype))  # B×H×Lq×d_a
        k_proj = torch.einsum("bhld,hda->bhla", key, self.w_key.to(key.dtype))  # B×H×Lk×d_a
        if dropout_p == 0.0 and not self.compile and self.use_cpu_kernel:
            score_vector = self.v.to(q_proj.dtype)
            if cpu_kernels.additive_kernels_for(q_proj, k_proj, score_vector, value) is not None:
                return cpu_kernels.additive_attention(q_proj, k_proj, score_vector, value, key_padding_mask)
        n_queries = query.shape[-2]
        # compiled: nothing of size Lq×Lk×d_a is stored, so one block
        block = n_queries if self._uses_compile(query.device) else self.block_size(
            query.shape[0], n_queries, key.shape[-2], query.element_size()
        )
        return blocked_attend(self._pair_scores, q_proj, k_proj, value, key_padding_mask, dropout_p, block)

    _attend_float32 = float32_when_low_precision(_attend)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, hidden_dim={self.hidden_dim}, chunk_size={self.chunk_size}, compile={self.compile}"
