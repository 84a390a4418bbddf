"""SHA-256 sidecars: ``<file>.sha256`` beside a checkpoint or a data-cache file, in ``sha256sum`` format
(``<64 hex digits>  <file name>``; ``sha256sum -c <file>.sha256``, run in the file's folder, checks it by hand).

A sidecar is written after its file, atomically (a temporary file in the same folder, then ``os.replace``), and
checked before the file is read (:func:`mismatch`): bytes changed after the write (a flipped bit, a same-length
edit, a truncation) no longer match, even where the damaged file still parses. A file without a sidecar (written
by an attnbench without sidecars, or by another tool) is read unchecked.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from attnbench.paths import write_text_atomically

SUFFIX = ".sha256"
_HEX = re.compile(r"[0-9a-fA-F]{64}")


def sidecar(path: str | os.PathLike) -> Path:
    """``<path>.sha256``."""
    path = Path(path)
    return path.with_name(path.name + SUFFIX)


def sha256_of(path: str | os.PathLike) -> str:
    """The SHA-256 of the file at ``path``: 64 lowercase hex digits (read in chunks; ``hashlib.file_digest``)."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def write_sidecar(path: str | os.PathLike, digest: str | None = None, also: tuple[str, ...] = ()) -> Path:
    """Write ``<path>.sha256`` holding ``digest`` (default: :func:`sha256_of` ``path``) and ``path``'s name, atomically;
    ``also``: more digests the file may have, one line each (while a file is replaced: see :func:`replace_checked`).

    Raises:
        OSError: the sidecar could not be written (a full disk, no permission), ``filename`` its final path; no
            temporary file is left.
    """
    path = Path(path)
    target = sidecar(path)
    try:
        digests = dict.fromkeys((digest or sha256_of(path), *also))
        write_text_atomically(target, "".join(f"{d}  {path.name}\n" for d in digests))
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(target)) from err
    return target


def remove_sidecar(path: str | os.PathLike) -> None:
    """Remove ``<path>.sha256`` if there is one."""
    sidecar(path).unlink(missing_ok=True)


def mismatch(path: str | os.PathLike) -> str | None:
    """Why the file at ``path`` (a symlink: its target, beside which its sidecar lies) differs from its sidecar,
    as a phrase naming the sidecar (by its name: it lies beside the file); ``None`` when it matches, has no
    sidecar, or is itself absent (the reader names a missing file)."""
    real = Path(os.path.realpath(path))
    side = sidecar(real)
    if not side.is_file() or not real.is_file():
        return None
    try:
        digests = _digests(side)
    except OSError as err:
        return f"its digest file {side.name} cannot be read ({err.strerror})"
    if not digests:
        return f"its digest file {side.name} holds no SHA-256 digest"
    if sha256_of(real) not in digests:
        return f"its SHA-256 differs from the one written with it in {side.name}"
    return None


def _digests(side: Path) -> list[str]:
    """The digests of a sidecar's lines (lowercase), up to the first line that holds none."""
    digests = []
    for line in side.read_text(errors="replace").splitlines():
        words = line.split()
        if not words or not _HEX.fullmatch(words[0]):
            break
        digests.append(words[0].lower())
    return digests


def replace_checked(tmp: Path, path: Path, digest: str) -> None:
    """``os.replace(tmp, path)`` for a file with a sidecar, such that a kill at any moment leaves ``path`` with a
    sidecar that holds its digest: first the sidecar lists the new digest and the current file's, then the file is
    replaced, then the sidecar lists the new digest alone. (Removing the sidecar first left a window of about
    10 ms per save in which a kill left ``path`` unchecked.) ``digest``: :func:`sha256_of` ``tmp``.

    Raises:
        OSError: from the sidecar's write or the rename (``path`` is then the old file, or the new one with a
            sidecar listing both).
    """
    current: tuple[str, ...] = ()
    if path.is_file() and not path.is_symlink():  # a link is checked against its target's sidecar
        side = sidecar(path)
        try:
            current = tuple(_digests(side)) if side.is_file() else (sha256_of(path),)
        except OSError:
            current = ()
    write_sidecar(path, digest, also=current)
    os.replace(tmp, path)
    write_sidecar(path, digest)
