"""Where the rows come from: local files (``data_files``), the local mirror layout, the Hub, packaged data.

Order: ``data_files`` when set (read with ``builder``); else ``<local_dir>/<name>/<split>.parquet`` when the
needed files exist (the layout ``scripts/mirror_data.py`` writes); else the Hugging Face Hub (``hub_id``,
``hub_config``); else, for the two datasets shipped inside the package (SST-2 and TREC, 3.2 MB of Parquet), the
packaged copy, so a fresh install trains with nothing exported and no network.

The Hub is asked once: a single short TCP probe of the endpoint (``HF_ENDPOINT``, default huggingface.co,
:data:`PROBE_TIMEOUT_S`) runs before ``load_dataset``, whose own retries take 20-24 s offline. With
``HF_HUB_OFFLINE=1`` or ``HF_DATASETS_OFFLINE=1`` the probe is skipped and ``load_dataset`` reads the local
Hugging Face cache only.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import datasets

from attnbench.data.config import BUILDERS, VAL_SPLIT_NAMES, DataConfig
from attnbench.data.errors import DataConfigError, DataUnavailableError
from attnbench.paths import user_path

log = logging.getLogger("attnbench.data")

PROBE_TIMEOUT_S = 2.0
PACKAGED_DIR = Path(__file__).with_name("default")
# name -> Hub id of the datasets shipped as package data (a copy of their Hub Parquet export)
PACKAGED = {"sst2": "stanfordnlp/sst2", "trec": "CogComp/trec"}


@dataclass
class Source:
    """The loaded source splits and where they came from.

    Attributes:
        splits: source split name -> ``datasets.Dataset``; holds ``train`` and, when the source has them, the
            test split and the validation split (``roles``).
        roles: ``{"train": name, "val": name or None, "test": name or None}``: which source split plays which
            part (``None``: carved from train).
        where: a short description for the log and ``meta.json`` (``hub:<id>``, a folder, ``files:<builder>``).
        key: what identifies the source in the cache key.
    """

    splits: datasets.DatasetDict
    roles: dict[str, str | None]
    where: str
    key: list = field(default_factory=list)


def hub_offline_reason() -> str | None:
    """Why the Hub cannot be reached, or ``None`` when a probe connected (or offline mode reads the HF cache).

    One TCP connection to the Hub endpoint's host, at most :data:`PROBE_TIMEOUT_S` seconds; no retries.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or \
            os.environ.get("HF_DATASETS_OFFLINE", "0") not in ("", "0"):
        return None  # offline mode: load_dataset reads the local Hugging Face cache, fast, without retries
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as err:
        return f"ConnectionError: cannot connect to {host}:{port} ({type(err).__name__}: {err})"
    return None


def _roles(cfg: DataConfig, available: list[str]) -> dict[str, str | None]:
    """Which available split is train, validation and test (see :class:`DataConfig`)."""
    val = cfg.val_split
    if val == "auto":
        val = next((s for s in VAL_SPLIT_NAMES if s in available and s not in (cfg.train_split, cfg.test_split)),
                   None)
    return {"train": cfg.train_split, "val": val, "test": cfg.test_split}


def needed(roles: dict[str, str | None]) -> list[str]:
    """The source split names of ``roles``, train first, without repeats."""
    return list(dict.fromkeys(s for s in (roles["train"], roles["test"], roles["val"]) if s is not None))


def _read_files(builder: str, files: dict[str, list[str]], what: str) -> datasets.DatasetDict:
    """Each split of ``files`` read by ``builder``; an unreadable file is a :class:`DataConfigError` naming it."""
    name, kwargs = BUILDERS[builder]
    splits = {}
    for split, paths in files.items():
        for path in paths:
            if not Path(path).is_file():
                raise DataConfigError(f"{what}: no file {path} (split {split!r}); fix data.data_files or "
                                      "data.local_dir")
        try:
            splits[split] = datasets.load_dataset(name, data_files={split: paths}, split=split, **kwargs)
        except Exception as err:  # noqa: BLE001 - pyarrow/pandas/datasets raise many types for a bad file
            cause = (str(err).splitlines() or [""])[0]
            shown = paths[0] if len(paths) == 1 else paths
            raise DataConfigError(
                f"Cannot read {shown} as {builder.upper() if builder != 'parquet' else 'Parquet'} "
                f"({type(err).__name__}: {cause[:200]}). Re-export it, e.g. pandas.read_csv(...).to_parquet(path), "
                "or set data.builder / data.data_files / data.local_dir to match the file."
            ) from None
    return datasets.DatasetDict(splits)


def _layout(folder: Path, cfg: DataConfig) -> tuple[dict[str, str | None], dict[str, list[str]], list[str]]:
    """Roles, files and missing files of the mirror layout ``<folder>/<split>.parquet``."""
    available = sorted(p.stem for p in folder.glob("*.parquet")) if folder.is_dir() else []
    roles = _roles(cfg, available)
    files = {s: [str(folder / f"{s}.parquet")] for s in needed(roles)}
    missing = [f"{s}.parquet" for s in files if s not in available]
    return roles, files, missing


def load_source(cfg: DataConfig, local_dir: Path | None) -> Source:
    """The source splits of ``cfg`` from the first place that has them (module docstring).

    Raises:
        DataUnavailableError: no local files, no Hub, no packaged copy; one message naming all three.
        DataConfigError: a file that cannot be read, a split the source lacks.
    """
    if cfg.data_files is not None:
        files = {s: [str(user_path(p)) for p in paths] for s, paths in cfg.data_files.items()}
        raw = _read_files(cfg.builder, files, f"{cfg.name}")
        roles = _roles(cfg, list(raw))
        log.info("Loading %s from local %s files (%s)", cfg.name, cfg.builder, ", ".join(
            f"{s}: {', '.join(p)}" for s, p in files.items()))
        return Source(datasets.DatasetDict({s: raw[s] for s in needed(roles)}), roles, f"files:{cfg.builder}",
                      [cfg.builder, files])
    missing: list[str] = []
    if local_dir is not None:
        roles, files, missing = _layout(local_dir / cfg.name, cfg)
        if not missing:
            log.info("Loading %s from local Parquet files in %s", cfg.name, local_dir / cfg.name)
            return Source(_read_files("parquet", files, cfg.name), roles, str(local_dir / cfg.name),
                          [cfg.hub_id, cfg.hub_config, str(local_dir)])
        if cfg.hub_id:  # with nowhere else to look, the error below says it once (not a warning, then the same)
            log.warning("Local data not found (%s); trying the Hugging Face Hub (%s).",
                        ", ".join(str(local_dir / cfg.name / m) for m in missing), cfg.hub_id)
    hub_error = "data.hub_id is null" if cfg.hub_id is None else hub_offline_reason()
    if hub_error is None:
        try:
            raw = datasets.load_dataset(cfg.hub_id, cfg.hub_config)
        except Exception as err:  # any failure here means "not reachable"
            hub_error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        else:
            roles = _roles(cfg, list(raw))
            absent = [s for s in needed(roles) if s not in raw]
            if absent:
                raise DataConfigError(f"{cfg.hub_id} has no split(s) {absent}; it has {list(raw)}. Set "
                                      "data.train_split / data.test_split (null: carve a test set) / data.val_split.")
            return Source(datasets.DatasetDict({s: raw[s] for s in needed(roles)}), roles, f"hub:{cfg.hub_id}",
                          [cfg.hub_id, cfg.hub_config, str(local_dir)])
    packaged = cfg.packaged and PACKAGED.get(cfg.name) == cfg.hub_id and cfg.hub_config is None
    if packaged:
        roles, files, absent = _layout(PACKAGED_DIR / cfg.name, cfg)
        if not absent:
            log.warning("%s: the Hub is not reachable (%s) and no local files were found: using the copy packaged "
                        "with attnbench (%s).", cfg.name, hub_error, PACKAGED_DIR / cfg.name)
            return Source(_read_files("parquet", files, cfg.name), roles, f"package:{cfg.name}",
                          [cfg.hub_id, cfg.hub_config, "package"])
    raise DataUnavailableError(_unavailable_message(cfg, local_dir, missing, hub_error))


def _unavailable_message(cfg: DataConfig, local_dir: Path | None, missing: list[str], hub_error: str) -> str:
    names = needed(_roles(cfg, []))
    if local_dir is None:
        local = "no local data dir (ATTNBENCH_DATA_DIR and data.local_dir are unset)"
    else:
        where = local_dir / cfg.name
        present = sorted(p.name for p in where.glob("*")) if where.is_dir() else []
        local = (f"no local Parquet files at {where}/{{{','.join(names)}}}.parquet (missing: {', '.join(missing)}; "
                 "the folder " + (f"holds {present[:8]})" if present else "does not exist or is empty)"))
    hub = ("no Hub dataset is named (data.hub_id is null)" if cfg.hub_id is None else
           f"the Hugging Face Hub ({cfg.hub_id}) failed: {hub_error}")
    return (f"Cannot load dataset {cfg.name!r}: {local}, and {hub}. Fix: point ATTNBENCH_DATA_DIR (or "
            f"data.local_dir=...) at a folder with {' and '.join(f'{cfg.name}/{s}.parquet' for s in names)} "
            "(python scripts/mirror_data.py writes it on a connected machine), name local files with "
            "data.data_files, or run on a machine that reaches the Hub.")
