"""Which checkpoint a run resumes from (``ckpt_path``), and what attnbench stored in it.

The state Lightning's checkpoints lack (RNG states, the W&B run id, the last metrics) is written and
restored by :class:`attnbench.callbacks.resume_state.ResumeState`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from attnbench.callbacks.resume_state import CHECKPOINT_KEY
from attnbench.errors import ConfigError
from attnbench.paths import user_path

log = logging.getLogger(__name__)


def resolve_checkpoint(ckpt_path: str | None, output_dir: Path) -> str | None:
    """The checkpoint file a run resumes from, or ``None`` to start from scratch.

    Args:
        ckpt_path: ``None``; ``"last"`` — the newest of ``last*.ckpt`` and
            ``interrupted.ckpt`` (written on Ctrl-C/SIGTERM) in this job's
            ``<output_dir>/checkpoints/`` (resume a run by giving its
            directory: ``hydra.run.dir=<run dir>``, or a sweep's with
            ``hydra.sweep.dir=<sweep dir>``); or a path to a ``.ckpt`` file.
        output_dir: the job's output directory.

    Raises:
        ConfigError: ``ckpt_path`` names a file that does not exist.
    """
    if ckpt_path in (None, ""):
        return None
    if str(ckpt_path) == "last":
        folder = output_dir / "checkpoints"
        candidates = sorted([*folder.glob("last*.ckpt"), *folder.glob("interrupted.ckpt")],
                            key=lambda p: p.stat().st_mtime)
        if not candidates:
            log.warning("ckpt_path=last: no checkpoint in %s yet; training from scratch.", output_dir / "checkpoints")
            return None
        return str(candidates[-1])
    path = user_path(ckpt_path)  # relative: from the launch dir, also under hydra.job.chdir=true
    if not path.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path}: no such checkpoint file. Give a .ckpt file, or ckpt_path=last together with "
            "hydra.run.dir=<the run's output dir> to resume that run from its last checkpoint."
        )
    return str(path.resolve())


def checkpoint_extras(path: str) -> dict[str, Any]:
    """What :class:`ResumeState` stored in the checkpoint at ``path`` (``{}`` for other checkpoints)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    extras = dict(checkpoint.get(CHECKPOINT_KEY) or {})
    extras["global_step"] = int(checkpoint.get("global_step", 0))
    extras["epoch"] = int(checkpoint.get("epoch", 0))
    return extras
