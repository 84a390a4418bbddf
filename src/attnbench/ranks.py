"""This process's rank from the launcher's environment (no torch import: the command line uses it)."""

from __future__ import annotations

import os


def global_rank_from_env(devices_per_node: int = 1) -> int:
    """This process's global rank as the launcher set it in the environment, before any process group exists.

    ``RANK`` (torchrun), ``SLURM_PROCID`` (SLURM, when it runs one task per
    device), otherwise ``NODE_RANK * devices_per_node + LOCAL_RANK`` (Lightning's
    own launcher); 0 in a plain single process.

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
