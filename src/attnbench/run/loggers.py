"""The run's loggers: the W&B run (mode, start, summary, finish) and the CSV log.

W&B never prompts and never stops training. ``wandb.init`` alone would do both: without credentials it asks
for a key in a terminal (``UsageError`` without one); with an unreachable server it retries for
``init_timeout`` seconds and raises ``CommError``, as it does for a run the server refuses (bad entity,
project or key); it never falls back to offline. So :func:`start_wandb` goes online only with credentials and
a reachable server, starts offline at once otherwise (one warning saying why), ends a failed online start in
an offline run, and when W&B cannot start at all the run goes on with the CSV log and ``metrics.json``.
"""

from __future__ import annotations

import contextlib
import logging
import netrc
import os
import shutil
import socket
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar
from urllib.parse import urlparse

from attnbench.errors import whole_sentences

log = logging.getLogger(__name__)
T = TypeVar("T")


def wandb_base_url() -> str:
    """The W&B server a run would use: ``WANDB_BASE_URL``, else the installed wandb's default."""
    import wandb

    return os.environ.get("WANDB_BASE_URL") or str(wandb.Settings().base_url)


def wandb_credentials_available() -> bool:
    """True when an API key is set (``WANDB_API_KEY``) or stored in ``~/.netrc`` (or ``NETRC``) for the W&B host
    (:func:`wandb_base_url`)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(wandb_base_url()).hostname or "api.wandb.ai"
    try:
        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        return bool(Path(path).is_file() and netrc.netrc(path).authenticators(host))
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    """``auto`` -> ``WANDB_MODE`` if set, else ``online`` with credentials, else ``offline``.

    Raises:
        ValueError: for a mode other than auto/online/offline/disabled.
    """
    if mode not in ("auto", "online", "offline", "disabled"):
        raise ValueError(f"logger.wandb.mode must be auto, online, offline or disabled, got {mode!r}")
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled", "dryrun"):
        return "offline" if env == "dryrun" else env
    return "online" if wandb_credentials_available() else "offline"


def wandb_server_unreachable(timeout: float = 3.0) -> str | None:
    """Why the W&B server (:func:`wandb_base_url`) cannot be reached, or ``None``: one TCP connect of at most
    ``timeout`` seconds, so an offline machine does not wait ``init_timeout``."""
    url = urlparse(wandb_base_url())
    host, port = url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as err:
        return f"cannot reach {host}:{port} ({whole_sentences(err)})"


def start_wandb(start: Callable[[str], T], mode: str, offline_dir: Path,
                without: str = "logging to CSV and metrics.json only") -> T | None:
    """``start(run_mode)``, a started W&B run (or its logger), for ``mode`` (:func:`resolve_wandb_mode`): online
    only with credentials and a reachable server, else ``start("offline")``, as after an online start that
    raised; a run that does not go online as asked warns once, saying why and that it logs to ``offline_dir``.
    ``None`` for ``disabled``, or, with one warning ending in ``without``, when W&B cannot start at all."""
    mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return None
    reason = None
    if mode == "online":
        reason = ("no API key: set WANDB_API_KEY or run `wandb login`" if not wandb_credentials_available()
                  else wandb_server_unreachable())
    for attempt in ["offline"] if mode == "offline" or reason else ["online", "offline"]:
        try:
            started = start(attempt)
        except Exception as err:  # noqa: BLE001 - W&B must never stop training
            reason = err  # wandb.init sets wandb.run only once started: nothing to finish
            continue
        if attempt != mode:
            warnings.warn(f"W&B could not start {mode} ({whole_sentences(reason)}); this run logs offline to "
                          f"{offline_dir} — upload it later with `wandb sync`.", stacklevel=3)
        return started
    warnings.warn(f"W&B could not start ({whole_sentences(reason)}); {without}.", stacklevel=3)
    return None


def make_wandb_logger(save_dir: Path, name: str, run_config: dict[str, Any], project: str = "attnbench",
                      entity: str | None = None, group: str | None = None, tags: list[str] | None = None,
                      mode: str = "auto", init_timeout: float = 60.0, start: bool = True,
                      resume: dict[str, str] | None = None) -> Any:
    """A started ``WandbLogger`` (:func:`start_wandb`), or ``None`` if W&B cannot start at all (warns once).

    Args:
        save_dir: the job's output dir; runs go to ``save_dir/wandb/``.
        name: run name (``<attention>-<data>-s<seed>``).
        run_config: the resolved Hydra config, stored as the W&B run config.
        mode: ``auto`` | ``online`` | ``offline`` | ``disabled`` (:func:`resolve_wandb_mode`).
        init_timeout: seconds W&B waits for an online start (its ``Settings.init_timeout``) before the run
            falls back to offline.
        start: start the run now (rank 0); ``False`` on the other DDP processes (a no-op logger).
        resume: ``{"id", "mode"}`` of the run a resumed job continues: an online run is resumed under its id
            (``resume="allow"``); an offline one cannot be, so a new offline run names it (``resumed_from``).
    """
    mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return None
    import wandb
    from pytorch_lightning.loggers import WandbLogger

    save_dir.mkdir(parents=True, exist_ok=True)
    common = dict(project=project, entity=entity, name=name, group=group, save_dir=str(save_dir))
    if not start:
        return _without_anonymous(WandbLogger(**common, mode=mode))

    def start_logger(attempt: str) -> Any:
        kwargs: dict[str, Any] = {}
        config = run_config
        if resume and resume.get("id"):
            if attempt == "online" and resume.get("mode") == "online":
                kwargs = {"id": resume["id"], "resume": "allow"}
            else:
                config = {**run_config, "resumed_from": resume["id"]}
        logger = _without_anonymous(WandbLogger(
            **common, tags=list(tags or []), mode=attempt, config=config,
            settings=wandb.Settings(init_timeout=float(init_timeout), console="off", silent=True), **kwargs))
        run = logger.experiment  # start now: a failure surfaces here, not mid-training
        if kwargs:
            log.info("W&B run %s resumed (%s).", run.id, getattr(run, "url", "") or attempt)
        return logger

    return start_wandb(start_logger, mode, save_dir / "wandb")


def _without_anonymous(logger: Any) -> Any:
    """``logger`` without the ``anonymous=None`` ``WandbLogger`` passes to ``wandb.init`` (wandb >= 0.19 warns
    for any value of that deprecated setting)."""
    init_kwargs = getattr(logger, "_wandb_init", None)
    if isinstance(init_kwargs, dict) and init_kwargs.get("anonymous") is None:
        init_kwargs.pop("anonymous", None)
    return logger


def wandb_summary(wandb_logger: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """Write ``summary`` into the W&B run summary; the run's id, dir, mode and group for ``metrics.json``
    (``{}``, with a warning, when W&B fails)."""
    try:
        run = wandb_logger.experiment
        run.summary.update(summary)
        info = dict(wandb_run_id=run.id, wandb_run_dir=str(Path(run.dir).parent), wandb_mode=run.settings.mode)
        if run.group:
            info["wandb_group"] = run.group
        return info
    except Exception as err:  # noqa: BLE001 - W&B must never stop a run
        warnings.warn(f"W&B summary update failed: {err}", stacklevel=1)
        return {}


def finish_wandb(wandb_logger: Any, exit_code: int = 0) -> None:
    """``wandb.finish`` of a started run (when ``wandb_logger`` is set); a failure is a warning."""
    if not wandb_logger:
        return
    try:
        import wandb

        wandb.finish(exit_code=exit_code)  # a no-op without a current run
    except Exception as err:  # noqa: BLE001 - W&B must never hide the real error
        log.warning("W&B finish failed: %s", err)


def make_csv_logger(save_dir: Path) -> Any:
    """CSV logs in ``save_dir/csv/metrics.csv`` (no version sub-folders), each save written atomically
    (:func:`atomic_csv_save`). A resumed run's earlier ``metrics.csv`` is kept as ``metrics.part1.csv``
    (``part2``, ... for later resumes)."""
    from lightning_fabric.utilities.rank_zero import rank_zero_only
    from pytorch_lightning.loggers import CSVLogger

    class AtomicCSVLogger(CSVLogger):
        @rank_zero_only
        def save(self) -> None:
            atomic_csv_save(self.experiment, super().save)

    current = save_dir / "csv" / "metrics.csv"
    if current.is_file():
        part = 1
        while (current.parent / f"metrics.part{part}.csv").exists():
            part += 1
        current.rename(current.parent / f"metrics.part{part}.csv")
        log.info("Kept the earlier CSV log as %s", current.parent / f"metrics.part{part}.csv")
    return AtomicCSVLogger(save_dir=str(save_dir), name="csv", version="")


def atomic_csv_save(writer: Any, save: Any) -> None:
    """``save()`` (Lightning's ``CSVLogger.save``: its ``ExperimentWriter`` appends the new rows to
    ``metrics.csv``, or rewrites it when a column is new) done on a copy, ``.metrics.csv.tmp`` in the same folder,
    which then replaces ``metrics.csv`` (``os.replace``): a full disk or a kill during the write leaves the
    previous ``metrics.csv`` whole, never a truncated or empty one. The copy is removed when the write fails, and
    the writer keeps the unsaved rows and its columns as they were, so the next save writes them."""
    final, columns = writer.metrics_file_path, list(writer.metrics_keys)
    tmp = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp")
    try:
        if os.path.isfile(final):
            shutil.copyfile(final, tmp)
        writer.metrics_file_path = tmp
        save()
        if os.path.isfile(tmp):
            os.replace(tmp, final)
    except BaseException as err:
        writer.metrics_keys[:] = columns
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(err, OSError) and err.filename in (None, tmp):  # name the log, not its temporary copy
            raise OSError(err.errno, err.strerror, final) from err
        raise
    finally:
        writer.metrics_file_path = final


def csv_log_segments(save_dir: Path) -> list[Path]:
    """The CSV logs of :func:`make_csv_logger` in ``save_dir/csv``, oldest first (``metrics.part1.csv``, ...,
    then ``metrics.csv``; ``[]`` when there is none): a resumed segment's ``metrics.csv`` starts at its resume
    step, so a reader of the whole history reads them all."""
    folder = Path(save_dir) / "csv"
    parts = []
    while (folder / f"metrics.part{len(parts) + 1}.csv").is_file():
        parts.append(folder / f"metrics.part{len(parts) + 1}.csv")
    return parts + ([folder / "metrics.csv"] if (folder / "metrics.csv").is_file() else [])
