"""Stop on a NaN or infinite loss before it reaches the weights or a checkpoint (no Lightning callback does)."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch

from attnbench.errors import NonFiniteLossError


def last_checkpoint(trainer: pl.Trainer | None) -> str | None:
    """The newest checkpoint file of ``trainer``'s ``ModelCheckpoint`` (its last, else its best), or ``None``."""
    cb = trainer.checkpoint_callback if trainer is not None else None
    for attr in ("last_model_path", "best_model_path"):
        path = getattr(cb, attr, "") if cb is not None else ""
        if path and Path(path).is_file():
            return str(path)
    return None


class NonFiniteLossGuard(pl.Callback):
    """Raises :class:`~attnbench.errors.NonFiniteLossError` on a NaN/inf ``train/loss`` (before its backward
    pass, so the weights stay as they were) or ``val/loss`` (before ``ModelCheckpoint`` could save such weights).

    Args:
        lr: the run's ``optim.lr``, named in the message (the first knob to lower).
    """

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        """Raise before a NaN/inf loss produces gradients."""
        if not bool(torch.isfinite(loss.detach()).all()):
            raise NonFiniteLossError(self._message(trainer, float(loss.detach().float().mean())))

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Raise on a NaN/inf ``val/loss`` (finite-loss updates can still leave weights that overflow)."""
        value = trainer.callback_metrics.get("val/loss")
        if trainer.sanity_checking or value is None or bool(torch.isfinite(value).all()):
            return
        raise NonFiniteLossError(self._message(trainer, float(value), "val/loss"))

    def _message(self, trainer: pl.Trainer, value: float, key: str = "train/loss") -> str:
        last = last_checkpoint(trainer)
        kept = f"the last good checkpoint is kept: {last}" if last else "no checkpoint had been written yet"
        when = "before that update" if key == "train/loss" else "before checkpointing these weights"
        return (
            f"{key} became {value} at step {trainer.global_step} (epoch {trainer.current_epoch}); training "
            f"stopped {when}, {kept}. Lower optim.lr (now {self.lr}), raise "
            "optim.warmup_ratio, keep trainer.gradient_clip_val > 0, or use trainer.precision=32-true."
        )
