"""Attention hands back its logits and weights on request; diagnostics and attention maps read them.

The request changes no bit of the output; the logits are the score function's definition with padding masked;
the diagnostics read from them equal those of re-projecting each layer's captured input (the method this
replaces, rebuilt here with forward pre-hooks as the reference).
"""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.attention import MultiHeadAttention, available, masked_softmax
from attnbench.attention.multihead import attention_intermediates, attention_layers
from attnbench.callbacks.diagnostics import AttentionDiagnostics, attention_statistics
from attnbench.models.model import TransformerClassifier


def _mask(batch: int, length: int) -> torch.Tensor:
    mask = torch.zeros(batch, length, dtype=torch.bool)
    mask[1, 4:] = True
    mask[2, :] = True  # a sequence of padding only
    return mask


@pytest.mark.parametrize("score", available())
def test_the_request_changes_no_bit_of_the_output_and_hands_back_the_definition(score):
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=12, n_heads=2, score=score, head_dim=5).eval()
    x = torch.randn(3, 7, 12) * 2
    mask = _mask(3, 7)
    with torch.no_grad():
        plain = attn(x, mask)
        out, record = attn(x, mask, return_intermediates=True)
        query, key, value = attn.project(x)
        scores = attn.score_fn.scores(query, key)
    assert torch.equal(out, plain)
    assert record.key_padding_mask is mask
    assert record.logits.shape == record.weights.shape == (3, 2, 7, 7)
    pad = mask[:, None, None, :].expand_as(scores)
    assert torch.equal(record.logits[~pad], scores[~pad])
    assert bool((record.logits[pad] == -math.inf).all())
    assert torch.equal(record.weights, masked_softmax(scores, mask))
    assert not record.weights.isnan().any() and bool((record.weights[2] == 0).all())  # all padding: zeros
    # the weights are the ones the fast path attends with
    heads = attn.score_fn.attend(query, key, value, key_padding_mask=mask)
    torch.testing.assert_close(record.weights @ value, heads, atol=1e-5, rtol=1e-5)


def test_the_logits_of_a_memory_bounded_score_function_are_computed_in_its_query_blocks():
    torch.manual_seed(0)
    # additive's blocks are sized by its B×H×rows×Lk×d_a hidden tensor: 2·2·10·3·8 = 960 bytes per query row
    attn = MultiHeadAttention(d_model=8, n_heads=2, score="additive", head_dim=4,
                              score_options={"hidden_dim": 3, "chunk_bytes": 960 * 3 + 959}).double()
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    seen = []
    scores = attn.score_fn.scores
    attn.score_fn.scores = lambda q, k: (seen.append(q.shape[-2]), scores(q, k))[1]
    with torch.no_grad():
        _, record = attn(x, None, return_intermediates=True)
        query, key, _ = attn.project(x)
    attn.score_fn.scores = scores
    assert seen[-4:] == [3, 3, 3, 1]
    torch.testing.assert_close(record.logits, scores(query, key), atol=1e-12, rtol=0)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_the_model_passes_the_request_to_every_layer_and_keeps_its_logits(pooling):
    torch.manual_seed(0)
    model = TransformerClassifier(vocab_size=20, num_classes=3, max_length=8, score="scaled_dot", d_model=16,
                                  n_heads=2, n_layers=3, d_ff=32, pooling=pooling).eval()
    ids = torch.randint(1, 20, (2, 6))
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[0, 4:] = True
    with torch.no_grad():
        logits, records = model(ids, mask, return_intermediates=True)
        assert torch.equal(logits, model(ids, mask))
    width = 7 if pooling == "cls" else 6
    assert len(records) == 3 and all(r.weights.shape == (2, 2, width, width) for r in records)
    assert records[0].key_padding_mask.shape == (2, width)  # the mask the layer saw, [CLS] included


def _reprojected_statistics(model, ids, mask, block_bytes):
    """The diagnostics as they were computed by re-projection: each layer's input captured by a forward
    pre-hook, projected again, scored in query blocks, softmaxed and reduced."""
    inputs = {}
    layers = attention_layers(model)
    handles = [layer.register_forward_pre_hook(lambda m, args, i=i: inputs.__setitem__(i, args))
               for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            model(ids, mask)
    finally:
        for handle in handles:
            handle.remove()
    stats = []
    torch.set_grad_enabled(False)
    for i, attn in enumerate(layers):
        x, layer_mask = inputs[i]
        query, key, _ = attn.project(x)
        b, h, length, _ = query.shape
        keep_keys = ~layer_mask
        n_keys = keep_keys.sum(-1).to(query.dtype)
        rows = attn.score_fn.block_size(b, length, length, query.element_size(), budget_bytes=block_bytes)
        ent = norm = sat = n_rows = n_norm = 0.0
        max_score = 0.0
        for start in range(0, length, rows):
            scores = attn.score_fn.scores(query[:, :, start:start + rows], key)
            weights = masked_softmax(scores, layer_mask)
            valid_q = keep_keys[:, start:start + rows][:, None, :].expand(b, h, -1)
            pair_ok = valid_q[..., None] & keep_keys[:, None, None, :]
            max_score = max(max_score, float(scores.abs().masked_fill(~pair_ok, 0.0).max()))
            entropy = -torch.special.xlogy(weights, weights).sum(-1)
            log_n = torch.log(n_keys)[:, None, None].expand_as(entropy)
            norm_ok = valid_q & (log_n > 0)
            ent += float(entropy[valid_q].sum())
            norm += float((entropy[norm_ok] / log_n[norm_ok]).sum())
            sat += float((weights.amax(-1) > 0.99)[norm_ok].sum())
            n_rows += float(valid_q.sum())
            n_norm += float(norm_ok.sum())
        stats.append({"entropy": ent / n_rows, "entropy_norm": norm / n_norm, "max_score": max_score,
                      "saturated_frac": sat / n_norm})
    torch.set_grad_enabled(True)
    return stats


@pytest.mark.parametrize("score", available())
def test_diagnostics_equal_those_of_re_projecting_each_layers_input(score):
    torch.manual_seed(1)
    model = TransformerClassifier(vocab_size=30, num_classes=2, max_length=12, score=score, d_model=16,
                                  n_heads=2, n_layers=2, d_ff=32, dropout=0.3).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)  # weights far from uniform, some rows saturated
    ids = torch.randint(1, 30, (4, 9))
    mask = torch.zeros(4, 9, dtype=torch.bool)
    mask[1, 5:] = True
    mask[2, 1:] = True  # a single key
    cb = AttentionDiagnostics()
    cb._probe = {"input_ids": ids, "padding_mask": mask}
    model.device = torch.device("cpu")
    model.train()
    got = cb.probe(model)
    assert model.training  # restored
    want = _reprojected_statistics(model.eval(), ids, mask, cb.block_bytes)
    max_score = max(layer["max_score"] for layer in want)
    assert max_score > 1.0 or max_score == 0.0  # weights far from uniform, or the uniform control's zero scores
    for i, layer in enumerate(want):
        for name, value in layer.items():
            assert got[f"diag/layer{i}/{name}"] == value, (i, name)


def test_attention_intermediates_of_a_model_in_training_mode_come_from_eval_mode_and_restore_it():
    torch.manual_seed(0)
    model = TransformerClassifier(vocab_size=10, num_classes=2, max_length=6, score="dot", d_model=8,
                                  n_heads=2, n_layers=1, d_ff=16)
    ids = torch.randint(1, 10, (2, 5))
    mask = torch.zeros(2, 5, dtype=torch.bool)
    records = attention_intermediates(model, ids, mask)
    assert len(records) == 1 and model.training
    stats = attention_statistics(records[0])
    assert stats["entropy_norm"] == pytest.approx(1.0, abs=1e-3)  # N(0, 0.02) init: near-uniform weights
