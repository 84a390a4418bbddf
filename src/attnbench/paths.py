"""Paths given by the user resolve against the directory the job was launched from, in both chdir modes."""

from __future__ import annotations

import os
from pathlib import Path


def user_path(path: str | os.PathLike) -> Path:
    """``path`` (``~`` expanded) as an absolute path; a relative one (``data.local_dir``, ``data.cache_dir``,
    ``ckpt_path``) is taken from the launch directory, also under ``hydra.job.chdir=true``, where the job runs
    inside its output dir (``hydra.utils.to_absolute_path``: the original cwd inside a Hydra job, else the cwd)."""
    from hydra.utils import to_absolute_path

    return Path(to_absolute_path(os.path.expanduser(str(path)))).resolve()
