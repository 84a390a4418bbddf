"""The command line a new user meets first."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException

from .conftest import REPO_ROOT


def _run(*args):
    return subprocess.run([sys.executable, "train.py", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=180, check=False)


def test_help_lists_the_score_functions():
    proc = _run("--help")
    assert proc.returncode == 0
    shipped = sorted(path.stem for path in (REPO_ROOT / "conf" / "attention").glob("*.yaml"))  # one YAML each
    assert {"additive", "cosine", "dot", "euclidean", "general", "l2", "scaled_dot"} <= set(shipped)
    assert f"attention: {', '.join(shipped)}" in proc.stdout
    assert "python train.py attention=additive" in proc.stdout


def test_unknown_score_function_lists_the_valid_ones():
    proc = _run("attention=bilinear")
    assert proc.returncode != 0
    assert "Could not find 'attention/bilinear'" in proc.stderr
    assert "scaled_dot" in proc.stderr and "additive" in proc.stderr


@pytest.mark.parametrize("override, message", [
    ("model.n_heads=3", "d_model=128 is not divisible by n_heads=3"),
    ("data.batch_size=0", "data.batch_size must be an integer >= 1, got 0"),
    ("model.dropout=1.5", "model.dropout must be in [0, 1), got 1.5"),
    ("seed=abc", "seed must be an integer, got 'abc'"),  # refused by the schema while composing
    ("optim.lr=fast", "optim.lr must be a number > 0, got 'fast'"),
])
@pytest.mark.slow
def test_bad_config_fails_fast_with_one_message(tmp_path, override, message):
    proc = _run(override, "logger=none", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 1
    out = " ".join((proc.stdout + proc.stderr).split())  # the console log wraps long lines
    assert message in out
    assert "Traceback" not in out
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize("group, choice, options", [
    ("data", "sst3", "Available options in 'data':\n\tassoc_recall\n\tfiles\n\thub\n\timdb\n\tsst2\n\ttrec"),
    ("model", "huge", "Available options in 'model':\n\tbase\n\trecall\n\tsmall\n\ttiny"),
])
def test_unknown_data_or_model_lists_the_options(group, choice, options):
    """Hydra's own message (printed as is by the CLI): what was asked for and every valid choice."""
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"), \
            pytest.raises(MissingConfigException) as err:
        compose("train", overrides=[f"{group}={choice}"])
    assert f"Could not find '{group}/{choice}'" in str(err.value) and options in str(err.value)


def test_misspelt_key_names_the_closest_keys(tmp_path):
    proc = _run("model.d_modle=64", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 1
    message = proc.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith("Error: Unknown config key 'model.d_modle': did you mean model.d_model? 'model' has: d_model, "
                              "n_heads, ")
    assert message.endswith("pooling. (To add a new key on purpose, write +model.d_modle=...)")
    assert not (tmp_path / "run").exists()


def test_top_level_typo_points_one_level_down():
    proc = _run("lr=0.01")
    assert proc.returncode == 1
    assert "Unknown config key 'lr': did you mean optim.lr?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_multirun_with_cfg_says_how_to_preview_a_sweep():
    proc = _run("-m", "experiment=compare_cpu", "--cfg", "job")
    assert proc.returncode == 2
    assert "Only one of --run, --multirun" in proc.stderr and "--cfg hydra" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cross_validation_jobs_are_named_by_their_fold():
    """Issue 38: every job of `-m data.fold=0,...,k-1` was named scaled_dot-mr-s0; the fold is in the name."""
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        names = [compose("train", overrides=extra).run_name for extra in (
            [], ["data.test_split=null", "data.cv_folds=10", "data.fold=7"])]
    assert names == ["scaled_dot-sst2-s0", "scaled_dot-sst2-fold7-s0"]


def test_a_model_config_error_answers_before_any_data_or_model_work(tmp_path):
    """Issue 38: `model.n_heads=3` answered after 18.9 s (data preflight, torch, the model), other config errors in
    1-2 s: the schema's checks hold the heads' rule, so it answers before torch loads, with the model's words."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "train.py", "model.n_heads=3", "logger=none",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=180, check=False)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert errors == ["Error: invalid config: d_model=128 is not divisible by n_heads=3; set model.d_model to a "
                      "multiple of model.n_heads (or set model.head_dim)."]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "attnbench.data.sources" not in imported
