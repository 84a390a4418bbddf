"""Attention score functions, their registry, and the multi-head module.

Importing this package registers every built-in score function::

    from attnbench.attention import available, build_score_function
    available()  # ['additive', 'cosine', 'dot', 'euclidean', 'general', 'l2', 'scaled_dot']
"""

from attnbench.attention import additive, cosine, dot, euclidean, general, l2, scaled_dot  # noqa: F401  (register)
from attnbench.attention.additive import AdditiveScore
from attnbench.attention.base import ScoreFunction, masked_softmax, sdpa_attend
from attnbench.attention.cosine import CosineScore
from attnbench.attention.dot import DotScore
from attnbench.attention.euclidean import EuclideanScore
from attnbench.attention.general import GeneralScore
from attnbench.attention.l2 import L2Score
from attnbench.attention.multihead import MultiHeadAttention
from attnbench.attention.registry import available, build_score_function, get_score_class, register
from attnbench.attention.scaled_dot import ScaledDotScore

__all__ = [
    "AdditiveScore",
    "CosineScore",
    "DotScore",
    "EuclideanScore",
    "GeneralScore",
    "L2Score",
    "MultiHeadAttention",
    "ScaledDotScore",
    "ScoreFunction",
    "available",
    "build_score_function",
    "get_score_class",
    "masked_softmax",
    "register",
    "sdpa_attend",
]
