"""``checkpoints/interrupted.ckpt`` when a run is interrupted or crashes: the job of Lightning's
``OnExceptionCheckpoint``, plus what it lacks (a stop within one step of SIGTERM, which signal it was, no
checkpoint that would resume wrongly, the file kept when the run ends).

Why not a subclass of ``OnExceptionCheckpoint``: Lightning 2.6 treats the mere presence of one among the
trainer's callbacks as "``fit(ckpt_path=None)`` means resume from the newest checkpoint"
(``_CheckpointConnector._parse_ckpt_path``): every fresh run then warned twice (``.fit(ckpt_path=None)`` was
called without a model; no last checkpoint available), and a fresh run in a dir holding ``interrupted.ckpt``
would resume from it unasked. A plain callback with the same ``on_exception`` keeps ``ckpt_path`` meaning what
the user wrote.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnbench.errors import NonFiniteLossError, write_error

INTERRUPTED_CKPT = "interrupted.ckpt"


class InterruptCheckpoint(pl.Callback):
    """Saves ``<dirpath>/interrupted.ckpt`` when training stops on an exception (Ctrl-C, SIGTERM, a crash).

    Like ``OnExceptionCheckpoint`` (see the module docstring for why it is not one), and in addition it

    - stops within one optimizer step of a SIGTERM, at the step's end (with ``trainer.accumulate_grad_batches`` > 1,
      at the end of the accumulation window, where Lightning alone would stop after any batch), so that the
      checkpoint resumes exactly, mid-epoch too;
    - records :attr:`signal_name` (``"Ctrl-C (SIGINT)"`` or ``"SIGTERM"``) and :attr:`checkpoint` (the file
      written, or ``None`` with the reason in :attr:`checkpoint_error`);
    - writes nothing while testing (the trained checkpoints exist), after a NaN loss (the last good checkpoint
      is the one to keep), after a failed write (another would fail the same way), or inside validation (a
      checkpoint taken there marks the epoch's validation as done: resuming from it would skip it), or before
      training has (re)started in this process: Lightning restores a checkpoint's weights and callbacks before
      ``on_fit_start`` but its step, loops and optimizer only after it, so a checkpoint taken in between holds
      trained weights at step 0 with a fresh optimizer; as the newest file, ``ckpt_path=last`` would pick it and
      train the whole budget again from there. The checkpoint the run resumed from stays the one to resume from.

    Args:
        dirpath: the run's ``checkpoints/`` folder.
    """

    def __init__(self, dirpath: str | Path) -> None:
        super().__init__()
        self.ckpt_path = Path(dirpath) / INTERRUPTED_CKPT
        self.checkpoint: Path | None = None
        self.checkpoint_error: str | None = None
        self.signal_name: str | None = None
        self.trainer: pl.Trainer | None = None
        self._training = False  # on_train_start seen in this fit: the whole training state is in place
        self._sigterm_deferred = False  # a SIGTERM came inside a gradient-accumulation window: stop at its end

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.trainer = trainer

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._training = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._training = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Stop at the end of an optimizer step only. Inside a gradient-accumulation window the gradients
        # accumulated so far are in no checkpoint, so a resume could not continue exactly: Lightning (2.6) stops
        # after any batch once its SIGTERM flag is set, so the flag is held back until the window's last batch.
        connector = getattr(trainer, "_signal_connector", None)
        should_accumulate = getattr(trainer.fit_loop.epoch_loop, "_should_accumulate", lambda: False)
        if trainer.received_sigterm and connector is not None and should_accumulate():
            connector.received_sigterm = False
            self._sigterm_deferred = True
            return
        if trainer.received_sigterm or self._sigterm_deferred:
            if connector is not None:
                connector.received_sigterm = True
            raise SIGTERMException(128 + signal.SIGTERM)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            self.signal_name = "Ctrl-C (SIGINT)"
        elif isinstance(exception, SIGTERMException) or trainer.received_sigterm:
            self.signal_name = "SIGTERM"
        if trainer.state.fn != TrainerFn.FITTING or isinstance(exception, NonFiniteLossError):
            return
        if write_error(exception) is not None:
            return
        if not self._training:
            self.checkpoint_error = ("interrupted before training started: a checkpoint now would hold step 0 "
                                     "without the optimizer and loop state")
            return
        if trainer.validating or trainer.sanity_checking:
            self.checkpoint_error = "interrupted during validation, whose checkpoint would skip it on resume"
            return
        try:
            trainer.save_checkpoint(self.ckpt_path)
            self.checkpoint = self.ckpt_path
        except Exception as err:  # noqa: BLE001 - report it in the message instead
            self.checkpoint_error = f"{type(err).__name__}: {err}"
