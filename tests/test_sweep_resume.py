"""A sweep resumed in its sweep dir: its jobs are matched by their overrides (as sets), whatever order the values
or the overrides are given in; a sweep with other jobs is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnbench.errors import OutputDirTaken
from attnbench.run.hydra_callbacks import check_same_sweep, run_as_recorded, sweep_jobs

from .conftest import REPO_ROOT, train_env

SWEEP = ["logger=none", "attention=additive,scaled_dot", "seed=0,1"]
#: the dirs Hydra's basic sweeper gives SWEEP's jobs (``${hydra.job.num}_${run_name}``), with a test/acc each
JOB_DIRS = {"0_additive-sst2-s0": 0.61, "1_additive-sst2-s1": 0.62, "2_scaled_dot-sst2-s0": 0.71,
            "3_scaled_dot-sst2-s1": 0.72}


def command(*overrides: str, params: dict | None = None):
    """What the sweep checks read of a multirun's config, as Hydra makes it."""
    sweeper = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "max_batch_size": None,
               "params": params}
    return OmegaConf.create({"hydra": {"overrides": {"task": list(overrides), "hydra": []}, "sweeper": sweeper}})


def finished_sweep(sweep: Path) -> Path:
    """A sweep dir of SWEEP whose four jobs finished (a multirun.yaml and a metrics.json per job)."""
    sweep.mkdir()
    OmegaConf.save(command(*SWEEP), sweep / "multirun.yaml")
    for name, acc in JOB_DIRS.items():
        (sweep / name).mkdir()
        loaded = {"train/tokens_per_sec": 900.0, "train/cpu_share": 0.45} if name.startswith("3_") else {}
        (sweep / name / "metrics.json").write_text(json.dumps({"test/acc": acc, **loaded}))
    return sweep


def tree(folder: Path) -> dict[str, str]:
    """The sha256 of every file under ``folder`` and every folder (as ``"dir"``)."""
    return {str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))}


def multirun(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    if env is None:
        env = {**os.environ, "WANDB_MODE": "offline"}
        env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "train.py", "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=env, timeout=600, check=False)


def test_the_same_jobs_in_any_order_are_the_same_sweep_and_get_their_numbers_back(tmp_path):
    """Values in another order, overrides in another order, another spelling of the same values (``range``,
    ``1e-3``/``0.001``) are the sweep the dir holds; the sweeper is then given the recorded definition, so it
    numbers every job (and so names its dir) as the first run did."""
    sweep = finished_sweep(tmp_path / "sweep")
    for same in (["seed=1,0", "attention=scaled_dot,additive", "logger=none"],
                 ["logger=none", "seed=range(0,2)", "attention=additive,scaled_dot", "launcher=cores"]):
        resumed = command(*same, "ckpt_path=last")
        recorded = check_same_sweep(resumed, sweep)
        assert recorded is not None
        run_as_recorded(resumed, recorded)
        assert list(resumed.hydra.overrides.task) == [*SWEEP, *same[3:], "ckpt_path=last"]
        assert sweep_jobs(resumed) == sweep_jobs(command(*SWEEP))
    lr = command("optim.lr=1e-3,2e-3", "seed=0")
    assert sweep_jobs(lr) == sweep_jobs(command("seed=0", "optim.lr=0.001,0.002"))
    # hydra.sweeper.params (an experiment's sweep) and the command line's values make one product
    assert sweep_jobs(command("seed=0,1", params={"attention": "additive,scaled_dot", "seed": "5"})) == [
        frozenset({"attention=additive", "seed=0"}), frozenset({"attention=additive", "seed=1"}),
        frozenset({"attention=scaled_dot", "seed=0"}), frozenset({"attention=scaled_dot", "seed=1"})]


@pytest.mark.parametrize("overrides, differ, also", [
    (["attention=additive,scaled_dot,dot", "seed=0,1"],
     "this command adds 2 job(s) (attention=dot seed=0; attention=dot seed=1).",
     "; run the added jobs as a new sweep (python train.py -m attention=dot logger=none seed=0,1) and report both "
     "(attnbench report {sweep} <its sweep dir>)."),
    (["attention=additive", "seed=0,1"],
     "this command leaves out 2 of its 4 (attention=scaled_dot seed=0; attention=scaled_dot seed=1).", "."),
    (["attention=additive,scaled_dot", "seed=1,2"],
     "this command adds 2 job(s) (attention=additive seed=2; attention=scaled_dot seed=2) and it leaves out 2 of "
     "its 4 (attention=additive seed=0; attention=scaled_dot seed=0).",
     "; run the added jobs as a new sweep (python train.py -m attention=additive,scaled_dot logger=none seed=2) "
     "and report both (attnbench report {sweep} <its sweep dir>)."),
])
def test_other_jobs_are_refused_naming_the_jobs_added_and_missing(tmp_path, overrides, differ, also):
    sweep = finished_sweep(tmp_path / "sweep")
    with pytest.raises(OutputDirTaken) as err:
        check_same_sweep(command("logger=none", *overrides, "ckpt_path=last"), sweep)
    assert str(err.value) == (
        f"{sweep} already holds a previous sweep's outputs (the sweep of `attention=additive,scaled_dot "
        f"logger=none seed=0,1`); it is never overwritten. A sweep dir holds one sweep: {differ[:-1]}. Resume it "
        f"with its own jobs (python train.py -m attention=additive,scaled_dot logger=none seed=0,1 ckpt_path=last "
        f"hydra.sweep.dir={sweep}){also.format(sweep=sweep)}")


def test_a_sweep_resumed_with_its_values_reordered_finds_each_job_in_its_own_dir(tmp_path):
    """End to end: the sweep resumed with its values and overrides in another order skips each finished job in
    its own dir (listed with that dir's test/acc, and its training rate marked disturbed where its CPU share says
    so), creates no dir and leaves every file as it was."""
    sweep = finished_sweep(tmp_path / "sweep")
    before = tree(sweep)
    proc = multirun("seed=1,0", "attention=scaled_dot,additive", "logger=none", "ckpt_path=last",
                    f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-6:] == [
        f"Sweep {sweep}: 4 jobs, 0 failed, 4 done before (skipped, results kept)",
        *(f"  done    {name}  test/acc {acc:.4f}  train tokens/s -  test tokens/s -" for name, acc in
          list(JOB_DIRS.items())[:3]),
        "  done    3_scaled_dot-sst2-s1  test/acc 0.7200  train tokens/s 900 (disturbed: cpu share 0.45)  "
        "test tokens/s -",  # its record keeps the share that vouches for the rate
        f"Report: attnbench report {sweep}"], proc.stdout[-3000:]
    assert tree(sweep) == before and [p.name for p in tmp_path.iterdir()] == ["sweep"]


def test_a_sweep_resumed_with_other_jobs_is_refused_in_one_line_and_writes_nothing(tmp_path):
    sweep = finished_sweep(tmp_path / "sweep")
    before = tree(sweep)
    proc = multirun("attention=additive,scaled_dot,dot", "seed=0,1", "logger=none", "ckpt_path=last",
                    f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert "this command adds 2 job(s) (attention=dot seed=0; attention=dot seed=1)" in line, line
    assert tree(sweep) == before and [p.name for p in tmp_path.iterdir()] == ["sweep"]


@pytest.mark.slow  # a two-job sweep, then one job trained again (about a minute on one loaded core)
def test_an_unfinished_job_of_a_reordered_sweep_trains_in_its_own_dir(tmp_path, data_dir, cache_dir):
    """A real sweep whose second job is unfinished (its metrics.json gone, its checkpoint kept), resumed with its
    values in another order: that job, now the sweeper's first, resumes from its checkpoint in its own dir and
    finishes there; the finished job is done; no other dir appears."""
    env = train_env(data_dir, cache_dir)
    sweep = tmp_path / "sweep"
    tiny = ["data=trec", "model=tiny", "trainer.max_steps=2", "data.max_train_samples=64", "data.max_eval_samples=32",
            "logger=csv", "trainer.enable_progress_bar=false", "~callbacks.attention_diagnostics",
            "~callbacks.attention_maps"]
    first = multirun(*tiny, "seed=0,1", f"hydra.sweep.dir={sweep}", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    dirs = sorted(p.name for p in sweep.iterdir() if not p.name.startswith("."))
    assert dirs == ["0_scaled_dot-trec-s0", "1_scaled_dot-trec-s1", "multirun.yaml"]
    job = sweep / "1_scaled_dot-trec-s1"
    done = tree(sweep / "0_scaled_dot-trec-s0")
    (job / "metrics.json").unlink()
    resumed = multirun("seed=1,0", *reversed(tiny), "ckpt_path=last", f"hydra.sweep.dir={sweep}", env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Sweep {sweep}: 2 jobs, 0 failed, 1 done before" in resumed.stdout, resumed.stdout[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if not p.name.startswith(".")) == dirs
    assert json.loads((job / "metrics.json").read_text())["seed"] == 1
    assert "Resuming from" in (job / "train.log").read_text()
    assert tree(sweep / "0_scaled_dot-trec-s0") == done
    assert [p.name for p in tmp_path.iterdir()] == ["sweep"]


def test_the_refusals_commands_paste_into_a_shell(tmp_path):
    """The commands of the refusal quote what a POSIX shell would split or reject (``range(0,2)``, a quoted
    value), so each runs as printed."""
    import shlex

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    OmegaConf.save(command("seed=range(0,2)", "data.name='a b'"), sweep / "multirun.yaml")
    with pytest.raises(OutputDirTaken) as err:
        check_same_sweep(command("seed=range(0,3)", "data.name='a b'", "ckpt_path=last"), sweep)
    resume = str(err.value).split("Resume it with its own jobs (", 1)[1].split("); run the added", 1)[0]
    assert shlex.split(resume) == ["python", "train.py", "-m", "data.name='a b'", "seed=range(0,2)", "ckpt_path=last",
                                   f"hydra.sweep.dir={sweep}"]
    more = str(err.value).split("as a new sweep (", 1)[1].split(") and report both", 1)[0]
    assert shlex.split(more) == ["python", "train.py", "-m", "data.name='a b'", "seed=2"]
