"""One weight-decay rule for every score function, and one definition of the optimiser defaults."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from attnbench.attention import available
from attnbench.errors import ConfigError
from attnbench.config import check_run_config
from attnbench.models.module import TextClassifierModule
from attnbench.config import OptimConfig, check_optim
from attnbench.models.optim import decay_parameter_groups

from .conftest import REPO_ROOT

TINY = {"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64}


def _module(score: str, optim: dict | None = None) -> TextClassifierModule:
    return TextClassifierModule(vocab_size=50, num_classes=3, max_length=16, pad_id=0, model=TINY,
                                attention={"name": score}, optim={"lr": 1e-3} if optim is None else optim)


def _optimizer_and_schedule(module: TextClassifierModule, total_steps: int = 100):
    module._trainer = SimpleNamespace(estimated_stepping_batches=total_steps)  # all configure_optimizers reads
    config = module.configure_optimizers()
    return config["optimizer"], config["lr_scheduler"]["scheduler"]


def _group_decay(optimizer: torch.optim.Optimizer) -> dict[int, float]:
    """id(parameter) -> the weight decay of the one group it is in (a parameter in two groups fails)."""
    decay: dict[int, float] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            assert id(param) not in decay, "a parameter is in two optimizer groups"
            decay[id(param)] = group["weight_decay"]
    return decay


@pytest.mark.parametrize("score", available())
def test_every_parameter_lands_in_the_group_of_the_rule(score):
    """Rule: decayed iff the parameter has >= 2 dimensions; the score function's own parameters included."""
    module = _module(score, {"lr": 1e-3, "weight_decay": 0.1})
    optimizer, _ = _optimizer_and_schedule(module)
    decay = _group_decay(optimizer)
    params = dict(module.model.named_parameters())
    assert set(decay) == {id(p) for p in params.values()}  # every trainable parameter, once
    for name, param in params.items():
        assert decay[id(param)] == (0.1 if param.dim() >= 2 else 0.0), name
    score_params = {name.rsplit(".", 1)[-1]: p for name, p in params.items() if ".score_fn." in name}
    for name, param in score_params.items():  # the score function's own parameters follow the same rule
        assert decay[id(param)] == (0.1 if param.dim() >= 2 else 0.0), f"{score}.{name}"
    # the projections around every score function are decayed, their biases and the norms are not
    assert decay[id(params["blocks.0.attn.qkv_proj.weight"])] == 0.1
    assert decay[id(params["blocks.0.attn.qkv_proj.bias"])] == 0.0
    assert decay[id(params["blocks.0.attn_norm.weight"])] == 0.0


def test_the_named_score_parameters_are_decayed_and_the_temperature_is_not():
    """The issue's instances: general's W and additive's W_q, W_k, v decayed (they were not); cosine's τ not."""
    expected = {"general": {"weight": True}, "additive": {"w_query": True, "w_key": True, "v": True},
                "cosine": {"log_temperature": False}}
    for score, names in expected.items():
        decayed, not_decayed = decay_parameter_groups(_module(score).model)
        for name, is_decayed in names.items():
            full = f"blocks.0.attn.score_fn.{name}"
            assert (full in decayed) is is_decayed and (full in not_decayed) is not is_decayed, full


def test_the_schema_is_the_one_source_of_the_optim_defaults():
    """train.yaml repeats no optim default: the composed optim.* are OptimConfig's, and the optimizer and
    scheduler _partial_ configs read them (an override reaches both)."""
    assert "optim" not in OmegaConf.load(REPO_ROOT / "conf" / "train.yaml")
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["optim.lr=2e-3"])
    assert OmegaConf.to_container(cfg.optim) == {**OmegaConf.to_container(OmegaConf.structured(OptimConfig)),
                                                 "lr": 2e-3}
    assert cfg.module.optimizer.lr == 2e-3 and list(cfg.module.optimizer.betas) == OptimConfig().betas
    assert cfg.module.scheduler.warmup_ratio == OptimConfig().warmup_ratio and cfg.module.scheduler.schedule == "cosine"


def test_module_falls_back_to_the_dataclass_defaults():
    """A module given only ``lr`` uses the same weight decay, betas, eps and warm-up as the YAML."""
    defaults = OptimConfig()
    optimizer, scheduler = _optimizer_and_schedule(_module("scaled_dot", {"lr": 2e-3}), total_steps=200)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [defaults.weight_decay, 0.0]
    assert optimizer.defaults["betas"] == tuple(defaults.betas) and optimizer.defaults["eps"] == defaults.eps
    warmup = int(defaults.warmup_ratio * 200)  # 12 steps
    assert scheduler.get_last_lr()[0] == pytest.approx(2e-3 / warmup)
    for _ in range(warmup - 1):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(2e-3)  # warm-up ends at step warmup - 1


def test_config_checks_use_the_same_defaults_and_ranges():
    cfg = OmegaConf.create({"seed": 0, "data": {"name": "toy", "max_length": 8, "batch_size": 2, "eval_batch_size": 2},
                            "trainer": {}, "logger": {}, "optim": {"lr": 1e-3}})
    check_run_config(cfg)  # missing optim keys take the defaults, which pass the checks
    cfg.optim.betas = [0.9, 1.0]
    with pytest.raises(ConfigError, match=r"optim\.betas must be two numbers in \[0, 1\)"):
        check_run_config(cfg)
    with pytest.raises(ConfigError, match=r"unknown optimizer setting\(s\) optim\.momentum"):
        check_optim({"lr": 1e-3, "momentum": 0.9})


def test_float16_weights_are_refused_at_config_time():
    """trainer.precision=16-true: AdamW's eps 1e-8 is 0 in float16 and the first update is NaN."""
    assert torch.tensor(OptimConfig().eps, dtype=torch.float16).item() == 0.0  # the cause
    cfg = OmegaConf.create({"seed": 0, "data": {"name": "toy", "max_length": 8, "batch_size": 2, "eval_batch_size": 2},
                            "trainer": {"precision": "16-true"}, "logger": {}, "optim": {}})
    with pytest.raises(ConfigError, match=r"trainer\.precision=16-true .*Use trainer\.precision=16-mixed"):
        check_run_config(cfg)
    for ok in ("16-mixed", "bf16-mixed", "bf16-true", "32-true"):
        cfg.trainer.precision = ok
        check_run_config(cfg)


def test_float16_mixed_precision_with_a_fused_adamw_and_clipping_is_refused_at_config_time():
    """16-mixed scales the loss and a fused AdamW unscales inside its step: Lightning cannot clip the gradients
    before it and fails at the first step. One message at config time names the three ways out."""
    cfg = OmegaConf.create({"seed": 0, "data": {"name": "toy", "max_length": 8, "batch_size": 2, "eval_batch_size": 2},
                            "trainer": {"precision": "16-mixed", "gradient_clip_val": 1.0}, "logger": {},
                            "optim": {"impl": "fused"}})
    with pytest.raises(ConfigError, match=r"trainer\.precision=16-mixed .*optim\.impl=foreach, "
                                          r"trainer\.precision=bf16-mixed .*trainer\.gradient_clip_val=0"):
        check_run_config(cfg)
    for precision, impl, clip in (("16-mixed", "foreach", 1.0), ("16-mixed", "fused", 0.0),
                                  ("bf16-mixed", "fused", 1.0), ("32-true", "fused", 1.0)):
        cfg.trainer.precision, cfg.optim.impl, cfg.trainer.gradient_clip_val = precision, impl, clip
        check_run_config(cfg)


def _clip_with(module: TextClassifierModule, plugin, clip: float = 1.0) -> tuple[float, float]:
    """The gradients' total norm before and after ``module.configure_gradient_clipping`` under ``plugin``, with the
    module's own optimizer (``optim.impl=fused``, the default) and large hand-set gradients."""
    optimizer, _ = _optimizer_and_schedule(module)
    assert optimizer.defaults["fused"]  # the default implementation, the one Lightning's bf16 plugin refused
    generator = torch.Generator().manual_seed(0)
    for param in module.parameters():
        param.grad = torch.randn(param.shape, generator=generator) * 10
    before = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in module.parameters()])).item()
    module._trainer = SimpleNamespace(precision_plugin=plugin, gradient_clip_val=clip, gradient_clip_algorithm=None)
    module.configure_gradient_clipping(optimizer, clip, None)
    after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in module.parameters()])).item()
    return before, after


def test_bf16_mixed_precision_clips_a_fused_adamws_gradients_by_norm():
    """trainer=gpu (bf16-mixed) with the default fused AdamW and gradient_clip_val=1.0: Lightning 2.6's
    mixed-precision plugin raised 'does not allow for gradient clipping' at the first step of every GPU run
    (found rehearsing scripts/gpu_check.py on a CPU). bf16 has no grad scaler, so the gradients are clipped as
    in float32: to total norm 1. Under 16-mixed (a scaler) Lightning's refusal stands; under 32-true nothing
    changes."""
    from pytorch_lightning.plugins.precision import MixedPrecision, Precision

    before, after = _clip_with(_module("scaled_dot"), MixedPrecision("bf16-mixed", device="cpu"))
    assert before > 10 and after == pytest.approx(1.0, rel=1e-5)
    before, after = _clip_with(_module("scaled_dot"), Precision())
    assert before > 10 and after == pytest.approx(1.0, rel=1e-5)
    scaled = MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):
        _clip_with(_module("scaled_dot"), scaled)
