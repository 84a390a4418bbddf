"""data=assoc_recall: generated from its settings and a seed, disjoint splits, cached, one token per pair."""

from __future__ import annotations

import re

import pytest
import yaml

from attnbench.data import DataConfigError, TextClassificationDataModule
from attnbench.data.generated import assoc_recall, distinct_examples, split_sizes

from .conftest import REPO_ROOT

PAIR = re.compile(r"k(\d+)=v(\d+)")


def preset(**overrides) -> dict:
    """conf/data/assoc_recall.yaml over conf/data/sst2.yaml (its Hydra defaults), as plain keys."""
    data = yaml.safe_load((REPO_ROOT / "conf" / "data" / "sst2.yaml").read_text())
    data.update(yaml.safe_load((REPO_ROOT / "conf" / "data" / "assoc_recall.yaml").read_text()))
    for key in ("defaults", "_target_"):
        data.pop(key)
    return {**data, "local_dir": None, **overrides}


def parse(text: str) -> tuple[dict[int, int], int]:
    """``{key: value}`` of an example's pairs and its query key."""
    *pairs, query = text.split()
    assert re.fullmatch(r"k\d+=\?", query)
    found = [PAIR.fullmatch(p) for p in pairs]
    assert all(found)
    return {int(m[1]): int(m[2]) for m in found}, int(query[1:-2])


def test_examples_are_recall_questions_with_disjoint_splits():
    sizes = split_sizes(3000, 500, 0.25)
    assert sizes == {"train": 3000, "validation": 500, "test": 750}
    rows = assoc_recall(4, 8, 4, sizes, seed=7)
    identities = {}
    for split, data in rows.items():
        assert len(data["text"]) == sizes[split]
        for text, label in zip(data["text"], data["label"]):
            pairs, query = parse(text)
            assert len(pairs) == 4 == len(text.split()) - 1  # keys distinct within an example
            assert all(0 <= k < 8 and 0 <= v < 4 for k, v in pairs.items())
            assert label == pairs[query]
            identity = (frozenset(pairs.items()), query)  # the order of the pairs aside
            assert identities.setdefault(identity, split) == split
    per_split = {s: sum(v == s for v in identities.values()) for s in rows}
    assert per_split == sizes  # no example twice, within or across splits
    # a small task: 4 of 8 keys, 4 values -> 70 * 256 * 4 = 71,680 distinct examples; every class is there
    assert distinct_examples(4, 8, 4) == 71680 and set(rows["train"]["label"]) == {0, 1, 2, 3}


def test_generation_is_a_function_of_the_settings_and_the_seed():
    sizes = {"train": 200, "validation": 50, "test": 80}
    assert assoc_recall(8, 32, 16, sizes, 1) == assoc_recall(8, 32, 16, sizes, 1)
    assert assoc_recall(8, 32, 16, sizes, 1)["test"] != assoc_recall(8, 32, 16, sizes, 2)["test"]
    more = assoc_recall(8, 32, 16, {**sizes, "train": 400}, 1)  # test and validation drawn first: unchanged
    assert more["test"] == assoc_recall(8, 32, 16, sizes, 1)["test"]
    assert more["validation"] == assoc_recall(8, 32, 16, sizes, 1)["validation"]


def test_the_data_module_caches_it_with_one_token_per_pair(tmp_path):
    from tokenizers import Tokenizer

    args = preset(num_train=2000, val_size=200, test_size=300, cache_dir=str(tmp_path / "cache"))
    dm = TextClassificationDataModule(**args)
    dm.setup()
    assert dm.cache_hit is False and dm.label_names == [f"v{i}" for i in range(16)]
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [2000, 200, 300]
    tok = Tokenizer.from_file(str(dm.cache_dir / "tokenizer.json"))
    unk = tok.token_to_id("[UNK]")
    for split in ("train", "val", "test"):
        for ids in dm.splits[split].input_ids:
            assert len(ids) == 9 and unk not in ids  # 8 pair words and the query, each one token
    row = dm.splits["test"]
    pairs, query = parse(tok.decode(row.input_ids[0]))
    assert dm.label_names[row.labels[0]] == f"v{pairs[query]}"
    again = TextClassificationDataModule(**args)
    again.setup()
    assert again.cache_hit is True and again.cache_dir == dm.cache_dir
    assert again.splits["test"].input_ids == dm.splits["test"].input_ids
    for change in ({"num_pairs": 6}, {"num_values": 8}, {"split_seed": 5}, {"num_train": 1500}):
        assert TextClassificationDataModule(**{**args, **change})._locate()[0] != dm.cache_dir


@pytest.mark.parametrize("overrides, message", [
    ({"num_pairs": 40}, "data.num_pairs=40 must be <= data.num_keys=32"),
    ({"num_values": 1}, "data.num_values must be an integer >= 2 for data.generator=assoc_recall, got 1"),
    ({"num_pairs": 2, "num_keys": 4, "num_values": 2}, "assoc_recall: 43,000 rows asked (train 40,000, validation "
                                                       "1,000, test 2,000) but only 48 distinct examples exist"),
    ({"max_length": 8}, "data.max_length=8 cuts assoc_recall examples of 9 words"),
    ({"generator": "copying"}, "data.generator must be one of assoc_recall or null, got 'copying'"),
])
def test_settings_that_cannot_make_the_task_are_refused(overrides, message):
    with pytest.raises(DataConfigError) as err:
        TextClassificationDataModule(**preset(**overrides))
    assert message in str(err.value)


@pytest.mark.slow  # 2-5 min on one core: CI's slow step runs it
def test_scaled_dot_learns_recall_through_train_py(tmp_path, data_dir, cache_dir):
    """The documented command (docs/data.md: Associative recall), 1,875 steps: scaled_dot reads the query's pair.

    A shorter schedule is no shortcut: with 600 steps the cosine decay ends before the lookup forms (0.15)."""
    import json
    import subprocess
    import sys

    from .conftest import train_env

    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "train.py"), "data=assoc_recall", "model=recall", "attention=scaled_dot",
         "logger=csv", "trainer.enable_progress_bar=false", f"hydra.run.dir={run}"],
        cwd=tmp_path, env=train_env(data_dir, cache_dir), capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["data"] == "assoc_recall" and metrics["train/steps_done"] == 1875
    assert metrics["test/acc"] >= 0.95, metrics["test/acc"]
