"""User-facing errors: each message says what to change. The CLI prints them without a traceback."""

from __future__ import annotations

import errno
import os
import re


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
    """The OSError (``err`` or its cause) that means an output could not be written, if it is one. A Rust
    library's error (HF ``tokenizers``: ``Exception("No space left on device (os error 28)")``) counts as the
    OSError of its number."""
    for candidate in (err, err.__cause__, err.__context__):
        if isinstance(candidate, OSError) and not isinstance(candidate, AttnbenchError) \
                and candidate.errno in _WRITE_ERRNOS:
            return candidate
        number = re.search(r"\(os error (\d+)\)", str(candidate)) if candidate is not None else None
        if number and int(number[1]) in _WRITE_ERRNOS:
            return OSError(int(number[1]), os.strerror(int(number[1])))
    return None


def whole_sentences(err: BaseException | str, limit: int = 200) -> str:
    """A library's error as whole sentences for a one-line message: ``<Type>: <text>``, the text being as many
    whole sentences of its first line as fit in ``limit`` characters (spaces collapsed), or ``<Type>`` alone when
    even the first is longer; a message never quotes a library's text cut mid-sentence.

    ``PytorchStreamReader failed reading zip archive: failed finding central directory`` stays whole; torch's
    multi-paragraph ``weights_only`` advice becomes ``UnpicklingError: Weights only load failed.``
    """
    name = "" if isinstance(err, str) else type(err).__name__
    line = " ".join((str(err).strip().splitlines() or [""])[0].split())
    shown = ""
    for sentence in re.split(r"(?<=[.!?])\s", line):
        if len(shown) + len(sentence) + 1 > limit:
            break
        shown = f"{shown} {sentence}".strip()
    if not shown:
        return name or "no message"
    return f"{name}: {shown}" if name else shown
