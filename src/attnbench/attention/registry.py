"""Find and build score functions: discovery, name lookup, ``_target_`` import, option checks.

A score function is one module plus one YAML. The module defines a
:class:`~attnbench.attention.base.ScoreFunction` subclass with a ``name``
(setting it registers the class); ``conf/attention/<name>.yaml`` names the
class by ``_target_`` and lists its options::

    # conf/attention/additive.yaml
    _target_: attnbench.attention.additive.AdditiveScore
    name: additive
    hidden_dim: null

Every module of this package is imported by :func:`discover` (``pkgutil``),
so a new built-in needs no import anywhere; a class outside the package
(``_target_: mypkg.scores.MyScore``) is imported when a config names it.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import pkgutil
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from attnbench.attention.base import _REGISTRY, ScoreFunction
from attnbench.errors import ConfigError

PACKAGE = "attnbench.attention"


@functools.cache
def discover() -> tuple[str, ...]:
    """Import every module of :mod:`attnbench.attention` once, so each built-in class registers itself.

    Returns:
        The imported module names (``attnbench.attention.<module>``).
    """
    package = importlib.import_module(PACKAGE)
    names = tuple(f"{PACKAGE}.{info.name}" for info in pkgutil.iter_modules(package.__path__))
    for module in names:
        importlib.import_module(module)
    return names


def score_classes() -> dict[str, type[ScoreFunction]]:
    """``name -> class`` of every registered score function, sorted by name.

    The built-ins (every module of this package) plus any class outside it
    whose module has been imported (e.g. named by a YAML's ``_target_``).
    """
    discover()
    return dict(sorted(_REGISTRY.items()))


def available() -> list[str]:
    """Sorted names of all registered score functions (the ``attention=<name>`` choices)."""
    return list(score_classes())


def get_score_class(name: str) -> type[ScoreFunction]:
    """The class registered under ``name``.

    Raises:
        ConfigError: for an unknown name; the message lists the valid ones.
    """
    classes = score_classes()
    if name not in classes:
        raise ConfigError(
            f"unknown score function {name!r}; choose one of: {', '.join(classes)} (attention=<name>)"
        )
    return classes[name]


def import_score_class(target: str) -> type[ScoreFunction]:
    """The class a ``_target_`` (``package.module.Class``) names.

    An error raised while the named module runs (a bug in it) propagates
    unchanged, with its own traceback.

    Raises:
        ConfigError: the module or the class does not exist, or the class is
            not a :class:`ScoreFunction` subclass.
    """
    module_name, _, attr = str(target).rpartition(".")
    where = f"attention._target_={target}"
    if not module_name:
        raise ConfigError(f"{where}: expected <module>.<Class>, e.g. {PACKAGE}.scaled_dot.ScaledDotScore")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is None or not (module_name == err.name or module_name.startswith(err.name + ".")):
            raise  # the module exists but imports something missing: its own traceback
        raise ConfigError(f"{where}: no module named {err.name!r}; is its package on PYTHONPATH?") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise ConfigError(f"{where}: module {module_name!r} has no attribute {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, ScoreFunction)):
        raise ConfigError(f"{where} is not a subclass of {PACKAGE}.ScoreFunction")
    return cls


def _check_options(cls: type[ScoreFunction], label: str, options: Mapping[str, Any]) -> None:
    """Refuse options ``cls`` does not take, or required ones that are missing, naming the keys.

    Only the signature is checked: the constructor itself runs later, unwrapped.

    Raises:
        ConfigError: unknown option (with the closest accepted names) or missing required option.
    """
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [n for n, p in params.items() if n not in ("n_heads", "head_dim") and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    for key in options:
        if key not in takes:
            close = difflib.get_close_matches(key, takes, n=1)
            hint = f"did you mean attention.{close[0]}? " if close else ""
            raise ConfigError(
                f"attention={label}: unknown option attention.{key}; {hint}{cls.__qualname__} takes: "
                f"{', '.join(takes) or 'no options'}"
            )
    missing = [n for n in takes if params[n].default is inspect.Parameter.empty and n not in options]
    if missing:
        raise ConfigError(f"attention={label}: missing option(s) {', '.join('attention.' + n for n in missing)}")


def build_score_function(spec: Mapping[str, Any] | str, n_heads: int, head_dim: int, **options: Any) -> ScoreFunction:
    """Instantiate the score function an attention config describes, for ``n_heads`` heads of size ``head_dim``.

    Args:
        spec: the attention config mapping (``dict`` or ``DictConfig``, as in
            ``conf/attention/<name>.yaml``): ``_target_`` (the class,
            ``package.module.Class``), ``name`` (the ``attention=<name>``
            label) and the class's own keyword options. Without ``_target_``
            the class is looked up by ``name`` among the registered ones; a
            bare string is a name without options.
        n_heads: H. head_dim: d.
        options: further options, merged over ``spec``'s (a shortcut for code:
            ``build_score_function("additive", 4, 32, hidden_dim=8)``).

    Returns:
        The score function (an ``nn.Module``).

    Raises:
        ConfigError: unknown name or ``_target_``, a ``name`` that is not the
            ``_target_`` class's own, an option the class does not take, or a
            missing required one (each message names the key to change).
        Anything the constructor raises, unchanged and with its own traceback
        (e.g. ``ValueError`` for a value out of range; a ``TypeError`` from a
        bug inside it).
    """
    if isinstance(spec, str):
        spec = {"name": spec}
    if OmegaConf.is_config(spec):
        spec = OmegaConf.to_container(spec, resolve=True)  # plain values, interpolations resolved
    if not isinstance(spec, Mapping):
        raise ConfigError(f"the attention config must be a mapping (conf/attention/<name>.yaml), got {spec!r}")
    options = {**{str(k): v for k, v in spec.items()}, **options}
    name = options.pop("name", None)
    target = options.pop("_target_", None)
    if target is None:
        if name is None:
            raise ConfigError("the attention config names no score function: set attention._target_ (or attention=<name>)")
        cls = get_score_class(str(name))
    else:
        cls = import_score_class(str(target))
        if name is not None and cls.name and str(name) != cls.name:
            registered = score_classes()
            if str(name) not in registered:
                get_score_class(str(name))  # raises "unknown score function ...; choose one of: ..."
            raise ConfigError(
                f"attention.name={name!r} is not the score function of attention._target_={target} "
                f"({cls.name!r}); choose one with attention={name}"
            )
    label = str(name) if name is not None else (cls.name or cls.__qualname__)
    _check_options(cls, label, options)
    fn = cls(n_heads=n_heads, head_dim=head_dim, **options)
    if not cls.name and name is not None:
        fn.name = str(name)  # an unregistered (out-of-package, nameless) class carries its YAML's name
    return fn
