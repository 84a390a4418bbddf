"""Experiment loggers: W&B (online when credentials exist, else offline) and CSV.

W&B never prompts and never stops training: when it cannot start online (no
credentials, server unreachable, a bad entity or project) it falls back to
offline, and when it cannot start at all the run goes on with the CSV logger
and ``metrics.json`` (one warning each, one line).
"""

from __future__ import annotations

import logging
import socket
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pytorch_lightning.loggers import CSVLogger, Logger

from attnbench.run.wandb_mode import resolve_wandb_mode, wandb_base_url, wandb_credentials_available

log = logging.getLogger(__name__)


def _one_line(err: BaseException | None) -> str:
    text = " ".join(str(err).split()) if err is not None else ""
    return f"{type(err).__name__}: {text[:300]}" if err is not None else ""


def wandb_server_unreachable(timeout: float = 3.0) -> str | None:
    """Why the W&B server (:func:`~attnbench.run.wandb_mode.wandb_base_url`) cannot be reached, or ``None``.

    One TCP connect with a ``timeout`` in seconds, so that an offline machine falls back
    at once instead of waiting ``init_timeout`` for ``wandb.init``.
    """
    url = urlparse(wandb_base_url())
    host = url.hostname or "api.wandb.ai"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as err:
        return f"cannot reach {host}:{port} ({_one_line(err)})"


def _without_anonymous(logger: Any) -> Any:
    """``logger`` (a ``WandbLogger`` not yet started) without the ``anonymous`` argument of its ``wandb.init``.

    ``WandbLogger`` always passes ``anonymous=None``; wandb >= 0.19 deprecated the setting and prints
    ``wandb: WARNING The anonymous setting has no effect`` for any value passed, ``None`` included
    (``wandb.init`` only leaves it alone when the argument is absent).
    """
    init_kwargs = getattr(logger, "_wandb_init", None)
    if isinstance(init_kwargs, dict) and init_kwargs.get("anonymous") is None:
        init_kwargs.pop("anonymous", None)
    return logger


def make_wandb_logger(
    save_dir: Path,
    name: str,
    run_config: dict[str, Any],
    project: str = "attnbench",
    entity: str | None = None,
    group: str | None = None,
    tags: list[str] | None = None,
    mode: str = "auto",
    init_timeout: float = 60.0,
    start: bool = True,
    resume: dict[str, str] | None = None,
) -> Logger | None:
    """A started ``WandbLogger``, or ``None`` if W&B cannot start at all (warns once).

    Args:
        save_dir: the job's output dir; runs go to ``save_dir/wandb/``.
        name: run name (``<attention>-<data>-s<seed>``).
        run_config: the resolved Hydra config, stored as the W&B run config.
        mode: ``auto`` | ``online`` | ``offline`` | ``disabled`` (see :func:`resolve_wandb_mode`).
        init_timeout: seconds to wait for an online start before falling back.
        start: start the run now (rank 0). ``False`` on the other processes of a
            DDP job: their logger stays a no-op, so a job makes one W&B run.
        resume: ``{"id", "mode"}`` of the run a resumed job continues. An online
            run is resumed under the same id (``resume="allow"``); an offline one
            cannot be resumed by W&B, so the job starts a new offline run whose
            config names it (``resumed_from``).

    Online needs credentials (``WANDB_API_KEY`` or ``wandb login``) and a reachable
    server; without them this goes offline at once, with a warning saying why.
    A server that refuses the run (bad entity or project, bad key) also ends
    in an offline run.
    """
    mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return None
    try:
        import wandb
        from pytorch_lightning.loggers import WandbLogger
    except ImportError as err:  # pragma: no cover - wandb is a hard dependency
        warnings.warn(f"W&B is not installed ({err}); logging to CSV and metrics.json only.", stacklevel=2)
        return None

    save_dir.mkdir(parents=True, exist_ok=True)
    if not start:
        return _without_anonymous(WandbLogger(project=project, entity=entity, name=name, group=group, save_dir=str(save_dir), mode=mode))
    attempts = [mode] if mode == "offline" else [mode, "offline"]
    last_err: Exception | str | None = None
    if mode == "online":
        if not wandb_credentials_available():
            last_err = "no API key: set WANDB_API_KEY or run `wandb login`"
        else:
            last_err = wandb_server_unreachable()
        if last_err:
            attempts = ["offline"]
    for attempt in attempts:
        resume_kwargs: dict[str, Any] = {}
        if resume and resume.get("id"):
            if attempt == "online" and resume.get("mode") == "online":
                resume_kwargs = {"id": resume["id"], "resume": "allow"}
            else:
                run_config = {**run_config, "resumed_from": resume["id"]}
        try:
            wb = _without_anonymous(WandbLogger(
                project=project,
                entity=entity,
                name=name,
                group=group,
                tags=list(tags or []),
                save_dir=str(save_dir),
                mode=attempt,
                config=run_config,
                settings=wandb.Settings(init_timeout=float(init_timeout), console="off", silent=True),
                **resume_kwargs,
            ))
            run = wb.experiment  # start now, so failures surface here and not mid-training
            if resume_kwargs:
                log.info("W&B run %s resumed (%s).", run.id, getattr(run, "url", "") or attempt)
            if attempt != mode:
                reason = last_err if isinstance(last_err, str) else _one_line(last_err)
                warnings.warn(
                    f"W&B could not start {mode} ({reason}); this run logs offline to "
                    f"{save_dir / 'wandb'} — upload it later with `wandb sync`.",
                    stacklevel=2,
                )
            return wb
        except Exception as err:  # noqa: BLE001 - W&B must never stop training
            last_err = err
            try:
                wandb.finish(exit_code=1)
            except Exception as finish_err:  # noqa: BLE001
                log.debug("wandb.finish after a failed start: %s", finish_err)
    warnings.warn(
        f"W&B could not start ({_one_line(last_err) if not isinstance(last_err, str) else last_err}); "
        "logging to CSV and metrics.json only.",
        stacklevel=2,
    )
    return None


def make_csv_logger(save_dir: Path) -> CSVLogger:
    """CSV logs in ``save_dir/csv/metrics.csv`` (no version sub-folders).

    A resumed run writes into the same folder, where Lightning's CSV writer
    would delete the earlier ``metrics.csv``: it is kept as
    ``metrics.part1.csv`` (``part2``, ... for later resumes) instead.
    """
    current = save_dir / "csv" / "metrics.csv"
    if current.is_file():
        part = 1
        while (current.parent / f"metrics.part{part}.csv").exists():
            part += 1
        current.rename(current.parent / f"metrics.part{part}.csv")
        log.info("Kept the earlier CSV log as %s", current.parent / f"metrics.part{part}.csv")
    return CSVLogger(save_dir=str(save_dir), name="csv", version="")


def csv_log_segments(save_dir: Path) -> list[Path]:
    """The CSV logs :func:`make_csv_logger` wrote into ``save_dir/csv``, oldest first: ``metrics.part1.csv``,
    ``metrics.part2.csv``, ... (one per earlier segment of a resumed run), then ``metrics.csv``; ``[]`` when there
    is none. A reader of the run's history must read them all (a resumed segment's ``metrics.csv`` starts at its
    resume step); :func:`attnbench.report_stats.join_log_segments` joins them."""
    folder = Path(save_dir) / "csv"
    parts = []
    part = 1
    while (folder / f"metrics.part{part}.csv").is_file():
        parts.append(folder / f"metrics.part{part}.csv")
        part += 1
    if (folder / "metrics.csv").is_file():
        parts.append(folder / "metrics.csv")
    return parts
