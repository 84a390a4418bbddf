"""LightningModule: loss, metrics, optimizer and learning-rate schedule."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MaxMetric, MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnbench.config import check_compile, check_optim
from attnbench.models.model import TransformerClassifier
from attnbench.models.optim import adamw, warmup_decay

log = logging.getLogger(__name__)


class TextClassifierModule(pl.LightningModule):
    """Trains a :class:`~attnbench.models.model.TransformerClassifier` with cross-entropy.

    Built by ``hydra.utils.instantiate(cfg.module, ...)`` (``conf/train.yaml``).

    Args:
        vocab_size, num_classes, max_length, pad_id: from the data module.
        model: keyword arguments of ``TransformerClassifier`` (``conf/model``).
        attention: the score function's config (``conf/attention/<name>.yaml``: ``_target_``, ``name``,
            options), passed unchanged to :func:`attnbench.attention.build_score_function`.
        optimizer: ``optimizer(model) -> torch.optim.Optimizer`` (``cfg.optimizer``, a ``_partial_``
            :func:`attnbench.models.optim.adamw`).
        scheduler: ``scheduler(optimizer, total_steps) -> LRScheduler`` stepped every optimizer step
            (``cfg.scheduler``, a ``_partial_`` :func:`attnbench.models.optim.warmup_decay`).
        optim: instead of ``optimizer`` and ``scheduler`` (scripts, tests): the ``optim.*`` settings; missing
            keys take the defaults of :class:`attnbench.config.OptimConfig`.
        compile: the ``compile.*`` settings (:class:`attnbench.config.CompileConfig`; missing keys take its
            defaults). With ``enabled`` the model is compiled in place (``nn.Module.compile``: parameter names,
            checkpoints and ``state_dict`` stay those of the eager model).

    Logs ``train/loss`` (per step), ``train/acc``, ``val/loss``, ``val/acc``,
    ``val/acc_best``, ``test/loss``, ``test/acc``, ``test/f1_macro`` (per epoch).
    AdamW (Loshchilov & Hutter 2019); weight decay on every parameter with two
    or more dimensions, none on the others (:mod:`attnbench.models.optim`).
    """

    #: every metric name the module logs (``self.log``/``self.log_dict`` below): what a callback's ``monitor`` may
    #: name (``test/*`` only after the fit; :func:`attnbench.run.train.check_monitors`)
    LOGGED_METRICS = ("train/loss", "train/acc", "val/loss", "val/acc", "val/f1_macro", "val/acc_best",
                      "test/loss", "test/acc", "test/f1_macro")

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        max_length: int,
        pad_id: int,
        model: Mapping[str, Any],
        attention: Mapping[str, Any],
        optim: Mapping[str, Any] | None = None,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., Any] | None = None,
        compile: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        model, attention = _plain(model), _plain(attention)
        compile = None if compile is None else _plain(compile)  # plain values in the checkpoint's hyperparameters
        # the run config is the resolved Hydra config; the two factories are code, not hyperparameters
        self.save_hyperparameters(logger=False, ignore=["optimizer", "scheduler"])
        if optimizer is None or scheduler is None:
            settings = check_optim(_plain(optim or {}))  # raises ConfigError naming optim.<key>
            optimizer = optimizer or partial(adamw, lr=settings["lr"], weight_decay=settings["weight_decay"],
                                             betas=settings["betas"], eps=settings["eps"], impl=settings["impl"])
            scheduler = scheduler or partial(warmup_decay, warmup_ratio=settings["warmup_ratio"],
                                             schedule=settings["schedule"], min_lr_ratio=settings["min_lr_ratio"])
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.model = TransformerClassifier(
            vocab_size=vocab_size,
            num_classes=num_classes,
            max_length=max_length,
            score=dict(attention),  # the whole config: attnbench.attention.build_score_function reads it
            pad_id=pad_id,
            **model,
        )
        self.compile_settings = check_compile(compile or {})  # raises ConfigError naming compile.<key>
        if self.compile_settings["enabled"]:
            self.model.compile(dynamic=self.compile_settings["dynamic"], mode=self.compile_settings["mode"])
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
        self.flops_per_batch = None  # lengths vary per batch; FLOPs are measured by `attnbench bench attention`
        self._resumed_acc_best: float | None = None
        # train/acc of the epoch so far (torchmetrics states, update count) at the current batch's start, and the
        # one a mid-epoch checkpoint restored (applied when training starts)
        self._train_acc_at_batch_start: tuple[dict[str, Tensor], int] | None = None
        self._resumed_train_acc: tuple[dict[str, Tensor], int] | None = None

    def forward(self, input_ids: Tensor, padding_mask: Tensor, return_intermediates: bool = False):
        """logits B×C for ``input_ids`` B×L and ``padding_mask`` B×L (True = pad); ``return_intermediates``:
        ``(logits, attention intermediates per layer)`` (:class:`attnbench.models.model.TransformerClassifier`)."""
        if return_intermediates:
            return self.model(input_ids, padding_mask, return_intermediates=True)
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
        scale = self._last_window_scale(batch_idx)
        return loss if scale == 1.0 else loss * scale

    def _last_window_scale(self, batch_idx: int) -> float:
        """k / r for a batch of an epoch's last accumulation window when it holds r < k batches, else 1.

        With ``trainer.accumulate_grad_batches=k`` Lightning divides every batch's loss by k and steps after k
        batches or at the epoch's last batch, so a last window of r batches would step with r/k of its mean
        gradient (pytorch-lightning#19987); scaled by k/r, every step takes its window's mean. The epoch's
        batch count comes from the loader's length: a loader without one is left as Lightning has it.
        """
        trainer = self._trainer
        if trainer is None or not self.automatic_optimization:
            return 1.0
        k, n = trainer.accumulate_grad_batches, trainer.num_training_batches
        if k <= 1 or not math.isfinite(n):
            return 1.0
        left = int(n) - batch_idx // k * k  # batches from this window's first to the epoch's end
        return k / left if 0 < left < k else 1.0

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
        if self._resumed_train_acc is not None:  # a mid-epoch resume: train/acc goes on over the whole epoch
            states, count = self._resumed_train_acc
            for name, value in states.items():
                setattr(self.train_acc, name, value.to(self.device))
            self.train_acc._update_count = count
            self.train_acc._computed = None
            self._resumed_train_acc = None

    def _train_acc_state(self) -> tuple[dict[str, Tensor], int]:
        return ({k: v.detach().clone() for k, v in self.train_acc.metric_state.items()},
                int(self.train_acc._update_count))

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.trainer.world_size == 1:  # for a checkpoint taken inside this step (see on_save_checkpoint)
            self._train_acc_at_batch_start = self._train_acc_state()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Metric states are not part of ``state_dict``: keep ``val/acc_best`` for a resumed run, and in a
        mid-epoch checkpoint of a single-process run the epoch's ``train/acc`` so far (torchmetrics states), so
        that the resumed epoch's ``train/acc`` counts all of its batches. (Under DDP each process holds its own
        counts and rank 0 writes the checkpoint: the resumed epoch's ``train/acc`` counts the batches after it.)"""
        if self.val_acc_best.update_count:  # its updates are synced val/acc values: no collective needed
            checkpoint["val_acc_best"] = float(self.val_acc_best.max_value)
        trainer = self._trainer
        if trainer is None or not trainer.training or trainer.world_size != 1:
            return  # an epoch-end checkpoint (written in validation): the next epoch starts a new train/acc
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        if progress.ready > progress.processed:  # inside a step: Lightning trains this batch again on resume
            if self._train_acc_at_batch_start is not None:
                checkpoint["train_acc_state"] = self._train_acc_at_batch_start
        elif 0 < progress.processed < trainer.num_training_batches:
            checkpoint["train_acc_state"] = self._train_acc_state()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore ``val/acc_best`` and ``train/acc``'s state saved by :meth:`on_save_checkpoint` (applied when
        training starts)."""
        value = checkpoint.get("val_acc_best")
        self._resumed_acc_best = None if value is None else float(value)
        self._resumed_train_acc = checkpoint.get("train_acc_state")

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

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Lightning's gradient clipping (``trainer.gradient_clip_val``), except under a mixed precision without a
        grad scaler (``trainer.precision=bf16-mixed``). There Lightning 2.6's mixed-precision plugin refuses to clip
        for an optimizer that unscales inside its step, the default ``optim.impl=fused``, although no scaler scaled
        the gradients and clipping them is exact: every ``trainer=gpu`` run failed at its first step
        (Lightning-AI/pytorch-lightning#21435, lifted upstream by #21436). Those gradients are clipped by the plain
        precision rule (``Precision.clip_gradients``: by norm or by value). ``16-mixed`` scales the loss, so its
        fused step cannot be clipped: :func:`attnbench.config.check_precision` refuses that setting first."""
        from pytorch_lightning.plugins.precision import MixedPrecision, Precision
        from pytorch_lightning.utilities import GradClipAlgorithmType

        plugin = self.trainer.precision_plugin
        if isinstance(plugin, MixedPrecision) and plugin.scaler is None and gradient_clip_val:
            algorithm = gradient_clip_algorithm or self.trainer.gradient_clip_algorithm or "norm"
            Precision.clip_gradients(plugin, optimizer, gradient_clip_val, GradClipAlgorithmType(algorithm))
            return
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                            gradient_clip_algorithm=gradient_clip_algorithm)

    def configure_optimizers(self) -> dict[str, Any]:
        """The optimizer of ``optimizer`` (AdamW with the weight-decay rule of :mod:`attnbench.models.optim`) and
        the schedule of ``scheduler``, stepped every optimizer step over the run's estimated steps."""
        optimizer = self.optimizer_factory(self.model)
        scheduler = self.scheduler_factory(optimizer, total_steps=int(self.trainer.estimated_stepping_batches))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _plain(node: Any) -> dict[str, Any]:
    """A config node (OmegaConf or a mapping) as a plain, resolved dict."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)
