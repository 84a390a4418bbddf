"""The configs reach every install: the wheel carries conf/ as attnbench.conf, and an installed (non-editable)
attnbench finds them there, from any directory (issue 11)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO_ROOT


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(REPO_ROOT), "-w", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("attnbench-*.whl")
    return path


@pytest.mark.slow
def test_the_wheel_carries_every_config_file(wheel):
    shipped = {n.removeprefix("attnbench/conf/") for n in zipfile.ZipFile(wheel).namelist()
               if n.startswith("attnbench/conf/") and n.endswith(".yaml")}
    in_repo = {str(p.relative_to(REPO_ROOT / "conf")) for p in (REPO_ROOT / "conf").rglob("*.yaml")}
    assert "train.yaml" in in_repo and "attention/scaled_dot.yaml" in in_repo
    assert shipped == in_repo


@pytest.mark.slow
def test_an_installed_attnbench_finds_its_configs_from_any_directory(wheel, tmp_path):
    """Installed with pip (not editable) into a folder of its own and run from an unrelated directory: the configs
    come from the installed package, and the command line composes train.yaml from there."""
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}  # not the checkout's src/
    script = ("import sys; from attnbench.config import config_dir; print(config_dir()); "
              "sys.argv = ['attnbench-train', 'attention=dot', 'optim.lr=0.002', '--cfg', 'job']; "
              "from attnbench.run.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=elsewhere,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert Path(lines[0]) == site / "attnbench" / "conf"
    assert "  name: dot" in lines and "  lr: 0.002" in lines  # composed: the group choice and the schema's optim


@pytest.mark.slow
def test_the_wheel_carries_the_packaged_default_data(wheel):
    """The main job trains on a fresh machine with nothing exported (issue 12): the packaged SST-2 and TREC
    Parquet files are in the wheel, byte for byte."""
    packaged = REPO_ROOT / "src" / "attnbench" / "data" / "default"
    in_repo = {str(p.relative_to(packaged)): p.read_bytes() for p in packaged.rglob("*.parquet")}
    assert {"sst2/train.parquet", "sst2/validation.parquet", "trec/train.parquet", "trec/test.parquet"} <= set(in_repo)
    with zipfile.ZipFile(wheel) as z:
        shipped = {n.removeprefix("attnbench/data/default/"): z.read(n) for n in z.namelist()
                   if n.startswith("attnbench/data/default/") and n.endswith(".parquet")}
    assert shipped == in_repo


@pytest.mark.slow
def test_the_wheel_carries_the_cpu_kernel_source(wheel):
    """An installed attnbench can build its CPU inference kernels: the C++ source is in the wheel, byte for byte,
    next to the module that compiles it."""
    source = REPO_ROOT / "src" / "attnbench" / "attention" / "cpu_kernels.cpp"
    with zipfile.ZipFile(wheel) as z:
        assert z.read("attnbench/attention/cpu_kernels.cpp") == source.read_bytes()
        assert "attnbench/attention/cpu_kernels.py" in z.namelist()


@pytest.mark.slow
def test_the_wheel_declares_the_attnbench_command(wheel):
    """``pip install .`` gives ``attnbench`` (every subcommand) beside ``attnbench-train``."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        entry_points = z.read(name).decode().splitlines()
    assert "attnbench = attnbench.cli:main" in entry_points
    assert "attnbench-train = attnbench.run.cli:main" in entry_points


@pytest.mark.slow
def test_an_installed_attnbench_runs_its_subcommands_from_any_directory(wheel, tmp_path):
    """Installed (not editable) and run from an unrelated directory: ``attnbench --help`` lists every subcommand
    without importing torch, each subcommand answers its own ``--help``, and ``tables`` outside a checkout says
    what to change instead of writing anything."""
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def attnbench(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
        argv = ["-c", code] if code else ["-m", "attnbench", *args]
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, cwd=elsewhere,
                              env=env)

    top = attnbench(code="import sys; from attnbench.cli import main; main(['--help']); "
                         "print('torch imported:', 'torch' in sys.modules); import attnbench.cli as c; print(c.__file__)")
    assert top.returncode == 0, top.stderr[-3000:]
    lines = top.stdout.splitlines()
    assert {"train", "report", "reproduce", "bench", "tables"} <= {line.split()[0] for line in lines if line[:2] == "  "}
    assert "torch imported: False" in lines and Path(lines[-1]).is_relative_to(site)
    for command, says in ((["report"], "--baseline"), (["reproduce"], "--dry-run"), (["tables"], "--check"),
                          (["bench", "attention"], "--quick"), (["bench", "gpu-check"], "--dry-run")):
        proc = attnbench(*command, "--help")
        assert proc.returncode == 0 and says in proc.stdout, (command, proc.stderr[-2000:])
        assert proc.stdout.startswith(f"usage: attnbench {' '.join(command)}"), proc.stdout[:200]
    refused = attnbench("tables", "--check")
    assert refused.returncode == 2 and "has no docs/: run it from the repository's root" in refused.stderr
    unknown = attnbench("reprodce")
    assert unknown.returncode == 2 and "did you mean 'reproduce'?" in unknown.stderr
    assert list(elsewhere.iterdir()) == []  # nothing written where it ran


def test_attnbench_train_is_the_hydra_app_of_train_py(tmp_path):
    """``attnbench train <overrides>`` hands its arguments to the same Hydra app as ``python train.py``: the
    composed job config (``--cfg job``) is the same, byte for byte."""
    args = ["attention=additive", "trainer.max_steps=20", "seed=3", "--cfg", "job"]
    shim = subprocess.run([sys.executable, str(REPO_ROOT / "train.py"), *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    command = subprocess.run([sys.executable, "-m", "attnbench", "train", *args], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
    assert shim.returncode == 0 and command.returncode == 0, shim.stderr[-2000:] + command.stderr[-2000:]
    assert "  name: additive" in command.stdout.splitlines() and "seed: 3" in command.stdout.splitlines()
    assert command.stdout == shim.stdout
