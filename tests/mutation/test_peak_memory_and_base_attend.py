"""Peak-memory probes on each branch (Linux VmHWM, the getrusage fallback, CUDA faked) and ScoreFunction.attend's
dtype contract, against values read independently (/proc/self/status, getrusage) and a float64 computation."""

from __future__ import annotations

import math
import resource

import pytest
import torch

from attnbench.attention.base import ScoreFunction
from attnbench.callbacks import throughput as run_stats


def _vmhwm_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="Linux only")
def test_cpu_peak_is_the_vmhwm_field_in_bytes(monkeypatch):
    """VmHWM (KiB) × 1024, read here from /proc/self/status before and after (the mark only grows between).
    getrusage, the fallback for systems without VmHWM, is faked to a wrong value: on Linux it must not be used
    (its ru_maxrss often equals VmHWM, so only a fake tells which one was read)."""
    monkeypatch.setattr(run_stats.resource, "getrusage", lambda who: type("R", (), {"ru_maxrss": 1})())
    keep = torch.ones(16 * 2**20)  # 64 MiB, touched and kept
    before = _vmhwm_kib()
    got = run_stats.peak_memory_bytes(torch.device("cpu"))
    after = _vmhwm_kib()
    assert before * 1024 <= got <= after * 1024 and isinstance(got, int)
    assert float(keep[0]) == 1.0


def test_cpu_peak_without_vmhwm_falls_back_to_getrusage(monkeypatch):
    """Where /proc has no VmHWM: ru_maxrss, in KiB on Linux and in bytes on macOS (getrusage(2))."""
    monkeypatch.setattr(run_stats, "_proc_status_kib", lambda field: None)
    monkeypatch.setattr(run_stats.sys, "platform", "linux")
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = run_stats.peak_memory_bytes(torch.device("cpu"))
    assert kib * 1024 <= got <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 and isinstance(got, int)
    monkeypatch.setattr(run_stats.sys, "platform", "darwin")
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = run_stats.peak_memory_bytes(torch.device("cpu"))
    assert raw <= got <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss and isinstance(got, int)


def test_proc_status_field_is_read_in_kib():
    if not __import__("os").path.exists("/proc/self/status"):
        pytest.skip("Linux only")
    before = _vmhwm_kib()
    got = run_stats._proc_status_kib("VmHWM")
    assert before <= got <= _vmhwm_kib()
    assert run_stats._proc_status_kib("NoSuchField") is None
    assert run_stats._proc_status_kib("VmHW") is None  # a prefix of a field is not the field


def test_cuda_peak_and_reset_use_the_allocator_of_that_device(monkeypatch):
    """torch.cuda faked (no GPU here): the peak is the allocator's max_memory_allocated of the given device, and
    reset_peak_memory resets that device's statistics (not the process's RSS mark)."""
    calls = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: calls.append(("max", device)) or 12345)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append(("reset", device)))
    cuda1 = torch.device("cuda", 1)
    assert run_stats.peak_memory_bytes(cuda1) == 12345
    run_stats.reset_peak_memory(cuda1)
    assert calls == [("max", cuda1), ("reset", cuda1)]


class _Bilinear(ScoreFunction):
    """A score function with only ``scores`` (unregistered: no ``name``), computed in float32 like the 16-bit
    paths: ScoreFunction.attend is its whole attention."""

    def scores(self, query, key):
        return query.float() @ key.float().transpose(-2, -1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_definitional_attend_returns_the_value_dtype_and_matches_float64(dtype):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    out = _Bilinear(n_heads=2, head_dim=4).attend(q, k, v, key_padding_mask=mask)
    assert out.dtype == dtype
    q64, k64, v64 = q.double(), k.double(), v.double()
    scores = (q64 @ k64.transpose(-2, -1)).masked_fill(mask[:, None, None, :], -math.inf)
    want = torch.softmax(scores, -1) @ v64
    # tolerance: one rounding of the output to the dtype (2^-8 relative for bfloat16, 2^-11 float16) on values
    # below 3 in size, plus float32 accumulation
    tol = {torch.bfloat16: 3 * 2**-8, torch.float16: 3 * 2**-11, torch.float32: 1e-5}[dtype]
    assert torch.allclose(out.double(), want, rtol=0, atol=tol)
