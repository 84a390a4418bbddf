"""``compile.*`` (torch.compile of the model) and ``optim.impl`` (AdamW's torch implementation)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnbench.config import check_compile, check_optim
from attnbench.errors import ConfigError
from attnbench.models.module import TextClassifierModule
from attnbench.models.optim import adamw

OPTIM = {"lr": 3e-3, "weight_decay": 0.05, "betas": [0.9, 0.98], "eps": 1e-8, "warmup_ratio": 0.0,
         "schedule": "constant", "min_lr_ratio": 0.0}


def _module(compile: dict | None = None, impl: str = "fused") -> TextClassifierModule:
    torch.manual_seed(0)
    return TextClassifierModule(vocab_size=60, num_classes=3, max_length=24, pad_id=0,
                                model={"d_model": 32, "n_heads": 2, "n_layers": 2, "d_ff": 64, "dropout": 0.0,
                                       "attn_dropout": 0.0, "pooling": "max"},
                                attention={"name": "scaled_dot"}, optim={**OPTIM, "impl": impl}, compile=compile)


def _batches(n: int = 6) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Batches of varying size and width (as length-grouped batches are), some rows padded."""
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        b, width = 8 - (i % 3), 5 + 3 * i
        ids = torch.randint(1, 60, (b, width), generator=g)
        lengths = torch.randint(1, width + 1, (b,), generator=g)
        lengths[0] = width
        mask = torch.arange(width)[None, :] >= lengths[:, None]
        out.append((ids.masked_fill(mask, 0), mask, torch.randint(0, 3, (b,), generator=g)))
    return out


def _train(module: TextClassifierModule, impl: str = "fused") -> list[float]:
    opt = adamw(module.model, lr=OPTIM["lr"], weight_decay=OPTIM["weight_decay"], betas=OPTIM["betas"],
                eps=OPTIM["eps"], impl=impl)
    losses = []
    for ids, mask, labels in _batches() * 2:  # two epochs over the same six batches
        loss = F.cross_entropy(module(ids, mask), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_bad_compile_and_optim_settings_name_their_key():
    with pytest.raises(ConfigError, match=r"compile\.mode must be"):
        check_compile({"mode": "fastest"})
    with pytest.raises(ConfigError, match=r"compile\.dynamic must be"):
        check_compile({"dynamic": "yes"})
    with pytest.raises(ConfigError, match=r"compile\.enabled must be"):
        check_compile({"enabled": 1})
    with pytest.raises(ConfigError, match=r"unknown compile setting\(s\) compile\.backend"):
        check_compile({"backend": "inductor"})
    with pytest.raises(ConfigError, match=r"optim\.impl must be 'for_loop', 'foreach' or 'fused', got 'apex'"):
        check_optim({"impl": "apex"})
    with pytest.raises(ConfigError, match=r"optim\.impl"):
        adamw(torch.nn.Linear(2, 2), lr=1e-3, weight_decay=0.0, betas=[0.9, 0.98], eps=1e-8, impl="apex")
    assert check_compile({}) == {"enabled": False, "dynamic": True, "mode": "default"}  # eager by default
    assert check_optim({})["impl"] == "fused"


@pytest.mark.parametrize("impl", ["for_loop", "foreach", "fused"])
def test_adamw_implementations_take_the_same_steps(impl):
    """The three implementations agree with a float64 for-loop AdamW up to float32 rounding."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 4))
    ref = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 4)).double()
    ref.load_state_dict(model.state_dict())
    start = [p.detach().clone() for p in model.parameters()]
    flags = {"for_loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[impl]
    opt = adamw(model, lr=1e-2, weight_decay=0.1, betas=[0.9, 0.98], eps=1e-8, impl=impl)
    assert all(opt.defaults[k] == v for k, v in flags.items())
    ref_opt = adamw(ref, lr=1e-2, weight_decay=0.1, betas=[0.9, 0.98], eps=1e-8, impl="for_loop")
    g = torch.Generator().manual_seed(2)
    for _ in range(20):
        ids = torch.randint(0, 50, (8, 5), generator=g)
        for m, o in ((model, opt), (ref, ref_opt)):
            o.zero_grad(set_to_none=True)
            m(ids).pow(2).mean().backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.double(), q, rtol=1e-4, atol=1e-5)
    moved = [float((p.double() - q0.double()).abs().max()) for p, q0 in zip(model.parameters(), start, strict=True)]
    assert min(moved) > 1e-2  # 20 steps at lr 1e-2 moved every parameter: the agreement is not of untouched weights


def test_compiled_module_keeps_the_eager_parameter_names():
    eager, compiled = _module(), _module({"enabled": True})
    assert list(compiled.state_dict()) == list(eager.state_dict())  # checkpoints load either way
    compiled.load_state_dict(eager.state_dict())


@pytest.mark.slow
def test_compiled_short_run_trains_and_matches_eager():
    """Two epochs of six AdamW steps on batches of changing shape (dynamic=True): the compiled losses match
    eager within 1e-5 (measured: at most 1.2e-7, one float32 ulp of the loss, over six steps; Inductor fuses
    the float32 kernels differently, so bit equality is not expected), and the second epoch's loss is lower."""
    torch._dynamo.reset()
    eager = _train(_module())
    compiled_module = _module({"enabled": True, "dynamic": True})
    compiled = _train(compiled_module)
    print("eager", eager, "compiled", compiled, "max diff", max(abs(a - b) for a, b in zip(eager, compiled)))
    assert compiled_module.model._compiled_call_impl is not None
    assert max(abs(a - b) for a, b in zip(eager, compiled, strict=True)) <= 1e-5
    assert sum(compiled[6:]) < sum(compiled[:6]) - 0.1


def test_compile_settings_from_hydra_are_saved_as_plain_values():
    """``compile`` arrives as a DictConfig from ``conf/train.yaml``: the checkpoint's hyperparameters must hold
    plain values, or ``torch.load(weights_only=True)`` refuses the checkpoint (resume, test with ckpt)."""
    from omegaconf import OmegaConf

    module = _module(OmegaConf.create({"enabled": False, "dynamic": True, "mode": "default"}))
    assert type(module.hparams["compile"]) is dict
    assert module.hparams["compile"] == {"enabled": False, "dynamic": True, "mode": "default"}


@pytest.mark.slow
def test_diagnostics_and_attention_maps_read_a_compiled_model():
    """With compile.enabled, the diagnostics probe and the attention maps ask the model for its attention
    intermediates in an eager run (no recompilation for the request) and give the uncompiled model's values."""
    from attnbench.callbacks.diagnostics import AttentionDiagnostics
    from attnbench.viz.attention_maps import attention_weights

    ids, mask, _ = _batches(2)[1]
    results = []
    for compile in (None, {"enabled": True}):
        module = _module(compile)
        with torch.no_grad():  # compiled in eval mode, as by Lightning's sanity validation
            module.eval()(ids, mask)
        module.train()
        diagnostics = AttentionDiagnostics()
        diagnostics._probe = {"input_ids": ids, "padding_mask": mask}
        results.append((diagnostics.probe(module), attention_weights(module, ids, mask)))
    (eager_stats, eager_maps), (compiled_stats, compiled_maps) = results
    assert set(eager_stats) == set(compiled_stats) and len(eager_stats) == 2 * 4  # 2 layers, 4 statistics each
    for key, value in eager_stats.items():
        assert compiled_stats[key] == pytest.approx(value, rel=1e-6), key
    for got, want in zip(compiled_maps, eager_maps, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-7)
