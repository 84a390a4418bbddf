"""``trainer.accumulate_grad_batches=k``: every optimizer step takes the mean gradient of its window of batches,
also the epoch's last window of fewer than k batches (Lightning divides every batch's loss by k, so that window
alone got r/k of its mean: pytorch-lightning#19987). Checked against the steps computed by hand."""

from __future__ import annotations

import copy

import pytorch_lightning as pl
import pytest
import torch
from torch.utils.data import DataLoader

from attnbench.models.module import TextClassifierModule

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32, "dropout": 0.0, "attn_dropout": 0.0}
LR = 0.5


def _batches(n_batches: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    sizes = [4] * (n_batches - 1) + [3]  # the last batch smaller, as a dataset's tail is
    return [{"input_ids": torch.randint(1, 30, (b, 6), generator=g), "padding_mask": torch.zeros(b, 6, dtype=torch.bool),
             "labels": torch.randint(0, 2, (b,), generator=g)} for b in sizes]


class _SGDModule(TextClassifierModule):
    def configure_optimizers(self):  # plain SGD: the update is -LR times the gradient, nothing else
        return torch.optim.SGD(self.parameters(), lr=LR)


def _hand_steps(module: TextClassifierModule, batches, k: int) -> dict[str, torch.Tensor]:
    """SGD over windows of k batches (the last one shorter), each step -LR times the window's mean gradient."""
    params = dict(module.named_parameters())
    for start in range(0, len(batches), k):
        window = batches[start:start + k]
        module.zero_grad()
        for batch in window:
            (module._step(batch)[0] / len(window)).backward()
        with torch.no_grad():
            for p in params.values():
                if p.grad is not None:
                    p -= LR * p.grad
    return {name: p.detach().clone() for name, p in params.items()}


@pytest.mark.parametrize("n_batches, k", [(5, 3), (7, 3), (6, 3), (3, 4)])
def test_each_window_steps_with_its_mean_gradient(n_batches, k):
    torch.manual_seed(0)
    module = _SGDModule(vocab_size=30, num_classes=2, max_length=6, pad_id=0, model=TINY,
                        attention={"name": "scaled_dot"}, optim={"lr": LR})
    want = _hand_steps(copy.deepcopy(module), _batches(n_batches), k)
    trainer = pl.Trainer(max_epochs=1, accumulate_grad_batches=k, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0, accelerator="cpu", deterministic=True)
    trainer.fit(module, train_dataloaders=DataLoader(_batches(n_batches), batch_size=None))
    for name, p in module.named_parameters():
        torch.testing.assert_close(p.detach(), want[name], rtol=0, atol=1e-6, msg=name)
