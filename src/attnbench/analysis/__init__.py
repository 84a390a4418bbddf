"""What runs are read into: the report (:mod:`~attnbench.analysis.report`, ``attnbench report``) and its statistics
(:mod:`~attnbench.analysis.stats`), the docs' generated tables (:mod:`~attnbench.analysis.tables`, ``attnbench
tables``) and the W&B summary run (:mod:`~attnbench.analysis.wandb_report`). Training never imports this package."""
