"""A progress bar that counts to where the run stops (``trainer.max_steps``), not to the end of the epoch."""

from __future__ import annotations

import pytorch_lightning as pl


class StopAwareRichProgressBar(pl.callbacks.RichProgressBar):
    """Lightning's ``RichProgressBar`` whose training bar counts to where the run will stop.

    Lightning's bars count to the end of the epoch and show ``Epoch i/max_epochs-1`` even when
    ``trainer.max_steps`` ends the run earlier (Lightning caps the count only when ``max_epochs=-1``);
    here both are capped by ``max_steps`` (optimizer steps, times ``accumulate_grad_batches`` batches).
    """

    def _batches_left_in_run(self) -> float:
        trainer = self.trainer
        max_steps = trainer.max_steps
        if max_steps is None or max_steps < 0:
            return float("inf")
        epoch_loop = trainer.fit_loop.epoch_loop
        # at an epoch start the counter still holds the previous epoch's batches, except after a mid-epoch resume
        done_this_epoch = epoch_loop.batch_progress.current.ready if epoch_loop.restarting else 0
        return done_this_epoch + (max_steps - trainer.global_step) * trainer.accumulate_grad_batches

    @property
    def total_train_batches(self) -> int | float:
        """Training batches of this epoch that will run: the epoch's, or fewer when ``max_steps`` ends it."""
        total = super().total_train_batches
        return min(total, max(self._batches_left_in_run(), 0))

    def last_epoch(self) -> int | None:
        """The index of the epoch in which the run will stop (``max_epochs``, or ``max_steps`` if it comes first)."""
        trainer = self.trainer
        last = trainer.max_epochs - 1 if trainer.max_epochs is not None and trainer.max_epochs >= 0 else None
        per_epoch = trainer.num_training_batches
        if trainer.max_steps is not None and trainer.max_steps > 0 and 0 < per_epoch < float("inf"):
            # the epoch's last batch ends an optimizer step even when fewer than accumulate_grad_batches
            # batches were accumulated (Lightning's training epoch loop): ceil, not floor
            steps_per_epoch = -(-int(per_epoch) // trainer.accumulate_grad_batches)
            by_steps = -(-trainer.max_steps // steps_per_epoch) - 1
            last = by_steps if last is None else min(last, by_steps)
        return last

    def _get_train_description(self, current_epoch: int) -> str:
        last = self.last_epoch()
        description = f"Epoch {current_epoch}" + (f"/{last}" if last is not None else "")
        return f"{description:{len(self.validation_description)}}"
