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

A stage whose jobs are not one product (a d_a grid for ``additive`` beside one ``scaled_dot`` per setting; more seeds
on one dataset than on the others) has further grids in :data:`GRIDS`, each a ``key: values`` mapping merged over its
``hydra.sweeper.params``; its jobs are the union of the products, in order (:func:`sweep_grids`). They live here, not
in the run config, so that no run records a sweep's layout as a setting of its own. ``python train.py -m
experiment=<stage>`` sweeps ``hydra.sweeper.params`` alone; ``attnbench reproduce`` runs the union.

The stages in order (:data:`TRAIN_STAGES`, then ``cost``):

- ``compare``: every score function (the ``uniform`` control included) x seeds x SST-2, TREC, IMDB at one shared
  learning rate;
- ``tune_lr``: every score function x SST-2, IMDB x a log grid of ``optim.lr`` at compare's budgets, one seed: each
  (score function, dataset)'s learning rate is the one with the best validation accuracy (:data:`TUNE_METRIC`);
- ``compare_tuned``: compare's grid on SST-2 and IMDB, each (score function, dataset) at its chosen learning rate
  (:data:`TUNED_BY`);
- ``head_dim_sweep``: d_k = head_dim 16 ... 128 x five score functions x seeds on SST-2;
- ``d_a``: ``additive``'s hidden size d_a at fixed d_k = 32, beside ``scaled_dot``, on SST-2 and associative recall;
- ``long_context``: IMDB at max_length 512, ``scaled_dot`` and the ``uniform`` control x seeds;
- ``capacity``: associative recall at data.num_pairs 8 ... 32 x head_dim 8 / 64 x every score function x seeds.

A job whose training is the same as a job of an earlier stage (the same :data:`TRAINING_KEYS`, its name and
``task_name`` aside: compare_tuned at the shared learning rate, tune_lr's shared-lr job, d_a's d_a = d_k jobs on
SST-2) is not trained twice: ``attnbench reproduce`` copies that job's record.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

#: the training stages ``attnbench reproduce`` runs, in order (each ``conf/experiment/<stage>.yaml``): the shared-lr
#: comparison first (its seed-0 jobs are tune_lr's shared-lr points), then the tuning and the tuned comparison that
#: reads its choice, the other effect stages, and capacity last (its jobs, the longest stage, run apart on a CPU)
TRAIN_STAGES = ("compare", "tune_lr", "compare_tuned", "head_dim_sweep", "d_a", "long_context", "capacity")
#: every stage: the training stages, then the cost benchmarks (``attnbench bench attention`` / ``bench train``)
STAGES = (*TRAIN_STAGES, "cost")
#: the score function the reports pair every other one with (``attnbench report --baseline``, its default)
BASELINE = "scaled_dot"
#: the control: attention without content (every key the same weight), which a task must let ``BASELINE`` beat for
#: score functions to be able to differ on it (``attnbench report``'s "does not discriminate" mark)
CONTROL = "uniform"
#: the config group whose options are the score functions
GROUP = "attention"
#: a stage whose ``optim.lr`` is chosen per (score function, dataset) by another stage's runs: ``attnbench reproduce``
#: writes the choice to ``<out>/<tuning stage>/chosen_lr.json`` once those runs are done and gives each job its
#: ``optim.lr=<chosen>`` override
TUNED_BY = {"compare_tuned": "tune_lr"}
#: what the tuning selects on: the runs' ``optimized_metric`` (conf/train.yaml), the best validation accuracy over the
#: epochs, whose checkpoint is the one tested; ties go to the shared learning rate, then to the smaller one
TUNE_METRIC = "val/acc_best"
#: a stage whose jobs take the time of another stage's job of the same setting (``optim.lr`` aside): the plan's
#: estimate where the stage has none of its own
ESTIMATED_AS = {"tune_lr": "compare", "compare_tuned": "compare"}
#: a stage whose jobs may be the same training as jobs of an earlier stage (:data:`TRAINING_KEYS` equal): those are
#: not trained again, their records are copied (compare's seed-0 shared-lr jobs in tune_lr, its shared-lr jobs in
#: compare_tuned, its d_a = d_k additive and scaled_dot SST-2 jobs in d_a)
REUSES = {"tune_lr": "compare", "compare_tuned": "compare", "d_a": "compare"}
#: compare's seeds beyond hydra.sweeper.params' 0-4: SST-2's paired differences need 10 for a 1-point minimum
#: detectable difference (conf/experiment/compare.yaml)
_SST2_SEEDS = [{"seed": "5,6,7,8,9", "data": "sst2"}]
#: each stage's further grids (:func:`sweep_grids`): ``{key: values}`` merged over the experiment's
#: ``hydra.sweeper.params``; a key set to None is not swept in that grid
GRIDS: dict[str, list[dict[str, str | None]]] = {
    "compare": _SST2_SEEDS,
    "compare_tuned": _SST2_SEEDS,
    # d_a: additive at its default d_a (= d_k) and scaled_dot once per setting, beside params' d_a 128, 512 on SST-2;
    # the same three on associative recall at 24 pairs (conf/experiment/d_a.yaml)
    "d_a": [{"attention": "additive,scaled_dot", "attention.hidden_dim": None},
            {"data": "assoc_recall", "model": "recall", "data.num_pairs": "24"},
            {"data": "assoc_recall", "model": "recall", "data.num_pairs": "24", "attention": "additive,scaled_dot",
             "attention.hidden_dim": None}],
}
#: the config keys that define what a job trains and tests: two jobs equal in all of them are the same training
#: (their name, task_name, tags and W&B group aside)
TRAINING_KEYS = ("seed", "model", "attention", "data", "optim", "trainer", "module", "compile", "callbacks",
                 "test_batches_if_stopped")


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


def _suffix(prefix: str, value: Any) -> str:
    """``${attnbench.suffix:da,${oc.select:attention.hidden_dim,null}}`` in a ``run_name``: ``-da128``, or nothing
    when the value is null (the setting's default)."""
    return "" if value is None else f"-{prefix}{value}"


OmegaConf.register_new_resolver("attnbench.suffix", _suffix, replace=True)


def sweep_params(stage: str, overrides: list[str] = ()) -> dict[str, str]:
    """``hydra.sweeper.params`` of ``conf/experiment/<stage>.yaml`` composed with ``overrides`` (``--set``, e.g.
    ``hydra.searchpath=[file://<dir>]``), resolved: ``{"seed": "0,1,2", "data": "sst2,trec", "attention":
    "additive,...", ...}``. Call inside ``hydra.initialize_config_dir`` (as :func:`attnbench.experiments.
    reproduce.plan` does)."""
    from hydra import compose

    return sweep_grids(stage, overrides)[0]


def sweep_grids(stage: str, overrides: list[str] = ()) -> list[dict[str, str]]:
    """The grids of a stage: ``hydra.sweeper.params`` of ``conf/experiment/<stage>.yaml`` (as :func:`sweep_params`),
    then each of its :data:`GRIDS` merged over it (a key set to None there is not swept in that grid). Call inside
    ``hydra.initialize_config_dir``."""
    from hydra import compose

    cfg = compose("train", overrides=[f"experiment={stage}", *overrides], return_hydra_config=True)
    params = {str(k): str(v) for k, v in (cfg.hydra.sweeper.params or {}).items()}
    further = [{k: v for k, v in {**params, **extra}.items() if v is not None} for extra in GRIDS.get(stage, [])]
    return [params, *further]
