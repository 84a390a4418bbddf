"""LightningModule: loss, metrics, optimizer and learning-rate schedule."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MaxMetric, MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnbench.model import TransformerClassifier
from attnbench.optim import OptimSettings, build_adamw

log = logging.getLogger(__name__)


def warmup_decay_lambda(warmup_steps: int, total_steps: int, schedule: str, min_lr_ratio: float):
    """Multiplier of the base learning rate at optimizer step ``s`` (for ``LambdaLR``).

    Linear warm-up from 0 over ``warmup_steps``, then ``cosine`` or ``linear``
    decay to ``min_lr_ratio`` at ``total_steps``, or ``constant``.

    Raises:
        ValueError: for an unknown ``schedule``.
    """
    if schedule not in ("cosine", "linear", "constant"):
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


class TextClassifierModule(pl.LightningModule):
    """Trains a :class:`~attnbench.model.TransformerClassifier` with cross-entropy.

    Args:
        vocab_size, num_classes, max_length, pad_id: from the data module.
        model: keyword arguments of ``TransformerClassifier`` (``conf/model``).
        attention: the score function's config (``conf/attention/<name>.yaml``:
            ``_target_``, ``name``, options), see :func:`attnbench.attention.build_score_function`.
        optim: ``lr``, ``weight_decay``, ``betas``, ``eps``, ``warmup_ratio``
            (fraction of all optimizer steps), ``schedule``, ``min_lr_ratio``;
            missing keys take the defaults of :class:`attnbench.optim.OptimSettings`.

    Logs ``train/loss`` (per step), ``train/acc``, ``val/loss``, ``val/acc``,
    ``val/acc_best``, ``test/loss``, ``test/acc``, ``test/f1_macro`` (per epoch).
    AdamW (Loshchilov & Hutter 2019); weight decay on every parameter with two
    or more dimensions, none on the others (:mod:`attnbench.optim`).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_length: int,
        pad_id: int,
        model: dict[str, Any],
        attention: dict[str, Any],
        optim: dict[str, Any],
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)  # the run config is the resolved Hydra config
        self.model = TransformerClassifier(
            vocab_size=vocab_size,
            num_classes=num_classes,
            max_length=max_length,
            score=dict(attention),  # the whole config: attnbench.attention.build_score_function reads it
            pad_id=pad_id,
            **model,
        )
        self.optim_settings = OptimSettings.from_config(optim)  # raises ConfigError naming optim.<key>
        metrics = MetricCollection(
            {
                "acc": MulticlassAccuracy(num_classes, average="micro"),
                "f1_macro": MulticlassF1Score(num_classes, average="macro"),
            }
        )
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = metrics.clone(prefix="test/")
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        self.val_acc_best = MaxMetric()
        self.flops_per_batch = None  # lengths vary per batch; FLOPs are measured by scripts/bench_attention.py
        self._resumed_acc_best: float | None = None

    def forward(self, input_ids: Tensor, padding_mask: Tensor) -> Tensor:
        """logits B×C for ``input_ids`` B×L and ``padding_mask`` B×L (True = pad)."""
        return self.model(input_ids, padding_mask)

    def _step(self, batch: dict[str, Any]) -> tuple[Tensor, Tensor]:
        logits = self(batch["input_ids"], batch["padding_mask"])
        return F.cross_entropy(logits, batch["labels"]), logits

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        loss, logits = self._step(batch)
        self.train_acc(logits.argmax(-1), batch["labels"])
        bs = batch["labels"].shape[0]
        # sync_dist: under DDP the logged loss is the mean over processes (one all-reduce of a scalar per step)
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True, batch_size=bs, sync_dist=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, batch_size=bs)
        return loss

    def on_train_start(self) -> None:
        # Lightning logs per-step series (train/loss, the learning rate, throughput) every log_every_n_steps
        # optimizer steps: a run with fewer steps would log none. Log at its last step instead.
        total = self.trainer.estimated_stepping_batches
        every = self.trainer.log_every_n_steps
        if every and math.isfinite(total) and 0 < int(total) < every:
            log.info("The run has %d optimizer steps, fewer than trainer.log_every_n_steps=%d: per-step metrics "
                     "are logged every %d steps.", int(total), every, int(total))
            self.trainer.log_every_n_steps = int(total)
        self.val_acc_best.reset()  # drop the sanity-check validation
        if self._resumed_acc_best is not None:  # a resumed run keeps the best of the epochs before it
            self.val_acc_best.update(torch.tensor(self._resumed_acc_best, device=self.device))
            self._resumed_acc_best = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Metric states are not part of ``state_dict``: keep ``val/acc_best`` for a resumed run."""
        if self.val_acc_best.update_count:  # its updates are synced val/acc values: no collective needed
            checkpoint["val_acc_best"] = float(self.val_acc_best.max_value)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore ``val/acc_best`` saved by :meth:`on_save_checkpoint` (applied when training starts)."""
        value = checkpoint.get("val_acc_best")
        self._resumed_acc_best = None if value is None else float(value)

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss, logits = self._step(batch)
        self.val_loss.update(loss, weight=batch["labels"].shape[0])
        self.val_metrics.update(logits.argmax(-1), batch["labels"])

    def on_validation_epoch_end(self) -> None:
        values = self.val_metrics.compute()
        self.val_metrics.reset()
        self.log("val/loss", self.val_loss.compute(), prog_bar=False)
        self.val_loss.reset()
        self.log("val/acc", values["val/acc"], prog_bar=True)
        self.log("val/f1_macro", values["val/f1_macro"])
        self.val_acc_best.update(values["val/acc"])
        best = self.val_acc_best.compute()
        self.log("val/acc_best", best)
        if not self.trainer.sanity_checking:
            log.info(
                "epoch %d step %d: val/acc %.4f (best %.4f), val/loss %.4f",
                self.current_epoch, self.global_step, float(values["val/acc"]), float(best),
                float(self.trainer.callback_metrics.get("val/loss", float("nan"))),
            )

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss, logits = self._step(batch)
        self.test_loss.update(loss, weight=batch["labels"].shape[0])
        self.test_metrics.update(logits.argmax(-1), batch["labels"])

    def on_test_epoch_end(self) -> None:
        self.log_dict(self.test_metrics.compute())
        self.test_metrics.reset()
        self.log("test/loss", self.test_loss.compute())
        self.test_loss.reset()

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW with the weight-decay rule of :mod:`attnbench.optim`, and the warm-up/decay schedule per step."""
        settings = self.optim_settings
        optimizer = build_adamw(self.model, settings)
        total = int(self.trainer.estimated_stepping_batches)
        warmup = max(1, int(settings.warmup_ratio * total))
        fn = warmup_decay_lambda(warmup, total, settings.schedule, settings.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
