"""Pictures of what the score functions do: attention maps (heatmaps of the attention weights) and the Lightning
callback that draws them at the end of a run.

- :mod:`attnbench.viz.attention_maps`: the weights of every layer and head on a few test sentences, drawn as
  heatmaps with the tokens on the axes; side by side across score functions for ``attnbench report``.
- :class:`AttentionMapLogger`: after testing, the run's maps to ``attention_maps.png`` in the run dir and to
  W&B as an image (``callbacks.attention_maps`` in ``conf/callbacks/default.yaml``).

Importing this package imports neither matplotlib nor wandb; they load when a picture is drawn.
"""

from attnbench.viz.callback import AttentionMapLogger

__all__ = ["AttentionMapLogger"]
