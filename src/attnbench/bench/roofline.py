"""Each score function's time against its own limit on this machine (a roofline per score function).

The limit of a score function is the work it cannot avoid, at the rate this machine does that work, measured in
the same process at the same thread count:

- GEMM-able scores (``scaled_dot``, ``dot``, ``general``, ``cosine``, ``euclidean``): QKᵀ and PV are
  2·B·H·n²·d FLOPs each, so :func:`gemm_bound_seconds` = 4·B·H·n²·d at the fp32 GEMM peak
  (:func:`gemm_peak_gflops`, ``torch.mm`` of 2048×2048).
- ``additive``: one tanh per (query, key, hidden unit), B·H·n²·d_a of them, which no matrix unit computes, at
  the vectorised tanh rate (:func:`tanh_rate`: ``torch.tanh`` on a contiguous float32 tensor that stays in
  cache, i.e. the arithmetic rate, not memory bandwidth), plus its FLOPs at the GEMM peak: 2·B·H·n²·d_a for
  vᵀtanh(·) and 2·B·H·n²·d for PV (:func:`additive_bound_seconds`; the tanh is about 90% of it at d = d_a).
  Forward + backward: twice the forward's bound (the backward recomputes the tanh; 1 − tanh² is
  multiply-adds).

``python -m attnbench.bench.roofline`` prints, for 1 and 2 threads, each path's time, its bound and the fraction
of the bound it reaches, and additive / SDPA both as measured and at the limit. Times are the minimum of
``--repeats`` runs after one warm-up (the minimum is the least disturbed by other processes), on the wall clock
or, with ``--clock cpu``, the 1-thread tables on the process's CPU time: on a machine shared with other jobs, a
short run (the tanh rate, 1 ms) often finds the core free and a long one (additive, 100s of ms) never does, so
wall-clock fractions there understate what the code reaches; CPU time leaves out the time spent waiting for a
core. Tables of more threads stay on the wall clock (CPU time would count a thread that never ran as no time).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attnbench.attention import build_score_function, cpu_kernels


CLOCKS = ("wall", "cpu")
_clock = "wall"


def set_clock(clock: str) -> None:
    """Time with the wall clock (``"wall"``) or the process's CPU time (``"cpu"``, meaningful at 1 thread).

    Raises:
        ValueError: another name.
    """
    global _clock
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    _clock = clock


def _now() -> float:
    return time.perf_counter() if _clock == "wall" else time.process_time()


def best_seconds(run: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Minimum seconds of ``run()`` over ``repeats`` calls (on the clock of :func:`set_clock`), after ``warmup``
    untimed calls."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = _now()
        run()
        times.append(_now() - start)
    return min(times)


def gemm_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """fp32 matrix-multiply rate of ``torch.mm`` on two ``size``×``size`` matrices at the current thread count,
    GFLOP/s (2·size³ FLOPs a product)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(size, size, generator=g), torch.randn(size, size, generator=g)
    out = torch.empty(size, size)
    return 2 * size**3 / best_seconds(lambda: torch.mm(a, b, out=out), repeats) / 1e9


def tanh_rate(numel: int = 2**16, repeats: int = 5, calls: int = 64) -> float:
    """Vectorised ``torch.tanh`` rate on a contiguous float32 tensor of ``numel`` elements at the current thread
    count, G tanh/s. The default 2¹⁶ elements (256 KiB in, 256 KiB out) stay in the L2 cache, so this is the
    arithmetic rate; a tensor far larger than the caches measures memory bandwidth instead. ``calls`` calls are
    timed together, so the per-call overhead of a torch op counts little."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0)) * 2
    out = torch.empty_like(x)

    def run():
        for _ in range(calls):
            torch.tanh(x, out=out)

    return calls * numel / best_seconds(run, repeats) / 1e9


def gemm_bound_seconds(batch: int, heads: int, n: int, head_dim: int, peak_gflops: float) -> float:
    """Seconds of a GEMM-able score's forward at the GEMM peak: 4·B·H·n²·d FLOPs (QKᵀ and PV)."""
    return 4 * batch * heads * n * n * head_dim / (peak_gflops * 1e9)


def tanh_bound_seconds(batch: int, heads: int, n: int, hidden_dim: int, rate_g: float) -> float:
    """Seconds of B·H·n²·d_a tanh (additive's forward) at ``rate_g`` G tanh/s."""
    return batch * heads * n * n * hidden_dim / (rate_g * 1e9)


def additive_bound_seconds(batch: int, heads: int, n: int, hidden_dim: int, head_dim: int, rate_g: float,
                           peak_gflops: float) -> float:
    """Seconds of additive's forward at its limit: B·H·n²·d_a tanh at ``rate_g`` G/s, plus
    2·B·H·n²·(d_a + d) FLOPs (vᵀtanh and PV) at ``peak_gflops``."""
    flops = 2 * batch * heads * n * n * (hidden_dim + head_dim)
    return tanh_bound_seconds(batch, heads, n, hidden_dim, rate_g) + flops / (peak_gflops * 1e9)


@dataclass
class Row:
    """One measured path: ``time_s`` against ``bound_s`` (``fraction`` = bound / time)."""

    score: str
    path: str
    passes: str
    time_s: float
    bound_s: float

    @property
    def fraction(self) -> float:
        return self.bound_s / self.time_s


def measure(threads: int, batch: int = 4, heads: int = 4, n: int = 512, head_dim: int = 64,
            repeats: int = 5, fallback: bool = True) -> tuple[dict[str, float], list[Row]]:
    """Rates and rows at ``threads`` threads: SDPA forward, additive forward and forward + backward through the
    fused kernel (when built) and, with ``fallback``, through the blocked path. d_a = head_dim.

    Returns:
        (``{"gemm_gflops", "tanh_g_per_s", "tanh_g_per_s_streaming"}``, rows).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rates = {"gemm_gflops": gemm_peak_gflops(repeats=repeats), "tanh_g_per_s": tanh_rate(repeats=repeats),
                 "tanh_g_per_s_streaming": tanh_rate(2**24, repeats=max(2, repeats // 2), calls=1)}
        gemm = gemm_bound_seconds(batch, heads, n, head_dim, rates["gemm_gflops"])
        tanh = additive_bound_seconds(batch, heads, n, head_dim, head_dim, rates["tanh_g_per_s"],
                                      rates["gemm_gflops"])
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(batch, heads, n, head_dim, generator=g) for _ in range(3))
        rows = []
        with torch.no_grad():
            rows.append(Row("scaled_dot", "SDPA", "forward",
                            best_seconds(lambda: F.scaled_dot_product_attention(q, k, v), repeats), gemm))
        torch.manual_seed(0)
        additive = build_score_function("additive", n_heads=heads, head_dim=head_dim)
        paths = []
        if cpu_kernels.additive_kernels_for(q) is not None:
            paths.append(("fused", True))
        if fallback:
            paths.append(("blocked", False))
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]

        def forward_backward():
            additive.attend(*leaves).sum().backward()

        for path, fused in paths:
            additive.use_cpu_kernel = fused
            with torch.no_grad():
                rows.append(Row("additive", path, "forward", best_seconds(lambda: additive.attend(q, k, v), repeats),
                                tanh))
            rows.append(Row("additive", path, "forward+backward", best_seconds(forward_backward, repeats),
                            2 * tanh))
        return rates, rows
    finally:
        torch.set_num_threads(before)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def format_table(threads: int, shape: str, rates: dict[str, float], rows: list[Row]) -> str:
    """A Markdown table of ``rows`` with the rates and both additive / SDPA ratios underneath."""
    lines = [f"### {threads} thread{'s' if threads > 1 else ''}, {shape}",
             f"fp32 GEMM peak (torch.mm 2048²): {rates['gemm_gflops']:.1f} GFLOP/s; torch.tanh: "
             f"{rates['tanh_g_per_s']:.2f} G/s in cache (the bound), {rates['tanh_g_per_s_streaming']:.2f} G/s on "
             f"a 64 MiB tensor", "",
             "| score function | path | pass | time (ms) | bound (ms) | fraction of bound |",
             "|---|---|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.score} | {r.path} | {r.passes} | {r.time_s * 1e3:,.1f} | {r.bound_s * 1e3:,.1f} "
                     f"| {r.fraction:.0%} |")
    sdpa = next(r for r in rows if r.score == "scaled_dot")
    for r in rows:
        if r.score == "additive" and r.passes == "forward":
            lines.append(f"\nadditive ({r.path}) / SDPA, forward: measured {r.time_s / sdpa.time_s:.1f}x, "
                         f"at the limit {r.bound_s / sdpa.bound_s:.1f}x")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m attnbench.bench.roofline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    parser.add_argument("--batch", type=int, default=4, help="B (default 4)")
    parser.add_argument("--heads", type=int, default=4, help="H (default 4)")
    parser.add_argument("--length", type=int, default=512, help="n, queries = keys (default 512)")
    parser.add_argument("--head-dim", type=int, default=64, help="d = d_a (default 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per path; the minimum is kept")
    parser.add_argument("--clock", choices=CLOCKS, default="wall",
                        help="wall clock (default), or CPU time for the 1-thread table (a shared machine: see the module's doc)")
    parser.add_argument("--no-fallback", dest="fallback", action="store_false",
                        help="skip additive's blocked path (seconds per run at n = 512)")
    args = parser.parse_args(argv)
    for name in ("threads", "batch", "heads", "length", "head_dim", "repeats"):
        values = getattr(args, name)
        if any(v < 1 for v in (values if isinstance(values, list) else [values])):
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {values}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kernels = cpu_kernels.additive_kernels_for(torch.zeros(1))
    isa = kernels.additive_attention_isa() if kernels is not None else "not built"
    print(f"CPU: {cpu_name()}; torch {torch.__version__}; fused additive kernel: {isa}; float32; "
          f"minimum of {args.repeats} runs")
    shape = f"B={args.batch}, H={args.heads}, n={args.length}, d=d_a={args.head_dim}"
    try:
        for threads in args.threads:
            clock = args.clock if threads == 1 else "wall"
            set_clock(clock)
            rates, rows = measure(threads, args.batch, args.heads, args.length, args.head_dim, args.repeats,
                                  args.fallback)
            print()
            print(format_table(threads, f"{shape}, {clock} clock", rates, rows))
            sys.stdout.flush()
    finally:
        set_clock("wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
