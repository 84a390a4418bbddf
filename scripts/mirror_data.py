#!/usr/bin/env python
"""Mirror a dataset into attnbench's local layout ``<out>/<name>/<split>.parquet``, for machines without the Hub.

Run on a connected machine, copy ``<out>`` to the cluster, and point ``ATTNBENCH_DATA_DIR`` (or
``data.local_dir``) at it there:

    python scripts/mirror_data.py stanfordnlp/sst2 --out /shared/attnbench-data          # -> sst2/{train,...}.parquet
    python scripts/mirror_data.py SetFit/sst5 --out /shared/attnbench-data --name sst5
    python scripts/mirror_data.py glue --config mrpc --out /shared/attnbench-data --name mrpc

The dataset argument is what ``datasets.load_dataset`` takes as ``path``: a Hub id, or a local folder of data
files (how the mirror is tested offline). Every split is written (``--splits`` to choose) with its features
(``ClassLabel`` names travel in the Parquet schema), each file written under a temporary name and renamed.
Exit codes: 0 written, 1 the dataset could not be loaded or a split is missing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def mirror(path: str, out: Path, name: str | None = None, config: str | None = None,
           splits: list[str] | None = None) -> dict[str, Path]:
    """Write every (or each named) split of ``load_dataset(path, config)`` to ``out/<name>/<split>.parquet``.

    Args:
        path: a Hub dataset id or a local folder (``datasets.load_dataset``'s ``path``).
        out: the mirror root (what ``ATTNBENCH_DATA_DIR`` will point at).
        name: the folder name (``data.name``); default: the last part of ``path``.
        config: the dataset configuration (``load_dataset``'s ``name``, ``data.hub_config``).
        splits: the splits to write; default all.

    Returns:
        ``{split: written file}``.

    Raises:
        KeyError: a named split the dataset does not have.
        Exception: whatever ``load_dataset`` raises when the dataset cannot be reached.
    """
    import datasets

    if not Path(path).exists():  # a Hub id: one short probe instead of load_dataset's 20 s of retries offline
        from attnbench.data.sources import hub_offline_reason

        reason = hub_offline_reason()
        if reason is not None:
            raise ConnectionError(f"the Hugging Face Hub is not reachable ({reason})")
    raw = datasets.load_dataset(path, config)
    chosen = list(raw) if not splits else splits
    missing = [s for s in chosen if s not in raw]
    if missing:
        raise KeyError(f"{path} has no split(s) {missing}; it has {list(raw)}")
    folder = out / (name or Path(path.rstrip("/")).name)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for split in chosen:
        target = folder / f"{split}.parquet"
        tmp = folder / f".{split}.parquet.tmp-{os.getpid()}"
        raw[split].to_parquet(str(tmp))
        tmp.replace(target)
        written[split] = target
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="Hub id (e.g. stanfordnlp/sst2) or a local folder of data files")
    parser.add_argument("--config", default=None, help="dataset configuration (load_dataset's name; data.hub_config)")
    parser.add_argument("--name", default=None, help="folder name = data.name (default: last part of the id)")
    parser.add_argument("--splits", nargs="*", default=None, help="splits to write (default: all)")
    parser.add_argument("--out", required=True, type=Path, help="mirror root: point ATTNBENCH_DATA_DIR here")
    args = parser.parse_args(argv)
    try:
        written = mirror(args.dataset, args.out, args.name, args.config, args.splits)
    except Exception as err:  # noqa: BLE001 - one line, not a traceback, for a dataset that cannot be had
        first = str(err).splitlines()[0] if str(err) else ""
        print(f"mirror_data: cannot mirror {args.dataset!r}: {type(err).__name__}: {first}", file=sys.stderr)
        return 1
    for split, target in written.items():
        print(f"{split}: {target}")
    print(f"Use it with ATTNBENCH_DATA_DIR={args.out.resolve()} (data.name={next(iter(written.values())).parent.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
