"""The tokenized-data cache: one folder per key, written atomically.

A cache folder ``<cache_root>/<name>-<key>/`` holds ``tokenizer.json``, one ``datasets`` folder per split
(``train``, ``val``, ``test``: ``input_ids``, ``label``, ``row_id``) and ``meta.json``. The key hashes
everything that changes the result (:func:`cache_key`); a folder is complete or absent (it is written under a
temporary name and renamed).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

#: part of every cache key: raise it when the code builds different rows, splits or token ids from the same spec,
#: so that no cache built by other code is read
CACHE_VERSION = 6


def cache_key(name: str, spec: dict[str, Any]) -> str:
    """``<name>-<16 hex digits>``: the SHA-256 of ``spec`` (JSON, sorted keys) with :data:`CACHE_VERSION`."""
    spec = {"version": CACHE_VERSION, "name": name, **spec}
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{name}-{digest}"


def is_complete(folder: Path) -> bool:
    """Whether ``folder`` is a finished cache (its ``meta.json`` is written last)."""
    return (folder / "meta.json").is_file()


def write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Run ``write(tmp)`` on a fresh temporary folder next to ``target``, then rename it to ``target``.

    When another process finished the same ``target`` first, its folder is kept and ours removed; on any
    error nothing is left behind.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(tmp)
        try:
            tmp.rename(target)  # atomic: a cache dir is complete or absent
        except OSError:
            if not is_complete(target):  # another process won the race with a full cache
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
