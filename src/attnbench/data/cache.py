"""The tokenized-data cache: one folder per key, written atomically.

A cache folder ``<cache_root>/<name>-<key>/`` holds ``tokenizer.json``, one ``datasets`` folder per split
(``train``, ``val``, ``test``: ``input_ids``, ``label``, ``row_id``) and ``meta.json``, each file with its SHA-256
sidecar ``<file>.sha256`` (:mod:`attnbench.digests`). The key hashes everything that changes the result
(:func:`cache_key`); a folder is complete or absent (it is written under a temporary name and renamed). An entry
that fails to read or differs from its sidecars (a disk filled mid-copy, a file truncated or edited by hand, a
flipped byte that still parses) is logged in one line naming the damaged part, removed and built again
(:func:`read_or_rebuild`). An entry without sidecars is read unchecked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from attnbench.data.errors import DataConfigError
from attnbench.digests import SUFFIX, mismatch, write_sidecar
from attnbench.errors import whole_sentences, write_error

log = logging.getLogger(__name__)
T = TypeVar("T")

#: part of every cache key: raise it when the code builds different rows, splits or token ids from the same spec,
#: so that no cache built by other code is read
CACHE_VERSION = 7


def cache_key(name: str, spec: dict[str, Any]) -> str:
    """``<name>-<16 hex digits>``: the SHA-256 of ``spec`` (JSON, sorted keys) with :data:`CACHE_VERSION`."""
    spec = {"version": CACHE_VERSION, "name": name, **spec}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{name}-{digest}"


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` is a finished cache (its ``meta.json`` is written last)."""
    return (folder / "meta.json").is_file()


def write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Run ``write(tmp)`` on a fresh temporary folder next to ``target``, give every file it wrote its SHA-256
    sidecar, then rename the folder to ``target``.

    When another process finished the same ``target`` first, its folder is kept and ours removed; on any
    error nothing is left behind.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(tmp)
        for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
            write_sidecar(file)
        try:
            tmp.rename(target)  # atomic: a cache dir is complete or absent
        except OSError:
            if not is_complete(target):  # another process won the race with a full cache
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class CacheDamaged(Exception):
    """A part of a cache entry could not be read.

    Attributes:
        path: the damaged file or folder.
    """

    def __init__(self, path: Path, error: BaseException | str) -> None:
        self.path = Path(path)
        what = " ".join(error.split()) if isinstance(error, str) else whole_sentences(error, 300)
        super().__init__(f"{path}: {what}")  # one line of whole sentences, whatever the library's message holds


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn any error raised while reading ``path`` (part of a cache entry) into :class:`CacheDamaged` naming it.

    ``Exception`` on purpose: a damaged file surfaces as ``OSError`` or ``ValueError`` (pyarrow, ``json``),
    ``KeyError``/``TypeError`` (valid JSON of the wrong shape), ``FileNotFoundError`` (``datasets``) or the bare
    ``Exception`` of HF ``tokenizers``; only interrupts pass through.
    """
    try:
        yield
    except CacheDamaged:
        raise
    except Exception as err:
        raise CacheDamaged(path, err) from err


def check_digests(entry: Path) -> None:
    """Raise :class:`CacheDamaged` naming the first file of the cache ``entry`` whose bytes differ from its
    ``<file>.sha256`` sidecar (:func:`attnbench.digests.mismatch`). Files without a sidecar pass unchecked; a
    sidecar whose file is missing passes too (the reader names the missing file)."""
    for side in sorted(entry.rglob("*" + SUFFIX)):
        file = side.with_name(side.name[: -len(SUFFIX)])
        why = mismatch(file)
        if why is not None:
            raise CacheDamaged(file, why)


def discard(target: Path) -> None:
    """Remove the entry ``target``: renamed first into a fresh temporary folder beside it (atomic, so no reader
    ever sees it half deleted), then deleted. Gone already (another process discarded it): nothing to do."""
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}-discarded-", dir=target.parent))
    try:
        target.rename(aside / target.name)
    except FileNotFoundError:
        pass
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def read_or_rebuild(target: Path, read: Callable[[Path], T], build: Callable[[Path], None]) -> tuple[T, bool]:
    """``(read(target), True)`` when the entry ``target`` exists and reads whole, else builds it and reads it:
    ``(read(target), False)``.

    ``read`` raises :class:`CacheDamaged` (see :func:`reading`) for any part it cannot read, as does
    :func:`check_digests`, before it, for a file that differs from its sidecar; the entry is then
    logged in one warning naming that part, discarded (:func:`discard`) and built again by ``build(target)``,
    which writes it atomically (:func:`write_atomically`). An entry that is present but incomplete (no
    ``meta.json``) counts as damaged.

    Raises:
        CacheDamaged: the entry just built does not read back (a disk that returns other bytes than written).
        CacheUnwritable: the cache folder is full, read-only or not a folder.
    """
    if target.exists():
        try:
            check_digests(target)
            return read(target), True
        except CacheDamaged as err:
            log.warning("Rebuilding the damaged data cache entry %s: %s", target.name, err)
            with unwritable_as_one_line(target.parent):
                discard(target)
    with unwritable_as_one_line(target.parent):
        build(target)
    return read(target), False


class CacheUnwritable(DataConfigError):
    """The data cache folder cannot take a new entry (a full disk, a read-only folder, a file in its place)."""


@contextmanager
def unwritable_as_one_line(folder: Path) -> Iterator[None]:
    """Turn a failed write (:func:`attnbench.errors.write_error`: no space, no permission, a read-only file system,
    a file where a folder should be) into :class:`CacheUnwritable` naming ``folder`` and what to change."""
    try:
        yield
    except Exception as err:
        failed = write_error(err)
        if failed is None:
            raise
        raise CacheUnwritable(
            f"Cannot write the tokenized-data cache in {folder}: {failed.strerror or failed}. Free space there or "
            "make it writable, or point data.cache_dir (or the ATTNBENCH_CACHE_DIR environment variable) at a "
            "writable folder with room.") from None
