#!/usr/bin/env python
"""Inference cost of one attention call at short lengths, as the model makes it: ratios to ``scaled_dot``.

The shape of an evaluation batch (default B=256, n=48, padded, ``model=small``'s
d_model and n_heads). q, k, v come from ``MultiHeadAttention.project`` (strided
views of one projection, exactly what ``fn.attend`` receives in the model), the
padding mask from random lengths in [1, n] (one full-length row). Each score
function's ``fn.attend`` runs under ``torch.no_grad()``; calls are interleaved
over ``--rounds`` rounds of ``--number`` calls and the fastest round counts.
Times are CPU time of the process (``time.process_time``), which on a shared
machine is less disturbed than wall time by other processes; with one thread it
equals the wall time of an undisturbed run.

``--malloc fixed`` (the default) fixes glibc's mmap and trim thresholds before anything is allocated
(``mallopt(M_MMAP_THRESHOLD, 64 MiB)``, ``mallopt(M_TRIM_THRESHOLD, 1 GiB)``; see ``mallopt(3)``): with glibc's
dynamic thresholds a process may return each freed multi-MiB block to the OS and fault fresh pages in on every
call, which makes the ratios vary from process to process (docs/cost.md). Elsewhere than glibc it does nothing.

    taskset -c 1 attnbench bench short --threads 1
    taskset -c 1 attnbench bench short --threads 1 --malloc default   # glibc as it comes
    attnbench bench short --scores scaled_dot,euclidean,cosine,dot,general --contiguous
    taskset -c 1 attnbench bench short --threads 1 --eager   # also without the fused CPU kernels

``cosine`` and ``euclidean`` run their inference through the fused CPU kernels of
:mod:`attnbench.attention.cpu_kernels` (the header says whether they were built); ``--eager`` adds a row with
them turned off, timed in the same interleaved rounds.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import time
from unittest import mock

import torch
from omegaconf import OmegaConf

from attnbench.attention import MultiHeadAttention, cpu_kernels
from attnbench.config import config_dir

CONF = config_dir()  # the installed package's configs (attnbench.conf)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)


def fix_glibc_malloc(mmap_threshold: int = 64 << 20, trim_threshold: int = 1 << 30) -> str:
    """Fix glibc's mmap threshold (bytes; blocks above it get their own mmap) and trim threshold (bytes of free
    heap top kept before returning memory to the OS), which glibc otherwise adjusts as a process runs.
    Returns what was done, for the report header."""
    if platform.libc_ver()[0] != "glibc":
        return "malloc as it comes (not glibc)"
    libc = ctypes.CDLL("libc.so.6")
    ok = libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1 and libc.mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1
    return (f"glibc malloc thresholds fixed (mmap {mmap_threshold >> 20} MiB, trim {trim_threshold >> 20} MiB)"
            if ok else "glibc mallopt refused the thresholds: malloc as it comes")


def time_calls(calls: dict, rounds: int, number: int) -> dict[str, float]:
    """Seconds per call of each zero-argument callable: the fastest of ``rounds`` interleaved rounds."""
    best = {name: float("inf") for name in calls}
    with torch.no_grad():
        for call in calls.values():
            call()
        for _ in range(rounds):
            for name, call in calls.items():
                t0 = time.process_time()
                for _ in range(number):
                    call()
                best[name] = min(best[name], (time.process_time() - t0) / number)
    return best


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scores", default="scaled_dot,euclidean,cosine", help="first = reference")
    parser.add_argument("--model", default="small", help="conf/model/<name>.yaml for d_model, n_heads, head_dim")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--contiguous", action="store_true", help="also time contiguous copies of q, k, v")
    parser.add_argument("--eager", action="store_true",
                        help="also time the views with the fused CPU kernels off (the eager formulas)")
    parser.add_argument("--malloc", choices=("fixed", "default"), default="fixed",
                        help="fixed: glibc's mmap/trim thresholds fixed at start (stable ratios); default: as glibc "
                             "comes, thresholds adjusted while the process runs")
    args = parser.parse_args(argv)
    malloc_note = fix_glibc_malloc() if args.malloc == "fixed" else "malloc as it comes"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    m = OmegaConf.load(CONF / "model" / f"{args.model}.yaml")
    names = [n.strip() for n in args.scores.split(",") if n.strip()]
    gen = torch.Generator().manual_seed(0)
    b, n = args.batch, args.length
    x = torch.randn(b, n, m.d_model, generator=gen)
    lengths = torch.randint(1, n + 1, (b,), generator=gen)
    lengths[0] = n
    mask = torch.arange(n)[None, :] >= lengths[:, None]
    layouts = ["views"] + (["contiguous"] if args.contiguous else []) + (["views, eager"] if args.eager else [])
    kernels_note = ("fused CPU kernels built" if cpu_kernels.kernels_for(x[None]) is not None
                    else "fused CPU kernels not used")

    def call(fn, q, k, v, eager):
        if not eager:
            return lambda: fn.attend(q, k, v, key_padding_mask=mask)

        def eager_call():
            with mock.patch.object(cpu_kernels, "kernels_for", lambda *tensors: None):
                return fn.attend(q, k, v, key_padding_mask=mask)
        return eager_call

    calls = {}
    for name in names:
        torch.manual_seed(0)
        mha = MultiHeadAttention(m.d_model, m.n_heads, name, head_dim=m.get("head_dim")).eval()
        with torch.no_grad():
            qkv = mha.project(x)
        for layout in layouts:
            q, k, v = (t.contiguous() for t in qkv) if layout == "contiguous" else qkv
            calls[(name, layout)] = call(mha.score_fn, q, k, v, eager=layout == "views, eager")
    best = time_calls(calls, args.rounds, args.number)
    print(f"one attention call, inference: B={b}, n={n}, d_model={m.d_model}, {m.n_heads} heads, padded "
          f"({float((~mask).float().mean()):.0%} real tokens); {torch.get_num_threads()} threads, best of "
          f"{args.rounds} interleaved rounds of {args.number} calls (process CPU time), torch {torch.__version__}; "
          f"{malloc_note}; {kernels_note}")
    out = {}
    for layout in layouts:
        ref = best[(names[0], layout)]
        row = "   ".join(f"{name} {best[(name, layout)] * 1e3:.2f} ms ({best[(name, layout)] / ref:.2f}x)"
                         for name in names)
        print(f"  q, k, v {layout:<12}: {row}")
        out.update({f"{name}/{layout}": best[(name, layout)] / ref for name in names})
    return out


if __name__ == "__main__":
    main()
