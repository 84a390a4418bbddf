"""The "best" checkpoint is the epoch of the highest ``val/acc``, and ``test/f1_macro`` is the macro-averaged F1 of
its predictions (breaker round 2, #7 and #5).

One in-process ``train()`` on the toy dataset of test_faults.py, 4 epochs at a learning rate (1e-5) low enough
that ``val/acc`` is not monotone (measured: 1.0, 0.0, 0.0, 0.0) and the test predictions are imperfect
(test/acc 0.692, macro-F1 0.690), and 13 test rows (``data.max_eval_samples``), an odd count, so the two classes
are unbalanced: a checkpoint of the lowest val/acc, a micro-averaged F1 (= accuracy) or a class-weighted one
differs from the right value. The references are computed here: the epochs' ``val/acc`` from csv/metrics.csv,
and macro-F1 from the checkpoint's predictions, one unpadded sentence at a time, per class 2·TP/(2·TP+FP+FN)
averaged over the classes (the definition torchmetrics' ``MulticlassF1Score(average="macro")`` documents).
"""

from __future__ import annotations

import csv
import json
import re

import pytest
import torch
from hydra.utils import instantiate

from .test_faults import compose_cfg, run_in_process, toy  # noqa: F401 - toy is a fixture used here

OVERRIDES = ["trainer.max_epochs=4", "optim.lr=1e-5", "data.max_eval_samples=13"]


@pytest.fixture(scope="module")
def dipping_run(toy, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("best") / "run"
    run_in_process(toy, out, *OVERRIDES)
    metrics = json.loads((out / "metrics.json").read_text())
    with open(out / "csv" / "metrics.csv", newline="") as f:
        val = {int(r["epoch"]): float(r["val/acc"]) for r in csv.DictReader(f) if r.get("val/acc")}
    return metrics, val


def test_the_best_checkpoint_is_the_epoch_of_the_highest_val_acc(dipping_run):
    metrics, val = dipping_run
    assert sorted(val) == [0, 1, 2, 3]
    best = max(val.values())
    # the test can tell max from min and from "last": val/acc is not the same every epoch and falls after its peak
    assert min(val.values()) < best and val[3] < best, val
    match = re.search(r"epoch(\d+)-step\d+-val_acc([0-9.]+)\.ckpt$", metrics["best_checkpoint"])
    assert match, metrics["best_checkpoint"]
    epoch, named = int(match.group(1)), float(match.group(2))
    assert val[epoch] == best  # the checkpoint's epoch has the highest val/acc
    assert epoch == min(e for e, acc in val.items() if acc == best)  # ties: the first such epoch is kept
    assert named == pytest.approx(best, abs=1e-4)  # the filename shows 4 decimals
    assert metrics["val/acc_best"] == pytest.approx(best, abs=1e-6)


def test_f1_macro_is_the_macro_average_over_classes_of_the_best_checkpoints_predictions(toy, dipping_run):  # noqa: F811
    from attnbench.models.module import TextClassifierModule

    metrics, _ = dipping_run
    cfg = compose_cfg([*toy, "logger=csv", *OVERRIDES])
    dm = instantiate(cfg.data, seed=int(cfg.seed))
    dm.prepare_data()
    dm.setup("test")
    module = TextClassifierModule.load_from_checkpoint(metrics["best_checkpoint"], map_location="cpu",
                                                      weights_only=False).eval()
    pairs = []
    with torch.no_grad():
        for ids, label in dm.splits["test"]:
            x = torch.tensor([list(ids)], dtype=torch.long)
            pairs.append((int(module(x, torch.zeros_like(x, dtype=torch.bool)).argmax(-1).item()), int(label)))
    f1 = []
    for c in range(dm.num_classes):
        tp = sum(p == c and y == c for p, y in pairs)
        fp = sum(p == c and y != c for p, y in pairs)
        fn = sum(p != c and y == c for p, y in pairs)
        f1.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    macro = sum(f1) / len(f1)
    accuracy = sum(p == y for p, y in pairs) / len(pairs)
    support = [sum(y == c for _, y in pairs) for c in range(dm.num_classes)]
    weighted = sum(f * n for f, n in zip(f1, support)) / len(pairs)
    assert len(pairs) == 13 and len(set(support)) > 1  # unbalanced classes
    # the wrong averages are told apart: micro-F1 (= accuracy) and the support-weighted mean
    assert abs(macro - accuracy) > 1e-3 and abs(macro - weighted) > 1e-3, (macro, accuracy, weighted)
    assert metrics["test/acc"] == pytest.approx(accuracy, abs=1e-6)
    assert metrics["test/f1_macro"] == pytest.approx(macro, abs=1e-6)  # float32 rounding only
