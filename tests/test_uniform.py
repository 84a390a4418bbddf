"""``attention=uniform``, the control: a masked mean of the values, by hand, on every path."""

from __future__ import annotations

import pytest
import torch

from attnbench.attention import MultiHeadAttention, build_score_function
from attnbench.attention.reference import reference_attention


def _masked_mean(value: torch.Tensor, mask: torch.Tensor, n_queries: int) -> torch.Tensor:
    """(1/n) Σ over non-padding keys of v, the same row for every query; zeros where all keys are padding."""
    keep = (~mask).to(value.dtype)[:, None, :, None]  # B×1×Lk×1
    mean = (value * keep).sum(-2, keepdim=True) / keep.sum(-2, keepdim=True).clamp_min(1.0)
    return mean.expand(*value.shape[:-2], n_queries, value.shape[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_path_is_the_masked_mean_of_the_values(dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, n, 5, generator=g, dtype=dtype) * 10 for n in (4, 6, 6))
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[1, 2:] = True
    mask[2] = True  # all padding: zeros, never NaN
    fn = build_score_function("uniform", n_heads=2, head_dim=5)
    out = fn.attend(q, k, v, mask)
    want = _masked_mean(v, mask, 4)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-13)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    torch.testing.assert_close(out.double(), reference_attention(fn, q, k, v, mask), rtol=0, atol=1e-5)
    scores = fn.scores(q, k)
    assert scores.shape == (3, 2, 4, 6) and bool((scores == 0).all())


def test_gradients_flow_to_the_values_only_and_are_finite_with_an_all_padding_row():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 1, 3, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[False, False, True], [True, True, True]])
    fn = build_score_function("uniform", n_heads=1, head_dim=4)
    fn.attend(q, k, v, mask).sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q)) and torch.equal(k.grad, torch.zeros_like(k))
    # each of the 3 queries gives the two real keys of sequence 0 the weight 1/2; padding keys get nothing
    want = torch.zeros_like(v)
    want[0, :, :2] = 3 * 0.5
    torch.testing.assert_close(v.grad, want, rtol=0, atol=1e-15)


def test_dropout_draws_a_mask_per_query_and_keeps_the_expectation():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 8, 4, generator=g, dtype=torch.float64) for _ in range(3))
    fn = build_score_function("uniform", n_heads=1, head_dim=4)
    torch.manual_seed(0)
    dropped = fn.attend(q, k, v, None, dropout_p=0.5)
    assert not torch.allclose(dropped[..., 0, :], dropped[..., 1, :])  # queries differ: their own masks
    torch.manual_seed(1)
    mean = torch.stack([fn.attend(q, k, v, None, dropout_p=0.5) for _ in range(2000)]).mean(0)
    torch.testing.assert_close(mean, _masked_mean(v, torch.zeros(1, 8, dtype=torch.bool), 8), rtol=0, atol=0.1)


def test_the_layer_hands_back_uniform_weights_and_its_output_ignores_the_query():
    torch.manual_seed(0)
    attn = MultiHeadAttention(d_model=8, n_heads=2, score="uniform").eval()
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[False] * 5, [False, False, True, True, True]])
    with torch.no_grad():
        out, record = attn(x, mask, return_intermediates=True)
    assert torch.equal(record.weights[1, :, :, :2], torch.full((2, 5, 2), 0.5))
    assert torch.equal(record.weights[0], torch.full((2, 5, 5), 0.2))
    torch.testing.assert_close(out[0], out[0, :1].expand(5, 8))  # every position gets the same mean
