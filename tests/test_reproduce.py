"""scripts/reproduce.py, the one command behind the Results: its plan comes from the experiments' sweep grids,
finished jobs are skipped, a job with a checkpoint resumes from it, a failed job does not stop the others,
and every job's commit, status and time land in manifest.json."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import signal
import subprocess
import sys
import time

import pytest
import yaml
from types import SimpleNamespace

from .conftest import REPO_ROOT, train_env

spec = importlib.util.spec_from_file_location("reproduce", REPO_ROOT / "scripts" / "reproduce.py")
reproduce = importlib.util.module_from_spec(spec)
sys.modules["reproduce"] = reproduce  # its dataclass looks its module up
spec.loader.exec_module(reproduce)


def _grid_from_yaml(stage: str) -> dict[str, list[str]]:
    """The sweep grid of conf/experiment/<stage>.yaml read as plain YAML (comma lists), not through Hydra."""
    params = yaml.safe_load((REPO_ROOT / "conf" / "experiment" / f"{stage}.yaml").read_text())["hydra"]["sweeper"]
    return {k: [v.strip() for v in str(values).split(",")] for k, values in params["params"].items()}


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """Each training stage's plan, composed once for the module (Hydra composes every job: seconds)."""
    out = tmp_path_factory.mktemp("plans")
    return out, {stage: reproduce.plan([stage], out, [], []) for stage in reproduce.TRAIN_STAGES}


@pytest.mark.parametrize("stage", reproduce.TRAIN_STAGES)
def test_the_plan_is_the_experiments_grid_in_sweep_order(plans, stage):
    grid = _grid_from_yaml(stage)
    tmp_path, jobs = plans[0], plans[1][stage]
    assert len(jobs) == math.prod(len(v) for v in grid.values())
    expected = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    assert [j.overrides for j in jobs] == expected  # first key outermost, as Hydra's basic sweeper
    assert len({j.run_dir for j in jobs}) == len(jobs)
    assert all(j.run_dir.parent == tmp_path / stage and j.status() == "todo" for j in jobs)


@pytest.mark.parametrize("stage", reproduce.TRAIN_STAGES)
def test_jobs_share_a_time_estimate_exactly_when_they_differ_only_in_seed(plans, stage):
    """The estimate key (what a job's expected time is looked up by) separates every swept setting of the grid
    but the seed: e.g. d_k 16 and 256 of head_dim_sweep must not share one median."""
    jobs = plans[1][stage]
    for a, b in itertools.combinations(jobs, 2):
        same_setting = {k: v for k, v in a.overrides.items() if k != "seed"} == {
            k: v for k, v in b.overrides.items() if k != "seed"}
        assert (a.estimate_key == b.estimate_key) == same_setting, (a.overrides, b.overrides)


def test_the_expected_duration_divides_the_training_jobs_by_jobs_at_once_but_not_the_benchmarks(tmp_path, capsys):
    """--jobs N: the training stages' estimates (hand values here) are divided by N; the cost benchmarks, which
    run alone afterwards, are not; a finished job counts nothing."""
    jobs = [reproduce.Job("compare", {"attention": a, "seed": "0"}, tmp_path / "compare" / f"{a}-s0")
            for a in ("dot", "additive", "cosine")]
    (jobs[2].run_dir).mkdir(parents=True)
    (jobs[2].run_dir / "metrics.json").write_text("{}")  # done
    table = {jobs[0].estimate_key: 100.0, jobs[1].estimate_key: 300.0, jobs[2].estimate_key: 5000.0,
             "cost/attention": 60.0, "cost/train_throughput": 40.0}
    assert reproduce.print_plan(jobs, table, ["compare", "cost"], tmp_path, n_jobs=1) == 100 + 300 + 60 + 40
    assert reproduce.print_plan(jobs, table, ["compare", "cost"], tmp_path, n_jobs=2) == (100 + 300) / 2 + 60 + 40
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("expected duration: 5 min 00 s") and "2 training jobs at once" in out[-1]
    assert next(line for line in reversed(out) if line.startswith("compare")).split()[1:5] == ["3", "1", "0", "2"]


def test_measured_seconds_are_the_median_of_whole_finished_runs():
    def entry(key, status="done", **extra):
        return {"estimate_key": key, "status": status, **extra}

    manifest = {"jobs": {
        "a": entry("k", complete_run_seconds=100.0), "b": entry("k", complete_run_seconds=900.0),
        "c": entry("k", complete_run_seconds=200.0),
        "d": entry("k", seconds=50.0),  # resumed: its time is a part of a run, not an estimate
        "e": entry("k", status="failed (exit 1)", complete_run_seconds=5.0),
        "f": entry("other", complete_run_seconds=30.0), "g": entry("other", complete_run_seconds=50.0),
        # no estimate from a job that shared the machine: paused (its thread had 3% of a core), one of two at once
        "h": entry("other", complete_run_seconds=5660.0, cpu_share=0.03),
        "i": entry("other", complete_run_seconds=90.0, parallel_jobs=2),
        "j": entry("k", complete_run_seconds=150.0, cpu_share=0.9, parallel_jobs=1)}}  # at the threshold: counts
    assert reproduce.measured_seconds(manifest) == {"k": 175.0, "other": 40.0}


def test_the_documented_job_count_is_the_plans(plans):
    """docs/results.md's `reproduce.py --stages compare  # 70 jobs` is what the plan expands to."""
    line = next(line for line in (REPO_ROOT / "docs" / "results.md").read_text().splitlines()
                if "scripts/reproduce.py --stages compare " in line and " jobs" in line)
    documented = int(line.split("#", 1)[1].split(" jobs")[0].strip())
    assert len(plans[1]["compare"]) == documented


def test_grid_overrides_replace_one_key_and_bad_ones_are_refused(tmp_path):
    jobs = reproduce.plan(["compare"], tmp_path, ["seed=3", "data=trec", "attention=dot,additive"], [])
    assert [(j.overrides["seed"], j.overrides["data"], j.overrides["attention"]) for j in jobs] == [
        ("3", "trec", "dot"), ("3", "trec", "additive")]
    assert [j.name for j in jobs] == ["dot-trec-s3", "additive-trec-s3"]
    assert jobs[1].estimate_key == "compare/additive/data=trec"
    with pytest.raises(SystemExit, match="key=value"):
        reproduce.plan(["compare"], tmp_path, ["seed"], [])


def _reproduce_cmd(out, *args, steps=4, epochs=2):
    return [sys.executable, str(REPO_ROOT / "scripts" / "reproduce.py"), "--out", str(out), "--stages", "compare",
           "--grid", "seed=0", "--grid", "data=trec", "--set", f"trainer.max_steps={steps}",
           "--set", f"trainer.max_epochs={epochs}",
           "--set", "data.max_train_samples=64", "--set", "data.max_eval_samples=32", "--set", "logger=csv",
           "--set", "trainer.enable_progress_bar=false", *args]


def _reproduce(out, *args):
    return subprocess.run(_reproduce_cmd(out, *args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


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
        # what vouches for its time as an estimate (None where the run was all warm-up: no training rate)
        assert entry["cpu_share"] == metrics[name].get("train/cpu_share")
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


def test_cpu_groups_split_the_allowed_cpus_and_refuse_more_jobs_than_cpus(monkeypatch):
    monkeypatch.setattr(reproduce.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 5}, raising=False)
    assert reproduce.cpu_groups(1) == [None]  # one job: the inherited affinity (e.g. taskset -c 1) is kept
    assert reproduce.cpu_groups(2) == [{0, 1}, {2, 3}]  # equal groups; CPU 5 is the remainder
    assert reproduce.cpu_groups(5) == [{0}, {1}, {2}, {3}, {5}]
    with pytest.raises(SystemExit, match="--jobs 6: this process may use 5 CPU"):
        reproduce.cpu_groups(6)


@pytest.mark.slow  # two pairs of tiny training jobs side by side (about a minute on the 2-core machine)
@pytest.mark.skipif(not hasattr(reproduce.os, "sched_getaffinity") or len(reproduce.os.sched_getaffinity(0)) < 2,
                    reason="needs Linux CPU affinity and 2 CPUs")
def test_two_jobs_at_once_each_on_its_own_cpu_and_one_sigterm_stops_both(tmp_path):
    out = tmp_path / "results"
    grid = ("--grid", "attention=dot,scaled_dot")
    result = _reproduce(out, *grid, "--jobs", "2", "--no-report")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    cpus = []
    for name in ("dot-trec-s0", "scaled_dot-trec-s0"):
        entry = manifest["jobs"][f"compare/{name}"]
        assert entry["status"] == "done" and entry["parallel_jobs"] == 2
        assert (out / "compare" / name / "metrics.json").is_file()
        log = (out / "compare" / "logs" / f"{name}.log").read_text()
        cpus.append(log.split(", CPUs ", 1)[1].split("\n", 1)[0])
    assert len(set(cpus)) == 2  # each on its own CPU

    # interrupted while both of the next two run: one SIGTERM to the driver stops both, recorded as interrupted
    cmd = _reproduce_cmd(out / "second", "--grid", "attention=additive,cosine", "--jobs", "2", "--no-report",
                         steps=100_000, epochs=1000)
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    manifest_path = out / "second" / "manifest.json"
    ckpts = [out / "second" / "compare" / n / "checkpoints" / "last.ckpt" for n in ("additive-trec-s0", "cosine-trec-s0")]
    deadline = time.monotonic() + 240
    while not all(c.is_file() for c in ckpts) and time.monotonic() < deadline:  # both past an epoch end
        time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert "interrupted; the running job saved interrupted.ckpt" in output
    jobs = json.loads(manifest_path.read_text())["jobs"]
    assert {jobs[f"compare/{n}"]["status"] for n in ("additive-trec-s0", "cosine-trec-s0")} == {"interrupted"}
    assert all((c.parent / "interrupted.ckpt").is_file() for c in ckpts)


def test_a_second_reproduction_on_the_same_results_dir_is_refused(tmp_path, capsys):
    """Two reproduce.py on one --out would start the same jobs and each save its own copy of manifest.json over
    the other's (found running a publish beside a long_context run). While one holds the dir, a second stops
    with one message before touching anything; --dry-run still plans; once the first ends the dir is free."""
    out = tmp_path / "results"
    out.mkdir()
    held = reproduce.lock_results_dir(out)
    assert f"pid {__import__('os').getpid()}" in (out / ".reproduce.lock").read_text()
    with pytest.raises(SystemExit) as refused:
        reproduce.main(["--out", str(out), "--stages", "compare", "--grid", "attention=dot", "--no-report"])
    message = str(refused.value)
    assert message.startswith(f"{out} is in use by another scripts/reproduce.py (pid ")
    assert "--dry-run works" in message and not (out / "manifest.json").exists()
    assert reproduce.main(["--out", str(out), "--stages", "compare", "--dry-run"]) == 0
    held.close()
    again = reproduce.lock_results_dir(out)  # released: the next one gets it
    assert again is not None
    again.close()


def _children(pid: int) -> list[int]:
    """The child processes of ``pid``, of any of its threads (reproduce.py starts jobs from worker threads)."""
    import glob

    found = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            found += [int(c) for c in open(path).read().split()]
        except OSError:
            pass
    return found


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_job_outliving_a_killed_reproduction_keeps_its_results_dir_locked(tmp_path, data_dir, cache_dir):
    """Jobs run in their own session (a terminal's Ctrl-C reaches reproduce.py only), so a reproduce.py killed
    outright (SIGKILL, an OOM kill) leaves its running job training on. Its flock went with it: a second
    reproduce.py on the same --out then started the same job again, two processes writing one run dir. Each job
    now holds the lock too (the same open file, inherited): the dir stays refused until the job ends."""
    import os

    out = tmp_path / "results"
    cmd = _reproduce_cmd(out, "--grid", "attention=dot", "--no-report", steps=100_000, epochs=1000)
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=train_env(data_dir, cache_dir))
    deadline, children = time.monotonic() + 120, []
    while not children and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        children = [pid for pid in _children(proc.pid) if "train.py" in _cmdline(pid)]  # not git's
    assert children, f"reproduce.py started no job (exit {proc.poll()})"
    (job,) = children
    os.kill(proc.pid, signal.SIGKILL)  # the reproduction dies at once; its job, in its own session, does not
    proc.wait(timeout=30)
    try:
        with pytest.raises(SystemExit) as refused:
            reproduce.lock_results_dir(out)
        assert "in use by another scripts/reproduce.py" in str(refused.value)
        assert "or a job it started" in str(refused.value)
    finally:
        os.killpg(job, signal.SIGKILL)  # its own session: the job's process group is its pid
        for _ in range(300):
            if not os.path.exists(f"/proc/{job}") or open(f"/proc/{job}/stat").read().split()[2] == "Z":
                break
            time.sleep(0.1)
    again = reproduce.lock_results_dir(out)  # the job ended: the dir is free
    assert again is not None
    again.close()


def test_publish_copies_nothing_from_a_report_that_failed(tmp_path, monkeypatch):
    """--publish copies <stage>/report/{report.csv, jobs.csv, *.png} to docs/results/<device>/. When report.py
    fails, those files are the previous report's (or a mix of old and new): before, they were published all the
    same, as if they were the new results (a stale <stage>.csv beside a <stage>_jobs.csv of other runs). Now a
    failed report publishes nothing and the step fails; a report that succeeded is published, with the plots it
    drew (not an earlier report's plot of a sweep this one lacks)."""
    out, repo = tmp_path / "results", tmp_path / "repo"
    dest = out / "compare" / "report"
    dest.mkdir(parents=True)
    for name, text in (("report.csv", "old variants\n"), ("jobs.csv", "old jobs\n"), ("pareto.png", "old")):
        (dest / name).write_text(text)
    import os

    for old in dest.iterdir():
        os.utime(old, (time.time() - 3600, time.time() - 3600))
    monkeypatch.setattr(reproduce, "REPO_ROOT", repo)

    def report_py(*args, **kwargs):  # the second call succeeds and writes the tables and one plot anew
        if not calls:
            calls.append(1)
            return SimpleNamespace(returncode=1)
        for name, text in (("report.csv", "new variants\n"), ("jobs.csv", "new jobs\n"), ("seq_len.png", "new")):
            (dest / name).write_text(text)
        return SimpleNamespace(returncode=0)

    calls: list[int] = []
    monkeypatch.setattr(reproduce.subprocess, "run", report_py)
    assert reproduce.report("compare", out, "cpu-test", publish=True) is False
    assert not (repo / "docs" / "results" / "cpu-test").exists()
    assert reproduce.report("compare", out, "cpu-test", publish=True) is True
    published = repo / "docs" / "results" / "cpu-test"
    assert (published / "compare.csv").read_text() == "new variants\n"
    assert (published / "compare_jobs.csv").read_text() == "new jobs\n"
    # only the plots this report drew: the earlier report's pareto.png is not passed off as this one's
    assert sorted(p.name for p in published.glob("*.png")) == ["compare_seq_len.png"]


def test_a_job_with_only_interrupted_ckpt_resumes_from_it(tmp_path):
    """A job interrupted before its first last.ckpt (Ctrl-C/kill of the reproduction in its first epoch) has only
    interrupted.ckpt: it resumes from it (ckpt_path=last takes it), not started again from scratch."""
    job = reproduce.plan(["compare"], tmp_path, ["seed=0", "data=trec", "attention=dot"], [])[0]
    (job.run_dir / "checkpoints").mkdir(parents=True)
    assert job.status() == "leftover"
    (job.run_dir / "checkpoints" / "interrupted.ckpt").write_bytes(b"")
    assert job.status() == "resume" and "ckpt_path=last" in job.command("cpu")


def test_the_published_mid_epoch_resumes_are_the_ones_docs_results_names():
    """docs/results.md: 4 of the 75 head_dim_sweep runs were resumed mid-epoch before exact mid-epoch resumes."""
    import ast
    import csv

    rows = list(csv.DictReader((REPO_ROOT / "docs/results/cpu/head_dim_sweep_jobs.csv").open()))
    resumes = [ast.literal_eval(r["resume"]) for r in rows if r["resume"]]
    inexact = [r for r in resumes if not r["exact"] and 0 < r["batches_done"] < r["batches_per_epoch"]]
    assert (len(rows), len(inexact)) == (75, 4)
    assert "4 of the 75 `head_dim_sweep`\n  runs" in (REPO_ROOT / "docs/results.md").read_text()
