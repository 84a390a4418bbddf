"""The optimizer and its learning-rate schedule (``_partial_`` targets of ``conf/train.yaml``), and the weight-decay rule.

The defaults and ranges of ``optim.*`` are those of :class:`attnbench.config.OptimConfig`;
:func:`decay_parameter_groups` splits a model's parameters by one rule for
every score function.

Weight-decay rule (as in nanoGPT, Karpathy 2023, ``configure_optimizers``):
**a parameter with two or more dimensions is decayed, any other is not.**
Matrices that multiply activations (the q/k/v/output projections, the MLP,
the classifier head, the token and position embeddings, ``general``'s W,
``additive``'s W_q, W_k and its per-head vectors v (H×d_a)) are decayed;
biases, LayerNorm gains and biases, and per-head scalars such as ``cosine``'s
temperature (shape H) are not, since shrinking a gain or an offset towards 0
changes what the layer computes rather than regularising it. The rule reads
only the parameter's shape, so a new score function's parameters fall into
a group without a list to update.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnbench.config import SCHEDULES

if TYPE_CHECKING:  # torch is imported where it is used: the config checks run before it loads (fast --help/errors)
    import torch
    from torch import nn

def is_decayed(param: nn.Parameter) -> bool:
    """The weight-decay rule: True for a parameter with two or more dimensions (see the module docstring)."""
    return param.dim() >= 2


def decay_parameter_groups(model: nn.Module) -> tuple[dict[str, nn.Parameter], dict[str, nn.Parameter]]:
    """``(decayed, not_decayed)``: the trainable parameters of ``model`` by name, split by :func:`is_decayed`.

    Every trainable parameter is in exactly one of the two (a shared parameter once).
    """
    decay: dict[str, nn.Parameter] = {}
    no_decay: dict[str, nn.Parameter] = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            (decay if is_decayed(param) else no_decay)[name] = param
    return decay, no_decay


def adamw(model: nn.Module, lr: float, weight_decay: float, betas: Sequence[float], eps: float,
          impl: str = "fused") -> torch.optim.AdamW:
    """AdamW over ``model``'s trainable parameters: ``weight_decay`` on the decayed group, 0 on the other.

    Group 0 is the decayed one, group 1 the other (the order ``LearningRateMonitor`` names them in).
    The ``_target_`` of ``optimizer`` in ``conf/train.yaml`` (``_partial_``: the module gives ``model``);
    the values are ``optim.*`` (:class:`attnbench.config.OptimConfig`: defaults and ranges).
    ``impl`` selects torch's implementation of the same update: ``for_loop`` (``foreach=False``),
    ``foreach`` (``foreach=True``) or ``fused`` (``fused=True``); they agree up to float rounding.

    Raises:
        ConfigError: ``impl`` is none of the three (names ``optim.impl``).
    """
    import torch

    from attnbench.config import OPTIM_IMPLS, range_message
    from attnbench.errors import ConfigError

    if impl not in OPTIM_IMPLS:
        raise ConfigError(range_message("optim.impl", impl))
    flags = {"for_loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[impl]

    decay, no_decay = decay_parameter_groups(model)
    return torch.optim.AdamW(
        [
            {"params": list(decay.values()), "weight_decay": float(weight_decay)},
            {"params": list(no_decay.values()), "weight_decay": 0.0},
        ],
        lr=float(lr),
        betas=(float(betas[0]), float(betas[1])),
        eps=float(eps),
        **flags,
    )


def warmup_decay_lambda(warmup_steps: int, total_steps: int, schedule: str, min_lr_ratio: float):
    """Multiplier of the base learning rate at optimizer step ``s`` (for ``LambdaLR``).

    Linear warm-up from 0 over ``warmup_steps``, then ``cosine`` or ``linear``
    decay to ``min_lr_ratio`` at ``total_steps``, or ``constant``.

    Raises:
        ValueError: for an unknown ``schedule``.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"optim.schedule must be 'cosine', 'linear' or 'constant', got {schedule!r}")

    def fn(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        decay = 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress
        return min_lr_ratio + (1.0 - min_lr_ratio) * decay

    return fn


def warmup_decay(optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float, schedule: str,
                 min_lr_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    """The per-step schedule: linear warm-up over ``max(1, int(warmup_ratio * total_steps))`` optimizer steps,
    then :func:`warmup_decay_lambda`'s decay. The ``_target_`` of ``scheduler`` in ``conf/train.yaml``
    (``_partial_``: the module gives ``optimizer`` and ``total_steps``, the run's optimizer steps)."""
    import torch

    warmup = max(1, int(warmup_ratio * total_steps))
    fn = warmup_decay_lambda(warmup, total_steps, schedule, float(min_lr_ratio))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
