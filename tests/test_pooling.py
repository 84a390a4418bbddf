"""model.pooling=last: the classifier reads the last non-padding token (the query of data=assoc_recall)."""

from __future__ import annotations

import pytest
import torch

from attnbench.attention import available
from attnbench.models.model import POOLINGS

from . import test_model


@pytest.mark.parametrize("score", available())
def test_last_pooling_ignores_padding_and_survives_an_all_padding_row(score):
    test_model.test_padding_does_not_change_logits(score, "last")
    test_model.test_fully_padded_sequence_gives_finite_logits_and_grads(score, "last")


def test_last_pooling_reads_the_last_real_token_only():
    """The logits are the head of the final-normed state at position length - 1, and every earlier token reaches
    them only through attention: the gradient of the logits reaches the last token's embedding directly."""
    assert "last" in POOLINGS
    model = test_model._model("scaled_dot", "last")
    states = {}
    model.final_norm.register_forward_hook(lambda mod, inp, out: states.__setitem__("x", out))
    ids = torch.randint(1, 50, (3, 7))
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[0, 4:] = True  # lengths 4, 7, 1
    mask[2, 1:] = True
    logits = model(ids, mask)
    x = states["x"]
    expected = model.head(torch.stack([x[0, 3], x[1, 6], x[2, 0]]))
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    # a change to a token after the last real one (padding) changes nothing; to the last real one, the logits
    changed = ids.clone()
    changed[0, 3] = (ids[0, 3] % 49) + 1
    assert not torch.allclose(model(changed, mask)[0], logits[0])
