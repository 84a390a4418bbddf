"""Where the rows come from: a generated task, local files (``data_files``), the local mirror layout, the Hub,
packaged data.

Order: ``generator`` when set (:mod:`attnbench.data.generated`, nothing read); ``data_files`` when set (read
with ``builder``); else ``<local_dir>/<name>/<split>.parquet`` when the needed files exist (the layout
``scripts/mirror_data.py`` writes); else the Hugging Face Hub (``hub_id``, ``hub_config``); else, for the two
datasets shipped inside the package (SST-2 and TREC, 3.2 MB of Parquet), the packaged copy, so a fresh install
trains with nothing exported and no network.

The Hub is asked once: a single short TCP probe of the endpoint (``HF_ENDPOINT``, default huggingface.co,
:data:`PROBE_TIMEOUT_S`) runs before ``load_dataset``, whose own retries take 20-24 s offline. With
``HF_HUB_OFFLINE=1`` or ``HF_DATASETS_OFFLINE=1`` the probe is skipped and ``load_dataset`` reads the local
Hugging Face cache only.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import urlparse

from attnbench.data.config import BUILDERS, VAL_SPLIT_NAMES, DataConfig
from attnbench.data.errors import DataConfigError, DataUnavailableError
from attnbench.data.generated import SPLIT_NAMES
from attnbench.errors import whole_sentences, write_error
from attnbench.paths import user_path

if TYPE_CHECKING:  # ``datasets`` (about 1 s to import) loads only where rows are read
    import datasets

log = logging.getLogger("attnbench.data")

PROBE_TIMEOUT_S = 2.0
PROBE_REUSE_S = 60.0  # a probe's answer is reused this long (the preflight and the load ask within seconds)
_PROBES: dict[tuple[str, int], tuple[float, str | None]] = {}
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

    One TCP connection to the Hub endpoint's host, at most :data:`PROBE_TIMEOUT_S` seconds; no retries. Its
    answer is reused for :data:`PROBE_REUSE_S` seconds, so that :func:`preflight` and :func:`load_source` of the
    same job probe once.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or \
            os.environ.get("HF_DATASETS_OFFLINE", "0") not in ("", "0"):
        return None  # offline mode: load_dataset reads the local Hugging Face cache, fast, without retries
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    asked = _PROBES.get((host, port))
    if asked is not None and time.monotonic() - asked[0] < PROBE_REUSE_S:
        return asked[1]
    reason = None
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as err:
        reason = f"ConnectionError: cannot connect to {host}:{port} ({type(err).__name__}: {err})"
    _PROBES[(host, port)] = (time.monotonic(), reason)
    return reason


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


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """The SHA-256 hex digest of the file at ``path``'s bytes (read in ``chunk_bytes`` chunks; IMDB's 40 MB of
    Parquet take about 0.03 s)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def _read_files(builder: str, files: dict[str, list[str]],
                what: str) -> tuple[datasets.DatasetDict, dict[str, list[str]]]:
    """Each split of ``files`` read by ``builder``, and each file's SHA-256 (split -> digests,
    :func:`file_sha256`); an unreadable file is a :class:`DataConfigError` naming it.

    The digests name the Hugging Face cache folder of the split's Arrow copy: ``datasets`` would otherwise
    reuse the copy of a file edited in place within its timestamp resolution (it fingerprints a local file by
    its path and modification time)."""
    import datasets

    name, kwargs = BUILDERS[builder]
    splits, sha256 = {}, {}
    for split, paths in files.items():
        for path in paths:
            if not Path(path).is_file():
                raise DataConfigError(f"{what}: no file {path} (split {split!r}); fix data.data_files or "
                                      "data.local_dir")
        sha256[split] = [file_sha256(p) for p in paths]
        try:
            content = hashlib.sha256("".join(sha256[split]).encode()).hexdigest()[:16]
            cache_dir = Path(datasets.config.HF_DATASETS_CACHE) / "attnbench-files" / content
            splits[split] = datasets.load_dataset(name, data_files={split: paths}, split=split,
                                                  cache_dir=str(cache_dir), **kwargs)
        except Exception as err:  # noqa: BLE001 - pyarrow/pandas/datasets raise many types for a bad file
            failed = write_error(err)
            if failed is not None:  # the file was read; datasets could not write its Arrow copy
                raise DataConfigError(
                    f"Cannot write the Hugging Face datasets cache in {cache_dir.parent}: {failed.strerror or failed}. "
                    "Free space there, or set the HF_DATASETS_CACHE environment variable to a writable folder with "
                    "room.") from None
            shown = paths[0] if len(paths) == 1 else paths
            raise DataConfigError(
                f"Cannot read {shown} as {builder.upper() if builder != 'parquet' else 'Parquet'} "
                f"({whole_sentences(err)}). Re-export it, e.g. pandas.read_csv(...).to_parquet(path), "
                "or set data.builder / data.data_files / data.local_dir to match the file."
            ) from None
    return datasets.DatasetDict(splits), sha256


def _layout(folder: Path, cfg: DataConfig) -> tuple[dict[str, str | None], dict[str, list[str]], list[str]]:
    """Roles, files and missing files of the mirror layout ``<folder>/<split>.parquet``."""
    available = sorted(p.stem for p in folder.glob("*.parquet")) if folder.is_dir() else []
    roles = _roles(cfg, available)
    files = {s: [str(folder / f"{s}.parquet")] for s in needed(roles)}
    missing = [f"{s}.parquet" for s in files if s not in available]
    return roles, files, missing


@dataclass
class Plan:
    """Where the rows of a config come from, found by :func:`resolve_source` without reading a row.

    Attributes:
        kind: ``generated`` (``data.generator``), ``files`` (``data.data_files``), ``local`` (``<local_dir>/<name>/<split>.parquet``), ``hub`` or
            ``package`` (the copy shipped with attnbench).
        files: split -> the absolute paths to read (empty for ``hub``).
        roles: which split plays train, val and test (``None`` for ``hub``: the Hub's splits are known once loaded).
        where, key: as :class:`Source`'s.
        missing: the local layout's missing files (``local_dir`` set but incomplete), for the log and the message.
        fallback: for ``hub``: the packaged copy's plan, used when the Hub load fails; else ``None``.
        hub_error: why the Hub was not used (``package``), for the log.
    """

    kind: str
    files: dict[str, list[str]]
    roles: dict[str, str | None] | None
    where: str
    key: list
    missing: list[str] = field(default_factory=list)
    fallback: "Plan | None" = None
    hub_error: str | None = None


def local_root(cfg: DataConfig) -> Path | None:
    """``data.local_dir`` as an absolute path (:func:`attnbench.paths.user_path`), or ``None`` when unset."""
    return user_path(cfg.local_dir) if cfg.local_dir not in (None, "") else None


def _packaged_plan(cfg: DataConfig, hub_error: str | None) -> Plan | None:
    """The packaged copy of SST-2/TREC when ``cfg`` names it (``data.packaged``, its name and Hub id), else None."""
    if not (cfg.packaged and PACKAGED.get(cfg.name) == cfg.hub_id and cfg.hub_config is None):
        return None
    roles, files, absent = _layout(PACKAGED_DIR / cfg.name, cfg)
    if absent:
        return None
    return Plan("package", files, roles, f"package:{cfg.name}", [cfg.hub_id, cfg.hub_config, "package"],
                hub_error=hub_error)


def resolve_source(cfg: DataConfig, local_dir: Path | None) -> Plan:
    """Where the rows of ``cfg`` come from (module docstring's order), found without reading a row.

    Checks only that files exist and, when no local files are there, probes the Hub once
    (:func:`hub_offline_reason`); imports neither ``datasets`` nor torch.

    Raises:
        DataUnavailableError: no local files, no Hub, no packaged copy; one message naming all three.
        DataConfigError: a ``data.data_files`` file that does not exist, a split without an entry there
            (:meth:`DataConfig.check_data_files`).
    """
    if cfg.generator is not None:
        return Plan("generated", {}, _roles(cfg, list(SPLIT_NAMES)), f"generated:{cfg.generator}", [])
    if cfg.data_files is not None:
        cfg.check_data_files()  # every file exists, every split named has an entry
        files = {s: [str(user_path(p)) for p in paths] for s, paths in cfg.data_files.items()}
        return Plan("files", files, _roles(cfg, list(files)), f"files:{cfg.builder}", [cfg.builder, files])
    missing: list[str] = []
    if local_dir is not None:
        roles, files, missing = _layout(local_dir / cfg.name, cfg)
        if not missing:
            return Plan("local", files, roles, str(local_dir / cfg.name),
                        [cfg.hub_id, cfg.hub_config, str(local_dir)])
    hub_error = "data.hub_id is null" if cfg.hub_id is None else hub_offline_reason()
    if hub_error is None:
        return Plan("hub", {}, None, f"hub:{cfg.hub_id}", [cfg.hub_id, cfg.hub_config, str(local_dir)],
                    missing=missing, fallback=_packaged_plan(cfg, None))
    packaged = _packaged_plan(cfg, hub_error)
    if packaged is not None:
        packaged.missing = missing
        return packaged
    raise DataUnavailableError(_unavailable_message(cfg, local_dir, missing, hub_error))


def preflight(data: Mapping[str, Any]) -> Plan:
    """:func:`resolve_source` of a ``data`` config mapping (``cfg.data``): the command line's check, before torch.

    Raises:
        DataConfigError: a data key outside its range (:meth:`DataConfig.check`), a data file that does not exist.
        DataUnavailableError: as :func:`resolve_source`.
    """
    cfg = DataConfig.check(data)
    return resolve_source(cfg, local_root(cfg))


def _read_plan(cfg: DataConfig, plan: Plan) -> Source:
    """The rows of a ``files``, ``local`` or ``package`` plan. Its key holds each file's SHA-256: Hugging Face
    ``datasets`` fingerprints a local file by its path and modification time, which misses an edit in place
    within the file system's timestamp resolution (or one that restores the old time)."""
    import datasets

    builder = cfg.builder if plan.kind == "files" else "parquet"
    raw, sha256 = _read_files(builder, plan.files, cfg.name)
    return Source(datasets.DatasetDict({s: raw[s] for s in needed(plan.roles)}), plan.roles, plan.where,
                  [*plan.key, {"sha256": dict(sorted(sha256.items()))}])


def load_source(cfg: DataConfig, local_dir: Path | None) -> Source:
    """The source splits of ``cfg`` from the first place that has them (:func:`resolve_source`), read.

    Raises:
        DataUnavailableError: no local files, no Hub, no packaged copy; one message naming all three.
        DataConfigError: a file that cannot be read, a split the source lacks.
    """
    plan = resolve_source(cfg, local_dir)
    if plan.kind == "generated":
        import datasets

        from attnbench.data.generated import generated_splits, split_sizes

        sizes = split_sizes(cfg.num_train, cfg.val_size, cfg.test_size)
        log.info("Generating %s (%s): %d pairs per example, %d keys, %d values; %s rows (train/validation/test), "
                 "seed %d", cfg.name, cfg.generator, cfg.num_pairs, cfg.num_keys, cfg.num_values,
                 "/".join(f"{n:,}" for n in sizes.values()), cfg.split_seed)
        raw, key = generated_splits(cfg)
        return Source(datasets.DatasetDict({s: raw[s] for s in needed(plan.roles)}), plan.roles, plan.where, key)
    if plan.kind == "files":
        log.info("Loading %s from local %s files (%s)", cfg.name, cfg.builder, ", ".join(
            f"{s}: {', '.join(p)}" for s, p in plan.files.items()))
        return _read_plan(cfg, plan)
    if plan.kind == "local":
        log.info("Loading %s from local Parquet files in %s", cfg.name, local_dir / cfg.name)
        return _read_plan(cfg, plan)
    if plan.missing and cfg.hub_id and plan.kind == "hub":  # a packaged copy says it in its own line
        log.warning("Local data not found (%s); trying the Hugging Face Hub (%s).",
                    ", ".join(str(local_dir / cfg.name / m) for m in plan.missing), cfg.hub_id)
    if plan.kind == "hub":
        import datasets

        try:
            raw = datasets.load_dataset(cfg.hub_id, cfg.hub_config)
        except Exception as err:  # any failure here means "not reachable"
            hub_error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if plan.fallback is None:
                raise DataUnavailableError(_unavailable_message(cfg, local_dir, plan.missing, hub_error)) from None
            plan = plan.fallback
            plan.hub_error = hub_error
        else:
            roles = _roles(cfg, list(raw))
            absent = [s for s in needed(roles) if s not in raw]
            if absent:
                raise DataConfigError(f"{cfg.hub_id} has no split(s) {absent}; it has {list(raw)}. Set "
                                      "data.train_split / data.test_split (null: carve a test set) / data.val_split.")
            return Source(datasets.DatasetDict({s: raw[s] for s in needed(roles)}), roles, plan.where, plan.key)
    _say_packaged(cfg, local_dir, plan)
    return _read_plan(cfg, plan)


_SAID_PACKAGED: set[tuple[str, str | None]] = set()  # (name, local_dir) already said in this process


def _say_packaged(cfg: DataConfig, local_dir: Path | None, plan: Plan) -> None:
    """One line, once per process and dataset (a sweep's jobs share the process), that the packaged copy is used.

    INFO when no local data dir is set (the documented default of a fresh install: the packaged SST-2/TREC);
    WARNING when ``data.local_dir`` / ``ATTNBENCH_DATA_DIR`` names a folder that lacks the files (that folder was
    meant to be read). The Hub's error is logged at DEBUG.
    """
    said = (cfg.name, None if local_dir is None else str(local_dir))
    if said in _SAID_PACKAGED:
        return
    _SAID_PACKAGED.add(said)
    log.debug("%s: the Hub is not reachable (%s)", cfg.name, plan.hub_error)
    if local_dir is None:
        log.info("%s: using the copy packaged with attnbench (no ATTNBENCH_DATA_DIR, Hub not reachable).", cfg.name)
    else:
        log.warning("%s: using the copy packaged with attnbench (%s lacks it, Hub not reachable).", cfg.name,
                    local_dir / cfg.name)


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
