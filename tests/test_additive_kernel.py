"""The fused CPU additive attention kernel (cpu_kernels.additive_attention) against float64, where it is used, and
the blocked path it falls back to.

The kernel compiles with the other CPU kernels on first use (about a minute once per machine; cached by torch under
TORCH_EXTENSIONS_DIR).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from attnbench.attention import MultiHeadAttention, build_score_function, cpu_kernels
from attnbench.attention.reference import reference_attention


@pytest.fixture
def kernel():
    if cpu_kernels.additive_kernels_for(torch.zeros(1)) is None:
        pytest.fail("the CPU kernels did not build on this machine (see the RuntimeWarning)")
    return cpu_kernels


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of the fused kernel through AdditiveScore.attend."""
    made = []
    real = cpu_kernels.additive_attention
    monkeypatch.setattr(cpu_kernels, "additive_attention", lambda *a, **kw: made.append(1) or real(*a, **kw))
    return made


def _score_fn(h, d, dtype, hidden_dim=None, seed=1):
    torch.manual_seed(seed)
    fn = build_score_function("additive", n_heads=h, head_dim=d, hidden_dim=hidden_dim).to(dtype)
    with torch.no_grad():
        for p in fn.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return fn


def _inputs(b, h, lq, lk, d, dtype, seed=0, all_padded=True):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g, dtype=dtype).requires_grad_() for n in (lq, lk, lk))
    mask = torch.rand(b, lk, generator=g) < 0.3  # True = padding
    mask[0, 0] = False
    if b > 1 and all_padded:
        mask[-1] = True  # a sequence whose keys are all padding
    return q, k, v, mask


def _check_against_reference(fn, q, k, v, mask, atol):
    out = fn.attend(q, k, v, key_padding_mask=mask)
    ref = reference_attention(fn, q, k, v, mask)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=atol)
    assert torch.all(out[mask.all(-1)] == 0)
    weights = torch.randn(ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    inputs = [q, k, v, *fn.parameters()]
    got = torch.autograd.grad((out * weights.to(out.dtype)).sum(), inputs)
    want = torch.autograd.grad((ref * weights).sum(), inputs)
    for name, g, w in zip(["query", "key", "value", "w_query", "w_key", "v"], got, want):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.double(), w.double(), rtol=0, atol=atol, msg=lambda m: f"{name}: {m}")


# (B, H, Lq, Lk, d, d_a): Lq != Lk, lengths not a multiple of the 8/16 float lanes, odd d_a, batch of 1, length 1
SHAPES = [(2, 3, 5, 7, 8, None), (1, 2, 19, 33, 5, 7), (3, 1, 1, 1, 3, 1), (2, 2, 17, 40, 16, 64), (1, 1, 9, 9, 4, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_float64_output_and_gradients_match_reference(kernel, calls, shape):
    b, h, lq, lk, d, d_a = shape
    fn = _score_fn(h, d, torch.float64, hidden_dim=d_a)
    _check_against_reference(fn, *_inputs(b, h, lq, lk, d, torch.float64), atol=1e-10)
    assert calls == [1]


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_output_and_gradients_within_1e5_of_float64(kernel, calls, shape):
    """The vectorised float32 loops (tanh of the CPU's lanes, the tail of a row included)."""
    b, h, lq, lk, d, d_a = shape
    fn = _score_fn(h, d, torch.float32, hidden_dim=d_a)
    _check_against_reference(fn, *_inputs(b, h, lq, lk, d, torch.float32), atol=1e-5)
    assert calls == [1]


@pytest.mark.parametrize("chunk_size", [None, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_blocked_fallback_matches_reference(monkeypatch, calls, shape, chunk_size):
    """Without the kernel (not built, switched off, dropout, torch.compile) the blocked path runs, exact as well."""
    monkeypatch.setattr(cpu_kernels, "additive_kernels_for", lambda *t: None)
    b, h, lq, lk, d, d_a = shape
    fn = _score_fn(h, d, torch.float64, hidden_dim=d_a)
    fn.chunk_size = chunk_size
    _check_against_reference(fn, *_inputs(b, h, lq, lk, d, torch.float64), atol=1e-10)
    assert calls == []


def test_gradcheck_float64_with_padding_and_an_all_padded_sequence(kernel):
    g = torch.Generator().manual_seed(3)
    a, b, w, value = (torch.randn(*s, dtype=torch.float64, generator=g).requires_grad_()
                      for s in [(2, 2, 4, 3), (2, 2, 5, 3), (2, 3), (2, 2, 5, 4)])
    mask = torch.tensor([[False, False, True, False, True], [True] * 5])
    assert torch.autograd.gradcheck(lambda *t: cpu_kernels.additive_attention(*t, mask), (a, b, w, value))
    assert torch.autograd.gradcheck(lambda *t: cpu_kernels.additive_attention(*t), (a, b, w, value))


def test_value_as_a_strided_head_view_and_a_non_contiguous_upstream_gradient(kernel):
    """The heads MultiHeadAttention hands over are views of one projection; the kernel reads them in place."""
    g = torch.Generator().manual_seed(4)
    qkv = torch.randn(2, 21, 3 * 2 * 8, generator=g, dtype=torch.float64)
    value = qkv[..., 32:].view(2, 21, 2, 8).transpose(1, 2).requires_grad_()
    assert not value.is_contiguous()
    a, b = (torch.randn(2, 2, 21, 6, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = torch.randn(2, 6, generator=g, dtype=torch.float64, requires_grad=True)
    out = cpu_kernels.additive_attention(a, b, w, value)
    ref = torch.softmax((torch.tanh(a.unsqueeze(-2) + b.unsqueeze(-3)) * w[None, :, None, None]).sum(-1), -1) @ value
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    upstream = torch.randn(2, 2, 8, 21, generator=g, dtype=torch.float64).transpose(-1, -2)  # not contiguous
    for got, want in zip(torch.autograd.grad(out, [a, b, w, value], upstream),
                         torch.autograd.grad(ref, [a, b, w, value], upstream)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_fused_and_blocked_paths_agree_in_float32(kernel, monkeypatch):
    fn = _score_fn(4, 16, torch.float32, hidden_dim=24)
    q, k, v, mask = _inputs(3, 4, 29, 31, 16, torch.float32)
    fused = fn.attend(q, k, v, mask)
    fused_grads = torch.autograd.grad(fused.square().sum(), [q, k, v, *fn.parameters()])
    monkeypatch.setattr(cpu_kernels, "additive_kernels_for", lambda *t: None)
    fn.chunk_size = 4  # several blocks, recomputed in the backward
    blocked = fn.attend(q, k, v, mask)
    torch.testing.assert_close(fused, blocked, rtol=0, atol=2e-6)
    for got, want in zip(fused_grads, torch.autograd.grad(blocked.square().sum(), [q, k, v, *fn.parameters()])):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_used_in_training_and_inference_not_with_dropout_compile_or_16_bit_storage(kernel, calls):
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, "additive")
    x = torch.randn(3, 10, 32)
    mask = torch.zeros(3, 10, dtype=torch.bool)
    mask[1, 6:] = True
    layer(x, mask).sum().backward()  # training, no attention dropout (the default)
    with torch.no_grad():
        layer.eval()(x, mask)
    assert len(calls) == 2
    fn = layer.score_fn
    q, k, v, _ = _inputs(2, 4, 5, 5, 8, torch.float32)
    fn.attend(q, k, v, None, dropout_p=0.1)  # the kernel draws no dropout mask: the blocked path
    assert len(calls) == 2
    fn.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), None)  # 16-bit inputs are computed in float32: the kernel
    assert len(calls) == 3
    fn.compile = True  # asked for torch.compile: its path (not called here: compiling takes a minute)
    assert fn._uses_compile(q.device)


def test_memory_saved_for_the_backward_is_linear_in_length(kernel):
    """What autograd keeps between forward and backward: the projections' inputs, the kernel's inputs, output and
    one log-sum-exp per query, O(B·H·L·(d_a + d)): far below one B×H×L×L×d_a hidden tensor."""
    b, h, n, d = 2, 2, 1024, 4
    fn = _score_fn(h, d, torch.float32)
    q, k, v, mask = _inputs(b, h, n, n, d, torch.float32)
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn.attend(q, k, v, mask)
    d_a = fn.hidden_dim
    # q, k (and the two weights, per matmul), q_proj, k_proj, v, value, mask, out, lse
    linear = b * h * n * (4 * d + 2 * d_a + 1) + b * n + 4 * h * d * d_a + h * d_a
    assert sum(saved) <= linear < b * h * n * n * d_a / 100


def test_two_threads_give_the_one_thread_result(kernel):
    fn = _score_fn(4, 16, torch.float32, hidden_dim=32)
    q, k, v, mask = _inputs(4, 4, 40, 40, 16, torch.float32)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            out = fn.attend(q, k, v, mask)
            results.append([out, *torch.autograd.grad(out.sum(), [q, k, v, *fn.parameters()])])
    finally:
        torch.set_num_threads(before)
    for one, two in zip(*results):
        assert torch.equal(one, two)


def test_bad_input_is_refused_with_what_was_expected(kernel):
    a, b, w, v = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 5, 4), torch.zeros(2, 4), torch.zeros(1, 2, 5, 6)
    with pytest.raises(RuntimeError, match="every input must be a Float CPU tensor, got Double"):
        cpu_kernels.additive_attention(a, b, w, v.double())
    with pytest.raises(RuntimeError, match="inconsistent shapes"):
        cpu_kernels.additive_attention(a, b, torch.zeros(3, 4), v)
    with pytest.raises(RuntimeError, match="key_padding_mask must be empty or a bool B×Lk tensor"):
        cpu_kernels.additive_attention(a, b, w, v, torch.zeros(1, 4, dtype=torch.bool))
    assert cpu_kernels.additive_kernels_for(a, b.double()) is None
    assert cpu_kernels.additive_kernels_for(a.half()) is None


def test_inline_tanh_matches_float64(kernel, tmp_path):
    """Where MKL is missing the loops use their own tanh; forced here in a fresh process (the choice is made once)."""
    code = (
        "import torch\n"
        "from attnbench.attention import cpu_kernels\n"
        "g = torch.Generator().manual_seed(0)\n"
        "a, b = torch.randn(2, 2, 21, 37, generator=g) * 3, torch.randn(2, 2, 35, 37, generator=g) * 3\n"
        "w, v = torch.randn(2, 37, generator=g), torch.randn(2, 2, 35, 8, generator=g)\n"
        "t = [x.requires_grad_() for x in (a, b, w, v)]\n"
        "out = cpu_kernels.additive_attention(*t)\n"
        "t64 = [x.detach().double().requires_grad_() for x in t]\n"
        "ref = torch.softmax((torch.tanh(t64[0][..., None, :] + t64[1][..., None, :, :]) * t64[2][None, :, None, None]"
        ").sum(-1), -1) @ t64[3]\n"
        "err = [(out.double() - ref).abs().max().item()]\n"
        "for x, y in zip(torch.autograd.grad(out.sum(), t), torch.autograd.grad(ref.sum(), t64)):\n"
        "    err.append(((x.double() - y).abs().max() / y.abs().max()).item())\n"
        "print(cpu_kernels._build().additive_attention_isa(), max(err))\n"
    )
    env = dict(os.environ, ATTNBENCH_ADDITIVE_TANH="inline")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lanes, inline tanh " in done.stdout and float(done.stdout.split()[-1]) < 2e-5, done.stdout


def test_cpu_never_asks_for_triton(monkeypatch):
    """The CUDA path (pair scores through torch.compile where Triton is installed) is chosen by device: CPU runs,
    fused or blocked, never look for Triton."""
    from attnbench.attention import additive

    def no_triton():
        raise AssertionError("a CPU run asked whether Triton is installed")

    monkeypatch.setattr(additive, "_triton_available", no_triton)
    fn = _score_fn(2, 8, torch.float32)
    q, k, v, mask = _inputs(2, 2, 5, 6, 8, torch.float32)
    fn.attend(q, k, v, mask).sum().backward()
    fn.attend(q, k, v, mask, dropout_p=0.2).sum().backward()
    assert not fn._uses_compile(torch.device("cpu"))
