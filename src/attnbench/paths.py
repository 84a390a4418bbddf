"""Paths given by the user resolve against the directory the job was launched from, in both chdir modes."""

from __future__ import annotations

import os
from pathlib import Path


def user_path(path: str | os.PathLike) -> Path:
    """``path`` (``~`` expanded) as an absolute path; a relative one is taken from the launch directory.

    Under ``hydra.job.chdir=true`` the job runs inside its output dir, so a
    relative ``data.local_dir``, ``data.cache_dir`` or ``ckpt_path`` resolved
    against the current directory pointed into the run dir. Inside a Hydra job
    the base is ``hydra.utils.get_original_cwd()`` (the launch directory, also
    when chdir is false); outside one, the current directory
    (``hydra.utils.to_absolute_path`` does both).
    """
    from hydra.utils import to_absolute_path

    return Path(to_absolute_path(os.path.expanduser(str(path)))).resolve()
