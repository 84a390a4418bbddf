"""Lightning callbacks the resume tests add to a `train.py` run through the config (`+callbacks.<name>._target_=...`).

They stop a run at an exact point (so the interrupted state is the same on every machine) or record the
batches a run trains on; none of them touches a random-number generator or the model.

A signal goes to this thread with ``signal.pthread_kill``, which runs the Python handler before it returns:
``os.kill(os.getpid(), ...)`` may deliver it to another of the process's threads, and the handler then runs
at the main thread's next check, a step or more later on a loaded machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import signal as signal_module
import threading
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
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)


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
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)


class SignalAtBatch(pl.Callback):
    """Send this process ``signal`` (``"SIGTERM"``, ``"SIGINT"`` or ``"SIGKILL"``) at training batch ``batch``
    (counted over the whole run from 1), at ``hook``: ``"batch_end"`` (after its optimizer step, if it ends
    one) or ``"before_optimizer_step"`` (inside the step: loss and gradients done, weights not updated yet)."""

    def __init__(self, batch: int, signal: str = "SIGTERM", hook: str = "batch_end") -> None:
        self.batch, self.signal, self.hook = batch, getattr(signal_module, signal), hook
        self._seen = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._seen += 1

    def _maybe_send(self, where: str) -> None:
        if where == self.hook and self._seen == self.batch:
            signal.pthread_kill(threading.get_ident(), self.signal)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self._maybe_send("before_optimizer_step")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._maybe_send("batch_end")
