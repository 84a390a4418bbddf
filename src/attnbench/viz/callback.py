"""``AttentionMapLogger``: a run's attention maps, drawn once at its end, to the run dir and to W&B."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytorch_lightning as pl

from attnbench.errors import whole_sentences

log = logging.getLogger(__name__)


class AttentionMapLogger(pl.Callback):
    """After testing (the best checkpoint's weights), the attention weights of every layer and head on the first
    ``n_sentences`` test sentences of ``min_tokens``–``max_tokens`` tokens, drawn as heatmaps (a row per sentence,
    a column per layer × head, the tokens on the axes; :mod:`attnbench.viz.attention_maps`).

    Writes ``<run dir>/attention_maps.png`` and ``<run dir>/attention_maps.json`` (the sentences' ids and tokens
    and the weights, ``weights[sentence][layer][head][query][key]`` rounded to 1e-4, which ``attnbench report``
    reuses to draw every score function on the same sentences), and logs the PNG to every W&B logger as the
    image ``attention_maps`` at the run's last step. Once per run, on global rank 0; costs one forward pass per
    sentence and one figure. Anything failing here (drawing, files, W&B) is one warning: it never stops a run.

    Args:
        n_sentences: sentences drawn (rows of the figure).
        min_tokens, max_tokens: the sentence lengths picked (tokens), so the labels stay readable.
        filename: the PNG's name in the run dir.
    """

    def __init__(self, n_sentences: int = 2, min_tokens: int = 5, max_tokens: int = 16,
                 filename: str = "attention_maps.png") -> None:
        super().__init__()
        if int(n_sentences) < 1 or int(min_tokens) < 1 or int(max_tokens) < int(min_tokens):
            raise ValueError(
                "callbacks.attention_maps: n_sentences and min_tokens must be >= 1 and max_tokens >= min_tokens, "
                f"got {n_sentences}, {min_tokens}, {max_tokens}")
        self.n_sentences = int(n_sentences)
        self.min_tokens = int(min_tokens)
        self.max_tokens = int(max_tokens)
        self.filename = filename
        self.path: Path | None = None  # the PNG written, once drawn
        self._done = False

    def draw(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> Path:
        """Compute and write the maps; returns the PNG's path. Raises whatever fails (the hook catches it)."""
        from attnbench.paths import atomic_target, write_text_atomically
        from attnbench.viz.attention_maps import PROBE_FILE, datamodule_probe, draw, sentence_maps

        datamodule = trainer.datamodule
        if datamodule is None:
            raise RuntimeError("the trainer has no datamodule: no test sentences")
        sentences = datamodule_probe(datamodule, self.n_sentences, self.min_tokens, self.max_tokens)
        if not sentences:
            raise RuntimeError("the test split is empty")
        maps = sentence_maps(pl_module, sentences)
        run_dir = Path(trainer.default_root_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        name = getattr(pl_module, "hparams", {}).get("attention", {}).get("name", "")
        title = f"{name}: attention weights on {len(sentences)} test sentences (rows: queries, columns: keys)"
        fig = draw([(f"sentence {i + 1}", w, t) for i, (w, t) in enumerate(maps)], title)
        path = run_dir / self.filename
        with atomic_target(path) as tmp:
            fig.savefig(tmp, dpi=90)
        record = {"attention": name, "sentences": sentences,
                  "weights": [[[[[round(float(v), 4) for v in row] for row in head] for head in layer] for layer in w]
                              for w, _ in maps]}
        write_text_atomically(run_dir / PROBE_FILE, json.dumps(record))
        return path

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._done or not trainer.is_global_zero:
            return
        self._done = True
        try:
            self.path = self.draw(trainer, pl_module)
        except Exception as err:  # noqa: BLE001 - a picture never stops a run
            log.warning("Attention maps not drawn (%s); the run's results are unaffected.", whole_sentences(err))
            return
        from pytorch_lightning.loggers import WandbLogger

        for logger in trainer.loggers:
            if not isinstance(logger, WandbLogger):
                continue
            try:
                logger.log_image(key="attention_maps", images=[str(self.path)], step=trainer.global_step,
                                 caption=[self.path.name])
            except Exception as err:  # noqa: BLE001 - W&B never stops a run
                log.warning("Attention maps not logged to W&B (%s); the PNG is in %s.", whole_sentences(err), self.path)
