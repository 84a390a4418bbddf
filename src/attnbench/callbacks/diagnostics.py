"""Attention diagnostics: why score functions differ (entropy, score magnitude, saturation, q/k gradients)."""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from attnbench.attention.base import query_block_size
from attnbench.attention.multihead import AttentionIntermediates, attention_intermediates, attention_layers


def attention_statistics(intermediates: AttentionIntermediates, block_bytes: int = 64 * 2**20) -> dict[str, float]:
    """Statistics of one attention layer's weights on one batch.

    Read from the logits and weights the layer hands back
    (:meth:`attnbench.attention.MultiHeadAttention.forward` with ``return_intermediates=True``), in query
    blocks whose B×H×rows×Lk temporaries fit ``block_bytes``.

    Args:
        intermediates: the layer's :class:`~attnbench.attention.multihead.AttentionIntermediates`
            (logits and weights B×H×L×L, key_padding_mask bool B×L or ``None``).
        block_bytes: memory budget of one query block of temporaries (bytes).

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
    logits, weights, key_padding_mask = intermediates
    b, h, length, n_all_keys = weights.shape
    if key_padding_mask is None:
        key_padding_mask = torch.zeros(b, n_all_keys, dtype=torch.bool, device=weights.device)
    keep_keys = ~key_padding_mask  # B×L
    n_keys = keep_keys.sum(-1).to(weights.dtype)  # B
    rows = query_block_size(None, int(block_bytes), length, b * h * n_all_keys * weights.element_size())
    entropy_sum = norm_sum = saturated = 0.0
    n_rows = n_norm_rows = 0.0
    max_score = 0.0
    for start in range(0, length, rows):
        stop = min(length, start + rows)
        block_weights = weights[:, :, start:stop]  # B×H×rows×L
        valid_q = keep_keys[:, start:stop][:, None, :].expand(b, h, -1)  # B×H×rows
        pair_ok = valid_q[..., None] & keep_keys[:, None, None, :]
        if pair_ok.any():
            max_score = max(max_score, float(logits[:, :, start:stop].abs().masked_fill(~pair_ok, 0.0).max()))
        entropy = -torch.special.xlogy(block_weights, block_weights).sum(-1)  # B×H×rows
        log_n = torch.log(n_keys)[:, None, None].expand_as(entropy)
        norm_ok = valid_q & (log_n > 0)
        entropy_sum += float(entropy[valid_q].sum())
        norm_sum += float((entropy[norm_ok] / log_n[norm_ok]).sum())
        saturated += float((block_weights.amax(-1) > 0.99)[norm_ok].sum())
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
    the model in eval mode and no gradient, from the logits and weights each
    layer hands back (``model(..., return_intermediates=True)``), for each layer ``i``:

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
        block_bytes: memory budget of one query block of the statistics' temporaries (bytes).
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

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.summary = {}
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
        ids = self._probe["input_ids"].to(pl_module.device)
        mask = self._probe["padding_mask"].to(pl_module.device)
        metrics: dict[str, float] = {}
        for i, intermediates in enumerate(attention_intermediates(pl_module, ids, mask)):
            for name, value in attention_statistics(intermediates, self.block_bytes).items():
                metrics[f"diag/layer{i}/{name}"] = value
        return metrics

    @staticmethod
    def gradient_norms(pl_module: pl.LightningModule) -> dict[str, float]:
        """L2 norms of each layer's query and key projection gradients (weight and bias rows)."""
        metrics: dict[str, float] = {}
        for i, layer in enumerate(attention_layers(pl_module)):
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

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # a run resumed from the checkpoint its training ended with never starts training (no on_train_end):
        # its final diagnostics come from the restored, final weights
        if not self.summary:
            self.on_train_end(trainer, pl_module)

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
