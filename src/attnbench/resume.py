"""Resuming a run from a checkpoint: which file, and the state Lightning's checkpoints lack.

Lightning's checkpoint restores weights, optimizer, learning-rate scheduler,
loop counters and callback states (best checkpoint so far). :class:`ResumeState`
adds the random-number generators (torch, CUDA, NumPy, Python) and the W&B
run id. With the data order a function of (seed, epoch) alone
(:class:`attnbench.data.EpochShuffleSampler`), a run resumed from an
epoch-end checkpoint continues exactly as the uninterrupted run would have.
A run resumed from a mid-epoch checkpoint (``callbacks.last_checkpoint.every_n_train_steps``)
restarts that epoch's batch order, and says in the log which batches it replays.
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from attnbench.errors import ConfigError
from attnbench.paths import user_path

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "attnbench"


def resolve_checkpoint(ckpt_path: str | None, output_dir: Path) -> str | None:
    """The checkpoint file a run resumes from, or ``None`` to start from scratch.

    Args:
        ckpt_path: ``None``; ``"last"`` — the newest of ``last*.ckpt`` and
            ``interrupted.ckpt`` (written on Ctrl-C/SIGTERM) in this job's
            ``<output_dir>/checkpoints/`` (resume a run by giving its
            directory: ``hydra.run.dir=<run dir>``, or a sweep's with
            ``hydra.sweep.dir=<sweep dir>``); or a path to a ``.ckpt`` file.
        output_dir: the job's output directory.

    Raises:
        ConfigError: ``ckpt_path`` names a file that does not exist.
    """
    if ckpt_path in (None, ""):
        return None
    if str(ckpt_path) == "last":
        folder = output_dir / "checkpoints"
        candidates = sorted([*folder.glob("last*.ckpt"), *folder.glob("interrupted.ckpt")],
                            key=lambda p: p.stat().st_mtime)
        if not candidates:
            log.warning("ckpt_path=last: no checkpoint in %s yet; training from scratch.", output_dir / "checkpoints")
            return None
        return str(candidates[-1])
    path = user_path(ckpt_path)  # relative: from the launch dir, also under hydra.job.chdir=true
    if not path.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path}: no such checkpoint file. Give a .ckpt file, or ckpt_path=last together with "
            "hydra.run.dir=<the run's output dir> to resume that run from its last checkpoint."
        )
    return str(path.resolve())


def checkpoint_extras(path: str) -> dict[str, Any]:
    """What :class:`ResumeState` stored in the checkpoint at ``path`` (``{}`` for other checkpoints)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    extras = dict(checkpoint.get(CHECKPOINT_KEY) or {})
    extras["global_step"] = int(checkpoint.get("global_step", 0))
    extras["epoch"] = int(checkpoint.get("epoch", 0))
    return extras


def collect_rng_states() -> dict[str, Any]:
    """The global RNG states (torch CPU, every CUDA device, NumPy, Python) in a form ``torch.load`` accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore the states of :func:`collect_rng_states`."""
    torch.set_rng_state(states["torch"])
    npst = states["numpy"]
    np.random.set_state((npst["kind"], npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"],
                         npst["gauss"]))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class ResumeState(pl.Callback):
    """Checkpoints the RNG states and the W&B run id; on resume restores the RNGs and logs what is replayed.

    The RNG states are restored when training starts (after the sanity check,
    before the first batch), which is where the uninterrupted run stood when
    the checkpoint was written at the end of validation.

    Args:
        wandb_run: ``{"id": ..., "mode": "online"|"offline"}`` of this job's W&B
            run, or ``None``; written into every checkpoint.
    """

    def __init__(self, wandb_run: dict[str, str] | None = None) -> None:
        super().__init__()
        self.wandb_run = wandb_run
        self._rng_states: dict[str, Any] | None = None
        self._resumed_from_step: int | None = None

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = {"rng_states": collect_rng_states(), "wandb_run": self.wandb_run}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        extras = checkpoint.get(CHECKPOINT_KEY) or {}
        self._rng_states = extras.get("rng_states")
        self._resumed_from_step = int(checkpoint.get("global_step", 0))
        if self._rng_states is None:
            log.warning("The checkpoint holds no RNG states (not written by attnbench): dropout and data order "
                        "after the resume differ from an uninterrupted run.")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._resumed_from_step is None:
            return
        if self._rng_states is not None:
            set_rng_states(self._rng_states)
            self._rng_states = None
        batches = int(trainer.num_training_batches)
        accumulate = trainer.accumulate_grad_batches
        epoch = trainer.current_epoch
        # batches of this epoch done before the checkpoint (a step checkpoint is written before Lightning
        # counts its batch as completed, so count optimizer steps instead)
        done = (self._resumed_from_step - epoch * math.ceil(batches / accumulate)) * accumulate
        if 0 < done < batches:
            replayed = min(done, batches - done)
            log.warning(
                "Resumed mid-epoch at step %d: epoch %d had run %d of its %d batches. Weights, optimizer, scheduler "
                "and RNG states are those of step %d, but the data loader cannot skip ahead: the epoch's remaining "
                "%d steps take batches 0-%d of the epoch's order again, so %d batch(es) seen before the "
                "interruption are replayed and batches %d-%d of this epoch are not seen. Epoch-end checkpoints "
                "resume exactly.",
                self._resumed_from_step, epoch, done, batches, self._resumed_from_step, batches - done,
                batches - done - 1, replayed, max(done, batches - done), batches - 1,
            )
        else:
            log.info("Resumed at the start of epoch %d (step %d): the run continues exactly as it would have.",
                     epoch, self._resumed_from_step)
        self._resumed_from_step = None
