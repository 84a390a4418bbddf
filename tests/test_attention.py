"""Every discovered score function against its own float64 reference formula, and the extension point."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from omegaconf import OmegaConf

from attnbench.attention import (
    MultiHeadAttention,
    ScoreFunction,
    available,
    build_score_function,
    masked_softmax,
    score_classes,
)
from attnbench.attention.base import blocked_attend
from attnbench.attention.reference import reference_attention, reference_scores
from attnbench.errors import ConfigError

from .conftest import REPO_ROOT

CONF_ATTENTION = REPO_ROOT / "conf" / "attention"
# every score function the package ships (discovered: every module of attnbench.attention), none hard-coded
BUILTIN = {n: c for n, c in score_classes().items() if c.__module__.startswith("attnbench.attention.")}
NAMES = sorted(BUILTIN)
# (B, H, Lq, Lk, d): Lq != Lk, length-1 queries and keys, odd head sizes
SHAPES = [(2, 3, 5, 7, 8), (3, 2, 1, 4, 5), (2, 1, 6, 1, 3), (1, 4, 9, 9, 16)]


PUBLISHED = {"additive", "cosine", "dot", "euclidean", "general", "l2", "scaled_dot"}


def test_the_seven_published_score_functions_are_discovered():
    assert PUBLISHED <= set(NAMES)


def test_registry_and_conf_attention_agree():
    """Each discovered class has conf/attention/<name>.yaml whose _target_ names it, and each YAML a class."""
    yamls = {p.stem: OmegaConf.load(p) for p in sorted(CONF_ATTENTION.glob("*.yaml"))}
    assert sorted(yamls) == NAMES
    for name, cfg in yamls.items():
        assert cfg.name == name
        cls = BUILTIN[name]
        assert cfg._target_ == f"{cls.__module__}.{cls.__qualname__}"
        fn = build_score_function(cfg, n_heads=2, head_dim=4)  # the YAML's options are the constructor's
        assert type(fn) is cls and fn.name == name


def test_unknown_name_lists_valid_ones():
    valid = ", ".join(available())
    with pytest.raises(ConfigError, match=re.escape(f"unknown score function 'bilinear'; choose one of: {valid} "
                                                    "(attention=<name>)")):
        build_score_function("bilinear", n_heads=2, head_dim=4)


def test_name_that_is_not_the_target_class_is_refused():
    spec = {"_target_": "attnbench.attention.scaled_dot.ScaledDotScore", "name": "dot"}
    with pytest.raises(ConfigError, match=r"attention.name='dot' is not the score function of attention._target_="
                                          r"attnbench.attention.scaled_dot.ScaledDotScore \('scaled_dot'\)"):
        build_score_function(spec, n_heads=2, head_dim=4)
    spec["name"] = "bilinear"  # not registered at all: the list of valid names
    with pytest.raises(ConfigError, match="unknown score function 'bilinear'; choose one of: additive"):
        build_score_function(spec, n_heads=2, head_dim=4)


@pytest.mark.parametrize("target, message", [
    ("nosuchpkg.scores.MyScore", "attention._target_=nosuchpkg.scores.MyScore: no module named 'nosuchpkg'"),
    ("attnbench.attention.dot.NoSuch", "module 'attnbench.attention.dot' has no attribute 'NoSuch'"),
    ("attnbench.attention.base.masked_softmax", "is not a subclass of attnbench.attention.ScoreFunction"),
    ("DotScore", "expected <module>.<Class>"),
])
def test_bad_target_names_the_key(target, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_score_function({"_target_": target}, n_heads=2, head_dim=4)


def test_unknown_option_names_the_key_and_the_closest_one():
    with pytest.raises(ConfigError, match=re.escape(
            "attention=additive: unknown option attention.hiden_dim; did you mean attention.hidden_dim? "
            "AdditiveScore takes: hidden_dim, chunk_size, chunk_bytes, compile")):
        build_score_function(OmegaConf.load(CONF_ATTENTION / "additive.yaml"), n_heads=2, head_dim=4, hiden_dim=3)
    with pytest.raises(ConfigError, match=re.escape("attention=dot: unknown option attention.eps; DotScore takes: "
                                                    "no options")):
        build_score_function("dot", n_heads=2, head_dim=4, eps=1.0)


class _NeedsOption(ScoreFunction):  # nameless: not registered
    def __init__(self, n_heads, head_dim, width):
        super().__init__(n_heads, head_dim)
        self.width = width


class _BuggyConstructor(ScoreFunction):
    def __init__(self, n_heads, head_dim, scale=1.0):
        super().__init__(n_heads, head_dim)
        self.scale = scale + "1"  # a bug inside the constructor: TypeError (float + str)


def test_missing_required_option_names_the_key():
    with pytest.raises(ConfigError, match=re.escape("attention=mine: missing option(s) attention.width")):
        build_score_function({"_target_": f"{__name__}._NeedsOption", "name": "mine"}, n_heads=1, head_dim=2)
    fn = build_score_function({"_target_": f"{__name__}._NeedsOption", "name": "mine", "width": 3}, 1, 2)
    assert fn.width == 3 and fn.name == "mine"  # a nameless class carries its YAML's name


def test_constructor_type_error_surfaces_with_its_own_traceback():
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'float' and 'str'") as err:
        build_score_function({"_target_": f"{__name__}._BuggyConstructor", "name": "buggy"}, n_heads=1, head_dim=2)
    assert not isinstance(err.value, ConfigError) and err.value.__cause__ is None and not err.value.__suppress_context__
    # the innermost frame of the traceback is the constructor's own line
    assert err.traceback[-1].name == "__init__" and "scale +" in str(err.traceback[-1].statement)


def test_a_second_class_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="score function 'dot' is already registered to attnbench.attention.dot.DotScore"):
        type("OtherDot", (ScoreFunction,), {"name": "dot", "scores": lambda self, q, k: q @ k.transpose(-2, -1)})
    assert available() == sorted(score_classes()) and score_classes()["dot"] is BUILTIN["dot"]


def _inputs(b, h, lq, lk, d, dtype, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=dtype) for n in (lq, lk, lk))
    mask = torch.rand(b, lk, generator=g) < 0.3  # random padding, True = pad
    mask[0, 0] = False  # at least one real key in the first sequence
    if b > 1:
        mask[-1] = True  # one sequence entirely padding
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v, mask


def _score_fn(name, h, d, dtype, seed=1, euclidean_form=None):
    torch.manual_seed(seed)
    fn = build_score_function(name, n_heads=h, head_dim=d).to(dtype)
    if euclidean_form == "augmented":
        fn.bias_mask_max_pairs = 0  # force the extra-dimension form at any size
    with torch.no_grad():  # move parameters away from their special init (identity W, etc.)
        for p in fn.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return fn


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", NAMES)
def test_scores_match_float64_reference(name, shape):
    b, h, lq, lk, d = shape
    fn = _score_fn(name, h, d, torch.float64)
    q, k, _, _ = _inputs(*shape, torch.float64)
    got = fn.scores(q, k)
    assert got.shape == (b, h, lq, lk)
    torch.testing.assert_close(got, reference_scores(fn, q, k), rtol=0, atol=1e-10)


PATHS = ["attend", "definition"]
# every fast-path form: euclidean has two (bias mask / augmented dimension)
CASES = [(n, p, None) for n in NAMES for p in PATHS] + [("euclidean", "attend", "augmented")]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name, path, form", CASES)
def test_attention_output_and_gradients_match_reference(name, path, form, shape):
    """Output and gradients (inputs and parameters) equal the float64 reference, with padding."""
    fn = _score_fn(name, shape[1], shape[4], torch.float64, euclidean_form=form)
    q, k, v, mask = _inputs(*shape, torch.float64, requires_grad=True)
    run = fn.attend if path == "attend" else (lambda *a, **kw: ScoreFunction.attend(fn, *a, **kw))
    out = run(q, k, v, key_padding_mask=mask)
    ref = reference_attention(fn, q, k, v, mask)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)
    # fully padded sequences give zeros, not NaN
    assert torch.all(out[mask.all(-1)] == 0)

    weights = torch.randn_like(ref)
    params = list(fn.parameters())
    grads = torch.autograd.grad((out * weights).sum(), [q, k, v, *params], allow_unused=True)
    ref_grads = torch.autograd.grad((ref * weights).sum(), [q, k, v, *params], allow_unused=True)
    for got_g, ref_g in zip(grads, ref_grads):
        assert got_g is not None and torch.isfinite(got_g).all()
        torch.testing.assert_close(got_g, ref_g, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name, form", [(n, None) for n in NAMES] + [("euclidean", "augmented")])
def test_float32_matches_reference(name, form):
    """float32 fast path (SDPA's fused CPU kernels) within 1e-5 of float64, outputs and gradients."""
    shape = (2, 2, 7, 11, 8)
    fn = _score_fn(name, 2, 8, torch.float32, euclidean_form=form)
    q, k, v, mask = _inputs(*shape, torch.float32, requires_grad=True)
    out = fn.attend(q, k, v, mask)
    ref = reference_attention(fn, q, k, v, mask)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-5)
    weights = torch.randn_like(ref)
    inputs = [q, k, v, *fn.parameters()]
    for got, want in zip(torch.autograd.grad((out * weights.float()).sum(), inputs),
                         torch.autograd.grad((ref * weights).sum(), inputs)):
        torch.testing.assert_close(got.double(), want.double(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_every_owned_parameter_gets_a_gradient(name):
    fn = _score_fn(name, 2, 6, torch.float32)
    q, k, v, mask = _inputs(2, 2, 4, 5, 6, torch.float32, requires_grad=True)
    mask[-1] = False
    fn.attend(q, k, v, mask).square().sum().backward()
    owned = dict(fn.named_parameters())
    if name in PUBLISHED:  # the documented parameters of the seven shipped ones; any other: whatever it owns
        assert set(owned) == {"additive": {"w_query", "w_key", "v"}, "general": {"weight"},
                              "cosine": {"log_temperature"}}.get(name, set())
    # query and key: a gradient wherever the float64 reference has one (uniform's scores do not depend on them)
    q64, k64 = (t.detach().double().requires_grad_() for t in (q, k))
    reference_attention(fn.double(), q64, k64, v.detach().double(), mask).square().sum().backward()
    for pname, p, ref in [("query", q, q64), ("key", k, k64), ("value", v, None), *((n, p, None) for n, p in owned.items())]:
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert bool(p.grad.abs().sum() > 0) == (ref is None or bool(ref.grad.abs().sum() > 0)), pname


@pytest.mark.parametrize("name", NAMES)
def test_attention_dropout_is_applied(name):
    fn = _score_fn(name, 2, 8, torch.float64)
    q, k, v, _ = _inputs(2, 2, 16, 16, 8, torch.float64)
    torch.manual_seed(0)
    dropped = fn.attend(q, k, v, None, dropout_p=0.5)
    plain = fn.attend(q, k, v, None, dropout_p=0.0)
    assert not torch.allclose(dropped, plain)
    # inverted dropout keeps the expectation: averaged over many draws it approaches the plain output
    torch.manual_seed(1)
    mean = torch.stack([fn.attend(q, k, v, None, dropout_p=0.5) for _ in range(400)]).mean(0)
    assert (mean - plain).abs().mean() < 0.1 * plain.abs().mean()


def test_l2_gradient_is_finite_at_zero_distance():
    fn = build_score_function("l2", n_heads=1, head_dim=4).double()
    q = torch.zeros(1, 1, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.zeros(1, 1, 3, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    fn.attend(q, k, v).sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


def test_masked_softmax_all_padding_row_has_no_nan_gradient():
    scores = torch.randn(2, 1, 3, 4, requires_grad=True)
    mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    w = masked_softmax(scores, mask)
    assert torch.all(w[1] == 0) and torch.allclose(w[0].sum(-1), torch.ones(1, 3))
    assert torch.all(w[0][..., 2:] == 0)
    w.sum().backward()
    assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("name", NAMES)
def test_multihead_module_shapes_and_padding(name):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=12, n_heads=3, score=name).eval()
    x = torch.randn(2, 5, 12)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    out = mha(x, mask)
    assert out.shape == (2, 5, 12)
    # the second sequence's real positions ignore what sits in its padding
    x2 = x.clone()
    x2[1, 3:] = torch.randn(2, 12) * 100
    torch.testing.assert_close(mha(x2, mask)[1, :3], out[1, :3])


def test_multihead_rejects_indivisible_d_model():
    with pytest.raises(ValueError, match="not divisible by n_heads=3"):
        MultiHeadAttention(d_model=16, n_heads=3, score="dot")


# the score functions with a blocked fast path (a chunk_size option), discovered
BLOCKED = [n for n in NAMES if "chunk_size" in inspect.signature(BUILTIN[n]).parameters]


def test_blocked_score_functions_are_found():
    assert {"additive", "l2"} <= set(BLOCKED)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", BLOCKED)
def test_blocked_fast_path_matches_reference(name, shape, chunk_size):
    """Query blocks with recomputation in the backward: outputs and all gradients stay exact."""
    fn = _score_fn(name, shape[1], shape[4], torch.float64)
    fn.chunk_size = chunk_size
    q, k, v, mask = _inputs(*shape, torch.float64, requires_grad=True)
    out = fn.attend(q, k, v, key_padding_mask=mask)
    ref = reference_attention(fn, q, k, v, mask)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)
    weights = torch.randn_like(ref)
    inputs = [q, k, v, *fn.parameters()]
    for got, want in zip(torch.autograd.grad((out * weights).sum(), inputs),
                         torch.autograd.grad((ref * weights).sum(), inputs)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_additive_automatic_block_size_respects_the_budget():
    fn = build_score_function("additive", n_heads=4, head_dim=64, chunk_bytes=2**20)
    # one query row of hidden state: B*H*Lk*d_a*4 bytes = 2*4*1024*64*4 = 2 MiB > budget -> 1 query per block
    assert fn.block_size(2, 1024, 1024, 4) == 1
    assert fn.block_size(1, 10, 8, 4) == 10  # small inputs: a single block, no recomputation
    fn.chunk_bytes = 64 * 2**20
    assert fn.block_size(2, 1024, 1024, 4) == 32


def test_additive_blocked_dropout_is_replayed_in_backward():
    """Recomputed blocks must reuse the forward's dropout mask: same grads as blocks kept in memory."""
    fn = _score_fn("additive", 2, 4, torch.float64)
    fn.chunk_size = 2
    q, k, v, mask = _inputs(2, 2, 5, 6, 4, torch.float64, requires_grad=True)

    torch.manual_seed(123)
    out = fn.attend(q, k, v, mask, dropout_p=0.3)
    grads = torch.autograd.grad(out.sum(), [q, k, v])

    torch.manual_seed(123)
    q_proj, k_proj = q @ fn.w_query, k @ fn.w_key
    # each slice is one block: no recomputation, activations kept
    kept = torch.cat([blocked_attend(fn._pair_scores, q_proj[..., s : s + 2, :], k_proj, v, mask, 0.3, block=2)
                      for s in range(0, 5, 2)], -2)
    torch.testing.assert_close(out, kept, rtol=0, atol=1e-12)
    for got, want in zip(grads, torch.autograd.grad(kept.sum(), [q, k, v])):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_runs_and_stays_close(name):
    fn = _score_fn(name, 2, 8, torch.float32)
    q, k, v, mask = _inputs(2, 2, 5, 7, 8, torch.float32)
    ref = reference_attention(fn, q, k, v, mask)
    out = fn.to(torch.bfloat16).attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=0.1)


@pytest.mark.parametrize("name", NAMES)
def test_random_shapes_match_reference(name):
    """Hypothesis draws shapes (Lq != Lk, length 1, odd head sizes) and padding; fast path == float64 reference."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(b=st.integers(1, 3), h=st.integers(1, 3), lq=st.integers(1, 9), lk=st.integers(1, 9),
           d=st.integers(1, 9), seed=st.integers(0, 2**16), chunk=st.sampled_from([None, 1, 2]))
    def check(b, h, lq, lk, d, seed, chunk):
        fn = _score_fn(name, h, d, torch.float64, seed=seed)
        if name == "additive":
            fn.chunk_size = chunk
        q, k, v, mask = _inputs(b, h, lq, lk, d, torch.float64, seed=seed, requires_grad=True)
        out = fn.attend(q, k, v, key_padding_mask=mask)
        ref = reference_attention(fn, q, k, v, mask)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)
        inputs = [q, k, v, *fn.parameters()]
        for got, want in zip(torch.autograd.grad(out.sum(), inputs), torch.autograd.grad(ref.sum(), inputs)):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-10)

    check()


@pytest.mark.slow
def test_additive_compiled_matches_reference():
    """attention.compile=true (torch.compile/Inductor) keeps outputs and gradients exact. Compiles: ~1 min."""
    fn = _score_fn("additive", 2, 8, torch.float32)
    fn.compile = True
    q, k, v, mask = _inputs(2, 2, 9, 13, 8, torch.float32, requires_grad=True)
    out = fn.attend(q, k, v, mask)
    ref = reference_attention(fn, q, k, v, mask)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-5)
    inputs = [q, k, v, *fn.parameters()]
    for got, want in zip(torch.autograd.grad(out.sum(), inputs), torch.autograd.grad(ref.sum(), inputs)):
        torch.testing.assert_close(got.double(), want.double(), rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------ low precision
# Tolerance, for the output, every input gradient and every parameter gradient:
#     max|got − ref| ≤ RTOL · max|ref| + 2 · max|got32 − ref|
# RTOL is 8 units of the format's rounding (2^-11 for float16, 2^-8 for bfloat16). ref is float64 on the same
# 16-bit-rounded inputs, parameters and upstream gradient, so what is measured is the error of the 16-bit
# computation itself. got32 is the same score function run in float32 on those same rounded values: the second
# term is the floor float32 arithmetic itself reaches. It matters only where the softmax saturates (general at
# head_dim 64, input scale 4: logits of std 174, the second-largest weight 7e-8, true dq ≈ 2e-5 is a
# cancellation of O(1) terms, and plain float32 is off by 1.4 relative), and at the overflow scale 20.
# A path that keeps logits in 16 bits exceeds the bound by far. Measured, as max error / bound over all cases,
# before → after the float32 compute on CPU (SDPA paths, cosine's norm and τ, additive): dot 16.7 → 0.50
# (bfloat16 dk at d 64, scale 4: 0.40 relative), scaled_dot 5.0 → 0.50 (scale 10), cosine 1.9 → 0.18
# (τ gradient 7.3e-3 relative in float16, 5.1e-2 in bfloat16 mixed), additive 2.9 → 0.12 (scale 20, tanh' at a
# 16-bit pre-activation); euclidean, l2 (float32 already) ≤ 0.19; 0.50 means "equal to the float32 floor".
LOW_PRECISION_RTOL = {torch.float16: 8 * 2.0**-11, torch.bfloat16: 8 * 2.0**-8}
PRECISION_CASES = [(name, None) for name in NAMES] + [("euclidean", "augmented")]


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-300))


def _max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.detach().double() - want.detach()).abs().max())


# head_dim 16, 32 (model=small/tiny: d_model / n_heads = 128/4, 64/2) and 64 (model=base: 256/4) at input
# scales 1 and 4 (10: saturated logits, the independent check's scale); scale 20 with d 256 is the float16 overflow case (‖k‖² ≈ 1e5 > 65504)
@pytest.mark.parametrize(
    "scale, d", [(1.0, 16), (4.0, 16), (1.0, 32), (4.0, 32), (1.0, 64), (4.0, 64), (10.0, 64), (20.0, 256)]
)
@pytest.mark.parametrize("mode", ["true", "mixed"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name, form", PRECISION_CASES)
def test_low_precision_forward_and_backward_match_float64(name, form, dtype, mode, scale, d):
    """Every score function in float16 and bfloat16, with 16-bit weights ("true") or under autocast with float32
    weights ("mixed", as trainer.precision=bf16-mixed), forward and backward, against the float64 reference."""
    fn = _score_fn(name, 2, d, torch.float32, euclidean_form=form)
    q, k, v, mask = _inputs(2, 2, 6, 9, d, torch.float32, seed=3)
    mask[-1, :4] = False  # a partly padded sequence instead of an all-padding one
    q, k = q * scale, k * scale
    q16, k16, v16 = (t.to(dtype).requires_grad_() for t in (q, k, v))
    if mode == "true":
        fn = fn.to(dtype)
        context = torch.autocast("cpu", enabled=False)
    else:
        context = torch.autocast("cpu", dtype=dtype)
    with context:
        out = fn.attend(q16, k16, v16, mask)
    assert out.dtype == dtype
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(dtype)
    out.backward(upstream)
    grads = [q16.grad, k16.grad, v16.grad, *(p.grad for p in fn.parameters())]
    assert all(torch.isfinite(g).all() for g in grads)

    def rerun(fn_dtype):
        """(output, [dq, dk, dv, *parameter grads]) of the same function on the same rounded values."""
        other = _score_fn(name, 2, d, torch.float32, euclidean_form=form)
        other.load_state_dict({key: value.float() for key, value in fn.state_dict().items()})
        other = other.to(fn_dtype)
        inputs = [t.detach().to(fn_dtype).requires_grad_() for t in (q16, k16, v16)]
        result = reference_attention(other, *inputs, mask) if fn_dtype == torch.float64 else other.attend(*inputs, mask)
        result.backward(upstream.to(fn_dtype))
        return result, [t.grad for t in inputs] + [p.grad for p in other.parameters()]

    ref, ref_grads = rerun(torch.float64)
    out32, grads32 = rerun(torch.float32)
    rtol = LOW_PRECISION_RTOL[dtype]
    labels = ["output", "dq", "dk", "dv", *(pname for pname, _ in fn.named_parameters())]
    for label, got, got32, want in zip(labels, [out, *grads], [out32, *grads32], [ref, *ref_grads]):
        bound = rtol * float(want.detach().abs().max()) + 2 * _max_error(got32, want)
        assert _max_error(got, want) <= bound, f"{label}: {_max_error(got, want):.3g} > {bound:.3g}"


def test_euclidean_float16_large_norms_match_float32():
    """The issue's reproducer: q, k ~ 20·N(0,1), d = 256: ‖k‖² ≈ 1e5 overflowed float16 and the output was all
    zeros (max |out| 0 against 4.09)."""
    fn = build_score_function("euclidean", n_heads=1, head_dim=256)
    torch.manual_seed(0)
    q, k = 20 * torch.randn(1, 1, 4, 256), 20 * torch.randn(1, 1, 4, 256)
    v = torch.randn(1, 1, 4, 256)
    ref = fn.attend(q, k, v)
    out = fn.attend(q.half(), k.half(), v.half())
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert float(ref.abs().max()) == pytest.approx(4.09, abs=0.01)
    assert float((out.float() - ref).abs().max()) <= 2e-2


@pytest.mark.parametrize("name", NAMES)
def test_low_precision_scores_keep_float32_logits(name):
    """``scores`` of a 16-bit input: finite at the overflow scale, and float32 for every score function whose
    logits grow with the inputs (all but additive, whose logits are bounded by ‖v‖₁)."""
    fn = _score_fn(name, 1, 256, torch.float32)
    q, k, _, _ = _inputs(1, 1, 4, 5, 256, torch.float32, seed=0)
    q, k = 20 * q, 20 * k
    fn = fn.half()
    ref = reference_scores(fn, q.half(), k.half())  # float64 on the same float16 parameters
    got = fn.scores(q.half(), k.half())
    assert torch.isfinite(got).all()
    if name != "additive":
        assert got.dtype == torch.float32
        # float32 GEMM rounding of 256 products of magnitude ~400 (general: 2.3e-4 measured); 16-bit logits of
        # this size would be off by 2^-11 (float16) to 2^-8 (bfloat16) of the largest
        assert _relative_error(got, ref) <= 2.0**-11
