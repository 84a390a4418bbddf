"""Callbacks that fail on purpose, for the tests of what a failed run writes (``+callbacks.<name>._target_=...``)."""

from __future__ import annotations

import pytorch_lightning as pl
from lightning_fabric.utilities.exceptions import MisconfigurationException


class RefusesInTheFit(pl.Callback):
    """Refuses the run inside ``trainer.fit``, before the checkpoint restore and any training step (as Lightning
    refuses a setting it checks only there)."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            raise MisconfigurationException("this run is refused inside the fit, before its first training step")
