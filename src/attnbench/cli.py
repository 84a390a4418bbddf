"""The command line: ``python train.py ...`` / ``attnbench-train ...``, and the Hydra callbacks of every run.

Nothing here imports torch or Lightning at module level: ``--help``, a misspelt key, an unknown
option and the checks of :func:`attnbench.config_checks.check_run_config` answer before they load
(``attnbench.train`` is imported only when a job really starts).

- :func:`run_cli`: one ``Error: ...`` line for the user's mistakes (a misspelt key gets the closest
  valid keys), a multirun finishes its other jobs when one fails; warnings print as one line, never
  with the source line that raised them.
- :class:`FreshOutputDir` (a Hydra callback) gives every run and sweep a directory of its own: a
  re-run never writes into a previous run's outputs, and two jobs started in the same second get
  distinct directories.
- :class:`SweepReport` (a Hydra callback): one line per job at the end of a sweep and the report
  command; a sweep in which a job failed exits 1, with any launcher (basic, joblib, submitit) and
  sweeper (basic, Optuna).
- :func:`hydra_main`: the Hydra task; every failed job leaves ``failure.json`` in its output dir.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback as HydraCallback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, read_write

from attnbench.errors import AttnbenchError, ConfigError, OutputDirTaken, RunInterrupted
from attnbench.ranks import global_rank_from_env

log = logging.getLogger("attnbench")

FAILURE_FILE = "failure.json"

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def _sqlite_url(path: str) -> str:
    """``${attnbench.sqlite:outputs/hpo/optuna.db}`` -> ``sqlite:////abs/outputs/hpo/optuna.db``, folder created."""
    file = Path(path).expanduser().resolve()
    file.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{file}"


OmegaConf.register_new_resolver("attnbench.sqlite", _sqlite_url, replace=True)


# --------------------------------------------------------------------------------------------- output dirs
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


class FreshOutputDir(HydraCallback):
    """Hydra callback: each run or sweep gets its own directory (``<dir>_2``, ... when ``<dir>`` is taken).

    Runs before Hydra creates the job directory, so neither ``.hydra/`` nor
    ``train.log`` of an earlier run is touched.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.output_subdir).startswith(".pl_ddp_hydra_") or os.environ.get("LOCAL_RANK", "0") != "0":
            return  # Lightning re-launched this script for a DDP rank: it must share rank 0's dir
        if config.get("ckpt_path"):
            return  # resuming: the run continues in the dir it names (hydra.run.dir=<run dir> ckpt_path=last)
        wanted = Path(str(config.hydra.run.dir))
        got = claim_dir(wanted, str(config.hydra.output_subdir or ".attnbench"))
        self._set(config, "run", wanted, got)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.get("ckpt_path"):
            return  # resuming a sweep: its jobs continue in their dirs (hydra.sweep.dir=<sweep dir> ckpt_path=last)
        wanted = Path(str(config.hydra.sweep.dir))
        got = claim_dir(wanted, "multirun.yaml", marker_is_file=True)
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


SWEEP_JOBS_DIR = ".attnbench-jobs"  # <sweep dir>/.attnbench-jobs/<job num>.json: one status record per job
_SWEEP: dict[str, Path | None] = {"dir": None}  # the multirun of this (main) process, set when it starts


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
        if records.is_dir():  # a resumed sweep (same sweep dir): report this invocation's jobs only
            for old in records.glob("*.json"):
                old.unlink(missing_ok=True)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus
        from hydra.types import RunMode

        hydra_cfg = config.hydra
        if hydra_cfg.mode != RunMode.MULTIRUN or _process_rank() != 0:
            return  # a single run, or a DDP/SLURM rank other than 0 (rank 0 reports the job)
        record: dict[str, Any] = {
            "num": int(hydra_cfg.job.num),
            "output_dir": str(hydra_cfg.runtime.output_dir),
            "overrides": list(job_return.overrides or []),
            "status": "completed" if job_return.status == JobStatus.COMPLETED else "failed",
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
        folder = Path(str(hydra_cfg.sweep.dir)) / SWEEP_JOBS_DIR
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f"{record['num']}.json.tmp"
            tmp.write_text(json.dumps(record, indent=2))
            tmp.replace(folder / f"{record['num']}.json")
        except OSError as err:
            log.warning("Could not record the job's status in %s: %s", folder, err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        text, failed = sweep_summary(sweep_dir)
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


def _job_records(sweep_dir: Path | None) -> list[dict[str, Any]]:
    if sweep_dir is None or not (Path(sweep_dir) / SWEEP_JOBS_DIR).is_dir():
        return []
    records = []
    for path in (Path(sweep_dir) / SWEEP_JOBS_DIR).glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    return sorted(records, key=lambda r: r.get("num", 0))


def sweep_summary(sweep_dir: Path | None) -> tuple[str | None, int]:
    """The end-of-sweep text and the number of failed jobs, from the records :class:`SweepReport` wrote in
    ``<sweep_dir>/.attnbench-jobs/`` (``(None, 0)`` when there are none).

    The text: ``Sweep <dir>: <m> jobs, <n> failed``; one line per job, ``ok`` with its ``test/acc``,
    ``train tokens/s`` and ``test tokens/s``, or ``failed`` with ``Error: <message>``; then the command
    that builds the sweep's report (``python scripts/report.py <sweep dir>``).
    """
    records = _job_records(sweep_dir)
    if not records:
        return None, 0
    failed = [r for r in records if r.get("status") == "failed"]
    lines = [f"Sweep {sweep_dir}: {len(records)} jobs, {len(failed)} failed"
             + (" (each failed job wrote error.json and failure.json in its dir)" if failed else "")]
    labels = {"test/acc": "test/acc", "train/tokens_per_sec": "train tokens/s", "test/tokens_per_sec": "test tokens/s"}
    for r in records:
        name = Path(str(r.get("output_dir"))).name
        if r.get("status") == "failed":
            lines.append(f"  failed  {name}  Error: {r.get('error')}")
            continue
        metrics = r.get("metrics") or {}
        figures = [f"{labels[key]} {fmt.format(metrics[key]) if isinstance(metrics.get(key), int | float) else '-'}"
                   for key, fmt in SWEEP_LINE_FIGURES]
        lines.append(f"  ok      {name}  " + "  ".join(figures))
    if len(failed) < len(records):
        lines.append(f"Report: python scripts/report.py {sweep_dir}")
    return "\n".join(lines), len(failed)


def sweep_failure_summary(sweep_dir: Path | None) -> str | None:
    """:func:`sweep_summary`'s text when a job failed, else ``None``."""
    text, failed = sweep_summary(sweep_dir)
    return text if failed else None


def _report(err: BaseException) -> None:
    """The message on stderr as one unwrapped line (a path or a resume command stays copyable), and as an
    ERROR record in the job's log files (``train.log``)."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s", (err,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    print(f"Error: {err}", file=sys.stderr, flush=True)


def job_failed(err: AttnbenchError) -> None:
    """Called by the Hydra task on a user-facing error: log one line, then exit (single run, interrupt) or
    re-raise so that Hydra's multirun records the failure (:class:`SweepReport`) and goes on with the next job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    _report(err)
    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if multirun and not isinstance(err, RunInterrupted):
        raise err
    raise SystemExit(getattr(err, "exit_code", 1)) from None


def _config_key_message(err: BaseException) -> str | None:
    """One line for a misspelt key override, with the closest valid keys; ``None`` for other errors."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = err.__cause__
    if not isinstance(cause, ConfigKeyError | ConfigAttributeError):
        return None
    full_key = str(getattr(cause, "full_key", "") or "")
    key = str(getattr(cause, "key", "") or full_key.rsplit(".", 1)[-1])
    parent = getattr(cause, "parent_node", None)
    options = [str(k) for k in parent] if isinstance(parent, DictConfig) else []
    prefix = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
    close = [prefix + c for c in difflib.get_close_matches(key, options, n=3, cutoff=0.6)]
    if not prefix and isinstance(parent, DictConfig):  # a top-level key: maybe one level down (lr -> optim.lr)
        nested = {f"{group}.{sub}": str(sub) for group in parent if isinstance(parent.get(group), DictConfig)
                  for sub in parent.get(group)}
        close += [path for path, sub in nested.items() if sub in difflib.get_close_matches(key, [sub], cutoff=0.8)]
    hint = f"did you mean {' or '.join(close[:4])}? " if close else ""
    where = f"'{prefix[:-1]}'" if prefix else "the config"
    return (f"Unknown config key '{full_key}': {hint}{where} has: {', '.join(options)}. "
            f"(To add a new key on purpose, write +{full_key}=...)")


def _exit_if_jobs_failed() -> None:
    """In a multirun whose jobs failed: print :func:`sweep_summary` and exit with code 1."""
    text, failed = sweep_summary(_SWEEP["dir"])
    if failed:
        print(text, file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def run_cli(hydra_main: Callable[[], Any]) -> None:
    """Run a ``@hydra.main`` function with one-line messages for the user's mistakes.

    - a misspelt key override: the closest valid keys (Hydra alone suggests appending it with ``+``);
    - a multirun in which jobs failed: every job still runs; then one line per failed job, exit code 1
      (:class:`SweepReport` for every launcher and sweeper; here for the sweepers that re-raise a job's error);
    - Ctrl-C outside training: one line, exit code 130.

    Other Hydra errors (unknown config group option, parse errors) keep Hydra's
    message, which lists the valid options. ``HYDRA_FULL_ERROR=1`` shows full
    tracebacks as usual.
    """
    from hydra.errors import CompactHydraException

    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises instead of printing and exiting
    _SWEEP["dir"] = None
    try:
        hydra_main()
    except AttnbenchError as err:  # a multirun's sweeper re-raised a failed job's error after all jobs ran
        _exit_if_jobs_failed()
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except ValueError as err:  # after AttnbenchError: ConfigError is a ValueError too
        _exit_if_jobs_failed()
        if not str(err).startswith("Only one of --run, --multirun"):
            raise
        print(f"Error: {err}. To see what a sweep will run, print its config without -m: "
              "python train.py <overrides> --cfg hydra (hydra.sweeper.params).", file=sys.stderr)
        raise SystemExit(2) from None
    except CompactHydraException as err:
        _exit_if_jobs_failed()
        if user_full_error:
            raise
        message = _config_key_message(err)
        if message is None:
            message = str(err) + (f"\n{err.__cause__}" if err.__cause__ is not None else "")
        print(f"Error: {message}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print("Interrupted (Ctrl-C) before training started; nothing to resume.", file=sys.stderr)
        raise SystemExit(128 + signal.SIGINT) from None
    except Exception:  # a bug in a job of a basic multirun (its traceback is in its train.log): the same list
        _exit_if_jobs_failed()
        raise
    finally:
        if user_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = user_full_error


def write_failure(output_dir: Path, err: BaseException, where: str = "before training",
                  checkpoint: str | None = None, metrics: dict[str, Any] | None = None) -> None:
    """``<output_dir>/failure.json``: ``status`` (failed or interrupted), ``error`` (the message),
    ``error_type``, ``where`` (the step, or "before training" for config and data faults), ``checkpoint``
    (the one to resume from, or null) and ``metrics_so_far``. Written atomically; a failed write is a
    warning (the original error is what the user must see)."""
    record = {
        "status": "interrupted" if isinstance(err, RunInterrupted) else "failed",
        "error": str(err) if isinstance(err, AttnbenchError) else f"{type(err).__name__}: {err}",
        "error_type": type(err).__name__,
        "where": where,
        "checkpoint": checkpoint,
        "metrics_so_far": metrics or {},
    }
    try:
        output_dir = Path(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        tmp = output_dir / (FAILURE_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
        tmp.replace(output_dir / FAILURE_FILE)
    except OSError as write_err:
        log.warning("Could not write %s: %s", Path(output_dir) / FAILURE_FILE, write_err)


# --------------------------------------------------------------------------------------------- the Hydra task
def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """``warnings.showwarning`` of the command line: the message as one WARNING log record (console and
    ``train.log``), without the file, line number and source line Python adds."""
    text = " ".join(str(message).split())
    name = category.__name__
    log.warning("%s", text if name in ("UserWarning", "Warning") else f"{name}: {text}")


def _output_dir(cfg: DictConfig) -> Path:
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.get("output_dir") or "outputs/adhoc").resolve()


def _in_sweep() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _processes_per_node(cfg: DictConfig) -> int:
    devices = (cfg.get("trainer") or {}).get("devices", 1)
    return int(devices) if isinstance(devices, int) and devices > 0 else 1


def _is_rank_zero(cfg: DictConfig) -> bool:
    return global_rank_from_env(_processes_per_node(cfg)) == 0


def _record_failure(cfg: DictConfig, err: BaseException) -> None:
    """``<output_dir>/failure.json`` for any failed job (config and data faults included), unless the fault
    handler of training wrote it for this error (with the step and checkpoint), or the dir holds another run; in a
    sweep also ``error.json`` (the job's overrides and the error). Rank 0 only."""
    if not _is_rank_zero(cfg) or isinstance(err, OutputDirTaken):
        return
    output_dir = _output_dir(cfg)
    if not getattr(err, "failure_recorded", False):  # FaultGuard wrote it, with the step and the checkpoint
        trained = any((output_dir / "checkpoints").glob("*.ckpt"))
        write_failure(output_dir, err, where="after training" if trained else "before training")
    if not _in_sweep():
        return
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        tmp = output_dir / "error.json.tmp"
        tmp.write_text(json.dumps({
            "status": "failed",
            "error": f"{type(err).__name__}: {err}",
            "run_name": str(cfg.get("run_name")),
            "overrides": list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else [],
        }, indent=2, sort_keys=True))
        tmp.replace(output_dir / "error.json")
    except Exception as write_err:  # noqa: BLE001 - never hide the original error
        log.warning("Could not write error.json: %s", write_err)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    """Hydra task; returns the metric named by ``optimized_metric`` (a float, for sweepers).

    A failed job leaves ``failure.json`` in its output dir (config and data faults
    included; for a fault during training with the step and the checkpoint to
    resume from), and in a sweep ``error.json`` and an ERROR line in its
    ``train.log``; its exception goes to Hydra, so the other jobs still run,
    the Optuna sweeper records the trial as failed and goes on
    (``hydra.sweeper.max_failure_rate``), and :class:`SweepReport` lists the
    jobs when all are done (exit code 1 if one failed).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    metric = cfg.get("optimized_metric")
    try:
        from attnbench.config_checks import check_run_config

        check_run_config(cfg)  # before torch and Lightning load: a bad value answers in about a second
        from attnbench.distributed import ddp_job_scope
        from attnbench.train import train

        with ddp_job_scope():  # the next job of a multirun starts its own DDP processes
            summary = train(cfg)
        if metric and summary.get(metric) is None:
            raise ConfigError(f"optimized_metric={metric} is not in the run summary; it has {sorted(summary)}")
    except AttnbenchError as err:  # the user's input or a fault, not a bug: the message, no traceback
        _record_failure(cfg, err)
        job_failed(err)  # exits; in a multirun, re-raised so the other jobs still run
    except Exception as err:  # a bug: the traceback, and in a sweep the other jobs still run
        _record_failure(cfg, err)
        if _in_sweep():
            log.error("Job failed: %s: %s", type(err).__name__, err, exc_info=True)
        raise
    return float(summary[metric]) if metric else None


def main() -> None:
    """Command-line entry point (``python train.py ...``, ``attnbench-train ...``): see :func:`run_cli`."""
    warnings.showwarning = _show_warning
    run_cli(hydra_main)
