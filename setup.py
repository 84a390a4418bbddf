"""Packages of the wheel: every package under src/, and the top-level conf/ as the package ``attnbench.conf``.

The configs stay at the repository's top level (``conf/``, where the design card and the README name them);
the wheel carries them as package data, so a non-editable install finds them with
``importlib.resources.files("attnbench.conf")`` (:func:`attnbench.config.config_dir`). pyproject.toml holds
everything else; this mapping is the one thing its ``[tool.setuptools]`` table cannot say (found packages plus
one mapped from outside ``src/``).
"""

from pathlib import Path

from setuptools import find_packages, setup

# conf/ and its group folders (conf/attention, conf/hydra/help, ...) as attnbench.conf, attnbench.conf.attention, ...
CONF = ["attnbench.conf", *("attnbench.conf." + ".".join(d.relative_to("conf").parts)
                            for d in sorted(Path("conf").rglob("*")) if d.is_dir() and d.name != "__pycache__")]

setup(
    packages=[*find_packages("src"), *CONF],
    package_dir={"": "src", **{name: name.replace("attnbench.", "", 1).replace(".", "/") for name in CONF}},
    # setup() and pyproject's [tool.setuptools.package-data] do not merge (the pyproject table wins): all
    # package data is listed here -- the configs, the packaged default datasets (attnbench.data.sources), and the
    # C++ source of the CPU inference kernels, compiled on first use (attnbench.attention.cpu_kernels)
    package_data={**{name: ["*.yaml"] for name in CONF},
                  "attnbench.data": ["default/*/*.parquet", "default/README.md"],
                  "attnbench.attention": ["*.cpp", "*.h"]},
)
