"""Checks of the run config that need no model, no data and no torch: they answer in about a second."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from attnbench.optim import OptimSettings, check_precision
from attnbench.paths import user_path
from attnbench.errors import ConfigError


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
