"""Paths given by the user resolve against the directory the job was launched from, in both chdir modes; files
are written whole or not at all."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def user_path(path: str | os.PathLike) -> Path:
    """``path`` (``~`` expanded) as an absolute path; a relative one (``data.local_dir``, ``data.cache_dir``,
    ``ckpt_path``) is taken from the launch directory, also under ``hydra.job.chdir=true``, where the job runs
    inside its output dir (``hydra.utils.to_absolute_path``: the original cwd inside a Hydra job, else the cwd)."""
    from hydra.utils import to_absolute_path

    return Path(to_absolute_path(os.path.expanduser(str(path)))).resolve()


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path in ``path``'s folder to write to (``.<stem>.tmp<suffix>``: the suffix kept, so that a writer
    that picks its format by suffix, such as ``savefig``, still does); when the block ends without an exception it
    replaces ``path`` (``os.replace``, atomic within one file system), else it is removed and ``path`` is as it
    was. A kill mid-write leaves at most the hidden temporary file, never a partial file under ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """``text`` (UTF-8) at ``path``, whole or not at all (:func:`atomic_target`)."""
    with atomic_target(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
