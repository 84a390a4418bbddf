"""A job's output dir: where it is, the never-overwrite rule, writes held while a resume has not started
training, atomic files (``metrics.json``; ``failure.json`` and ``error.json`` are written by
:mod:`attnbench.run.failures`), one copy of the final checkpoint.

No torch import at module level: the command line checks the dir before torch loads.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnbench.digests import mismatch, remove_sidecar
from attnbench.errors import OutputDirTaken
from attnbench.paths import atomic_target, write_text_atomically

log = logging.getLogger("attnbench")

FAILURE_FILE = "failure.json"

#: A job that continues in a dir holding a previous run's files (``ckpt_path`` with ``hydra.run.dir=<run dir>``)
#: holds its writes there until training starts (:func:`release_writes`): Hydra's ``.hydra/`` copy of the config
#: (set aside by :class:`attnbench.run.hydra_callbacks.FreshOutputDir`) and the records of its log files
#: (:class:`HeldLogFile`). A command refused or failed before then leaves every file of that dir as it was.
_HELD: dict[str, Any] = {"dir": None, "hydra_subdir": None, "handlers": []}


def hold_writes(output_dir: Path, hydra_subdir: str | None) -> None:
    """Hold this job's writes into ``output_dir`` (an existing run's dir) until :func:`release_writes`: Hydra's
    ``hydra_subdir`` copy of the config, and the records of every :class:`HeldLogFile`."""
    _HELD.update(dir=Path(output_dir), hydra_subdir=hydra_subdir)


def discard_held() -> None:
    """End the hold of a job that never started training: its held files and log records are dropped."""
    _HELD.update(dir=None, hydra_subdir=None, handlers=[])


def writes_held() -> bool:
    """True while this job holds its writes (:func:`hold_writes`): nothing may be written into its dir."""
    return _HELD["dir"] is not None


def release_writes(cfg: DictConfig) -> None:
    """Training starts: write the held ``.hydra/`` files (``config.yaml``, ``hydra.yaml``, ``overrides.yaml``, as
    Hydra does, less the hold's own settings) and the held log records; later writes go straight to their files."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write

    if _HELD["dir"] is None:
        return
    subdir = _HELD["hydra_subdir"]
    if subdir and HydraConfig.initialized():
        hydra_cfg = OmegaConf.create({"hydra": OmegaConf.to_container(HydraConfig.get())})
        from attnbench.run.hydra_callbacks import is_hold_override

        with read_write(hydra_cfg), open_dict(hydra_cfg):
            hydra_cfg.hydra.output_subdir = subdir
            hydra_cfg.hydra.overrides.hydra = [o for o in hydra_cfg.hydra.overrides.hydra if not is_hold_override(o)]
            for handler in (OmegaConf.select(hydra_cfg, "hydra.job_logging.handlers") or {}).values():
                if "held_class" in handler:  # the log file handler as configured
                    handler["class"] = handler.pop("held_class")
        folder = _HELD["dir"] / subdir
        folder.mkdir(parents=True, exist_ok=True)
        for name, node in (("config.yaml", cfg), ("hydra.yaml", hydra_cfg),
                           ("overrides.yaml", OmegaConf.create(list(HydraConfig.get().overrides.task)))):
            write_text_atomically(folder / name, OmegaConf.to_yaml(node))
    handlers = _HELD["handlers"]
    _HELD.update(dir=None, hydra_subdir=None, handlers=[])
    for handler in handlers:
        handler.write_held()


class HeldLogFile(logging.Handler):
    """A log file handler of ``hydra.job_logging`` (``held_class``, built with ``kwargs``: ``logging.FileHandler``
    or any handler taking ``filename``) that, when the file lies in the job's output dir, opens nothing and keeps
    the records in memory until :func:`release_writes` (they are dropped by :func:`discard_held`).

    :class:`attnbench.run.hydra_callbacks.FreshOutputDir` puts it in place of each such handler of a job that
    continues in a dir holding a previous run's files (:func:`attnbench.run.hydra_callbacks.held_log_files`).
    """

    def __init__(self, held_class: str, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.utils import get_class

        super().__init__()
        kwargs["filename"] = os.path.abspath(os.fspath(kwargs["filename"]))  # the cwd may change before it opens
        self._make = lambda: get_class(held_class)(**kwargs)
        self._file: logging.Handler | None = None
        job_dir = Path(HydraConfig.get().runtime.output_dir).resolve() if HydraConfig.initialized() else None
        inside = job_dir is not None and Path(kwargs["filename"]).resolve().is_relative_to(job_dir)
        self._held: list[logging.LogRecord] | None = [] if inside else None
        if inside:
            _HELD["handlers"].append(self)

    def emit(self, record: logging.LogRecord) -> None:
        if self._held is not None:
            record.msg, record.args = record.getMessage(), None  # the message as it reads now
            self._held.append(record)
            return
        if self._file is None:
            self._file = self._make()
            self._file.setFormatter(self.formatter)
        self._file.emit(record)

    def write_held(self) -> None:
        held, self._held = self._held or [], None
        for record in held:
            self.emit(record)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()


def job_output_dir(cfg: DictConfig) -> Path:
    """The job's output dir: Hydra's ``runtime.output_dir``, else ``cfg.output_dir`` (or ``outputs/adhoc``)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.get("output_dir") or "outputs/adhoc").resolve()


def copy_file(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` with its metadata, atomically (:func:`attnbench.paths.atomic_target`):
    ``target`` is the whole copy or as it was."""
    with atomic_target(target) as tmp:
        shutil.copy2(source, tmp)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented, key-sorted JSON at ``path``, atomically
    (:func:`attnbench.paths.write_text_atomically`)."""
    write_text_atomically(path, json.dumps(data, indent=2, sort_keys=True))


def finished_run(output_dir: Path) -> dict[str, Any] | None:
    """The ``metrics.json`` of the finished run in ``output_dir`` (a JSON object), or ``None`` when it holds none
    or a damaged one (which :func:`check_output_dir` refuses)."""
    try:
        metrics = json.loads((Path(output_dir) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return metrics if isinstance(metrics, dict) else None


def check_output_dir(output_dir: Path, resuming: bool = False) -> None:
    """Refuse to write into a directory that already holds a run's results.

    A resumed run (``ckpt_path`` set) continues in its own dir: its checkpoints
    and ``failure.json`` are expected there, only a finished run's
    ``metrics.json`` is refused.

    Raises:
        OutputDirTaken: (a ConfigError) ``output_dir`` holds ``metrics.json`` or a sweep's ``multirun.yaml``, or
            (when not resuming) ``failure.json`` or checkpoints.
    """
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return  # a DDP worker process started by Lightning: it shares rank 0's dir
    names = ("metrics.json", "multirun.yaml") + (() if resuming else (FAILURE_FILE,))
    taken = [name for name in names if (output_dir / name).exists()]
    if not resuming and any((output_dir / "checkpoints").glob("*.ckpt")):
        taken.append("checkpoints/")
    if taken:
        raise OutputDirTaken(
            f"{output_dir} already holds a previous run's outputs ({', '.join(taken)}); it is never overwritten. "
            "Choose another output dir (hydra.run.dir=...) or move that run away."
        )


def link_last_to_best(best: Path, last: Path) -> bool:
    """Keep one copy of the final checkpoint: ``last`` becomes a relative symlink to ``best`` when both were
    taken at the same optimizer step with the same weights (the same training state, saved twice).

    A run whose best ``val/acc`` came at its last validation otherwise keeps two files with the same
    weights (the epoch file of ``ModelCheckpoint(save_top_k=1)`` and ``last.ckpt`` of ``save_last``).
    Done once the run has finished: during training ``last.ckpt`` stays a file of its own, so an
    interrupted run resumes from it as before; afterwards ``ckpt_path=<run>/checkpoints/last.ckpt`` loads
    the same state through the link. When the best epoch is an earlier one, both files are kept.

    A file that differs from its sidecar or does not load (a damaged ``last.ckpt`` the run did not replace) is
    not the same state: both files are kept as they are.

    Returns:
        True when ``last`` is now a link to ``best``.
    """
    if not best.is_file() or not last.is_file() or last.is_symlink() or best.resolve() == last.resolve():
        return False
    import torch

    if mismatch(best) or mismatch(last):
        return False
    try:
        a, b = (torch.load(p, map_location="cpu", weights_only=False, mmap=True) for p in (best, last))
    except Exception:  # noqa: BLE001 - unreadable (truncated, not a checkpoint): not the same training state
        return False
    weights_a, weights_b = a.get("state_dict") or {}, b.get("state_dict") or {}
    if a.get("global_step") != b.get("global_step") or weights_a.keys() != weights_b.keys() \
            or not all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a):
        return False
    tmp = last.with_name(last.name + ".link")
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(best, last.parent), tmp)
    tmp.replace(last)  # atomic: last.ckpt is the old file or the link, never absent
    remove_sidecar(last)  # the link is checked against best's sidecar (attnbench.digests.mismatch follows it)
    return True
