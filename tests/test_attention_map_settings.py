"""``callbacks.attention_maps.{n_sentences,min_tokens,max_tokens}`` reach the sentences drawn (breaker round 2, #10).

The callback is built from the composed config (conf/callbacks/default.yaml plus overrides, as a run builds it) and
draws from a test split of known lengths; the rows drawn must be the first ones of the configured lengths, counted
here by hand, for the defaults and for overridden values that pick other rows.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hydra.utils import instantiate

from .test_faults import compose_cfg
from .test_viz import _module, _Tok

LENGTHS = (6, 2, 5, 3, 9, 2, 12, 4)  # tokens of the test rows 0..7


@pytest.mark.parametrize("overrides, rows", [
    ([], [0, 2]),  # defaults: 2 sentences of 5..16 tokens
    (["callbacks.attention_maps.min_tokens=2", "callbacks.attention_maps.max_tokens=3"], [1, 3]),
    (["callbacks.attention_maps.min_tokens=4", "callbacks.attention_maps.max_tokens=5",
      "callbacks.attention_maps.n_sentences=3"], [2, 7, 1]),  # 2 of 4..5 tokens, then the shortest other (2 tokens)
    (["callbacks.attention_maps.min_tokens=9", "callbacks.attention_maps.max_tokens=12"], [4, 6]),
])
def test_the_configured_lengths_and_count_pick_the_sentences(tmp_path, overrides, rows):
    callback = instantiate(compose_cfg(overrides).callbacks.attention_maps)
    split = [([10 + j for j in range(n)], i % 2) for i, n in enumerate(LENGTHS)]
    trainer = SimpleNamespace(datamodule=SimpleNamespace(splits={"test": split}, tokenizer=_Tok()),
                              default_root_dir=str(tmp_path), is_global_zero=True, loggers=[], global_step=1)
    callback.draw(trainer, _module("dot", n_layers=1, vocab=40))
    drawn = json.loads((tmp_path / "attention_maps.json").read_text())["sentences"]
    assert [s["row"] for s in drawn] == sorted(rows)
    assert [len(s["ids"]) for s in drawn] == [LENGTHS[r] for r in sorted(rows)]
