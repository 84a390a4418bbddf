"""What a job writes into its output dir besides checkpoints and logs: ``metrics.json``, ``failure.json``,
``error.json``; the never-overwrite rule; one copy of the final checkpoint.

No torch import at module level: the command line writes ``failure.json`` for config errors before torch loads.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnbench.errors import AttnbenchError, OutputDirTaken, RunInterrupted

log = logging.getLogger("attnbench")

FAILURE_FILE = "failure.json"
ERROR_FILE = "error.json"


def job_output_dir(cfg: DictConfig) -> Path:
    """The job's output dir: Hydra's ``runtime.output_dir``, else ``cfg.output_dir`` (or ``outputs/adhoc``)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.get("output_dir") or "outputs/adhoc").resolve()


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented, key-sorted JSON at ``path``, atomically: the file is complete or absent."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.replace(path)


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


def write_failure(output_dir: Path, err: BaseException, where: str = "before training",
                  checkpoint: str | None = None, metrics: dict[str, Any] | None = None) -> None:
    """``<output_dir>/failure.json``: ``status`` (failed or interrupted), ``error`` (the message),
    ``error_type``, ``where`` (the step, or "before training" for config and data faults), ``checkpoint``
    (the one to resume from, or null) and ``metrics_so_far``. Written atomically; a failed write is a
    warning (the original error is what the user must see)."""
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
    except OSError as write_err:
        log.warning("Could not write %s: %s", Path(output_dir) / FAILURE_FILE, write_err)


def record_failure(cfg: DictConfig, err: BaseException, output_dir: Path, in_sweep: bool) -> None:
    """``<output_dir>/failure.json`` for any failed job (config and data faults included), unless the fault
    handler of training wrote it for this error (with the step and checkpoint), or the dir holds another run; in a
    sweep also ``error.json`` (the job's overrides and the error). Call it on rank 0 only."""
    from hydra.core.hydra_config import HydraConfig

    if isinstance(err, OutputDirTaken):
        return
    if not getattr(err, "failure_recorded", False):  # the training fault handler wrote it, with step and checkpoint
        trained = any((output_dir / "checkpoints").glob("*.ckpt"))
        write_failure(output_dir, err, where="after training" if trained else "before training")
    if not in_sweep:
        return
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        write_json(output_dir / ERROR_FILE, {
            "status": "failed",
            "error": f"{type(err).__name__}: {err}",
            "run_name": str(cfg.get("run_name")),
            "overrides": list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else [],
        })
    except Exception as write_err:  # noqa: BLE001 - never hide the original error
        log.warning("Could not write error.json: %s", write_err)


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
