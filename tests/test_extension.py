"""The extension point keeps its promise: a score function outside the package is one module plus one YAML."""

from __future__ import annotations

import pytest

import json
import math
import os
import subprocess
import sys
import textwrap

import torch

from attnbench.attention.reference import reference_attention

from .conftest import REPO_ROOT, train_env

# A score function as a user writes it in their own package: the negative Manhattan (L1) distance, scaled like
# scaled_dot. Only `scores` (and, for the float64 check, `reference_scores`) are written; `attend` is the base
# class's definition.
MODULE = '''
"""-||q - k||_1 / sqrt(d): the negative Manhattan distance, as a user's own score function."""
import math

from attnbench.attention import ScoreFunction


class ManhattanScore(ScoreFunction):
    name = "my_score"

    def scores(self, query, key):
        return -(query.unsqueeze(-2) - key.unsqueeze(-3)).abs().sum(-1) / math.sqrt(self.head_dim)

    def reference_scores(self, query, key):
        return -(query.unsqueeze(-2) - key.unsqueeze(-3)).abs().sum(-1) / math.sqrt(query.shape[-1])
'''
YAML = """\
# -||q - k||_1 / sqrt(head_dim), from outside the attnbench package
_target_: mypkg.scores.ManhattanScore
name: my_score
"""


def _write_extension(root):
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "scores.py").write_text(textwrap.dedent(MODULE))
    (root / "conf" / "attention").mkdir(parents=True)
    (root / "conf" / "attention" / "my_score.yaml").write_text(YAML)


@pytest.mark.slow
def test_out_of_package_score_function_builds_and_matches_its_formula(tmp_path):
    """Built from its YAML in a fresh interpreter (so this session's registry stays the package's own)."""
    _write_extension(tmp_path)
    code = textwrap.dedent(f"""
        import torch
        from omegaconf import OmegaConf
        from attnbench.attention import available, build_score_function
        from attnbench.attention.reference import reference_attention
        fn = build_score_function(OmegaConf.load({str(tmp_path / 'conf/attention/my_score.yaml')!r}), 2, 4).double()
        assert type(fn).__module__ == "mypkg.scores" and fn.name == "my_score" and "my_score" in available()
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
        mask = torch.zeros(2, 5, dtype=torch.bool); mask[1, 3:] = True
        out = fn.attend(q, k, v, mask)
        torch.testing.assert_close(out, reference_attention(fn, q, k, v, mask), rtol=0, atol=1e-12)
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT / "src")])}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_manhattan_by_hand():
    """The module's formula itself, against a count by hand (so the check above compares against a right formula)."""
    namespace: dict = {}
    exec(textwrap.dedent(MODULE).replace("name = \"my_score\"", "name = \"\""), namespace)  # nameless: not registered
    fn = namespace["ManhattanScore"](n_heads=1, head_dim=4)
    q = torch.tensor([[[[1.0, 2.0, 0.0, -1.0]]]])
    k = torch.tensor([[[[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 0.0, -1.0]]]])
    # |1|+|2|+|0|+|-1| = 4 -> -4/√4 = -2; identical vectors -> 0
    torch.testing.assert_close(fn.scores(q, k), torch.tensor([[[[-2.0, 0.0]]]]), rtol=0, atol=0)
    v = torch.tensor([[[[1.0], [3.0]]]])
    want = (math.exp(-2.0) * 1.0 + 1.0 * 3.0) / (math.exp(-2.0) + 1.0)  # softmax([-2, 0]) · [1, 3]
    assert math.isclose(float(reference_attention(fn, q, k, v)), want, rel_tol=1e-12)


@pytest.mark.slow
def test_out_of_package_score_function_trains_through_the_search_path(tmp_path, data_dir, cache_dir):
    """`python train.py attention=my_score hydra.searchpath=[file://...]`: one module + one YAML, no other edit."""
    _write_extension(tmp_path)
    out = tmp_path / "run"
    env = train_env(data_dir, cache_dir)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "train.py", "attention=my_score", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
         "model=tiny", "trainer.max_steps=5", "data.max_train_samples=160", "data.max_eval_samples=64",
         "data.batch_size=16", "trainer.enable_progress_bar=false", "logger=csv", f"hydra.run.dir={out}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["attention"] == "my_score"
    assert 0.0 <= metrics["test/acc"] <= 1.0 and "val/acc" in metrics
    config = (out / ".hydra" / "config.yaml").read_text()
    assert "_target_: mypkg.scores.ManhattanScore" in config


BUGGY_MODULE = '''
from torch import nn

from attnbench.attention import ScoreFunction


class BuggyScore(ScoreFunction):
    name = "buggy_score"

    def __init__(self, n_heads, head_dim, width: int = 3):
        super().__init__(n_heads, head_dim)
        self.proj = nn.Linear(head_dim, width, bias=undefined_in_my_constructor)  # the user's bug

    def scores(self, query, key):
        return query @ key.transpose(-2, -1)
'''


@pytest.mark.slow
def test_constructor_bug_of_an_out_of_package_score_function_shows_its_own_traceback_on_the_command_line(tmp_path):
    """`python train.py attention=buggy_score hydra.searchpath=[...]` with a NameError in the class's __init__.

    Before: one line, `Error: Error in call to target 'attnbench.models.module.TextClassifierModule':
    NameError(...) full_key: module`, with no file or line of the bug, and failure.json said
    InstantiationException. After: Python's traceback ending in the user's own line, failure.json names NameError.
    """
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "buggy.py").write_text(textwrap.dedent(BUGGY_MODULE))
    (tmp_path / "conf" / "attention").mkdir(parents=True)
    (tmp_path / "conf" / "attention" / "buggy_score.yaml").write_text(
        "_target_: mypkg.buggy.BuggyScore\nname: buggy_score\nwidth: 3\n")
    out = tmp_path / "run"
    env = train_env(tmp_path / "no-data", tmp_path / "cache")  # the model is checked before any data work
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "train.py", "attention=buggy_score", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
         "model=tiny", "logger=csv", f"hydra.run.dir={out}"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback (most recent call last)" in proc.stderr, proc.stderr[-3000:]
    last_frames = proc.stderr.strip().splitlines()[-4:]
    assert any(str(tmp_path / "mypkg" / "buggy.py") in line for line in last_frames), proc.stderr[-3000:]
    assert proc.stderr.strip().endswith("NameError: name 'undefined_in_my_constructor' is not defined")
    failure = json.loads((out / "failure.json").read_text())
    assert failure["error_type"] == "NameError", failure


def test_help_with_a_search_path_lists_the_out_of_package_score_function(tmp_path):
    """`python train.py hydra.searchpath=[file://<dir>] --help` lists my_score among the attention options (the
    option that trains with the same search path), beside the shipped ones; other groups keep their options."""
    _write_extension(tmp_path)
    (tmp_path / "conf" / "data").mkdir()
    (tmp_path / "conf" / "data" / "my_data.yaml").write_text("name: my_data\n")
    proc = subprocess.run([sys.executable, "train.py", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "--help"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    groups = proc.stdout.split("== Config groups", 1)[1].split("== Config (", 1)[0]
    lines = {line.split(":", 1)[0]: line.split(":", 1)[1].strip().split(", ") for line in groups.splitlines()
             if line.startswith(("attention:", "data:", "model:"))}
    shipped = sorted(p.stem for p in (REPO_ROOT / "conf" / "attention").glob("*.yaml"))
    assert lines["attention"] == sorted([*shipped, "my_score"])
    assert "my_data" in lines["data"] and "sst2" in lines["data"]
    assert lines["model"] == sorted(p.stem for p in (REPO_ROOT / "conf" / "model").glob("*.yaml"))
    plain = subprocess.run([sys.executable, "train.py", "--help"], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=120, check=False)
    assert f"attention: {', '.join(shipped)}\n" in plain.stdout
