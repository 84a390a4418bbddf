"""The optimiser settings and the weight-decay rule: one definition for the module, the config checks and the YAML.

:class:`OptimSettings` holds the defaults of ``optim.*`` (``conf/train.yaml``
repeats them and a test keeps the two equal) and validates a config's values;
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

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from attnbench.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where it is used: the config checks run before it loads (fast --help/errors)
    import torch
    from torch import nn

SCHEDULES = ("cosine", "linear", "constant")


@dataclass(frozen=True)
class OptimSettings:
    """AdamW (Loshchilov & Hutter 2019) and learning-rate schedule settings: the defaults of ``optim.*``.

    Attributes:
        lr: peak learning rate (after warm-up), > 0.
        weight_decay: decoupled weight decay of the decayed group (see :func:`decay_parameter_groups`), >= 0.
        betas: AdamW's (β1, β2), each in [0, 1).
        eps: AdamW's ε added to the second-moment root, > 0.
        warmup_ratio: fraction of all optimizer steps of linear warm-up, in [0, 1].
        schedule: ``cosine``, ``linear`` or ``constant`` decay after warm-up.
        min_lr_ratio: learning rate at the end of the decay, as a fraction of ``lr``, in [0, 1].
    """

    lr: float = 1.0e-3
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1.0e-8
    warmup_ratio: float = 0.06
    schedule: str = "cosine"
    min_lr_ratio: float = 0.0

    @classmethod
    def from_config(cls, optim: Any) -> OptimSettings:
        """The settings of an ``optim`` mapping (missing keys take the defaults), validated.

        Raises:
            ConfigError: an unknown key, or a value out of range; the message names ``optim.<key>``.
        """
        if hasattr(optim, "_metadata"):  # an OmegaConf DictConfig: plain values (ListConfig is not a list)
            from omegaconf import OmegaConf

            optim = OmegaConf.to_container(optim, resolve=True)
        optim = dict(optim or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(optim) - names)
        if unknown:
            raise ConfigError(f"unknown optimizer setting(s) {', '.join('optim.' + k for k in unknown)}; "
                              f"optim has: {', '.join(sorted(names))}")

        def number(value: Any) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool)

        values = {**asdict(cls()), **optim}
        betas = values["betas"]
        valid_betas = isinstance(betas, list | tuple) and len(betas) == 2 and all(number(b) and 0 <= b < 1 for b in betas)
        if not valid_betas:
            raise ConfigError(f"optim.betas must be two numbers in [0, 1), e.g. [0.9, 0.98], got {betas!r}")
        for key, low, high in (("warmup_ratio", 0.0, 1.0), ("min_lr_ratio", 0.0, 1.0)):
            value = values[key]
            if not (number(value) and low <= value <= high):
                raise ConfigError(f"optim.{key} must be a number in [{low:g}, {high:g}], got {value!r}")
        for key, strictly in (("lr", True), ("weight_decay", False), ("eps", True)):
            value = values[key]
            if not (number(value) and (value > 0 if strictly else value >= 0)):
                raise ConfigError(f"optim.{key} must be a number {'>' if strictly else '>='} 0, got {value!r}")
        if values["schedule"] not in SCHEDULES:
            raise ConfigError(f"optim.schedule must be 'cosine', 'linear' or 'constant', got {values['schedule']!r}")
        return cls(lr=float(values["lr"]), weight_decay=float(values["weight_decay"]),
                   betas=(float(betas[0]), float(betas[1])), eps=float(values["eps"]),
                   warmup_ratio=float(values["warmup_ratio"]), schedule=str(values["schedule"]),
                   min_lr_ratio=float(values["min_lr_ratio"]))

    def as_config(self) -> dict[str, Any]:
        """The settings as the ``optim`` mapping of ``conf/train.yaml`` (``betas`` a list)."""
        return {**asdict(self), "betas": list(self.betas)}


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


def build_adamw(model: nn.Module, settings: OptimSettings) -> torch.optim.AdamW:
    """AdamW over ``model``'s trainable parameters: ``settings.weight_decay`` on the decayed group, 0 on the other.

    Group 0 is the decayed one, group 1 the other (the order ``LearningRateMonitor`` names them in).
    """
    import torch

    decay, no_decay = decay_parameter_groups(model)
    return torch.optim.AdamW(
        [
            {"params": list(decay.values()), "weight_decay": settings.weight_decay},
            {"params": list(no_decay.values()), "weight_decay": 0.0},
        ],
        lr=settings.lr,
        betas=settings.betas,
        eps=settings.eps,
    )


# Precisions whose weights (and so AdamW's moments) are float16: AdamW's eps 1e-8 rounds to 0 there and the
# second moments of small gradients underflow to 0, so the first update divides 0 by 0 (NaN at step 1).
_FLOAT16_WEIGHTS = {"16-true", "transformer-engine-float16"}


def check_precision(precision: Any) -> None:
    """Refuse ``trainer.precision`` values whose weights are float16 (AdamW cannot train them).

    Raises:
        ConfigError: naming ``trainer.precision`` and the settings that work.
    """
    if str(precision) in _FLOAT16_WEIGHTS:
        raise ConfigError(
            f"trainer.precision={precision} keeps the weights and AdamW's moments in float16, where AdamW's eps "
            f"(optim.eps) rounds to 0 and small gradients' second moments underflow: the first update is NaN. "
            "Use trainer.precision=16-mixed (float16 compute, float32 weights), bf16-mixed or bf16-true."
        )
