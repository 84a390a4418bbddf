"""User-facing errors: each message says what to change. The CLI prints them without a traceback."""


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
