"""The two data errors: the dataset cannot be reached, or the data config does not fit it."""

from __future__ import annotations

from attnbench.errors import AttnbenchError, ConfigError


class DataUnavailableError(AttnbenchError, RuntimeError):
    """Neither local files, the Hugging Face Hub nor the packaged default data could provide the dataset."""


class DataConfigError(ConfigError):
    """The data configuration does not fit the dataset (columns, labels, sizes)."""
