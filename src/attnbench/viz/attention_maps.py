"""Attention maps: the attention weights of every layer and head of a trained model on a few test sentences,
drawn as heatmaps with the tokens on the axes.

The weights are the ones each :class:`attnbench.attention.MultiHeadAttention` hands back when the model is
asked for its intermediates (``model(input_ids, padding_mask, return_intermediates=True)``): the masked softmax
of its score function's ``scores`` (Vaswani et al. 2017, §3.2.1, eq. 1, with the score replaced by the score
function's), before attention dropout. The fused ``attend`` paths never materialise weights; ``scores`` is what
every score function defines and what its tests compare the fused path against.

Sentences: the first ``n`` rows of the run's test split (after the run's ``data.max_eval_samples`` cap) whose
length is between ``min_tokens`` and ``max_tokens`` tokens, so that every score function is shown on the same
sentences; the tokens are the run's tokenizer's (``tokenizer.json`` of the data cache).
"""

from __future__ import annotations

import json
import logging
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnbench.attention.multihead import attention_intermediates, attention_layers
from attnbench.paths import atomic_target

log = logging.getLogger(__name__)

PROBE_FILE = "attention_maps.json"  # written by AttentionMapLogger next to the run's metrics.json


# --------------------------------------------------------------------------- the weights


@torch.no_grad()
def attention_weights(model: nn.Module, input_ids: Tensor, padding_mask: Tensor) -> list[Tensor]:
    """The attention weights of every layer of ``model`` on one batch.

    Args:
        model: a :class:`attnbench.models.model.TransformerClassifier` or a module wrapping one that passes
            ``return_intermediates`` on (``model(input_ids, padding_mask, return_intermediates=True)``); run in
            eval mode (no dropout), then restored.
        input_ids: B×L token ids (long).
        padding_mask: bool B×L, True = padding.

    Returns:
        One float32 CPU tensor per attention layer, B×H×L'×L' (L' = L, or L + 1 with ``pooling=cls``, whose
        first position is the [CLS] vector): row ``q`` of head ``h`` holds the weights query ``q`` gives each
        key, summing to 1 over the non-padding keys; padding keys get 0.

    Raises:
        ValueError: the model has no attention layer.
    """
    if not attention_layers(model):
        raise ValueError(f"{type(model).__name__} has no attnbench MultiHeadAttention layer to draw")
    device = next(model.parameters()).device
    return [layer.weights.float().cpu()
            for layer in attention_intermediates(model, input_ids.to(device), padding_mask.to(device))]


def probe_rows(split: Sequence[Any], n: int = 2, min_tokens: int = 5, max_tokens: int = 16,
               scan: int = 500) -> list[int]:
    """Indices of the sentences to draw: the first ``n`` of the first ``scan`` rows of ``split`` (items
    ``(ids, label)``) with ``min_tokens`` ≤ length ≤ ``max_tokens``; if fewer qualify, the shortest of the
    others longer than one token fill up; returned in row order. Deterministic: the same split gives the same rows."""
    lengths = [(i, len(split[i][0])) for i in range(min(scan, len(split)))]
    rows = [i for i, length in lengths if min_tokens <= length <= max_tokens][:n]
    if len(rows) < n:
        rest = sorted((length, i) for i, length in lengths if i not in rows and length > 1)
        rows += [i for _, i in rest[: n - len(rows)]]
    return sorted(rows[:n])


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each id as its token (``tokenizer.id_to_token``; the id itself without a tokenizer); byte-level
    tokens (``Ġ``) shown as a space-prefixed word."""
    if tokenizer is None:
        return [str(i) for i in ids]
    out = []
    for i in ids:
        token = tokenizer.id_to_token(int(i))
        out.append(str(i) if token is None else token.replace("Ġ", "▁"))
    return out


# --------------------------------------------------------------------------- drawing


def draw(rows: Sequence[tuple[str, list[Tensor], list[str]]], title: str, cell: float = 1.45):
    """One figure of heatmaps: a row per entry of ``rows``, a column per (layer, head).

    Args:
        rows: ``(label, weights, tokens)``: ``weights`` one H×L×L tensor per layer (one sentence), ``tokens``
            the L tokens (query axis = heatmap rows, key axis = columns). Rows may differ in L.
        title: the figure's title (the sentence, the settings held fixed).
        cell: inches per heatmap.

    Returns:
        A ``matplotlib.figure.Figure`` (no pyplot state; save it with ``fig.savefig``). Colour: the weight,
        0 (dark) to 1 (bright), one scale for every cell so that score functions compare.
    """
    from matplotlib.figure import Figure

    n_layers = max(len(w) for _, w, _ in rows)
    n_heads = max(int(layer.shape[0]) for _, w, _ in rows for layer in w)
    n_cols = n_layers * n_heads
    fig = Figure(figsize=(1.4 + cell * n_cols, 1.2 + cell * 1.12 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), n_cols, squeeze=False)
    image = None
    for r, (label, weights, tokens) in enumerate(rows):
        for layer_i in range(n_layers):
            for head in range(n_heads):
                ax = axes[r][layer_i * n_heads + head]
                ax.set_xticks([])
                ax.set_yticks([])
                if layer_i >= len(weights) or head >= weights[layer_i].shape[0]:
                    ax.set_axis_off()
                    continue
                w = weights[layer_i][head].numpy()
                image = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest")
                if r == 0:
                    ax.set_title(f"layer {layer_i} head {head}", fontsize=7)
                if layer_i == 0 and head == 0:
                    size = 5 if len(tokens) > 12 else 6
                    ax.set_yticks(range(len(tokens)), tokens, fontsize=size)
                    ax.set_xticks(range(len(tokens)), tokens, fontsize=size, rotation=90)
                    ax.set_ylabel(label, fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    # wrapped to the figure's width: a narrow figure (model=tiny: 2 heatmaps) clipped the settings line on both sides
    width_chars = max(30, int(fig.get_figwidth() * _TITLE_CHARS_PER_INCH))
    fig.suptitle("\n".join(textwrap.fill(line, width_chars) for line in title.splitlines()), fontsize=8)
    return fig


_TITLE_CHARS_PER_INCH = 13  # characters of 8-point sans-serif per inch of figure width, with a margin


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")[:80]


# --------------------------------------------------------------------------- a run on disk


def module_class():
    """The LightningModule class runs are saved as (``TextClassifierModule``, wherever the package keeps it)."""
    from attnbench.models.module import TextClassifierModule

    return TextClassifierModule


def best_checkpoint(run_dir: Path, metrics: dict[str, Any] | None = None) -> Path | None:
    """The run's best checkpoint: ``metrics.json``'s ``best_checkpoint`` (or the file of that name in the run's
    ``checkpoints/`` when the run dir moved), else its one non-``last`` ``.ckpt``, else ``last.ckpt``."""
    named = (metrics or {}).get("best_checkpoint")
    if named:
        for candidate in (Path(named), run_dir / "checkpoints" / Path(named).name):
            if candidate.is_file():
                return candidate
    ckpts = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    best = [p for p in ckpts if not p.name.startswith("last")]
    return (best or ckpts or [None])[0]


def load_model(checkpoint: Path) -> nn.Module:
    """The trained module of a checkpoint, on CPU, in eval mode (its hyperparameters rebuild the model).

    Raises:
        ConfigError: the checkpoint differs from its SHA-256 sidecar (:func:`attnbench.run.resume.check_digest`).
    """
    from attnbench.run.resume import check_digest

    check_digest(checkpoint)
    module = module_class().load_from_checkpoint(str(checkpoint), map_location="cpu", weights_only=False)
    return module.eval()


def datamodule_probe(datamodule: Any, n: int = 2, min_tokens: int = 5, max_tokens: int = 16) -> list[dict[str, Any]]:
    """The sentences to draw from a set-up data module: ``[{"row", "ids", "tokens"}]`` (:func:`probe_rows` of its
    test split; tokens from its tokenizer, ``cache_dir/tokenizer.json``)."""
    split = datamodule.splits["test"]
    tokenizer = getattr(datamodule, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "id_to_token"):
        from tokenizers import Tokenizer

        cache = getattr(datamodule, "cache_dir", None)
        path = Path(cache) / "tokenizer.json" if cache else None
        tokenizer = Tokenizer.from_file(str(path)) if path is not None and path.is_file() else None
    rows = probe_rows(split, n, min_tokens, max_tokens)
    return [{"row": i, "ids": [int(t) for t in split[i][0]], "tokens": token_strings(tokenizer, split[i][0])}
            for i in rows]


def run_probe(run_dir: Path, n: int = 2) -> list[dict[str, Any]]:
    """The sentences of a run: from its ``attention_maps.json`` (written by :class:`AttentionMapLogger`), else
    rebuilt from its data config (``.hydra/config.yaml``; reads the tokenized cache, building it if absent).

    Raises:
        FileNotFoundError: neither is there.
    """
    probe_file = run_dir / PROBE_FILE
    if probe_file.is_file():
        return json.loads(probe_file.read_text())["sentences"][:n]
    config_file = run_dir / ".hydra" / "config.yaml"
    if not config_file.is_file():
        raise FileNotFoundError(f"{run_dir} has neither {PROBE_FILE} nor .hydra/config.yaml: no sentences to draw")
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(config_file)
    datamodule = instantiate(cfg.data, seed=int(cfg.get("seed", 0)))
    datamodule.prepare_data()
    datamodule.setup("test")
    return datamodule_probe(datamodule, n)


def sentence_maps(model: nn.Module, sentences: Sequence[dict[str, Any]]) -> list[tuple[list[Tensor], list[str]]]:
    """Per sentence: its weights (one H×L×L tensor per layer) and tokens (``[CLS]`` first when the model
    prepends one). One forward pass per sentence, so no padding enters a map."""
    out = []
    for sentence in sentences:
        ids = torch.tensor([sentence["ids"]], dtype=torch.long)
        weights = [w[0] for w in attention_weights(model, ids, torch.zeros_like(ids, dtype=torch.bool))]
        tokens = list(sentence["tokens"])
        if weights and weights[0].shape[-1] == len(tokens) + 1:
            tokens = ["[CLS]", *tokens]
        out.append((weights, tokens))
    return out


def report_figures(jobs, swept: list[str], out: Path, fixed: dict[str, str] | None = None,
                   n_sentences: int = 2) -> tuple[list[str], list[str]]:
    """The report's attention-map figures: per setting (the swept keys other than ``attention`` and ``seed``)
    and per sentence, one figure with a row per score function (its lowest finished seed, best checkpoint)
    and a column per layer × head, on the same sentences (those of the setting's first run).

    Args:
        jobs: the report's job table (``status``, ``dir``, ``attention``, ``seed``, ``test/acc``, swept keys).
        out: folder the PNGs go to (``attention_maps[_<setting>]_s<i>.png``).
        fixed: the settings held fixed, named in each title.

    Returns:
        ``(file names, notes)``: a note per run that could not be drawn (no checkpoint, ...), never an error.
    """
    import pandas as pd

    from attnbench.analysis.stats import REPLICATE_KEYS, STATUS_OK, headline

    done = jobs[(jobs["status"] == STATUS_OK) & jobs["dir"].map(lambda d: isinstance(d, str) and Path(d).is_dir())]
    if done.empty or "attention" not in done:
        return [], []
    setting_keys = [k for k in swept if k != "attention" and k not in REPLICATE_KEYS]
    groups = list(done.groupby(setting_keys, sort=False, dropna=False)) if setting_keys else [((), done)]
    files: list[str] = []
    notes: list[str] = []
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        setting = ", ".join(f"{k}={v}" for k, v in zip(setting_keys, key))
        group = group.assign(_seed=pd.to_numeric(group["seed"], errors="coerce") if "seed" in group else 0).sort_values("_seed", kind="stable")
        chosen = group.drop_duplicates("attention", keep="first")
        sentences = None
        rows: list[tuple[str, list[tuple[list[Tensor], list[str]]]]] = []
        for _, run in chosen.iterrows():
            run_dir = Path(run["dir"])
            try:
                if sentences is None:
                    sentences = run_probe(run_dir, n_sentences)
                ckpt = best_checkpoint(run_dir, run.to_dict())
                if ckpt is None:
                    raise FileNotFoundError("no checkpoint in checkpoints/")
                model = load_model(ckpt)
                acc = run.get("test/acc")
                seed = run.get("seed")
                label = f"{run['attention']}" + (f" s{seed}" if seed is not None else "") + (
                    f"\ntest acc {float(acc):.3f}" if pd.notna(pd.to_numeric(acc, errors="coerce")) else "")
                rows.append((label, sentence_maps(model, sentences)))
            except Exception as err:  # noqa: BLE001 - one run that cannot be drawn leaves the others
                notes.append(f"{run.get('job')}: no attention map ({type(err).__name__}: {' '.join(str(err).split())[:200]})")
        if not rows or not sentences:
            continue
        for s, sentence in enumerate(sentences):
            text = " ".join(sentence["tokens"])
            title = (f"{setting + ' | ' if setting else ''}test sentence {s + 1} (row {sentence.get('row')}): "
                     f"{text[:120]}\nfixed: {headline(fixed or {})}")
            fig = draw([(label, maps[s][0], maps[s][1]) for label, maps in rows], title)
            name = "attention_maps" + (f"_{_slug(setting)}" if setting else "") + f"_s{s + 1}.png"
            with atomic_target(out / name) as tmp:
                fig.savefig(tmp, dpi=90)
            files.append(name)
    return files, notes
