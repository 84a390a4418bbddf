"""Callbacks Lightning lacks: whole-run throughput, peak memory, parameter count,
and attention diagnostics.

The per-step throughput series comes from Lightning's own ``ThroughputMonitor``
(configured in ``conf/callbacks/default.yaml`` with :func:`batch_size` and
:func:`num_tokens`); :class:`RunStats` adds the whole-run figures that go into
the run summary and ``metrics.json``. :class:`AttentionDiagnostics` shows why
score functions differ: entropy, score magnitude and saturation of the
attention weights, and the query/key gradient norms.
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from typing import Any

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)


def batch_size(batch: dict[str, Any]) -> int:
    """Number of samples in a collated batch (``ThroughputMonitor.batch_size_fn``)."""
    return int(batch["labels"].shape[0])


def num_tokens(batch: dict[str, Any]) -> int:
    """Non-padding tokens in a collated batch (``ThroughputMonitor.length_fn``)."""
    return int(batch["num_tokens"])


def _proc_status_kib(field: str) -> int | None:
    """A ``/proc/self/status`` field in KiB (Linux), or ``None`` where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window: the CUDA allocator's peak, or on Linux the process's RSS high-water mark.

    On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets ``VmHWM``, so a
    job's peak excludes earlier work in the same process (data preparation,
    earlier jobs of a Hydra multirun). Elsewhere the CPU peak stays the
    process's lifetime peak.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory in bytes since :func:`reset_peak_memory`: CUDA allocator peak on GPU, else peak RSS.

    On CPU this is the process's RSS high-water mark (``VmHWM`` on Linux, else
    ``getrusage(RUSAGE_SELF).ru_maxrss``) — the whole process (interpreter,
    libraries and data included), so compare it across variants of one
    config, not as the attention's own footprint.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    hwm = _proc_status_kib("VmHWM")
    if hwm is not None:
        return hwm * 1024
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # bytes on macOS, KiB on Linux


class RunStats(pl.Callback):
    """Whole-run throughput, peak memory and parameter count.

    Training rate: samples and non-padding tokens of every training step after
    the first ``warmup_steps``, divided by the wall time of those steps
    (seconds, CUDA-synchronised; data loading between steps counted, while
    validation, checkpointing and the first fetch after each of them are not).
    Test rate: the same over the whole test loop (inference only). Under DDP
    both count the samples and tokens of every process, over the time of the
    slowest: the whole job's throughput. (Evaluation loaders give each
    process distinct rows, :func:`attnbench.distributed.eval_sampler`, so the
    test counts are the split's own.)

    After a run, :attr:`summary` holds ``train/samples_per_sec``,
    ``train/tokens_per_sec``, ``train/steps_per_sec``, ``train/time_sec`` (the measured steps),
    ``train/samples`` and ``train/tokens`` (counted in the measured steps, all processes),
    ``test/samples_per_sec``, ``test/tokens_per_sec``, ``test/samples``, ``test/tokens``,
    ``perf/peak_mem_bytes`` and ``model/params``.

    Args:
        warmup_steps: training steps excluded from the rate (allocator warm-up,
            kernel selection, first-touch page faults).
    """

    def __init__(self, warmup_steps: int = 20) -> None:
        super().__init__()
        self.warmup_steps = int(warmup_steps)
        self.summary: dict[str, float] = {}
        self._reset_train()
        self._test_samples = 0
        self._test_tokens = 0
        self._test_t0 = 0.0

    def _reset_train(self) -> None:
        self._steps_seen = 0
        self._train_time = 0.0
        self._train_samples = 0
        self._train_tokens = 0
        self._train_steps = 0
        self._last_end: float | None = None

    @staticmethod
    def _now(pl_module: pl.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reset_train()
        reset_peak_memory(pl_module.device)  # the peak of this job's training and test, not of data preparation
        self.summary["model/params"] = float(sum(p.numel() for p in pl_module.parameters()))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._last_end is None:  # first step after start, validation or checkpointing
            self._last_end = self._now(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = self._now(pl_module)
        self._steps_seen += 1
        if self._steps_seen > self.warmup_steps and self._last_end is not None:
            self._train_time += now - self._last_end
            self._train_samples += batch_size(batch)
            self._train_tokens += num_tokens(batch)
            self._train_steps += 1
        self._last_end = now

    def on_validation_start(self, trainer, pl_module) -> None:
        self._last_end = None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._last_end = None

    @staticmethod
    def _whole_job(trainer, samples: int, tokens: int, seconds: float) -> tuple[float, float, float]:
        """Samples and tokens summed over all processes of the job; seconds: the slowest process's."""
        if trainer.world_size <= 1:
            return float(samples), float(tokens), float(seconds)
        local = torch.tensor([samples, tokens, seconds], dtype=torch.float64, device=trainer.strategy.root_device)
        gathered = trainer.strategy.all_gather(local).reshape(-1, 3).cpu()
        return float(gathered[:, 0].sum()), float(gathered[:, 1].sum()), float(gathered[:, 2].max())

    def on_fit_end(self, trainer, pl_module) -> None:
        samples, tokens, seconds = self._whole_job(trainer, self._train_samples, self._train_tokens, self._train_time)
        if seconds > 0:
            self.summary["train/samples"], self.summary["train/tokens"] = samples, tokens  # the measured steps
            self.summary["train/samples_per_sec"] = samples / seconds
            self.summary["train/tokens_per_sec"] = tokens / seconds
            self.summary["train/steps_per_sec"] = self._train_steps / seconds  # every process takes every step
            self.summary["train/time_sec"] = seconds
        elif self._steps_seen:
            log.warning(
                "Only %d training steps in this process (a resumed run counts only the steps after its checkpoint), "
                "all within the %d warm-up steps: no training throughput is reported (train/samples, train/tokens "
                "and the train/*_per_sec rates are absent; lower callbacks.run_stats.warmup_steps or train longer).",
                self._steps_seen, self.warmup_steps,
            )
        self.summary["perf/peak_mem_bytes"] = float(peak_memory_bytes(pl_module.device))

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self._test_samples = 0
        self._test_tokens = 0
        self._test_t0 = self._now(pl_module)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._test_samples += batch_size(batch)
        self._test_tokens += num_tokens(batch)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        samples, tokens, elapsed = self._whole_job(trainer, self._test_samples, self._test_tokens,
                                                   self._now(pl_module) - self._test_t0)
        self.summary["test/samples"], self.summary["test/tokens"] = samples, tokens
        if elapsed > 0 and samples:
            self.summary["test/samples_per_sec"] = samples / elapsed
            self.summary["test/tokens_per_sec"] = tokens / elapsed
        self.summary["perf/peak_mem_bytes"] = float(peak_memory_bytes(pl_module.device))


def attention_statistics(
    attn: torch.nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None, block_bytes: int = 64 * 2**20
) -> dict[str, float]:
    """Statistics of one attention layer's weights on one batch.

    Scores come from the score function's definition (``score_fn.scores``),
    computed in query blocks of ``score_fn.block_size`` queries (the score
    function's own budget, or ``block_bytes`` when it sets none), so that no
    block's scores (or what its query rows materialise, e.g. additive's hidden
    tensor) exceed it.

    Args:
        attn: a :class:`attnbench.attention.MultiHeadAttention`.
        x: its input, B×L×d_model.
        key_padding_mask: bool B×L, True = padding (``None``: no padding).
        block_bytes: memory budget of one query block (bytes).

    Returns:
        Over heads, batch and non-padding query rows:
        ``entropy`` (mean attention entropy, nats),
        ``entropy_norm`` (entropy / log(number of non-padding keys), in [0, 1];
        rows with a single key are left out),
        ``max_score`` (largest |score| over non-padding query–key pairs),
        ``saturated_frac`` (fraction of rows whose largest weight exceeds 0.99).
        ``entropy_norm`` and ``saturated_frac`` leave out rows of sequences with
        a single non-padding key, whose one weight is trivially 1.
    """
    from attnbench.attention.base import masked_softmax

    query, key, _ = attn.project(x)
    b, h, length, _ = query.shape
    if key_padding_mask is None:
        key_padding_mask = torch.zeros(b, length, dtype=torch.bool, device=x.device)
    keep_keys = ~key_padding_mask  # B×L
    n_keys = keep_keys.sum(-1).to(query.dtype)  # B
    element = query.element_size()
    rows = attn.score_fn.block_size(b, length, length, element, budget_bytes=block_bytes)
    entropy_sum = norm_sum = saturated = 0.0
    n_rows = n_norm_rows = 0.0
    max_score = 0.0
    for start in range(0, length, rows):
        stop = min(length, start + rows)
        scores = attn.score_fn.scores(query[:, :, start:stop], key)  # B×H×rows×L
        weights = masked_softmax(scores, key_padding_mask)
        valid_q = keep_keys[:, start:stop][:, None, :].expand(b, h, -1)  # B×H×rows
        pair_ok = valid_q[..., None] & keep_keys[:, None, None, :]
        if pair_ok.any():
            max_score = max(max_score, float(scores.abs().masked_fill(~pair_ok, 0.0).max()))
        entropy = -torch.special.xlogy(weights, weights).sum(-1)  # B×H×rows
        log_n = torch.log(n_keys)[:, None, None].expand_as(entropy)
        norm_ok = valid_q & (log_n > 0)
        entropy_sum += float(entropy[valid_q].sum())
        norm_sum += float((entropy[norm_ok] / log_n[norm_ok]).sum())
        saturated += float((weights.amax(-1) > 0.99)[norm_ok].sum())
        n_rows += float(valid_q.sum())
        n_norm_rows += float(norm_ok.sum())
    nan = float("nan")
    return {
        "entropy": entropy_sum / n_rows if n_rows else nan,
        "entropy_norm": norm_sum / n_norm_rows if n_norm_rows else nan,
        "max_score": max_score,
        "saturated_frac": saturated / n_norm_rows if n_norm_rows else nan,
    }


class AttentionDiagnostics(pl.Callback):
    """Why variants differ: attention entropy, score magnitude, saturation, q/k gradients.

    Every ``every_n_steps`` optimizer steps (and once after training), on a
    fixed probe batch — the first ``probe_size`` validation examples — with
    the model in eval mode and no gradient, for each layer ``i``:

    - ``diag/layer{i}/entropy``: mean attention entropy over heads and
      non-padding query rows (nats);
    - ``diag/layer{i}/entropy_norm``: the same divided by log(non-padding keys),
      1 = uniform, 0 = one-hot;
    - ``diag/layer{i}/max_score``: largest |score| (unnormalised logit);
    - ``diag/layer{i}/saturated_frac``: fraction of rows whose top weight > 0.99,
      where softmax gradients vanish (Vaswani et al. 2017, §3.2.1 footnote 4).

    At the same steps, from the training batch's gradients (before clipping):
    ``diag/layer{i}/query_grad_norm`` and ``diag/layer{i}/key_grad_norm``, the
    L2 norms of the query and key projection gradients (weight and bias).

    The values go to every logger (W&B, CSV) at the step they describe; the
    post-training ones also go to :attr:`summary` (and so to ``metrics.json``)
    together with their means over layers (``diag/entropy_norm``,
    ``diag/saturated_frac``; ``diag/max_score`` is the max over layers).

    Args:
        every_n_steps: interval in optimizer steps; each probe costs about one
            forward pass of ``probe_size`` examples.
        probe_size: examples in the probe batch.
        block_bytes: memory budget of one query block of scores (bytes).
    """

    def __init__(self, every_n_steps: int = 100, probe_size: int = 32, block_bytes: int = 64 * 2**20) -> None:
        super().__init__()
        if int(every_n_steps) < 1 or int(probe_size) < 1:
            raise ValueError(
                f"callbacks.attention_diagnostics: every_n_steps and probe_size must be >= 1, "
                f"got {every_n_steps} and {probe_size}"
            )
        self.every_n_steps = int(every_n_steps)
        self.probe_size = int(probe_size)
        self.block_bytes = int(block_bytes)
        self.summary: dict[str, float] = {}
        self._probe: dict[str, torch.Tensor] | None = None

    @staticmethod
    def _layers(pl_module: pl.LightningModule) -> list[torch.nn.Module]:
        from attnbench.attention import MultiHeadAttention

        return [m for m in pl_module.modules() if isinstance(m, MultiHeadAttention)]

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        if datamodule is None:
            self._probe = None
            return
        n = self.probe_size
        from attnbench.data import PadCollator

        val = datamodule.splits["val"]  # the first probe_size rows, whatever order the val batches come in
        batch = PadCollator(datamodule.pad_id)([val[i] for i in range(min(n, len(val)))])
        mask = batch["padding_mask"][:n]
        width = max(1, int((~mask).sum(-1).max()))  # drop all-padding columns
        self._probe = {"input_ids": batch["input_ids"][:n, :width], "padding_mask": mask[:, :width]}

    @torch.no_grad()
    def probe(self, pl_module: pl.LightningModule) -> dict[str, float]:
        """Weight statistics of every attention layer on the probe batch (see the class docstring)."""
        if self._probe is None:
            return {}
        layers = self._layers(pl_module)
        inputs: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        handles = [
            layer.register_forward_pre_hook(
                lambda module, args, i=i: inputs.__setitem__(i, (args[0], args[1] if len(args) > 1 else None))
            )
            for i, layer in enumerate(layers)
        ]
        was_training = pl_module.training
        pl_module.eval()
        try:
            ids = self._probe["input_ids"].to(pl_module.device)
            mask = self._probe["padding_mask"].to(pl_module.device)
            pl_module(ids, mask)
            metrics: dict[str, float] = {}
            for i, layer in enumerate(layers):
                x, layer_mask = inputs[i]
                for name, value in attention_statistics(layer, x, layer_mask, self.block_bytes).items():
                    metrics[f"diag/layer{i}/{name}"] = value
        finally:
            for handle in handles:
                handle.remove()
            pl_module.train(was_training)
        return metrics

    @staticmethod
    def gradient_norms(pl_module: pl.LightningModule) -> dict[str, float]:
        """L2 norms of each layer's query and key projection gradients (weight and bias rows)."""
        metrics: dict[str, float] = {}
        for i, layer in enumerate(AttentionDiagnostics._layers(pl_module)):
            proj, inner = layer.qkv_proj, layer.inner_dim
            if proj.weight.grad is None:
                continue
            for part, rows in (("query", slice(0, inner)), ("key", slice(inner, 2 * inner))):
                sq = proj.weight.grad[rows].float().square().sum()
                if proj.bias is not None and proj.bias.grad is not None:
                    sq = sq + proj.bias.grad[rows].float().square().sum()
                metrics[f"diag/layer{i}/{part}_grad_norm"] = float(sq.sqrt())
        return metrics

    @staticmethod
    def _log(trainer: pl.Trainer, metrics: dict[str, float]) -> None:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step % self.every_n_steps != 0 or trainer.sanity_checking:
            return
        self._log(trainer, {**self.gradient_norms(pl_module), **self.probe(pl_module)})

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = self.probe(pl_module)
        if not metrics:
            return
        for stat, reduce in (("entropy", "mean"), ("entropy_norm", "mean"), ("saturated_frac", "mean"),
                             ("max_score", "max")):
            values = torch.tensor([v for k, v in metrics.items() if k.endswith(f"/{stat}")])
            metrics[f"diag/{stat}"] = float(values.nanmean() if reduce == "mean" else values.max())
        self.summary = metrics
        self._log(trainer, metrics)


class _StopAwareBar:
    """Mixin for Lightning's progress bars: the training bar counts to where the run will stop.

    Lightning's bars count to the end of the epoch and show ``Epoch i/max_epochs-1`` even when
    ``trainer.max_steps`` ends the run earlier (Lightning caps the count only when ``max_epochs=-1``);
    here both are capped by ``max_steps`` (optimizer steps, times ``accumulate_grad_batches`` batches).
    """

    trainer: pl.Trainer

    def _batches_left_in_run(self) -> float:
        trainer = self.trainer
        max_steps = trainer.max_steps
        if max_steps is None or max_steps < 0:
            return float("inf")
        epoch_loop = trainer.fit_loop.epoch_loop
        # at an epoch start the counter still holds the previous epoch's batches, except after a mid-epoch resume
        done_this_epoch = epoch_loop.batch_progress.current.ready if epoch_loop.restarting else 0
        return done_this_epoch + (max_steps - trainer.global_step) * trainer.accumulate_grad_batches

    @property
    def total_train_batches(self) -> int | float:
        """Training batches of this epoch that will run: the epoch's, or fewer when ``max_steps`` ends it."""
        total = super().total_train_batches  # type: ignore[misc]
        return min(total, max(self._batches_left_in_run(), 0))

    def last_epoch(self) -> int | None:
        """The index of the epoch in which the run will stop (``max_epochs``, or ``max_steps`` if it comes first)."""
        trainer = self.trainer
        last = trainer.max_epochs - 1 if trainer.max_epochs is not None and trainer.max_epochs >= 0 else None
        per_epoch = trainer.num_training_batches
        if trainer.max_steps is not None and trainer.max_steps > 0 and 0 < per_epoch < float("inf"):
            steps_per_epoch = max(int(per_epoch) // trainer.accumulate_grad_batches, 1)
            by_steps = -(-trainer.max_steps // steps_per_epoch) - 1
            last = by_steps if last is None else min(last, by_steps)
        return last


class StopAwareRichProgressBar(_StopAwareBar, pl.callbacks.RichProgressBar):
    """``RichProgressBar`` that counts to where the run stops (see :class:`_StopAwareBar`)."""

    def _get_train_description(self, current_epoch: int) -> str:
        last = self.last_epoch()
        description = f"Epoch {current_epoch}" + (f"/{last}" if last is not None else "")
        return f"{description:{len(self.validation_description)}}"


class StopAwareTQDMProgressBar(_StopAwareBar, pl.callbacks.TQDMProgressBar):
    """``TQDMProgressBar`` that counts to where the run stops (see :class:`_StopAwareBar`)."""
