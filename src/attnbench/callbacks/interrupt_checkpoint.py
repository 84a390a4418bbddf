"""``checkpoints/interrupted.ckpt`` when a run is interrupted or crashes: Lightning's ``OnExceptionCheckpoint``,
plus what it lacks (a stop within one step of SIGTERM, which signal it was, no checkpoint that would resume
wrongly, and the file kept after a later successful run)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import OnExceptionCheckpoint
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnbench.errors import NonFiniteLossError, write_error

INTERRUPTED_CKPT = "interrupted.ckpt"


class InterruptCheckpoint(OnExceptionCheckpoint):
    """Saves ``<dirpath>/interrupted.ckpt`` when training stops on an exception (Ctrl-C, SIGTERM, a crash).

    Unlike ``OnExceptionCheckpoint`` it

    - stops within one step of a SIGTERM (Lightning's handler only sets a flag its loop checks at epoch ends);
    - records :attr:`signal_name` (``"Ctrl-C (SIGINT)"`` or ``"SIGTERM"``) and :attr:`checkpoint` (the file
      written, or ``None`` with the reason in :attr:`checkpoint_error`);
    - writes nothing while testing (the trained checkpoints exist), after a NaN loss (the last good checkpoint
      is the one to keep), after a failed write (another would fail the same way), or inside validation (a
      checkpoint taken there marks the epoch's validation as done: resuming from it would skip it);
    - keeps the file at teardown (it is the resume point the interrupt message names).

    Args:
        dirpath: the run's ``checkpoints/`` folder.
    """

    def __init__(self, dirpath: str | Path, filename: str = Path(INTERRUPTED_CKPT).stem) -> None:
        super().__init__(str(dirpath), filename)
        self.checkpoint: Path | None = None
        self.checkpoint_error: str | None = None
        self.signal_name: str | None = None
        self.trainer: pl.Trainer | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.trainer = trainer

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.received_sigterm:
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
        if trainer.validating or trainer.sanity_checking:
            self.checkpoint_error = "interrupted during validation, whose checkpoint would skip it on resume"
            return
        try:
            super().on_exception(trainer, pl_module, exception)
            self.checkpoint = Path(self.ckpt_path)
        except Exception as err:  # noqa: BLE001 - report it in the message instead
            self.checkpoint_error = f"{type(err).__name__}: {err}"

    def teardown(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        """Keep the file (``OnExceptionCheckpoint`` deletes it when a run ends)."""
