"""Hydra callbacks of every run: a fresh output dir per run and sweep, and the end-of-sweep job list.

- :class:`FreshOutputDir` gives every run and sweep a directory of its own: a
  re-run never writes into a previous run's outputs, and two jobs started in the
  same second get distinct directories; a resume that is refused or fails before
  training writes nothing into the run or sweep dir it names.
- :class:`SweepReport`: one line per job at the end of a sweep and the report
  command; a sweep in which a job failed exits 1, with any launcher (basic, joblib,
  submitit) and sweeper (basic, Optuna).

No torch import: they run in the launching process before any job starts.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from attnbench.errors import AttnbenchError, ConfigError, OutputDirTaken
from attnbench.paths import write_text_atomically

log = logging.getLogger("attnbench")


def claim_dir(path: Path, marker: str, marker_is_file: bool = False) -> Path:
    """``path``, or ``path_2``, ``path_3``, ... : the first that is absent or empty, claimed atomically.

    A directory is claimed by creating ``marker`` in it with an exclusive create,
    so two processes racing for one name never both get it.
    """
    must_be_a_folder(path)
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


def must_be_a_folder(path: Path) -> None:
    """Refuse an output dir that names something other than a folder (a regular file, or a path through one),
    instead of writing next to it.

    Raises:
        NotADirectoryError: naming ``path``.
    """
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                what = "it is a file, not a folder" if part == path else f"{part} is a file, not a folder"
                raise NotADirectoryError(errno.ENOTDIR, what, str(path))
            return


def _or_exit(claim: Any, key: str) -> Any:
    """``claim()``; an output dir that cannot be created, or that holds another run or sweep
    (:class:`~attnbench.errors.OutputDirTaken`), ends the command with one line before Hydra writes anything
    (Hydra turns a callback's exception into a warning and goes on)."""
    try:
        return claim()
    except OutputDirTaken as err:
        print(f"Error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except OSError as err:
        print(f"Error: cannot create the output dir {err.filename or ''}: {err.strerror or err}. "
              f"Choose a writable {key}=<dir>.", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


class FreshOutputDir(HydraCallback):
    """Hydra callback: each run or sweep gets its own directory (``<dir>_2``, ... when ``<dir>`` is taken), and a
    command that resumes in a dir holding files writes nothing there until one of its jobs starts training.

    It runs after Hydra composed the config and before Hydra creates or opens anything in the output dir:

    - a new run or sweep claims a free dir (:func:`claim_dir`);
    - a run resumed in its dir (``ckpt_path`` with ``hydra.run.dir=<run dir>``) is refused here when that dir
      holds a finished run (:func:`attnbench.run.outputs.check_output_dir`); otherwise Hydra's ``.hydra/`` copy
      and every log file of ``hydra.job_logging`` in the dir are held until training starts
      (:func:`attnbench.run.outputs.hold_writes`, :class:`~attnbench.run.outputs.HeldLogFile`);
    - a sweep resumed in its sweep dir (``-m ... ckpt_path=last hydra.sweep.dir=<sweep dir>``) is refused here
      when that dir holds no sweep or another sweep, another set of jobs (:func:`check_same_sweep`); otherwise
      its jobs run as the recorded sweep numbered them, each in its own dir (:func:`run_as_recorded`), and
      :func:`hold_sweep_writes`.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.output_subdir).startswith(".pl_ddp_hydra_") or os.environ.get("LOCAL_RANK", "0") != "0":
            return  # Lightning re-launched this script for a DDP rank: it must share rank 0's dir
        wanted = Path(str(config.hydra.run.dir))
        if config.get("ckpt_path"):  # resuming: the run continues in the dir it names (ckpt_path=last)
            _or_exit(lambda: must_be_a_folder(wanted), "hydra.run.dir")
            if wanted.is_dir() and any(wanted.iterdir()):  # nothing is written there until training starts
                from attnbench.run.outputs import check_output_dir, hold_writes

                _or_exit(lambda: check_output_dir(wanted, resuming=True), "hydra.run.dir")
                _or_exit(lambda: check_same_run(config, wanted), "hydra.run.dir")
                hold_writes(wanted, config.hydra.output_subdir)
                with read_write(config.hydra), open_dict(config.hydra):
                    config.hydra.output_subdir = None
                    for key, value in held_log_files(config):
                        OmegaConf.update(config.hydra.job_logging, key, value, force_add=True)
            return
        got = _or_exit(lambda: claim_dir(wanted, str(config.hydra.output_subdir or ".attnbench")), "hydra.run.dir")
        self._set(config, "run", wanted, got)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        wanted = Path(str(config.hydra.sweep.dir))
        if config.get("ckpt_path"):  # resuming a sweep: its jobs continue in their dirs (hydra.sweep.dir=<sweep dir>)
            _or_exit(lambda: must_be_a_folder(wanted), "hydra.sweep.dir")
            if wanted.is_dir() and any(wanted.iterdir()):
                recorded = _or_exit(lambda: check_same_sweep(config, wanted), "hydra.sweep.dir")
                if recorded is not None:  # its jobs, matched by their overrides, get their numbers and dirs back
                    run_as_recorded(config, recorded)
                _or_exit(lambda: hold_sweep_writes(config, wanted), "hydra.sweep.dir")
            return
        got = _or_exit(lambda: claim_dir(wanted, "multirun.yaml", marker_is_file=True), "hydra.sweep.dir")
        self._set(config, "sweep", wanted, got)
        with read_write(config.hydra):  # every job's config is composed again from the overrides
            config.hydra.overrides.hydra.append(f"hydra.sweep.dir={_quoted(str(got))}")

    @staticmethod
    def _set(config: DictConfig, key: str, wanted: Path, got: Path) -> None:
        with read_write(config.hydra):
            config.hydra[key].dir = str(got)
        if got != wanted:
            print(f"{wanted} already holds another run; this one writes to {got}", file=sys.stderr)


def held_log_files(config: DictConfig) -> list[tuple[str, str]]:
    """The ``(key, value)`` updates of ``hydra.job_logging`` that make each handler writing a file (a handler
    with ``filename``: ``logging.FileHandler`` and its subclasses) a :class:`~attnbench.run.outputs.HeldLogFile`
    of it (keys relative to ``hydra.job_logging``)."""
    updates = []
    for name, handler in (OmegaConf.select(config, "hydra.job_logging.handlers") or {}).items():
        if "filename" in handler and "class" in handler and handler["class"] != HELD_LOG_FILE:
            updates += [(f"handlers.{name}.held_class", str(handler["class"])),
                        (f"handlers.{name}.class", HELD_LOG_FILE)]
    return updates


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
    group with an exclusive ``flock`` on ``<launcher's sweep dir>/.attnbench-cpus/<i>.lock`` (the sweep dir, or the
    staging dir of a resumed sweep: :func:`hold_sweep_writes`; held until :meth:`on_job_end`;
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
        self._folder: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._folder = Path(str(config.hydra.sweep.dir)) / ".attnbench-cpus"  # after FreshOutputDir set it

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.types import RunMode

        if not self.groups or self._folder is None or config.hydra.mode != RunMode.MULTIRUN:
            return
        import fcntl

        folder = self._folder
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
#: The multirun of this (main) process, set when it starts: its sweep dir, and the staging dir of a held sweep.
_SWEEP: dict[str, Any] = {"dir": None, "staged": None}

#: Set in each job of a sweep resumed in its sweep dir (through ``hydra.job.env_set``): the ``hydra.output_subdir``
#: whose copy the job holds until training starts, and the folder (in the staging dir) that takes its record.
HELD_SUBDIR_ENV, HELD_RECORDS_ENV = "ATTNBENCH_HELD_HYDRA_SUBDIR", "ATTNBENCH_HELD_JOB_RECORDS"
HELD_LOG_FILE = "attnbench.run.outputs.HeldLogFile"


def is_hold_override(override: str) -> bool:
    """Whether ``override`` is one of those :func:`hold_sweep_writes` adds (a job's ``hydra.yaml`` leaves them out)."""
    return (override == "hydra.output_subdir=null" or "ATTNBENCH_HELD_" in override or ".held_class=" in override
            or override.endswith(f".class={HELD_LOG_FILE}"))


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: task overrides that say how a sweep's jobs are launched and resumed, not what they run
LAUNCH_KEYS = ("ckpt_path", "launcher")
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def _override_key(override: str) -> str:
    return str(override).split("=", 1)[0].lstrip("+~")


def _task_overrides(overrides: Any) -> list[str]:
    """A sweep's task overrides as written (no interpolation resolved), in their order, without
    :data:`LAUNCH_KEYS`."""
    overrides = OmegaConf.to_container(overrides) if OmegaConf.is_list(overrides) else overrides
    return [str(o) for o in overrides if _override_key(o) not in LAUNCH_KEYS]


def _sweep_overrides(overrides: Any) -> list[str]:
    """:func:`_task_overrides`, sorted."""
    return sorted(_task_overrides(overrides))


def sweep_jobs(config: DictConfig) -> list[frozenset[str]] | None:
    """The jobs of a multirun of Hydra's basic sweeper, in the order it numbers them (``hydra.job.num``), each as
    the set of its task overrides (``"key=value"``, :data:`LAUNCH_KEYS` aside); ``None`` for another sweeper or
    overrides Hydra's parser refuses.

    The sweeper's own expansion (``BasicSweeper.split_arguments``: the cartesian product of ``hydra.sweeper.params``
    and the task overrides, a command-line value replacing a params one), so ``attention=dot,additive seed=0,1``
    and ``seed=range(0,2) attention=additive,dot`` are the same four jobs, numbered differently.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if (OmegaConf.select(config, "hydra.sweeper._target_") or BASIC_SWEEPER) != BASIC_SWEEPER:
        return None
    hydra = GlobalHydra.instance()  # its config loader expands glob() over config groups
    try:
        params = OmegaConf.select(config, "hydra.sweeper.params") or {}
        arguments = [f"{key}={value}" for key, value in params.items()]  # resolves an interpolated list of values
        arguments += _task_overrides(OmegaConf.select(config, "hydra.overrides.task") or [])
        parsed = OverridesParser.create(config_loader=hydra.config_loader() if hydra.is_initialized() else None
                                        ).parse_overrides(arguments)
        (jobs,) = BasicSweeper.split_arguments(parsed, None)
    except Exception:  # noqa: BLE001 - Hydra's parser errors (a recorded override it no longer reads), an
        return None  # interpolation that no longer resolves
    return [frozenset(job) for job in jobs]


def _jobs_text(jobs: list[frozenset[str]], common: frozenset[str], most: int = 3) -> str:
    """Up to ``most`` jobs, each as its overrides outside ``common``, then how many more."""
    shown = "; ".join(" ".join(sorted(job - common)) or " ".join(sorted(job)) for job in jobs[:most])
    return shown + (f"; and {len(jobs) - most} more" if len(jobs) > most else "")


def _sweep_command(jobs: list[frozenset[str]]) -> str | None:
    """The ``-m`` overrides whose sweep is exactly ``jobs`` (every key with the values its jobs take, in their
    order), quoted for a POSIX shell, or ``None`` when ``jobs`` is not such a product."""
    values: dict[str, list[str | None]] = {}  # None: an override without a value (``~key``)
    for job in jobs:
        for override in sorted(job):
            key, sep, value = override.partition("=")
            if (value if sep else None) not in values.setdefault(key, []):
                values[key].append(value if sep else None)
    if any(len(job) != len(values) for job in jobs) or math.prod(len(v) for v in values.values()) != len(jobs):
        return None
    import shlex

    return " ".join(shlex.quote(key if vals == [None] else f"{key}={','.join(str(v) for v in vals)}")
                    for key, vals in values.items())


#: the settings that define a run (what it trains, on what, how it is optimised): a resumed run keeps them; the
#: rest (training length, trainer, callbacks, logger) may change, and so may the loader's workers (the resume
#: restores the loader's position whatever their number)
RUN_DEFINING = ("seed", "model", "attention", "data", "optim")
RESUME_MAY_CHANGE = ("data.num_workers",)


def check_same_run(config: DictConfig, run_dir: Path) -> None:
    """Refuse to resume in ``run_dir`` a run with other settings than the one it holds (its
    ``<hydra.output_subdir>/config.yaml``, as Hydra saved it): the checkpoint's weights and the run's records would
    then describe two different runs. The keys under :data:`RUN_DEFINING` must be equal, those of
    :data:`RESUME_MAY_CHANGE` aside; training length, trainer, callbacks and logger may change. Not checked: a
    command with ``hydra.output_subdir=null``, a dir without a saved config.

    Raises:
        OutputDirTaken: (a ConfigError) naming up to five differing keys with both values, and what to change.
    """
    if config.hydra.output_subdir is None:
        return
    saved = run_dir / str(config.hydra.output_subdir) / "config.yaml"
    if not saved.is_file():
        return
    try:
        before = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
    except Exception:  # noqa: BLE001 - not a config Hydra wrote: nothing to compare with
        return
    now = OmegaConf.to_container(config, resolve=False)
    now.pop("hydra", None)

    def flat(node: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(node, dict):
            return {k: v for key, value in node.items() for k, v in flat(value, f"{prefix}{key}.").items()}
        return {prefix[:-1]: node}

    old, new = flat(before), flat(now)

    def defining(key: str) -> bool:
        return (any(key == top or key.startswith(top + ".") for top in RUN_DEFINING)
                and not any(key == free or key.startswith(free + ".") for free in RESUME_MAY_CHANGE))

    differ = [k for k in sorted(old.keys() | new.keys())
              if defining(k) and old.get(k, "<unset>") != new.get(k, "<unset>")]
    if differ:
        shown = "; ".join(f"{k}: {old.get(k, '<unset>')!r} -> {new.get(k, '<unset>')!r}" for k in differ[:5])
        raise OutputDirTaken(f"{run_dir} holds a run with other settings than this command's ({len(differ)} "
                             f"differ: {shown}); a resumed run keeps its {', '.join(RUN_DEFINING)} settings "
                             "(data.num_workers aside). Resume with the run's own overrides (its "
                             ".hydra/overrides.yaml), or start a new run in another hydra.run.dir.")


def check_same_sweep(config: DictConfig, sweep_dir: Path) -> DictConfig | None:
    """Refuse to resume in ``sweep_dir`` another sweep than the one it holds; the recorded sweep to run when its jobs
    are to be matched by their overrides.

    The sweep there is the one Hydra recorded in its ``multirun.yaml``. With the basic sweeper on both sides, this
    command resumes it when it has the same jobs (:func:`sweep_jobs`: each job's overrides as a set, so values and
    overrides in any order, :data:`LAUNCH_KEYS` aside); the recorded config is returned, for
    :func:`run_as_recorded` to give each job its number, and so its dir, of the first run. With another sweeper the
    task overrides must be the same, in any order. An empty ``multirun.yaml`` (the claim of
    :class:`FreshOutputDir` for a sweeper that records none, Optuna's) matches any sweep: its jobs are still
    checked one by one.

    Returns:
        The recorded ``multirun.yaml`` config when both sweeps are the basic sweeper's, else ``None``.

    Raises:
        OutputDirTaken: ``sweep_dir`` holds no readable ``multirun.yaml``, or another sweep's: the message counts
            and names the jobs this command adds and leaves out, with the command that resumes the sweep there
            and, for added jobs, the one that runs them as a new sweep.
    """
    try:
        recorded_cfg = OmegaConf.load(sweep_dir / "multirun.yaml")
        recorded = OmegaConf.select(recorded_cfg, "hydra.overrides.task")
    except Exception:  # noqa: BLE001 - no multirun.yaml, or not Hydra's (OSError, YAML and OmegaConf errors alike)
        recorded = "no readable multirun.yaml"
    if recorded is None:  # an empty claim
        return None
    taken = (f"{sweep_dir} already holds a previous sweep's outputs (%s); it is never overwritten.")
    if isinstance(recorded, str):
        raise OutputDirTaken(taken % recorded + " Resume that sweep with its own overrides and ckpt_path=last, or "
                                                "choose another hydra.sweep.dir.")
    what = f"the sweep of `{' '.join(_sweep_overrides(recorded))}`"
    old, new = sweep_jobs(recorded_cfg), sweep_jobs(config)
    if old is None or new is None:  # another sweeper: the same task overrides
        if _sweep_overrides(recorded) != _sweep_overrides(config.hydra.overrides.task):
            raise OutputDirTaken(taken % what + " Resume that sweep with its own overrides and ckpt_path=last, or "
                                                "choose another hydra.sweep.dir.")
        return None
    added = [job for job in dict.fromkeys(new) if job not in old]
    missing = [job for job in dict.fromkeys(old) if job not in new]
    if not added and not missing and len(old) == len(new):
        return recorded_cfg
    common = frozenset.intersection(*old, *new)
    differ = []
    if added:
        differ.append(f"this command adds {len(added)} job(s) ({_jobs_text(added, common)})")
    if missing:
        differ.append(f"{'it' if added else 'this command'} leaves out {len(missing)} of its {len(old)} "
                      f"({_jobs_text(missing, common)})")
    if not differ:
        differ.append(f"this command runs {len(new)} jobs, that sweep {len(old)} (a job listed twice)")
    import shlex

    resume = " ".join(shlex.quote(o) for o in ["python", "train.py", "-m", *_sweep_overrides(recorded),
                                                "ckpt_path=last", f"hydra.sweep.dir={sweep_dir}"])
    more = _sweep_command(added) if added else None
    also = (f"; run the added jobs as a new sweep (python train.py -m {more}) and report both "
            f"(attnbench report {sweep_dir} <its sweep dir>)" if more else
            "; run the added jobs as a new sweep (another hydra.sweep.dir) and report both "
            f"(attnbench report {sweep_dir} <its sweep dir>)" if added else "")
    raise OutputDirTaken(taken % what + f" A sweep dir holds one sweep: {' and '.join(differ)}. Resume it with its "
                                        f"own jobs ({resume}){also}.")


def run_as_recorded(config: DictConfig, recorded: DictConfig) -> None:
    """Give the sweeper of this (resuming) command the recorded sweep's own definition, its task overrides and
    ``hydra.sweeper.params`` (this command's :data:`LAUNCH_KEYS` overrides kept): it then numbers the jobs as the
    first run did, and ``hydra.sweep.subdir`` (``${hydra.job.num}_${run_name}``) gives each job its own dir back,
    whatever order the values or overrides were given in. Only for sweeps :func:`check_same_sweep` found equal."""
    launch = [str(o) for o in config.hydra.overrides.task if _override_key(o) in LAUNCH_KEYS]
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.overrides.task = [*_task_overrides(recorded.hydra.overrides.task), *launch]
        if OmegaConf.select(config, "hydra.sweeper") is not None:
            config.hydra.sweeper.params = OmegaConf.select(recorded, "hydra.sweeper.params")


def hold_sweep_writes(config: DictConfig, sweep_dir: Path) -> None:
    """A sweep resumed in ``sweep_dir`` (a dir holding files) writes nothing there until one of its jobs trains.

    - Hydra's sweeper and launcher get a staging dir next to ``sweep_dir`` (the same file system, visible to
      SLURM jobs) as their ``hydra.sweep.dir``: ``multirun.yaml``, Optuna's ``optimization_results.yaml``,
      submitit's ``.submitit/``, ``launcher=cores``' locks and each job's record go there; each job's own config,
      composed again from the overrides, keeps ``sweep_dir``;
    - each job holds its ``.hydra/`` copy and log files (:func:`attnbench.run.outputs.hold_writes`, started by the
      job task): Hydra's copy is switched off by ``hydra.output_subdir=null`` and every log file handler is a
      :class:`~attnbench.run.outputs.HeldLogFile` (:func:`held_log_files`).

    :func:`settle_sweep` (end of the sweep) moves the staged files into ``sweep_dir`` when a job trained, and
    removes the staging dir.
    """
    import tempfile

    sweep_dir = sweep_dir.resolve()
    staged = Path(tempfile.mkdtemp(prefix=f".{sweep_dir.name}.held-", dir=sweep_dir.parent))
    _SWEEP.update(dir=sweep_dir, staged=staged)
    subdir = "" if config.hydra.output_subdir is None else str(config.hydra.output_subdir)
    overrides = ["hydra.output_subdir=null", f"++hydra.job.env_set.{HELD_SUBDIR_ENV}={_quoted(subdir)}",
                 f"++hydra.job.env_set.{HELD_RECORDS_ENV}={_quoted(str(staged / SWEEP_JOBS_DIR))}"]
    overrides += [f"++hydra.job_logging.{key}={value}" for key, value in held_log_files(config)]
    with read_write(config.hydra):
        config.hydra.sweep.dir = str(staged)
        config.hydra.overrides.hydra.extend(overrides)
    print(f"Resuming the sweep in {sweep_dir}: the sweeper's files wait in {staged} until a job trains",
          file=sys.stderr, flush=True)


def settle_sweep() -> list[dict[str, Any]] | None:
    """End of a sweep held by :func:`hold_sweep_writes`: its job records (``None`` for a sweep not held).

    When a job started training, the staged files move into the sweep dir (its job records replace those there;
    ``multirun.yaml`` names the sweep dir); otherwise the sweep dir stays as it was. The staging dir is removed.
    """
    import shutil


    staged, sweep_dir = _SWEEP.get("staged"), _SWEEP.get("dir")
    if staged is None:
        return None
    _SWEEP["staged"] = None
    records = _job_records(staged)
    try:
        if any(r.get("trained") for r in records):
            for old in (sweep_dir / SWEEP_JOBS_DIR).glob("*.json"):
                old.unlink(missing_ok=True)
            multirun = staged / "multirun.yaml"
            if multirun.is_file():
                cfg = OmegaConf.load(multirun)
                cfg.hydra.sweep.dir = str(sweep_dir)
                write_text_atomically(multirun, OmegaConf.to_yaml(cfg))
            for path in sorted(p for p in staged.rglob("*") if p.is_file()):
                target = sweep_dir / path.relative_to(staged)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
        shutil.rmtree(staged, ignore_errors=True)
    except OSError as err:
        log.warning("Could not move the resumed sweep's files from %s into %s: %s", staged, sweep_dir, err)
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
        if not _SWEEP["staged"]:  # a new sweep's dir (a held sweep's is set by FreshOutputDir)
            _SWEEP["dir"] = Path(str(config.hydra.sweep.dir)).resolve()

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
                record["metrics"] = {key: metrics[key] for key in SWEEP_RECORD_KEYS if key in metrics}
        else:
            err = getattr(job_return, "_return_value", None)
            record["error"] = str(err) if isinstance(err, AttnbenchError) else f"{type(err).__name__}: {err}"
        folder = Path(str(held_records)) if held_records else Path(str(hydra_cfg.sweep.dir)) / SWEEP_JOBS_DIR
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_text_atomically(folder / f"{record['num']}.json", json.dumps(record, indent=2))
        except OSError as err:
            log.warning("Could not record the job's status in %s: %s", folder, err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        text, failed = sweep_summary(_SWEEP["dir"], settle_sweep())
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
#: the CPU share that vouches for each rate of the line (``attnbench.callbacks.throughput.RATE_COLUMNS``)
SWEEP_LINE_SHARES = {"train/tokens_per_sec": "train/cpu_share", "test/tokens_per_sec": "test/cpu_share"}
#: what a job's record keeps of its metrics.json: the line's figures and the CPU shares that vouch for its rates,
#: and the macro-F1 with what says whether the test set is imbalanced (:func:`attnbench.run.console.imbalanced`)
SWEEP_RECORD_KEYS = (*(key for key, _ in SWEEP_LINE_FIGURES), *SWEEP_LINE_SHARES.values(), "test/f1_macro",
                     "num_classes", "test_largest_class_share")


def _job_records(sweep_dir: Path | None) -> list[dict[str, Any]]:
    """The job records in ``<sweep_dir>/.attnbench-jobs/``, by job number."""
    path = None if sweep_dir is None else Path(sweep_dir) / SWEEP_JOBS_DIR
    if path is None or not path.is_dir():
        return []
    records = []
    for path in path.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    return sorted(records, key=lambda r: r.get("num", 0))


def is_done_before(record: dict[str, Any]) -> bool:
    """Whether a job's record is of a job of a resumed sweep whose dir held a finished run: it completed without
    training (its result kept as it was)."""
    return record.get("status") == "completed" and bool(record.get("held")) and record.get("trained") is False


def _disturbed_rates(metrics: list[dict[str, Any]]) -> list[set[str]]:
    """For each job's metrics, the rates of :data:`SWEEP_LINE_SHARES` measured under load: the report's rule
    (:func:`attnbench.analysis.stats.disturbed_runs`, a CPU share below ``MIN_CPU_SHARE``), loaded only when a job
    has a CPU share (it imports torch)."""
    flagged: list[set[str]] = [set() for _ in metrics]
    if not any(share in m for m in metrics for share in SWEEP_LINE_SHARES.values()):
        return flagged
    import pandas as pd

    from attnbench.analysis.stats import disturbed_runs

    jobs = pd.DataFrame([{share: m.get(share) for share in SWEEP_LINE_SHARES.values()} for m in metrics])
    for rate, share in SWEEP_LINE_SHARES.items():
        for i, disturbed in enumerate(disturbed_runs(jobs, share)):
            if disturbed and isinstance(metrics[i].get(rate), int | float):
                flagged[i].add(rate)
    return flagged


def sweep_summary(sweep_dir: Path | None, records: list[dict[str, Any]] | None = None) -> tuple[str | None, int]:
    """The end-of-sweep text and the number of failed jobs, from ``records`` or else the records
    :class:`SweepReport` wrote in ``<sweep_dir>/.attnbench-jobs/`` (``(None, 0)`` when there are none).

    The text: ``Sweep <dir>: <m> jobs, <n> failed`` (and ``, <k> done before``); one line per job, ``ok`` with
    its ``test/acc`` (and its macro-F1 on an imbalanced test set, :func:`attnbench.run.console.imbalanced`),
    ``train tokens/s`` and ``test tokens/s`` (a rate measured under load marked ``(disturbed: cpu share 0.49)``,
    by the report's rule, :func:`attnbench.analysis.stats.disturbed_runs`), ``done`` with the same figures for a
    job of a resumed sweep that had finished before (:func:`is_done_before`), or ``failed`` with
    ``Error: <message>``; then the command that builds the sweep's report (``attnbench report <sweep dir>``).
    """
    from attnbench.run.console import imbalanced

    records = _job_records(sweep_dir) if records is None else records
    if not records:
        return None, 0
    failed = [r for r in records if r.get("status") == "failed"]
    done_before = sum(is_done_before(r) for r in records)
    held = [r for r in failed if r.get("trained") is False and r.get("held")]
    note = ("" if not failed else " (each failed job wrote error.json and failure.json in its dir)" if not held
            else " (refused or failed before training: nothing was written into their dirs)" if len(held) == len(failed)
            else " (a job that failed in training wrote error.json and failure.json in its dir; one refused or failed "
                 "before training wrote nothing)")
    done_note = f", {done_before} done before (skipped, results kept)" if done_before else ""
    lines = [f"Sweep {sweep_dir}: {len(records)} jobs, {len(failed)} failed{done_note}{note}"]
    labels = {"test/acc": "test/acc", "train/tokens_per_sec": "train tokens/s", "test/tokens_per_sec": "test tokens/s"}
    disturbed = _disturbed_rates([r.get("metrics") or {} for r in records])
    for r, marked in zip(records, disturbed, strict=True):
        name = Path(str(r.get("output_dir"))).name
        if r.get("status") == "failed":
            error = " ".join(str(r.get("error")).split())  # one line per job, whatever the message's line breaks
            lines.append(f"  failed  {name}  Error: {error}")
            continue
        metrics = r.get("metrics") or {}
        figures = [f"{labels[key]} {fmt.format(metrics[key]) if isinstance(metrics.get(key), int | float) else '-'}"
                   for key, fmt in SWEEP_LINE_FIGURES]
        if imbalanced(metrics) and isinstance(metrics.get("test/f1_macro"), int | float):
            figures[0] += f" (macro-F1 {metrics['test/f1_macro']:.4f})"
        for i, (key, _) in enumerate(SWEEP_LINE_FIGURES):
            if key in marked:  # the rate understates the run, as the report says in the cells that rest on it
                figures[i] += f" (disturbed: cpu share {metrics[SWEEP_LINE_SHARES[key]]:.2f})"
        lines.append(f"  {'done' if is_done_before(r) else 'ok':<6}  {name}  " + "  ".join(figures))
    if len(failed) < len(records):
        lines.append(f"Report: attnbench report {sweep_dir}")
    return "\n".join(lines), len(failed)
