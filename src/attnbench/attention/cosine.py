"""Cosine-similarity score with a learned temperature (QK-norm)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnbench.attention import cpu_kernels
from attnbench.attention.base import LOW_PRECISION, ScoreFunction, sdpa_attend


class CosineScore(ScoreFunction):
    """``score(q, k) = τ · cos(q, k) = τ · q̂ᵀk̂`` with a learned τ > 0 per head.

    Henry et al. 2020, *Query-Key Normalization for Transformers*: queries and
    keys are L2-normalised, so raw similarities lie in [−1, 1] and a learned
    scale τ (kept positive as exp(log τ)) sets how peaked the softmax can be.

    Args:
        n_heads: H.
        head_dim: d.
        init_temperature: initial τ; ``None`` means √d, which matches the
            logit range of ``scaled_dot`` for unit-variance q, k at init.
        eps: lower bound of the norms before dividing (as ``F.normalize``). A zero vector's unit vector is 0,
            with a zero gradient (``F.normalize``'s is 1/eps, beyond float16's range).

    Norm floor (:meth:`norm_floor`): the gradient of x/‖x‖ is about 1/‖x‖, times τ and the gradient of the
    scores; it must fit the dtype it is returned in. A query or key of norm below max(eps, 1/√max) of its dtype
    (float16: 2^-8 ≈ 3.9e-3, leaving a factor 256 for τ and the scores' gradient; bfloat16, float32, float64: eps)
    counts as zero: unit vector 0, zero gradient. The dtype is the parameters' (``16-true`` precision) or the
    inputs', whichever is narrower; in float16 the forward differs only for such vectors.

    Parameters: ``log_temperature`` H (τ = exp(log_temperature)).
    Shapes: query B×H×Lq×d, key B×H×Lk×d -> scores B×H×Lq×Lk.
    Fast path: SDPA on normalised q, k with τ folded into q's normalising
    factor (one elementwise pass per tensor; at inference on CPU one fused
    read-normalise-write kernel per tensor, :mod:`attnbench.attention.cpu_kernels`). For float16/bfloat16 inputs (or
    autocast) the normalisation and τ run in float32 (τ's gradient is a sum
    over every query; in bfloat16 it was off by 5–6%), and so do ``scores``.
    """

    name = "cosine"
    float32_methods = ("scores",)

    def __init__(
        self, n_heads: int, head_dim: int, init_temperature: float | None = None, eps: float = 1e-6
    ) -> None:
        super().__init__(n_heads, head_dim)
        tau0 = math.sqrt(head_dim) if init_temperature is None else float(init_temperature)
        if not tau0 > 0:
            raise ValueError(f"cosine: attention.init_temperature must be > 0 (or null for √head_dim), got {tau0}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < math.inf:
            raise ValueError(f"cosine: attention.eps must be a number > 0 (the norm floor; default 1e-6), got {eps!r}")
        self.eps = float(eps)
        self.log_temperature = nn.Parameter(torch.full((n_heads,), math.log(tau0)))

    def temperature(self) -> Tensor:
        """τ per head, shape H."""
        return self.log_temperature.exp()

    def norm_floor(self, *dtypes: torch.dtype) -> float:
        """The norm below which a query or key counts as zero: max(eps, 1/√finfo.max) over the dtype of
        ``log_temperature`` and ``dtypes`` (float16: 2^-8; wider dtypes: eps)."""
        return max(self.eps, *(torch.finfo(d).max ** -0.5 for d in (self.log_temperature.dtype, *dtypes)))

    def _unit(self, x: Tensor, scale: Tensor | None = None, floor: float | None = None) -> Tensor:
        """x / max(‖x‖, eps) along the last dim, times ``scale`` (H) if given; 0 for a vector of norm 0 or below
        ``floor`` (default :meth:`norm_floor` of ``x``'s dtype).

        The norm runs on a contiguous copy of ``x``: the heads the attention
        layer hands over are strided views of one projection, and on CPU the
        norm and the broadcast multiply over such a view cost several times the
        same passes over contiguous memory (B=256, n=48, H=4, d=32, one thread:
        2.1 ms for the view, 1.25 ms for copy + norm + in-place scaling).
        Without gradients, a float32 CPU ``x`` goes to the fused kernel
        :func:`attnbench.attention.cpu_kernels.unit_rows` (one read of the view,
        one write); otherwise the copy is scaled in place (one allocation per call).
        """
        floor = self.norm_floor(x.dtype) if floor is None else floor
        if floor == self.eps and cpu_kernels.kernels_for(x, scale) is not None:  # no gradient needed (τ included)
            return cpu_kernels.unit_rows(x, scale, self.eps)
        if torch.is_grad_enabled() and (x.requires_grad or (scale is not None and scale.requires_grad)):
            x = x.contiguous()
            norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
            # a zero vector has no direction: its unit vector is 0 (as x / eps is) with a zero gradient, not
            # x / eps's 1/eps, which a float16 gradient cannot hold (1e6 > 65504); so is one below the floor
            zero = norm < floor if floor > self.eps else norm == 0
            factor = norm.clamp_min(self.eps).reciprocal().masked_fill(zero, 0.0)
            return x * (factor if scale is None else factor * scale[:, None, None])
        x = x.clone(memory_format=torch.contiguous_format)  # our own buffer, scaled in place below
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        factor = norm.clamp_min(self.eps).reciprocal_()  # B×H×L×1
        if floor > self.eps:
            factor.masked_fill_(norm < floor, 0.0)
        if scale is not None:
            factor.mul_(scale[:, None, None])
        return x.mul_(factor)

    def scores(self, query: Tensor, key: Tensor) -> Tensor:
        return (self._unit(query, self.temperature().to(query.dtype), self.norm_floor(query.dtype))
                @ self._unit(key, None, self.norm_floor(key.dtype)).transpose(-2, -1))

    def reference_scores(self, query: Tensor, key: Tensor) -> Tensor:
        """τ · Σ_c q̂_c k̂_c for every pair, float64, with x̂ = x / max(‖x‖, eps) (Henry et al. 2020), and x̂ = 0
        with a zero gradient for a zero vector x (which has no direction) or one below :meth:`norm_floor` of the
        parameters' dtype."""
        tau = self.log_temperature.double().exp()[None, :, None, None]
        floor = self.norm_floor()

        def unit(x: Tensor) -> Tensor:
            norm = x.norm(dim=-1, keepdim=True)
            zero = norm < floor if floor > self.eps else norm == 0
            return torch.where(zero, 0.0, x / norm.clamp_min(self.eps))

        return tau * (unit(query).unsqueeze(-2) * unit(key).unsqueeze(-3)).sum(-1)

    def attend(self, query, key, value, key_padding_mask=None, dropout_p=0.0):
        device = query.device.type
        if torch.is_autocast_enabled(device) or any(t.dtype in LOW_PRECISION for t in (query, key, value)):
            # the normalisation and τ (and τ's gradient, a sum over B×L) in float32; on CPU the unit vectors stay
            # float32 (sdpa_attend computes there in float32), on CUDA they go to the fused 16-bit kernels
            with torch.autocast(device, enabled=False):
                q_unit = self._unit(query.float(), self.temperature().float(), self.norm_floor(query.dtype))
                k_unit = self._unit(key.float(), None, self.norm_floor(key.dtype))
            if device != "cpu":
                q_unit, k_unit = q_unit.to(value.dtype), k_unit.to(value.dtype)
            return sdpa_attend(q_unit, k_unit, value, key_padding_mask, dropout_p, scale=1.0)
        return sdpa_attend(self._unit(query, self.temperature()), self._unit(key), value, key_padding_mask,
                           dropout_p, scale=1.0)
