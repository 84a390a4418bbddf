"""``train(cfg) -> summary``: one training job, told as a short story.

    python train.py attention=additive                # one job
    python train.py -m attention=dot,additive seed=0,1  # a sweep, one W&B group
    attnbench-train --help                            # config groups and options

Check the config (the trainer too), claim the output dir, build data, model, callbacks, trainer and, once nothing
can refuse the run, the loggers from their ``_target_`` configs, fit, test the best checkpoint, write
``metrics.json``. The command line around it is :mod:`attnbench.run.cli`; every fault's message is made in
:mod:`attnbench.run.failures`.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import LearningRateMonitor
from pytorch_lightning.callbacks.progress import ProgressBar
from pytorch_lightning.loggers import WandbLogger

from attnbench.callbacks.nan_guard import NonFiniteLossGuard
from attnbench.callbacks.throughput import Throughput
from attnbench.config import check_run_config
from attnbench.errors import ConfigError
from attnbench.models.module import TextClassifierModule
from attnbench.run.console import format_summary
from attnbench.run.ddp import global_rank_from_env, processes_per_node, use_job_command_for_ddp_children
from attnbench.run.failures import FailureHandler, from_instantiation, to_log_files
from attnbench.run.loggers import finish_wandb, wandb_summary
from attnbench.run.outputs import (check_output_dir, job_output_dir, link_last_to_best, release_writes, write_json,
                                   writes_held)
from attnbench.run.resume import (
    AtomicCheckpointIO,
    InterruptCheckpoint,
    ResumeState,
    check_checkpoint_fits,
    check_checkpoint_model,
    checkpoint_extras,
    planned_steps,
    resolve_checkpoint,
)

log = logging.getLogger("attnbench")

# Lightning's advice to add DataLoader workers does not fit a 2-core machine
# where collation is cheap; the number of workers is data.num_workers.
warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
warnings.filterwarnings("ignore", message=r".*`ThroughputMonitor`, you need to define a `flops_per_batch`.*")
# A run with fewer optimizer steps than log_every_n_steps logs its per-step series at its last step
# (TextClassifierModule.on_train_start), so Lightning's advice to lower the interval does not apply.
warnings.filterwarnings("ignore", message=r".*is smaller than the logging interval.*")
# Noise from library internals that users cannot act on.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")


def build(node: DictConfig, what: str, **kwargs: Any) -> Any:
    """``instantiate(node, **kwargs)``; a constructor's error as the user-facing error of :func:`from_instantiation`."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        shown = from_instantiation(err, what)
        if shown is err:
            raise_own_error(err)
        raise shown from None


def raise_own_error(err: InstantiationException) -> None:
    """Re-raise the exception a ``_target_``'s constructor raised (Hydra wraps it), with its own traceback: a
    bug in a user's score function, logger or callback ends at its own file and line. Without a cause, ``err``."""
    cause = err.__cause__
    if cause is None:
        raise err
    raise cause.with_traceback(cause.__traceback__) from None


def build_with_context(node: DictConfig, what: str, **context: Any) -> Any:
    """A ``_target_`` config (a logger or callback) instantiated with the run's context arguments it names.

    ``context`` holds what only the run knows (``save_dir``/``dirpath``: the output dir, ``name``, ``run_config``,
    ``group``, ``start``, ``resume``); each is passed when the target's signature has a parameter of that name
    and the config leaves it unset (absent or null). Any Lightning logger or callback, or one of the user's,
    gets them the same way. The target is called with them outside Hydra (``_partial_``), so a value such as
    the run config (which holds ``_target_`` keys) is passed as it is, never instantiated.

    Raises:
        ConfigError: an argument the target does not take or a missing one (``<what>: <Python's message>``), a
            value its constructor refuses (:func:`from_instantiation`).
    """
    factory = build(node, what, _partial_=True)  # the config's arguments; the context's are not config
    signature = inspect.signature(factory.func)
    context = {k: v for k, v in context.items() if k in signature.parameters and factory.keywords.get(k) is None}
    try:  # an argument the constructor does not take, or one it needs that is missing: the config's mistake
        signature.bind(*factory.args, **{**factory.keywords, **context})
    except TypeError as err:
        raise ConfigError(f"invalid {what.split('.')[0]} config: {what}: {err}") from None
    try:
        return factory(**context)
    except Exception as err:
        shown = from_instantiation(err, what)
        if shown is err:  # a bug in the constructor: its own traceback
            raise
        raise shown from None


def multirun_group(cfg: DictConfig) -> str | None:
    """The W&B group of a multirun's jobs (``<task_name>-<sweep dir name>``), ``None`` for a single run."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return f"{cfg.task_name}-{Path(HydraConfig.get().sweep.dir).name}"
    return None


def validation_for_short_runs(cfg: DictConfig, datamodule: Any) -> dict[str, Any]:
    """``val_check_interval=max_steps`` when the run ends before its first epoch does.

    Lightning validates at epoch ends by default; a ``trainer.max_steps`` run
    shorter than one epoch would otherwise never validate, never checkpoint,
    and test its last weights rather than the best ones.

    Raises:
        ConfigError: an integer ``trainer.val_check_interval`` larger than an epoch's training batches (with
            ``check_val_every_n_epoch`` set and validation on), which Lightning refuses only inside the fit (on a
            resume, after the run's dir has been written to); the data is known here, nothing written yet.
    """
    max_steps = int(cfg.trainer.get("max_steps") or -1)
    world_size = processes_per_node(cfg) * int(cfg.trainer.get("num_nodes") or 1)
    batches_per_epoch = -(-len(datamodule.train_dataloader()) // world_size)  # each process gets 1/world_size
    limit = cfg.trainer.get("limit_train_batches")
    if isinstance(limit, int) and limit > 0:
        batches_per_epoch = min(batches_per_epoch, limit)
    elif isinstance(limit, float) and 0 < limit < 1:  # Lightning's rule: int(batches x fraction)
        batches_per_epoch = int(batches_per_epoch * limit)
    interval = cfg.trainer.get("val_check_interval", 1.0)
    if (isinstance(interval, int) and not isinstance(interval, bool) and interval > batches_per_epoch
            and cfg.trainer.get("check_val_every_n_epoch", 1) is not None
            and cfg.trainer.get("limit_val_batches") not in (0, 0.0)):
        raise ConfigError(f"trainer.val_check_interval={interval} is more than the {batches_per_epoch} training "
                          f"batches of an epoch: set it to at most {batches_per_epoch}, to a fraction of an epoch "
                          "(e.g. 0.5), or set trainer.check_val_every_n_epoch=null to count batches across epochs.")
    if 0 < max_steps < batches_per_epoch and isinstance(interval, float) and interval == 1.0:
        log.info("The run ends at step %d, before its first epoch (%d batches): validating at step %d.",
                 max_steps, batches_per_epoch, max_steps)
        return {"val_check_interval": max_steps}
    return {}


def build_module(cfg: DictConfig, vocab_size: int, num_classes: int, max_length: int, pad_id: int) -> Any:
    """The LightningModule of ``cfg.module`` with the data's sizes and the ``_partial_`` optimizer and scheduler."""
    return instantiate(cfg.module, vocab_size=vocab_size, num_classes=num_classes, max_length=max_length,
                       pad_id=pad_id, optimizer=instantiate(cfg.module.optimizer),
                       scheduler=instantiate(cfg.module.scheduler))


def check_config(cfg: DictConfig, ranges_checked: bool = False) -> None:
    """Fail in seconds, before any data work and before anything is written, if the config cannot work.

    The range checks of :func:`attnbench.config.check_run_config`, then the model built once with a 2-token
    vocabulary (cheap: its own checks, and the score function's), the callbacks (their constructors' checks, and
    each ``monitor`` against the metrics the module logs: :func:`check_monitors`), then the trainer with them
    (:func:`check_trainer`). The callbacks and the trainer are dropped: nothing is written.

    Raises:
        ConfigError: with the offending key and value.
    """
    if not ranges_checked:
        check_run_config(cfg)
    try:
        build_module(cfg, vocab_size=2, num_classes=2, max_length=int(cfg.data.max_length), pad_id=0)
    except InstantiationException as err:
        cause = err.__cause__
        # a ValueError/KeyError is a value the constructor refused (ConfigError is one); a TypeError is a bug
        # in a constructor and keeps its own traceback
        if isinstance(cause, ValueError | KeyError):
            raise ConfigError(f"invalid config: {cause.args[0] if cause.args else repr(cause)}") from None
        raise_own_error(err)
    callbacks = configured_callbacks(cfg, job_output_dir(cfg))
    check_monitors(cfg, callbacks)
    check_trainer(cfg, list(callbacks.values()))


def check_monitors(cfg: DictConfig, callbacks: dict[str, pl.Callback]) -> None:
    """Each callback's ``monitor`` (``ModelCheckpoint``, ``EarlyStopping``) names a metric the fit logs: one of
    :data:`attnbench.models.module.TextClassifierModule.LOGGED_METRICS` other than ``test/*``, or ``epoch``/``step``
    (Lightning adds them). Lightning itself finds out at the first validation, after training (or, on a resume,
    before the first new step). An ``EarlyStopping(strict=False)`` may name a metric that is absent. With
    validation switched off (``trainer.limit_val_batches=0``) no ``val/*`` metric is logged: neither a ``monitor``
    nor ``optimized_metric`` (read from the summary once the run has finished) may name one.

    Raises:
        ConfigError: ``callbacks.<name>.monitor=<metric>: ...`` with the names that can be monitored, or
            ``trainer.limit_val_batches=0 ...`` naming the key that needs validation.
    """
    fit_metrics = [m for m in TextClassifierModule.LOGGED_METRICS if not m.startswith("test/")] + ["epoch", "step"]
    watched = {f"callbacks.{name}.monitor": callback.monitor for name, callback in callbacks.items()
               if isinstance(getattr(callback, "monitor", None), str) and getattr(callback, "strict", True)}
    for key, monitor in watched.items():
        if monitor not in fit_metrics:
            when = ("logs that metric only while testing, after the fit" if monitor in TextClassifierModule.LOGGED_METRICS
                    else "never logs that metric")
            raise ConfigError(f"{key}={monitor}: the run {when}; monitor one of {', '.join(fit_metrics)}.")
    if cfg.trainer.get("limit_val_batches") in (0, 0.0):
        needs = {**watched, "optimized_metric": str(cfg.get("optimized_metric"))}
        for key, metric in needs.items():
            if metric.startswith("val/"):
                raise ConfigError(f"trainer.limit_val_batches=0 switches validation off, but {key}={metric} needs it: "
                                  f"validate on some batches (e.g. trainer.limit_val_batches=0.2) or change {key}.")


def check_trainer(cfg: DictConfig, callbacks: list[pl.Callback] | None = None) -> None:
    """``cfg.trainer`` built once with the run's ``callbacks`` and checkpoint plugin and no logger, and dropped:
    Lightning's own checks of the accelerator, devices, strategy, precision, batch limits and callbacks
    (``trainer=gpu`` on a machine without a GPU, ``trainer.devices=0``, an unknown precision,
    ``trainer.limit_val_batches=-1``) run here, before any data work and before a logger or checkpoint dir exists.
    Lightning's start-up lines and warnings are left to the real build.

    Raises:
        ConfigError: ``invalid trainer config: <Lightning's message>`` (:func:`from_instantiation`).
    """
    quiet = [logging.getLogger(name) for name in ("pytorch_lightning.utilities.rank_zero",
                                                  "lightning_fabric.utilities.rank_zero")]
    levels = [logger.level for logger in quiet]
    try:
        for logger in quiet:
            logger.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build(cfg.trainer, "trainer", logger=False, callbacks=callbacks or [], plugins=[AtomicCheckpointIO()])
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)


def build_loggers(cfg: DictConfig, output_dir: Path, rank_zero: bool, resumed: dict[str, Any]) -> list:
    """The loggers of ``cfg.logger`` (W&B, CSV): a W&B run that cannot start is left out (warned, never fatal)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    for name, node in (cfg.logger or {}).items():  # the run config shows the group the run really joined
        if node is not None and "group" in node and node.group is None:
            config["logger"][name]["group"] = multirun_group(cfg)
    context = dict(save_dir=output_dir, name=cfg.run_name, run_config=config, group=multirun_group(cfg),
                   start=rank_zero, resume=resumed.get("wandb_run"))
    loggers = [build_with_context(node, "logger", **context) for node in (cfg.logger or {}).values() if node]
    return [logger for logger in loggers if logger is not None]


def configured_callbacks(cfg: DictConfig, output_dir: Path) -> dict[str, pl.Callback]:
    """The callbacks of ``cfg.callbacks`` by name (``ModelCheckpoint`` writes into ``<output_dir>/checkpoints``;
    building one writes nothing), those set to null and a progress bar the trainer switches off left out.

    Raises:
        ConfigError: ``invalid callbacks config: callbacks.<name>: ...`` for a value its constructor refuses, a
            ``_target_`` that cannot be imported, an argument it does not take (:func:`from_instantiation`).
    """
    callbacks = {}
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None:  # allows `~callbacks.rich_progress_bar` or `callbacks.x=null`
            continue
        callback = build_with_context(node, f"callbacks.{name}", dirpath=str(output_dir / "checkpoints"))
        if isinstance(callback, ProgressBar) and not cfg.trainer.get("enable_progress_bar", True):
            continue  # trainer.enable_progress_bar=false wins over the configured bar
        callbacks[str(name)] = callback
    return callbacks


def build_callbacks(cfg: DictConfig, output_dir: Path) -> list[pl.Callback]:
    """The callbacks of ``cfg.callbacks`` (:func:`configured_callbacks`), and a :class:`Throughput` if none is
    configured (the summary needs it)."""
    callbacks = list(configured_callbacks(cfg, output_dir).values())
    if not any(isinstance(c, Throughput) for c in callbacks):
        callbacks.append(Throughput())
    return callbacks


class StartWrites(pl.Callback):
    """The first callback of a run resumed in a dir that holds a previous run: when training starts (after the
    checkpoint restore, the sanity check and the loop's set-up, before any other ``on_train_start``) it calls
    :attr:`start`, which builds the loggers and writes the held files, then logs to the new loggers what
    Lightning logs to them at the start of a fit (the datamodule's hyperparameters, the graph, a save). A fit that
    trains no step (a run stopped while testing) starts them after the fit (:meth:`begin`), before the test."""

    start: Callable[[], None] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.begin(trainer, pl_module)

    def begin(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Call :attr:`start` once (later calls do nothing) and log the fit's start to the loggers it built."""
        if self.start is None:
            return
        self.start()
        self.start = None
        params = trainer.datamodule.hparams_initial if trainer.datamodule is not None else None
        for logger in trainer.loggers:
            if params is not None:
                logger.log_hyperparams(params)
            logger.log_graph(pl_module)
            logger.save()


def train(cfg: DictConfig, config_checked: bool = False) -> dict[str, Any]:
    """Train, select the best checkpoint on ``val/acc``, test it, and log everything.

    Args:
        cfg: the composed config of ``conf/train.yaml``.
        config_checked: :func:`attnbench.config.check_run_config` has passed (the command line runs it before
            torch loads); the checks that build the model still run.

    Returns:
        The run summary (also written to ``<output_dir>/metrics.json`` and the
        W&B run summary): ``val/acc``, ``val/acc_best``, ``test/acc``,
        ``test/f1_macro``, throughput (samples/s, tokens/s), ``perf/peak_mem_bytes``
        (bytes), ``model/params``, ``time/total_sec`` (seconds).

    Raises:
        attnbench.errors.ConfigError: a model/optimizer setting that cannot work.
        attnbench.data.DataUnavailableError: no local files and no Hub.
        attnbench.data.DataConfigError: the data config does not fit the dataset.
        attnbench.errors.NonFiniteLossError, OutOfMemory, OutputWriteError, RunInterrupted: faults during
            training, each with a message naming what to change (``failure.json`` records them).
    """
    t_start = time.perf_counter()
    check_config(cfg, ranges_checked=config_checked)
    output_dir = job_output_dir(cfg)
    check_output_dir(output_dir, resuming=bool(cfg.get("ckpt_path")))
    output_dir.mkdir(parents=True, exist_ok=True)
    # Before the Trainer exists: the rank the launcher gave this process (DDP children, SLURM tasks, torchrun).
    rank_zero = global_rank_from_env(processes_per_node(cfg)) == 0
    if HydraConfig.initialized() and "LOCAL_RANK" not in os.environ:
        use_job_command_for_ddp_children(output_dir)  # DDP children run this job, in this output dir
    ckpt_path = resolve_checkpoint(cfg.get("ckpt_path"), output_dir)
    resumed = checkpoint_extras(ckpt_path) if ckpt_path else {}
    if ckpt_path:  # another model's checkpoint: refused before the data loads
        check_checkpoint_model(ckpt_path, lambda **sizes: build_module(cfg, **sizes))
        log.info("Resuming from %s (epoch %d, step %d)", ckpt_path, resumed["epoch"], resumed["global_step"])
    pl.seed_everything(cfg.seed, workers=True)

    datamodule = build(cfg.data, "data", seed=cfg.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = build_module(cfg, datamodule.vocab_size, datamodule.num_classes, datamodule.max_length,
                          datamodule.pad_id)

    if ckpt_path:
        check_checkpoint_fits(ckpt_path, module)
    validation = validation_for_short_runs(cfg, datamodule)
    callbacks = build_callbacks(cfg, output_dir)
    resume_state = ResumeState()
    interrupt = InterruptCheckpoint(output_dir / "checkpoints")
    guards = [resume_state, NonFiniteLossGuard(lr=cfg.optim.lr), interrupt]
    # a dir that holds a previous run (a resume in place) is written from the start of training on, not before:
    # a resume that Lightning refuses inside the fit (its checkpoint restore, sanity check, loop set-up) leaves it
    # byte-identical (attnbench.run.outputs.hold_writes)
    starts_writes = [StartWrites()] if writes_held() else []
    trainer: pl.Trainer = build(cfg.trainer, "trainer", logger=False,
                                callbacks=[*starts_writes, *callbacks, *guards],
                                default_root_dir=str(output_dir), plugins=[AtomicCheckpointIO()],
                                **validation)
    started: dict[str, Any] = {"wandb": None}

    def start_writes() -> None:
        """Build the loggers (a CSV log of a resumed run sets the earlier one aside, a W&B run creates its folder),
        give them to the trainer as its ``logger=`` argument would, and write the held ``.hydra/`` copy and log."""
        loggers = build_loggers(cfg, output_dir, rank_zero, resumed)
        trainer.loggers = loggers
        if not loggers:  # logger=none, or W&B could not start: no learning rate to log (Lightning would stop the run)
            trainer.callbacks[:] = [c for c in trainer.callbacks if not isinstance(c, LearningRateMonitor)]
        started["wandb"] = wandb_logger = next((lg for lg in loggers if isinstance(lg, WandbLogger)), None)
        if wandb_logger is not None and rank_zero:
            resume_state.wandb_run = {"id": wandb_logger.experiment.id,
                                      "mode": wandb_logger.experiment.settings.mode}
        release_writes(cfg)

    log.info("Training %s on %s: %s parameters, output in %s", cfg.attention.name, cfg.data.name,
             f"{sum(p.numel() for p in module.parameters()):,}", output_dir)
    if starts_writes:
        starts_writes[0].start = start_writes
    else:  # the loggers last: nothing before the fit can refuse the run any more
        start_writes()
    failures = FailureHandler(cfg, output_dir, interrupt)
    with failures.translating(lambda: started["wandb"]):  # NaN loss, OOM, Ctrl-C/SIGTERM, failed writes: one message
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        for callback in starts_writes:  # a fit with no step left to train: the loggers and held files now
            callback.begin(trainer, module)
    wandb_logger = started["wandb"]
    with failures.translating(wandb_logger):
        fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("train/", "val/"))}
        steps = steps_done_and_planned(trainer)  # whole-run figures: in metrics.json and the loggers' last row
        stopped_by = stop_reason(trainer)
        if stopped_by:
            planned = steps.get("train/steps_planned")
            log.warning("Stopped by trainer.%s after %d of %s planned training steps: the test below measures an "
                        "unfinished run (metrics.json: stopped_by=%s; `attnbench report` shows its time per step and "
                        "the extrapolated time of the whole budget instead of its accuracy).", stopped_by,
                        trainer.global_step, "unlimited" if planned is None else f"{planned:,.0f}", stopped_by)
            partial = limit_test_batches(trainer, cfg.get("test_batches_if_stopped"), datamodule)
            if partial is not None:  # its test rate is of the first batches only: the report keeps it apart
                steps["test/limited_to_batches"] = float(partial)
        ckpt_cb = trainer.checkpoint_callback
        best = getattr(ckpt_cb, "best_model_path", "") if ckpt_cb is not None else ""
        trainer.test(module, datamodule=datamodule, ckpt_path=best or None, verbose=False)
        test_metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}

    summary: dict[str, Any] = {**fit_metrics, **test_metrics, **steps}
    measured_on: dict[str, str] = {}  # Throughput: the host of each rate (text: metrics.json and W&B, not the loggers)
    for callback in callbacks:  # Throughput, AttentionDiagnostics: their whole-run figures
        summary.update(getattr(callback, "summary", None) or {})
        measured_on.update(getattr(callback, "measured_on", None) or {})
    summary["time/total_sec"] = time.perf_counter() - t_start
    whole_run = {k: v for k, v in summary.items() if k not in fit_metrics and k not in test_metrics}
    # one last row in every logger (rank zero only), at the last step: the whole-run figures of metrics.json
    # (train/test tokens/s, perf/peak_mem_bytes, model/params, time/total_sec, the post-training diag/*)
    with failures.translating(wandb_logger):
        for logger in trainer.loggers:
            logger.log_metrics(dict(whole_run), step=trainer.global_step)
            logger.save()
    info = run_info(cfg, output_dir, best, trainer.world_size, ckpt_path, resume_state.replay)
    info["stopped_by"] = stopped_by
    info.update(class_balance(datamodule))  # the sweep's summary reads them too (macro-F1 beside an imbalanced acc)
    info.update(measured_on)
    if not trainer.is_global_zero:  # one metrics.json, one W&B summary and one printout per job
        return summary
    if wandb_logger is not None:
        info.update(wandb_summary(wandb_logger, {**summary, **measured_on}))
    with failures.translating(wandb_logger):
        write_json(output_dir / "metrics.json", {**summary, **info})
        if best:
            link_last_to_best(Path(best), output_dir / "checkpoints" / "last.ckpt")
    finish_wandb(wandb_logger)
    to_log_files(logging.INFO, "Summary: %s", json.dumps({k: round(v, 6) for k, v in sorted(summary.items())}))
    # once, headline first; all figures are in metrics.json
    print(format_summary(summary, info), flush=True)
    return summary


def class_balance(datamodule: Any) -> dict[str, Any]:
    """``num_classes`` and ``test_largest_class_share`` (the fraction of the test split in its largest class:
    the accuracy of always answering that class), or ``{}`` for a data module without those."""
    labels = getattr((getattr(datamodule, "splits", None) or {}).get("test"), "labels", None)
    if not labels:
        return {}
    largest = max(labels.count(label) for label in set(labels))
    return {"num_classes": int(datamodule.num_classes), "test_largest_class_share": largest / len(labels)}


def steps_done_and_planned(trainer: pl.Trainer) -> dict[str, float]:
    """``train/steps_done`` (optimizer steps taken, ``trainer.global_step``) and ``train/steps_planned`` (the
    budget: ``trainer.estimated_stepping_batches``, i.e. ``max_steps``, or ``max_epochs`` x batches per epoch,
    whichever ends first); the planned count is left out when the budget has no end (both -1)."""
    figures, planned = {"train/steps_done": float(trainer.global_step)}, planned_steps(trainer)
    if planned != float("inf"):
        figures["train/steps_planned"] = planned
    return figures


def stop_reason(trainer: pl.Trainer) -> str | None:
    """``"max_time"`` when Lightning's ``Timer`` (``trainer.max_time``) ended the fit before its step budget
    (``trainer.global_step < trainer.estimated_stepping_batches``), else ``None`` (the budget ran out first)."""
    from pytorch_lightning.callbacks import Timer

    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)
    remaining = timer.time_remaining() if timer is not None else None
    if remaining is None or remaining > 0:
        return None
    return "max_time" if trainer.global_step < planned_steps(trainer) else None


def limit_test_batches(trainer: pl.Trainer, batches: int | None, datamodule: pl.LightningDataModule | None = None
                       ) -> int | None:
    """Cap the test that follows a stopped fit at ``batches`` batches (``test_batches_if_stopped``; None: leave
    the trainer's ``limit_test_batches`` as configured): an unfinished run's accuracy is left out of the report,
    so its test only measures the inference rate (``test/tokens_per_sec``, over ``test/samples`` rows). Lightning
    runs the first batches: with ``data.batching=length_grouped`` the longest rows, so the rate at full length.

    The cap only ever lowers the test: the smaller of ``batches`` and what ``trainer.limit_test_batches`` asks
    for, a count or a fraction f of the loader's L batches (Lightning's rule: ``int(L * f)``, L read from
    ``datamodule.test_dataloader()``, per process under DDP). A fraction stays as it is where L is unknown.

    Returns:
        The batches (per process) the test is limited to where that is fewer than the loader's (its rate is then
        of those batches only: ``test/limited_to_batches`` in ``metrics.json``), else None."""
    if batches is None:
        return None
    current, length = trainer.limit_test_batches, None
    with contextlib.suppress(TypeError, NotImplementedError):  # an iterable loader has no length
        length = len(datamodule.test_dataloader()) if datamodule is not None else None
    if isinstance(current, float) and not isinstance(current, bool) and current < 1.0:
        if length is not None and int(length * current) >= 1:  # 0 batches: Lightning's own error names the key
            current = int(length * current)
    if isinstance(current, int) and not isinstance(current, bool):
        trainer.limit_test_batches = min(current, batches)
    elif not (isinstance(current, float) and current < 1.0):  # None or 1.0: the whole split
        trainer.limit_test_batches = batches
    log.warning("test_batches_if_stopped=%d: testing the unfinished run on %s batch(es) only (its inference rate; "
                "test/samples in metrics.json says how many)", batches, trainer.limit_test_batches)
    limit = trainer.limit_test_batches
    if isinstance(limit, int) and (length is None or limit < length):
        return limit
    return None


def run_info(cfg: DictConfig, output_dir: Path, best: str, world_size: int, ckpt_path: str | None,
             replay: dict[str, Any] | None) -> dict[str, Any]:
    """The non-metric fields of ``metrics.json``: what ran, where, from which checkpoint."""
    info: dict[str, Any] = {
        "run_name": cfg.run_name,
        "attention": cfg.attention.name,
        "data": cfg.data.name,
        "seed": int(cfg.seed),
        "output_dir": str(output_dir),
        "best_checkpoint": best or None,
        "world_size": world_size,
        # where it ran: the CPUs it could use (a sweep's jobs pinned side by side each name their own) and its
        # intra-op threads
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
    }
    if ckpt_path:
        info["resumed_from"] = ckpt_path
    if replay is not None:  # which batches a resume replayed (exact: false after a mid-epoch one)
        info["resume"] = replay
    return info

