"""User-facing errors: each message says what to change. The CLI prints them without a traceback."""


class AttnbenchError(Exception):
    """Base class of errors caused by the user's input (config, data), not by a bug."""


class ConfigError(AttnbenchError, ValueError):
    """A config value cannot work (sizes, dropout, unknown options)."""
