"""AttentionDiagnostics: statistics against a pair-by-pair float64 reference; the callback in a real run."""

from __future__ import annotations

import math

import pytest
import torch

from attnbench.attention import MultiHeadAttention, available
from attnbench.attention.reference import reference_scores
from attnbench.callbacks.diagnostics import AttentionDiagnostics, attention_statistics


def layer_statistics(attn, x, mask, **options):
    """``attention_statistics`` of the intermediates ``attn`` hands back for input ``x`` (B×L×d_model)."""
    _, intermediates = attn(x, mask, return_intermediates=True)
    return attention_statistics(intermediates, **options)


def _reference_statistics(attn, x, mask):
    """Loop over sequences, heads and query rows in float64; only non-padding positions count."""
    query, key, _ = attn.project(x)
    all_scores = reference_scores(attn.score_fn, query, key)  # B×H×L×L, pair by pair
    entropies, norms, saturated, max_score = [], [], [], 0.0
    for b in range(x.shape[0]):
        keep = [j for j in range(x.shape[1]) if not mask[b, j]]
        for h in range(attn.n_heads):
            scores = all_scores[b, h]
            for i in keep:
                row = torch.stack([scores[i, j] for j in keep])
                max_score = max(max_score, float(row.abs().max()))
                p = torch.softmax(row, 0)
                entropy = float(-(p * p.log()).sum())
                entropies.append(entropy)
                if len(keep) > 1:
                    norms.append(entropy / math.log(len(keep)))
                    saturated.append(float(p.max() > 0.99))
    return {
        "entropy": sum(entropies) / len(entropies),
        "entropy_norm": sum(norms) / len(norms),
        "max_score": max_score,
        "saturated_frac": sum(saturated) / len(saturated),
    }


@pytest.mark.parametrize("score", available())
def test_statistics_match_the_float64_reference(score):
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=12, n_heads=2, score=score, head_dim=5).double()
    x = torch.randn(3, 7, 12, dtype=torch.float64) * 3  # large enough that some rows saturate
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[1, 4:] = True
    mask[2, 1:] = True  # one key only: left out of entropy_norm and saturated_frac
    with torch.no_grad():
        got = layer_statistics(attn, x, mask, block_bytes=2 * 3 * 2 * 7 * 8)  # query blocks of 2 rows
        want = _reference_statistics(attn, x, mask)
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_saturation_and_entropy_extremes():
    attn = MultiHeadAttention(d_model=4, n_heads=1, score="dot")
    with torch.no_grad():
        attn.qkv_proj.weight.zero_()
        attn.qkv_proj.bias.zero_()
        uniform = layer_statistics(attn, torch.randn(2, 5, 4), None)
        attn.qkv_proj.weight[:8] = torch.eye(4).repeat(2, 1) * 30.0  # q = k = 30·x
        # tokens e1..e4 each attend to themselves (score 900 vs 0); the fifth, all zeros, attends uniformly
        peaked = layer_statistics(attn, torch.eye(5, 4).unsqueeze(0), None)
    assert uniform["entropy_norm"] == pytest.approx(1.0) and uniform["saturated_frac"] == 0.0
    assert uniform["entropy"] == pytest.approx(math.log(5))
    assert peaked["saturated_frac"] == pytest.approx(0.8)
    assert peaked["entropy_norm"] == pytest.approx(0.2, abs=1e-6)
    assert peaked["max_score"] == pytest.approx(900.0)


def test_gradient_norms_split_the_fused_projection():
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.attn = MultiHeadAttention(d_model=8, n_heads=2, score="scaled_dot")
    x = torch.randn(2, 5, 8)
    model.attn(x).square().sum().backward()
    got = AttentionDiagnostics.gradient_norms(model)
    w, b = model.attn.qkv_proj.weight.grad, model.attn.qkv_proj.bias.grad
    assert got["diag/layer0/query_grad_norm"] == pytest.approx(float(torch.cat([w[:8].flatten(), b[:8]]).norm()))
    assert got["diag/layer0/key_grad_norm"] == pytest.approx(float(torch.cat([w[8:16].flatten(), b[8:16]]).norm()))


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/clear_refs"), reason="Linux only")
def test_peak_memory_window_excludes_earlier_work():
    from attnbench.callbacks.throughput import peak_memory_bytes, reset_peak_memory

    cpu = torch.device("cpu")
    big = torch.ones(64 * 2**20)  # 256 MiB, touched
    before = peak_memory_bytes(cpu)
    del big
    reset_peak_memory(cpu)
    after = peak_memory_bytes(cpu)
    assert before - after > 200 * 2**20  # the freed 256 MiB no longer count
    small = torch.ones(16 * 2**20)  # 64 MiB
    assert peak_memory_bytes(cpu) - after > 50 * 2**20
    del small
