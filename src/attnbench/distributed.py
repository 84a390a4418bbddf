"""Several processes, one job: ranks before the Trainer exists, and Hydra-aware DDP child processes.

Lightning's DDP launcher (``strategy=ddp``) starts the other local ranks by
running the script again with the same command line. Under Hydra, Lightning
adds ``hydra.run.dir=<the run dir>`` so they share one output directory — but
the command line of a multirun (``-m ...``), an Optuna trial or a job in a
joblib/submitit worker is not the job's: a child would start the whole sweep
again, or a launcher's worker module. :func:`use_job_command_for_ddp_children`
makes the children run exactly this job instead: ``python -m attnbench.train
<the job's overrides> hydra.run.dir=<its output dir>``. Under SLURM (or
``torchrun``) the processes are started outside Lightning and none of this is
used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.overrides.distributed import UnrepeatedDistributedSampler

from attnbench.ranks import global_rank_from_env  # noqa: F401 - importable from here as before

# What Lightning's DDP launcher writes into the launching process's environment.
_LAUNCHER_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


def _quote(value: str | Path) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def ddp_child_command(task_overrides: Sequence[str], output_dir: Path, local_rank: int,
                      log_file_handler: bool = True) -> list[str]:
    """The command line that runs local rank ``local_rank`` of this job: the same config, the same output dir.

    The child keeps the job's config overrides (sweep parameters, Optuna's
    sampled values) and drops Hydra's own (``-m``, launcher, sweeper); it
    writes no ``.hydra/`` copy, and with ``log_file_handler`` (the job logging
    config has a ``file`` handler) its log goes to ``train_rank<N>.log``
    instead of the job's ``train.log``.
    """
    command = [
        sys.executable, "-m", "attnbench.train", *task_overrides,
        f"hydra.run.dir={_quote(output_dir)}", "hydra.output_subdir=null", f"hydra.job.name=train_rank{local_rank}",
    ]
    if log_file_handler:
        command.append(f"hydra.job_logging.handlers.file.filename={_quote(output_dir / f'train_rank{local_rank}.log')}")
    return command


def use_job_command_for_ddp_children(output_dir: Path) -> None:
    """Make Lightning's DDP launcher start this Hydra job's other local ranks with :func:`ddp_child_command`.

    Call it in the launching process once Hydra is initialised, before
    ``Trainer.fit``. It replaces the command builder Lightning uses when Hydra
    is in use (``_hydra_subprocess_cmd``: a private function, pinned by the
    DDP test); the working directory stays the one Hydra started in.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_original_cwd
    from pytorch_lightning.strategies.launchers import subprocess_script

    hydra_cfg = HydraConfig.get()
    task_overrides = list(hydra_cfg.overrides.task)
    file_handler = "file" in ((hydra_cfg.get("job_logging") or {}).get("handlers") or {})

    def command(local_rank: int) -> tuple[list[str], str]:
        return ddp_child_command(task_overrides, output_dir, local_rank, file_handler), get_original_cwd()

    if not hasattr(subprocess_script, "_hydra_subprocess_cmd"):  # pragma: no cover - a Lightning refactor
        raise RuntimeError("pytorch_lightning's DDP launcher changed: _hydra_subprocess_cmd is gone")
    subprocess_script._hydra_subprocess_cmd = command


@contextmanager
def ddp_job_scope() -> Iterator[None]:
    """One job's distributed state, undone when the job ends: several DDP jobs can run in one process.

    Lightning's launcher leaves ``LOCAL_RANK``, ``MASTER_PORT``, ... in the
    launching process's environment and keeps its process group; the next job
    of a multirun in the same process would take itself for a child (no
    processes started) and reuse a group whose peers have exited. In the
    launching process this destroys the group and restores those variables
    when the job ends; in a child process it does nothing.
    """
    saved = {key: os.environ.get(key) for key in _LAUNCHER_ENV}
    launching = "LOCAL_RANK" not in os.environ
    try:
        yield
    finally:
        if launching:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class LengthSortedSampler(torch.utils.data.Sampler):
    """Every index of a split once, longest first (ties keep index order): evaluation batches with little padding.

    Args:
        lengths: token count of each example, indexed by dataset index.
    """

    def __init__(self, lengths: Sequence[int]) -> None:
        self.lengths = list(lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(range(len(self.lengths)), key=lambda i: -self.lengths[i]))


class LengthSortedShardSampler(UnrepeatedDistributedSampler):
    """This process's rows of a split (``UnrepeatedDistributedSampler``: none repeated), longest first.

    A ``DistributedSampler`` subclass, so Lightning leaves the loader as it is.

    Args:
        dataset: the split.
        lengths: token count of each example, indexed by dataset index.
        **kwargs: ``num_replicas``, ``rank`` (as ``DistributedSampler``).
    """

    def __init__(self, dataset: Any, lengths: Sequence[int], **kwargs: Any) -> None:
        super().__init__(dataset, shuffle=False, **kwargs)
        self.lengths = list(lengths)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(super().__iter__(), key=lambda i: -self.lengths[i]))


def eval_sampler(dataset: Any, trainer: Any, lengths: Sequence[int] | None = None) -> Any:
    """The sampler of a validation/test loader: under DDP each process gets its own rows, none repeated.

    Lightning otherwise gives evaluation loaders a ``DistributedSampler``, which
    pads the split with repeated rows to a multiple of the number of
    processes: 63 rows on 2 processes were evaluated as 64 (val/acc 39/64
    instead of 39/63). ``UnrepeatedDistributedSampler`` (Lightning's, made for
    prediction) gives process ``r`` the rows ``r, r + W, r + 2W, ...``; the
    shards differ by at most one row, and the metrics (torchmetrics, summed
    states) count every row exactly once. Lightning leaves a loader that
    already has a ``DistributedSampler`` as it is.

    Args:
        dataset: the split (``len`` is used).
        trainer: the attached Trainer, or ``None``.
        lengths: token counts of the examples; when given, each process's rows
            come longest first (``data.batching=length_grouped``).

    Returns:
        The sampler, or ``None`` (sequential order) in a single process without ``lengths``.
    """
    kwargs = getattr(trainer, "distributed_sampler_kwargs", None) if trainer is not None else None
    if not kwargs or int(kwargs.get("num_replicas", 1)) <= 1 or len(dataset) < int(kwargs["num_replicas"]):
        # one process (or fewer rows than processes: Lightning's padded sampler, which needs no row)
        return LengthSortedSampler(lengths) if lengths is not None else None
    replicas = dict(num_replicas=int(kwargs["num_replicas"]), rank=int(kwargs["rank"]))
    if lengths is not None:
        return LengthSortedShardSampler(dataset, lengths, **replicas)
    return UnrepeatedDistributedSampler(dataset, shuffle=False, **replicas)
