"""TransformerClassifier: padding never changes a sequence's logits; no NaN anywhere."""

from __future__ import annotations

import pytest
import torch

from attnbench.attention import available
from attnbench.models.model import TransformerClassifier


def _model(score, pooling="mean"):
    torch.manual_seed(0)
    return TransformerClassifier(
        vocab_size=50, num_classes=3, max_length=16, score=score, d_model=16, n_heads=2, n_layers=2, d_ff=32,
        pooling=pooling,
    ).double().eval()


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
@pytest.mark.parametrize("score", available())
def test_padding_does_not_change_logits(score, pooling):
    model = _model(score, pooling)
    ids = torch.randint(1, 50, (3, 6))
    alone = torch.cat([model(ids[i : i + 1], torch.zeros(1, 6, dtype=torch.bool)) for i in range(3)])
    # the same sequences padded to 11 tokens, with random ids in the padding (must be ignored)
    padded = torch.cat([ids, torch.randint(1, 50, (3, 5))], dim=1)
    mask = torch.zeros(3, 11, dtype=torch.bool)
    mask[:, 6:] = True
    torch.testing.assert_close(model(padded, mask), alone, rtol=0, atol=1e-10)


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
@pytest.mark.parametrize("score", available())
def test_fully_padded_sequence_gives_finite_logits_and_grads(score, pooling):
    model = _model(score, pooling).train()
    ids = torch.randint(0, 50, (2, 5))
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1] = True
    logits = model(ids, mask)
    assert torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_too_long_input_names_the_knob():
    model = _model("dot")
    with pytest.raises(ValueError, match="raise data.max_length"):
        model(torch.ones(1, 17, dtype=torch.long), torch.zeros(1, 17, dtype=torch.bool))


@pytest.mark.parametrize(
    "kwargs, match",
    [({"d_model": 0}, "sizes must be >= 1"), ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
     ({"pooling": "sum"}, "pooling must be"), ({"n_heads": 3}, "not divisible")],
)
def test_bad_model_config_is_rejected(kwargs, match):
    args = dict(vocab_size=50, num_classes=2, max_length=8, score="dot", d_model=16, n_heads=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        TransformerClassifier(**args)


@pytest.mark.parametrize("score", available())
def test_head_dim_decoupled_from_d_model(score):
    """model.head_dim sets d_k independently: d_model=16 with 3 heads of 8 (not 16 / 3)."""
    torch.manual_seed(0)
    model = TransformerClassifier(vocab_size=50, num_classes=3, max_length=16, score=score, d_model=16, n_heads=3,
                                  head_dim=8, n_layers=1, d_ff=32).double().eval()
    attn = model.blocks[0].attn
    assert (attn.head_dim, attn.inner_dim) == (8, 24)
    assert attn.qkv_proj.weight.shape == (72, 16) and attn.out_proj.weight.shape == (16, 24)
    ids = torch.randint(1, 50, (2, 6))
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 4:] = True
    logits = model(ids, mask)
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    alone = model(ids[1:, :4], mask[1:, :4])
    torch.testing.assert_close(logits[1:], alone, rtol=0, atol=1e-10)
