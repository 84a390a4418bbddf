"""Training throughput of attnbench vs a bare PyTorch loop over ``nn.TransformerEncoder``.

Both run the same model size on the same SST-2 batches (same order, same
dynamic padding) for the same number of optimizer steps:

* **attnbench**: ``TextClassifierModule`` with ``attention=scaled_dot`` trained by a
  Lightning ``Trainer`` with the callbacks and CSV logger of a normal run
  (``ThroughputMonitor``, ``LearningRateMonitor``, per-step ``train/loss``).
* **bare**: token + position embeddings, ``nn.TransformerEncoder`` (pre-LN,
  GELU, ``batch_first``), masked mean pooling, linear head; AdamW, gradient
  clipping, a plain ``for`` loop.

Reported: non-padding tokens per second over the steps after ``--warmup``
(seconds of wall time, data loading included), and the ratio attnbench / bare.
Each side runs ``--repeats`` times, alternating, and the best run counts.

``--batching random,length_grouped`` compares batching modes (``data.batching``)
inside attnbench's training step, interleaved, and reports for each in the
same run: tokens/s, useful vs padded tokens, FLOPs per step (forward +
backward, ``torch.utils.flop_counter.FlopCounterMode``) on the padded batches
and on the same examples without padding (useful FLOPs), the machine's fp32
GEMM peak measured at the same thread count, and model FLOP utilisation
(MFU = useful FLOP/s / peak; also on padded FLOPs), plus the tokens/s ratio to
the first mode.

``--variants "optim.impl=for_loop;optim.impl=fused"`` compares sets of Hydra
overrides (``;`` between variants, ``,``-free spaces between a variant's
overrides) inside attnbench's training step, interleaved, on the same
batches: tokens/s, its ratio to the first variant, and the wall time of the
first optimizer step (for ``compile.enabled=true`` it holds the compilation:
the compile time is its excess over the eager variant's first step), plus the
number of graphs ``torch.compile`` built.

``--attention scaled_dot,euclidean,cosine`` instead compares score functions
inside attnbench's training step (same batches, runs interleaved, best of
``--repeats``) and prints each one's tokens/s and its ratio to the first.

    attnbench bench train                 # model=small, 300 steps
    attnbench bench train --steps 100 --model tiny
    attnbench bench train --attention scaled_dot,euclidean,cosine --repeats 3
    attnbench bench train --diagnostics --repeats 3   # overhead of the attention diagnostics
    taskset -c 1 attnbench bench train --threads 1 --batching random,length_grouped
    taskset -c 1 attnbench bench train --threads 1 --variants "compile.enabled=false;compile.enabled=true"
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attnbench.bench.attention import code_commit, cpu_model, gemm_peak_gflops
from attnbench.callbacks.throughput import Throughput, batch_size, num_tokens
from attnbench.config import config_dir
from attnbench.models.module import TextClassifierModule

CONF = str(config_dir())  # the installed package's configs (attnbench.conf)
GEMM_SIZES = (512, 1024, 2048)  # the square torch.mm sizes whose best rate is the GEMM peak MFU divides by


class BareClassifier(nn.Module):
    """The same classifier written on ``nn.TransformerEncoder`` (the PyTorch baseline)."""

    def __init__(self, vocab_size: int, num_classes: int, max_length: int, d_model: int, n_heads: int,
                 n_layers: int, d_ff: int, dropout: float, pad_id: int) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.position_embedding = nn.Embedding(max_length, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, input_ids: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(input_ids) + self.position_embedding.weight[: input_ids.shape[1]]
        x = self.encoder(self.dropout(x), src_key_padding_mask=padding_mask)
        keep = (~padding_mask).unsqueeze(-1).to(x.dtype)
        return self.head(self.dropout((x * keep).sum(1) / keep.sum(1).clamp_min(1.0)))


def bare_loop(model: nn.Module, loader, steps: int, warmup: int, lr: float) -> float:
    """Train ``steps`` steps; returns non-padding tokens/s over the steps after ``warmup``."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    model.train()
    tokens, t0, step = 0, 0.0, 0
    while step < steps:
        for batch in loader:
            if step == warmup:
                t0 = time.perf_counter()
            loss = F.cross_entropy(model(batch["input_ids"], batch["padding_mask"]), batch["labels"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step >= warmup:
                tokens += num_tokens(batch)
            step += 1
            if step >= steps:
                break
    return tokens / (time.perf_counter() - t0)


def step_flops(module: nn.Module, input_ids: torch.Tensor, padding_mask: torch.Tensor,
               labels: torch.Tensor) -> int:
    """FLOPs of one training step's forward + backward (cross-entropy loss) on one batch (``FlopCounterMode``:
    matmuls, convolutions and SDPA; elementwise work is not counted). Gradients are discarded."""
    counter = FlopCounterMode(display=False)
    with counter:
        loss = F.cross_entropy(module(input_ids, padding_mask), labels)
        loss.backward()
    module.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def flops_of_batches(module: nn.Module, batches: list[dict]) -> dict[str, float]:
    """Padded and useful FLOPs of ``batches`` (forward + backward), summed, and their token counts.

    Padded: each batch as collated (B × its widest sequence). Useful: the same
    examples without padding, i.e. each example at its own length L, from
    ``step_flops`` of one unpadded sequence of length L (counted FLOPs are
    linear in the batch size, so a batch of B sequences of length L costs
    B × that).
    """
    @lru_cache(maxsize=None)
    def per_sequence(length: int) -> int:
        ids = torch.ones(1, length, dtype=torch.long)
        return step_flops(module, ids, torch.zeros(1, length, dtype=torch.bool), torch.zeros(1, dtype=torch.long))

    padded = useful = 0
    tokens = positions = 0
    for batch in batches:
        b, width = batch["input_ids"].shape
        padded += b * per_sequence(width)
        useful += sum(per_sequence(int(n)) for n in (~batch["padding_mask"]).sum(-1).tolist())
        tokens += int(batch["num_tokens"])
        positions += b * width
    first = batches[0]
    direct = step_flops(module, first["input_ids"], first["padding_mask"], first["labels"])
    assert direct == first["input_ids"].shape[0] * per_sequence(first["input_ids"].shape[1]), "FLOPs not linear in B"
    return {"padded_flops": float(padded), "useful_flops": float(useful), "tokens": float(tokens),
            "positions": float(positions)}


def _datamodule(cfg):
    """The config's data module, prepared (tokenized, or read from the cache) and set up for fitting."""
    dm = instantiate(cfg.data, seed=cfg.seed)  # the epoch order is a function of (seed, epoch)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def module_kwargs(cfg) -> dict:
    """The ``model``, ``attention`` and ``optim`` arguments of ``TextClassifierModule`` (as ``train`` builds it)."""
    return {"model": cfg.model, "attention": cfg.attention, "optim": cfg.optim, "compile": cfg.get("compile")}


class FirstStepTimer(pl.Callback):
    """Wall seconds of the first training step (batch start to batch end): with ``torch.compile`` it holds the
    tracing and compilation of the forward and backward graphs."""

    def __init__(self) -> None:
        self.seconds: float | None = None
        self._t0 = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.seconds is None:
            self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.seconds is None:
            self.seconds = time.perf_counter() - self._t0


def lightning_run(cfg, dm, steps: int, warmup: int, log_dir: str, attention: dict | None = None,
                  extra_callbacks: tuple[pl.Callback, ...] = ()) -> float:
    """attnbench's training step under a Lightning Trainer; returns tokens/s from ``Throughput``."""
    kwargs = module_kwargs(cfg)
    if attention is not None:
        kwargs["attention"] = attention
    module = TextClassifierModule(vocab_size=dm.vocab_size, num_classes=dm.num_classes, max_length=dm.max_length,
                                  pad_id=dm.pad_id, **kwargs)
    stats = Throughput(warmup_steps=warmup)
    callbacks = [
        stats,
        pl.callbacks.ThroughputMonitor(batch_size_fn=batch_size, length_fn=num_tokens, window_size=50, separator="/"),
        pl.callbacks.LearningRateMonitor(logging_interval="step"),
        *extra_callbacks,
    ]
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, limit_val_batches=0, num_sanity_val_steps=0,
        gradient_clip_val=1.0, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        logger=pl.loggers.CSVLogger(log_dir, name="bench_train"), callbacks=callbacks, log_every_n_steps=50,
    )
    trainer.fit(module, datamodule=dm)  # validation is off (limit_val_batches=0)
    return stats.summary["train/tokens_per_sec"]


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="small", help="conf/model/<name>.yaml (default: small)")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run (default: 300)")
    parser.add_argument("--warmup", type=int, default=30, help="steps excluded from the rate (default: 30)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, best counts (default: 2)")
    parser.add_argument("--attention", default=None,
                        help="comma-separated score functions to compare inside attnbench (first = reference)")
    parser.add_argument("--batching", default=None,
                        help="comma-separated data.batching modes to compare inside attnbench, with FLOPs and MFU "
                             "(first = reference), e.g. random,length_grouped")
    parser.add_argument("--variants", default=None,
                        help="';'-separated sets of Hydra overrides to compare inside attnbench (first = reference), "
                             "e.g. \"optim.impl=for_loop;optim.impl=fused\" or "
                             "\"compile.enabled=false;compile.enabled=true\"")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's choice); pin cores with taskset")
    parser.add_argument("--diagnostics", action="store_true",
                        help="measure the attention-diagnostics callback's overhead (with vs without, interleaved)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the figures (and every run's, for --attention) with the machine, threads and "
                             "torch version to this JSON file")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. data.batch_size=32")
    args = parser.parse_args(argv)
    result = _dispatch(args)
    if args.json is not None:
        write_json(args, result)
    return result


def write_json(args: argparse.Namespace, result: dict) -> None:
    """``args.json``: ``{"meta": {command, commit, created, threads, torch, machine, processor, unit}, "result":
    result}`` (commit: :func:`code_commit`; created: local ISO time the result was written; tokens/s are
    non-padding tokens per second of wall time); written whole or not at all."""
    import datetime as dt
    import json
    import platform
    import sys

    from attnbench.paths import write_text_atomically

    meta = {"command": " ".join(["attnbench bench train", *sys.argv[1:]]), "commit": code_commit(),
            "created": dt.datetime.now().isoformat(timespec="seconds"), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "machine": platform.machine(), "processor": cpu_model(),
            "cpu_count": os.cpu_count(), "unit": "train tokens/s (non-padding tokens per second of wall time)"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.json, json.dumps({"meta": meta, "result": result}, indent=1, default=float) + "\n")


def _dispatch(args: argparse.Namespace) -> dict:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.batching:
        return compare_batching(args)
    if args.variants:
        return compare_variants(args)
    if args.attention:
        return compare_attention(args)
    if args.diagnostics:
        return diagnostics_overhead(args)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("train", overrides=["attention=scaled_dot", f"model={args.model}", *args.overrides])
    dm = _datamodule(cfg)
    m = cfg.model
    results: dict[str, list[float]] = {"attnbench": [], "bare": []}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(args.repeats):
            pl.seed_everything(cfg.seed, workers=True)
            results["attnbench"].append(lightning_run(cfg, dm, args.steps, args.warmup, log_dir))
            pl.seed_everything(cfg.seed, workers=True)
            bare = BareClassifier(dm.vocab_size, dm.num_classes, dm.max_length, m.d_model, m.n_heads, m.n_layers,
                                  m.d_ff, m.dropout, dm.pad_id)
            results["bare"].append(bare_loop(bare, dm.train_dataloader(), args.steps, args.warmup, cfg.optim.lr))
    best = {k: max(v) for k, v in results.items()}
    ratio = best["attnbench"] / best["bare"]
    print(f"\nmodel={args.model} ({m.n_layers} layers, d_model={m.d_model}, {m.n_heads} heads), "
          f"data={cfg.data.name}, batch={cfg.data.batch_size}, {args.steps} steps ({args.warmup} warm-up), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for side in ("attnbench", "bare"):
        runs = ", ".join(f"{x:,.0f}" for x in results[side])
        print(f"  {side:<10} train tokens/s: {best[side]:>10,.0f}   (runs: {runs})")
    print(f"  ratio attnbench / bare: {ratio:.3f}")
    return {**best, "ratio": ratio}


def batching_row(rate: float, flops: dict[str, float], n_batches: int, peak: float) -> dict[str, float]:
    """One row of ``--batching``: the per-step figures and MFU from a measured rate and the timed batches' counts.

    ``rate``: non-padding tokens per second (best run); ``flops``: :func:`flops_of_batches` over the ``n_batches``
    timed batches (``tokens``, ``positions``, ``useful_flops``, ``padded_flops``, summed over those batches);
    ``peak``: FLOP/s that MFU divides by. Steps/s = rate / (tokens per step), tokens per step = tokens / n_batches;
    step_ms = 1000 / steps/s; useful FLOP/s = useful FLOPs per step x steps/s; MFU = FLOP/s / peak (PaLM, Chowdhery
    et al. 2022, app. B). Raises ``ValueError`` on no batches or no tokens.
    """
    if n_batches <= 0 or flops["tokens"] <= 0:
        raise ValueError("bench_train --batching: no timed batches (raise --steps above --warmup)")
    steps_per_sec = rate / (flops["tokens"] / n_batches)
    useful_per_step = flops["useful_flops"] / n_batches
    padded_per_step = flops["padded_flops"] / n_batches
    useful_rate = useful_per_step * steps_per_sec
    return {"tokens_per_sec": rate, "useful_frac": flops["tokens"] / flops["positions"],
            "padded_flops_per_step": padded_per_step, "useful_flops_per_step": useful_per_step,
            "step_ms": 1e3 / steps_per_sec, "useful_flops_per_sec": useful_rate,
            "mfu_useful": useful_rate / peak, "peak_flops_per_sec": peak,
            "mfu_padded": padded_per_step * steps_per_sec / peak}


def compare_batching(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Tokens/s, FLOPs per step, padding and MFU of several ``data.batching`` modes, interleaved, in one run."""
    names = [n.strip() for n in args.batching.split(",") if n.strip()]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfgs = {n: compose("train", overrides=["attention=scaled_dot", f"model={args.model}", f"data.batching={n}",
                                               *args.overrides]) for n in names}
    first = cfgs[names[0]]
    dms = {n: _datamodule(cfgs[n]) for n in names}
    threads = torch.get_num_threads()
    peak = gemm_peak_gflops(GEMM_SIZES) * 1e9
    rates: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(args.repeats):
            for n in names:
                pl.seed_everything(first.seed, workers=True)
                rates[n].append(lightning_run(cfgs[n], dms[n], args.steps, args.warmup, log_dir))
    peak_after = gemm_peak_gflops(GEMM_SIZES) * 1e9
    peak_used = max(peak, peak_after)  # on a shared machine the less disturbed measurement is the closer one
    out: dict[str, dict[str, float]] = {}
    for n in names:
        dm = dms[n]
        pl.seed_everything(first.seed, workers=True)  # the batches the timed steps saw (epoch 0, same seed)
        batches = [b for b, _ in zip(dm.train_dataloader(), range(args.steps))][args.warmup:]
        module = TextClassifierModule(vocab_size=dm.vocab_size, num_classes=dm.num_classes,
                                      max_length=dm.max_length, pad_id=dm.pad_id, **module_kwargs(cfgs[n]))
        f = flops_of_batches(module.train(), batches)
        out[n] = batching_row(max(rates[n]), f, len(batches), peak_used)
    print(f"\nmodel={args.model}, data={first.data.name}, batch={first.data.batch_size}, {args.steps} steps "
          f"({args.warmup} warm-up), best of {args.repeats} interleaved runs, torch {torch.__version__}, "
          f"{threads} threads; fp32 GEMM peak at {threads} threads {peak / 1e9:.1f} GFLOP/s before the runs, "
          f"{peak_after / 1e9:.1f} after; MFU uses the higher")
    for n in names:
        r = out[n]
        runs = ", ".join(f"{x:,.0f}" for x in rates[n])
        print(f"  {n:<15} train tokens/s {r['tokens_per_sec']:>9,.0f} (runs: {runs})  ratio to {names[0]}: "
              f"{r['tokens_per_sec'] / out[names[0]]['tokens_per_sec']:.2f}x")
        print(f"  {'':<15} useful tokens {r['useful_frac']:.1%} of positions; step {r['step_ms']:.1f} ms; FLOPs/step "
              f"(fwd+bwd) padded {r['padded_flops_per_step'] / 1e9:.3f} G, useful "
              f"{r['useful_flops_per_step'] / 1e9:.3f} G")
        print(f"  {'':<15} useful {r['useful_flops_per_sec'] / 1e9:.1f} GFLOP/s: MFU useful {r['mfu_useful']:.1%}, "
              f"padded {r['mfu_padded']:.1%}")
    return out


def compare_variants(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Tokens/s and first-step seconds of several override sets (``--variants``), interleaved, in one run."""
    import torch._dynamo

    names = [v.strip() for v in args.variants.split(";") if v.strip()]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfgs = {n: compose("train", overrides=["attention=scaled_dot", f"model={args.model}", *args.overrides,
                                               *n.split()]) for n in names}
    dms: dict[str, object] = {}
    for n in names:  # one data module per distinct data config
        key = OmegaConf.to_yaml(cfgs[n].data)
        dms[n] = next((dms[m] for m in dms if OmegaConf.to_yaml(cfgs[m].data) == key), None) or _datamodule(cfgs[n])
    rates: dict[str, list[float]] = {n: [] for n in names}
    first_step: dict[str, list[float]] = {n: [] for n in names}
    graphs: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(args.repeats):
            for n in names:
                torch._dynamo.reset()  # every compiled run compiles afresh: its first step holds the compile time
                torch._dynamo.utils.counters.clear()
                timer = FirstStepTimer()
                pl.seed_everything(cfgs[n].seed, workers=True)
                rates[n].append(lightning_run(cfgs[n], dms[n], args.steps, args.warmup, log_dir,
                                              extra_callbacks=(timer,)))
                first_step[n].append(float(timer.seconds))
                graphs[n] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    out = {n: {"tokens_per_sec": max(rates[n]), "first_step_sec": sorted(first_step[n])[len(first_step[n]) // 2],
               "graphs": float(graphs[n])} for n in names}
    ref = out[names[0]]
    print(f"\nmodel={args.model}, data={cfgs[names[0]].data.name} ({cfgs[names[0]].data.batching} batches), "
          f"batch={cfgs[names[0]].data.batch_size}, {args.steps} steps ({args.warmup} warm-up), best of "
          f"{args.repeats} interleaved runs, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for n in names:
        r = out[n]
        runs = ", ".join(f"{x:,.0f}" for x in rates[n])
        print(f"  {n:<40} train tokens/s {r['tokens_per_sec']:>9,.0f}  ratio {r['tokens_per_sec'] / ref['tokens_per_sec']:.3f}"
              f"  first step {r['first_step_sec']:.2f} s (+{r['first_step_sec'] - ref['first_step_sec']:.2f} s)"
              f"  graphs compiled {int(r['graphs'])}  (runs: {runs})")
    return out


def compare_attention(args: argparse.Namespace) -> dict[str, float]:
    """Train tokens/s of several score functions in attnbench's training step, interleaved."""
    names = [n.strip() for n in args.attention.split(",") if n.strip()]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfgs = {n: compose("train", overrides=[f"attention={n}", f"model={args.model}", *args.overrides]) for n in names}
    first = cfgs[names[0]]
    dm = _datamodule(first)
    rates: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(args.repeats):
            for n in names:
                pl.seed_everything(first.seed, workers=True)
                rates[n].append(lightning_run(first, dm, args.steps, args.warmup, log_dir,
                                              attention=OmegaConf.to_container(cfgs[n].attention)))
    best = {n: max(v) for n, v in rates.items()}
    print(f"\nmodel={args.model}, data={first.data.name}, batch={first.data.batch_size}, {args.steps} steps "
          f"({args.warmup} warm-up), best of {args.repeats} interleaved runs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    for n in names:
        runs = ", ".join(f"{x:,.0f}" for x in rates[n])
        print(f"  {n:<11} train tokens/s: {best[n]:>10,.0f}   ratio to {names[0]}: {best[n] / best[names[0]]:.3f}"
              f"   (runs: {runs})")
    if getattr(args, "json", None) is not None:  # every run, not only the best: the spread is part of the figure
        write_json(args, {"best": best, "runs": rates, "model": args.model, "data": str(first.data.name),
                          "batch_size": int(first.data.batch_size), "batching": str(first.data.batching),
                          "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats})
        args.json = None  # written
    return best


def diagnostics_overhead(args: argparse.Namespace) -> dict[str, float]:
    """Training tokens/s with and without ``AttentionDiagnostics`` (its default config), interleaved.

    Also times the callback's work directly: one probe (forward on the probe
    batch + statistics) and one gradient-norm read, against the mean step time,
    which gives the overhead fraction ``(probe + grads) / (every_n_steps * step)``
    independent of run-to-run noise.
    """
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("train", overrides=[f"model={args.model}", *args.overrides])
    dm = _datamodule(cfg)
    diag_cfg = cfg.callbacks.attention_diagnostics
    rates: dict[str, list[float]] = {"without": [], "with": []}
    probe_sec: list[float] = []
    with tempfile.TemporaryDirectory() as log_dir:
        for _ in range(args.repeats):
            for side in ("without", "with"):
                pl.seed_everything(cfg.seed, workers=True)
                extra = (instantiate(diag_cfg),) if side == "with" else ()
                rates[side].append(lightning_run(cfg, dm, args.steps, args.warmup, log_dir, extra_callbacks=extra))
        callback = instantiate(diag_cfg)
        module = TextClassifierModule(vocab_size=dm.vocab_size, num_classes=dm.num_classes, max_length=dm.max_length,
                                      pad_id=dm.pad_id, **module_kwargs(cfg))
        trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
        trainer.fit(module, datamodule=dm)  # one step, so gradients exist
        callback.on_fit_start(trainer, module)
        for _ in range(5):
            t0 = time.perf_counter()
            callback.probe(module)
            callback.gradient_norms(module)
            probe_sec.append(time.perf_counter() - t0)
    best = {k: max(v) for k, v in rates.items()}
    batch_tokens = sum(int(b["num_tokens"]) for b, _ in zip(dm.train_dataloader(), range(50))) / 50
    step_sec = batch_tokens / best["without"]
    probe = sorted(probe_sec)[len(probe_sec) // 2]
    fraction = probe / (diag_cfg.every_n_steps * step_sec)
    print(f"\nmodel={args.model}, data={cfg.data.name}, batch={cfg.data.batch_size}, {args.steps} steps "
          f"({args.warmup} warm-up), best of {args.repeats} interleaved runs, {torch.get_num_threads()} threads; "
          f"diagnostics every {diag_cfg.every_n_steps} steps on {diag_cfg.probe_size} examples")
    for side in ("without", "with"):
        runs = ", ".join(f"{x:,.0f}" for x in rates[side])
        print(f"  {side:<8} diagnostics: train tokens/s {best[side]:>10,.0f}   (runs: {runs})")
    print(f"  ratio with / without: {best['with'] / best['without']:.3f}")
    print(f"  one probe + gradient norms: {probe * 1e3:.1f} ms; mean step: {step_sec * 1e3:.1f} ms; "
          f"overhead = probe / ({diag_cfg.every_n_steps} steps) = {fraction:.2%}")
    return {**best, "ratio": best["with"] / best["without"], "probe_sec": probe, "overhead": fraction}


if __name__ == "__main__":
    main()
