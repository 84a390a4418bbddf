"""The published experiments as data: which stages there are, and what each one sweeps.

A stage is a shipped experiment, ``conf/experiment/<stage>.yaml``: its sweep grid
(``hydra.sweeper.params``: seeds, datasets, settings), its per-dataset budgets (``budget``,
``max_length_by_data``) and its score functions live there and nowhere else. An experiment that
sweeps every score function says so with the resolver this module registers::

    hydra:
      sweeper:
        params:
          attention: ${attnbench.score_functions:}

which resolves, when Hydra composes the config, to every option of the ``attention`` config group on the
search path the run composes with: ``conf/attention/*.yaml`` of the package, plus the YAMLs of any folder added
with ``hydra.searchpath=[file://<dir>]`` (``<dir>/attention/<name>.yaml``; the module it names by ``_target_``
is imported when a job builds it). So a new score function, one module plus one YAML in or out of the package,
joins ``python train.py -m experiment=compare`` and ``attnbench reproduce``'s plan with no other edit. A
score function is selected by its YAML (``attention=<name>``); a registered class without one is not a
config-group option and is not swept.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

#: the training stages ``attnbench reproduce`` runs, in order (each ``conf/experiment/<stage>.yaml``)
TRAIN_STAGES = ("compare", "head_dim_sweep", "long_context", "capacity")
#: every stage: the training stages, then the cost benchmarks (``attnbench bench attention`` / ``bench train``)
STAGES = (*TRAIN_STAGES, "cost")
#: the score function the reports pair every other one with (``attnbench report --baseline``, its default)
BASELINE = "scaled_dot"
#: the control: attention without content (every key the same weight), which a task must let ``BASELINE`` beat for
#: score functions to be able to differ on it (``attnbench report``'s "does not discriminate" mark)
CONTROL = "uniform"
#: the config group whose options are the score functions
GROUP = "attention"


def score_functions(config_sources: Any) -> list[str]:
    """Sorted names of the :data:`GROUP` options on a composed config's search path.

    Args:
        config_sources: ``hydra.runtime.config_sources`` of a composed config (each with ``path``, ``schema``,
            ``provider``): the package's configs and any ``hydra.searchpath`` folders.

    Returns:
        Every ``<name>`` of an ``attention/<name>.yaml`` in those sources, each once.
    """
    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.object_type import ObjectType

    names: set[str] = set()
    for info in config_sources or []:
        source = SourcesRegistry.instance().resolve(info["schema"])(info["provider"],
                                                                     f"{info['schema']}://{info['path']}")
        if source.is_group(GROUP):
            names.update(source.list(GROUP, ObjectType.CONFIG))
    return sorted(names)


def _score_functions_resolver(*, _root_: Any) -> str:
    """``${attnbench.score_functions:}``: :func:`score_functions` of the config being composed, comma-separated
    (a Hydra sweep value: ``attention=a,b,c``).

    Raises:
        ValueError: the config holds no ``hydra.runtime.config_sources`` (composed without its Hydra node,
            ``compose(..., return_hydra_config=False)``), or the search path has no score function.
    """
    sources = OmegaConf.select(_root_, "hydra.runtime.config_sources", default=None)
    names = score_functions(OmegaConf.to_container(sources) if sources is not None else None)
    if not names:
        raise ValueError("${attnbench.score_functions:} found no attention/<name>.yaml on the config search path "
                         "(compose with return_hydra_config=True, inside a Hydra app or initialize_config_dir)")
    return ",".join(names)


OmegaConf.register_new_resolver("attnbench.score_functions", _score_functions_resolver, replace=True)


def sweep_params(stage: str, overrides: list[str] = ()) -> dict[str, str]:
    """``hydra.sweeper.params`` of ``conf/experiment/<stage>.yaml`` composed with ``overrides`` (``--set``, e.g.
    ``hydra.searchpath=[file://<dir>]``), resolved: ``{"seed": "0,1,2", "data": "sst2,trec", "attention":
    "additive,...", ...}``. Call inside ``hydra.initialize_config_dir`` (as :func:`attnbench.experiments.
    reproduce.plan` does)."""
    from hydra import compose

    cfg = compose("train", overrides=[f"experiment={stage}", *overrides], return_hydra_config=True)
    return {str(k): str(v) for k, v in (cfg.hydra.sweeper.params or {}).items()}
