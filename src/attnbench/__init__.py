"""attnbench: attention score functions measured (accuracy, throughput, memory) in one Transformer classifier.

Packages: ``attention`` (score functions), ``models`` (the network, the LightningModule, the optimizer),
``callbacks`` (Lightning callbacks), ``run`` (the command line and one training job), ``conf`` (the Hydra
configs, installed from the repository's top-level ``conf/``); ``config`` is the config schema.
"""
