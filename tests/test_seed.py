"""The run's ``seed`` reaches both things it is documented to set (README, docs/configuration.md): the model's
initial weights (``pl.seed_everything``) and the training batches' order (the data module's sampler, seeded
per (seed, epoch)). Checked through the real run path, ``attnbench.run.train.train``, not with a seed passed
by hand."""

from __future__ import annotations

import pytest
import torch

import attnbench.run.train as run_train

from .test_faults import compose_cfg, toy  # noqa: F401  (the toy dataset fixture)


REAL_BUILD, REAL_BUILD_MODULE = run_train.build, run_train.build_module


class _Stop(Exception):
    """Raised by the patched build_module once the run has built what the test inspects."""


def _initial_state_and_first_batches(toy_overrides, tmp_path, monkeypatch, seed: int):
    """The model's initial weights and the first training epoch's batches (each as its labels and per-row token-id
    sums, a fingerprint of its rows) of a run with ``seed``."""
    seen = {}

    def build(node, what, **kwargs):
        obj = REAL_BUILD(node, what, **kwargs)
        if what == "data":
            seen["datamodule"] = obj
        return obj

    def build_module(cfg, *args, **kwargs):
        module = REAL_BUILD_MODULE(cfg, *args, **kwargs)
        if "datamodule" not in seen:  # check_config's trial build (2-token vocabulary), before the seed is set
            return module
        seen["state"] = {k: v.clone() for k, v in module.state_dict().items()}
        raise _Stop

    monkeypatch.setattr(run_train, "build", build)
    monkeypatch.setattr(run_train, "build_module", build_module)
    with pytest.raises(_Stop):
        run_train.train(compose_cfg([*toy_overrides, "logger=csv", f"seed={seed}",
                                     f"+output_dir={tmp_path / f'seed{seed}-{len(list(tmp_path.iterdir()))}'}"]))
    loader = seen["datamodule"].train_dataloader()
    batches = [batch["labels"].tolist() + batch["input_ids"].sum(dim=1).tolist() for batch in loader]
    return seen["state"], batches


def test_the_run_seed_sets_the_initial_weights_and_the_batch_order(toy, tmp_path, monkeypatch):  # noqa: F811
    state0, batches0 = _initial_state_and_first_batches(toy, tmp_path, monkeypatch, seed=0)
    again0, again_batches0 = _initial_state_and_first_batches(toy, tmp_path, monkeypatch, seed=0)
    state1, batches1 = _initial_state_and_first_batches(toy, tmp_path, monkeypatch, seed=1)
    weights = [k for k, v in state0.items() if v.is_floating_point() and v.numel() > 1 and v.std() > 0]
    assert weights, "no randomly initialised tensor found"
    assert all(torch.equal(state0[k], again0[k]) for k in state0)  # same seed: same start
    assert batches0 == again_batches0
    differing = [k for k in weights if not torch.equal(state0[k], state1[k])]
    assert differing == weights  # every random tensor of the model depends on the seed
    assert sorted(map(tuple, batches0)) != sorted(map(tuple, batches1))  # new batches, not only reordered
