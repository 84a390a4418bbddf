"""Entry point: `python train.py attention=additive` (see `python train.py --help`)."""

from attnbench.run.cli import main

if __name__ == "__main__":
    main()
