"""Attention score functions, their discovery, and the multi-head module.

Importing this package imports every module in it (:func:`discover`), so each
built-in score function registers itself; a new one is one module here plus
one ``conf/attention/<name>.yaml``, with no edit to this file::

    from attnbench.attention import available, build_score_function
    available()  # ['additive', 'cosine', 'dot', 'euclidean', 'general', 'l2', 'scaled_dot']
    build_score_function({"_target_": "attnbench.attention.additive.AdditiveScore", "hidden_dim": 8}, 4, 32)

A built-in class is also importable from here by its class name
(``from attnbench.attention import AdditiveScore``), looked up in the registry.
"""

from attnbench.attention.base import ScoreFunction, masked_softmax, sdpa_attend
from attnbench.attention.multihead import MultiHeadAttention
from attnbench.attention.registry import (
    available,
    build_score_function,
    discover,
    get_score_class,
    import_score_class,
    score_classes,
)

discover()


def __getattr__(attr: str):
    """``attnbench.attention.<ClassName>`` for every registered score function class (PEP 562)."""
    for cls in score_classes().values():
        if cls.__name__ == attr:
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = [
    "MultiHeadAttention",
    "ScoreFunction",
    "available",
    "build_score_function",
    "discover",
    "get_score_class",
    "import_score_class",
    "masked_softmax",
    "score_classes",
    "sdpa_attend",
]
