#!/usr/bin/env python
"""Reproduce every table and figure of the Results: one command, resumable, with its expected duration up front.

    taskset -c 1 attnbench reproduce                   # CPU: every stage, one job after another
    attnbench reproduce --device gpu                   # the same on a GPU (trainer=gpu, bf16)
    attnbench reproduce --dry-run                      # the plan: jobs done / to run, expected duration
    attnbench reproduce --stages compare --grid seed=0,1 --grid data=trec   # a part of a stage
    attnbench reproduce --stages compare --report-only --publish   # no job: report and publish the stage

Stages, in this order (:data:`attnbench.experiments.registry.STAGES`; each is a shipped experiment,
``conf/experiment/<stage>.yaml``, whose sweep grid ``hydra.sweeper.params`` is read from the composed config, with
the stage's further grids of :data:`attnbench.experiments.registry.GRIDS` (:func:`~attnbench.experiments.registry.
sweep_grids`); its score functions are every one on the config search path,
``--set hydra.searchpath=[file://<dir>]`` included, unless the experiment names some):

- ``compare``: every score function (the ``uniform`` control included) x seeds x SST-2, TREC, IMDB at the shared
  learning rate;
- ``tune_lr``: every score function x SST-2, IMDB x a log grid of ``optim.lr``, seed 0; when its runs are done the
  learning rate each (dataset, score function) chose on validation is written to ``<out>/tune_lr/chosen_lr.json``
  (:func:`write_chosen_lr`; published as ``docs/results/<device>/tune_lr_chosen_lr.json``);
- ``compare_tuned``: compare's grid on SST-2 and IMDB, each job with ``optim.lr=<chosen>``; until tune_lr has chosen,
  its jobs wait and the plan counts them in full (an upper bound);
- ``head_dim_sweep``: head_dim 16 ... 128 x five score functions x seeds;
- ``d_a``: additive's d_a 32 / 128 / 512 at d_k 32 beside scaled_dot, on SST-2 and associative recall, x seeds;
- ``long_context``: IMDB at max_length 512 x ``scaled_dot`` and ``uniform`` x seeds;
- ``capacity``: associative recall at data.num_pairs 8 ... 32 x head_dim 8 / 64 x every score function (the
  ``uniform`` control included) x seeds: test accuracy against memory load;
- ``cost``: ``attnbench bench attention`` (time and memory of one attention call per score function and
  sequence length: n = 64 ... 1024 and d at n = 256 on a CPU, n ... 4096 on a GPU) and
  ``attnbench bench train --attention`` (training tokens/s of every score function, interleaved on the same
  batches: the cost ratios of the Results); on a CPU both with every CPU this process may use.

A job whose training is a ``compare`` job's (:func:`training_fingerprint` equal: tune_lr's and compare_tuned's jobs at
the shared learning rate, d_a's default-d_a and scaled_dot SST-2 jobs) is not trained again: once that job is done its
record is copied (:func:`copy_reused`; the plan's ``reuse`` column, the manifest's ``reused_from``).

Each job runs as a single Hydra run, ``attnbench train experiment=<stage> <grid overrides> hydra.run.dir=
<out>/<stage>/<run_name>``, in the sweep's order (seed outermost, so a stopped reproduction has whole seeds).
A job whose ``metrics.json`` exists is done and skipped; one with a checkpoint (``checkpoints/last.ckpt``, or
the ``interrupted.ckpt`` an interrupted job writes) resumes exactly from the newest (``ckpt_path=last``,
mid-epoch included; see docs/sweeps.md: Resume); any other leftover dir (a job that failed before its first
checkpoint) is started again. Before the first job the data of every job still to run is checked
(:func:`data_problems`): a dataset that cannot be loaded stops the command with one message. Interrupt it
(Ctrl-C) at any time and run
the same command again. A failed job is logged and the others go on; the exit status is 1 if any failed.

At the end: ``attnbench report`` for each stage (``<out>/<stage>/report/``) of every run in ``<out>/<stage>``
(not only the part this command ran), and with ``--publish`` its tables, figures and run records go to
``docs/results/<device>/`` and the generated README/docs tables are rewritten, all or nothing (:func:`publish`).
``--report-only`` runs no job: only the reports (and ``--publish``) of the stages given; it also runs beside a
reproduction that holds the results dir, for stages whose every job is done (a stage in progress is refused). Every job's log is
``<out>/<stage>/logs/<run name>.log``; ``<out>/manifest.json`` records, per job, the git commit it ran on, its
wall time and its status.

The plan (:func:`print_plan`) gives each stage's jobs and the expected duration: per job, the median wall time of
finished jobs like it in ``<out>``, else ``docs/results/reproduce_seconds_<device>.json`` (:func:`estimates`,
:func:`job_estimate`), else unknown (said so). ``--write-estimates`` rewrites that file from ``<out>`` (jobs of the
stages' own budgets only).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from attnbench.experiments import code_commit
from attnbench.experiments.registry import (BASELINE, ESTIMATED_AS, REUSES, STAGES, TRAIN_STAGES, TRAINING_KEYS,
                                            TUNE_METRIC, TUNED_BY, sweep_grids, sweep_params)
from attnbench.paths import write_text_atomically

#: the folder the command works in (``--root``, default: the current directory): the jobs run there, the default
#: ``--out`` is ``results/<device>`` under it, and ``--publish``, ``--from-published``, ``--from-progress``,
#: ``--save-progress`` and ``--write-estimates`` read and write its ``docs/results/`` (a checkout of the repository)
ROOT = Path.cwd()
#: keys of a job's grid overrides that make its setting (besides the score function); seed is a replicate
SETTING_KEYS = ("data", "data.num_pairs", "model.head_dim", "data.max_length", "attention.hidden_dim", "optim.lr")
#: the file a tuning stage's choice is written to, in ``<out>/<stage>/`` (published as ``<stage>_chosen_lr.json``)
CHOSEN_LR = "chosen_lr.json"
#: each cost benchmark's result file under ``<out>/cost`` (its presence means the benchmark is done)
COST_RESULTS = {"attention": "attention/results.json", "train_throughput": "train_throughput.json"}
#: the attention benchmark's sizes on a CPU: additive's forward+backward at B=H=4 takes about 20 s a call at n = 1024
#: on 2 cores and grows as n^2 (about 5 min at 4096, several calls a cell), and as d in the d sweep (75 s at d = 256),
#: so n stops at 1024 and the d sweep runs at n = 256 (the whole benchmark: about 10 min); the GPU variant keeps the
#: bench's n = 64 ... 4096 and its d sweep at n = 1024
CPU_COST_ARGS = ("--lengths", "64,128,256,512,1024", "--at-n", "256")


@dataclass
class Job:
    """One training run of a stage: its grid overrides and where it writes."""

    stage: str
    overrides: dict[str, str]
    run_dir: Path
    extra: list[str] = field(default_factory=list)
    #: the job's composed ``data`` config (plain containers), for the plan's check that its data can be loaded
    data: dict = field(default_factory=dict, repr=False, compare=False)
    #: the job of an earlier stage whose training this job's is (:func:`training_fingerprint`): not trained, its
    #: record copied into :attr:`run_dir` once that job is done (:func:`copy_reused`)
    same_as: "Job | None" = field(default=None, repr=False, compare=False)
    #: the tuning stage whose choice this job still waits for (:data:`attnbench.experiments.registry.TUNED_BY`): its
    #: ``optim.lr`` is not known yet; the plan counts it in full at the time of the stage it is estimated as
    waits_for: str | None = None

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def budget_key(self) -> str:
        """``stage/attention/setting`` (seeds share an estimate): e.g. ``compare/additive/data=sst2``; the key of
        a job with the stage's own budget (no ``--set``), as the shipped estimates are."""
        setting = ",".join(f"{k}={self.overrides[k]}" for k in SETTING_KEYS if k in self.overrides)
        return f"{self.stage}/{self.overrides.get('attention', 'scaled_dot')}/{setting}"

    @property
    def alias_key(self) -> str | None:
        """:attr:`budget_key` as the job of :data:`~attnbench.experiments.registry.ESTIMATED_AS`'s stage with the
        same setting (``optim.lr`` aside) would have it, e.g. ``compare/additive/data=sst2`` for tune_lr's
        ``additive-sst2-lr0.003-s0``; None for a stage not estimated so, or a job with ``--set`` overrides."""
        if self.stage not in ESTIMATED_AS or self.extra:
            return None
        setting = ",".join(f"{k}={self.overrides[k]}" for k in SETTING_KEYS if k in self.overrides and k != "optim.lr")
        return f"{ESTIMATED_AS[self.stage]}/{self.overrides.get('attention', 'scaled_dot')}/{setting}"

    @property
    def estimate_key(self) -> str:
        """:attr:`budget_key`, followed by the job's ``--set`` overrides, sorted, when it has any (e.g.
        ``compare/additive/data=sst2 --set trainer.max_steps=150``): a job with other settings than the stage's
        is estimated only by finished jobs with the same ``--set``, and its time is never taken as the estimate
        of the stage's own job."""
        return self.budget_key + (" --set " + " ".join(sorted(self.extra)) if self.extra else "")

    def status(self) -> str:
        """``done`` (metrics.json), ``reuse`` (the same training as :attr:`same_as`: copied, not run), ``resume`` (a
        checkpoint ``ckpt_path=last`` resumes from: ``last*.ckpt`` or ``interrupted.ckpt``), ``leftover`` (a dir
        without either) or ``todo``."""
        if (self.run_dir / "metrics.json").is_file():
            return "done"
        if self.same_as is not None:
            return "reuse"
        checkpoints = self.run_dir / "checkpoints"
        if any(checkpoints.glob("last*.ckpt")) or (checkpoints / "interrupted.ckpt").is_file():
            return "resume"
        return "leftover" if self.run_dir.exists() else "todo"

    def command(self, device: str) -> list[str]:
        cmd = [sys.executable, "-m", "attnbench", "train", f"experiment={self.stage}"]
        cmd += [f"{k}={v}" for k, v in self.overrides.items()]
        if device == "cpu":
            cmd.append("trainer=cpu")
        cmd += self.extra
        cmd.append(f"hydra.run.dir={self.run_dir}")
        if self.status() == "resume":
            cmd.append("ckpt_path=last")
        return cmd


def stage_grid(stage: str, grid_overrides: list[str], extra: list[str]) -> list[dict[str, str]]:
    """The sweep of ``conf/experiment/<stage>.yaml`` as a list of override dicts: each of its grids
    (:func:`attnbench.experiments.registry.sweep_grids`: ``hydra.sweeper.params``, then its ``GRIDS``) in Hydra's
    basic-sweeper order (first key outermost), one after another, a job in two grids once. Call inside
    ``hydra.initialize_config_dir`` (as :func:`plan` does).

    ``grid_overrides`` (``key=v1,v2``) replace a key's values or add a key, in every grid; ``extra`` overrides are
    applied when composing (they may change ``run_name``).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    grids = sweep_grids(stage, extra)  # its score functions: every one on the search path, unless it names some
    for item in grid_overrides:
        key, sep, values = item.partition("=")
        if not sep:
            raise SystemExit(f"--grid {item!r}: write key=value[,value...] (e.g. --grid seed=0,1)")
        for params in grids:
            params[key] = values
    parser = OverridesParser.create()
    combos: dict[tuple, dict[str, str]] = {}
    for params in grids:
        axes = []
        for key, values in params.items():
            (override,) = parser.parse_overrides([f"{key}={values}"])
            axes.append([(key, v) for v in override.sweep_string_iterator()] if override.is_sweep_override()
                        else [(key, override.get_value_element_as_str())])
        for combo in itertools.product(*axes):
            combos.setdefault(tuple(sorted(combo)), dict(combo))
    return list(combos.values())


def compose_job(stage: str, overrides: dict[str, str], extra: list[str]) -> tuple[str, dict, str]:
    """The job's ``run_name`` as the experiment defines it, its ``data`` config and its
    :func:`training_fingerprint`, composed with its overrides."""
    from hydra import compose
    from omegaconf import OmegaConf

    cfg = compose("train", overrides=[f"experiment={stage}", *[f"{k}={v}" for k, v in overrides.items()], *extra])
    try:
        data = OmegaConf.to_container(cfg.data, resolve=True)
    except Exception:  # noqa: BLE001 (an interpolation only a running job resolves, e.g. ${hydra:runtime...})
        data = {}  # not checked by the plan: the job's own preflight checks it
    return str(cfg.run_name), data, training_fingerprint(cfg)


def training_fingerprint(cfg) -> str:
    """What a composed config trains and tests, as one string: its :data:`~attnbench.experiments.registry.
    TRAINING_KEYS`, each value resolved (a value only a running job resolves, ``${hydra:runtime.output_dir}``, kept
    as its text, the same in every job). Two jobs with the same fingerprint are the same training."""
    from omegaconf import OmegaConf

    def resolved(node, path: str):
        if isinstance(node, dict):
            return {str(k): resolved(v, f"{path}.{k}") for k, v in node.items()}
        if isinstance(node, list):
            return [resolved(v, f"{path}.{i}") for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            try:
                value = OmegaConf.select(cfg, path, throw_on_missing=False)
                return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            except Exception:  # noqa: BLE001 (an interpolation of the running job: its text)
                return node
        return node

    raw = OmegaConf.to_container(cfg, resolve=False)
    return json.dumps({key: resolved(raw[key], key) for key in TRAINING_KEYS if key in raw}, sort_keys=True,
                      default=str)


def chosen_lr(jobs: list[Job], shared_lr: float) -> dict:
    """The learning rate a tuning stage's finished ``jobs`` choose per dataset and score function: the ``optim.lr``
    whose run has the highest :data:`~attnbench.experiments.registry.TUNE_METRIC` in its ``metrics.json`` (ties: the
    shared lr, then the smaller lr). A (dataset, score function) some of whose planned learning rates have not
    finished (or lack the metric) has no choice yet and is listed under ``incomplete``.

    Returns:
        ``{"metric", "shared_lr", "chosen": {data: {attention: lr}}, "values": {data: {attention: {lr: value}}},
        "incomplete": ["<data>/<attention>", ...]}``.
    """
    cells: dict[tuple[str, str], dict[float, float | None]] = {}
    for job in jobs:
        lr = float(job.overrides["optim.lr"])
        metrics = job.run_dir / "metrics.json"
        value = json.loads(metrics.read_text()).get(TUNE_METRIC) if metrics.is_file() else None
        cells.setdefault((job.overrides.get("data", "sst2"), job.overrides.get("attention", BASELINE)), {})[lr] = value
    chosen: dict[str, dict[str, float]] = {}
    values: dict[str, dict[str, dict[str, float | None]]] = {}
    incomplete = []
    for (data, attention), by_lr in sorted(cells.items()):
        values.setdefault(data, {})[attention] = {repr(lr): v for lr, v in sorted(by_lr.items())}
        if any(v is None for v in by_lr.values()):
            incomplete.append(f"{data}/{attention}")
            continue
        best = max(by_lr, key=lambda lr: (by_lr[lr], lr == shared_lr, -lr))
        chosen.setdefault(data, {})[attention] = best
    return {"metric": TUNE_METRIC, "shared_lr": shared_lr, "chosen": chosen, "values": values,
            "incomplete": incomplete}


def write_chosen_lr(stage: str, jobs: list[Job], out: Path) -> Path | None:
    """Write :func:`chosen_lr` of ``stage``'s planned ``jobs`` to ``<out>/<stage>/chosen_lr.json`` (atomically);
    returns the path, or None when none of them has finished."""
    from attnbench.config import OptimConfig

    mine = [j for j in jobs if j.stage == stage]
    if not any(j.status() == "done" for j in mine):
        return None
    path = out / stage / CHOSEN_LR
    write_text_atomically(path, json.dumps(chosen_lr(mine, OptimConfig.lr), indent=1) + "\n")
    return path


def copy_reused(jobs: list[Job], manifest: dict, out: Path) -> list[Job]:
    """Copy the record (:data:`RUN_RECORD_FILES`) of each finished job that a ``reuse`` job of ``jobs`` is the same
    training as into the reuse job's dir, with the source's manifest record (``reused_from`` added); returns the
    jobs done so."""
    copied = []
    for job in jobs:
        source = job.same_as
        if job.status() != "reuse" or source.status() != "done":
            continue
        tmp = job.run_dir.with_name(f".{job.name}.reuse-tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        copy_run_record(source.run_dir, tmp)
        shutil.rmtree(job.run_dir, ignore_errors=True)
        tmp.replace(job.run_dir)
        key = str(source.run_dir.relative_to(out))
        with LOCK:
            manifest["jobs"][str(job.run_dir.relative_to(out))] = {
                **manifest["jobs"].get(key, {}), "estimate_key": job.estimate_key, "overrides": job.overrides,
                "reused_from": key}
        copied.append(job)
    return copied


def plan(stages: list[str], out: Path, grid: list[str], extra: list[str]) -> list[Job]:
    """Every training job of ``stages``, in order (Hydra composes the configs; nothing runs).

    A job of a stage of :data:`~attnbench.experiments.registry.REUSES` whose :func:`training_fingerprint` is that of a
    job of the stage it names (planned for that even when not in ``stages``) is that job's ``reuse``
    (:attr:`Job.same_as`). A job of a stage tuned by another
    (:data:`~attnbench.experiments.registry.TUNED_BY`) gets ``optim.lr=<chosen>`` from ``<out>/<tuning stage>/
    chosen_lr.json``, or, where that file has no choice for its (dataset, score function) yet, waits for it
    (:attr:`Job.waits_for`).

    Raises:
        SystemExit: a ``--grid`` or ``--set`` override Hydra cannot compose (a misspelt key, an unknown
            option of a config group, a value of the wrong type): one line, as ``train.py`` gives it.
    """
    import attnbench.config  # noqa: F401  (registers the train_schema structured config)
    from hydra import initialize_config_dir
    from hydra.errors import CompactHydraException

    from attnbench.config import config_dir, type_error_message
    from attnbench.run.failures import hydra_error_message

    jobs = []
    trained: dict[str, dict[str, Job]] = {}  # per stage: fingerprint -> its job
    wanted = [s for s in TRAIN_STAGES if s in stages]
    sources = {REUSES[s] for s in wanted if s in REUSES}  # planned too (not run here) for the jobs they may give
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        for stage in [s for s in TRAIN_STAGES if s in wanted or s in sources]:
            tuning = TUNED_BY.get(stage)
            chosen = {}
            if tuning is not None and (out / tuning / CHOSEN_LR).is_file():
                chosen = json.loads((out / tuning / CHOSEN_LR).read_text()).get("chosen", {})
            mine: list[Job] = []
            try:
                # a source stage not run here keeps its own grid: its jobs are what its folder holds
                for overrides in stage_grid(stage, grid if stage in wanted else [], extra):
                    waits = None
                    if tuning is not None:
                        lr = chosen.get(overrides.get("data", "sst2"), {}).get(overrides.get("attention", BASELINE))
                        if lr is None:
                            waits = tuning
                        else:
                            overrides = {**overrides, "optim.lr": repr(float(lr))}
                    name, data, fingerprint = compose_job(stage, overrides, extra)
                    job = Job(stage, overrides, out / stage / name, list(extra), data, waits_for=waits)
                    source = trained.get(REUSES.get(stage), {}).get(fingerprint) if waits is None else None
                    if source is not None and (source.stage in wanted or source.status() == "done"):
                        job.same_as = source  # a source that does not run here and is not done: trained here
                    mine.append(job)
                    trained.setdefault(stage, {}).setdefault(fingerprint, job)
            except CompactHydraException as err:
                hydras = str(err).split("Config search path")[0]  # the options it lists, not where it looked
                message = hydra_error_message(err) or type_error_message(err) or " ".join(
                    (hydras + (f" {err.__cause__}" if err.__cause__ is not None else "")).split())
                given = " ".join([*(f"--grid {g}" for g in grid), *(f"--set {e}" for e in extra)])
                raise SystemExit(f"{stage}: Hydra cannot compose the stage with {given or 'its own config'}. "
                                 f"{message}") from None
            if stage in wanted:
                jobs += mine
    names = [j.run_dir for j in jobs]
    if len(set(names)) != len(names):
        dup = sorted({str(n) for n in names if names.count(n) > 1})[:3]
        raise SystemExit(f"two jobs share a run dir ({', '.join(dup)}): the experiment's run_name must name "
                         "every swept key")
    return jobs


def data_problems(jobs: list[Job]) -> list[str]:
    """Whether the data of every job still to run can be loaded, checked once per distinct ``data`` config before
    any job starts (:func:`attnbench.data.sources.preflight`: its files, else one probe of the Hugging Face Hub,
    else the packaged copy; no row is read). Returns one message per dataset that cannot be loaded (naming how
    many jobs of which stages need it, and what to change), and prints where each of the others comes from."""
    from attnbench.data.sources import preflight
    from attnbench.errors import AttnbenchError

    groups: dict[str, list[Job]] = {}
    for job in jobs:
        if job.status() != "done" and job.data:
            groups.setdefault(json.dumps(job.data, sort_keys=True, default=str), []).append(job)
    # one line per outcome: configs that differ only in, say, max_length share their source and its message
    outcomes: dict[tuple[bool, str], list[Job]] = {}
    offline = any(os.environ.get(name, "0") not in ("", "0") for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    here = os.getcwd()
    os.chdir(ROOT)  # where the jobs run: a relative data path is resolved from there, as in them
    try:
        for key, members in groups.items():
            data = json.loads(key)
            try:
                source = preflight(data)
                if source.kind == "hub" and offline:  # preflight leaves the local HF cache to load_dataset
                    _check_hub_cache(data)
                outcome = (True, f"{data.get('name')} from {source.kind}: {source.where}")
            except AttnbenchError as err:
                outcome = (False, str(err))
            outcomes.setdefault(outcome, []).extend(members)
    finally:
        os.chdir(here)
    problems = []
    for (ok, text), members in outcomes.items():
        who = f"{len(members)} job(s) of {', '.join(sorted({j.stage for j in members}))}"
        if ok:
            print(f"data: {text} ({who})")
        else:
            problems.append(f"{who} cannot load their data: {text}")
    return problems


def _check_hub_cache(data: dict) -> None:
    """With ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set, a Hub dataset loads only from the local Hugging Face
    cache: ask ``datasets`` for its builder there (no row read, no network).

    Raises:
        DataUnavailableError: the cache does not hold it; naming the offline variable and the fixes.
    """
    from attnbench.data.errors import DataUnavailableError

    try:
        from datasets import load_dataset_builder

        load_dataset_builder(data.get("hub_id"), data.get("hub_config"))
    except Exception as err:  # noqa: BLE001 (datasets raises several kinds: each means 'not in the cache')
        raise DataUnavailableError(
            f"Cannot load dataset {data.get('name')!r}: HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set and the local "
            f"Hugging Face cache does not hold {data.get('hub_id')} ({type(err).__name__}: {err}). Fix: point "
            "ATTNBENCH_DATA_DIR at a local Parquet mirror, or unset the offline variable on a machine that "
            "reaches the Hub.") from None


def host_tag(host: str) -> str:
    """A :func:`attnbench.callbacks.throughput.machine_boot` value as a folder-name suffix: ``vm/c4397b6f`` ->
    ``vm-c4397b6f`` (letters, digits, ``.``, ``_`` and ``-`` only)."""
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in host)


def with_baseline_twins(jobs: list[Job], here: str, baseline: str = BASELINE) -> tuple[list[Job], list[Job]]:
    """``jobs`` with a **baseline twin** before each job still to run, or finished on this host, whose ``baseline``
    job (same stage, grid overrides but ``attention``, and ``--set`` overrides) finished on another host; and the
    twins.

    The report pairs a run's rates only with its seed's baseline run measured on the same host
    (:func:`attnbench.analysis.stats.summarise`: ``train_host``, ``test_host``). A reproduction continued on another
    machine would leave its new runs without a pair; the twin runs the baseline job again here, into ``<baseline run
    dir>-on-<host>`` (:func:`host_tag`), as a repeat of the same seed (the report counts a seed once:
    ``n_repeats``). A twin already done here is not run again; a baseline job still to run needs none (it runs here
    too), nor one whose record has no rate.

    Args:
        jobs: the plan (:func:`plan`), in order.
        here: this machine's :func:`attnbench.callbacks.throughput.machine_boot`.
        baseline: the ``attention`` value the reports pair with.

    Returns:
        ``(jobs with the twins inserted, the twins)``.
    """
    def setting(job: Job) -> tuple:
        return job.stage, tuple(sorted((k, v) for k, v in job.overrides.items() if k != "attention")), \
            tuple(job.extra)

    def rate_hosts(run: Job) -> list:
        """The host of each rate its record has (None: recorded before hosts were); [] without rates."""
        record = json.loads((run.run_dir / "metrics.json").read_text())
        return [record.get(f"{phase}_host") for phase in ("train", "test") if f"{phase}/tokens_per_sec" in record]

    baselines = {setting(j): j for j in jobs if j.overrides.get("attention") == baseline}
    planned, twins, seen = [], [], set()
    for job in jobs:
        if job.same_as is not None or job.waits_for is not None:  # not run here (yet): no rate to pair
            planned.append(job)
            continue
        base = baselines.get(setting(job))
        # a job to run here, or one that ran here, pairs only with a baseline run of this machine
        here_too = job.status() != "done" or here in rate_hosts(job)
        if job is not base and base is not None and here_too and base.status() == "done" \
                and base.run_dir not in seen:
            if any(host != here for host in rate_hosts(base)):
                seen.add(base.run_dir)
                twin = Job(base.stage, dict(base.overrides), base.run_dir.with_name(f"{base.name}-on-{host_tag(here)}"),
                           list(base.extra), base.data)
                if twin.status() != "done":
                    planned.append(twin)
                    twins.append(twin)
        planned.append(job)
    return planned, twins


def done_on_other_commits(jobs: list[Job], manifest: dict, commit: str) -> dict[str, list[str]]:
    """The done jobs of ``jobs`` whose manifest record names a commit other than ``commit`` (``+dirty`` ignored),
    by that commit: ``{commit: ["<stage>/<name>", ...]}``. A job with no record is left out."""
    here = commit.split("+")[0]
    found: dict[str, list[str]] = {}
    for job in jobs:
        if job.status() != "done":
            continue
        key = f"{job.stage}/{job.name}"
        for other in {c.split("+")[0] for c in manifest.get("jobs", {}).get(key, {}).get("commits", [])} - {here}:
            found.setdefault(other, []).append(key)
    return found


def load_manifest(out: Path) -> dict:
    path = out / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {"jobs": {}}


#: the open lock file of this process's results dir (:func:`lock_results_dir`); every job inherits it
_LOCK_FILE = None


def _try_lock(path: Path) -> tuple[IO[str] | None, str | None]:
    """Open ``path`` and take an exclusive, non-blocking ``flock`` on it: ``(open file, None)`` when taken (held
    while the file is open), ``(None, holder)`` when another process holds it (the file's first line, else ``"a
    process"``), ``(None, None)`` where the OS has no ``fcntl`` (not POSIX)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here
        return None, None
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "a process"
        handle.close()
        return None, holder
    return handle, None


def lock_results_dir(out: Path):
    """Hold ``<out>/.reproduce.lock`` (an exclusive ``flock``) for the life of this process and return its open
    file (closing it, or exiting, releases the lock); ``None`` where the OS has no ``fcntl`` (not POSIX).

    Each job this process starts inherits the open file (:func:`run_job`, ``pass_fds``), and a flock is held
    while any process has it open: a job that outlives a killed ``attnbench reproduce`` (jobs run in their own session)
    keeps the dir locked until it ends, so no second reproduction starts the same job beside it.

    Raises:
        SystemExit: another ``attnbench reproduce`` holds it: two at once on one results dir would start the same jobs
            and overwrite each other's ``manifest.json`` (each saves the whole of its own copy).
    """
    handle, holder = _try_lock(out / ".reproduce.lock")
    if holder is not None:
        raise SystemExit(f"{out} is in use by another attnbench reproduce ({holder}), or a job it started that is "
                         "still running: two at once would start the same jobs and overwrite each other's manifest.json. Wait for it (or stop it: finished "
                         "jobs are kept), or give this one its own --out. Meanwhile --dry-run works, --report-only "
                         "(and --publish) takes the stages whose every job is done, and "
                         f"`attnbench report {out}/<stage>` reports the jobs finished so far.")
    if handle is None:
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    handle.flush()
    global _LOCK_FILE
    _LOCK_FILE = handle
    return handle


def results_dir_holder(out: Path) -> str | None:
    """Who holds ``<out>/.reproduce.lock`` (:func:`lock_results_dir`): its line (``pid ..., started ...``), or None
    when no process does (or the OS has no ``fcntl``). Takes the lock for an instant only."""
    path = out / ".reproduce.lock"
    if not path.is_file():
        return None
    handle, holder = _try_lock(path)
    if handle is not None:
        handle.close()
    return holder


def save_manifest(out: Path, manifest: dict) -> None:
    path = out / "manifest.json"
    write_text_atomically(path, json.dumps(manifest, indent=1, sort_keys=True))


def estimates(device: str, out: Path, manifest: dict) -> dict[str, float]:
    """Seconds per job by :attr:`Job.estimate_key`: the shipped file, overridden by finished jobs in ``out``."""
    shipped = ROOT / "docs" / "results" / f"reproduce_seconds_{device}.json"
    shipped_data = json.loads(shipped.read_text()) if shipped.is_file() else {}
    table = {**shipped_data.get("estimated", {}), **shipped_data.get("seconds", {})}  # measured beats estimated
    table.update(measured_seconds(manifest))
    return table


def job_estimate(job: Job, table: dict[str, float]) -> tuple[float | None, bool]:
    """``(seconds, own)`` of ``job``: its :attr:`Job.estimate_key`'s estimate (``own`` True), else, for a job with
    ``--set`` overrides, the stage's own budget's (:attr:`Job.budget_key`; ``own`` False: measured without the
    overrides, so the job may take much less or more); for a stage of :data:`~attnbench.experiments.registry.
    ESTIMATED_AS`, the same setting's estimate of the stage it names (:attr:`Job.alias_key`); ``(None, True)`` when
    none is known."""
    if job.estimate_key in table:
        return table[job.estimate_key], True
    if job.alias_key in table:  # the same setting's job of the stage it is estimated as (its time, another lr)
        return table[job.alias_key], True
    if job.budget_key in table:
        return table[job.budget_key], False
    return None, True


def measured_seconds(manifest: dict) -> dict[str, float]:
    """Median wall seconds of the jobs ``manifest`` saw run whole (not resumed), one at a time (``parallel_jobs``
    1) and undisturbed (the run's ``train/cpu_share``, where recorded, at least
    :data:`attnbench.analysis.stats.MIN_CPU_SHARE`: a paused job's wall time is no estimate), by
    :attr:`Job.estimate_key`."""
    from attnbench.analysis.stats import MIN_CPU_SHARE

    measured: dict[str, list[float]] = {}
    for entry in manifest["jobs"].values():
        alone = entry.get("parallel_jobs", 1) == 1
        steady = entry.get("cpu_share") is None or entry["cpu_share"] >= MIN_CPU_SHARE
        if entry.get("status") == "done" and entry.get("complete_run_seconds") and alone and steady:
            measured.setdefault(entry["estimate_key"], []).append(entry["complete_run_seconds"])
    return {k: statistics.median(v) for k, v in measured.items()}


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h} h {rem // 60:02d} min" if h else f"{rem // 60} min {rem % 60:02d} s"


def grid_lines(jobs: list[Job]) -> list[str]:
    """One line per training stage of ``jobs``: each swept key with its values in the plan's order, e.g.
    ``compare: seed=0,1 data=sst2,trec attention=additive,cosine,...``."""
    axes: dict[str, dict[str, dict[str, None]]] = {}
    for job in jobs:
        for key, value in job.overrides.items():
            axes.setdefault(job.stage, {}).setdefault(key, {})[value] = None
    return [f"{stage}: " + " ".join(f"{k}={','.join(v)}" for k, v in keys.items()) for stage, keys in axes.items()]


def print_plan(jobs: list[Job], table: dict[str, float], stages: list[str], out: Path, n_jobs: int = 1,
               report_only: bool = False, device: str = "cpu") -> float:
    """Print the jobs per stage and the expected duration; return it in seconds. The columns add up: ``jobs`` =
    ``done`` (metrics.json, skipped) + ``resume`` (from its newest checkpoint) + ``start`` (from the beginning).
    Where no job to run has an estimate (a device none of whose runs were measured), the duration is printed as
    unknown, not as 0.
    With ``n_jobs`` > 1 the training stages' sum is divided by it (the cost benchmarks run alone). A job with
    ``--set`` overrides and no finished job of the same overrides is estimated at the stage's own budget, and the
    plan says so. ``report_only``: nothing runs (``--report-only``), the expected duration is 0."""
    total, unknown, budget_only = 0.0, 0, 0
    waiting: dict[str, list[Job]] = {}
    print(f"{'stage':16} {'jobs':>5} {'done':>5} {'reuse':>5} {'resume':>6} {'start':>6}   expected")
    for stage in stages:
        mine = [j for j in jobs if j.stage == stage]
        if stage == "cost":
            pending = [name for name, result in COST_RESULTS.items() if not (out / "cost" / result).is_file()]
            est = sum(table.get(f"cost/{name}", 0.0) for name in pending)
            unknown += sum(f"cost/{name}" not in table for name in pending)  # a benchmark without an estimate
            total += est
            print(f"{stage:16} {'':>5} {'':>5} {'':>5} {'':>6} {'':>6}   {fmt_duration(est) if est else 'unknown'}")
            continue
        states = [j.status() for j in mine]
        todo = [j for j, s in zip(mine, states) if s not in ("done", "reuse")]
        if any(j.waits_for for j in todo):
            waiting[stage] = [j for j in todo if j.waits_for]
        found = [job_estimate(j, table) for j in todo]
        known = [sec for sec, _ in found if sec is not None]
        budget_only += sum(sec is not None and not own for sec, own in found)
        unknown += len(todo) - len(known)
        total += sum(known) / n_jobs
        note = (f"{fmt_duration(sum(known) / n_jobs)}" if known or not todo else "unknown") + (
            f" + {len(todo) - len(known)} job(s) unknown" if known and len(todo) > len(known) else "")
        if report_only:
            note = "none run (--report-only)"
        print(f"{stage:16} {len(mine):5d} {states.count('done'):5d} {states.count('reuse'):5d} "
              f"{states.count('resume'):6d} {len(todo) - states.count('resume'):6d}   {note}"
              + (" (an upper bound: see below)" if stage in waiting else ""))
    print("(jobs = done + reuse + resume + start; done: skipped, reuse: the same training as a job of an earlier "
          "stage, whose record is copied once it is done, resume: from its newest checkpoint, interrupted.ckpt or "
          "last.ckpt; start: from the beginning)")
    for stage, mine in waiting.items():
        tuning = mine[0].waits_for
        print(f"{stage}: {len(mine)} job(s) wait for {tuning}'s chosen learning rates ({out / tuning / CHOSEN_LR}, "
              f"written when its runs are done), counted in full: an upper bound (a job whose chosen lr is the shared "
              f"one is the same training as a compare job and reuses its run)")
    if report_only:
        print("expected duration: 0 min 00 s (--report-only: no job runs; the reports cover the finished jobs)")
        return 0.0
    if unknown and not total:
        print(f"expected duration: unknown: none of the {unknown} job(s) to run has an estimate (no finished job of "
              f"the same settings in {out}, and docs/results/reproduce_seconds_{device}.json has none for them: no "
              f"run of these settings on this device has been measured; after one, --write-estimates records "
              f"its times)")
        return 0.0
    print(f"expected duration: {fmt_duration(total)}" + (f" plus {unknown} job(s) without an estimate"
                                                          if unknown else "")
          + " (resumed jobs counted in full" + (f"; {n_jobs} training jobs at once, each estimate measured "
                                                 "one at a time" if n_jobs > 1 else "") + ")")
    if budget_only:
        extra = sorted({" ".join(j.extra) for j in jobs if j.extra})
        print(f"note: {budget_only} job(s) estimated at their stage's own budget: no finished job with the same "
              f"--set ({'; '.join(extra)}) in {out}, so they may take much less or much more")
    return total


#: guards the manifest and the progress lines when several jobs run at once (``--jobs``)
LOCK = threading.Lock()
#: the jobs running now, stopped with one SIGTERM each when the reproduction is interrupted
RUNNING: set[subprocess.Popen] = set()
#: set when the reproduction is interrupted: a job that ends after it is recorded as interrupted, not failed
STOPPING = threading.Event()


def cpu_groups(n_jobs: int) -> list[set[int] | None]:
    """One CPU set per concurrent job: the CPUs this process may use (``taskset`` narrows them), split into
    ``n_jobs`` equal contiguous groups; ``[None]`` (no pinning, the inherited affinity) for one job or where
    the OS has no CPU affinity (not Linux).

    Raises:
        SystemExit: more jobs than CPUs.
    """
    if n_jobs == 1 or not hasattr(os, "sched_getaffinity"):
        return [None] * n_jobs
    cpus = sorted(os.sched_getaffinity(0))
    if n_jobs > len(cpus):
        raise SystemExit(f"--jobs {n_jobs}: this process may use {len(cpus)} CPU(s) ({cpus}); "
                         f"choose --jobs {len(cpus)} or fewer")
    size = len(cpus) // n_jobs
    return [set(cpus[i * size:(i + 1) * size]) for i in range(n_jobs)]


def run_job(job: Job, device: str, manifest: dict, out: Path, commit: str, cpus: set[int] | None = None,
            parallel: int = 1) -> bool:
    """Run one job to its end, its output to ``<stage>/logs/<name>.log``; record it in the manifest.

    ``cpus``: pin the job to these CPUs with as many torch threads (``OMP_NUM_THREADS``); ``None`` keeps the
    inherited affinity and threads. ``parallel``: how many jobs ran at once (recorded: their wall times share
    the machine). Returns True when the job wrote its metrics.json.
    """
    status = job.status()
    if status == "leftover":
        shutil.rmtree(job.run_dir)
    log_path = job.run_dir.parent / "logs" / f"{job.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = job.command(device)
    with LOCK:
        key = str(job.run_dir.relative_to(out))
        if status in ("todo", "leftover"):  # a run from scratch: an earlier run's record (its commits, seconds,
            manifest["jobs"].pop(key, None)  # status) would be read as this run's; a resume extends its own
        entry = manifest["jobs"].setdefault(key, {})
        entry.update(estimate_key=job.estimate_key, overrides=job.overrides, command=" ".join(cmd[1:]),
                     parallel_jobs=parallel, cpus=sorted(cpus) if cpus is not None else None)
        entry.setdefault("commits", [])
        if commit not in entry["commits"]:
            entry["commits"].append(commit)
    env = None if cpus is None else {**os.environ, "OMP_NUM_THREADS": str(len(cpus))}
    start = time.monotonic()
    with open(log_path, "a") as log:
        log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} commit {commit}"
                  + (f", CPUs {sorted(cpus)}" if cpus is not None else "") + f"\n# {' '.join(cmd)}\n")
        log.flush()
        # its own session: a terminal's Ctrl-C reaches only this process, which passes one SIGTERM on (SIGTERM,
        # not SIGINT: a job started from a background shell inherits SIGINT ignored)
        with LOCK:
            if STOPPING.is_set():
                return False
            # the results dir's lock file, inherited: the dir stays locked while the job runs (lock_results_dir)
            held = () if _LOCK_FILE is None or _LOCK_FILE.closed else (_LOCK_FILE.fileno(),)
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env, pass_fds=held)
            RUNNING.add(proc)
        if cpus is not None:  # before the child has imported torch, so its OpenMP threads inherit the set
            os.sched_setaffinity(proc.pid, cpus)
        rc = proc.wait()
        with LOCK:
            RUNNING.discard(proc)
    seconds = time.monotonic() - start
    ok = rc == 0 and job.status() == "done"
    with LOCK:
        entry["status"] = "done" if ok else "interrupted" if STOPPING.is_set() else f"failed (exit {rc})"
        entry["seconds"] = entry.get("seconds", 0.0) + seconds
        if ok and status in ("todo", "leftover"):
            entry["complete_run_seconds"] = seconds  # a whole run in one go: a clean duration estimate
        if ok:  # how much of a core its training thread had (Throughput; absent on GPU): a low share flags a pause
            entry["cpu_share"] = json.loads((job.run_dir / "metrics.json").read_text()).get("train/cpu_share")
        save_manifest(out, manifest)
    return ok


def run_jobs(todo: list[Job], groups: list[set[int] | None], device: str, manifest: dict, out: Path,
             commit: str, table: dict[str, float]) -> list[Job]:
    """Run ``todo`` in order, ``len(groups)`` at once, each on a free CPU set of ``groups`` (from
    :func:`cpu_groups`); return the failed ones. A Ctrl-C or SIGTERM stops every running job with one SIGTERM (each saves interrupted.ckpt),
    waits for them, and raises KeyboardInterrupt."""
    n_jobs = len(groups)
    free: queue.Queue = queue.Queue()
    for group in groups:
        free.put(group)
    failed: list[Job] = []
    started = time.monotonic()
    progress = {"next": 0, "table": table}

    def work(job: Job) -> None:
        cpus = free.get()
        try:
            with LOCK:
                if STOPPING.is_set():
                    return
                progress["next"] += 1
                i = progress["next"]
                rest = todo[i - 1:]
                found = [job_estimate(j, progress["table"])[0] for j in rest]
                left = sum(sec or 0.0 for sec in found) / n_jobs
                unknown = sum(sec is None for sec in found)
                print(f"[{i}/{len(todo)}] {job.stage}/{job.name} ({job.status()})"
                      + (f" on CPUs {','.join(map(str, sorted(cpus)))}" if cpus is not None else "")
                      + f"; elapsed {fmt_duration(time.monotonic() - started)}, about {fmt_duration(left)} left"
                      + (f" + {unknown} job(s) without an estimate" if unknown else ""), flush=True)
            ok = run_job(job, device, manifest, out, commit, cpus, n_jobs)
            with LOCK:
                if ok:
                    progress["table"] = estimates(device, out, manifest)
                elif not STOPPING.is_set():
                    failed.append(job)
                    print(f"  failed: see {job.run_dir.parent / 'logs' / (job.name + '.log')}", flush=True)
        finally:
            free.put(cpus)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=n_jobs)
    futures = [pool.submit(work, job) for job in todo]
    try:
        for future in concurrent.futures.as_completed(futures):
            future.result()
    except KeyboardInterrupt:
        with LOCK:
            STOPPING.set()
            for proc in RUNNING:
                proc.send_signal(signal.SIGTERM)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return failed


def run_phases(jobs: list[Job], stages: list[str], args, groups: list[set[int] | None], manifest: dict, out: Path,
               commit: str, table: dict[str, float]) -> list:
    """Run the plan's jobs in stage order: first those before the first stage that waits for a tuning stage's choice
    (:attr:`Job.waits_for`), then that choice is written (:func:`write_chosen_lr`), the waiting stages are planned
    again with it and the rest runs. After each part, the ``reuse`` jobs whose source is done get its record
    (:func:`copy_reused`). Returns the failed jobs."""
    waiting = [j.stage for j in jobs if j.waits_for]
    cut = min((TRAIN_STAGES.index(s) for s in waiting), default=len(TRAIN_STAGES))
    parts = [[j for j in jobs if TRAIN_STAGES.index(j.stage) < cut],
             [j for j in jobs if TRAIN_STAGES.index(j.stage) >= cut]]
    failed: list = []
    for i, part in enumerate(parts):
        if i == 1:
            for tuning in dict.fromkeys(j.waits_for for j in part if j.waits_for):
                tuning_jobs = [j for j in jobs if j.stage == tuning] or plan([tuning], out, args.grid, args.extra)
                path = write_chosen_lr(tuning, tuning_jobs, out)
                print(f"{tuning}: wrote {path}" if path else f"{tuning}: no finished run to choose from", flush=True)
            again = sorted({j.stage for j in part if j.waits_for}, key=TRAIN_STAGES.index)
            if again:
                replanned = plan(again, out, args.grid, args.extra)
                part = [j for j in part if j.stage not in again] + replanned
                part.sort(key=lambda j: TRAIN_STAGES.index(j.stage))  # stable: each stage's sweep order kept
                jobs[:] = [j for j in jobs if j.stage not in again] + replanned
                still = [j for j in replanned if j.waits_for]
                if still:
                    print(f"{len(still)} job(s) of {', '.join(sorted({j.stage for j in still}))} still wait for a "
                          "chosen learning rate (their tuning runs are not all done): not run", flush=True)
        todo = [j for j in part if j.status() not in ("done", "reuse") and not j.waits_for]
        failed += run_jobs(todo, groups, args.device, manifest, out, commit, table)
        copied = copy_reused(jobs, manifest, out)
        if copied:
            save_manifest(out, manifest)
            print(f"reused {len(copied)} finished run(s) of the same training: "
                  + ", ".join(f"{j.stage}/{j.name} = {j.same_as.stage}/{j.same_as.name}" for j in copied[:3])
                  + (" ..." if len(copied) > 3 else ""), flush=True)
    return failed


def run_cost(device: str, out: Path, manifest: dict, commit: str, scores: str) -> bool:
    """The cost benchmarks into ``<out>/cost``, each skipped when its result file exists:
    ``attnbench bench attention`` (one attention call: time, memory, FLOPs per score function, path, n and d;
    ``cost/attention/results.json``) and ``attnbench bench train --attention`` (training tokens/s of the
    main job's step for every score function, interleaved runs, best of 3; ``cost/train_throughput.json``),
    the side-by-side figure the cost ratios of the Results come from. ``scores``: the score functions of the
    training benchmark, comma-separated (the ``compare`` stage's: :func:`cost_scores`)."""
    dest = out / "cost"
    attention = ["-m", "attnbench", "bench", "attention", "--out", str(dest / "attention"), "--no-wandb"]
    benches = [("attention", dest / COST_RESULTS["attention"],
                attention + (["--device", "cuda"] if device == "gpu" else list(CPU_COST_ARGS)))]
    if device == "cpu":  # the training benchmark measures on the CPU only; on a GPU the compare runs' own rates serve
        # every CPU this process may use (the benchmarks run alone), not the 1 thread a training job may be given
        threads = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        benches[0][2].extend(["--threads", threads])
        result = dest / COST_RESULTS["train_throughput"]
        benches.append(("train_throughput", result,
                        ["-m", "attnbench", "bench", "train", "--attention", scores, "--repeats", "3", "--threads",
                         threads, "--json", str(result)]))
    ok = True
    for name, result, args in benches:
        if result.is_file():
            continue
        result.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, *args]
        start = time.monotonic()
        with open(dest / f"{name}.log", "a") as log:
            log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} commit {commit}\n# {' '.join(cmd)}\n")
            log.flush()
            rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
        seconds, done = time.monotonic() - start, rc == 0 and result.is_file()
        manifest["jobs"][f"cost/{name}"] = {"status": "done" if done else f"failed (exit {rc})",
                                            "commits": [commit], "seconds": seconds,
                                            "estimate_key": f"cost/{name}", "command": " ".join(args)}
        if done:  # a benchmark always runs whole and alone: its wall time is the stage's duration estimate
            manifest["jobs"][f"cost/{name}"]["complete_run_seconds"] = seconds
        save_manifest(out, manifest)
        ok = ok and rc == 0
    return ok


def report(stage: str, out: Path) -> bool:
    """``attnbench report`` on ``<out>/<stage>`` into ``<out>/<stage>/report/``; True when it succeeded (or the
    stage has no runs dir: nothing to report)."""
    stage_dir = out / stage
    if not stage_dir.is_dir():
        return True
    rc = subprocess.run([sys.executable, "-m", "attnbench", "report", str(stage_dir), "--out",
                         str(stage_dir / "report")], cwd=ROOT).returncode
    return rc == 0


#: the files of a run its report reads (``attnbench report``: ``read_job``): published with the report as the run's
#: record, under ``docs/results/<device>/runs/<stage>/<run>/``, so the published tables can be recomputed from the
#: repository and a reproduction continued on another machine (``--from-published``, ``--from-progress``);
#: checkpoints, W&B files and logs stay in ``<out>``
#: ``docs/results/<device>/<PROGRESS>/``: records of finished runs not yet published (``--save-progress``)
PROGRESS = "progress"
PROGRESS_NOTE = ("records of finished runs not yet published, kept by attnbench reproduce --save-progress so that "
                 "a reproduction can continue on another machine (--from-progress restores them); not Results")
RUN_RECORD_FILES = ("metrics.json", "failure.json", ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml",
                    "csv/metrics*.csv")


def copy_run_record(run_dir: Path, dest: Path) -> list[Path]:
    """Copy ``run_dir``'s :data:`RUN_RECORD_FILES` into ``dest`` (made), keeping their relative paths; returns the
    files written."""
    written = []
    for pattern in RUN_RECORD_FILES:
        for src in sorted(run_dir.glob(pattern)):
            target = dest / src.relative_to(run_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            written.append(target)
    return written


def report_run_dirs(stage_dir: Path) -> list[Path]:
    """The run dirs a stage's report covers: the ``dir`` column of ``<stage_dir>/report/jobs.csv`` (jobs that were
    never started have none)."""
    import csv

    jobs_csv = stage_dir / "report" / "jobs.csv"
    if not jobs_csv.is_file():
        return []
    with open(jobs_csv, newline="") as f:
        return [Path(row["dir"]) for row in csv.DictReader(f) if row.get("dir")]


def _record_sources(device: str, published: bool = True) -> list[tuple[Path, dict]]:
    """Where run records are kept, in the order ``--from-published`` takes them: the unpublished ones
    ``--save-progress`` kept (``docs/results/<device>/progress/runs/``, ``progress/manifest.json``), which it keeps
    only when they are not the published run, then (with ``published``) the published ones
    (``docs/results/<device>/runs/``, ``manifest.json``); each with its manifest."""
    pub = ROOT / "docs" / "results" / device
    sources = []
    # progress first: kept after the publication, so newer where both hold a run
    for root in (pub / PROGRESS, pub) if published else (pub / PROGRESS,):
        manifest = root / "manifest.json"
        sources.append((root, json.loads(manifest.read_text()) if manifest.is_file() else {}))
    return sources


def restore_published_runs(stages: list[str], out: Path, device: str, manifest: dict, dry_run: bool = False,
                           published: bool = True) -> list[str]:
    """``--from-published``: copy every kept run record (the unpublished ones of ``progress/runs/``, then
    ``docs/results/<device>/runs/<stage>/<run>``: :func:`_record_sources`) whose run ``<out>/<stage>/<run>`` does
    not exist into ``<out>``, with its manifest record (``restored_from`` added) into ``manifest``; the plan then
    counts a finished one done (a failed or unfinished one runs again, from the start), and the next report and
    publication include it as it was. Without ``published`` (``--from-progress``) only the ``progress/`` records:
    a re-run on new code continues without taking the stage's published runs, of older code, as done. Returns
    ``<stage>/<run>`` of every run restored (with ``dry_run``: that would be; nothing copied).

    Raises:
        SystemExit: a kept run record has no record in its manifest (its commit is unknown); nothing is copied.
    """
    todo: dict[str, tuple[Path, dict]] = {}
    for root, kept in _record_sources(device, published):
        for stage in stages:
            for run in sorted(p for p in (root / "runs" / stage).glob("*") if p.is_dir()):  # finished or not
                if not (out / stage / run.name).exists():
                    todo.setdefault(f"{stage}/{run.name}", (run, kept))
    unknown = [key for key, (_, kept) in todo.items() if key not in kept.get("jobs", {})]
    if unknown:  # checked before anything is copied
        raise SystemExit(f"--from-{'published' if published else 'progress'}: {todo[unknown[0]][0]} has no record "
                         f"in the manifest.json beside its runs/ ({len(unknown)} run(s) so); its commit and command are unknown, so nothing was "
                         "restored")
    for key, (run, kept) in todo.items():
        if not dry_run:
            shutil.copytree(run, out / key)
            manifest["jobs"][key] = {**kept["jobs"][key], "restored_from": str(run.relative_to(ROOT))}
    return sorted(todo)


def save_progress(stages: list[str], out: Path, device: str, manifest: dict) -> list[str]:
    """``--save-progress``: keep the record of every finished run of ``stages`` in ``<out>`` (its ``metrics.json``
    written) in ``docs/results/<device>/progress/runs/<stage>/<run>/`` with its manifest record in
    ``progress/manifest.json``, unless the published records hold that run from the same commits; commit them, and
    ``--from-progress`` (or ``--from-published``) restores them on another machine (a reproduction that outlasts
    one machine). A run a later ``--publish`` reports leaves ``progress/`` (its record is then in ``runs/``); the
    others stay. Returns ``<stage>/<run>`` of the runs kept by this call."""
    (progress, kept), (pub, published) = _record_sources(device)
    kept = {"what": PROGRESS_NOTE, **kept, "jobs": dict(kept.get("jobs", {}))}
    saved = []
    for stage in stages:
        for metrics in sorted((out / stage).glob("*/metrics.json")):
            run = metrics.parent
            key = f"{stage}/{run.name}"
            if key not in manifest.get("jobs", {}):
                continue  # not run through reproduce.py: its commit is unknown (publish refuses it too)
            if (pub / "runs" / key).is_dir() and published.get("jobs", {}).get(key, {}).get("commits") == \
                    manifest["jobs"][key].get("commits"):
                continue  # published already
            if (progress / "runs" / key).exists():
                shutil.rmtree(progress / "runs" / key)
            copy_run_record(run, progress / "runs" / key)
            kept["jobs"][key] = manifest["jobs"][key]
            saved.append(key)
    if saved:
        kept["jobs"] = dict(sorted(kept["jobs"].items()))
        write_text_atomically(progress / "manifest.json", json.dumps(kept, indent=1, sort_keys=True) + "\n")
    return saved


class PublishError(SystemExit):
    """Publishing refused: nothing under docs/ was changed. Printed as one message, exit status 1."""

    def __init__(self, message: str):
        super().__init__(f"--publish: nothing published: {message}")


def merged_manifest(published: dict, current: dict, stages: list[str]) -> dict:
    """The published manifest with the records of ``stages`` replaced by ``current``'s (``<out>``'s): every
    other stage's job records are kept, and a published stage's records are exactly the jobs of ``<out>`` for
    it (the jobs its CSV reports), none of an earlier publication left beside them. ``started`` keeps the
    published entries and adds ``current``'s not yet in it."""
    def in_stages(key: str) -> bool:
        return key.split("/", 1)[0] in stages

    jobs = {k: v for k, v in published.get("jobs", {}).items() if not in_stages(k)}
    jobs.update({k: v for k, v in current.get("jobs", {}).items() if in_stages(k)})
    started = list(published.get("started", []))
    started += [s for s in current.get("started", []) if s not in started]
    return {**published, "jobs": dict(sorted(jobs.items())), "started": started}


def unrecorded_runs(stages: list[str], out: Path, manifest: dict) -> list[str]:
    """``<stage>/<run>`` of every run of a stage's report (:func:`report_run_dirs`) that ``manifest`` (of ``out``)
    has no record of: a run put into ``<out>/<stage>`` by hand, whose commit and command are unknown."""
    return [f"{stage}/{run_dir.name}" for stage in stages if stage in TRAIN_STAGES
            for run_dir in report_run_dirs(out / stage) if f"{stage}/{run_dir.name}" not in manifest.get("jobs", {})]


def broken_result_links(root: Path) -> list[tuple[str, str]]:
    """``(page, link)`` of every Markdown link or image in ``root``'s README/docs pages that points into
    ``docs/results/`` at a file that does not exist (a figure the published report did not draw)."""
    import re

    broken = []
    for md in [*root.glob("*.md"), *(root / "docs").rglob("*.md")]:
        for link in re.findall(r"\]\(([^)\s#]+)", md.read_text(encoding="utf-8")):
            target = (md.parent / link).resolve()
            if not link.startswith(("http:", "https:")) and (root / "docs" / "results").resolve() in target.parents \
                    and not target.exists():
                broken.append((str(md.relative_to(root)), link))
    return broken


def prune_empty(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and then each of its parents while it is an empty directory, up to ``stop`` (kept): the
    tree a publish leaves is the tree a clone has, where git keeps no empty folder."""
    for path in (folder, *folder.parents):
        if path == stop or not path.is_dir() or any(path.iterdir()):
            return
        path.rmdir()


def _hold_publish_lock(device: str):
    """Hold ``.git/attnbench-publish-<device>.lock`` (an exclusive ``flock``; outside the work tree) of the
    repository for as long as the returned file is open: a publication stages a copy of README.md and docs/ and
    writes back the files that changed, so a second one at the same time would revert the first's files. ``None``
    where the OS has no ``fcntl`` or the checkout has no ``.git`` directory.

    Raises:
        PublishError: another publication holds it.
    """
    git_dir = ROOT / ".git"
    if git_dir.is_file():  # a worktree: ".git" names its git dir
        git_dir = (ROOT / git_dir.read_text().split(":", 1)[1].strip()).resolve()
    if not git_dir.is_dir():
        return None
    handle, holder = _try_lock(git_dir / f"attnbench-publish-{device}.lock")
    if holder is not None:
        raise PublishError("another attnbench reproduce --publish is writing README.md and docs/ of this checkout; "
                           "nothing published: run this one again when it has finished")
    return handle


def publish(stages: list[str], out: Path, device: str, started: float) -> list[Path]:
    """Publish the reports of ``stages`` (each ``<out>/<stage>/report/``, of every run in ``<out>/<stage>``) to
    ``docs/results/<device>/`` and rewrite the generated tables of README.md and docs/ from them, all or nothing.

    Every file is first written to a staging copy of README.md and docs/: the stage's ``<stage>.csv``
    (report.csv), ``<stage>_jobs.csv`` (jobs.csv, one row per run), the plots the report drew (``started``: the
    report's start, ``time.time()``; the stage's other published plots are removed: they would be an earlier
    report's), the ``cost`` stage's ``attention_cost.json`` (``attnbench bench attention``'s results.json) with its plots
    (``cost_*.png``) and ``train_throughput.json``, each run's record (:data:`RUN_RECORD_FILES`, in
    ``runs/<stage>/<run>/``: exactly the report's runs), and ``manifest.json`` merged per stage
    (:func:`merged_manifest`). The tables are rendered from the staged files (``attnbench tables``);
    only when every step succeeded are the changed files moved into place.

    Returns:
        The files written or removed under the repository.

    Raises:
        PublishError: a stage has no report.csv, a run of the report has no record in ``<out>/manifest.json``
            (:func:`unrecorded_runs`), a table does not render (the renderer's message names the file
            and what to change), a page shows a figure of ``docs/results/`` the report did not draw, or a file
            cannot be written; nothing under docs/ or README.md was changed.
    """
    import filecmp
    import tempfile

    held = _hold_publish_lock(device)  # noqa: F841  (released when publish returns)
    with tempfile.TemporaryDirectory(prefix="attnbench-publish-") as tmp:
        stage_root = Path(tmp)
        for md in ROOT.glob("*.md"):
            shutil.copyfile(md, stage_root / md.name)
        shutil.copytree(ROOT / "docs", stage_root / "docs", ignore=shutil.ignore_patterns(".publish*"))
        pub = stage_root / "docs" / "results" / device
        pub.mkdir(parents=True, exist_ok=True)
        removed: list[Path] = []
        published: list[str] = []
        for stage in stages:
            if stage == "cost":
                throughput = out / "cost" / COST_RESULTS["train_throughput"]
                if throughput.is_file():
                    shutil.copyfile(throughput, pub / "train_throughput.json")
                    published.append(stage)
                bench = out / "cost" / COST_RESULTS["attention"]
                if bench.is_file():  # the benchmark's own output and its plots (time and memory vs n, time vs d)
                    shutil.copyfile(bench, pub / "attention_cost.json")
                    for png in bench.parent.glob("*.png"):
                        shutil.copyfile(png, pub / f"cost_{png.name}")
                    published.append(stage)
                continue
            if not (out / stage).is_dir():
                continue
            dest = out / stage / "report"
            if not (dest / "report.csv").is_file():
                raise PublishError(f"{dest / 'report.csv'} does not exist (attnbench report wrote no table of "
                                   f"{out / stage}); see its output above")
            shutil.copyfile(dest / "report.csv", pub / f"{stage}.csv")
            if (out / stage / CHOSEN_LR).is_file():  # a tuning stage's choice (the tuned stage's learning rates)
                shutil.copyfile(out / stage / CHOSEN_LR, pub / f"{stage}_{CHOSEN_LR}")
            records = pub / "runs" / stage  # the runs of this report, none of an earlier publication's
            reported = report_run_dirs(out / stage)
            progress_records = [pub / PROGRESS / "runs" / stage / run_dir.name for run_dir in reported]
            for old_records in [records, *progress_records]:  # a run's progress record: published now
                if old_records.exists():
                    removed += [p for p in old_records.rglob("*") if p.is_file()]
                    shutil.rmtree(old_records)
            prune_empty(pub / PROGRESS / "runs" / stage, stop=pub)  # as the move below and a clone leave it
            progress_manifest = pub / PROGRESS / "manifest.json"
            if progress_manifest.is_file():
                kept = json.loads(progress_manifest.read_text())
                published_keys = {f"{stage}/{run_dir.name}" for run_dir in reported}
                kept["jobs"] = {k: v for k, v in kept.get("jobs", {}).items() if k not in published_keys}
                write_text_atomically(progress_manifest, json.dumps(kept, indent=1, sort_keys=True) + "\n")
            for run_dir in reported:
                if not copy_run_record(run_dir, records / run_dir.name):
                    raise PublishError(f"{run_dir} holds none of a run's record files ({', '.join(RUN_RECORD_FILES)})"
                                       ": the report read a run this publication cannot record")
            jobs_csv = pub / f"{stage}_jobs.csv"
            if (dest / "jobs.csv").is_file():
                shutil.copyfile(dest / "jobs.csv", jobs_csv)
            elif jobs_csv.is_file():  # an earlier publication's runs: not this report's
                jobs_csv.unlink()
                removed.append(jobs_csv)
            for old in pub.glob(f"{stage}_*.png"):
                old.unlink()
                removed.append(old)
            for png in dest.glob("*.png"):
                # an earlier report's plot this one did not draw (a sweep it lacks); the maps stay in the report
                if png.stat().st_mtime >= started and not png.name.startswith("attention_maps"):
                    shutil.copyfile(png, pub / f"{stage}_{png.name}")
            published.append(stage)
        if not published:
            raise PublishError(f"no stage of {', '.join(stages)} has results in {out}")
        current = load_manifest(out)
        unrecorded = unrecorded_runs(published, out, current)
        if unrecorded:
            raise PublishError(f"{len(unrecorded)} run(s) of the report have no record in {out / 'manifest.json'} "
                               f"({', '.join(unrecorded[:3])}{', ...' if len(unrecorded) > 3 else ''}): the published "
                               "manifest would not describe the published table; run them through "
                               "attnbench reproduce (--grid) or move them out of the stage's folder")
        manifest_path = pub / "manifest.json"
        old_manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"jobs": {}}
        write_text_atomically(manifest_path, json.dumps(merged_manifest(old_manifest, current, published),
                                                         indent=1, sort_keys=True))
        from attnbench.analysis import tables

        for md in tables.markdown_files(stage_root):
            try:
                write_text_atomically(md, tables.regenerate(md.read_text(encoding="utf-8"), stage_root))
            except (ValueError, KeyError) as err:
                raise PublishError(f"{md.relative_to(stage_root)}: a generated table does not render: {err}") from None
        stale_prose = {str(md.relative_to(stage_root)): numbers for md in tables.markdown_files(stage_root)
                       if (numbers := tables.unsourced_prose_numbers(md.read_text(encoding="utf-8")))}
        removed = [p for p in dict.fromkeys(removed) if not p.exists()]  # not written anew by this report
        missing = broken_result_links(stage_root)
        if missing:
            page, link = missing[0]
            if f"/{PROGRESS}/" in f"/{link}":
                raise PublishError(f"{page} shows {link}, progress records this publish moves to "
                                   "docs/results/<device>/runs/<stage>/: reword the page's prose of the re-run "
                                   "so far (the published table is its report now) and remove the link")
            raise PublishError(f"{page} shows {link}, which this report did not draw (its runs "
                               "lack what the figure plots, e.g. training tokens/s of runs shorter than "
                               "callbacks.run_stats.warmup_steps): publish a report that draws it, or remove the "
                               "figure from the page")
        # every step succeeded: move the changed files into place (each by an atomic rename of a full copy)
        changed = []
        for staged in [*stage_root.glob("*.md"), *(stage_root / "docs").rglob("*")]:
            target = ROOT / staged.relative_to(stage_root)
            if staged.is_file() and not (target.is_file() and filecmp.cmp(staged, target, shallow=False)):
                changed.append((staged, target))
        try:
            for staged, target in changed:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp_target = target.with_name(f".{target.name}.publish-tmp")
                shutil.copyfile(staged, tmp_target)
                tmp_target.replace(target)
            for path in removed:
                target = ROOT / path.relative_to(stage_root)
                target.unlink(missing_ok=True)
                prune_empty(target.parent, stop=ROOT / "docs" / "results")  # a run record's folders, left empty
        except OSError as err:
            raise PublishError(f"could not write {err.filename}: {err.strerror}") from None
        written = [t for _, t in changed] + [ROOT / p.relative_to(stage_root) for p in removed]
    for path in written:
        print(f"{'published' if path.exists() else 'removed'} {path.relative_to(ROOT)}")
    for page, numbers in stale_prose.items():  # the tables are right; the words around them are the author's
        print(f"note: {page} quotes numbers in its prose that its generated tables no longer hold "
              f"({', '.join(numbers[:5])}{', ...' if len(numbers) > 5 else ''}): update the prose "
              "(attnbench tables --check lists them)")
    return written


def cost_scores(extra: list[str]) -> str:
    """The score functions the ``cost`` stage's training benchmark measures, comma-separated: the ``compare``
    stage's (every score function on the search path that ``extra``, the ``--set`` overrides, compose with)."""
    from hydra import initialize_config_dir

    from attnbench.config import config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return sweep_params("compare", extra)["attention"]


def main(argv: list[str] | None = None) -> int:
    """``attnbench reproduce``: a kill (SIGTERM) stops it as Ctrl-C does; either ends with exit status 130 and
    how to continue."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("interrupted; the running job saved interrupted.ckpt. Run the same command again to continue: "
              "finished jobs are skipped, a job with a checkpoint resumes exactly from its newest (interrupted.ckpt, "
              "mid-epoch included).", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None = None) -> int:
    global ROOT
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="cpu: every job with trainer=cpu; gpu: the experiments' own trainer=gpu (bf16)")
    parser.add_argument("--out", type=Path, default=None, help="results dir (default: <root>/results/<device>)")
    parser.add_argument("--root", type=Path, default=None,
                        help="where the jobs run and, for --publish, --from-published, --from-progress, "
                             "--save-progress and --write-estimates, the repository checkout whose docs/results/ "
                             "they use (default: the current directory)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)}")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="replace (or add) one swept key's values, e.g. --grid seed=0,1 (repeatable)")
    parser.add_argument("--set", action="append", default=[], dest="extra", metavar="KEY=VALUE",
                        help="an override for every job, e.g. --set trainer.max_steps=50 (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="training jobs at once, each pinned to its own 1/N of the CPUs this process may use "
                             "(with as many torch threads); on a 2-core machine --jobs 2 runs two one-core jobs")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and expected duration only")
    parser.add_argument("--no-report", action="store_true", help="skip the reports at the end")
    parser.add_argument("--report-only", action="store_true",
                        help="run no job: write the reports of the stages given (of every finished run in "
                             "<out>/<stage>) and, with --publish, publish them")
    parser.add_argument("--publish", action="store_true",
                        help="copy the report tables (<stage>.csv, <stage>_jobs.csv: one row per run) and figures "
                             "to docs/results/<device>/ and regenerate the "
                             "README/docs tables (attnbench tables)")
    parser.add_argument("--from-published", action="store_true",
                        help="first copy the kept run records of the stages (docs/results/<device>/runs/, "
                             "written by --publish, then progress/runs/, by --save-progress) that <out> lacks into "
                             "<out>, with their manifest records: continue a reproduction on another machine, or "
                             "re-report published runs")
    parser.add_argument("--from-progress", action="store_true",
                        help="as --from-published, but only the records --save-progress kept (progress/runs/): "
                             "continue a re-run whose stages' published runs are of older code, which would "
                             "otherwise count as done")
    parser.add_argument("--save-progress", action="store_true",
                        help="run no job: keep the records of the stages' finished runs that are not published "
                             "in docs/results/<device>/progress/ (commit them; --from-progress restores them "
                             "on another machine)")
    parser.add_argument("--no-baseline-twins", action="store_true",
                        help=f"do not run a {BASELINE} job again on this machine beside a job whose {BASELINE} twin "
                             "(same stage, setting and seed) finished on another: the report pairs rates only "
                             "within one machine, so such a job's multiples would have no pair")
    parser.add_argument("--write-estimates", action="store_true",
                        help="write docs/results/reproduce_seconds_<device>.json from the finished jobs in --out")
    args = parser.parse_args(argv)
    ROOT = (args.root or Path.cwd()).resolve()
    if args.from_published and args.from_progress:
        parser.error("--from-published and --from-progress: choose one (--from-progress restores only the records "
                     "--save-progress kept)")
    restore = "--from-published" if args.from_published else "--from-progress" if args.from_progress else None
    args.from_published = restore is not None  # either restores; --from-progress leaves the published runs out
    needs_docs = [flag for flag, on in (("--publish", args.publish), (restore, restore is not None),
                                        ("--save-progress", args.save_progress),
                                        ("--write-estimates", args.write_estimates)) if on]
    if needs_docs and not (ROOT / "docs" / "results").is_dir():
        parser.error(f"{needs_docs[0]} uses a repository checkout's docs/results/, and {ROOT} has none: run it "
                     "from the checkout's root, or pass --root <checkout>")
    for name in ("ATTNBENCH_DATA_DIR", "ATTNBENCH_CACHE_DIR"):  # relative to where the user is: the jobs (and the
        value = os.environ.get(name)  # plan's data check) run from the repository's root
        if value and not os.path.isabs(os.path.expanduser(value)):
            os.environ[name] = os.path.abspath(os.path.expanduser(value))
    if args.jobs < 1:
        parser.error(f"--jobs: at least 1, got {args.jobs}")
    if args.report_only and args.no_report:
        parser.error("--report-only and --no-report: choose one (--report-only runs no job, only the reports)")
    groups = cpu_groups(args.jobs)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        parser.error(f"--stages: unknown {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    stages = [s for s in STAGES if s in stages]  # always in the documented order
    out = (args.out or ROOT / "results" / args.device).resolve()
    if not args.dry_run:  # a dry run writes nothing
        out.mkdir(parents=True, exist_ok=True)
    # --report-only runs no job and saves no manifest, so it takes no lock: beside a reproduction that holds the dir
    # it reports only stages whose every job is done (checked below, once the plan is known)
    reads_only = args.dry_run or args.write_estimates or args.save_progress or (args.report_only
                                                                                 and not args.from_published)
    holder = results_dir_holder(out) if args.report_only and not args.from_published else None
    lock = None if reads_only else lock_results_dir(out)  # noqa: F841
    manifest = load_manifest(out)
    if args.save_progress:  # no plan, no lock: it reads finished runs only, also while a reproduction runs
        saved = save_progress([s for s in stages if s in TRAIN_STAGES], out, args.device, manifest)
        print(f"--save-progress: kept {len(saved)} finished run(s) in docs/results/{args.device}/{PROGRESS}/")
        return 0
    if args.from_published:
        restored = restore_published_runs([s for s in stages if s in TRAIN_STAGES], out, args.device, manifest,
                                          dry_run=args.dry_run, published=not args.from_progress)
        if not args.dry_run:
            save_manifest(out, manifest)
        print(f"{restore}: {'would restore' if args.dry_run else 'restored'} {len(restored)} kept run(s) "
              f"into {out}" + (" (the plan below counts them as still to run)" if args.dry_run and restored else ""))
    print(f"attnbench reproduce: planning {', '.join(stages)} (Hydra composes each job's config: a few "
          "seconds per 10 jobs)...", flush=True)
    jobs = plan(stages, out, args.grid, args.extra)
    twins: list[Job] = []
    if not args.no_baseline_twins:
        from attnbench.callbacks.throughput import machine_boot

        jobs, twins = with_baseline_twins(jobs, machine_boot())
    table = estimates(args.device, out, manifest)
    commit = code_commit()
    print(f"attnbench reproduce: device {args.device}, out {out}, commit {commit}")
    if twins:
        print(f"{len(twins)} baseline twin(s) in the plan: {BASELINE} jobs whose runs finished on another machine run "
              f"again here, so that the runs of those seeds on this machine have a {BASELINE} run to pair with "
              "(--no-baseline-twins: not): "
              + ", ".join(f"{t.stage}/{t.name}" for t in twins[:4]) + (" ..." if len(twins) > 4 else ""))
    print_plan(jobs, table, stages, out, args.jobs, report_only=args.report_only, device=args.device)
    older = done_on_other_commits(jobs, manifest, commit)
    if older:
        print(f"{len({key for keys in older.values() for key in keys})} done job(s) trained on other commits than "
              f"{commit} ("
              + ", ".join(f"{c}: {len(v)}" for c, v in sorted(older.items())[:4]) + (" ..." if len(older) > 4 else "")
              + "): they count as done; whether those commits train as this code does is the release check's to "
              "say (scripts/check_training_code.py)")
    for line in grid_lines(jobs):
        print(line)
    if holder:
        if "cost" in stages:
            raise SystemExit(f"{out} is in use by another attnbench reproduce ({holder}), which may be writing the "
                             "cost benchmarks' files: leave cost out of --stages until it has finished.")
        unfinished = {job.stage for job in jobs if job.stage in TRAIN_STAGES and job.status() != "done"}
        # the report covers every run dir of the stage, also those outside this command's --grid
        unfinished |= {stage for stage in stages if stage in TRAIN_STAGES and (out / stage).is_dir()
                       and any(run_dir.name not in ("logs", "report") and not (run_dir / "metrics.json").is_file()
                               for run_dir in (out / stage).iterdir() if run_dir.is_dir())}
        if unfinished:
            raise SystemExit(f"{out} is in use by another attnbench reproduce ({holder}), and "
                             f"{', '.join(s for s in stages if s in unfinished)} still has jobs to run: a report of it "
                             "now would be of a stage in progress. --report-only beside a running reproduction takes "
                             "only stages whose every job is done: pass --stages with those, or wait for it.")
    problems = [] if args.report_only or args.write_estimates else data_problems(jobs)
    for problem in problems:
        print(f"data: {problem}", flush=True)
    if problems and not args.dry_run:
        raise SystemExit("Stopped before any job ran: make the data above loadable (docs/data.md: a local mirror "
                         "in ATTNBENCH_DATA_DIR, or the Hub), or leave its jobs out (--stages, --grid data=...).")
    if args.write_estimates:
        path = ROOT / "docs" / "results" / f"reproduce_seconds_{args.device}.json"
        old = json.loads(path.read_text()) if path.is_file() else {}
        own = {k: v for k, v in measured_seconds(manifest).items() if " --set " not in k}  # the stages' budgets
        seconds = {**old.get("seconds", {}), **own}
        estimated = {k: v for k, v in old.get("estimated", {}).items() if k not in seconds}
        write_text_atomically(path, json.dumps({**old, "machine": os.uname().nodename, "commit": commit,
                                                "seconds": dict(sorted(seconds.items())), "estimated": estimated},
                                               indent=1) + "\n")
        print(f"wrote {path}")
    if args.dry_run or args.write_estimates:
        return 0
    started = time.monotonic()
    failed: list = []
    if not args.report_only:
        manifest.setdefault("started", []).append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "commit": commit,
                                                   "argv": sys.argv[1:]})
        save_manifest(out, manifest)
        failed += run_phases(jobs, stages, args, groups, manifest, out, commit, table)
        if "cost" in stages and not run_cost(args.device, out, manifest, commit, cost_scores(args.extra)):
            failed.append("cost")
    if not args.no_report:
        if "cost" in stages:  # its results are the benchmarks' own files: attnbench report has nothing to add
            print(f"cost: no report to write; its results are the benchmark files in {out / 'cost'}"
                  + (" (published below)" if args.publish else " (--publish copies them into docs/results/)"),
                  flush=True)
        report_started = time.time() - 2.0  # 2 s: filesystems that keep whole (FAT: even) seconds of mtime
        bad = [stage for stage in stages if stage in TRAIN_STAGES and not report(stage, out)]
        if bad:
            failed += [f"report of {stage}" for stage in bad]
            print(f"attnbench report failed for {', '.join(bad)} (its output is above)"
                  + ("; nothing published" if args.publish else ""), flush=True)
        elif args.publish:
            try:
                publish(stages, out, args.device, report_started)
            except PublishError as err:
                print(err.code, file=sys.stderr, flush=True)
                failed.append("publish")
    print(f"finished in {fmt_duration(time.monotonic() - started)}; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
