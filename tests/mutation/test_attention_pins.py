"""Score functions: documented sizes, bounds and block sizes, pinned by hand.

Written to kill the mutants `scripts/mutation.sh` found surviving in src/attnbench/attention/. The value
tests in tests/test_attention.py compare every fast path with a float64 reference, so what survives them is
what does not change values: block sizes (memory), recomputation, initial parameter ranges, the fast-path
choice, argument validation. Each of those is documented in a docstring and checked here against numbers
worked out by hand.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnbench.attention.base as base
import attnbench.attention.euclidean as euclidean_module
from attnbench.attention import MultiHeadAttention, ScoreFunction, build_score_function, masked_softmax
from attnbench.attention.base import blocked_attend, query_block_size, sdpa_attend, validated_chunking
from attnbench.attention.reference import reference_attention, reference_scores


# --------------------------------------------------------------------------- validation and sizes


@pytest.mark.parametrize("n_heads, head_dim", [(0, 4), (2, 0), (-1, 4), (0, 0)])
def test_score_function_rejects_empty_heads(n_heads, head_dim):
    with pytest.raises(ValueError, match="model.n_heads / model.d_model"):
        ScoreFunction(n_heads, head_dim)


def test_smallest_valid_sizes_are_accepted():
    fn = ScoreFunction(1, 1)
    assert (fn.n_heads, fn.head_dim) == (1, 1)
    assert fn.extra_repr() == "n_heads=1, head_dim=1"
    add = build_score_function("additive", n_heads=1, head_dim=1, hidden_dim=1, chunk_size=1, chunk_bytes=1)
    assert (add.hidden_dim, add.chunk_size, add.chunk_bytes) == (1, 1, 1)
    assert add.extra_repr() == "n_heads=1, head_dim=1, hidden_dim=1, chunk_size=1, compile=False"
    with pytest.raises(NotImplementedError):
        fn.scores(torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1))


def test_validated_chunking_by_hand():
    assert validated_chunking("x", None, 5) == (None, 5)
    assert validated_chunking("x", "3", 7.0) == (3, 7)  # ints from YAML strings or floats
    assert validated_chunking("x", 1, 1) == (1, 1)
    with pytest.raises(ValueError, match="x: attention.chunk_size must be >= 1"):
        validated_chunking("x", 0, 5)
    with pytest.raises(ValueError, match="x: attention.chunk_bytes must be >= 1"):
        validated_chunking("x", None, 0)


@pytest.mark.parametrize("chunk_size, chunk_bytes, n_queries, per_query, want", [
    (None, 1000, 50, 100, 10),  # 1000 // 100
    (None, 1099, 50, 100, 10),  # floor, never over the budget
    (None, 10**6, 50, 100, 50),  # never more than the queries
    (None, 50, 50, 100, 1),  # one row over budget: still one query per block
    (None, 1000, 50, 0, 50),  # nothing materialised per query
    (7, 1, 50, 10**9, 7),  # an explicit chunk_size ignores the budget
    (70, 1, 50, 1, 50),  # ... but not the number of queries
    (1, 10**9, 50, 1, 1),
])
def test_query_block_size_by_hand(chunk_size, chunk_bytes, n_queries, per_query, want):
    assert query_block_size(chunk_size, chunk_bytes, n_queries, per_query) == want


def test_additive_hidden_dim_defaults_to_head_dim_and_chunk_bytes_to_64_mib():
    fn = build_score_function("additive", n_heads=3, head_dim=5)
    assert fn.hidden_dim == 5 and fn.chunk_size is None and fn.chunk_bytes == 64 * 2**20 and fn.compile is False
    assert fn.w_query.shape == (3, 5, 5) and fn.w_key.shape == (3, 5, 5) and fn.v.shape == (3, 5)
    fn = build_score_function("additive", n_heads=2, head_dim=4, hidden_dim=7)
    assert fn.hidden_dim == 7 and fn.v.shape == (2, 7)
    for bad in (0, 2.5, "7", True):
        with pytest.raises(ValueError, match="attention.hidden_dim must be an integer >= 1"):
            build_score_function("additive", n_heads=2, head_dim=4, hidden_dim=bad)
    assert build_score_function("l2", n_heads=1, head_dim=2).chunk_bytes == 64 * 2**20


def test_additive_initial_weights_follow_the_linear_layer_bounds():
    """w_query, w_key ~ U(−1/√d, 1/√d) and v ~ U(−1/√d_a, 1/√d_a), like nn.Linear (fan-in bounds).

    With 40,000 draws per tensor the largest |w| falls short of the bound by less than 0.1% with
    probability 1 − (1 − 0.001)^40000 ≈ 1 − 4e-18, so 0.999·bound is a safe lower limit.
    """
    torch.manual_seed(0)
    fn = build_score_function("additive", n_heads=16, head_dim=50, hidden_dim=50)  # 16·50·50 = 40,000 each
    for name, tensor, bound in (("w_query", fn.w_query, 1 / math.sqrt(50)), ("w_key", fn.w_key, 1 / math.sqrt(50))):
        m = float(tensor.detach().abs().max())
        assert 0.999 * bound < m <= bound, name
        assert float(tensor.detach().min()) < 0 < float(tensor.detach().max()), name
    fn = build_score_function("additive", n_heads=4000, head_dim=1, hidden_dim=10)  # v: 40,000 draws
    m = float(fn.v.detach().abs().max())
    assert 0.999 / math.sqrt(10) < m <= 1 / math.sqrt(10)
    assert float(fn.w_query.detach().abs().max()) <= 1.0  # d = 1: bound 1


def test_additive_block_size_counts_the_hidden_tensor_bytes():
    fn = build_score_function("additive", n_heads=3, head_dim=4, hidden_dim=5, chunk_bytes=10_000)
    # one query row: B·H·Lk·d_a·element = 2·3·7·5·4 = 840 bytes -> 10,000 // 840 = 11 queries
    assert fn.block_size(2, 100, 7, 4) == 11
    assert fn.block_size(2, 100, 7, 8) == 5  # float64: 1680 bytes per row
    fn.chunk_size = 3
    assert fn.block_size(2, 100, 7, 4) == 3


def _spy_blocks(monkeypatch, module):
    """Record the ``block`` each call of ``blocked_attend`` in ``module`` gets."""
    blocks = []
    original = module.blocked_attend

    def spy(pair_scores, query, key, value, mask, dropout_p, block):
        blocks.append(block)
        return original(pair_scores, query, key, value, mask, dropout_p, block)

    monkeypatch.setattr(module, "blocked_attend", spy)
    return blocks


def test_additive_attend_sizes_blocks_from_batch_heads_and_keys(monkeypatch):
    import attnbench.attention.additive as additive_module

    blocks = _spy_blocks(monkeypatch, additive_module)
    fn = build_score_function("additive", n_heads=2, head_dim=3, hidden_dim=4, chunk_bytes=1000).double()
    fn.use_cpu_kernel = False  # the blocked path (the fused CPU kernel has no blocks)
    q = torch.randn(3, 2, 9, 3, dtype=torch.float64)
    k = torch.randn(3, 2, 5, 3, dtype=torch.float64)
    v = torch.randn(3, 2, 5, 2, dtype=torch.float64)
    out = fn.attend(q, k, v)
    # one query row of hidden state: B·H·Lk·d_a·8 = 3·2·5·4·8 = 960 bytes -> 1 query per block
    assert blocks == [1]
    torch.testing.assert_close(out, reference_attention(fn, q, k, v), rtol=0, atol=1e-12)
    fn.chunk_bytes = 960 * 4 + 100
    fn.attend(q, k, v)
    assert blocks[-1] == 4


def test_l2_attend_sizes_blocks_from_one_row_of_scores(monkeypatch):
    import attnbench.attention.l2 as l2_module

    blocks = _spy_blocks(monkeypatch, l2_module)
    fn = build_score_function("l2", n_heads=2, head_dim=3, chunk_bytes=1000)
    q, k, v = torch.randn(3, 2, 9, 3), torch.randn(3, 2, 5, 3), torch.randn(3, 2, 5, 3)
    fn.attend(q, k, v)
    assert blocks == [8]  # one query row of scores: B·H·Lk·4 = 3·2·5·4 = 120 bytes -> 1000 // 120 = 8
    fn.attend(q.double(), k.double(), v.double())
    assert blocks[-1] == 4  # float64: 240 bytes per row
    fn.chunk_size = 2
    fn.attend(q, k, v)
    assert blocks[-1] == 2


# --------------------------------------------------------------------------- recomputation


def _counting(pair_scores):
    calls = []

    def counted(q, k):
        calls.append(q.shape[-2])
        return pair_scores(q, k)

    return counted, calls


def _dot(q, k):
    return q @ k.transpose(-2, -1)


def test_one_block_is_not_recomputed_and_blocks_are_recomputed_once_in_the_backward():
    """Docstring: when everything fits in one block, no recomputation; otherwise each block once more."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 4, 2, generator=g, dtype=torch.float64)
    want = torch.softmax(_dot(q, k), -1) @ v
    for block, forward, backward in ((5, [5], []), (6, [5], []), (2, [2, 2, 1], [2, 2, 1])):
        scores, calls = _counting(_dot)
        out = blocked_attend(scores, q, k, v, None, 0.0, block)
        torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
        assert calls == forward, block
        out.sum().backward()
        assert sorted(calls[len(forward):]) == sorted(backward), block  # recomputed blocks
    with torch.no_grad():  # no gradient: no checkpointing, each block once
        scores, calls = _counting(_dot)
        blocked_attend(scores, q, k, v, None, 0.0, 2)
        assert calls == [2, 2, 1]


# --------------------------------------------------------------------------- cosine


def test_cosine_eps_is_one_millionth():
    """Docstring: norms below eps (1e-6) are clamped: a query of norm 5e-7 scores τ·0.5 against a unit key."""
    fn = build_score_function("cosine", n_heads=1, head_dim=3, init_temperature=2.0).double()
    assert fn.eps == 1e-6
    q = torch.zeros(1, 1, 1, 3, dtype=torch.float64)
    q[..., 0] = 5e-7
    k = torch.zeros(1, 1, 1, 3, dtype=torch.float64)
    k[..., 0] = 3.0
    torch.testing.assert_close(fn.scores(q, k), torch.full((1, 1, 1, 1), 2.0 * 0.5, dtype=torch.float64))
    v = torch.randn(1, 1, 1, 2, dtype=torch.float64)
    torch.testing.assert_close(fn.attend(q, k, v), v)  # one key: weight 1


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_cosine_temperature_must_be_positive(bad):
    with pytest.raises(ValueError, match="attention.init_temperature must be > 0"):
        build_score_function("cosine", n_heads=1, head_dim=4, init_temperature=bad)
    assert build_score_function("cosine", n_heads=1, head_dim=4, init_temperature=1e-9).temperature().item() > 0


def test_cosine_temperature_is_per_head():
    fn = build_score_function("cosine", n_heads=2, head_dim=2).double()
    with torch.no_grad():
        fn.log_temperature.copy_(torch.tensor([math.log(3.0), math.log(7.0)]))
    q = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 2, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64).expand(1, 2, 2, 2)
    # cos = 1 and 0: head 0 scores 3, 0; head 1 scores 7, 0
    torch.testing.assert_close(fn.scores(q, k), torch.tensor([[[[3.0, 0.0]], [[7.0, 0.0]]]], dtype=torch.float64))
    v = torch.tensor([[1.0], [0.0]], dtype=torch.float64).expand(1, 2, 2, 1)
    want = torch.tensor([math.exp(3) / (math.exp(3) + 1), math.exp(7) / (math.exp(7) + 1)], dtype=torch.float64)
    torch.testing.assert_close(fn.attend(q, k, v).flatten(), want)


# --------------------------------------------------------------------------- euclidean fast-path choice


def _euclid_forms(monkeypatch):
    forms = []
    original = euclidean_module.sdpa_attend

    def spy(query, key, value, mask, dropout_p, scale, key_bias=None):
        # the extra-dimension form pads v to q's width too, so SDPA keeps its fused kernel (docstring)
        forms.append("bias" if key_bias is not None else f"augmented:{query.shape[-1]}:{value.shape[-1]}")
        return original(query, key, value, mask, dropout_p, scale=scale, key_bias=key_bias)

    monkeypatch.setattr(euclidean_module, "sdpa_attend", spy)
    return forms


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_euclidean_uses_the_bias_mask_up_to_256_squared_pairs_with_gradients(monkeypatch):
    forms = _euclid_forms(monkeypatch)
    fn = build_score_function("euclidean", n_heads=1, head_dim=2)
    assert fn.bias_mask_max_pairs == 65536
    v = torch.randn(1, 1, 256, 2)  # d_v = 2 differs from H = 1: padding v to q's width d + 1 = 3 adds one column
    for lq, lk, grad_q, grad_k, want in [
        (256, 256, True, False, "bias"),  # exactly 256² pairs: still the bias mask
        (257, 256, True, False, "augmented:3:3"),  # one query more, with a gradient: the extra dimension
        (257, 256, False, True, "augmented:3:3"),  # a gradient through the keys only
        (257, 256, False, False, "bias"),  # no gradient: the bias mask at any size
    ]:
        q = torch.randn(1, 1, lq, 2, requires_grad=grad_q)
        k = torch.randn(1, 1, lk, 2, requires_grad=grad_k)
        out = fn.attend(q, k, v)
        assert forms[-1] == want, (lq, lk, grad_q, grad_k)
        torch.testing.assert_close(out.double(), reference_attention(fn, q.detach(), k.detach(), v),
                                   rtol=0, atol=1e-5)
    with torch.no_grad():
        fn.attend(torch.randn(1, 1, 257, 2, requires_grad=True), torch.randn(1, 1, 256, 2), v)
    assert forms[-1] == "bias"  # under no_grad a leaf's requires_grad does not matter


def test_euclidean_scores_by_hand():
    fn = build_score_function("euclidean", n_heads=1, head_dim=4).double()
    q = torch.tensor([1.0, 2.0, 0.0, 0.0], dtype=torch.float64).view(1, 1, 1, 4)
    k = torch.tensor([[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0]], dtype=torch.float64).view(1, 1, 2, 4)
    # ‖q−k‖² = 0 and 1 + 4 + 9 = 14, divided by √4 = 2
    torch.testing.assert_close(fn.scores(q, k), torch.tensor([[[[0.0, -7.0]]]], dtype=torch.float64))
    l2 = build_score_function("l2", n_heads=1, head_dim=4).double()
    torch.testing.assert_close(l2.scores(q, k), torch.tensor([[[[0.0, -math.sqrt(14)]]]], dtype=torch.float64))
    assert l2.scores(q.half(), k.half()).dtype == torch.float32  # 16-bit inputs: logits kept in float32
    torch.testing.assert_close(l2.scores(q.half(), k.half()).double(),
                               torch.tensor([[[[0.0, -math.sqrt(14)]]]], dtype=torch.float64), rtol=1e-3, atol=0)


# --------------------------------------------------------------------------- masks and the float64 reference


def test_sdpa_attend_masks_padding_and_zeroes_all_padding_rows():
    q = torch.tensor([[1.0, 0.0]], dtype=torch.float64).expand(2, 1, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.0, 0.0], [5.0, 0.0]], dtype=torch.float64).expand(2, 1, 3, 2)
    v = torch.tensor([[1.0], [2.0], [100.0]], dtype=torch.float64).expand(2, 1, 3, 1)
    mask = torch.tensor([[False, False, True], [True, True, True]])
    # sequence 0: key 2 is padding; logits 1, 0 -> weights e/(e+1), 1/(e+1)
    e = math.e
    want0 = (1.0 * e + 2.0) / (e + 1)
    out = sdpa_attend(q, k, v, mask, 0.0, scale=1.0)
    torch.testing.assert_close(out.flatten(), torch.tensor([want0, 0.0], dtype=torch.float64))
    bias = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand(2, 1, 1, 3)  # logits 1, 1 -> equal weights
    out = sdpa_attend(q, k, v, mask, 0.0, scale=1.0, key_bias=bias)
    torch.testing.assert_close(out.flatten(), torch.tensor([1.5, 0.0], dtype=torch.float64))
    out = sdpa_attend(q, k, v, None, 0.0, scale=2.0, key_bias=bias)  # logits 2, 1, 10 -> key 2 dominates
    w = torch.softmax(torch.tensor([2.0, 1.0, 10.0], dtype=torch.float64), 0)
    torch.testing.assert_close(out[0].flatten(), (w @ v[0, 0]).flatten())


def test_masked_softmax_by_hand():
    scores = torch.tensor([0.0, math.log(3.0), 5.0], dtype=torch.float64).expand(2, 1, 1, 3)
    mask = torch.tensor([[False, False, True], [True, True, True]])
    w = masked_softmax(scores, mask)
    torch.testing.assert_close(w.flatten(), torch.tensor([0.25, 0.75, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64))


def test_reference_attention_handles_an_all_padding_sequence_anywhere():
    fn = build_score_function("dot", n_heads=1, head_dim=1)
    q = torch.ones(3, 1, 1, 1, dtype=torch.float64)
    k = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64).view(1, 1, 2, 1).expand(3, 1, 2, 1)
    v = torch.tensor([1.0, 5.0], dtype=torch.float64).view(1, 1, 2, 1).expand(3, 1, 2, 1)
    mask = torch.tensor([[True, True], [False, False], [False, True]])
    out = reference_attention(fn, q, k, v, mask).flatten()
    # 0: all padding -> 0; 1: weights 1/4, 3/4 -> 4; 2: only key 0 -> 1
    torch.testing.assert_close(out, torch.tensor([0.0, 4.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(reference_attention(fn, q, k, v).flatten(), torch.full((3,), 4.0, dtype=torch.float64))


def test_reference_scores_by_hand():
    q = torch.tensor([3.0, 4.0], dtype=torch.float64).view(1, 1, 1, 2)
    k = torch.tensor([[3.0, 4.0], [0.0, 1.0]], dtype=torch.float64).view(1, 1, 2, 2)
    fns = {n: build_score_function(n, n_heads=1, head_dim=2).double() for n in ("dot", "scaled_dot", "cosine")}
    with torch.no_grad():
        fns["cosine"].log_temperature.fill_(math.log(2.0))
    # dot 25, 4; scaled by √2; cosine: cos = 1 and 4/5, times τ = 2
    torch.testing.assert_close(reference_scores(fns["dot"], q, k).flatten(), torch.tensor([25.0, 4.0]).double())
    torch.testing.assert_close(reference_scores(fns["scaled_dot"], q, k).flatten(),
                               torch.tensor([25.0, 4.0]).double() / math.sqrt(2))
    torch.testing.assert_close(reference_scores(fns["cosine"], q, k).flatten(), torch.tensor([2.0, 1.6]).double())
    general = build_score_function("general", n_heads=1, head_dim=2).double()
    with torch.no_grad():
        general.weight.copy_(torch.tensor([[[0.0, 1.0], [2.0, 0.0]]]))
    # qᵀWk: W k = (k1, 2 k0) -> (4, 6)·(3, 4) = 36 and (1, 0)·(3, 4) = 3
    torch.testing.assert_close(reference_scores(general, q, k).flatten(), torch.tensor([36.0, 3.0]).double())
    torch.testing.assert_close(general.scores(q, k).flatten(), torch.tensor([36.0, 3.0]).double())
    with pytest.raises(NotImplementedError, match="no float64 reference"):
        reference_scores(ScoreFunction(1, 2), q, k)


def test_reference_additive_by_hand():
    fn = build_score_function("additive", n_heads=1, head_dim=1, hidden_dim=2).double()
    with torch.no_grad():
        fn.w_query.copy_(torch.tensor([[[1.0, 0.0]]]))
        fn.w_key.copy_(torch.tensor([[[0.0, 2.0]]]))
        fn.v.copy_(torch.tensor([[3.0, -1.0]]))
    q = torch.tensor([0.5], dtype=torch.float64).view(1, 1, 1, 1)
    k = torch.tensor([0.25], dtype=torch.float64).view(1, 1, 1, 1)
    # vᵀ tanh(W_qᵀq + W_kᵀk) = 3·tanh(0.5) − tanh(0.5)
    want = torch.tensor(2 * math.tanh(0.5), dtype=torch.float64).view(1, 1, 1, 1)
    torch.testing.assert_close(reference_scores(fn, q, k), want)
    torch.testing.assert_close(fn.scores(q, k), want)


# --------------------------------------------------------------------------- multi-head module


def test_multihead_dropout_only_in_training_and_biases_by_default():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=8, n_heads=2, score="scaled_dot", attn_dropout=0.5)
    assert mha.qkv_proj.bias is not None and mha.out_proj.bias is not None
    assert mha.qkv_proj.weight.shape == (24, 8) and mha.out_proj.weight.shape == (8, 8)
    x = torch.randn(2, 6, 8)
    mha.eval()
    a, b = mha(x), mha(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # eval: no dropout, deterministic
    mha.attn_dropout = 0.0
    torch.testing.assert_close(mha(x), a, rtol=0, atol=0)
    mha.attn_dropout = 0.5
    mha.train()
    assert not torch.allclose(mha(x), a)
    no_bias = MultiHeadAttention(d_model=8, n_heads=2, score="dot", bias=False)
    assert no_bias.qkv_proj.bias is None and no_bias.out_proj.bias is None


def test_multihead_head_dim_validation_and_inner_width():
    mha = MultiHeadAttention(d_model=10, n_heads=3, score="dot", head_dim=1)
    assert (mha.head_dim, mha.inner_dim) == (1, 3) and mha.score_fn.head_dim == 1 and mha.score_fn.n_heads == 3
    with pytest.raises(ValueError, match="model.head_dim must be >= 1"):
        MultiHeadAttention(d_model=10, n_heads=2, score="dot", head_dim=0)
    mha = MultiHeadAttention(d_model=12, n_heads=4, score="additive", score_options={"hidden_dim": 2})
    assert mha.head_dim == 3 and mha.score_fn.hidden_dim == 2


def test_multihead_forward_by_hand():
    """One head, identity projections: softmax(q kᵀ / √d) v, computed by hand."""
    mha = MultiHeadAttention(d_model=2, n_heads=1, score="scaled_dot").double()
    with torch.no_grad():
        mha.qkv_proj.weight.copy_(torch.eye(2).repeat(3, 1))
        mha.qkv_proj.bias.zero_()
        mha.out_proj.weight.copy_(torch.eye(2))
        mha.out_proj.bias.copy_(torch.tensor([0.5, -0.5]))
    x = torch.tensor([[[math.sqrt(2) * math.log(3.0), 0.0], [0.0, 1.0]]], dtype=torch.float64)
    out = mha(x)
    # query 0 scores: (‖x0‖²/√2, 0) = (√2·ln²3, 0)... computed directly below
    s = (x[0] @ x[0].T) / math.sqrt(2)
    want = torch.softmax(s, -1) @ x[0] + torch.tensor([0.5, -0.5], dtype=torch.float64)
    torch.testing.assert_close(out[0], want, rtol=0, atol=1e-12)
    query, key, value = mha.project(x)
    assert query.shape == (1, 1, 2, 2)
    torch.testing.assert_close(query[0, 0], x[0])
    torch.testing.assert_close(key[0, 0], x[0])
    torch.testing.assert_close(value[0, 0], x[0])


def test_multihead_split_heads_puts_consecutive_features_in_one_head():
    mha = MultiHeadAttention(d_model=6, n_heads=3, score="dot")
    x = torch.arange(12.0).view(1, 2, 6)
    heads = mha.split_heads(x)
    assert heads.shape == (1, 3, 2, 2)
    assert heads[0, 1, 0].tolist() == [2.0, 3.0] and heads[0, 2, 1].tolist() == [10.0, 11.0]


def test_blocked_and_unblocked_masking_agree_with_base():
    # the base class's attend is the definition: masked_softmax(scores)·value
    fn = build_score_function("dot", n_heads=1, head_dim=2).double()
    q = torch.randn(2, 1, 3, 2, dtype=torch.float64)
    k = torch.randn(2, 1, 4, 2, dtype=torch.float64)
    v = torch.randn(2, 1, 4, 3, dtype=torch.float64)
    mask = torch.tensor([[False, True, False, True], [True, True, True, True]])
    want = reference_attention(fn, q, k, v, mask)
    torch.testing.assert_close(ScoreFunction.attend(fn, q, k, v, mask), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(base.blocked_attend(fn.scores, q, k, v, mask, 0.0, 1), want, rtol=0, atol=1e-12)


def test_base_attend_applies_dropout_to_the_weights():
    """ScoreFunction.attend (the definition): dropout on the softmax weights, inverted (kept weights / (1 − p))."""
    fn = build_score_function("dot", n_heads=1, head_dim=2).double()
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 4, 2, generator=g, dtype=torch.float64), torch.randn(1, 1, 6, 2, generator=g,
                                                                                   dtype=torch.float64)
    v = torch.randn(1, 1, 6, 3, generator=g, dtype=torch.float64)
    torch.manual_seed(7)
    got = ScoreFunction.attend(fn, q, k, v, None, dropout_p=0.5)
    torch.manual_seed(7)  # the same dropout mask, drawn by F.dropout itself
    weights = torch.nn.functional.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), p=0.5, training=True)
    torch.testing.assert_close(got, weights @ v, rtol=0, atol=1e-12)
    assert not torch.allclose(got, torch.softmax(q @ k.transpose(-2, -1), -1) @ v)
    torch.testing.assert_close(ScoreFunction.attend(fn, q, k, v, None, dropout_p=0.0),
                               torch.softmax(q @ k.transpose(-2, -1), -1) @ v, rtol=0, atol=1e-12)


def test_additive_compile_option_builds_one_dynamic_compiled_function(monkeypatch):
    """compile=true: torch.compile(additive_pair_scores, dynamic=True), built once per process; one query block.

    torch.compile itself is replaced by a recorder (compiling takes tens of seconds; the slow test
    tests/test_attention.py::test_additive_compiled_matches_reference runs the real one).
    """
    import attnbench.attention.additive as additive_module

    calls = []

    def fake_compile(fn, **kwargs):
        calls.append((fn, kwargs))
        return lambda *args: fn(*args)

    additive_module._compiled.cache_clear()
    monkeypatch.setattr(additive_module.torch, "compile", fake_compile)
    blocks = _spy_blocks(monkeypatch, additive_module)
    try:
        fn = build_score_function("additive", n_heads=1, head_dim=2, chunk_bytes=1, compile=True).double()
        assert fn.compile is True
        q, k, v = (torch.randn(1, 1, 5, 2, dtype=torch.float64) for _ in range(3))
        torch.testing.assert_close(fn.attend(q, k, v), reference_attention(fn, q, k, v), rtol=0, atol=1e-12)
        fn.attend(q, k, v)
        assert calls == [(additive_module.additive_pair_scores, {"dynamic": True})]  # once per process
        assert blocks == [5, 5]  # compiled: nothing Lq×Lk×d_a is stored, one block whatever chunk_bytes says
        fn.compile, fn.use_cpu_kernel = False, False  # the blocked path (the fused CPU kernel has no blocks)
        fn.attend(q, k, v)
        assert blocks[-1] == 1 and len(calls) == 1
    finally:
        additive_module._compiled.cache_clear()


def test_l2_takes_its_chunk_options_and_names_itself_in_errors():
    fn = build_score_function("l2", n_heads=1, head_dim=2, chunk_size=2, chunk_bytes=123)
    assert (fn.chunk_size, fn.chunk_bytes) == (2, 123)
    with pytest.raises(ValueError, match=r"^l2: attention\.chunk_size must be >= 1"):
        build_score_function("l2", n_heads=1, head_dim=2, chunk_size=0)
    with pytest.raises(ValueError, match=r"^additive: attention\.chunk_bytes must be >= 1"):
        build_score_function("additive", n_heads=1, head_dim=2, chunk_bytes=0)


def test_dropout_probability_is_passed_through():
    """p = 0.3 (not F.dropout's default 0.5) reaches the weights: in the base definition, the blocked path and SDPA."""
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 1, 4, 2, generator=g, dtype=torch.float64), torch.randn(2, 1, 6, 2, generator=g,
                                                                                   dtype=torch.float64)
    v = torch.randn(2, 1, 6, 3, generator=g, dtype=torch.float64)
    plain = torch.softmax(q @ k.transpose(-2, -1), -1)
    fn = build_score_function("dot", n_heads=1, head_dim=2).double()
    torch.manual_seed(11)
    got = ScoreFunction.attend(fn, q, k, v, None, dropout_p=0.3)
    torch.manual_seed(11)
    torch.testing.assert_close(got, torch.nn.functional.dropout(plain, p=0.3, training=True) @ v, rtol=0, atol=1e-12)
    torch.manual_seed(11)
    with torch.no_grad():  # blocks of 2 queries, each with its own dropout draw, in order
        got = blocked_attend(_dot, q, k, v, None, 0.3, 2)
    torch.manual_seed(11)
    want = torch.cat([torch.nn.functional.dropout(plain[..., s:s + 2, :], p=0.3, training=True) @ v
                      for s in range(0, 4, 2)], -2)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[0, 4:] = True
    torch.manual_seed(0)
    dropped = sdpa_attend(q, k, v, mask, 0.9, scale=1.0)
    assert not torch.allclose(dropped, sdpa_attend(q, k, v, mask, 0.0, scale=1.0))  # masked path applies dropout


def test_query_block_size_with_one_byte_per_query():
    assert query_block_size(None, 7, 50, 1) == 7


def test_additive_names_itself_and_draws_v_on_both_sides_of_zero():
    with pytest.raises(ValueError, match=r"^additive: attention\.chunk_size must be >= 1"):
        build_score_function("additive", n_heads=1, head_dim=2, chunk_size=0)
    torch.manual_seed(0)
    v = build_score_function("additive", n_heads=100, head_dim=2, hidden_dim=10).v.detach()
    assert float(v.min()) < 0 < float(v.max())  # 1000 draws of U(−b, b): P(all one sign) = 2·2^-1000


def test_multihead_eval_output_is_the_dropout_free_definition():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3, score="scaled_dot", attn_dropout=0.5).double().eval()
    assert mha.d_model == 12 and mha.head_dim == 4 and isinstance(mha.head_dim, int)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    q, k, v = mha.project(x)
    want = torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v  # √4 = 2
    want = mha.out_proj(want.transpose(1, 2).reshape(2, 5, 12))
    torch.testing.assert_close(mha(x), want, rtol=0, atol=1e-12)


def test_cosine_16bit_on_cpu_is_the_float32_computation_rounded_once():
    """On CPU, cosine's unit vectors stay float32 into sdpa_attend (which computes in float32 there): 16-bit
    inputs give exactly the float32 result on the same rounded values, cast once to 16 bits. Casting the unit
    vectors to 16 bits first (the CUDA branch) rounds the logits τ·q̂·k̂ (τ = √32 ≈ 5.7) by ~2^-8 relative and
    changes outputs by more than one bfloat16 step."""
    torch.manual_seed(0)
    fn = build_score_function("cosine", n_heads=2, head_dim=32)
    q, k, v = (torch.randn(2, 2, 6, 32).to(torch.bfloat16) for _ in range(3))
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 4:] = True
    got = fn.attend(q, k, v, mask)
    want = fn.attend(q.float(), k.float(), v.float(), mask).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
