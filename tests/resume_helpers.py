"""Lightning callbacks the resume tests add to a `train.py` run through the config (`+callbacks.<name>._target_=...`).

They stop a run at an exact point (so the interrupted state is the same on every machine) or record the
batches a run trains on; none of them touches a random-number generator or the model.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytorch_lightning as pl


class KillAtEpochStart(pl.Callback):
    """SIGKILL this process when epoch ``epoch`` starts: the previous epoch's checkpoints are on disk, nothing
    else is written (a hard kill, like a node failure)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)


class CtrlCAtStep(pl.Callback):
    """Send this process SIGINT (what Ctrl-C sends) once optimizer step ``step`` is done."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


class RecordBatches(pl.Callback):
    """Append ``{"epoch", "step", "batch_idx", "sha1"}`` of every training batch (its token ids) to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        digest = hashlib.sha1(batch["input_ids"].cpu().numpy().tobytes()).hexdigest()
        with self.path.open("a") as f:
            f.write(json.dumps({"epoch": trainer.current_epoch, "step": trainer.global_step,
                                "batch_idx": batch_idx, "sha1": digest}) + "\n")


class CtrlCAtFitStart(pl.Callback):
    """Send this process SIGINT when the fit starts (after a checkpoint was restored, before training starts)."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        os.kill(os.getpid(), signal.SIGINT)
