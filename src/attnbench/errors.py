"""User-facing errors: each message says what to change. The CLI prints them without a traceback."""

from __future__ import annotations

import errno


class AttnbenchError(Exception):
    """Base class of errors caused by the user's input (config, data), not by a bug."""


class ConfigError(AttnbenchError, ValueError):
    """A config value cannot work (sizes, dropout, unknown options)."""


class RunInterrupted(AttnbenchError):
    """Ctrl-C (SIGINT) or SIGTERM; ``exit_code`` is 128 + the signal number (130 or 143)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class OutputDirTaken(ConfigError):
    """The output dir holds another run's results; nothing is written into it (no ``failure.json`` either)."""


class NonFiniteLossError(AttnbenchError, FloatingPointError):
    """The training loss became NaN or infinite; training stopped before that step's update."""


class OutOfMemory(AttnbenchError, MemoryError):
    """A step needed more memory than the device has; the message names the knobs that lower it."""


class OutputWriteError(AttnbenchError, OSError):
    """A checkpoint or other output could not be written (disk full, read-only, permissions)."""


_WRITE_ERRNOS = {errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.EPERM, errno.EEXIST, errno.ENOTDIR,
                 errno.EISDIR, errno.EIO}


def write_error(err: BaseException) -> OSError | None:
    """The OSError (``err`` or its cause) that means an output could not be written, if it is one."""
    for candidate in (err, err.__cause__, err.__context__):
        if isinstance(candidate, OSError) and not isinstance(candidate, AttnbenchError) \
                and candidate.errno in _WRITE_ERRNOS:
            return candidate
    return None
