"""The network (``model``), its LightningModule (``module``) and the optimizer with its schedule (``optim``)."""
