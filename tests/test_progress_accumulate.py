"""The training progress bar counts batches, also with ``trainer.accumulate_grad_batches`` > 1 (breaker round 2, #20).

``trainer.max_steps`` counts optimizer steps; each takes ``accumulate_grad_batches`` batches, and the last batch of
an epoch ends a step whatever the count (Lightning). The bar (``callbacks.rich_progress_bar``,
attnbench.callbacks.progress) must count to the batch where the run stops, and show the epoch it stops in.
In-process toy runs of test_faults.py, the bar's figures recorded at every training batch.
"""

from __future__ import annotations

import pytest

from attnbench.callbacks.progress import StopAwareRichProgressBar

from .test_faults import run_in_process, toy  # noqa: F401 - toy is a fixture used here


def _bars(toy_overrides, tmp_path, monkeypatch, *overrides):
    """{epoch: (batches run, the bar's total, the bar's last epoch)} of a run."""
    seen: dict[int, list] = {}
    start, end = StopAwareRichProgressBar.on_train_epoch_start, StopAwareRichProgressBar.on_train_batch_end

    def at_start(self, trainer, *args, **kwargs):  # the bar sets its total here, for the whole epoch
        start(self, trainer, *args, **kwargs)
        seen[trainer.current_epoch] = [0, self.total_train_batches, self.last_epoch()]

    def at_batch_end(self, trainer, *args, **kwargs):
        end(self, trainer, *args, **kwargs)
        seen[trainer.current_epoch][0] += 1

    monkeypatch.setattr(StopAwareRichProgressBar, "on_train_epoch_start", at_start)
    monkeypatch.setattr(StopAwareRichProgressBar, "on_train_batch_end", at_batch_end)
    run_in_process([o for o in toy_overrides if o != "trainer.enable_progress_bar=false"], tmp_path / "run",
                   "trainer.enable_progress_bar=true", *overrides)
    return {e: tuple(v) for e, v in seen.items()}


@pytest.mark.parametrize("train_rows, max_steps, expected", [
    # 80 rows = 10 batches of 8 an epoch = 5 optimizer steps; 7 steps = 10 batches then 4 (hand count)
    (80, 7, {0: (10, 10, 1), 1: (4, 4, 1)}),
    # 88 rows = 11 batches = 6 steps (the epoch's last batch ends a step alone); 12 steps = two whole epochs
    (88, 12, {0: (11, 11, 1), 1: (11, 11, 1)}),
])
def test_the_bar_counts_batches_with_gradient_accumulation(toy, tmp_path, monkeypatch, train_rows, max_steps,  # noqa: F811
                                                           expected):
    bars = _bars(toy, tmp_path, monkeypatch, "+trainer.accumulate_grad_batches=2", f"trainer.max_steps={max_steps}",
                 "trainer.max_epochs=5", f"data.max_train_samples={train_rows}")
    assert bars == expected
