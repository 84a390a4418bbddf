"""Callbacks that `train.py` subprocesses of tests/test_ddp.py load by `_target_` (every rank instantiates them)."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
import torch


class SaveRankWeights(pl.Callback):
    """At the end of training each process writes its parameters to ``<out>/rank<global rank>.pt``."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().clone() for k, v in pl_module.state_dict().items()}
        torch.save(state, self.out / f"rank{trainer.global_rank}.pt")


class NoGradientSync(pl.Callback):
    """A deliberate bug: DDP's gradient all-reduce switched off (every backward as inside ``no_sync()``)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        trainer.strategy.model.require_backward_grad_sync = False
