"""Whether W&B runs go online or offline (no Lightning import: scripts use it too)."""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from urllib.parse import urlparse


def wandb_base_url() -> str:
    """The W&B server a run would use: ``WANDB_BASE_URL``, else the installed wandb's default."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    try:
        import wandb

        return str(wandb.Settings().base_url)
    except Exception:  # noqa: BLE001 - wandb missing or its settings unreadable
        return "https://api.wandb.ai"


def wandb_credentials_available() -> bool:
    """True when an API key is set (``WANDB_API_KEY``) or stored in ``~/.netrc``
    for the W&B host (:func:`wandb_base_url`)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(wandb_base_url()).hostname or "api.wandb.ai"
    try:
        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        return bool(Path(path).is_file() and netrc.netrc(path).authenticators(host))
    except (OSError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    """``auto`` -> ``WANDB_MODE`` if set, else ``online`` with credentials, else ``offline``.

    Raises:
        ValueError: for a mode other than auto/online/offline/disabled.
    """
    if mode not in ("auto", "online", "offline", "disabled"):
        raise ValueError(f"logger.wandb.mode must be auto, online, offline or disabled, got {mode!r}")
    if mode != "auto":
        return mode
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled", "dryrun"):
        return "offline" if env == "dryrun" else env
    return "online" if wandb_credentials_available() else "offline"
