"""The command line: ``python train.py ...`` / ``attnbench-train ...``, and the Hydra task of every job.

Nothing here imports torch or Lightning at module level: ``--help``, a misspelt key, an unknown
option, the checks of :func:`attnbench.config.check_run_config` and a job with no data anywhere
(:func:`check_data_source`) answer before they load; a value the score function refuses answers once torch has
loaded (:func:`attnbench.config.check_attention`), before Lightning and any data work
(:mod:`attnbench.run.train` is imported only when a job really starts).

- :func:`run_cli`: one ``Error: ...`` line for the user's mistakes (a misspelt key gets the closest
  valid keys, a value of the wrong type what it must be), a multirun finishes its other jobs when one
  fails; warnings print as one line, never with the source line that raised them.
- :func:`hydra_main`: the Hydra task, wrapped by :func:`attnbench.run.failures.task_wrapper`.

The Hydra callbacks (fresh output dirs, the end-of-sweep report) are in :mod:`attnbench.run.hydra_callbacks`.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

import hydra
from omegaconf import DictConfig

from attnbench.config import check_accelerator, check_attention, check_run_config, config_dir, type_error_message
from attnbench.errors import AttnbenchError, ConfigError
from attnbench.run.failures import task_wrapper
from attnbench.run.hydra_callbacks import _SWEEP, HELD_SUBDIR_ENV, settle_sweep, sweep_summary
from attnbench.run.outputs import job_output_dir

log = logging.getLogger("attnbench")

#: The configs: the installed package ``attnbench.conf`` (:func:`attnbench.config.config_dir`).
CONFIG_DIR = str(config_dir())

# Hydra refuses these together; asked for together, its message comes with how to preview a sweep instead.
_ONE_COMMAND = ("run", "multirun", "cfg", "info", "shell_completion")


def _exit_if_jobs_failed() -> None:
    """In a multirun whose jobs failed: print :func:`sweep_summary` and exit with code 1."""
    text, failed = sweep_summary(_SWEEP["dir"], settle_sweep())
    if failed:
        print(text, file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def _commands_in(argv: list[str]) -> int:
    """How many of Hydra's mutually exclusive commands (``--run``, ``-m``, ``--cfg``, ...) ``argv`` asks for,
    read with Hydra's own argument parser."""
    from hydra._internal.utils import get_args_parser

    args, _ = get_args_parser().parse_known_args(argv)
    return sum(bool(getattr(args, name, None)) for name in _ONE_COMMAND)


def run_cli(hydra_main: Callable[[], Any]) -> None:
    """Run a ``@hydra.main`` function with one-line messages for the user's mistakes.

    - a misspelt key override: the closest valid keys (Hydra alone suggests appending it with ``+``);
    - a value of the wrong type (``seed=abc``): what the key must be (:func:`attnbench.config.type_error_message`);
    - ``-m`` with ``--cfg``: how to preview a sweep (exit code 2);
    - a multirun in which jobs failed: every job still runs; then one line per failed job, exit code 1
      (``SweepReport`` for every launcher and sweeper; here for the sweepers that re-raise a job's error);
    - Ctrl-C outside training: one line, exit code 130.

    Other Hydra errors (unknown config group option, parse errors) keep Hydra's
    message, which lists the valid options. ``HYDRA_FULL_ERROR=1`` shows full
    tracebacks as usual.
    """
    from hydra.errors import CompactHydraException

    from attnbench.run.failures import hydra_error_message

    if _commands_in(sys.argv[1:]) > 1:
        print("Error: Only one of --run, --multirun, --cfg, --info and --shell_completion can be specified. "
              "To see what a sweep will run, print its config without -m: "
              "python train.py <overrides> --cfg hydra (hydra.sweeper.params).", file=sys.stderr)
        raise SystemExit(2)
    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises instead of printing and exiting
    _SWEEP.update(dir=None, staged=None)
    try:
        hydra_main()
    except AttnbenchError as err:  # a multirun's sweeper re-raised a failed job's error after all jobs ran
        _exit_if_jobs_failed()
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except CompactHydraException as err:
        _exit_if_jobs_failed()
        if user_full_error:
            raise
        message = hydra_error_message(err) or type_error_message(err)
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


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """``warnings.showwarning`` of the command line: the message as one WARNING log record (console and
    ``train.log``), without the file, line number and source line Python adds."""
    text = " ".join(str(message).split())
    name = category.__name__
    log.warning("%s", text if name in ("UserWarning", "Warning") else f"{name}: {text}")


def check_data_source(cfg: DictConfig) -> None:
    """Where the job's data comes from, found before torch and Lightning load (:func:`attnbench.data.sources.preflight`:
    file checks and one Hub probe, no row read): with no local files, no Hub and no packaged copy the job stops
    here with the data error, instead of after the seconds that importing torch takes.

    The output dir is checked first, as :func:`attnbench.run.train.train` does, so that a failed job never writes
    ``failure.json`` into another run's dir.

    Raises:
        attnbench.errors.OutputDirTaken: the output dir holds another run.
        attnbench.data.DataUnavailableError: nowhere to read the data from.
        attnbench.data.DataConfigError: a data key that does not fit (a missing ``data.data_files`` file).
    """
    if cfg.get("data") is None:
        return
    from attnbench.data.sources import preflight
    from attnbench.run.outputs import check_output_dir

    check_output_dir(job_output_dir(cfg), resuming=bool(cfg.get("ckpt_path")))
    preflight(cfg.data)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="train")
@task_wrapper
def hydra_main(cfg: DictConfig) -> float | None:
    """Hydra task; returns the metric named by ``optimized_metric`` (a float, for sweepers).

    Every failure ends in :func:`attnbench.run.failures.task_wrapper`: one line, ``failure.json``.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    metric = cfg.get("optimized_metric")
    if os.environ.get(HELD_SUBDIR_ENV) is not None:  # a job of a sweep resumed in its sweep dir: nothing is
        from attnbench.run.outputs import finished_run, hold_writes  # written into its dir until training starts

        hold_writes(job_output_dir(cfg), os.environ[HELD_SUBDIR_ENV] or None)
        finished = finished_run(job_output_dir(cfg))
        if finished is not None:  # done before: kept as it is, reported as done (as `attnbench reproduce` does)
            log.info("%s holds a finished run (metrics.json): kept as it is, not run again", job_output_dir(cfg))
            value = finished.get(metric) if metric else None
            return float(value) if isinstance(value, int | float) else None
    check_run_config(cfg)  # before torch and Lightning load: a bad value answers in about a second
    check_accelerator((cfg.get("trainer") or {}).get("accelerator"))  # this machine (the job's) has that device
    check_data_source(cfg)  # no data anywhere: the data error in about a second too
    check_attention(cfg)  # a value the score function refuses: torch only, no Lightning, no data (two seconds)
    from attnbench.run.ddp import ddp_job_scope
    from attnbench.run.train import train

    with ddp_job_scope():  # the next job of a multirun starts its own DDP processes
        summary = train(cfg, config_checked=True)
    if metric and summary.get(metric) is None:
        raise ConfigError(f"optimized_metric={metric} is not in the run summary; it has {sorted(summary)}")
    return float(summary[metric]) if metric else None


def main() -> None:
    """Command-line entry point (``python train.py ...``, ``attnbench-train ...``): see :func:`run_cli`."""
    warnings.showwarning = _show_warning
    run_cli(hydra_main)


if __name__ == "__main__":  # `python -m attnbench.run.cli ...`: how DDP child processes run the job (run/ddp.py)
    main()
