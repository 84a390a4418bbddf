"""additive's compile switch: compile=False never builds a torch.compile graph (on a CPU that takes about a
minute per shape), compile=True does, and both give the float64 reference's scores."""

from __future__ import annotations

import torch

from attnbench.attention import additive


def _inputs():
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(2, 2, 5, 8, generator=gen), torch.randn(2, 2, 7, 8, generator=gen),
            torch.randn(2, 2, 7, 8, generator=gen))


def test_compile_false_never_compiles(monkeypatch):
    def no_compile():
        raise AssertionError("compile=False must not build a compiled graph")

    monkeypatch.setattr(additive, "_compiled", no_compile)
    torch.manual_seed(0)
    fn = additive.AdditiveScore(n_heads=2, head_dim=8, compile=False)
    query, key, value = _inputs()
    scores = fn.scores(query, key)
    torch.testing.assert_close(scores.double(), fn.reference_scores(query.double(), key.double()), rtol=1e-5,
                               atol=1e-5)
    fn.attend(query, key, value)  # the fast path too


def test_compile_true_uses_the_compiled_pair_scores(monkeypatch):
    calls = []

    def fake_compiled():
        calls.append(1)
        return additive.additive_pair_scores  # the same function: only whether it is asked for is tested

    monkeypatch.setattr(additive, "_compiled", fake_compiled)
    torch.manual_seed(0)
    fn = additive.AdditiveScore(n_heads=2, head_dim=8, compile=True)
    query, key, _ = _inputs()
    torch.testing.assert_close(fn.scores(query, key).double(), fn.reference_scores(query.double(), key.double()),
                               rtol=1e-5, atol=1e-5)
    assert calls
