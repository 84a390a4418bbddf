"""``train(cfg) -> metrics``: one training job, and the Hydra entry point around it.

    python train.py attention=additive                # one job
    python train.py -m attention=dot,additive seed=0,1  # a sweep, one W&B group
    attnbench-train --help                            # config groups and options
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning_fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import LearningRateMonitor
from pytorch_lightning.callbacks.progress import ProgressBar

from attnbench.callbacks import RunStats
from attnbench.console import format_summary
from attnbench.data import TextClassificationDataModule
from attnbench.distributed import global_rank_from_env, use_job_command_for_ddp_children
from attnbench.errors import AttnbenchError, ConfigError
from attnbench.config_checks import check_run_config
from attnbench.faults import FaultGuard, check_output_dir
from attnbench.loggers import make_csv_logger, make_wandb_logger
from attnbench.module import TextClassifierModule, warmup_decay_lambda
from attnbench.resume import ResumeState, checkpoint_extras, resolve_checkpoint

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


def _output_dir(cfg: DictConfig) -> Path:
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.get("output_dir") or "outputs/adhoc").resolve()


def _wandb_group(cfg: DictConfig) -> str | None:
    group = cfg.logger.get("wandb", {}).get("group")
    if group:
        return str(group)
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return f"{cfg.task_name}-{Path(HydraConfig.get().sweep.dir).name}"
    return None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)  # atomic: metrics.json is complete or absent


def _build_callbacks(cfg: DictConfig, output_dir: Path, has_logger: bool = True) -> tuple[list[pl.Callback], RunStats]:
    callbacks: list[pl.Callback] = []
    progress_bar = cfg.trainer.get("enable_progress_bar", True)
    for cb_cfg in (cfg.get("callbacks") or {}).values():
        if cb_cfg is None:  # allows `~callbacks.rich_progress_bar` or `callbacks.x=null`
            continue
        is_checkpoint = str(cb_cfg.get("_target_", "")).endswith("ModelCheckpoint")
        extra = {"dirpath": str(output_dir / "checkpoints")} if is_checkpoint else {}
        callback = instantiate(cb_cfg, **extra)
        if isinstance(callback, ProgressBar) and not progress_bar:
            continue  # trainer.enable_progress_bar=false wins over the configured bar
        if isinstance(callback, LearningRateMonitor) and not has_logger:
            continue  # logger=none: nothing to log the learning rate to (Lightning would stop the run)
        callbacks.append(callback)
    stats = next((c for c in callbacks if isinstance(c, RunStats)), None)
    if stats is None:
        stats = RunStats()
        callbacks.append(stats)
    return callbacks, stats


def _processes_per_node(cfg: DictConfig) -> int:
    devices = cfg.trainer.get("devices", 1)
    return int(devices) if isinstance(devices, int) and devices > 0 else 1


def _validation_for_short_runs(cfg: DictConfig, datamodule: TextClassificationDataModule) -> dict[str, Any]:
    """``val_check_interval=max_steps`` when the run ends before its first epoch does.

    Lightning validates at epoch ends by default; a ``trainer.max_steps`` run
    shorter than one epoch would otherwise never validate, never checkpoint,
    and test its last weights rather than the best ones.
    """
    max_steps = int(cfg.trainer.get("max_steps") or -1)
    world_size = _processes_per_node(cfg) * int(cfg.trainer.get("num_nodes") or 1)
    batches_per_epoch = -(-len(datamodule.train_dataloader()) // world_size)  # each process gets 1/world_size
    limit = cfg.trainer.get("limit_train_batches")
    if isinstance(limit, int) and limit > 0:
        batches_per_epoch = min(batches_per_epoch, limit)
    interval = cfg.trainer.get("val_check_interval", 1.0)
    if 0 < max_steps < batches_per_epoch and isinstance(interval, float) and interval == 1.0:
        log.info("The run ends at step %d, before its first epoch (%d batches): validating at step %d.",
                 max_steps, batches_per_epoch, max_steps)
        return {"val_check_interval": max_steps}
    return {}


def _to_log_files(message: str, *args: Any) -> None:
    """An INFO record for the job's log files (``train.log``) only, not the console."""
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, message, args, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _log_whole_run(trainer: pl.Trainer, figures: dict[str, float]) -> None:
    """One last row in every logger (``csv/metrics.csv``, the W&B history) with the whole-run figures
    (``train/tokens_per_sec``, ``test/tokens_per_sec``, ``perf/peak_mem_bytes``, ``model/params``,
    ``time/total_sec``, the post-training ``diag/*``), at the run's last step, so that the loggers hold
    what ``metrics.json`` holds. Loggers are rank-zero-only: other ranks write nothing."""
    for logger in trainer.loggers:
        logger.log_metrics(dict(figures), step=trainer.global_step)
        logger.save()


def link_last_to_best(best: Path, last: Path) -> bool:
    """Keep one copy of the final checkpoint: ``last`` becomes a relative symlink to ``best`` when both were
    taken at the same optimizer step with the same weights (the same training state, saved twice).

    A run whose best ``val/acc`` came at its last validation otherwise keeps two files with the same
    weights (the epoch file of ``ModelCheckpoint(save_top_k=1)`` and ``last.ckpt`` of ``save_last``).
    Done once the run has finished: during training ``last.ckpt`` stays a file of its own, so an
    interrupted run resumes from it as before; afterwards ``ckpt_path=<run>/checkpoints/last.ckpt`` loads
    the same state through the link. When the best epoch is an earlier one, both files are kept.

    Returns:
        True when ``last`` is now a link to ``best``.
    """
    if not best.is_file() or not last.is_file() or last.is_symlink() or best.resolve() == last.resolve():
        return False
    import torch

    a, b = (torch.load(p, map_location="cpu", weights_only=False, mmap=True) for p in (best, last))
    weights_a, weights_b = a.get("state_dict") or {}, b.get("state_dict") or {}
    if a.get("global_step") != b.get("global_step") or weights_a.keys() != weights_b.keys() \
            or not all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a):
        return False
    tmp = last.with_name(last.name + ".link")
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(best, last.parent), tmp)
    tmp.replace(last)  # atomic: last.ckpt is the old file or the link, never absent
    return True


def module_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The ``model``, ``attention`` and ``optim`` arguments of ``TextClassifierModule`` as plain dicts."""
    return {
        "model": OmegaConf.to_container(cfg.model, resolve=True),
        "attention": OmegaConf.to_container(cfg.attention, resolve=True),
        "optim": OmegaConf.to_container(cfg.optim, resolve=True),
    }


def check_config(cfg: DictConfig) -> None:
    """Fail in a second, before any data work, if the model or optimizer config cannot work.

    Checks the top-level, data and logger keys (:func:`attnbench.config_checks.check_run_config`), then
    builds the model once with a 2-token vocabulary (cheap) and checks the schedule.

    Raises:
        ConfigError: with the offending key and value.
    """
    check_run_config(cfg)
    try:
        TextClassifierModule(vocab_size=2, num_classes=2, max_length=int(cfg.data.max_length), pad_id=0,
                             **module_kwargs(cfg))
        warmup_decay_lambda(1, 2, cfg.optim.get("schedule", "cosine"), 0.0)
    except (ValueError, KeyError, TypeError) as err:
        message = err.args[0] if err.args else repr(err)
        raise ConfigError(f"invalid config: {message}") from None


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train, select the best checkpoint on ``val/acc``, test it, and log everything.

    Args:
        cfg: the composed config of ``conf/train.yaml``.

    Returns:
        The run summary (also written to ``<output_dir>/metrics.json`` and the
        W&B run summary): ``val/acc``, ``val/acc_best``, ``test/acc``,
        ``test/f1_macro``, throughput (samples/s, tokens/s), ``perf/peak_mem_bytes``
        (bytes), ``model/params``, ``time/total_sec`` (seconds).

    Raises:
        attnbench.errors.ConfigError: a model/optimizer setting that cannot work.
        attnbench.data.DataUnavailableError: no local files and no Hub.
        attnbench.data.DataConfigError: the data config does not fit the dataset.
        attnbench.faults.NonFiniteLossError, OutOfMemory, OutputWriteError, RunInterrupted: faults during
            training, each with a message naming what to change (``failure.json`` records them).
    """
    t_start = time.perf_counter()
    check_config(cfg)
    output_dir = _output_dir(cfg)
    check_output_dir(output_dir, resuming=bool(cfg.get("ckpt_path")))
    output_dir.mkdir(parents=True, exist_ok=True)
    # Before the Trainer exists: the rank the launcher gave this process (DDP children, SLURM tasks, torchrun).
    rank_zero = global_rank_from_env(_processes_per_node(cfg)) == 0
    if HydraConfig.initialized() and "LOCAL_RANK" not in os.environ:
        use_job_command_for_ddp_children(output_dir)  # DDP children run this job, in this output dir
    ckpt_path = resolve_checkpoint(cfg.get("ckpt_path"), output_dir)
    resumed = checkpoint_extras(ckpt_path) if ckpt_path else {}
    if ckpt_path:
        log.info("Resuming from %s (epoch %d, step %d)", ckpt_path, resumed["epoch"], resumed["global_step"])
    pl.seed_everything(cfg.seed, workers=True)

    try:
        datamodule: TextClassificationDataModule = instantiate(cfg.data, seed=cfg.seed)
    except InstantiationException as err:  # Hydra wraps constructor errors; show ours as they are
        if isinstance(err.__cause__, AttnbenchError):
            raise err.__cause__ from None
        raise
    datamodule.prepare_data()
    datamodule.setup("fit")

    module = TextClassifierModule(
        vocab_size=datamodule.vocab_size,
        num_classes=datamodule.num_classes,
        max_length=datamodule.max_length,
        pad_id=datamodule.pad_id,
        **module_kwargs(cfg),
    )

    resolved = OmegaConf.to_container(cfg, resolve=True)
    if cfg.logger.get("wandb") is not None:  # the run config shows the group the run really joined
        resolved["logger"]["wandb"]["group"] = _wandb_group(cfg)
    loggers: list = []
    wandb_logger = None
    if cfg.logger.get("wandb") is not None:
        wb_cfg = cfg.logger.wandb
        wandb_logger = make_wandb_logger(
            save_dir=output_dir,
            name=cfg.run_name,
            config=resolved,
            project=wb_cfg.project,
            entity=wb_cfg.get("entity"),
            group=resolved["logger"]["wandb"]["group"],
            tags=list(wb_cfg.get("tags") or []),
            mode=wb_cfg.get("mode", "auto"),
            init_timeout=float(wb_cfg.get("init_timeout", 60)),
            start=rank_zero,
            resume=resumed.get("wandb_run"),
        )
        if wandb_logger is not None:
            loggers.append(wandb_logger)
    if cfg.logger.get("csv") is not None:
        loggers.append(make_csv_logger(output_dir))

    callbacks, _ = _build_callbacks(cfg, output_dir, has_logger=bool(loggers))
    resume_state = ResumeState()
    if wandb_logger is not None and rank_zero:
        resume_state.wandb_run = {"id": wandb_logger.experiment.id, "mode": wandb_logger.experiment.settings.mode}
    callbacks.append(resume_state)
    guard = FaultGuard(cfg, output_dir)
    try:
        trainer: pl.Trainer = instantiate(
            cfg.trainer, logger=loggers or False, callbacks=[*callbacks, guard], default_root_dir=str(output_dir),
            **_validation_for_short_runs(cfg, datamodule),
        )
    except InstantiationException as err:  # e.g. trainer=gpu on a machine without one
        if isinstance(err.__cause__, MisconfigurationException | ValueError | TypeError):
            raise ConfigError(f"invalid trainer config: {err.__cause__}") from None
        raise
    log.info(
        "Training %s on %s: %s parameters, output in %s",
        cfg.attention.name,
        cfg.data.name,
        f"{sum(p.numel() for p in module.parameters()):,}",
        output_dir,
    )
    with guard.translating(wandb_logger):  # NaN loss, OOM, Ctrl-C/SIGTERM, failed writes: one message each
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("train/", "val/"))}

        ckpt_cb = trainer.checkpoint_callback
        best = getattr(ckpt_cb, "best_model_path", "") if ckpt_cb is not None else ""
        trainer.test(module, datamodule=datamodule, ckpt_path=best or None, verbose=False)
        test_metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}

    summary: dict[str, Any] = {**fit_metrics, **test_metrics}
    for callback in callbacks:  # RunStats, AttentionDiagnostics: their whole-run figures
        summary.update(getattr(callback, "summary", None) or {})
    summary["time/total_sec"] = time.perf_counter() - t_start
    whole_run = {k: v for k, v in summary.items() if k not in fit_metrics and k not in test_metrics}
    with guard.translating(wandb_logger):
        _log_whole_run(trainer, whole_run)
    info: dict[str, Any] = {
        "run_name": cfg.run_name,
        "attention": cfg.attention.name,
        "data": cfg.data.name,
        "seed": int(cfg.seed),
        "output_dir": str(output_dir),
        "best_checkpoint": best or None,
        "world_size": trainer.world_size,
    }
    if ckpt_path:
        info["resumed_from"] = ckpt_path
    if resume_state.replay is not None:  # which batches a resume replayed (exact: false after a mid-epoch one)
        info["resume"] = resume_state.replay
    if not trainer.is_global_zero:  # one metrics.json, one W&B summary and one printout per job
        return summary
    if wandb_logger is not None:
        try:
            run = wandb_logger.experiment
            run.summary.update(summary)
            info.update(wandb_run_id=run.id, wandb_run_dir=str(Path(run.dir).parent), wandb_mode=run.settings.mode)
            if run.group:
                info["wandb_group"] = run.group
        except Exception as err:  # noqa: BLE001 - W&B must never stop a run
            warnings.warn(f"W&B summary update failed: {err}", stacklevel=1)

    with guard.translating(wandb_logger):
        _write_json(output_dir / "metrics.json", {**summary, **info})
        if best:
            link_last_to_best(Path(best), output_dir / "checkpoints" / "last.ckpt")
    if wandb_logger is not None:
        try:
            import wandb

            wandb.finish()
        except Exception as err:  # noqa: BLE001
            warnings.warn(f"W&B finish failed: {err}", stacklevel=1)
    _to_log_files("Summary: %s", json.dumps({k: round(v, 6) for k, v in sorted(summary.items())}))
    print(format_summary(summary, info), flush=True)  # once, headline first; all figures are in metrics.json
    return summary


# The command line lives in attnbench.cli (no torch at import: fast --help); these names stay importable here.
from attnbench.cli import hydra_main, main  # noqa: E402, F401

if __name__ == "__main__":  # `python -m attnbench.train ...`: how DDP child processes run the job (distributed.py)
    main()
