"""Name -> score-function class registry.

Adding a score function is one module that decorates its class with
:func:`register` plus one YAML in ``conf/attention/``.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from attnbench.attention.base import ScoreFunction

_REGISTRY: dict[str, type[ScoreFunction]] = {}

S = TypeVar("S", bound=type[ScoreFunction])


def register(name: str) -> Callable[[S], S]:
    """Class decorator: make a :class:`ScoreFunction` available as ``attention=<name>``.

    Raises:
        ValueError: if ``name`` is already registered to another class.
    """

    def deco(cls: S) -> S:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"score function {name!r} is already registered to {_REGISTRY[name].__name__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def available() -> list[str]:
    """Sorted names of all registered score functions."""
    return sorted(_REGISTRY)


def get_score_class(name: str) -> type[ScoreFunction]:
    """The class registered under ``name``.

    Raises:
        KeyError: for an unknown name; the message lists the valid ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown score function {name!r}; choose one of: {', '.join(available())}"
        ) from None


def build_score_function(name: str, n_heads: int, head_dim: int, **options: Any) -> ScoreFunction:
    """Instantiate the score function ``name`` for ``n_heads`` heads of size ``head_dim``.

    ``options`` are the class's own keyword arguments (e.g. ``hidden_dim`` for
    ``additive``), as written in ``conf/attention/<name>.yaml``.

    Raises:
        KeyError: unknown ``name`` (message lists the valid names).
        TypeError: an option the class does not take.
    """
    cls = get_score_class(name)
    try:
        return cls(n_heads=n_heads, head_dim=head_dim, **options)
    except TypeError as err:
        raise TypeError(f"attention={name}: bad option in {sorted(options)}: {err}") from None
