"""Every exception a job can meet, translated into one user-facing message (:class:`~attnbench.errors.AttnbenchError`)
in one place; ``failure.json`` written and the W&B run finished on the way out.

- :func:`from_instantiation`: construction errors before training;
- :class:`FailureHandler`: what escapes ``trainer.fit``/``trainer.test`` (a NaN loss, out of memory, an
  interrupt, a failed write, a Lightning misconfiguration);
- :func:`hydra_error_message`: a misspelt key override, at composition (used by :mod:`attnbench.run.cli`).

A bug's exception is never translated: it keeps its traceback.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import functools
import logging
import math
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from attnbench.errors import (
    AttnbenchError,
    ConfigError,
    OutOfMemory,
    OutputDirTaken,
    OutputWriteError,
    RunInterrupted,
    whole_sentences,
    write_error,
)
from attnbench.run.ddp import global_rank_from_env, processes_per_node
from attnbench.run.loggers import finish_wandb
from attnbench.run.outputs import FAILURE_FILE, job_output_dir, write_json, writes_held

if TYPE_CHECKING:
    from attnbench.run.resume import InterruptCheckpoint

log = logging.getLogger("attnbench")


def task_wrapper(task: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """The Hydra task's one exit for every failure: ``failure.json`` in the job's dir (and ``error.json`` in a
    sweep), then for the user's input or a fault (:class:`AttnbenchError`) one ``Error: ...`` line and exit code
    1 (or the signal's), for a bug its traceback. In a multirun the error goes back to Hydra, so the other jobs
    still run, the Optuna sweeper records the trial as failed, and ``SweepReport`` lists the jobs at the end."""

    @functools.wraps(task)
    def wrapped(cfg: DictConfig) -> Any:
        try:
            return task(cfg)
        except Exception as err:
            if global_rank_from_env(processes_per_node(cfg)) == 0:
                record_failure(cfg, err, job_output_dir(cfg), _in_sweep())
            if isinstance(err, AttnbenchError):  # the user's input or a fault, not a bug: no traceback
                to_log_files(logging.ERROR, "%s", err)  # train.log; stderr: one unwrapped line, paths copyable
                print(f"Error: {err}", file=sys.stderr, flush=True)
                if _in_sweep() and not isinstance(err, RunInterrupted):
                    raise
                raise SystemExit(getattr(err, "exit_code", 1)) from None
            if _in_sweep():
                log.error("Job failed: %s: %s", type(err).__name__, err, exc_info=True)
            raise

    return wrapped


def to_log_files(level: int, message: str, *args: Any) -> None:
    """A record for the job's log files (``train.log``) only, not the console."""
    record = log.makeRecord(log.name, level, __file__, 0, message, args, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _in_sweep() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def write_failure(output_dir: Path, err: BaseException, where: str = "before training",
                  checkpoint: str | None = None, metrics: dict[str, Any] | None = None) -> bool:
    """``<output_dir>/failure.json``: ``status`` (failed or interrupted), ``error`` (the message),
    ``error_type``, ``where`` (the step, or "before training" for config and data faults), ``checkpoint``
    (the one to resume from, or null) and ``metrics_so_far``. Written atomically; a failed write is a
    warning (the original error is what the user must see). Returns whether the file was written."""
    record = {
        "status": "interrupted" if isinstance(err, RunInterrupted) else "failed",
        "error": str(err) if isinstance(err, AttnbenchError) else f"{type(err).__name__}: {err}",
        "error_type": type(err).__name__,
        "where": where,
        "checkpoint": checkpoint,
        "metrics_so_far": metrics or {},
    }
    try:
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        write_json(output_dir / FAILURE_FILE, record)
        return True
    except OSError as write_err:
        log.warning("Could not write %s: %s", Path(output_dir) / FAILURE_FILE, write_err)
        return False


def record_failure(cfg: DictConfig, err: BaseException, output_dir: Path, in_sweep: bool) -> None:
    """``<output_dir>/failure.json`` for any failed job (config and data faults included), unless the fault
    handler of training wrote it for this error (with the step and checkpoint), or the dir holds another run; in a
    sweep also ``error.json`` (the job's overrides and the error). Call it on rank 0 only."""
    from hydra.core.hydra_config import HydraConfig

    if isinstance(err, OutputDirTaken) or writes_held():  # another run's dir, or one this job has not written to
        return
    if not getattr(err, "failure_recorded", False):  # the training fault handler wrote it, with step and checkpoint
        trained = any((output_dir / "checkpoints").glob("*.ckpt"))
        write_failure(output_dir, err, where="after training" if trained else "before training")
    if not in_sweep:
        return
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        write_json(output_dir / "error.json", {
            "status": "failed",
            "error": f"{type(err).__name__}: {err}",
            "run_name": str(cfg.get("run_name")),
            "overrides": list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else [],
        })
    except Exception as write_err:  # noqa: BLE001 - never hide the original error
        log.warning("Could not write error.json: %s", write_err)


def from_instantiation(err: Exception, what: str) -> BaseException:
    """The error to show for Hydra's ``InstantiationException`` of ``cfg.<what>`` (``data``, ``trainer``,
    ``callbacks.<name>``).

    Hydra wraps a constructor's exception; an :class:`AttnbenchError` (the data module's own messages) is
    shown as it is; these are the user's config, shown as ``invalid <group> config: <what>: <message>`` (``<what>:``
    left out where the message names it already):

    - a trainer's ``MisconfigurationException``/``ValueError``/``TypeError`` (``trainer=gpu`` on a machine without
      one), a Lightning callback's ``MisconfigurationException`` (``callbacks.model_checkpoint.mode=sideways``),
      another constructor's ``ValueError``/``KeyError`` (a value it refused, e.g.
      ``callbacks.attention_maps.n_sentences=0``);
    - a ``_target_`` that cannot be imported (``+callbacks.x._target_=nope.Nope``).

    ``err`` may also be the exception a constructor raised when called outside Hydra (a ``_partial_`` target).
    Anything else (a bug, such as a ``TypeError`` raised inside a constructor) is ``err`` itself.
    """
    from hydra.errors import InstantiationException
    from lightning_fabric.utilities.exceptions import MisconfigurationException

    cause = err.__cause__ if isinstance(err, InstantiationException) else err
    if isinstance(cause, AttnbenchError):
        return cause
    group = what.split(".")[0]
    if isinstance(cause, ImportError) and str(err).startswith("Error locating target"):
        lines = str(cause).splitlines()
        message = f"{lines[0].rstrip(':')}: {' '.join(lines[1:])}" if len(lines) > 1 else str(cause)
        return ConfigError(f"invalid {group} config: {what}._target_ cannot be imported ({message}); fix it or remove "
                           f"{what} (~{what}).")
    refused = (MisconfigurationException | ValueError | TypeError) if what == "trainer" \
        else (MisconfigurationException | ValueError | KeyError)
    if isinstance(cause, refused):
        message = " ".join(str(cause.args[0] if cause.args else repr(cause)).split(" HINT:")[0].split())
        named = what == group or what in message  # a KeyError's str() is quoted: its first argument instead
        return ConfigError(f"invalid {group} config: {message}" if named else f"invalid {group} config: {what}: {message}")
    return err


class FailureHandler:
    """Turns what escapes ``trainer.fit``/``trainer.test`` into one :class:`AttnbenchError` (:meth:`translate`),
    writes ``failure.json`` with the metrics so far and finishes the W&B run (:meth:`translating`).

    Args:
        cfg: the run's composed config (for the messages: ``data.*`` sizes, ``attention.chunk_bytes``).
        output_dir: the job's output dir (``failure.json``).
        interrupt: the run's :class:`~attnbench.run.resume.InterruptCheckpoint` (the trainer,
            the signal, the checkpoint written).
    """

    def __init__(self, cfg: DictConfig, output_dir: Path, interrupt: InterruptCheckpoint) -> None:
        self.cfg = cfg
        self.output_dir = Path(output_dir)
        self.interrupt = interrupt

    @property
    def trainer(self) -> Any:
        return self.interrupt.trainer

    def _where(self) -> str:
        t = self.trainer
        return f"step {t.global_step} (epoch {t.current_epoch})" if t is not None else "start-up"

    def _stage(self) -> Any:
        """The trainer's ``TrainerFn`` (``FITTING``, ``TESTING``), or ``None`` before a trainer exists."""
        return self.trainer.state.fn if self.trainer is not None else None

    def translate(self, err: BaseException) -> AttnbenchError | None:
        """The user-facing error for ``err`` (escaped from fit/test), or ``None`` for a bug (re-raised as is)."""
        import torch
        from lightning_fabric.utilities.exceptions import MisconfigurationException
        from pytorch_lightning.trainer.states import TrainerFn

        if isinstance(err, AttnbenchError):
            return err
        interrupt = self.interrupt
        if isinstance(err, KeyboardInterrupt) and interrupt.signal_name is None:
            interrupt.signal_name = "Ctrl-C (SIGINT)"
        if interrupt.signal_name is not None and isinstance(err, KeyboardInterrupt | SystemExit):
            return RunInterrupted(self._interrupt_message(),
                                  128 + (signal.SIGTERM if interrupt.signal_name == "SIGTERM" else signal.SIGINT))
        text = str(err).lower()  # CUDA/MPS out of memory, or a CPU allocation failure
        allocation = ("out of memory", "can't allocate memory", "could not allocate", "failed to allocate")
        if isinstance(err, torch.OutOfMemoryError | MemoryError) or (
                isinstance(err, RuntimeError) and any(s in text for s in allocation)):
            data = self.cfg.data
            knobs = f"data.batch_size (now {data.batch_size}), data.max_length (now {data.max_length})"
            if self._stage() not in (None, TrainerFn.FITTING):
                knobs = f"data.eval_batch_size (now {data.eval_batch_size}), data.max_length (now {data.max_length})"
            if "chunk_bytes" in self.cfg.attention:
                knobs += f", attention.chunk_bytes (now {self.cfg.attention.chunk_bytes})"
            return OutOfMemory(f"Out of memory at {self._where()} ({whole_sentences(err, 160)}). Lower {knobs}; "
                               "on a GPU, trainer.precision=bf16-mixed also halves activation memory.")
        if isinstance(err, MisconfigurationException) or isinstance(err, ValueError) and _raised_by_lightning(err):
            # e.g. a ModelCheckpoint monitor key that is never logged; a value Lightning checks only in the fit
            # without the `` HINT: ...`` Lightning appends to the text, which names a Python call, not a config key
            message = " ".join(str(err).split(" HINT:")[0].split())
            return ConfigError(f"invalid trainer or callbacks config: {message}")
        write_err = write_error(err)
        if write_err is not None:
            path = Path(write_err.filename) if write_err.filename else None
            folder = path.parent if path is not None else self.output_dir
            why = write_err.strerror or str(write_err)
            if write_err.errno == errno.ENOSPC:  # the folder whose disk is full, also when only the file is known
                why += f" ({folder} is full)"
            return OutputWriteError(
                f"Could not write {path or f'into {folder}'}: {why}. Free disk space or make it writable, "
                f"or write elsewhere with hydra.run.dir=<dir>; metrics so far are in {self.output_dir / 'csv'} "
                f"and {self.output_dir / FAILURE_FILE}."
            )
        return None

    def _interrupt_message(self) -> str:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
        from pytorch_lightning.trainer.states import TrainerFn

        from attnbench.callbacks.nan_guard import last_checkpoint

        interrupt = self.interrupt
        if interrupt.checkpoint is not None:
            command = ["python train.py"]
            if HydraConfig.initialized():  # the job's overrides; a single run continues in its own dir
                hydra_cfg = HydraConfig.get()
                command += [shlex.quote(o) for o in hydra_cfg.overrides.task if not o.startswith("ckpt_path=")]
                if hydra_cfg.mode == RunMode.RUN:
                    command.append(shlex.quote(f"hydra.run.dir={hydra_cfg.runtime.output_dir}"))
            resume = " ".join([*command, f"ckpt_path={shlex.quote(str(interrupt.checkpoint))}"])
            saved = f"checkpoint saved to {interrupt.checkpoint}. Resume with: {resume}"
        else:
            last = last_checkpoint(self.trainer)
            why = f" ({interrupt.checkpoint_error})" if interrupt.checkpoint_error else ""
            saved = f"no new checkpoint written{why}; the last one is {last}" if last else "no checkpoint to resume"
            if self._stage() == TrainerFn.TESTING:
                saved = f"training had finished (checkpoints in {self.output_dir / 'checkpoints'}); testing stopped"
        return f"Interrupted by {interrupt.signal_name} at {self._where()}; {saved}."

    @contextlib.contextmanager
    def translating(self, wandb_logger: Any = None) -> Iterator[FailureHandler]:
        """Wrap ``trainer.fit``/``trainer.test``: on any exception write ``failure.json``, finish W&B, and raise
        the user-facing :class:`AttnbenchError` (a bug's exception is re-raised unchanged). ``wandb_logger``: the
        run's W&B logger, ``None``, or a function returning it when the exception is caught (a resumed run builds
        its loggers when training starts). A run whose writes are still held (resumed in place, failed before
        training started) writes nothing: its dir keeps the previous run as it was."""
        try:
            yield self
        except BaseException as err:
            if callable(wandb_logger):
                wandb_logger = wandb_logger()
            user_error = self.translate(err)
            if not self._write_failure(user_error or err) and isinstance(user_error, OutputWriteError):
                user_error = OutputWriteError(str(user_error).replace(
                    f" and {self.output_dir / FAILURE_FILE}", f" ({FAILURE_FILE} could not be written either)"))
            with contextlib.suppress(AttributeError):  # the command line writes failure.json for the other failures
                (user_error or err).failure_recorded = True
            finish_wandb(wandb_logger, exit_code=getattr(user_error, "exit_code", 1))
            if user_error is None:
                raise
            raise user_error from None

    def _write_failure(self, err: BaseException) -> bool:
        from attnbench.callbacks.nan_guard import last_checkpoint

        if writes_held():  # failed before training started in a dir that holds a previous run: leave it as it was
            return True

        metrics = {}
        if self.trainer is not None:
            for k, v in self.trainer.callback_metrics.items():
                with contextlib.suppress(TypeError, ValueError, RuntimeError):
                    value = float(v)
                    metrics[k] = value if math.isfinite(value) else str(value)
        checkpoint = self.interrupt.checkpoint
        return write_failure(self.output_dir, err, where=self._where(),
                             checkpoint=str(checkpoint) if checkpoint else last_checkpoint(self.trainer),
                             metrics=metrics)


def _raised_by_lightning(err: BaseException) -> bool:
    """Whether ``err`` was raised in Lightning's own code (the last frame of its traceback): Lightning's word on a
    setting, not a bug in the model or data code it called."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    parts = Path(tb.tb_frame.f_code.co_filename).parts if tb is not None else ()
    return "pytorch_lightning" in parts or "lightning_fabric" in parts or "lightning" in parts


def hydra_error_message(err: BaseException) -> str | None:
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
