"""scripts/bench_train.py's FLOP accounting and scripts/bench_short_attention.py run on real inputs."""

from __future__ import annotations

import importlib.util
import platform
import subprocess
import sys

import torch

from attnbench.data import PadCollator
from attnbench.models.module import TextClassifierModule

from .conftest import REPO_ROOT


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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
    peak = bench.gemm_peak_flops(sizes=(128,), repeats=1)
    assert 1e8 < peak < 1e14


def test_short_attention_ratios():
    bench = _script("bench_short_attention")
    # --malloc default: fixing glibc's thresholds is process-wide, and this process is the test session
    out = bench.main(["--batch", "4", "--length", "8", "--rounds", "1", "--number", "1", "--contiguous",
                      "--malloc", "default"])
    assert out["scaled_dot/views"] == out["scaled_dot/contiguous"] == 1.0
    assert all(v > 0 for v in out.values()) and set(out) == {f"{n}/{lay}" for n in ("scaled_dot", "euclidean",
                                                                                      "cosine")
                                                              for lay in ("views", "contiguous")}


def test_short_attention_fixes_glibc_malloc_thresholds_and_says_so():
    """In its own process (mallopt is process-wide): the header names the fixed thresholds on glibc."""
    cmd = [sys.executable, str(REPO_ROOT / "scripts" / "bench_short_attention.py"), "--batch", "2", "--length", "4",
           "--rounds", "1", "--number", "1"]
    header = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO_ROOT).stdout.splitlines()[0]
    if platform.libc_ver()[0] == "glibc":
        assert header.endswith("glibc malloc thresholds fixed (mmap 64 MiB, trim 1024 MiB)"), header
    else:
        assert header.endswith("malloc as it comes (not glibc)"), header


def test_bench_train_attention_json_holds_every_run_and_the_best(tmp_path, monkeypatch):
    """`bench_train.py --attention ... --json` (the cost stage of scripts/reproduce.py): every interleaved run
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
