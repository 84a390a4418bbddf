#!/usr/bin/env python
"""Benchmark the cost of the attention score functions: time, peak memory, FLOPs and each one's roofline bound.

For every score function, two code paths and a range of sizes, one attention call ``softmax(scores(q, k))·v``
on seeded random q, k, v of shape B×H×n×d:

* ``fast``  -- ``fn.attend(q, k, v)``: the score function's own fast path. A score function that does not
  override ``attend`` runs the same code as ``naive``; its ``fast`` rows say so in their ``note``.
* ``naive`` -- ``ScoreFunction.attend(fn, q, k, v)``: the definition, which materialises the B×H×n×n scores
  (and, for ``additive``, the B×H×n×n×d_a hidden tensor).
* baseline -- ``F.scaled_dot_product_attention(q, k, v, scale=1/√d)`` called directly: score
  ``sdpa_scaled_dot``, path ``sdpa``. All ratios are relative to it.

Each in mode ``fwd`` (forward under ``torch.no_grad()``) and ``fwd_bwd`` (forward plus the gradients with respect
to q, k, v and the score function's parameters). One row per score × path × n × d × mode × thread count; the
columns' units are in ``--help`` and, in full, in the ``notes`` of ``results.json`` (:data:`FLOP_NOTE`,
:data:`CPU_MEMORY_NOTE`, :data:`BOUND_NOTE`, :data:`RATIO_NOTE`). ``status``: ``ok`` | ``skipped_mem`` (the
estimate ``est_mem_bytes`` exceeds ``--max-mem-gb``) | ``oom`` | ``unsupported`` (a ``NotImplementedError``, e.g.
a kernel missing for the dtype) | ``error``; ``note`` says why. The exit status is 1 if any row is ``error``.

    attnbench bench attention --quick --no-wandb          # < 1 minute on 2 idle CPU cores
    attnbench bench attention --device cuda --dtype bfloat16 --scores dot,additive
    attnbench bench attention --grid full --lengths 128,512 --head-dims 32,64

Outputs go to ``--out`` (default ``outputs/bench/<timestamp>``): ``results.csv``, ``results.json`` (rows, fitted
exponents, rates, hardware info and the notes), ``time_vs_n.png``, ``memory_vs_n.png``, ``time_vs_d.png`` and
``wandb/``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import gc
import io
import json
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils import benchmark, flop_counter
from torch.utils.flop_counter import FlopCounterMode

from attnbench.attention import ScoreFunction, available, build_score_function
from attnbench.experiments import code_commit
from attnbench.paths import atomic_target, write_text_atomically
from attnbench.run.loggers import resolve_wandb_mode, start_wandb

BASELINE_SCORE = "sdpa_scaled_dot"
BASELINE_PATH = "sdpa"
PATHS = ("fast", "naive")
MODES = ("fwd", "fwd_bwd")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

DEFAULT_LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096)
DEFAULT_HEAD_DIMS = (16, 32, 64, 128, 256)
DEFAULT_BATCH, DEFAULT_HEADS = 4, 4
QUICK_LENGTHS = (64, 256, 1024)
QUICK_HEAD_DIMS = (64,)
# --quick keeps n up to 1024 but shrinks B·H: the naive additive hidden tensor is B·H·n²·d_a, 4 GiB at B=H=4.
QUICK_BATCH, QUICK_HEADS = 1, 2

CSV_COLUMNS = (
    "score", "path", "mode", "n", "d", "batch", "heads", "dtype", "device",
    "threads", "clock", "time_s", "time_iqr_s", "time_runs", "time_min_s", "peak_mem_bytes", "flops", "est_mem_bytes",
    "bound_s", "bound_fraction", "status", "note",
)

FLOP_NOTE = (
    "flops: torch.utils.flop_counter.FlopCounterMode counts matmul-type ops only (mm, bmm, addmm, baddbmm, "
    "conv, SDPA kernels; a multiply-add is 2 FLOPs). Softmax, tanh, norms and other elementwise work are not "
    "counted, so additive's B*H*n*n*d_a tanh work does not appear in its FLOPs; read its cost from time and "
    "memory. The CPU flash-SDPA kernels are counted with PyTorch's own SDPA formulas (sdpa_flop_count), "
    "which the stock counter registers only for the CUDA kernels."
)
CPU_MEMORY_NOTE = (
    "peak_mem_bytes (CPU): torch.profiler.profile(profile_memory=True); running sum of the CPU allocator's "
    "allocation/free events in time order, maximum over the call, relative to before the call. Inputs and "
    "parameters allocated before the call are not counted; outputs and gradients are."
)
CUDA_MEMORY_NOTE = (
    "peak_mem_bytes (CUDA): torch.cuda.max_memory_allocated() after reset_peak_memory_stats(), minus "
    "memory_allocated() before the call. Inputs and parameters are not counted; outputs and gradients are."
)
BOUND_NOTE = (
    "bound_s: seconds of the score function's unavoidable forward work (ScoreFunction.work) at this machine's "
    "rates measured in the same run at the same thread count (meta.rates): its FLOPs at the fp32 GEMM peak "
    "(torch.mm 2048x2048) plus each elementwise op (tanh for additive, sqrt for l2) at torch.<op>'s in-cache "
    "rate (256 KiB; meta.rates also has the 64 MiB streaming rate); fwd_bwd: 3x the FLOPs and 2x the "
    "elementwise ops. bound_fraction = bound_s / time_min_s (the fastest timing, least disturbed by other "
    "processes); float32 on CPU only."
)
RATIO_NOTE = (
    "ratio = value of the row / value of sdpa_scaled_dot (F.scaled_dot_product_attention called directly, "
    "scale=1/sqrt(d)) at the same n, d and mode; 1.0 = as cheap as SDPA."
)


# --------------------------------------------------------------------------------------------- config


@dataclasses.dataclass
class BenchConfig:
    """Everything one benchmark run needs (built from the command line by :func:`build_config`)."""

    scores: list[str]
    paths: list[str]
    modes: list[str]
    sizes: list[tuple[int, int]]  # (n, d) pairs, in run order
    at_n: int  # n of the d sweep
    at_d: int  # d of the n sweep
    batch: int
    heads: int
    device: torch.device
    dtype: torch.dtype
    min_run_time: float
    max_mem_bytes: int
    threads: list[int]  # each thread count measures every case, its rates first
    repeats: int  # at least this many timings per case
    seed: int
    out: Path
    wandb: bool
    quick: bool
    memory: bool = True  # one profiled call per case for peak memory and FLOPs
    clock: str = "wall"  # "cpu": 1-thread cases and rates on the process's CPU time (a shared machine)


def _int_list(text: str) -> list[int]:
    """Parse ``"64,128,256"`` into ``[64, 128, 256]`` (argparse type)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _str_list(text: str) -> list[str]:
    """Parse ``"dot,additive"`` into ``["dot", "additive"]`` (argparse type)."""
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--help`` explains units and ratios)."""
    parser = argparse.ArgumentParser(
        prog="attnbench bench attention",
        description=(
            "Time, peak memory and FLOPs of every attention score function: fast path (fn.attend) and\n"
            "naive path (the definition, materialising the n×n scores), forward-only and forward+backward,\n"
            "against F.scaled_dot_product_attention as the baseline (row score=sdpa_scaled_dot, path=sdpa)."
        ),
        epilog="""\
units (results.csv / results.json, one row per score × path × n × d × mode):
  time_s          seconds per call: median of torch.utils.benchmark.Timer.blocked_autorange
  peak_mem_bytes  bytes allocated during the call, peak, over what was allocated before it
                  (CUDA: max_memory_allocated; CPU: torch.profiler allocation/free events)
  flops           FLOPs of one call from torch.utils.flop_counter.FlopCounterMode; counts
                  matmul-type ops only, not softmax, tanh or other elementwise work, so
                  additive's B·H·n²·d_a tanh work is not in its FLOPs
  est_mem_bytes   the estimate used to skip sizes over --max-mem-gb (status skipped_mem)

ratio tables: (row's fwd+bwd value) / (sdpa_scaled_dot's fwd+bwd value at the same n, d);
  1.0 = as cheap as plain SDPA, 10 = ten times the time or memory.

sizes: by default every n of --lengths at d=--at-d, and every d of --head-dims at n=--at-n
  (not the full grid; --grid full runs every pair).

example: attnbench bench attention --quick --no-wandb
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--scores", type=_str_list, default=None,
                        help=f"comma-separated score functions (default: all registered: {','.join(available())})")
    parser.add_argument("--paths", type=_str_list, default=list(PATHS),
                        help="comma-separated subset of: fast, naive (default: both)")
    parser.add_argument("--modes", type=_str_list, default=list(MODES),
                        help="comma-separated subset of: fwd (inference, under no_grad), fwd_bwd (forward + "
                             "backward) (default: both)")
    parser.add_argument("--lengths", type=_int_list, default=None,
                        help=f"sequence lengths n (default: {','.join(map(str, DEFAULT_LENGTHS))}; "
                             f"--quick: {','.join(map(str, QUICK_LENGTHS))})")
    parser.add_argument("--head-dims", type=_int_list, default=None,
                        help=f"head dims d (default: {','.join(map(str, DEFAULT_HEAD_DIMS))}; "
                             f"--quick: {','.join(map(str, QUICK_HEAD_DIMS))})")
    parser.add_argument("--grid", choices=("sweep", "full"), default="sweep",
                        help="sweep (default): every n at d=--at-d plus every d at n=--at-n; full: every (n, d)")
    parser.add_argument("--at-d", type=int, default=64,
                        help="head dim of the n sweep; the closest value in --head-dims is used (default: 64)")
    parser.add_argument("--at-n", type=int, default=1024,
                        help="sequence length of the d sweep; the closest value in --lengths is used "
                             "(default: 1024)")
    parser.add_argument("--batch", type=int, default=None,
                        help=f"batch size B (default: {DEFAULT_BATCH}; --quick: {QUICK_BATCH})")
    parser.add_argument("--heads", type=int, default=None,
                        help=f"number of heads H (default: {DEFAULT_HEADS}; --quick: {QUICK_HEADS})")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="(default: cpu)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help="(default: float32)")
    parser.add_argument("--min-run-time", type=float, default=None,
                        help="seconds of timing per measurement, blocked_autorange's min_run_time "
                             "(default: 0.5; --quick: 0.05)")
    parser.add_argument("--max-mem-gb", type=float, default=None,
                        help="skip sizes whose estimated memory need exceeds this many GB of 1e9 bytes "
                             "(default: 70%% of available RAM on CPU, of free GPU memory on CUDA)")
    parser.add_argument("--threads", type=_int_list, default=None,
                        help="torch intra-op thread counts, comma-separated: every case runs at each, with the "
                             "rates of its bound measured at it (default: torch.get_num_threads())")
    parser.add_argument("--repeats", type=int, default=5,
                        help="at least this many timings per case (blocked_autorange's blocks, topped up with "
                             "single calls); the fraction of the bound and the fitted exponents use them "
                             "(default: 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of inputs and parameters (default: 0)")
    parser.add_argument("--out", type=Path, default=None, help="output dir (default: outputs/bench/<timestamp>)")
    parser.add_argument("--wandb", action=argparse.BooleanOptionalAction, default=True,
                        help="log to W&B project attnbench: online with credentials, else offline into "
                             "<out>/wandb (default: on)")
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                        help="one profiled call per case for peak memory and FLOPs (default: on; --no-memory "
                             "times only, for the exponent grid)")
    parser.add_argument("--clock", choices=CLOCKS, default="wall",
                        help="wall clock (default), or, for the 1-thread cases and their rates, the process's CPU "
                             "time: on a machine shared with other jobs a long call rarely gets its core for its "
                             "whole duration and a short one often does, so wall-clock fractions understate what "
                             "the code reaches; CPU time leaves out the waiting. More threads stay on the wall "
                             "clock (a thread that never got a core would count as no time)")
    parser.add_argument("--quick", action="store_true",
                        help=f"small, fast subset: n={','.join(map(str, QUICK_LENGTHS))}, d=64, B={QUICK_BATCH}, "
                             f"H={QUICK_HEADS}, short timing (under a minute on 2 idle CPU cores); explicit "
                             "options still win")
    return parser.parse_args(argv)


def closest(values: list[int], target: int) -> int:
    """The element of ``values`` closest to ``target`` (the smaller one on a tie)."""
    return min(values, key=lambda v: (abs(v - target), v))


def size_grid(lengths: list[int], head_dims: list[int], at_n: int, at_d: int, full: bool) -> list[tuple[int, int]]:
    """The (n, d) pairs to run, without duplicates.

    ``full``: every pair. Otherwise every n at d=``at_d`` followed by every d at
    n=``at_n`` (the pair they share is run once).
    """
    if full:
        pairs = [(n, d) for d in head_dims for n in lengths]
    else:
        pairs = [(n, at_d) for n in lengths] + [(at_n, d) for d in head_dims]
    return list(dict.fromkeys(pairs))


def available_memory_bytes(device: torch.device) -> int:
    """Free memory for the benchmark: ``MemAvailable`` of /proc/meminfo on CPU, free GPU memory on CUDA."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def build_config(args: argparse.Namespace) -> BenchConfig:
    """Resolve defaults (``--quick``, memory budget, output dir) and validate the command line.

    Raises:
        SystemExit: for an unknown score function, path or mode, or CUDA requested but absent.
    """
    registered = available()
    scores = args.scores or registered
    unknown = [s for s in scores if s not in registered]
    if unknown:
        sys.exit(f"unknown score function(s) {unknown}; choose from: {', '.join(registered)}")
    for name, given, valid in (("path", args.paths, PATHS), ("mode", args.modes, MODES)):
        bad = [x for x in given if x not in valid]
        if bad or not given:
            sys.exit(f"bad --{name}s {given}; choose from: {', '.join(valid)}")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda requested but torch.cuda.is_available() is False")

    lengths = args.lengths or list(QUICK_LENGTHS if args.quick else DEFAULT_LENGTHS)
    head_dims = args.head_dims or list(QUICK_HEAD_DIMS if args.quick else DEFAULT_HEAD_DIMS)
    at_n, at_d = closest(lengths, args.at_n), closest(head_dims, args.at_d)
    min_run_time = args.min_run_time if args.min_run_time is not None else (0.05 if args.quick else 0.5)
    if args.repeats < 1:
        sys.exit(f"--repeats must be >= 1, got {args.repeats}")
    if args.max_mem_gb is not None:
        max_mem = int(args.max_mem_gb * 1e9)
    else:
        max_mem = int(0.7 * available_memory_bytes(device))
    out = args.out or Path("outputs") / "bench" / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return BenchConfig(
        scores=list(scores),
        paths=list(args.paths),
        modes=list(args.modes),
        sizes=size_grid(lengths, head_dims, at_n, at_d, full=args.grid == "full"),
        at_n=at_n,
        at_d=at_d,
        batch=args.batch or (QUICK_BATCH if args.quick else DEFAULT_BATCH),
        heads=args.heads or (QUICK_HEADS if args.quick else DEFAULT_HEADS),
        device=device,
        dtype=DTYPES[args.dtype],
        min_run_time=min_run_time,
        max_mem_bytes=max_mem,
        threads=args.threads or [torch.get_num_threads()],
        repeats=args.repeats,
        seed=args.seed,
        out=Path(out),
        wandb=args.wandb,
        quick=args.quick,
        memory=args.memory,
        clock=args.clock,
    )


# ------------------------------------------------------------------------------------ what is measured


def overrides_attend(fn: ScoreFunction) -> bool:
    """True when the score function has its own fast ``attend`` (not the base class definition)."""
    return type(fn).attend is not ScoreFunction.attend


def estimate_memory_bytes(
    fn: ScoreFunction | None, path: str, mode: str, batch: int, heads: int, n: int, d: int, element_size: int
) -> int:
    """A-priori estimate of the bytes one call needs, used to skip sizes that cannot fit.

    Rough, and meant to be on the safe side for the definitions: any path is assumed to hold a few
    B·H·n·n score-sized tensors (scores, softmax weights and, with backward,
    their gradients: 2 forward-only, 4 with backward) plus B·H·n·d inputs,
    outputs and gradients. The definition (the naive path, and the fast path
    of a score function that does not override ``attend``) of a score function
    whose query rows materialise more than their scores
    (:meth:`~attnbench.attention.base.ScoreFunction.bytes_per_query`, e.g.
    ``additive``'s B·H·n·n·d_a hidden tensor) also holds that tensor: twice
    forward-only (pre-activation and activation), about three times with
    backward (saved tensors and gradients).
    """
    backward = mode == "fwd_bwd"
    vectors = batch * heads * n * d * element_size * (5 if backward else 2)
    score_matrix = batch * heads * n * n * element_size
    need = vectors + score_matrix * (4 if backward else 2)
    uses_definition = fn is not None and (path == "naive" or not overrides_attend(fn))
    if uses_definition:
        per_query = fn.bytes_per_query(batch, n, element_size)  # what one query row materialises
        if per_query > batch * heads * n * element_size:  # more than its row of scores
            need += per_query * n * (3 if backward else 2)
    return int(need)


def make_inputs(cfg: BenchConfig, n: int, d: int, requires_grad: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded random q, k, v of shape B×H×n×d (unit-variance components)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    shape = (cfg.batch, cfg.heads, n, d)
    q, k, v = (torch.randn(shape, generator=gen).to(cfg.device, cfg.dtype) for _ in range(3))
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))  # type: ignore[return-value]


def make_attention(
    score: str, path: str, cfg: BenchConfig, d: int
) -> tuple[Callable[[Tensor, Tensor, Tensor], Tensor], nn.Module | None]:
    """The function under test, ``(q, k, v) -> B×H×n×d``, and the module owning its parameters.

    ``sdpa_scaled_dot``/``sdpa``: ``F.scaled_dot_product_attention`` with
    scale 1/√d. Otherwise the registered score function (seeded parameters),
    via ``fn.attend`` (``fast``) or ``ScoreFunction.attend`` (``naive``).
    """
    if score == BASELINE_SCORE:
        scale = 1.0 / math.sqrt(d)
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=scale)), None
    torch.manual_seed(cfg.seed)
    fn = build_score_function(score, n_heads=cfg.heads, head_dim=d).to(cfg.device, cfg.dtype)
    if path == "fast":
        return (lambda q, k, v: fn.attend(q, k, v, key_padding_mask=None, dropout_p=0.0)), fn
    return (lambda q, k, v: ScoreFunction.attend(fn, q, k, v, key_padding_mask=None)), fn


def make_step(
    attention: Callable[[Tensor, Tensor, Tensor], Tensor], module: nn.Module | None, cfg: BenchConfig,
    n: int, d: int, mode: str,
) -> Callable[[], Any]:
    """A zero-argument callable doing one measured call.

    ``fwd``: the forward under ``torch.no_grad()``. ``fwd_bwd``: the forward on
    inputs with ``requires_grad`` and ``torch.autograd.grad`` of the output
    (against a fixed random upstream gradient) with respect to q, k, v and
    every parameter of the score function; gradients are returned, not
    accumulated, so repeated calls do identical work.
    """
    q, k, v = make_inputs(cfg, n, d, requires_grad=mode == "fwd_bwd")
    if mode == "fwd":
        def forward() -> Tensor:
            with torch.no_grad():
                return attention(q, k, v)
        return forward

    params = [p for p in module.parameters() if p.requires_grad] if module is not None else []
    wrt = [q, k, v, *params]
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(cfg.seed + 1)).to(cfg.device, cfg.dtype)

    def forward_backward() -> tuple[Tensor | None, ...]:
        out = attention(q, k, v)
        return torch.autograd.grad(out, wrt, grad_out, allow_unused=True)

    return forward_backward


def measure_time(step: Callable[[], Any], cfg: BenchConfig, threads: int) -> list[float]:
    """Seconds per call of ``step``: at least ``cfg.repeats`` timings.

    ``torch.utils.benchmark.Timer.blocked_autorange`` (``min_run_time``; each block's mean per call) with
    ``threads`` intra-op threads (its own default is 1; it synchronises CUDA itself), topped up with timed
    single calls when a slow call leaves fewer than ``cfg.repeats`` blocks.
    """
    timer = benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=threads,
                            timer=clock_for(cfg.clock, threads))
    times = [float(t) for t in timer.blocked_autorange(min_run_time=cfg.min_run_time).times]
    while len(times) < cfg.repeats:
        times.append(float(timer.timeit(1).mean))
    return times


def _allocation_events(nodes: list[Any]) -> list[Any]:
    """Every allocator event (allocation or free) in a profiler event tree, flattened."""
    from torch._C._profiler import _EventType

    found, stack = [], list(nodes)
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            found.append(node)
        stack.extend(node.children)
    return found


def _cpu_sdpa_flop_formulas() -> dict[Any, Callable[..., int]]:
    """FLOP formulas for the CPU flash-SDPA kernels, which the stock FlopCounterMode does not register.

    They reuse PyTorch's own ``sdpa_flop_count`` / ``sdpa_backward_flop_count``
    (the two matmuls of the forward, the four of the backward).
    """
    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., int]] = {}
    fwd_op = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    bwd_op = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    fwd_count = getattr(flop_counter, "sdpa_flop_count", None)
    bwd_count = getattr(flop_counter, "sdpa_backward_flop_count", None)
    if fwd_op is not None and fwd_count is not None:
        formulas[fwd_op] = lambda q, k, v, *args, out_shape=None, **kw: fwd_count(q, k, v)
    if bwd_op is not None and bwd_count is not None:
        formulas[bwd_op] = lambda g, q, k, v, *args, out_shape=None, **kw: bwd_count(g, q, k, v)
    return formulas


def measure_memory_and_flops(step: Callable[[], Any], device: torch.device) -> tuple[int, int]:
    """Peak memory (bytes, over what was allocated before the call: :data:`CUDA_MEMORY_NOTE`,
    :data:`CPU_MEMORY_NOTE`) and FLOPs (``FlopCounterMode`` in the same call: :data:`FLOP_NOTE`) of one call of
    ``step``."""
    counter = FlopCounterMode(display=False, custom_mapping=_cpu_sdpa_flop_formulas())
    if device.type == "cuda":
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with counter:
            result = step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak), int(counter.get_total_flops())

    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof, counter:
            result = step()
            del result
    events = [e for e in _allocation_events(prof.profiler.kineto_results.experimental_event_tree())
              if e.extra_fields.device.type == "cpu"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_time_ns):
        live += event.extra_fields.alloc_size
        peak = max(peak, live)
    return int(peak), int(counter.get_total_flops())


CLOCKS = ("wall", "cpu")


def clock_for(clock: str, threads: int) -> Callable[[], float]:
    """``time.process_time`` for ``clock="cpu"`` at 1 thread, else ``time.perf_counter`` (wall)."""
    return time.process_time if clock == "cpu" and threads == 1 else time.perf_counter


def _best_seconds(run: Callable[[], object], repeats: int, now: Callable[[], float] = time.perf_counter) -> float:
    """Minimum seconds of ``run()`` (on the clock ``now``) over ``repeats`` calls after one untimed call."""
    run()
    best = math.inf
    for _ in range(repeats):
        start = now()
        run()
        best = min(best, now() - start)
    return best


def gemm_peak_gflops(sizes: tuple[int, ...] = (2048,), repeats: int = 5,
                     now: Callable[[], float] = time.perf_counter) -> float:
    """The fp32 ``torch.mm`` rate at the current thread count, GFLOP/s: the best over square ``sizes`` (2·n³
    FLOPs a product) of ``repeats`` timings each, a timing holding about 2 GFLOP of products (at least one)."""
    best = 0.0
    for n in sizes:
        g = torch.Generator().manual_seed(0)
        a, b, out = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g), torch.empty(n, n)
        reps = max(1, int(2e9 // (2 * n**3)))

        def products() -> None:
            for _ in range(reps):
                torch.mm(a, b, out=out)

        best = max(best, reps * 2 * n**3 / _best_seconds(products, repeats, now) / 1e9)
    return best


def elementwise_rate(op: str, numel: int = 2**16, repeats: int = 5, calls: int = 64,
                     now: Callable[[], float] = time.perf_counter) -> float:
    """Rate of the vectorised ``torch.<op>`` on a contiguous float32 tensor of ``numel`` elements at the current
    thread count, G elements/s. The default 2¹⁶ elements (256 KiB in, 256 KiB out) stay in the L2 cache: the
    arithmetic rate, the bound of a kernel that keeps its operands in cache. A tensor far larger than the
    caches (``numel=2**24``, 64 MiB) measures memory bandwidth instead. ``calls`` calls are timed together, so
    a torch op's per-call overhead counts little. Inputs lie in [0, 4) (``sqrt`` is defined; ``tanh`` saturates
    no more than its pre-activations do)."""
    x = torch.rand(numel, generator=torch.Generator().manual_seed(0)) * 4
    out = torch.empty_like(x)
    fn = getattr(torch, op)

    def run() -> None:
        for _ in range(calls):
            fn(x, out=out)

    return calls * numel / _best_seconds(run, repeats, now) / 1e9


def measure_rates(ops: Iterable[str], repeats: int = 5, now: Callable[[], float] = time.perf_counter
                  ) -> dict[str, Any]:
    """The rates the bounds use, at the current thread count: ``gemm_gflops`` (:func:`gemm_peak_gflops`) and,
    per elementwise op, ``{"in_cache": G/s, "streaming": G/s}`` (:func:`elementwise_rate` on 256 KiB and on
    64 MiB); the bound uses the in-cache rate."""
    rates: dict[str, Any] = {"gemm_gflops": gemm_peak_gflops(repeats=repeats, now=now)}
    for op in sorted(set(ops)):
        rates[op] = {"in_cache": elementwise_rate(op, repeats=repeats, now=now),
                     "streaming": elementwise_rate(op, 2**24, repeats=max(2, repeats // 2), calls=1, now=now)}
    return rates


def case_work(score: str, cfg: BenchConfig, n: int, d: int) -> dict[str, int]:
    """The forward's unavoidable work (:meth:`~attnbench.attention.base.ScoreFunction.work`) of ``score``
    at B×H×n×d (the SDPA baseline: ``scaled_dot``'s)."""
    fn = build_score_function("scaled_dot" if score == BASELINE_SCORE else score, n_heads=cfg.heads, head_dim=d)
    return fn.work(cfg.batch, n, n, d)


def bound_seconds(work: dict[str, int], rates: dict[str, Any], backward: bool = False) -> float:
    """Seconds of ``work`` at its rates: FLOPs at the GEMM peak plus each elementwise op's count at its in-cache
    rate. ``backward``: forward + backward, 3× the FLOPs (the backward's matrix products are twice the
    forward's: dQ, dK from dS; dV, dP from dO) and 2× each elementwise op (recomputed, or its derivative, once
    per element).

    Raises:
        KeyError: an op in ``work`` without a measured rate.
    """
    seconds = work["flops"] * (3 if backward else 1) / (rates["gemm_gflops"] * 1e9)
    for op, count in work.items():
        if op != "flops":
            seconds += count * (2 if backward else 1) / (rates[op]["in_cache"] * 1e9)
    return seconds


def _is_oom(err: BaseException) -> bool:
    """True for an out-of-memory failure: ``torch.OutOfMemoryError`` (CUDA), ``MemoryError``, or the CPU
    allocator's ``RuntimeError`` ("can't allocate memory")."""
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def run_case(cfg: BenchConfig, score: str, path: str, n: int, d: int, mode: str, threads: int = 1,
             rates: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure one score × path × n × d × mode at ``threads`` threads and return its result row.

    First the timing (``blocked_autorange`` warms up before it measures), then
    one instrumented call for peak memory and FLOPs, and the bound of the score
    function's work (:meth:`~attnbench.attention.base.ScoreFunction.work`) at
    ``rates`` (:func:`measure_rates` at the same thread count; no bound without
    them). Sizes over the memory budget are skipped and an out-of-memory error
    is recorded as ``oom``; neither raises.
    """
    row: dict[str, Any] = dict(
        score=score, path=path, mode=mode, n=n, d=d, batch=cfg.batch, heads=cfg.heads,
        dtype=str(cfg.dtype).removeprefix("torch."), device=str(cfg.device), threads=threads,
        clock="cpu" if clock_for(cfg.clock, threads) is time.process_time else "wall", time_s=None,
        time_iqr_s=None, time_runs=None, time_min_s=None, times_s=None, peak_mem_bytes=None, flops=None,
        est_mem_bytes=None, work=None, bound_s=None, bound_fraction=None, status="ok", note="",
    )
    element_size = torch.empty((), dtype=cfg.dtype).element_size()
    try:
        attention, module = make_attention(score, path, cfg, d)
        fn = module if isinstance(module, ScoreFunction) else None
        if fn is not None and path == "fast" and not overrides_attend(fn):
            row["note"] = "no fast attend of its own: runs the same code as naive"
        row["est_mem_bytes"] = estimate_memory_bytes(fn, path, mode, cfg.batch, cfg.heads, n, d, element_size)
        if row["est_mem_bytes"] > cfg.max_mem_bytes:
            row["status"] = "skipped_mem"
            row["note"] = (f"estimated need {_fmt_gb(row['est_mem_bytes'])} > budget "
                           f"{_fmt_gb(cfg.max_mem_bytes)} (--max-mem-gb)")
            return row
        step = make_step(attention, module, cfg, n, d, mode)
        times = measure_time(step, cfg, threads)
        quartiles = torch.tensor(times, dtype=torch.float64).quantile(torch.tensor([0.25, 0.5, 0.75],
                                                                                   dtype=torch.float64))
        row.update(time_s=float(quartiles[1]), time_iqr_s=float(quartiles[2] - quartiles[0]),
                   time_runs=len(times), time_min_s=min(times), times_s=times)
        if cfg.memory:
            row["peak_mem_bytes"], row["flops"] = measure_memory_and_flops(step, cfg.device)
        row["work"] = case_work(score, cfg, n, d)
        if rates is not None:
            row["bound_s"] = bound_seconds(row["work"], rates, backward=mode == "fwd_bwd")
            row["bound_fraction"] = row["bound_s"] / row["time_min_s"]
    except Exception as err:  # noqa: BLE001 - one failing size must not stop the sweep
        if _is_oom(err):
            row["status"] = "oom"
        elif isinstance(err, NotImplementedError):  # e.g. a kernel missing for this dtype/device
            row["status"] = "unsupported"
        else:
            row["status"] = "error"
        row["note"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        row["time_s"] = row["time_iqr_s"] = row["time_runs"] = row["time_min_s"] = row["times_s"] = None
    finally:
        if cfg.device.type == "cuda":  # on CPU freed tensors go straight back; gc.collect() costs ~0.1 s
            gc.collect()
            torch.cuda.empty_cache()
    return row


def cases(cfg: BenchConfig) -> list[tuple[str, str, int, int, str]]:
    """Every (score, path, n, d, mode) to run: the baseline first at each size, then each score × path."""
    combos = [(BASELINE_SCORE, BASELINE_PATH)] + [(s, p) for s in cfg.scores for p in cfg.paths]
    return [(s, p, n, d, m) for n, d in cfg.sizes for m in cfg.modes for s, p in combos]


def run_benchmark(cfg: BenchConfig, console: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run every case at each thread count, printing one progress line per row; returns the rows and the
    rates of each thread count (``{"1": measure_rates(...), ...}``), measured just before its cases."""
    rows: list[dict[str, Any]] = []
    all_rates: dict[str, Any] = {}
    todo = [(t, *case) for t in cfg.threads for case in cases(cfg)]
    ops = {op for score in cfg.scores for op in case_work(score, cfg, 8, 8) if op != "flops"}
    threads_before = torch.get_num_threads()
    for i, (threads, score, path, n, d, mode) in enumerate(todo, 1):
        torch.set_num_threads(threads)
        if str(threads) not in all_rates:
            rates = measure_rates(ops, cfg.repeats, clock_for(cfg.clock, threads)) \
                if cfg.device.type == "cpu" and cfg.dtype == torch.float32 else None
            all_rates[str(threads)] = rates
            if rates is not None:
                console.print(f"{threads} thread(s): " + rates_line(rates), highlight=False)
        try:
            row = run_case(cfg, score, path, n, d, mode, threads, all_rates[str(threads)])
        finally:
            torch.set_num_threads(threads_before)
        rows.append(row)
        if row["status"] == "ok":
            detail = f"{row['time_s'] * 1e3:9.3f} ms"
            if row["flops"] is not None:
                detail += f"  {_fmt_bytes(row['peak_mem_bytes']):>10}  {row['flops'] / 1e6:10.1f} MFLOP"
        elif row["status"] == "skipped_mem":
            detail = (f"[yellow]skipped: {score} {path} at n={n}, d={d} would need "
                      f"{_fmt_gb(row['est_mem_bytes'])} > budget {_fmt_gb(cfg.max_mem_bytes)}[/]")
        else:
            detail = f"[red]{row['status']}: {row['note']}[/]"
        if row["bound_fraction"] is not None:
            detail += f"  {row['bound_fraction']:4.0%} of bound"
        console.print(f"[{i:3d}/{len(todo)}] t={threads} {score:>15} {path:>5} {mode:>7} n={n:<5d} d={d:<4d} "
                      f"{detail}", highlight=False)
    return rows, all_rates


def rates_line(rates: dict[str, Any]) -> str:
    """The rates in one line: GEMM peak, then each elementwise op in cache (the bound) and streaming."""
    return f"fp32 GEMM peak (torch.mm 2048²) {rates['gemm_gflops']:.1f} GFLOP/s" + "".join(
        f"; torch.{op} {r['in_cache']:.2f} G/s in cache (the bound), {r['streaming']:.2f} G/s on 64 MiB"
        for op, r in rates.items() if op != "gemm_gflops")


def fit_exponents(rows: list[dict[str, Any]], level: float = 0.95, top_sizes: int = 4) -> list[dict[str, Any]]:
    """Fitted exponents of time in n (at d = the n sweep's d) and in d (at the d sweep's n): for each score,
    path, mode and thread count with >= 3 sizes along an axis, the OLS slope of log time on log size over every
    timing of every size (``times_s``), with its ``level`` t-interval (``scipy.stats.linregress``). Sizes are
    the sweep's rows whose other dimension is the most common one (the fixed value of that sweep). Where an axis
    has more than ``top_sizes`` sizes, a second fit over its ``top_sizes`` largest (``top``: True) gives the
    growth once per-call overhead no longer counts.

    Returns:
        One dict per fit: score, path, mode, threads, axis ("n" or "d"), fixed (the other dimension's value),
        top, sizes, timings, exponent, ci_low, ci_high.
    """
    from collections import Counter

    from scipy import stats

    ok = [r for r in rows if r["status"] == "ok" and r.get("times_s")]
    fits = []
    for axis, other in (("n", "d"), ("d", "n")):
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for r in ok:
            groups.setdefault((r["score"], r["path"], r["mode"], r["threads"]), []).append(r)
        for (score, path, mode, threads), members in groups.items():
            fixed = Counter(r[other] for r in members).most_common(1)[0][0]
            line = sorted((r for r in members if r[other] == fixed), key=lambda r: r[axis])
            spans = [(line, False)] + ([(line[-top_sizes:], True)] if len(line) > top_sizes else [])
            for part, top in spans:
                if len(part) < 3:
                    continue
                xs = [math.log(r[axis]) for r in part for _ in r["times_s"]]
                ys = [math.log(t) for r in part for t in r["times_s"]]
                fit = stats.linregress(xs, ys)
                half = stats.t.ppf(0.5 + level / 2, len(xs) - 2) * fit.stderr
                fits.append(dict(score=score, path=path, mode=mode, threads=threads, axis=axis, fixed=fixed,
                                 top=top, sizes=[r[axis] for r in part], timings=len(xs), exponent=fit.slope,
                                 ci_low=fit.slope - half, ci_high=fit.slope + half))
    return fits


# ------------------------------------------------------------------------------------------- reporting


def _fmt_gb(num: float) -> str:
    """Bytes as GB (1e9 bytes, the unit of --max-mem-gb), three significant digits."""
    return f"{num / 1e9:.3g} GB"


def _fmt_bytes(num: float | None) -> str:
    """Bytes in binary units (B, KiB, MiB, GiB) for the console; ``-`` for a missing value."""
    if num is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num) < 1024 or unit == "GiB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1024
    return f"{num:.1f} GiB"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()`` or the machine type)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_info(device: torch.device) -> dict[str, Any]:
    """CPU model, GPU name, torch/python versions, thread counts and the code's commit (:func:`code_commit`)."""
    info = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
        "load_avg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "commit": code_commit(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def ratio_tables(rows: list[dict[str, Any]], cfg: BenchConfig, mode: str = "fwd_bwd") -> list[Any]:
    """Rich tables of time and peak-memory ratios to the sdpa_scaled_dot baseline, one column per (n, d)."""
    from rich.table import Table

    by_key = {(r["score"], r["path"], r["n"], r["d"], r["mode"]): r for r in rows}
    bases = [by_key.get((BASELINE_SCORE, BASELINE_PATH, n, d, mode)) for n, d in cfg.sizes]
    tables = []
    for metric, title, absolute in (
        ("time_s", "time", lambda x: f"{x * 1e3:.3g} ms"),
        ("peak_mem_bytes", "peak memory", _fmt_bytes),
    ):
        table = Table(title=f"{mode.replace('_', '+')} {title} / sdpa_scaled_dot (same n, d)")
        table.add_column("score / path", no_wrap=True)
        for n, d in cfg.sizes:
            table.add_column(f"n={n}\nd={d}", justify="right")
        table.add_row("sdpa (absolute)", *(absolute(b[metric]) if b and b["status"] == "ok" and b[metric] is not None
                                           else "-" for b in bases), style="bold")
        for score, path in [(s, p) for s in cfg.scores for p in cfg.paths]:
            cells = []
            for (n, d), base in zip(cfg.sizes, bases):
                row = by_key.get((score, path, n, d, mode))
                if row is None:
                    cells.append("")
                elif row["status"] == "skipped_mem":
                    cells.append(f"[yellow]skip ({_fmt_gb(row['est_mem_bytes'])})[/]")
                elif row["status"] != "ok":
                    cells.append(f"[red]{row['status']}[/]")
                elif row[metric] is None:  # not measured (--no-memory)
                    cells.append("-")
                elif base is None or base["status"] != "ok" or not base[metric]:
                    cells.append("?")
                else:
                    cells.append(f"{row[metric] / base[metric]:.2f}")
            table.add_row(f"{score} / {path}", *cells)
        tables.append(table)
    return tables


def plot_results(rows: list[dict[str, Any]], cfg: BenchConfig) -> list[Path]:
    """PNG plots (log-log): time vs n, peak memory vs n (both at d=at_d), time vs d (at n=at_n).

    One colour per score function; fast path solid, naive dashed, the SDPA
    baseline black dotted; left panel forward-only, right panel fwd+bwd.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {s: plt.get_cmap("tab10")(i % 10) for i, s in enumerate(cfg.scores)}
    styles = {"fast": "-", "naive": "--", BASELINE_PATH: ":"}
    combos = [(BASELINE_SCORE, BASELINE_PATH)] + [(s, p) for s in cfg.scores for p in cfg.paths]
    subtitle = f"B={cfg.batch}, H={cfg.heads}, {str(cfg.dtype).removeprefix('torch.')}, {cfg.device}"
    specs = [
        ("time_vs_n.png", "n", "d", cfg.at_d, "time_s", "time per call [s]"),
        ("memory_vs_n.png", "n", "d", cfg.at_d, "peak_mem_bytes", "peak memory [bytes]"),
        ("time_vs_d.png", "d", "n", cfg.at_n, "time_s", "time per call [s]"),
    ]
    paths = []
    for filename, x_key, fixed_key, fixed_value, metric, ylabel in specs:
        fig, axes = plt.subplots(1, len(cfg.modes), figsize=(6.5 * len(cfg.modes), 5), squeeze=False)
        for ax, mode in zip(axes[0], cfg.modes):
            for score, path in combos:
                points = sorted(
                    (r[x_key], r[metric]) for r in rows
                    if r["score"] == score and r["path"] == path and r["mode"] == mode
                    and r[fixed_key] == fixed_value and r["status"] == "ok" and r[metric]
                )
                if not points:
                    continue
                xs, ys = zip(*points)
                is_baseline = score == BASELINE_SCORE
                ax.plot(xs, ys, linestyle=styles[path], marker="o", markersize=3,
                        color="black" if is_baseline else colours[score],
                        linewidth=2.2 if is_baseline else 1.4, zorder=3 if is_baseline else 2,
                        label="sdpa_scaled_dot (baseline)" if is_baseline else f"{score} {path}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(x_key)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{mode.replace('_', '+')}, {fixed_key}={fixed_value} ({subtitle})", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        handles, labels = axes[0][0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.85, 0.5), fontsize=8)
        fig.tight_layout(rect=(0, 0, 0.85, 1))
        target = cfg.out / filename
        with atomic_target(target) as tmp:
            fig.savefig(tmp, dpi=110)
        plt.close(fig)
        paths.append(target)
    return paths


def write_results(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path,
                  exponents: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    """``results.csv`` (one row per case, empty cells for missing values) and ``results.json`` (meta, rows and
    the fitted exponents), each written atomically."""
    csv_path, json_path = out / "results.csv", out / "results.json"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(CSV_COLUMNS))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row[k] is None else row[k]) for k in CSV_COLUMNS})
    write_text_atomically(csv_path, buffer.getvalue())
    write_text_atomically(json_path, json.dumps({"meta": meta, "rows": rows, "exponents": exponents or []}, indent=2))
    return csv_path, json_path


def log_to_wandb(rows: list[dict[str, Any]], pngs: list[Path], meta: dict[str, Any], cfg: BenchConfig,
                 console: Any) -> None:
    """Log the rows as a ``wandb.Table`` and the plots as ``wandb.Image`` (project attnbench, job_type bench).

    Online only with credentials (and ``WANDB_MODE`` not ``offline``/``disabled``) and a reachable server,
    otherwise offline into ``<out>/wandb``; never prompts (:func:`attnbench.run.loggers.start_wandb`). An online
    start that fails falls back to offline; any other W&B failure only prints a warning.
    """
    if resolve_wandb_mode("auto") == "disabled":
        console.print("W&B disabled (WANDB_MODE=disabled).", highlight=False)
        return
    try:
        import wandb

        run = start_wandb(lambda run_mode: wandb.init(
            project="attnbench", job_type="bench", name=f"bench-{cfg.out.name}", dir=str(cfg.out),
            mode=run_mode, config={**meta["config"], "hardware": meta["hardware"]},
            settings=wandb.Settings(console="off", silent=True, init_timeout=60),
        ), "auto", cfg.out / "wandb", without=f"the results are in {cfg.out} only")
        if run is None:
            return
        table = wandb.Table(columns=list(CSV_COLUMNS),
                            data=[[row[c] for c in CSV_COLUMNS] for row in rows])
        run.log({"bench/results": table, **{f"bench/{p.stem}": wandb.Image(str(p)) for p in pngs}})
        run.summary["bench/notes"] = meta["notes"]
        run_dir = Path(run.dir).parent  # run.dir is the run's files/ folder
        url = run.url if run.settings.mode == "online" else None
        run.finish()
        if url is None:
            console.print(f"W&B offline run: {run_dir}  (upload: wandb sync {run_dir})", highlight=False)
        else:
            console.print(f"W&B run: {url}", highlight=False)
    except Exception as err:  # noqa: BLE001 - W&B must never fail the benchmark
        console.print(f"[yellow]warning: W&B logging failed ({type(err).__name__}: {err}); "
                      f"results are in {cfg.out}[/]")
        try:
            import wandb

            wandb.finish(exit_code=1)
        except Exception:  # noqa: BLE001
            pass


def main(argv: list[str] | None = None) -> int:
    """Measure, write, plot, print and log; returns 0, or 1 if any case ended in ``error``."""
    from rich.console import Console

    # Wide enough for the ratio tables when the output is a pipe or a file (rich assumes 80 columns there).
    console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)
    cfg = build_config(parse_args(argv))
    cfg.out.mkdir(parents=True, exist_ok=True)
    hardware = hardware_info(cfg.device)
    console.print(
        f"[bold]attnbench attention cost benchmark[/]  torch {hardware['torch']}  device {cfg.device}"
        + (f" ({hardware['gpu']})" if "gpu" in hardware else "")
        + f"  CPU {hardware['cpu']} ({hardware['cpu_count']} logical cores, {','.join(map(str, cfg.threads))} torch threads)",
        highlight=False,
    )
    console.print(
        f"B={cfg.batch} H={cfg.heads} dtype={str(cfg.dtype).removeprefix('torch.')}  sizes (n, d): {cfg.sizes}  "
        f"memory budget {_fmt_gb(cfg.max_mem_bytes)}  min_run_time {cfg.min_run_time}s  out {cfg.out}",
        highlight=False,
    )

    load = hardware["load_avg_1min"]
    if cfg.device.type == "cpu" and load is not None and load >= 0.5 and load + max(cfg.threads) > (os.cpu_count() or 1):
        console.print(
            f"[yellow]warning: the CPUs are busy (1-min load {load:.1f} on {os.cpu_count()} cores, "
            f"{max(cfg.threads)} torch thread(s) wanted); CPU timings will be inflated and noisy, worst when threads "
            f"wait on a descheduled sibling. Prefer an idle machine, or fewer --threads.[/]", highlight=False,
        )

    rows, rates = run_benchmark(cfg, console)
    exponents = fit_exponents(rows)

    notes = [
        "time_s: median seconds per call (torch.utils.benchmark.Timer.blocked_autorange); fwd = forward under "
        "torch.no_grad(); fwd_bwd = forward + torch.autograd.grad w.r.t. q, k, v and the score function's "
        "parameters.",
        CUDA_MEMORY_NOTE if cfg.device.type == "cuda" else CPU_MEMORY_NOTE,
        FLOP_NOTE,
        "est_mem_bytes: rough a-priori estimate used to skip sizes over the memory budget (status "
        "skipped_mem); see estimate_memory_bytes in attnbench bench attention.",
        "path=fast calls fn.attend; path=naive calls ScoreFunction.attend (materialises the n×n scores); "
        "a score function without its own attend runs the same code on both paths.",
        RATIO_NOTE,
        BOUND_NOTE,
    ]
    config = {**dataclasses.asdict(cfg), "device": str(cfg.device), "dtype": str(cfg.dtype).removeprefix("torch."),
              "out": str(cfg.out), "sizes": [list(s) for s in cfg.sizes]}
    meta = {"config": config, "hardware": hardware, "notes": notes, "rates": rates,
            "created": dt.datetime.now().isoformat(timespec="seconds"), "command": sys.argv}
    csv_path, json_path = write_results(rows, meta, cfg.out, exponents)
    pngs = plot_results([r for r in rows if r["threads"] == max(cfg.threads)], cfg)

    for threads in cfg.threads:
        mine = [r for r in rows if r["threads"] == threads]
        for table in ratio_tables(mine, cfg, "fwd_bwd" if "fwd_bwd" in cfg.modes else "fwd"):
            table.title = f"{table.title}, {threads} thread(s)"
            console.print(table)
    for note in (RATIO_NOTE, *notes[1:3]):
        console.print(f"[dim]{note}[/]", highlight=False)
    skipped = [r for r in rows if r["status"] != "ok"]
    if skipped:
        console.print(f"{len(skipped)} of {len(rows)} rows not measured "
                      "(status skipped_mem/oom/unsupported/error; see their note).")
    if cfg.wandb:
        log_to_wandb(rows, pngs, meta, cfg, console)
    console.print(f"Results: {csv_path}, {json_path}, plots: {', '.join(p.name for p in pngs)}", highlight=False)
    return 1 if any(r["status"] == "error" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
