"""Several processes, one job: the rank before the Trainer exists, and Hydra-aware DDP child processes.

No torch import at module level: the command line uses :func:`global_rank_from_env`.

Lightning's DDP launcher (``strategy=ddp``) starts the other local ranks by running the script again with the same
command line (under Hydra with ``hydra.run.dir=<the run dir>`` added, so they share one output directory); but the
command line of a multirun (``-m ...``), an Optuna trial or a joblib/submitit worker is not the job's: a child
would start the whole sweep again, or a launcher's worker module. :func:`use_job_command_for_ddp_children` makes
the children run exactly this job instead: ``python -m attnbench.run.cli <the job's overrides>
hydra.run.dir=<its output dir>``. Under SLURM (or ``torchrun``) the processes are started outside Lightning and
none of this is used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def global_rank_from_env(devices_per_node: int = 1) -> int:
    """This process's global rank as the launcher set it in the environment, before any process group exists.

    ``RANK`` (torchrun), ``SLURM_PROCID`` (SLURM, when it runs one task per device), otherwise
    ``NODE_RANK * devices_per_node + LOCAL_RANK`` (Lightning's own launcher); 0 in a plain single process.

    Args:
        devices_per_node: processes per node, used only with ``NODE_RANK``.
    """
    env = os.environ
    for key in ("RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if env.get(key, "").isdigit() and (key != "SLURM_PROCID" or int(env.get("SLURM_NTASKS", "1") or 1) > 1):
            return int(env[key])
    node = int(env.get("NODE_RANK", env.get("GROUP_RANK", "0")) or 0)
    local = int(env.get("LOCAL_RANK", "0") or 0)
    return node * max(1, devices_per_node) + local


def processes_per_node(cfg: Any) -> int:
    """``trainer.devices`` when it is a count of processes, else 1 (``auto``, a device list)."""
    devices = (cfg.get("trainer") or {}).get("devices", 1)
    return int(devices) if isinstance(devices, int) and devices > 0 else 1


_LAUNCHER_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


def _quote(value: str | Path) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def ddp_child_command(task_overrides: Sequence[str], output_dir: Path, local_rank: int,
                      log_file_handler: bool = True) -> list[str]:
    """The command line that runs local rank ``local_rank`` of this job: the same config, the same output dir.

    The child keeps the job's config overrides (sweep parameters, Optuna's sampled values) and drops Hydra's own
    (``-m``, launcher, sweeper); it writes no ``.hydra/`` copy, and with ``log_file_handler`` (the job logging
    config has a ``file`` handler) its log goes to ``train_rank<N>.log`` instead of the job's ``train.log``.
    """
    command = [
        sys.executable, "-m", "attnbench.run.cli", *task_overrides,
        f"hydra.run.dir={_quote(output_dir)}", "hydra.output_subdir=null", f"hydra.job.name=train_rank{local_rank}",
    ]
    if log_file_handler:
        command.append(f"hydra.job_logging.handlers.file.filename={_quote(output_dir / f'train_rank{local_rank}.log')}")
    return command


def use_job_command_for_ddp_children(output_dir: Path) -> None:
    """Make Lightning's DDP launcher start this Hydra job's other local ranks with :func:`ddp_child_command`.

    Call it in the launching process once Hydra is initialised, before ``Trainer.fit``. It replaces the command
    builder Lightning uses when Hydra is in use (``_hydra_subprocess_cmd``: a private function, pinned by the DDP
    test); the working directory stays the one Hydra started in.
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

    Lightning's launcher leaves ``LOCAL_RANK``, ``MASTER_PORT``, ... in the launching process's environment and
    keeps its process group; the next job of a multirun in the same process would take itself for a child (no
    processes started) and reuse a group whose peers have exited. In the launching process this destroys the group
    and restores those variables when the job ends; in a child process it does nothing.
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
