"""scripts/reproduce.py, the one command behind the Results: its plan comes from the experiments' sweep grids,
finished jobs are skipped, a job with a checkpoint resumes from it, a failed job does not stop the others,
and every job's commit, status and time land in manifest.json."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import subprocess
import sys

import pytest
import yaml

from .conftest import REPO_ROOT

spec = importlib.util.spec_from_file_location("reproduce", REPO_ROOT / "scripts" / "reproduce.py")
reproduce = importlib.util.module_from_spec(spec)
sys.modules["reproduce"] = reproduce  # its dataclass looks its module up
spec.loader.exec_module(reproduce)


def _grid_from_yaml(stage: str) -> dict[str, list[str]]:
    """The sweep grid of conf/experiment/<stage>.yaml read as plain YAML (comma lists), not through Hydra."""
    params = yaml.safe_load((REPO_ROOT / "conf" / "experiment" / f"{stage}.yaml").read_text())["hydra"]["sweeper"]
    return {k: [v.strip() for v in str(values).split(",")] for k, values in params["params"].items()}


@pytest.mark.parametrize("stage", reproduce.TRAIN_STAGES)
def test_the_plan_is_the_experiments_grid_in_sweep_order(tmp_path, stage):
    grid = _grid_from_yaml(stage)
    jobs = reproduce.plan([stage], tmp_path, [], [])
    assert len(jobs) == math.prod(len(v) for v in grid.values())
    expected = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    assert [j.overrides for j in jobs] == expected  # first key outermost, as Hydra's basic sweeper
    assert len({j.run_dir for j in jobs}) == len(jobs)
    assert all(j.run_dir.parent == tmp_path / stage and j.status() == "todo" for j in jobs)


def test_the_documented_job_count_is_the_plans(tmp_path):
    """docs/results.md's `reproduce.py --stages compare  # 70 jobs` is what the plan expands to."""
    line = next(line for line in (REPO_ROOT / "docs" / "results.md").read_text().splitlines()
                if "scripts/reproduce.py --stages compare " in line and " jobs" in line)
    documented = int(line.split("#", 1)[1].split(" jobs")[0].strip())
    assert len(reproduce.plan(["compare"], tmp_path, [], [])) == documented


def test_grid_overrides_replace_one_key_and_bad_ones_are_refused(tmp_path):
    jobs = reproduce.plan(["compare"], tmp_path, ["seed=3", "data=trec", "attention=dot,additive"], [])
    assert [(j.overrides["seed"], j.overrides["data"], j.overrides["attention"]) for j in jobs] == [
        ("3", "trec", "dot"), ("3", "trec", "additive")]
    assert [j.name for j in jobs] == ["dot-trec-s3", "additive-trec-s3"]
    assert jobs[1].estimate_key == "compare/additive/data=trec"
    with pytest.raises(SystemExit, match="key=value"):
        reproduce.plan(["compare"], tmp_path, ["seed"], [])


def _reproduce(out, *args):
    cmd = [sys.executable, str(REPO_ROOT / "scripts" / "reproduce.py"), "--out", str(out), "--stages", "compare",
           "--grid", "seed=0", "--grid", "data=trec", "--set", "trainer.max_steps=4", "--set", "trainer.max_epochs=2",
           "--set", "data.max_train_samples=64", "--set", "data.max_eval_samples=32", "--set", "logger=csv",
           "--set", "trainer.enable_progress_bar=false", *args]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # four training jobs (about a minute on an idle machine): CI runs it in its second step
def test_runs_skips_resumes_reports_and_records(tmp_path):
    out = tmp_path / "results"
    first = _reproduce(out, "--grid", "attention=dot,scaled_dot")
    assert first.returncode == 0, first.stdout + first.stderr
    runs = {name: out / "compare" / name for name in ("dot-trec-s0", "scaled_dot-trec-s0")}
    metrics = {name: json.loads((d / "metrics.json").read_text()) for name, d in runs.items()}
    assert {m["attention"] for m in metrics.values()} == {"dot", "scaled_dot"}
    manifest = json.loads((out / "manifest.json").read_text())
    commit = reproduce.git_commit()
    for name in runs:
        entry = manifest["jobs"][f"compare/{name}"]
        assert entry["status"] == "done" and entry["commits"] == [commit] and entry["complete_run_seconds"] > 0
    report_csv = (out / "compare" / "report" / "report.csv").read_text()
    assert "scaled_dot" in report_csv and "dot" in report_csv

    # run again: both done, nothing trains (the job logs are not appended to)
    log = out / "compare" / "logs" / "dot-trec-s0.log"
    size = log.stat().st_size
    second = _reproduce(out, "--grid", "attention=dot,scaled_dot", "--no-report")
    assert second.returncode == 0
    row = next(line.split() for line in second.stdout.splitlines() if line.startswith("compare "))
    assert row[1:5] == ["2", "2", "0", "0"]  # jobs, done, resume, to run
    assert log.stat().st_size == size

    # a job that stopped after its last epoch-end checkpoint, before writing metrics.json: it resumes from it
    (runs["dot-trec-s0"] / "metrics.json").unlink()
    job = reproduce.plan(["compare"], out, ["seed=0", "data=trec", "attention=dot"], [])[0]
    assert job.status() == "resume" and "ckpt_path=last" in job.command("cpu")
    third = _reproduce(out, "--grid", "attention=dot", "--no-report")
    assert third.returncode == 0, third.stdout
    assert "(resume)" in third.stdout
    resumed = json.loads((runs["dot-trec-s0"] / "metrics.json").read_text())
    assert resumed["test/acc"] == pytest.approx(metrics["dot-trec-s0"]["test/acc"], abs=0)  # the same best checkpoint
    assert "ckpt_path=last" in log.read_text()


@pytest.mark.slow
def test_a_failed_job_is_recorded_and_the_others_still_run(tmp_path):
    out = tmp_path / "results"
    broken = out / "compare" / "additive-trec-s0" / "checkpoints"
    broken.mkdir(parents=True)
    (broken / "last.ckpt").write_bytes(b"not a checkpoint")  # resuming from it fails
    result = _reproduce(out, "--grid", "attention=additive,dot", "--no-report")
    assert result.returncode == 1
    assert "1 failed" in result.stdout and "failed: see" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["jobs"]["compare/additive-trec-s0"]["status"].startswith("failed (exit")
    assert manifest["jobs"]["compare/dot-trec-s0"]["status"] == "done"
    assert (out / "compare" / "dot-trec-s0" / "metrics.json").is_file()
