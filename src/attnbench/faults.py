"""Failures a user can cause or meet during a run: one message each, early, and nothing computed lost.

- :class:`FaultGuard` (a Lightning callback) stops on a non-finite training loss
  before it reaches the weights, stops within one step of a SIGTERM (Lightning
  alone waits for the end of the epoch), and writes
  ``<output_dir>/checkpoints/interrupted.ckpt`` when a run is interrupted or
  crashes. Its :meth:`FaultGuard.translating` context manager turns what
  escapes ``trainer.fit``/``trainer.test`` into one :class:`AttnbenchError`
  (out of memory, a failed write, an interrupt), writes ``failure.json`` with
  the metrics so far, and finishes the W&B run.
- :class:`FreshOutputDir`, :class:`SweepReport`, :func:`run_cli` and
  :func:`check_run_config` live in :mod:`attnbench.cli` and
  :mod:`attnbench.config_checks` (no torch import, so ``--help`` and config
  errors answer fast).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnbench.cli import FAILURE_FILE, write_failure
from attnbench.errors import AttnbenchError, ConfigError, OutputDirTaken, RunInterrupted

log = logging.getLogger("attnbench")

INTERRUPTED_CKPT = "interrupted.ckpt"
_WRITE_ERRNOS = {errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.EPERM, errno.EEXIST, errno.ENOTDIR,
                 errno.EISDIR, errno.EIO}


class NonFiniteLossError(AttnbenchError, FloatingPointError):
    """The training loss became NaN or infinite; training stopped before that step's update."""


class OutOfMemory(AttnbenchError, MemoryError):
    """A step needed more memory than the device has; the message names the knobs that lower it."""


class OutputWriteError(AttnbenchError, OSError):
    """A checkpoint or other output could not be written (disk full, read-only, permissions)."""


def check_output_dir(output_dir: Path, resuming: bool = False) -> None:
    """Refuse to write into a directory that already holds a run's results.

    A resumed run (``ckpt_path`` set) continues in its own dir: its checkpoints
    and ``failure.json`` are expected there, only a finished run's
    ``metrics.json`` is refused.

    Raises:
        OutputDirTaken: (a ConfigError) ``output_dir`` holds ``metrics.json``, or (when not resuming)
            ``failure.json`` or checkpoints.
    """
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return  # a DDP worker process started by Lightning: it shares rank 0's dir
    names = ("metrics.json",) if resuming else ("metrics.json", FAILURE_FILE)
    taken = [name for name in names if (output_dir / name).exists()]
    if not resuming and any((output_dir / "checkpoints").glob("*.ckpt")):
        taken.append("checkpoints/")
    if taken:
        raise OutputDirTaken(
            f"{output_dir} already holds a previous run's outputs ({', '.join(taken)}); it is never overwritten. "
            "Choose another output dir (hydra.run.dir=...) or move that run away."
        )


# --------------------------------------------------------------------------------------------- training faults
def is_out_of_memory(err: BaseException) -> bool:
    """True for CUDA/MPS out-of-memory errors and CPU allocation failures (RuntimeError "can't allocate memory")."""
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        s in text for s in ("out of memory", "can't allocate memory", "could not allocate", "failed to allocate")
    )


def _write_error(err: BaseException) -> OSError | None:
    """The OSError (``err`` or its cause) that means an output could not be written, if it is one."""
    for candidate in (err, err.__cause__, err.__context__):
        if isinstance(candidate, OSError) and not isinstance(candidate, AttnbenchError) \
                and candidate.errno in _WRITE_ERRNOS:
            return candidate
    return None


def _overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return [o for o in HydraConfig.get().overrides.task if not o.startswith("ckpt_path=")]
    return []


def _run_dir_override() -> list[str]:
    """``hydra.run.dir=<this run's dir>`` for a single run, so that its resume continues in the same dir."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.RUN:
        return [shlex.quote(f"hydra.run.dir={HydraConfig.get().runtime.output_dir}")]
    return []


class FaultGuard(pl.Callback):
    """Stops on a non-finite loss or a SIGTERM, saves a checkpoint on interrupts and crashes.

    Args:
        cfg: the run's composed config (for the messages: ``optim.lr``, ``data.*`` sizes).
        output_dir: the job's output dir; ``checkpoints/interrupted.ckpt`` and ``failure.json`` go there.

    After an exception, :attr:`checkpoint` is the path written (or ``None``) and
    :attr:`signal_name` the signal that interrupted the run (or ``None``).
    """

    def __init__(self, cfg: DictConfig, output_dir: Path) -> None:
        super().__init__()
        self.cfg = cfg
        self.output_dir = Path(output_dir)
        self.checkpoint: Path | None = None
        self.checkpoint_error: str | None = None
        self.signal_name: str | None = None
        self.trainer: pl.Trainer | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.trainer = trainer

    # -------------------------------------------------------------------- lightning hooks
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        """Raise :class:`NonFiniteLossError` before a NaN/inf loss produces gradients (weights stay as they were)."""
        if not bool(torch.isfinite(loss.detach()).all()):
            raise NonFiniteLossError(self._non_finite_message(trainer, float(loss.detach().float().mean())))

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Raise :class:`NonFiniteLossError` on a NaN/inf ``val/loss`` (finite-loss updates can still leave
        weights that overflow), before ``ModelCheckpoint`` could save such weights."""
        value = trainer.callback_metrics.get("val/loss")
        if trainer.sanity_checking or value is None or bool(torch.isfinite(value).all()):
            return
        raise NonFiniteLossError(self._non_finite_message(trainer, float(value), "val/loss"))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Lightning's SIGTERM handler only sets this flag; its loop checks it at epoch ends (or across DDP ranks).
        if trainer.received_sigterm:
            raise SIGTERMException(128 + signal.SIGTERM)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            self.signal_name = "Ctrl-C (SIGINT)"
        elif isinstance(exception, SIGTERMException) or trainer.received_sigterm:
            self.signal_name = "SIGTERM"
        if trainer.state.fn != TrainerFn.FITTING or isinstance(exception, NonFiniteLossError):
            return  # testing: the trained checkpoints exist; NaN: keep the last good checkpoint, write no NaN one
        if _write_error(exception) is not None:
            return  # writing another checkpoint would fail the same way
        if trainer.validating or trainer.sanity_checking:
            # A checkpoint taken inside validation marks the epoch's training as done but not its validation;
            # resuming from it would skip that validation (and perhaps the best checkpoint). Keep the last one.
            self.checkpoint_error = "interrupted during validation, whose checkpoint would skip it on resume"
            return
        path = self.output_dir / "checkpoints" / INTERRUPTED_CKPT
        try:
            trainer.save_checkpoint(path)
            self.checkpoint = path
        except Exception as err:  # noqa: BLE001 - report it in the message instead
            self.checkpoint_error = f"{type(err).__name__}: {err}"

    # -------------------------------------------------------------------- messages
    def _last_checkpoint(self) -> str | None:
        cb = self.trainer.checkpoint_callback if self.trainer is not None else None
        for attr in ("last_model_path", "best_model_path"):
            path = getattr(cb, attr, "") if cb is not None else ""
            if path and Path(path).is_file():
                return str(path)
        return None

    def _where(self) -> str:
        t = self.trainer
        return f"step {t.global_step} (epoch {t.current_epoch})" if t is not None else "start-up"

    def _non_finite_message(self, trainer: pl.Trainer, value: float, key: str = "train/loss") -> str:
        last = self._last_checkpoint()
        kept = f"the last good checkpoint is kept: {last}" if last else "no checkpoint had been written yet"
        when = "before that update" if key == "train/loss" else "before checkpointing these weights"
        return (
            f"{key} became {value} at step {trainer.global_step} (epoch {trainer.current_epoch}); training "
            f"stopped {when}, {kept}. Lower optim.lr (now {self.cfg.optim.lr}), raise "
            "optim.warmup_ratio, keep trainer.gradient_clip_val > 0, or use trainer.precision=32-true."
        )

    def translate(self, err: BaseException) -> AttnbenchError | None:
        """The user-facing error for ``err`` (escaped from fit/test), or ``None`` for a bug (re-raised as is)."""
        if isinstance(err, AttnbenchError):
            return err
        if isinstance(err, KeyboardInterrupt) and self.signal_name is None:
            self.signal_name = "Ctrl-C (SIGINT)"
        if self.signal_name is not None and isinstance(err, KeyboardInterrupt | SystemExit):
            return RunInterrupted(self._interrupt_message(),
                                  128 + (signal.SIGTERM if self.signal_name == "SIGTERM" else signal.SIGINT))
        if is_out_of_memory(err):
            data = self.cfg.data
            knobs = f"data.batch_size (now {data.batch_size}), data.max_length (now {data.max_length})"
            if self.trainer is not None and self.trainer.state.fn != TrainerFn.FITTING:
                knobs = f"data.eval_batch_size (now {data.eval_batch_size}), data.max_length (now {data.max_length})"
            if "chunk_bytes" in self.cfg.attention:
                knobs += f", attention.chunk_bytes (now {self.cfg.attention.chunk_bytes})"
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return OutOfMemory(f"Out of memory at {self._where()} ({first_line[:160]}). Lower {knobs}; "
                               "on a GPU, trainer.precision=bf16-mixed also halves activation memory.")
        if isinstance(err, MisconfigurationException):  # e.g. a ModelCheckpoint monitor key that is never logged
            return ConfigError(f"invalid trainer or callbacks config: {' '.join(str(err).split(' HINT:')[0].split())}")
        write_err = _write_error(err)
        if write_err is not None:
            path = write_err.filename or self.output_dir
            return OutputWriteError(
                f"Could not write {path}: {write_err.strerror or write_err}. Free disk space or make it writable, "
                f"or write elsewhere with hydra.run.dir=<dir>; metrics so far are in {self.output_dir / 'csv'} "
                f"and {self.output_dir / FAILURE_FILE}."
            )
        return None

    def _interrupt_message(self) -> str:
        if self.checkpoint is not None:
            resume = " ".join(["python train.py", *map(shlex.quote, _overrides()), *_run_dir_override(),
                               f"ckpt_path={shlex.quote(str(self.checkpoint))}"])
            saved = f"checkpoint saved to {self.checkpoint}. Resume with: {resume}"
        else:
            last = self._last_checkpoint()
            why = f" ({self.checkpoint_error})" if self.checkpoint_error else ""
            saved = f"no new checkpoint written{why}; the last one is {last}" if last else "no checkpoint to resume"
            if self.trainer is not None and self.trainer.state.fn == TrainerFn.TESTING:
                saved = f"training had finished (checkpoints in {self.output_dir / 'checkpoints'}); testing stopped"
        return f"Interrupted by {self.signal_name} at {self._where()}; {saved}."

    @contextlib.contextmanager
    def translating(self, wandb_logger: Any = None) -> Iterator[FaultGuard]:
        """Wrap ``trainer.fit``/``trainer.test``: on any exception write ``failure.json``, finish W&B, and raise
        the user-facing :class:`AttnbenchError` (a bug's exception is re-raised unchanged)."""
        try:
            yield self
        except BaseException as err:
            user_error = self.translate(err)
            self._write_failure(user_error or err)
            with contextlib.suppress(AttributeError):  # attnbench.cli writes failure.json for the other failures
                (user_error or err).failure_recorded = True
            _finish_wandb(wandb_logger, exit_code=getattr(user_error, "exit_code", 1))
            if user_error is None:
                raise
            raise user_error from None

    def _write_failure(self, err: BaseException) -> None:
        metrics = {}
        if self.trainer is not None:
            for k, v in self.trainer.callback_metrics.items():
                with contextlib.suppress(TypeError, ValueError, RuntimeError):
                    value = float(v)
                    metrics[k] = value if math.isfinite(value) else str(value)
        write_failure(self.output_dir, err, where=self._where(),
                      checkpoint=str(self.checkpoint) if self.checkpoint else self._last_checkpoint(), metrics=metrics)


def _finish_wandb(wandb_logger: Any, exit_code: int) -> None:
    if wandb_logger is None:
        return
    try:
        import wandb

        if wandb.run is not None:
            wandb.finish(exit_code=exit_code)
    except Exception as err:  # noqa: BLE001 - W&B must never hide the real error
        log.warning("W&B finish failed: %s", err)


