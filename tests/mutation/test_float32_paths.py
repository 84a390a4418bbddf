"""The 16-bit paths of attention/base.py: ``call_in_float32``, ``sdpa_attend``'s CPU float32 copies, and
``ScoreFunction.block_size``'s default budget.

``call_in_float32`` is checked with a spy method that records what it receives (dtypes, keyword arguments,
whether autocast is on), against its documented contract: any float16/bfloat16 tensor argument (query, key,
or ``value`` by position or keyword) or an enabled autocast sends every tensor up to float32 with autocast
off, and ``attend`` returns ``value``'s dtype; float32/float64 calls go straight through. The numerics are
compared with float64 references. Written to kill the mutants ``scripts/mutation.sh`` left in these
functions (docs/mutation.md).
"""

from __future__ import annotations

import pytest
import torch

from attnbench.attention.base import DEFAULT_BLOCK_BYTES, call_in_float32, sdpa_attend
from attnbench.attention.dot import DotScore
from attnbench.attention.general import GeneralScore

LOW = (torch.float16, torch.bfloat16)


def _spy():
    seen: dict = {}

    def method(score_fn, query, key, value=None, key_padding_mask=None, dropout_p=0.0):
        seen.update(score_fn=score_fn, query=query, key=key, value=value, mask=key_padding_mask,
                    dropout_p=dropout_p, autocast=torch.is_autocast_enabled("cpu"))
        out = query.sum(-1, keepdim=True) if value is None else value * 2
        return out

    return method, seen


def _t(dtype, seed=0):
    return torch.randn(1, 1, 3, 2, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float32_and_float64_calls_go_straight_through(dtype):
    method, seen = _spy()
    q, k, v, mask = _t(dtype, 0), _t(dtype, 1), _t(dtype, 2), torch.tensor([[False, False, True]])
    out = call_in_float32(method, "fn", q, k, v, key_padding_mask=mask, dropout_p=0.25)
    # the very same tensors reach the method (no copy), and its output comes back unchanged
    assert seen["query"] is q and seen["key"] is k and seen["value"] is v and seen["mask"] is mask
    assert seen["score_fn"] == "fn" and seen["dropout_p"] == 0.25 and not seen["autocast"]
    assert out.dtype == dtype and torch.equal(out, v * 2)


# one 16-bit tensor anywhere (query, key, value by position, value by keyword) sends all three up to float32
@pytest.mark.parametrize("low", LOW)
@pytest.mark.parametrize("which", ["query", "key", "value", "value_kw"])
def test_any_16bit_argument_runs_the_method_on_float32_copies(low, which):
    method, seen = _spy()
    tensors = {"query": _t(torch.float32, 0), "key": _t(torch.float32, 1), "value": _t(torch.float32, 2)}
    name = "value" if which == "value_kw" else which
    tensors[name] = tensors[name].to(low)
    mask = torch.tensor([[False, True, False]])
    if which == "value_kw":
        out = call_in_float32(method, "fn", tensors["query"], tensors["key"], value=tensors["value"],
                              key_padding_mask=mask, dropout_p=0.5)
    else:
        out = call_in_float32(method, "fn", tensors["query"], tensors["key"], tensors["value"],
                              key_padding_mask=mask, dropout_p=0.5)
    for arg in ("query", "key", "value"):
        assert seen[arg].dtype == torch.float32, arg
        assert torch.equal(seen[arg], tensors[arg].float()), arg  # the same numbers, only widened
    # keyword arguments are passed on (a bool mask and a float are left as they are), autocast is off inside
    assert seen["mask"] is mask and seen["dropout_p"] == 0.5 and not seen["autocast"]
    # attend's output comes back in value's dtype: 16-bit when value is 16-bit, float32 otherwise
    want = tensors["value"].dtype
    assert out.dtype == want
    assert torch.equal(out, (tensors["value"].float() * 2).to(want))


@pytest.mark.parametrize("low", LOW)
def test_scores_of_16bit_inputs_stay_float32(low):
    method, seen = _spy()
    q, k = _t(low, 0), _t(low, 1)
    out = call_in_float32(method, "fn", q, k)
    assert seen["query"].dtype == seen["key"].dtype == torch.float32 and seen["value"] is None
    assert out.dtype == torch.float32  # logits are not rounded back to 16 bits
    assert torch.equal(out, q.float().sum(-1, keepdim=True))


def test_float32_inputs_under_cpu_autocast_run_with_autocast_off():
    method, seen = _spy()
    q, k, v = _t(torch.float32, 0), _t(torch.float32, 1), _t(torch.float32, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = call_in_float32(method, "fn", q, k, v)
    assert not seen["autocast"]
    assert seen["query"] is q and seen["value"] is v  # float32 already: no copy needed
    assert out.dtype == torch.float32 and torch.equal(out, v * 2)


def _reference(q, k, v, scores, mask=None):
    """float64 softmax(scores)·v with padding keys excluded and all-padding rows zero."""
    s = scores.double()
    if mask is not None:
        s = s.masked_fill(mask[:, None, None, :], float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return w @ v.double()


@pytest.mark.parametrize("low", LOW)
def test_general_attend_of_mixed_precision_inputs_matches_float64(low):
    """A float32 query with 16-bit key and value (and value by keyword): the float32 computation of the same
    numbers, rounded once to value's dtype. Bound: that one rounding, 2^-8 (bfloat16) / 2^-11 (float16)
    relative to the largest output, plus 1e-5 for the float32 arithmetic (measured: < 1e-6)."""
    torch.manual_seed(0)
    fn = GeneralScore(n_heads=2, head_dim=4)
    with torch.no_grad():
        fn.weight.copy_(torch.randn_like(fn.weight))
    q = torch.randn(2, 2, 5, 4)
    k, v = torch.randn(2, 2, 6, 4).to(low), torch.randn(2, 2, 6, 3).to(low)
    mask = torch.tensor([[False] * 4 + [True] * 2, [True] * 6])  # the second sequence is all padding
    out = fn.attend(q, k, value=v, key_padding_mask=mask)
    assert out.dtype == low
    with torch.no_grad():
        ref = _reference(q, k, v, fn.reference_scores(q.double(), k.double()), mask)
    eps = 2.0**-8 if low == torch.bfloat16 else 2.0**-11
    assert torch.allclose(out.double(), ref, rtol=0, atol=eps * ref.abs().max().item() + 1e-5)
    assert torch.equal(out[1], torch.zeros_like(out[1]))  # all keys padding: zero rows


@pytest.mark.parametrize("low", LOW)
def test_sdpa_attend_keeps_the_key_bias_on_16bit_cpu_inputs(low):
    """softmax(scale·q·kᵀ + key_bias)·v on bfloat16/float16 CPU inputs equals the float64 computation of the
    same numbers, rounded once; the bias (up to ±6) changes the weights far beyond that bound."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2, 4, 3, generator=g).to(low)
    k, v = (torch.randn(2, 2, 5, 3, generator=g).to(low) for _ in range(2))
    bias = (torch.randn(2, 2, 1, 5, generator=g) * 3).to(low)
    mask = torch.tensor([[False, False, False, True, True], [True] * 5])
    scale = 0.5
    out = sdpa_attend(q, k, v, mask, 0.0, scale, bias)
    assert out.dtype == low
    scores = scale * q.double() @ k.double().transpose(-2, -1) + bias.double()
    ref = _reference(q, k, v, scores, mask)
    eps = 2.0**-8 if low == torch.bfloat16 else 2.0**-11
    tol = eps * ref.abs().max().item() + 1e-5
    assert torch.allclose(out.double(), ref, rtol=0, atol=tol)
    without_bias = _reference(q, k, v, scale * q.double() @ k.double().transpose(-2, -1), mask)
    assert (without_bias - ref).abs().max().item() > 20 * tol  # the bias matters at this tolerance
    assert torch.equal(out[1], torch.zeros_like(out[1]))


def test_block_size_without_any_budget_uses_the_default_64_mib():
    fn = DotScore(n_heads=4, head_dim=8)  # no chunk_bytes of its own
    assert fn.chunk_bytes is None and DEFAULT_BLOCK_BYTES == 64 * 2**20
    # one query row: B·H·Lk·element = 2·4·1024·4 = 32,768 bytes; 64 MiB / 32,768 = 2,048 rows of 4,096
    assert fn.block_size(2, 4096, 1024, 4) == 2048
    assert fn.block_size(2, 100, 1024, 4) == 100  # fewer queries than fit
    # a caller's budget of ten rows
    assert fn.block_size(2, 4096, 1024, 4, budget_bytes=10 * 32768) == 10
