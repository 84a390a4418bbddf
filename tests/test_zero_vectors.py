"""Zero and identical query/key vectors: finite outputs and gradients on every path, in every precision.

cosine's normalisation (‖x‖ at x = 0), l2's square root (‖q − k‖ at q = k) and euclidean's norms are where a
derivative is undefined or infinite; a 16-bit gradient overflows where a float32 one does not (1/eps = 1e6
> 65504 for cosine's x / max(‖x‖, eps) before zero vectors got a zero gradient).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from attnbench.attention import ScoreFunction, build_score_function, score_classes
from attnbench.attention.reference import reference_attention

NAMES = sorted(n for n, c in score_classes().items() if c.__module__.startswith("attnbench.attention."))
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}
# (dtype, mode, path): 16-bit weights and inputs ("true") or autocast over float32 ("mixed"); the float64
# reference ignores autocast, so it runs "true" only
CASES = [(d, "true", p) for d in DTYPES for p in ("attend", "definition", "reference")] + [
    (d, "mixed", p) for d in ("float16", "bfloat16") for p in ("attend", "definition")]


def _degenerate_inputs(dtype):
    """q, k, v (2×2×5×8) with a zero query, a zero key, a query equal to a key, and a head of zeros only."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, generator=g) for _ in range(3))
    q[0, 0, 1] = 0.0  # a zero query
    k[0, 0, 2] = 0.0  # a zero key
    k[1, 1, 3] = q[1, 1, 3]  # q = k: zero distance
    q[1, 0], k[1, 0] = 0.0, 0.0  # every query and key of a head is zero
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


@pytest.mark.parametrize("precision, mode, path", CASES)
@pytest.mark.parametrize("name", NAMES)
def test_zero_and_identical_vectors_give_finite_outputs_and_gradients(name, precision, mode, path):
    dtype = DTYPES[precision]
    torch.manual_seed(1)
    fn = build_score_function(name, n_heads=2, head_dim=8)
    if mode == "true":
        fn = fn.to(dtype)
    q, k, v = _degenerate_inputs(dtype if mode == "true" else torch.float32)
    if mode == "mixed":
        context = torch.autocast("cpu", dtype=dtype)
    else:
        context = contextlib.nullcontext()
    run = {"attend": fn.attend, "definition": lambda *a: ScoreFunction.attend(fn, *a),
           "reference": lambda *a: reference_attention(fn, *a)}[path]
    mask = torch.tensor([[False] * 5, [False, False, False, False, True]])
    with context:
        out = run(q, k, v, mask)
    out.float().square().sum().backward()
    for label, t in [("output", out), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad),
                     *((pname, p.grad) for pname, p in fn.named_parameters())]:
        assert t is not None and bool(torch.isfinite(t).all()), f"{label}: {int((~torch.isfinite(t)).sum())} not finite"


def test_cosine_zero_query_scores_zero_with_every_key_and_gets_no_gradient():
    fn = build_score_function("cosine", n_heads=2, head_dim=8).half()
    q, k, v = _degenerate_inputs(torch.float16)
    scores = fn.scores(q, k)
    assert bool((scores[0, 0, 1] == 0).all()) and bool((scores[0, 0, :, 2] == 0).all())
    fn.attend(q, k, v).float().square().sum().backward()
    assert bool((q.grad[0, 0, 1] == 0).all()) and bool((k.grad[0, 0, 2] == 0).all())
    assert bool((q.grad[0, 0, 0] != 0).any())  # the other rows keep their gradients
    # float16 gradients equal float64's (the same rule at zero) within float16's rounding
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    reference_attention(fn.double(), q64, k64, v64).square().sum().backward()
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad)):
        torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-2 * float(want.abs().max()))


def test_cosine_forward_of_a_zero_vector_is_unchanged():
    """x / max(‖x‖, eps) is 0 at x = 0 either way: only the gradient there changed (1/eps -> 0)."""
    fn = build_score_function("cosine", n_heads=2, head_dim=8).double()
    q, k, v = _degenerate_inputs(torch.float64)
    eps = fn.eps

    def unit(x):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)

    tau = fn.temperature().detach()[None, :, None, None]
    want = tau * unit(q.detach()) @ unit(k.detach()).transpose(-2, -1)
    torch.testing.assert_close(fn.scores(q, k), want, rtol=0, atol=1e-12)


def _tiny_inputs(dtype, size):
    """q, k, v (2×2×5×8): one query and one key whose entries are at most ``size`` in magnitude."""
    q, k, v = (t.detach().float() for t in _degenerate_inputs(torch.float32))
    g = torch.Generator().manual_seed(3)
    q[0, 1, 2] = size * (2 * torch.rand(8, generator=g) - 1)  # a tiny, non-zero query
    k[1, 1, 4] = size * (2 * torch.rand(8, generator=g) - 1)  # a tiny, non-zero key
    k[1, 0, 3] = q[1, 0, 3] + size  # a key a tiny distance from a query
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


@pytest.mark.parametrize("size", [1e-5, 1e-4, 1e-3])
@pytest.mark.parametrize("precision, mode, path", [c for c in CASES if c[0] in ("float16", "bfloat16")])
@pytest.mark.parametrize("name", NAMES)
def test_tiny_queries_and_keys_give_finite_gradients_in_16_bits(name, size, precision, mode, path):
    """cosine: the gradient of τ·x/‖x‖ is about τ/‖x‖, so a float16 query or key with entries of 1e-5 has a true
    gradient beyond float16's 65504; below the norm floor of float16 (2^-8) a vector counts as zero. The other
    score functions with the same tiny vectors and a key a tiny distance from a query (l2's ‖q − k‖)."""
    dtype = DTYPES[precision]
    fn = build_score_function(name, n_heads=2, head_dim=8, **({"init_temperature": 8.0} if name == "cosine" else {}))
    if mode == "true":
        fn = fn.to(dtype)
    q, k, v = _tiny_inputs(dtype if mode == "true" else torch.float32, size)
    run = {"attend": fn.attend, "definition": lambda *a: ScoreFunction.attend(fn, *a),
           "reference": lambda *a: reference_attention(fn, *a)}[path]
    with torch.autocast("cpu", dtype=dtype) if mode == "mixed" else contextlib.nullcontext():
        out = run(q, k, v)
    out.float().square().sum().backward()
    for label, t in [("output", out), ("dq", q.grad), ("dk", k.grad), *fn.named_parameters()]:
        t = t if label in ("output", "dq", "dk") else t.grad
        assert t is not None and bool(torch.isfinite(t).all()), f"{label}: {int((~torch.isfinite(t)).sum())} not finite"


def test_cosine_norm_floor_changes_only_vectors_float16_cannot_normalise():
    """The floor is eps in float32/float64/bfloat16 (1/‖x‖ fits there) and 2^-8 = 1/√65504 for float16: a
    float16 vector shorter than that scores 0 with every key, a longer one keeps its direction (float64 reference)."""
    fn = build_score_function("cosine", n_heads=2, head_dim=8)
    assert fn.norm_floor(torch.float32) == fn.norm_floor(torch.bfloat16) == fn.eps
    assert fn.norm_floor(torch.float16) == pytest.approx(65504 ** -0.5)
    half = fn.half()
    q, k, _ = _degenerate_inputs(torch.float16)
    q, k = q.detach(), k.detach()
    q[0, 1, 2] = 1e-4  # ‖q‖ = 2.8e-4: below the floor
    q[0, 1, 3] = 2e-3  # ‖q‖ = 5.7e-3: above it
    scores = half.scores(q, k).double()
    assert bool((scores[0, 1, 2] == 0).all())
    want = half.double().reference_scores(q.double(), k.double())
    torch.testing.assert_close(scores[0, 1, 3], want[0, 1, 3], rtol=2e-3, atol=2e-3)
