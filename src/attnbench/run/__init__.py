"""One training job (``train``) and everything around it: command line, Hydra callbacks, outputs, loggers."""
