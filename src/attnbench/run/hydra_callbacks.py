"""Hydra callbacks of every run: a fresh output dir per run and sweep, and the end-of-sweep job list.

- :class:`FreshOutputDir` gives every run and sweep a directory of its own: a
  re-run never writes into a previous run's outputs, and two jobs started in the
  same second get distinct directories.
- :class:`SweepReport`: one line per job at the end of a sweep and the report
  command; a sweep in which a job failed exits 1, with any launcher (basic, joblib,
  submitit) and sweeper (basic, Optuna).

No torch import: they run in the launching process before any job starts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, OmegaConf, read_write

from attnbench.errors import AttnbenchError, ConfigError

log = logging.getLogger("attnbench")


def claim_dir(path: Path, marker: str, marker_is_file: bool = False) -> Path:
    """``path``, or ``path_2``, ``path_3``, ... : the first that is absent or empty, claimed atomically.

    A directory is claimed by creating ``marker`` in it with an exclusive create,
    so two processes racing for one name never both get it.
    """
    for i in range(1, 10_000):
        candidate = path if i == 1 else path.with_name(f"{path.name}_{i}")
        if candidate.is_dir() and any(candidate.iterdir()) or candidate.exists() and not candidate.is_dir():
            continue
        candidate.mkdir(parents=True, exist_ok=True)
        try:
            if marker_is_file:
                with open(candidate / marker, "x"):
                    pass
            else:
                (candidate / marker).mkdir()
        except FileExistsError:
            continue
        return candidate
    raise ConfigError(f"no free output directory next to {path}")


def _or_exit(claim: Any, key: str) -> Path:
    """``claim()``; an output dir that cannot be created ends the command with one line (Hydra turns a callback's
    exception into a warning, then fails with a traceback when it creates the dir itself)."""
    try:
        return claim()
    except OSError as err:
        print(f"Error: cannot create the output dir {err.filename or ''}: {err.strerror or err}. "
              f"Choose a writable {key}=<dir>.", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


class FreshOutputDir(HydraCallback):
    """Hydra callback: each run or sweep gets its own directory (``<dir>_2``, ... when ``<dir>`` is taken).

    Runs before Hydra creates the job directory, so neither ``.hydra/`` nor
    ``train.log`` of an earlier run is touched. A single run that resumes (``ckpt_path``) continues in the dir it
    names; when that dir holds files, Hydra's ``.hydra/`` copy is set aside and the job holds its writes there
    until training starts (:func:`attnbench.run.outputs.hold_writes`).
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.output_subdir).startswith(".pl_ddp_hydra_") or os.environ.get("LOCAL_RANK", "0") != "0":
            return  # Lightning re-launched this script for a DDP rank: it must share rank 0's dir
        wanted = Path(str(config.hydra.run.dir))
        if config.get("ckpt_path"):  # resuming: the run continues in the dir it names (ckpt_path=last)
            if wanted.is_dir() and any(wanted.iterdir()):  # nothing is written there until training starts
                from attnbench.run.outputs import hold_writes

                hold_writes(wanted, config.hydra.output_subdir)
                with read_write(config.hydra):
                    config.hydra.output_subdir = None
            return
        got = _or_exit(lambda: claim_dir(wanted, str(config.hydra.output_subdir or ".attnbench")), "hydra.run.dir")
        self._set(config, "run", wanted, got)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.get("ckpt_path"):  # resuming a sweep: its jobs continue in their dirs (hydra.sweep.dir=<sweep dir>)
            sweep_dir = Path(str(config.hydra.sweep.dir))
            if sweep_dir.is_dir() and any(sweep_dir.iterdir()):
                hold_sweep_writes(config, sweep_dir)
            return
        wanted = Path(str(config.hydra.sweep.dir))
        got = _or_exit(lambda: claim_dir(wanted, "multirun.yaml", marker_is_file=True), "hydra.sweep.dir")
        self._set(config, "sweep", wanted, got)
        # every job's config is composed again from the overrides: make the claimed dir one of them
        quoted = str(got).replace("\\", "\\\\").replace("'", "\\'")
        with read_write(config.hydra):
            config.hydra.overrides.hydra.append(f"hydra.sweep.dir='{quoted}'")

    @staticmethod
    def _set(config: DictConfig, key: str, wanted: Path, got: Path) -> None:
        with read_write(config.hydra):
            config.hydra[key].dir = str(got)
        if got != wanted:
            print(f"{wanted} already holds another run; this one writes to {got}", file=sys.stderr)


def split_cpus(cpus: list[int], n_jobs: int) -> list[list[int]]:
    """``cpus`` in ``n_jobs`` equal contiguous groups (a remainder is left unused).

    Raises:
        ConfigError: more jobs than CPUs.
    """
    if not 1 <= n_jobs <= len(cpus):
        raise ConfigError(f"hydra.launcher.n_jobs={n_jobs}: this process may use {len(cpus)} CPU(s) ({cpus}); "
                          f"choose 1 to {len(cpus)}")
    size = len(cpus) // n_jobs
    return [cpus[i * size:(i + 1) * size] for i in range(n_jobs)]


class PinCores(HydraCallback):
    """Hydra callback: each job of a parallel sweep on one machine (``launcher=cores``: joblib, ``n_jobs`` at
    once) runs on its own disjoint set of CPUs with as many intra-op threads, so two 1-core jobs on a 2-core
    machine never share a core.

    Built in the launching process, it splits the CPUs that process may use into ``n_jobs`` groups
    (:func:`split_cpus`). In the job's process (a joblib worker) :meth:`on_job_start` claims the first free
    group with an exclusive ``flock`` on ``<sweep dir>/.attnbench-cpus/<i>.lock`` (held until :meth:`on_job_end`;
    the OS releases it if the worker dies), pins every thread of the process to it (``sched_setaffinity``)
    and sets ``OMP_NUM_THREADS`` and, where torch is already imported, ``torch.set_num_threads`` to its size.
    The run records the set in ``metrics.json`` (``cpus``, ``torch_threads``). Without CPU affinity (not Linux)
    it does nothing.

    Args:
        n_jobs: jobs at once (``${hydra.launcher.n_jobs}``).
    """

    def __init__(self, n_jobs: int) -> None:
        self.groups = (split_cpus(sorted(os.sched_getaffinity(0)), int(n_jobs))
                       if hasattr(os, "sched_setaffinity") else [])
        self._held: Any = None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.types import RunMode

        if not self.groups or config.hydra.mode != RunMode.MULTIRUN:
            return
        import fcntl

        folder = Path(str(config.hydra.sweep.dir)) / ".attnbench-cpus"
        folder.mkdir(parents=True, exist_ok=True)
        for i, group in enumerate(self.groups):
            handle = open(folder / f"{i}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            self._held = handle
            for task in os.listdir("/proc/self/task"):  # every thread, as `taskset -a`: OpenMP's too
                os.sched_setaffinity(int(task), group)
            os.environ["OMP_NUM_THREADS"] = str(len(group))
            if "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(len(group))
            return
        log.warning("PinCores: every CPU group is taken (more jobs at once than hydra.launcher.n_jobs); this job "
                    "runs unpinned")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None


SWEEP_JOBS_DIR = ".attnbench-jobs"  # <sweep dir>/.attnbench-jobs/<job num>.json: one status record per job
_SWEEP: dict[str, Any] = {"dir": None, "held": None}  # the multirun of this (main) process, set when it starts

#: Set in each job of a sweep resumed in its sweep dir (through ``hydra.job.env_set``): the ``hydra.output_subdir``
#: whose copy the job holds until training starts, and the folder outside the sweep dir that takes its record.
HELD_SUBDIR_ENV, HELD_RECORDS_ENV = "ATTNBENCH_HELD_HYDRA_SUBDIR", "ATTNBENCH_HELD_JOB_RECORDS"
_HOLD_OVERRIDES = ("hydra.output_subdir=null", "++hydra.job_logging.handlers.file.hold=true",
                   f"++hydra.job.env_set.{HELD_SUBDIR_ENV}=", f"++hydra.job.env_set.{HELD_RECORDS_ENV}=")


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hold_sweep_writes(config: DictConfig, sweep_dir: Path) -> None:
    """A sweep resumed in a sweep dir that holds files writes nothing there until one of its jobs starts training.

    - each job holds its ``.hydra/`` copy and ``train.log`` (:func:`attnbench.run.outputs.hold_writes`; the job
      task starts the hold, Hydra's own copy is switched off by ``hydra.output_subdir=null`` and ``train.log``'s
      handler holds from the start);
    - each job's status record goes to a temporary folder outside the sweep dir;
    - Hydra's sweeper rewrites ``multirun.yaml`` before any job runs: its bytes and times are kept here.

    :func:`settle_sweep` (end of the sweep) moves the records in and keeps the new ``multirun.yaml`` when a job
    trained, and otherwise puts ``multirun.yaml`` back as it was and drops the records.
    """
    import tempfile

    multirun = sweep_dir / "multirun.yaml"
    kept = (multirun.read_bytes(), multirun.stat()) if multirun.is_file() else None
    records = Path(tempfile.mkdtemp(prefix="attnbench-jobs-"))
    _SWEEP["held"] = {"multirun": kept, "records": records}
    subdir = "" if config.hydra.output_subdir is None else str(config.hydra.output_subdir)
    values = ("", "", _quoted(subdir), _quoted(str(records)))
    file_handler = OmegaConf.select(config, "hydra.job_logging.handlers.file.class", default=None)
    holds_log = str(file_handler).endswith("RunLogFileHandler")  # another job_logging: its own handler, not held
    with read_write(config.hydra):
        config.hydra.overrides.hydra.extend([key + value for key, value in zip(_HOLD_OVERRIDES, values, strict=True)
                                             if holds_log or "job_logging" not in key])


def settle_sweep() -> list[dict[str, Any]] | None:
    """End of a sweep held by :func:`hold_sweep_writes`: its job records (``None`` for a sweep not held).

    When a job started training, its records replace those of the sweep dir and Hydra's new ``multirun.yaml``
    stays; otherwise ``multirun.yaml`` is put back byte for byte with its times, and the sweep dir is as it was.
    """
    import shutil

    from attnbench.run.outputs import write_text

    held, sweep_dir = _SWEEP.get("held"), _SWEEP.get("dir")
    if not held:
        return None
    _SWEEP["held"] = None
    records = _job_records(held["records"], folder=True)
    try:
        if any(r.get("trained") for r in records):
            folder = Path(sweep_dir) / SWEEP_JOBS_DIR
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*.json"):
                old.unlink(missing_ok=True)
            for record in records:
                write_text(folder / f"{record['num']}.json", json.dumps(record, indent=2))
        elif sweep_dir is not None:
            multirun = Path(sweep_dir) / "multirun.yaml"
            if held["multirun"] is None:
                multirun.unlink(missing_ok=True)
            else:
                data, stat = held["multirun"]
                tmp = multirun.with_name(f".{multirun.name}.tmp")  # byte for byte, atomically
                tmp.write_bytes(data)
                os.utime(tmp, ns=(stat.st_atime_ns, stat.st_mtime_ns))
                os.replace(tmp, multirun)
    except OSError as err:
        log.warning("Could not settle the sweep dir %s: %s", sweep_dir, err)
    shutil.rmtree(held["records"], ignore_errors=True)
    return records


class SweepReport(HydraCallback):
    """Hydra callback: the end-of-sweep list of failed jobs and exit code 1, whatever the launcher or sweeper.

    - :meth:`on_job_end` runs in the job's own process (the basic launcher's,
      a joblib worker, a submitit/SLURM job) and writes the job's status to
      ``<sweep dir>/.attnbench-jobs/<job num>.json`` (``status`` completed or
      failed, ``error``, ``output_dir``, ``overrides``, ``return_value``).
      A completed job's record also holds ``metrics``: its ``test/acc`` and
      tokens/s from ``metrics.json``.
    - :meth:`on_multirun_end` (main process) reads them all and prints one
      line per job (ok or failed, test/acc and tokens/s, or the error) and the
      command that builds the sweep's report (:func:`sweep_summary`); when a
      job failed it exits with code 1. Sweepers that record failures and go on
      (Optuna) reach it; the basic sweeper instead raises the first failed
      job's error after all jobs ran, and :func:`run_cli` prints the same
      lines from the same records.

    List it after ``fresh_output_dir`` in ``hydra.callbacks`` (it reads the
    claimed sweep dir). Hydra swallows exceptions raised by callbacks, so the
    exit is a ``SystemExit(1)``.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        _SWEEP["dir"] = sweep_dir
        records = sweep_dir / SWEEP_JOBS_DIR
        if records.is_dir() and not _SWEEP["held"]:  # a resumed sweep (same sweep dir): this invocation's jobs only
            for old in records.glob("*.json"):
                old.unlink(missing_ok=True)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        from attnbench.run.outputs import discard_held, writes_held

        hydra_cfg = config.hydra
        if hydra_cfg.mode != RunMode.MULTIRUN or _process_rank() != 0:
            return  # a single run, or a DDP/SLURM rank other than 0 (rank 0 reports the job)
        held_records = (hydra_cfg.job.get("env_set") or {}).get(HELD_RECORDS_ENV)
        trained = not writes_held()
        discard_held()
        if held_records and not trained:  # a resumed sweep's job that never trained: its dir stays as it was
            with contextlib.suppress(OSError):
                Path(str(hydra_cfg.runtime.output_dir)).rmdir()  # only when Hydra created it empty for this job
        record: dict[str, Any] = {
            "num": int(hydra_cfg.job.num),
            "output_dir": str(hydra_cfg.runtime.output_dir),
            "overrides": list(job_return.overrides or []),
            "status": "completed" if job_return.status == JobStatus.COMPLETED else "failed",
            "trained": trained,
            "held": bool(held_records),  # a job of a sweep resumed in its dir: it wrote nothing before training
        }
        if job_return.status == JobStatus.COMPLETED:
            value = job_return.return_value
            record["return_value"] = value if isinstance(value, int | float | str | type(None)) else repr(value)
            with contextlib.suppress(OSError, ValueError):  # the headline figures of the job's metrics.json
                metrics = json.loads((Path(record["output_dir"]) / "metrics.json").read_text())
                record["metrics"] = {key: metrics[key] for key, _ in SWEEP_LINE_FIGURES if key in metrics}
        else:
            err = getattr(job_return, "_return_value", None)
            record["error"] = str(err) if isinstance(err, AttnbenchError) else f"{type(err).__name__}: {err}"
        folder = Path(str(held_records)) if held_records else Path(str(hydra_cfg.sweep.dir)) / SWEEP_JOBS_DIR
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f"{record['num']}.json.tmp"
            tmp.write_text(json.dumps(record, indent=2))
            tmp.replace(folder / f"{record['num']}.json")
        except OSError as err:
            log.warning("Could not record the job's status in %s: %s", folder, err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        text, failed = sweep_summary(sweep_dir, settle_sweep())
        if text:
            print(text, file=sys.stderr if failed else sys.stdout, flush=True)
        if failed:
            raise SystemExit(1)


def _process_rank() -> int:
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


SWEEP_LINE_FIGURES = (("test/acc", "{:.4f}"), ("train/tokens_per_sec", "{:,.0f}"), ("test/tokens_per_sec", "{:,.0f}"))


def _job_records(sweep_dir: Path | None, folder: bool = False) -> list[dict[str, Any]]:
    """The job records of ``sweep_dir`` (of the folder ``sweep_dir`` itself with ``folder``), by job number."""
    path = None if sweep_dir is None else Path(sweep_dir) if folder else Path(sweep_dir) / SWEEP_JOBS_DIR
    if path is None or not path.is_dir():
        return []
    records = []
    for path in path.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    return sorted(records, key=lambda r: r.get("num", 0))


def sweep_summary(sweep_dir: Path | None, records: list[dict[str, Any]] | None = None) -> tuple[str | None, int]:
    """The end-of-sweep text and the number of failed jobs, from ``records`` or else the records
    :class:`SweepReport` wrote in ``<sweep_dir>/.attnbench-jobs/`` (``(None, 0)`` when there are none).

    The text: ``Sweep <dir>: <m> jobs, <n> failed``; one line per job, ``ok`` with its ``test/acc``,
    ``train tokens/s`` and ``test tokens/s``, or ``failed`` with ``Error: <message>``; then the command
    that builds the sweep's report (``attnbench report <sweep dir>``).
    """
    records = _job_records(sweep_dir) if records is None else records
    if not records:
        return None, 0
    failed = [r for r in records if r.get("status") == "failed"]
    held = [r for r in failed if r.get("trained") is False and r.get("held")]
    note = ("" if not failed else " (each failed job wrote error.json and failure.json in its dir)" if not held
            else " (refused or failed before training: nothing was written into their dirs)" if len(held) == len(failed)
            else " (a job that failed in training wrote error.json and failure.json in its dir; one refused or failed "
                 "before training wrote nothing)")
    lines = [f"Sweep {sweep_dir}: {len(records)} jobs, {len(failed)} failed{note}"]
    labels = {"test/acc": "test/acc", "train/tokens_per_sec": "train tokens/s", "test/tokens_per_sec": "test tokens/s"}
    for r in records:
        name = Path(str(r.get("output_dir"))).name
        if r.get("status") == "failed":
            error = " ".join(str(r.get("error")).split())  # one line per job, whatever the message's line breaks
            lines.append(f"  failed  {name}  Error: {error}")
            continue
        metrics = r.get("metrics") or {}
        figures = [f"{labels[key]} {fmt.format(metrics[key]) if isinstance(metrics.get(key), int | float) else '-'}"
                   for key, fmt in SWEEP_LINE_FIGURES]
        lines.append(f"  ok      {name}  " + "  ".join(figures))
    if len(failed) < len(records):
        lines.append(f"Report: attnbench report {sweep_dir}")
    return "\n".join(lines), len(failed)
