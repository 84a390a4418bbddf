"""The shipped config groups compose to what they are meant to run: each model preset builds the architecture its
sizes describe, ``python train.py`` is the ``compare`` experiment's ``scaled_dot`` SST-2 job, and each experiment's
``max_length_by_data`` gives every dataset it runs a length (SST-2 and TREC their presets')."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from attnbench.config import config_dir
from attnbench.analysis.stats import flatten_config, is_relevant

CONF = config_dir()
MODEL_PRESETS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
#: the experiments that set a per-dataset length
LENGTH_MAPS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")
                     if "max_length_by_data" in OmegaConf.load(p))


@lru_cache(maxsize=None)
def composed(*overrides: str, hydra: bool = False):
    """``conf/train.yaml`` composed as ``python train.py *overrides`` composes it."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None, job_name="train"):
        return compose("train", overrides=list(overrides), return_hydra_config=hydra)


def hand_count(d: int, heads: int, head_dim: int, layers: int, d_ff: int, classes: int) -> int:
    """Parameters besides the embeddings, counted from the sizes: per pre-LN block two LayerNorms (2·2d), the
    q, k, v projections d -> h·d_k with biases, the output projection h·d_k -> d with bias, the MLP d -> d_ff
    -> d with biases; then the final LayerNorm (2d) and the head d -> classes with bias. ``scaled_dot`` has no
    parameters of its own."""
    inner = heads * head_dim
    block = 2 * 2 * d + (d * 3 * inner + 3 * inner) + (inner * d + d) + (d * d_ff + d_ff) + (d_ff * d + d)
    return layers * block + 2 * d + (d * classes + classes)


@pytest.mark.parametrize("preset", MODEL_PRESETS)
def test_each_model_preset_builds_the_parameters_its_sizes_give(preset):
    """The built model has :func:`hand_count` of the preset's sizes plus (vocabulary + max_length) × d_model
    embedding parameters (head_dim null: d_model / n_heads)."""
    from attnbench.models.model import TransformerClassifier

    model_cfg = OmegaConf.to_container(composed(f"model={preset}").model, resolve=True)
    vocab, max_length, classes = 16_000, 64, 2
    d, heads = model_cfg["d_model"], model_cfg["n_heads"]
    head_dim = model_cfg["head_dim"] if model_cfg["head_dim"] is not None else d // heads
    by_hand = hand_count(d, heads, head_dim, model_cfg["n_layers"], model_cfg["d_ff"], classes)
    model = TransformerClassifier(vocab_size=vocab, num_classes=classes, max_length=max_length, score="scaled_dot",
                                  **model_cfg)
    assert sum(p.numel() for p in model.parameters()) == by_hand + (vocab + max_length) * d


def test_the_main_job_is_compares_scaled_dot_sst2_job():
    """``python train.py`` and ``experiment=compare trainer=cpu data=sst2 attention=scaled_dot`` agree on every
    setting that can change a measurement, bar the accelerator (``auto`` is the CPU there): the main job's
    figures are those runs'."""
    main = flatten_config(OmegaConf.to_container(composed(), resolve=True))
    job = flatten_config(OmegaConf.to_container(
        composed("experiment=compare", "trainer=cpu", "data=sst2", "attention=scaled_dot"), resolve=True))
    differ = {k: (main.get(k), job.get(k)) for k in set(main) | set(job)
              if is_relevant(k) and main.get(k) != job.get(k)}
    assert differ == {"trainer.accelerator": ("auto", "cpu")}, differ


@pytest.mark.parametrize("experiment", LENGTH_MAPS)
def test_max_length_by_data_covers_each_dataset_an_experiment_runs(experiment):
    """An experiment's ``max_length_by_data`` names every dataset of its sweep, each job composes to that
    length, and SST-2 and TREC keep their presets' lengths (their published jobs ran without the map)."""
    cfg = composed(f"experiment={experiment}", hydra=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params or {}, resolve=False)
    datasets = [v.strip() for v in str(params.get("data", cfg.data.name)).split(",")]
    lengths = cfg.max_length_by_data
    assert set(datasets) <= set(lengths), f"{experiment}: max_length_by_data names {sorted(lengths)}, runs {datasets}"
    for data in datasets:
        assert composed(f"experiment={experiment}", f"data={data}").data.max_length == lengths[data]
        if data in ("sst2", "trec"):
            assert lengths[data] == composed(f"data={data}").data.max_length, (experiment, data)
