"""Failures a user can cause or meet during a run: one message each, early, and nothing computed lost.

- :class:`FaultGuard` (a Lightning callback) stops on a non-finite training loss
  before it reaches the weights, stops within one step of a SIGTERM (Lightning
  alone waits for the end of the epoch), and writes
  ``<output_dir>/checkpoints/interrupted.ckpt`` when a run is interrupted or
  crashes. Its :meth:`FaultGuard.translating` context manager turns what
  escapes ``trainer.fit``/``trainer.test`` into one :class:`AttnbenchError`
  (out of memory, a failed write, an interrupt), writes ``failure.json`` with
  the metrics so far, and finishes the W&B run.
- :class:`FreshOutputDir` (a Hydra callback) gives every run and sweep a
  directory of its own: a re-run never writes into a previous run's outputs,
  and two jobs started in the same second get distinct directories.
- :class:`SweepReport` (a Hydra callback) and :func:`run_cli`: a multirun
  finishes its other jobs when one fails, then lists the failures and exits 1,
  with any launcher (basic, joblib, submitit) and sweeper (basic, Optuna);
  :func:`run_cli` also gives a misspelt key a one-line message with the
  closest valid keys.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import json
import logging
import math
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.experimental.callback import Callback as HydraCallback
from lightning_fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, read_write
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnbench.errors import AttnbenchError, ConfigError
from attnbench.optim import OptimSettings, check_precision
from attnbench.paths import user_path

log = logging.getLogger("attnbench")

INTERRUPTED_CKPT = "interrupted.ckpt"
FAILURE_FILE = "failure.json"
_WRITE_ERRNOS = {errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.EPERM, errno.EEXIST, errno.ENOTDIR,
                 errno.EISDIR, errno.EIO}


class NonFiniteLossError(AttnbenchError, FloatingPointError):
    """The training loss became NaN or infinite; training stopped before that step's update."""


class RunInterrupted(AttnbenchError):
    """Ctrl-C (SIGINT) or SIGTERM; ``exit_code`` is 128 + the signal number (130 or 143)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class OutOfMemory(AttnbenchError, MemoryError):
    """A step needed more memory than the device has; the message names the knobs that lower it."""


class OutputWriteError(AttnbenchError, OSError):
    """A checkpoint or other output could not be written (disk full, read-only, permissions)."""


# --------------------------------------------------------------------------------------------- config checks
def check_run_config(cfg: DictConfig) -> None:
    """Checks of the top-level, data and logger keys that need no model and no data (microseconds).

    Raises:
        ConfigError: with the key, the value and what it must be.
    """
    def is_int(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    seed = cfg.get("seed")
    if not is_int(seed):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    data = cfg.get("data") or {}
    for key in ("max_length", "batch_size", "eval_batch_size"):
        value = data.get(key)
        if not is_int(value) or value < 1:
            raise ConfigError(f"data.{key} must be an integer >= 1, got {value!r}")
    model = cfg.get("model") or {}
    for key in ("d_model", "n_heads", "n_layers", "d_ff"):
        if key in model and not is_int(model[key]):
            raise ConfigError(f"model.{key} must be an integer, got {model[key]!r}")
    trainer = cfg.get("trainer") or {}
    for key in ("max_steps", "max_epochs"):
        value = trainer.get(key)
        if value is not None and (not is_int(value) or value == 0 or value < -1):
            raise ConfigError(f"trainer.{key} must be an integer >= 1, or -1 for no limit, got {value!r} "
                              "(0 would test an untrained model)")
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path not in (None, "", "last", "best", "hpc", "registry") and not user_path(ckpt_path).is_file():
        raise ConfigError(f"ckpt_path={ckpt_path}: no such checkpoint file. Use the path printed when the run "
                          "stopped (e.g. <output_dir>/checkpoints/interrupted.ckpt or last.ckpt).")
    _check_optim(cfg.get("optim") or {})
    check_precision(trainer.get("precision"))
    wandb_cfg = (cfg.get("logger") or {}).get("wandb")
    if wandb_cfg is not None:
        from attnbench.wandb_mode import resolve_wandb_mode

        try:
            resolve_wandb_mode(str(wandb_cfg.get("mode", "auto")))
        except ValueError as err:
            raise ConfigError(str(err)) from None
        timeout = wandb_cfg.get("init_timeout", 60)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(f"logger.wandb.init_timeout must be a number of seconds > 0, got {timeout!r}")


def _check_optim(optim: Any) -> None:
    """``optim.*`` values that AdamW or the schedule would reject only once training starts
    (:meth:`attnbench.optim.OptimSettings.from_config`, the one definition of their defaults and ranges)."""
    OptimSettings.from_config(optim)


def check_output_dir(output_dir: Path, resuming: bool = False) -> None:
    """Refuse to write into a directory that already holds a run's results.

    A resumed run (``ckpt_path`` set) continues in its own dir: its checkpoints
    and ``failure.json`` are expected there, only a finished run's
    ``metrics.json`` is refused.

    Raises:
        ConfigError: ``output_dir`` holds ``metrics.json``, or (when not resuming)
            ``failure.json`` or checkpoints.
    """
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return  # a DDP worker process started by Lightning: it shares rank 0's dir
    names = ("metrics.json",) if resuming else ("metrics.json", FAILURE_FILE)
    taken = [name for name in names if (output_dir / name).exists()]
    if not resuming and any((output_dir / "checkpoints").glob("*.ckpt")):
        taken.append("checkpoints/")
    if taken:
        raise ConfigError(
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
        record = {
            "status": "interrupted" if isinstance(err, RunInterrupted) else "failed",
            "error": str(err),
            "error_type": type(err).__name__,
            "where": self._where(),
            "checkpoint": str(self.checkpoint) if self.checkpoint else self._last_checkpoint(),
            "metrics_so_far": metrics,
        }
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.output_dir / (FAILURE_FILE + ".tmp")
            tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
            tmp.replace(self.output_dir / FAILURE_FILE)
        except OSError as write_err:
            log.warning("Could not write %s: %s", self.output_dir / FAILURE_FILE, write_err)


def _finish_wandb(wandb_logger: Any, exit_code: int) -> None:
    if wandb_logger is None:
        return
    try:
        import wandb

        if wandb.run is not None:
            wandb.finish(exit_code=exit_code)
    except Exception as err:  # noqa: BLE001 - W&B must never hide the real error
        log.warning("W&B finish failed: %s", err)


# --------------------------------------------------------------------------------------------- output dirs
def claim_dir(path: Path, marker: str, marker_is_file: bool = False) -> Path:
    """``path``, or ``path_2``, ``path_3``, ... : the first that is absent or empty, claimed atomically.

    A directory is claimed by creating ``marker`` in it with an exclusive create,
    so two processes racing for one name never both get it.
    """
    for i in range(1, 10_000):
        candidate = path if i == 1 else path.with_name(f"{path.name}_{i}")
        if candidate.is_dir() and any(candidate.iterdir()) or candidate.exists() and not candidate.is_dir():
            continue
        candidate.mkdir(parents=True, exist_ok=True)
        try:
            if marker_is_file:
                with open(candidate / marker, "x"):
                    pass
            else:
                (candidate / marker).mkdir()
        except FileExistsError:
            continue
        return candidate
    raise ConfigError(f"no free output directory next to {path}")


class FreshOutputDir(HydraCallback):
    """Hydra callback: each run or sweep gets its own directory (``<dir>_2``, ... when ``<dir>`` is taken).

    Runs before Hydra creates the job directory, so neither ``.hydra/`` nor
    ``train.log`` of an earlier run is touched.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.output_subdir).startswith(".pl_ddp_hydra_") or os.environ.get("LOCAL_RANK", "0") != "0":
            return  # Lightning re-launched this script for a DDP rank: it must share rank 0's dir
        if config.get("ckpt_path"):
            return  # resuming: the run continues in the dir it names (hydra.run.dir=<run dir> ckpt_path=last)
        wanted = Path(str(config.hydra.run.dir))
        got = claim_dir(wanted, str(config.hydra.output_subdir or ".attnbench"))
        self._set(config, "run", wanted, got)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.get("ckpt_path"):
            return  # resuming a sweep: its jobs continue in their dirs (hydra.sweep.dir=<sweep dir> ckpt_path=last)
        wanted = Path(str(config.hydra.sweep.dir))
        got = claim_dir(wanted, "multirun.yaml", marker_is_file=True)
        self._set(config, "sweep", wanted, got)
        # every job's config is composed again from the overrides: make the claimed dir one of them
        quoted = str(got).replace("\\", "\\\\").replace("'", "\\'")
        with read_write(config.hydra):
            config.hydra.overrides.hydra.append(f"hydra.sweep.dir='{quoted}'")

    @staticmethod
    def _set(config: DictConfig, key: str, wanted: Path, got: Path) -> None:
        with read_write(config.hydra):
            config.hydra[key].dir = str(got)
        if got != wanted:
            print(f"{wanted} already holds another run; this one writes to {got}", file=sys.stderr)


# --------------------------------------------------------------------------------------------- command line
SWEEP_JOBS_DIR = ".attnbench-jobs"  # <sweep dir>/.attnbench-jobs/<job num>.json: one status record per job
_SWEEP: dict[str, Path | None] = {"dir": None}  # the multirun of this (main) process, set when it starts


class SweepReport(HydraCallback):
    """Hydra callback: the end-of-sweep list of failed jobs and exit code 1, whatever the launcher or sweeper.

    - :meth:`on_job_end` runs in the job's own process (the basic launcher's,
      a joblib worker, a submitit/SLURM job) and writes the job's status to
      ``<sweep dir>/.attnbench-jobs/<job num>.json`` (``status`` completed or
      failed, ``error``, ``output_dir``, ``overrides``, ``return_value``).
    - :meth:`on_multirun_end` (main process) reads them all; when a job failed
      it prints ``<n> of <m> jobs failed`` with one line per failed job and
      exits with code 1. Sweepers that record failures and go on (Optuna)
      reach it; the basic sweeper instead raises the first failed job's error
      after all jobs ran, and :func:`run_cli` prints the same list from the
      same records (:func:`sweep_failure_summary`).

    List it after ``fresh_output_dir`` in ``hydra.callbacks`` (it reads the
    claimed sweep dir). Hydra swallows exceptions raised by callbacks, so the
    exit is a ``SystemExit(1)``.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        _SWEEP["dir"] = sweep_dir
        records = sweep_dir / SWEEP_JOBS_DIR
        if records.is_dir():  # a resumed sweep (same sweep dir): report this invocation's jobs only
            for old in records.glob("*.json"):
                old.unlink(missing_ok=True)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        hydra_cfg = config.hydra
        if hydra_cfg.mode != RunMode.MULTIRUN or _process_rank() != 0:
            return  # a single run, or a DDP/SLURM rank other than 0 (rank 0 reports the job)
        record: dict[str, Any] = {
            "num": int(hydra_cfg.job.num),
            "output_dir": str(hydra_cfg.runtime.output_dir),
            "overrides": list(job_return.overrides or []),
            "status": "completed" if job_return.status == JobStatus.COMPLETED else "failed",
        }
        if job_return.status == JobStatus.COMPLETED:
            value = job_return.return_value
            record["return_value"] = value if isinstance(value, int | float | str | type(None)) else repr(value)
        else:
            err = getattr(job_return, "_return_value", None)
            record["error"] = str(err) if isinstance(err, AttnbenchError) else f"{type(err).__name__}: {err}"
        folder = Path(str(hydra_cfg.sweep.dir)) / SWEEP_JOBS_DIR
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f"{record['num']}.json.tmp"
            tmp.write_text(json.dumps(record, indent=2))
            tmp.replace(folder / f"{record['num']}.json")
        except OSError as err:
            log.warning("Could not record the job's status in %s: %s", folder, err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        summary = sweep_failure_summary(Path(str(config.hydra.sweep.dir)))
        if summary:
            print(summary, file=sys.stderr, flush=True)
            raise SystemExit(1)


def _process_rank() -> int:
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def sweep_failure_summary(sweep_dir: Path | None) -> str | None:
    """``"<n> of <m> jobs failed ...:"`` and one ``<output dir>: <error>`` line per failed job, from the
    records :class:`SweepReport` wrote in ``<sweep_dir>/.attnbench-jobs/``; ``None`` when no job failed."""
    if sweep_dir is None or not (Path(sweep_dir) / SWEEP_JOBS_DIR).is_dir():
        return None
    records = []
    for path in (Path(sweep_dir) / SWEEP_JOBS_DIR).glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    failed = sorted((r for r in records if r.get("status") == "failed"), key=lambda r: r.get("num", 0))
    if not failed:
        return None
    lines = [f"{len(failed)} of {len(records)} jobs failed (each wrote error.json, and failure.json if it failed "
             "during training):"]
    lines += [f"  {r.get('output_dir')}: {r.get('error')}" for r in failed]
    return "\n".join(lines)


def _report(err: BaseException) -> None:
    """The message on stderr as one unwrapped line (a path or a resume command stays copyable), and as an
    ERROR record in the job's log files (``train.log``)."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s", (err,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    print(f"Error: {err}", file=sys.stderr, flush=True)


def job_failed(err: AttnbenchError) -> None:
    """Called by the Hydra task on a user-facing error: log one line, then exit (single run, interrupt) or
    re-raise so that Hydra's multirun records the failure (:class:`SweepReport`) and goes on with the next job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    _report(err)
    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if multirun and not isinstance(err, RunInterrupted):
        raise err
    raise SystemExit(getattr(err, "exit_code", 1)) from None


def _config_key_message(err: BaseException) -> str | None:
    """One line for a misspelt key override, with the closest valid keys; ``None`` for other errors."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = err.__cause__
    if not isinstance(cause, ConfigKeyError | ConfigAttributeError):
        return None
    full_key = str(getattr(cause, "full_key", "") or "")
    key = str(getattr(cause, "key", "") or full_key.rsplit(".", 1)[-1])
    parent = getattr(cause, "parent_node", None)
    options = [str(k) for k in parent] if isinstance(parent, DictConfig) else []
    prefix = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
    close = [prefix + c for c in difflib.get_close_matches(key, options, n=3, cutoff=0.6)]
    if not prefix and isinstance(parent, DictConfig):  # a top-level key: maybe one level down (lr -> optim.lr)
        nested = {f"{group}.{sub}": str(sub) for group in parent if isinstance(parent.get(group), DictConfig)
                  for sub in parent.get(group)}
        close += [path for path, sub in nested.items() if sub in difflib.get_close_matches(key, [sub], cutoff=0.8)]
    hint = f"did you mean {' or '.join(close[:4])}? " if close else ""
    where = f"'{prefix[:-1]}'" if prefix else "the config"
    return (f"Unknown config key '{full_key}': {hint}{where} has: {', '.join(options)}. "
            f"(To add a new key on purpose, write +{full_key}=...)")


def _exit_if_jobs_failed() -> None:
    """In a multirun whose jobs failed: print :func:`sweep_failure_summary` and exit with code 1."""
    summary = sweep_failure_summary(_SWEEP["dir"])
    if summary:
        print(summary, file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def run_cli(hydra_main: Callable[[], Any]) -> None:
    """Run a ``@hydra.main`` function with one-line messages for the user's mistakes.

    - a misspelt key override: the closest valid keys (Hydra alone suggests appending it with ``+``);
    - a multirun in which jobs failed: every job still runs; then one line per failed job, exit code 1
      (:class:`SweepReport` for every launcher and sweeper; here for the sweepers that re-raise a job's error);
    - Ctrl-C outside training: one line, exit code 130.

    Other Hydra errors (unknown config group option, parse errors) keep Hydra's
    message, which lists the valid options. ``HYDRA_FULL_ERROR=1`` shows full
    tracebacks as usual.
    """
    from hydra.errors import CompactHydraException

    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises instead of printing and exiting
    _SWEEP["dir"] = None
    try:
        hydra_main()
    except AttnbenchError as err:  # a multirun's sweeper re-raised a failed job's error after all jobs ran
        _exit_if_jobs_failed()
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except ValueError as err:  # after AttnbenchError: ConfigError is a ValueError too
        _exit_if_jobs_failed()
        if not str(err).startswith("Only one of --run, --multirun"):
            raise
        print(f"Error: {err}. To see what a sweep will run, print its config without -m: "
              "python train.py <overrides> --cfg hydra (hydra.sweeper.params).", file=sys.stderr)
        raise SystemExit(2) from None
    except CompactHydraException as err:
        _exit_if_jobs_failed()
        if user_full_error:
            raise
        message = _config_key_message(err)
        if message is None:
            message = str(err) + (f"\n{err.__cause__}" if err.__cause__ is not None else "")
        print(message, file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print("Interrupted (Ctrl-C) before training started; nothing to resume.", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    except Exception:  # a bug in a job of a basic multirun (its traceback is in its train.log): the same list
        _exit_if_jobs_failed()
        raise
    finally:
        if user_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = user_full_error
