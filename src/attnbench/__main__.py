"""``python -m attnbench ...`` = ``attnbench ...`` (:mod:`attnbench.cli`)."""

import sys

from attnbench.cli import main

sys.exit(main())
