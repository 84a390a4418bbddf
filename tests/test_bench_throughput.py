"""attnbench bench train's FLOP accounting and attnbench bench short run on real inputs."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest
import torch

from attnbench.data import PadCollator
from attnbench.models.module import TextClassifierModule

from .conftest import REPO_ROOT


def _script(name: str):
    """A benchmark module: ``bench_train`` -> :mod:`attnbench.bench.train`, ``bench_short_attention`` -> ``.short``."""
    import importlib

    return importlib.import_module({"bench_train": "attnbench.bench.train",
                                    "bench_short_attention": "attnbench.bench.short"}[name])


def _module() -> TextClassifierModule:
    torch.manual_seed(0)
    return TextClassifierModule(vocab_size=50, num_classes=2, max_length=16, pad_id=0,
                                model={"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.0},
                                attention={"name": "scaled_dot"},
                                optim={"lr": 1e-3, "weight_decay": 0.0, "betas": [0.9, 0.98], "eps": 1e-8,
                                       "warmup_ratio": 0.0, "schedule": "constant", "min_lr_ratio": 0.0})


def test_useful_flops_count_each_example_at_its_own_length():
    bench = _script("bench_train")
    module = _module()
    seqs = [([3] * 16, 0), ([4] * 4, 1), ([5] * 4, 0)]  # padded to 16: 48 positions, 24 tokens
    batch = PadCollator(0)(seqs)
    f = bench.flops_of_batches(module, [batch])
    one = {n: bench.step_flops(module, torch.ones(1, n, dtype=torch.long), torch.zeros(1, n, dtype=torch.bool),
                               torch.zeros(1, dtype=torch.long)) for n in (4, 16)}
    assert f["padded_flops"] == 3 * one[16]
    assert f["useful_flops"] == one[16] + 2 * one[4]
    assert (f["tokens"], f["positions"]) == (24, 48)
    # the linear layers dominate: 1 forward multiply-add per weight per token (x2 FLOPs), x3 with the backward
    weights = sum(p.numel() for name, p in module.named_parameters() if p.dim() == 2 and "embedding" not in name)
    assert one[16] >= 3 * 2 * 16 * (weights - 2 * 16)  # the head runs once per sequence, not per token


def test_gemm_peak_is_a_rate():
    bench = _script("bench_train")
    peak = bench.gemm_peak_gflops(sizes=(128,), repeats=1) * 1e9
    assert 1e8 < peak < 1e14


def test_short_attention_ratios(monkeypatch):
    bench = _script("bench_short_attention")
    from attnbench.attention import cpu_kernels

    calls = []
    real = cpu_kernels.unit_rows
    monkeypatch.setattr(cpu_kernels, "unit_rows", lambda *a: calls.append(1) or real(*a))
    # --malloc default: fixing glibc's thresholds is process-wide, and this process is the test session
    out = bench.main(["--batch", "4", "--length", "8", "--rounds", "1", "--number", "1", "--contiguous", "--eager",
                      "--malloc", "default"])
    layouts = ("views", "contiguous", "views, eager")
    assert [out[f"scaled_dot/{lay}"] for lay in layouts] == [1.0, 1.0, 1.0]
    assert all(v > 0 for v in out.values()) and set(out) == {f"{n}/{lay}" for n in ("scaled_dot", "euclidean",
                                                                                      "cosine")
                                                              for lay in layouts}
    # cosine's q and k through the kernel in the warm-up and the timed call of the two kernel layouts; none eager
    assert len(calls) == 2 * 2 * 2


@pytest.mark.slow
def test_short_attention_fixes_glibc_malloc_thresholds_and_says_so():
    """In its own process (mallopt is process-wide): the header names the fixed thresholds on glibc."""
    cmd = [sys.executable, "-m", "attnbench", "bench", "short", "--batch", "2", "--length", "4",
           "--rounds", "1", "--number", "1"]
    header = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO_ROOT).stdout.splitlines()[0]
    if platform.libc_ver()[0] == "glibc":
        assert header.endswith("glibc malloc thresholds fixed (mmap 64 MiB, trim 1024 MiB); fused CPU kernels built"), header
    else:
        assert header.endswith("malloc as it comes (not glibc); fused CPU kernels built"), header


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_bench_train_attention_json_holds_every_run_and_the_best(tmp_path, monkeypatch):
    """`attnbench bench train --attention ... --json` (the cost stage of attnbench reproduce): every interleaved run
    per score function, the best = the largest of them, the settings and the machine."""
    bench = _script("bench_train")
    out = tmp_path / "cost" / "train_throughput.json"
    best = bench.main(["--model", "tiny", "--steps", "8", "--warmup", "2", "--repeats", "2",
                       "--attention", "scaled_dot,additive", "--json", str(out), "data.max_train_samples=256"])
    import json

    data = json.loads(out.read_text())
    runs = data["result"]["runs"]
    assert set(runs) == {"scaled_dot", "additive"} and all(len(v) == 2 for v in runs.values())
    assert data["result"]["best"] == {k: max(v) for k, v in runs.items()} == best
    assert data["result"]["steps"] == 8 and data["result"]["repeats"] == 2 and data["result"]["model"] == "tiny"
    assert data["meta"]["threads"] == torch.get_num_threads() and data["meta"]["torch"] == torch.__version__
    assert all(rate > 0 for v in runs.values() for rate in v)


def test_bench_train_json_says_which_code_and_when(tmp_path):
    """A published --json figure names its commit (HEAD, +dirty for uncommitted src/conf/scripts/train.py
    changes) and when it was written, so a reader need not take a page's word for the code it ran on."""
    import argparse
    import datetime as dt
    import json
    import subprocess

    bench = _script("bench_train")
    out = tmp_path / "bench.json"
    bench.write_json(argparse.Namespace(json=out), {"ratio": 1.25})
    meta = json.loads(out.read_text())["meta"]
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
    if head.returncode == 0:
        assert meta["commit"] in (head.stdout.strip(), head.stdout.strip() + "+dirty")
    else:
        assert meta["commit"] == "unknown (not a git checkout)"
    assert abs(dt.datetime.fromisoformat(meta["created"]) - dt.datetime.now()) < dt.timedelta(minutes=5)
    assert json.loads(out.read_text())["result"] == {"ratio": 1.25}


def test_batching_row_is_the_hand_count():
    """`--batching` per-step arithmetic against a hand count: 3 timed batches of 64 x 20 = 1,280 tokens each
    (3,840 in all, 5,120 positions), best rate 1,000 tokens/s -> 1,000 / 1,280 = 0.78125 steps/s, 1,280 ms a step;
    useful FLOPs 3e9 over the 3 batches = 1e9 a step -> 0.78125e9 FLOP/s, MFU 0.78125 of a 1e9 FLOP/s peak;
    padded 6e9 over 3 = 2e9 a step -> MFU padded 1.5625."""
    bench = _script("bench_train")
    flops = {"tokens": 3840.0, "positions": 5120.0, "useful_flops": 3e9, "padded_flops": 6e9}
    row = bench.batching_row(1000.0, flops, 3, 1e9)
    assert row["tokens_per_sec"] == 1000.0
    assert row["useful_frac"] == 0.75
    assert row["step_ms"] == 1280.0
    assert row["useful_flops_per_step"] == 1e9 and row["padded_flops_per_step"] == 2e9
    assert abs(row["useful_flops_per_sec"] - 0.78125e9) < 1e-3
    assert abs(row["mfu_useful"] - 0.78125) < 1e-12 and abs(row["mfu_padded"] - 1.5625) < 1e-12
    assert row["peak_flops_per_sec"] == 1e9
    # one step's tokens at the rate take step_ms: the identity the bench's printout rests on
    assert abs(row["step_ms"] * row["tokens_per_sec"] / 1e3 - flops["tokens"] / 3) < 1e-9


def test_bench_train_attnbench_vs_bare_takes_the_best_of_each_side(monkeypatch):
    """The default path (attnbench vs a bare PyTorch loop): best of N = the largest rate of each side, the ratio
    from the two bests (hand values: 1,000 / 1,250 = 0.8), whatever order the runs came in."""
    import types

    bench = _script("bench_train")
    attn = iter([900.0, 1000.0, 950.0])
    bare = iter([1100.0, 1250.0, 1200.0])
    dm = types.SimpleNamespace(vocab_size=20, num_classes=2, max_length=8, pad_id=0, train_dataloader=lambda: [])
    monkeypatch.setattr(bench, "_datamodule", lambda cfg: dm)
    monkeypatch.setattr(bench, "lightning_run", lambda *a, **k: next(attn))
    monkeypatch.setattr(bench, "bare_loop", lambda *a, **k: next(bare))
    out = bench.main(["--model", "tiny", "--steps", "4", "--warmup", "1", "--repeats", "3"])
    assert out["attnbench"] == 1000.0 and out["bare"] == 1250.0
    assert abs(out["ratio"] - 0.8) < 1e-12


def test_bench_train_variants_take_the_best_rate_and_the_median_first_step(monkeypatch):
    """`--variants`: per variant the best (largest) tokens/s of its runs and the median first-step time, whatever
    the order the interleaved runs came in (hand values: rates 100, 300, 200 -> 300; 400, 350, 500 -> 500; first
    steps 0.3, 0.1, 0.2 s -> 0.2; 1.0, 3.0, 2.0 s -> 2.0)."""
    import types

    bench = _script("bench_train")
    script = iter([(100.0, 0.3), (400.0, 1.0), (300.0, 0.1), (350.0, 3.0), (200.0, 0.2), (500.0, 2.0)])

    def run(cfg, dm, steps, warmup, log_dir, attention=None, extra_callbacks=()):
        rate, first = next(script)
        extra_callbacks[0].seconds = first
        return rate

    monkeypatch.setattr(bench, "_datamodule", lambda cfg: types.SimpleNamespace())
    monkeypatch.setattr(bench, "lightning_run", run)
    out = bench.main(["--model", "tiny", "--steps", "4", "--warmup", "1", "--repeats", "3",
                      "--variants", "optim.impl=for_loop;optim.impl=fused"])
    assert out["optim.impl=for_loop"]["tokens_per_sec"] == 300.0 and out["optim.impl=fused"]["tokens_per_sec"] == 500.0
    assert out["optim.impl=for_loop"]["first_step_sec"] == 0.2 and out["optim.impl=fused"]["first_step_sec"] == 2.0
