"""Packages of the wheel: every package under src/, and the top-level conf/ as the package ``attnbench.conf``.

The configs stay at the repository's top level (``conf/``, where the design card and the README name them);
the wheel carries them as package data, so a non-editable install finds them with
``importlib.resources.files("attnbench.conf")`` (:func:`attnbench.config.config_dir`). pyproject.toml holds
everything else; this mapping is the one thing its ``[tool.setuptools]`` table cannot say (found packages plus
one mapped from outside ``src/``).
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages("src"), "attnbench.conf"],
    package_dir={"": "src", "attnbench.conf": "conf"},
    package_data={"attnbench.conf": ["*.yaml", "**/*.yaml"]},
)
