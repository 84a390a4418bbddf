"""attnbench reproduce, the one command behind the Results: its plan comes from the experiments' sweep grids,
finished jobs are skipped, a job with a checkpoint resumes from it, a failed job does not stop the others,
and every job's commit, status and time land in manifest.json."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from types import SimpleNamespace

from attnbench.analysis import tables
from attnbench.experiments import reproduce
from attnbench.experiments.registry import GRIDS

from .conftest import REPO_ROOT, train_env


def _grids_from_yaml(stage: str) -> list[dict[str, list[str]]]:
    """The sweep grids of conf/experiment/<stage>.yaml read as plain YAML (comma lists), not through Hydra: its
    ``hydra.sweeper.params`` over those of the experiment it extends (``defaults: [<experiment>]``), then each of the
    stage's further grids (``registry.GRIDS``) merged over them, a None value dropping the key; a key set to
    ``${attnbench.score_functions:}`` is every ``conf/attention/*.yaml``, sorted by name."""
    def params_of(name: str) -> dict[str, list[str]]:
        doc = yaml.safe_load((REPO_ROOT / "conf" / "experiment" / f"{name}.yaml").read_text())
        parent = next((d for d in doc.get("defaults", []) if isinstance(d, str) and d != "_self_"), None)
        return {**(params_of(parent) if parent else {}),
                **{k: values(v) for k, v in doc["hydra"]["sweeper"]["params"].items()}}

    def values(v) -> list[str]:
        every = sorted(p.stem for p in (REPO_ROOT / "conf" / "attention").glob("*.yaml"))
        return every if v == "${attnbench.score_functions:}" else [x.strip() for x in str(v).split(",")]

    params = params_of(stage)
    further = [{k: None if v is None else values(v) for k, v in g.items()} for g in GRIDS.get(stage, [])]
    return [params] + [{k: v for k, v in {**params, **g}.items() if v is not None} for g in further]


def _jobs_from_yaml(stage: str) -> list[dict[str, str]]:
    """Every job of :func:`_grids_from_yaml`: each grid's product (first key outermost, as Hydra's basic sweeper),
    one grid after another, a job in two grids once."""
    jobs: dict[tuple, dict[str, str]] = {}
    for grid in _grids_from_yaml(stage):
        for combo in itertools.product(*grid.values()):
            job = dict(zip(grid, combo))
            jobs.setdefault(tuple(sorted(job.items())), job)
    return list(jobs.values())


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """Each training stage's plan, composed once for the module (Hydra composes every job: seconds)."""
    out = tmp_path_factory.mktemp("plans")
    return out, {stage: reproduce.plan([stage], out, [], []) for stage in reproduce.TRAIN_STAGES}


@pytest.mark.slow
@pytest.mark.parametrize("stage", reproduce.TRAIN_STAGES)
def test_the_plan_is_the_experiments_grid_in_sweep_order(plans, stage):
    tmp_path, jobs = plans[0], plans[1][stage]
    expected = _jobs_from_yaml(stage)
    # first key outermost, as Hydra's basic sweeper; a tuned stage's jobs get optim.lr once tune_lr chose it
    assert [{k: v for k, v in j.overrides.items()} for j in jobs] == expected
    assert len({j.run_dir for j in jobs}) == len(jobs)
    assert all(j.run_dir.parent == tmp_path / stage and j.status() == "todo" for j in jobs)


@pytest.mark.slow
@pytest.mark.parametrize("stage", reproduce.TRAIN_STAGES)
def test_jobs_share_a_time_estimate_exactly_when_they_differ_only_in_seed(plans, stage):
    """The estimate key (what a job's expected time is looked up by) separates every swept setting of the grid
    but the seed: e.g. d_k 16 and 256 of head_dim_sweep must not share one median."""
    jobs = plans[1][stage]
    for a, b in itertools.combinations(jobs, 2):
        same_setting = {k: v for k, v in a.overrides.items() if k != "seed"} == {
            k: v for k, v in b.overrides.items() if k != "seed"}
        assert (a.estimate_key == b.estimate_key) == same_setting, (a.overrides, b.overrides)


def test_a_plan_without_any_estimate_says_its_duration_is_unknown_not_zero(tmp_path, capsys):
    """--device gpu before any GPU run was measured: no docs/results/reproduce_seconds_gpu.json, no finished job.
    The plan printed 'expected duration: 0 min 00 s plus 196 job(s) without an estimate', a zero that reads as a
    figure; it says the duration is unknown and why. One known job among unknown ones still gives a figure."""
    jobs = [reproduce.Job("compare", {"attention": a, "seed": "0"}, tmp_path / "compare" / f"{a}-s0")
            for a in ("dot", "additive")]
    assert reproduce.print_plan(jobs, {}, ["compare"], tmp_path, device="gpu") == 0.0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[-1] == "unknown" and "0 min" not in out[1]
    assert out[-1].startswith("expected duration: unknown: none of the 2 job(s) to run has an estimate")
    assert "reproduce_seconds_gpu.json" in out[-1]
    assert reproduce.print_plan(jobs, {jobs[0].estimate_key: 60.0}, ["compare"], tmp_path) == 60.0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("expected duration: 1 min 00 s plus 1 job(s) without an estimate")


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
    assert next(line for line in reversed(out) if line.startswith("compare")).split()[1:6] == ["3", "1", "0", "0", "2"]


@pytest.mark.slow
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


def test_grid_overrides_replace_one_key_and_bad_ones_are_refused(tmp_path):
    jobs = reproduce.plan(["compare"], tmp_path, ["seed=3", "data=trec", "attention=dot,additive"], [])
    assert [(j.overrides["seed"], j.overrides["data"], j.overrides["attention"]) for j in jobs] == [
        ("3", "trec", "dot"), ("3", "trec", "additive")]
    assert [j.name for j in jobs] == ["dot-trec-s3", "additive-trec-s3"]
    assert jobs[1].estimate_key == "compare/additive/data=trec"
    with pytest.raises(SystemExit, match="key=value"):
        reproduce.plan(["compare"], tmp_path, ["seed"], [])


@pytest.mark.parametrize("grid, extra, says", [
    (["seeds=0,1"], [], r"^compare: Hydra cannot compose the stage with --grid seeds=0,1\. Unknown config key "
                        r"'seeds': did you mean seed\?"),
    (["attention=dotx"], [], r"--grid attention=dotx\. .*Could not find 'attention/dotx' Available options in "
                             r"'attention': (\w+ )*scaled_dot( \w+)*$"),
    ([], ["trainer.max_step=5"], r"--set trainer\.max_step=5\. Unknown config key 'trainer\.max_step': did you "
                                 r"mean trainer\.max_steps"),
])
def test_a_grid_or_set_override_hydra_cannot_compose_is_one_line_naming_it(tmp_path, grid, extra, says):
    """A typo in --grid/--set ends the plan with train.py's one-line message and the override it came from, not a
    Hydra traceback that advises '+seeds=0' (which would silently add an unused key)."""
    with pytest.raises(SystemExit) as stop:
        reproduce.plan(["compare"], tmp_path, grid, extra)
    message = str(stop.value.code)
    assert "\n" not in message and "Traceback" not in message and "Config search path" not in message
    assert re.search(says, message), message


def _reproduce_cmd(out, *args, steps=4, epochs=2):
    return [sys.executable, "-m", "attnbench", "reproduce", "--out", str(out), "--stages", "compare",
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
    commit = reproduce.code_commit()
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

    # a run moved away (to be run again) starts from scratch: its record is the new run's, not the old one's
    # extended (the old commits and seconds would be read as the new run's provenance and time)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["jobs"]["compare/scaled_dot-trec-s0"].update(commits=["0123456789ab"], seconds=9999.0)
    (out / "manifest.json").write_text(json.dumps(manifest))
    shutil.move(runs["scaled_dot-trec-s0"], tmp_path / "moved")
    fourth = _reproduce(out, "--grid", "attention=scaled_dot", "--no-report")
    assert fourth.returncode == 0, fourth.stdout
    entry = json.loads((out / "manifest.json").read_text())["jobs"]["compare/scaled_dot-trec-s0"]
    assert entry["commits"] == [commit] and entry["status"] == "done"
    assert entry["seconds"] == entry["complete_run_seconds"] < 9999.0


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


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
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
    assert message.startswith(f"{out} is in use by another attnbench reproduce (pid ")
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


def _argv(pid: int) -> list[str]:
    """The argument vector of ``pid`` (``[]`` once it has exited)."""
    try:
        return open(f"/proc/{pid}/cmdline").read().split("\0")
    except OSError:
        return []


def _is_job(pid: int) -> bool:
    """Whether ``pid`` runs a job (``python -m attnbench train ...``, as :meth:`reproduce.Job.command` builds it).
    A substring test is not enough: a forked child before its exec still has the reproduction's argv."""
    return _argv(pid)[1:4] == ["-m", "attnbench", "train"]


@pytest.mark.slow
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
        children = [pid for pid in _children(proc.pid) if _is_job(pid)]
    assert children, f"reproduce.py started no job (exit {proc.poll()})"
    (job,) = children
    os.kill(proc.pid, signal.SIGKILL)  # the reproduction dies at once; its job, in its own session, does not
    proc.wait(timeout=30)
    try:
        with pytest.raises(SystemExit) as refused:
            reproduce.lock_results_dir(out)
        assert "in use by another attnbench reproduce" in str(refused.value)
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


# --------------------------------------------------------------------------- publishing: all or nothing

_TINY = ["--grid", "seed=0", "--grid", "data=trec", "--set", "trainer.max_steps=4", "--set", "trainer.max_epochs=2",
         "--set", "data.max_train_samples=64", "--set", "data.max_eval_samples=32", "--set", "logger=csv",
         "--set", "trainer.enable_progress_bar=false", "--set", "callbacks.run_stats.warmup_steps=1"]


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory, data_dir, cache_dir):
    """Real tiny runs of the compare stage on one dataset (TREC), as `--grid data=trec` leaves them: `one` holds
    dot and scaled_dot (seed 0, 2 epochs); `mixed` holds those and scaled_dot seed 1 run with 3 epochs, so its
    report has two rows of (trec, scaled_dot) that differ in trainer.max_epochs (the replay's mix)."""
    root = tmp_path_factory.mktemp("finished")
    env = train_env(data_dir, cache_dir)

    def run(out, *args):
        cmd = [sys.executable, "-m", "attnbench", "reproduce", "--out", str(out), "--stages",
               "compare", *_TINY, "--no-report", *args]
        done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stdout + done.stderr

    run(root / "one", "--grid", "attention=dot,scaled_dot")
    shutil.copytree(root / "one", root / "mixed")
    run(root / "mixed", "--grid", "attention=scaled_dot", "--grid", "seed=1", "--set", "trainer.max_epochs=3")
    return root


_PARETO_FIGURE = "![accuracy vs training tokens/s](results/cpu/compare_pareto.png)\n"
_README_PARETO_FIGURE = "![Test accuracy against training tokens/s per score function](docs/results/cpu/compare_pareto.png)\n"


def _fake_repo(tmp_path, figure: bool = False, progress: bool = True):
    """A copy of the repository's published side (README.md, docs/) with the code linked in: publishing into it
    leaves the real docs alone. Without ``figure`` the page does not show compare's pareto plot: the tiny runs'
    report draws it only when their tokens/s count (runs on a busy machine are left out as disturbed). Without
    ``progress`` the copy holds none of the repository's progress records (docs/results/cpu/progress/) and its
    pages no longer link to them (the link text stays): a page linking a removed record is what --publish refuses."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for md in REPO_ROOT.glob("*.md"):
        shutil.copyfile(md, repo / md.name)
    shutil.copytree(REPO_ROOT / "docs", repo / "docs")
    results, readme = repo / "docs" / "results.md", repo / "README.md"
    assert _PARETO_FIGURE in results.read_text() and _README_PARETO_FIGURE in readme.read_text()
    if not figure:  # neither page shows it (the README's answer shows it too)
        results.write_text(results.read_text().replace(_PARETO_FIGURE, ""))
        readme.write_text(readme.read_text().replace(_README_PARETO_FIGURE, ""))
    if not progress:
        shutil.rmtree(repo / "docs" / "results" / "cpu" / "progress", ignore_errors=True)
        for md in [*repo.glob("*.md"), *(repo / "docs").rglob("*.md")]:
            text = md.read_text()
            md.write_text(re.sub(r"\[([^\]]*)\]\((?:\.\./)*(?:docs/)?results/cpu/progress/[^)]*\)", r"\1", text))
    for name in ("conf", "scripts", "src", "train.py"):
        (repo / name).symlink_to(REPO_ROOT / name)
    return repo


def _snapshot(repo):
    """Every published file's bytes (README.md and docs/)."""
    files = [*repo.glob("*.md"), *(p for p in (repo / "docs").rglob("*") if p.is_file())]
    return {str(p.relative_to(repo)): p.read_bytes() for p in files}


def _copy_out(finished_runs, name, tmp_path):
    out = tmp_path / name
    shutil.copytree(finished_runs / name, out)
    return out


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_publish_of_one_dataset_renders_its_table_and_merges_the_manifest(finished_runs, tmp_path, monkeypatch,
                                                                         capsys):
    """The replay: `--stages compare --grid data=sst2 --publish` of one dataset. report.csv then has no `data`
    column (report.py names only the settings that vary), readme_tables raised `ValueError: report.csv has no
    'data' column`, reproduce.py exited 0 anyway, after it had overwritten compare.csv and replaced the whole
    manifest.json (158 jobs -> 5). Now the table takes the one dataset from jobs.csv, and the published manifest
    keeps the other stages' records: compare's are exactly the runs the CSV reports."""
    out = _copy_out(finished_runs, "one", tmp_path)
    repo = _fake_repo(tmp_path)
    before = json.loads((repo / "docs" / "results" / "cpu" / "manifest.json").read_text())["jobs"]
    # a sentence quoting a number that only the compare table holds: the publish replaces the table and says so
    results = repo / "docs" / "results.md"
    text = results.read_text()
    block = text.split("<!-- generated: docs/results/cpu/compare.csv -->\n", 1)[1].split("<!-- end generated -->")[0]
    quoted = next(n for n in tables.QUOTED.findall(block) if text.count(n) == block.count(n))
    results.write_text(text + f"\nThe mean was {quoted} before.\n")
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    assert reproduce.main(["--out", str(out), "--stages", "compare", *_TINY, "--grid", "attention=dot,scaled_dot",
                           "--report-only", "--publish"]) == 0
    pub = repo / "docs" / "results" / "cpu"
    report = out / "compare" / "report"
    assert (pub / "compare.csv").read_bytes() == (report / "report.csv").read_bytes()
    assert (pub / "compare_jobs.csv").read_bytes() == (report / "jobs.csv").read_bytes()
    assert "data" not in (pub / "compare.csv").read_text().splitlines()[0].split(",")  # one dataset: no column
    after = json.loads((pub / "manifest.json").read_text())["jobs"]
    ours = json.loads((out / "manifest.json").read_text())["jobs"]
    assert sorted(k for k in after if k.startswith("compare/")) == ["compare/dot-trec-s0", "compare/scaled_dot-trec-s0"]
    assert {k: after[k] for k in after if k.startswith("compare/")} == ours
    others = {k: v for k, v in before.items() if not k.startswith("compare/")}
    # every other stage's record is kept as it was (the repository's published stages: dozens of records)
    assert len({k.split('/')[0] for k in others}) >= 2 and len(others) > 50
    assert {k: after[k] for k in others} == others and set(after) == set(others) | set(ours)
    # the table in docs/results.md is rendered from the published CSV: TREC's rows with the runs' accuracies
    page = (repo / "docs" / "results.md").read_text()
    block = page.split("<!-- generated: docs/results/cpu/compare.csv -->\n", 1)[1].split("<!-- end generated -->")[0]
    for attention in ("dot", "scaled_dot"):
        acc = json.loads((out / "compare" / f"{attention}-trec-s0" / "metrics.json").read_text())["test/acc"]
        assert f"| trec | `{attention}` | 1 | {acc:.4f} | 1 seed, no interval |" in block
    assert len([line for line in block.splitlines() if line.startswith("| trec |")]) == 2
    tables_check = subprocess.run([sys.executable, "-m", "attnbench", "tables", "--check", "--root",
                                   str(repo)], capture_output=True, text=True, timeout=120)
    assert "compare.csv" not in tables_check.stdout  # the published table matches its source
    printed = capsys.readouterr().out
    assert "published docs/results/cpu/compare.csv" in printed and "published docs/results.md" in printed
    # the page's own prose quotes no report number (its answer is a generated block); the one added above is named
    assert (f"note: docs/results.md quotes numbers in its prose that its generated tables no longer hold ({quoted})"
            in printed)


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_a_publish_whose_table_does_not_render_changes_nothing_and_fails(finished_runs, tmp_path, monkeypatch,
                                                                        capsys):
    """A report whose table cannot be rendered (two rows of trec/scaled_dot: 2 and 3 epochs) publishes nothing:
    every file under docs/ and README.md keeps its bytes, one message says why, the exit status is 1."""
    out = _copy_out(finished_runs, "mixed", tmp_path)
    repo = _fake_repo(tmp_path)
    before = _snapshot(repo)
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    assert reproduce.main(["--out", str(out), "--stages", "compare", *_TINY, "--grid", "attention=scaled_dot",
                           "--report-only", "--publish"]) == 1
    assert _snapshot(repo) == before
    err = capsys.readouterr().err
    assert "--publish: nothing published: docs/results.md: a generated table does not render: " in err
    assert "two rows for data=trec, attention=scaled_dot: another setting varies (trainer.max_epochs" in err
    assert (out / "compare" / "report" / "report.csv").is_file()  # the report itself is written


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_a_run_the_manifest_does_not_record_is_not_published(finished_runs, tmp_path, monkeypatch):
    """The published CSV and manifest describe the same jobs: a run put into <out>/compare by hand (no record of
    its commit and command) refuses the publish, naming it."""
    out = _copy_out(finished_runs, "one", tmp_path)
    shutil.copytree(out / "compare" / "dot-trec-s0", out / "compare" / "by-hand")
    repo = _fake_repo(tmp_path)
    before = _snapshot(repo)
    assert reproduce.report("compare", out)
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    with pytest.raises(reproduce.PublishError, match=r"nothing published: 1 run\(s\) of the report have no record in "
                                                      r".*manifest.json \(compare/by-hand\)"):
        reproduce.publish(["compare"], out, "cpu", started=time.time() - 600)
    assert _snapshot(repo) == before


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_a_page_linking_the_progress_records_a_publish_empties_is_refused(finished_runs, tmp_path, monkeypatch):
    """A page that links a stage's progress records (docs/results/cpu/progress/runs/<stage>/, the prose of a
    re-run "so far") cannot outlive them: publishing the stage moves the records to runs/<stage>/ and the folder
    goes, as a clone would have it, so the link would break. The publish refuses, naming page and link; nothing
    changes. Before: the emptied folder stayed in the staging copy and the link passed as shown."""
    out = _copy_out(finished_runs, "one", tmp_path)
    repo = _fake_repo(tmp_path, progress=False)
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    assert reproduce.main(["--out", str(out), "--stages", "compare", "--save-progress"]) == 0
    page = repo / "docs" / "results.md"
    page.write_text(page.read_text() + "\nKept so far in [the records](results/cpu/progress/runs/compare/).\n")
    before = _snapshot(repo)
    assert reproduce.report("compare", out)
    with pytest.raises(reproduce.PublishError, match=r"docs/results.md shows results/cpu/progress/runs/compare/, "
                                                      r"progress records this publish moves to .*remove the link"):
        reproduce.publish(["compare"], out, "cpu", started=time.time() - 600)
    assert _snapshot(repo) == before


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_publish_copies_nothing_from_a_report_that_failed(finished_runs, tmp_path, monkeypatch, capsys):
    """When report.py fails, <stage>/report/ holds the previous report's files (or a mix): nothing is published
    and the exit status is 1."""
    out = _copy_out(finished_runs, "one", tmp_path)
    repo = _fake_repo(tmp_path)
    before = _snapshot(repo)
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    monkeypatch.setattr(reproduce, "report", lambda stage, out: False)
    assert reproduce.main(["--out", str(out), "--stages", "compare", *_TINY, "--grid", "attention=dot",
                           "--report-only", "--publish"]) == 1
    assert _snapshot(repo) == before
    assert "attnbench report failed for compare (its output is above); nothing published" in capsys.readouterr().out


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_publish_puts_only_the_plots_this_report_drew(finished_runs, tmp_path, monkeypatch):
    """An earlier report's plot this report did not draw (a sweep it lacks) is neither published nor left
    published beside the new table; a figure a page shows that the report did not draw refuses the publish."""
    out = _copy_out(finished_runs, "one", tmp_path)
    repo = _fake_repo(tmp_path, figure=True)
    assert reproduce.report("compare", out)
    (out / "compare" / "report" / "pareto.png").write_bytes(b"drawn by this report")  # whatever it drew or not
    stale = out / "compare" / "report" / "seq_len.png"
    stale.write_bytes(b"an earlier report's plot")
    import os

    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    (repo / "docs" / "results" / "cpu" / "compare_head_dim.png").write_bytes(b"published before")
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    reproduce.publish(["compare"], out, "cpu", started=time.time() - 600)
    pub = repo / "docs" / "results" / "cpu"
    assert sorted(p.name for p in pub.glob("compare_*.png")) == ["compare_pareto.png"]
    assert (pub / "compare_pareto.png").read_bytes() == b"drawn by this report"
    # the report no longer draws pareto.png (an earlier one, left from before): the README and docs/results.md
    # show it, and the first page that does is named
    os.utime(out / "compare" / "report" / "pareto.png", (time.time() - 3600, time.time() - 3600))
    before = _snapshot(repo)
    with pytest.raises(reproduce.PublishError, match=r"nothing published: README.md shows "
                                                      r"docs/results/cpu/compare_pareto.png, which this report did not"):
        reproduce.publish(["compare"], out, "cpu", started=time.time() - 600)
    assert _snapshot(repo) == before


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_report_only_runs_no_job(finished_runs, tmp_path, capsys):
    """--report-only: the plan's unfinished job (additive) is not started, the manifest is not touched, and the
    report covers the finished runs."""
    out = _copy_out(finished_runs, "one", tmp_path)
    manifest = (out / "manifest.json").read_bytes()
    logs = sorted(p.name for p in (out / "compare" / "logs").iterdir())
    assert reproduce.main(["--out", str(out), "--stages", "compare", *_TINY, "--grid",
                           "attention=dot,scaled_dot,additive", "--report-only"]) == 0
    printed = capsys.readouterr().out
    assert "--report-only: no job runs" in printed and "(todo)" not in printed
    row = next(line for line in printed.splitlines() if line.startswith("compare "))
    assert row.split()[1:6] == ["3", "2", "0", "0", "1"] and row.endswith("none run (--report-only)")
    assert not (out / "compare" / "additive-trec-s0").exists()
    assert sorted(p.name for p in (out / "compare" / "logs").iterdir()) == logs
    assert (out / "manifest.json").read_bytes() == manifest
    report_csv = (out / "compare" / "report" / "report.csv").read_text()
    assert sorted(line.split(",")[0] for line in report_csv.splitlines()[1:]) == ["dot", "scaled_dot"]
    with pytest.raises(SystemExit):
        reproduce.main(["--out", str(out), "--report-only", "--no-report"])
    # beside a reproduction that holds the dir: a stage with a job still to run is refused, a finished one reported
    held = reproduce.lock_results_dir(out)
    try:
        with pytest.raises(SystemExit, match="compare still has jobs to run"):
            reproduce.main(["--out", str(out), "--stages", "compare", *_TINY, "--grid",
                            "attention=dot,scaled_dot,additive", "--report-only"])
        (out / "compare" / "report" / "report.csv").unlink()
        assert reproduce.main(["--out", str(out), "--stages", "compare", *_TINY, "--grid",
                               "attention=dot,scaled_dot", "--report-only"]) == 0
        assert (out / "compare" / "report" / "report.csv").is_file()
        assert (out / "manifest.json").read_bytes() == manifest
        (out / "compare" / "cosine-trec-s0").mkdir()  # a run outside this --grid, still training: the report has it
        with pytest.raises(SystemExit, match="compare still has jobs to run"):
            reproduce.main(["--out", str(out), "--stages", "compare", *_TINY, "--grid",
                            "attention=dot,scaled_dot", "--report-only"])
        with pytest.raises(SystemExit, match="leave cost out of --stages"):
            reproduce.main(["--out", str(out), "--stages", "cost", "--report-only"])
    finally:
        held.close()


@pytest.mark.slow  # trains three tiny jobs (module fixture): CI's second step
def test_the_published_run_records_recompute_the_published_tables(finished_runs, tmp_path, monkeypatch):
    """--publish keeps each reported run's record (no checkpoint, no log) in docs/results/cpu/runs/<stage>/; from
    those alone, on a machine without the results dir (--from-published into an empty one), the report is the
    published one. Before: the published tables' runs lived only in the results dir of the machine that ran them."""
    out = _copy_out(finished_runs, "one", tmp_path)
    repo = _fake_repo(tmp_path, progress=False)  # the repository's own progress records: not this test's
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    args = ["--stages", "compare", *_TINY, "--grid", "attention=dot,scaled_dot", "--report-only"]
    progress = repo / "docs" / "results" / "cpu" / "progress"
    assert reproduce.main(["--out", str(out), "--stages", "compare", "--save-progress"]) == 0  # kept before ...
    assert sorted(p.name for p in (progress / "runs" / "compare").iterdir()) == ["dot-trec-s0", "scaled_dot-trec-s0"]
    other = json.loads((progress / "manifest.json").read_text())  # a run kept from another machine, not reported
    other["jobs"]["compare/cosine-trec-s0"] = other["jobs"]["compare/dot-trec-s0"]
    (progress / "manifest.json").write_text(json.dumps(other))
    shutil.copytree(progress / "runs" / "compare" / "dot-trec-s0", progress / "runs" / "compare" / "cosine-trec-s0")
    assert reproduce.main(["--out", str(out), *args, "--publish"]) == 0
    pub = repo / "docs" / "results" / "cpu"
    # ... and published now: no longer progress; the run this report lacks stays (before: deleted with the stage)
    assert sorted(p.name for p in (progress / "runs" / "compare").iterdir()) == ["cosine-trec-s0"]
    assert list(json.loads((progress / "manifest.json").read_text())["jobs"]) == ["compare/cosine-trec-s0"]
    shutil.rmtree(progress)  # (it would be restored below as a third run)
    assert sorted(p.name for p in (pub / "runs" / "compare").iterdir()) == ["dot-trec-s0", "scaled_dot-trec-s0"]
    kept = {str(p.relative_to(pub / "runs")) for p in (pub / "runs").rglob("*") if p.is_file()}
    assert "compare/dot-trec-s0/metrics.json" in kept and "compare/dot-trec-s0/.hydra/overrides.yaml" in kept
    assert not [p for p in kept if p.endswith((".ckpt", ".log"))]
    fresh = tmp_path / "fresh"
    assert reproduce.main(["--out", str(fresh), *args, "--from-published"]) == 0
    assert (fresh / "compare" / "report" / "report.csv").read_bytes() == (pub / "compare.csv").read_bytes()
    paths = ["dir", "best_checkpoint", "wandb_run_dir"]  # where the runs lie: the one difference
    again = pd.read_csv(fresh / "compare" / "report" / "jobs.csv").drop(columns=paths, errors="ignore")
    pd.testing.assert_frame_equal(again, pd.read_csv(pub / "compare_jobs.csv").drop(columns=paths, errors="ignore"))
    restored = json.loads((fresh / "manifest.json").read_text())["jobs"]
    assert restored["compare/dot-trec-s0"]["restored_from"] == "docs/results/cpu/runs/compare/dot-trec-s0"


def test_the_plan_columns_add_up(tmp_path, capsys):
    """`jobs 2, done 0, resume 1, to run 2` read as three jobs: the last column counted the resumed job too.
    Now jobs = done + resume + start."""
    names = ("done", "resume", "leftover", "todo")
    jobs = [reproduce.Job("compare", {"attention": "dot", "seed": str(i)}, tmp_path / "compare" / f"dot-s{i}")
            for i in range(4)]
    (jobs[0].run_dir).mkdir(parents=True)
    (jobs[0].run_dir / "metrics.json").write_text("{}")
    (jobs[1].run_dir / "checkpoints").mkdir(parents=True)
    (jobs[1].run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")
    (jobs[2].run_dir).mkdir(parents=True)
    assert [j.status() for j in jobs] == list(names)
    reused = reproduce.Job("tune_lr", {"attention": "dot", "seed": "0", "optim.lr": "0.001"},
                           tmp_path / "tune_lr" / "dot-lr0.001-s0", same_as=jobs[0])
    assert reused.status() == "reuse"
    total = reproduce.print_plan(jobs + [reused], {jobs[0].estimate_key: 10.0}, ["compare", "tune_lr"], tmp_path)
    assert total == 30.0  # three jobs to run (the resumed one counted in full), the reused one none
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["stage", "jobs", "done", "reuse", "resume", "start", "expected"]
    assert lines[1].split()[1:6] == ["4", "1", "0", "1", "2"]  # 4 = 1 + 0 + 1 + 2
    assert lines[2].split()[1:6] == ["1", "0", "1", "0", "0"]


def test_a_part_with_set_overrides_is_not_estimated_as_the_stages_job(tmp_path, capsys):
    """The replay: a part with `--set trainer.max_steps=150` was planned with the full job's estimate (9 min
    11 s planned, 1 min 14 s taken), and its 74 s then became the full job's estimate. Now the estimate is keyed
    on the --set overrides: a finished job with the same overrides gives it; without one, the stage's own estimate
    is used and the plan says so; a job with --set never estimates the stage's own job."""
    extra = ["trainer.max_steps=150", "data.max_eval_samples=256"]
    part = reproduce.Job("compare", {"attention": "scaled_dot", "data": "sst2", "seed": "4"},
                         tmp_path / "compare" / "scaled_dot-sst2-s4", list(extra))
    full = reproduce.Job("compare", {"attention": "scaled_dot", "data": "sst2", "seed": "4"},
                         tmp_path / "full" / "scaled_dot-sst2-s4")
    assert full.estimate_key == part.budget_key == "compare/scaled_dot/data=sst2"
    assert part.estimate_key == "compare/scaled_dot/data=sst2 --set data.max_eval_samples=256 trainer.max_steps=150"
    table = {full.estimate_key: 551.0}
    assert reproduce.print_plan([part], table, ["compare"], tmp_path) == 551.0
    printed = capsys.readouterr().out
    assert "note: 1 job(s) estimated at their stage's own budget: no finished job with the same --set " \
           "(trainer.max_steps=150 data.max_eval_samples=256)" in printed
    # once a job with these overrides finished (74 s, as the replay's took), it estimates the part, not the stage
    manifest = {"jobs": {"compare/scaled_dot-sst2-s3": {"estimate_key": part.estimate_key, "status": "done",
                                                        "complete_run_seconds": 74.0}}}
    table.update(reproduce.measured_seconds(manifest))
    assert reproduce.job_estimate(part, table) == (74.0, True)
    assert reproduce.job_estimate(full, table) == (551.0, True)
    assert reproduce.print_plan([part], table, ["compare"], tmp_path) == 74.0
    assert "note:" not in capsys.readouterr().out


def test_a_job_with_only_interrupted_ckpt_resumes_from_it(tmp_path):
    """A job interrupted before its first last.ckpt (Ctrl-C/kill of the reproduction in its first epoch) has only
    interrupted.ckpt: it resumes from it (ckpt_path=last takes it), not started again from scratch."""
    job = reproduce.plan(["compare"], tmp_path, ["seed=0", "data=trec", "attention=dot"], [])[0]
    (job.run_dir / "checkpoints").mkdir(parents=True)
    assert job.status() == "leftover"
    (job.run_dir / "checkpoints" / "interrupted.ckpt").write_bytes(b"")
    assert job.status() == "resume" and "ckpt_path=last" in job.command("cpu")


def test_the_published_runs_have_no_inexact_mid_epoch_resume():
    """The published compare and head_dim_sweep runs have no inexact mid-epoch resume (their jobs CSVs)."""
    import csv

    for stage in ("compare", "head_dim_sweep"):
        rows = list(csv.DictReader((REPO_ROOT / f"docs/results/cpu/{stage}_jobs.csv").open()))
        assert rows and "resume/exact" in rows[0], stage
        assert not [r for r in rows if r["resume/exact"].lower() == "false"], stage


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_the_cost_stage_runs_each_benchmark_on_the_cpus_it_may_use(tmp_path, monkeypatch, device):
    """On a CPU the attention benchmark stops at n = 1024 and sweeps d at n = 256 (additive's forward+backward at
    n = 4096 takes minutes a call there, at n = 1024 and d = 256 over a minute) and both benchmarks get one torch thread per CPU this process may use: the stage runs alone.
    Before: the benchmark swept to n = 4096 (hours on 2 cores) and ran with whatever thread count the caller's
    environment set (OMP_NUM_THREADS=1 from a training session: one core of two)."""
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        out = cmd[cmd.index("--json") + 1] if "--json" in cmd else cmd[cmd.index("--out") + 1] + "/results.json"
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text("{}")
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(reproduce.subprocess, "run", fake_run)
    monkeypatch.setattr(reproduce.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    manifest = {"jobs": {}}
    assert reproduce.run_cost(device, tmp_path, manifest, "abc", "scaled_dot,additive")
    benches = [cmd[1:5] for cmd in calls]
    if device == "cpu":
        assert benches == [["-m", "attnbench", "bench", "attention"], ["-m", "attnbench", "bench", "train"]]
        attention, train = calls
        assert attention[attention.index("--lengths") + 1] == "64,128,256,512,1024"
        assert attention[attention.index("--at-n") + 1] == "256"  # the d sweep
        assert attention[attention.index("--threads") + 1] == "3" and train[train.index("--threads") + 1] == "3"
        assert train[train.index("--attention") + 1] == "scaled_dot,additive"
    else:
        assert benches == [["-m", "attnbench", "bench", "attention"]]
        assert "--lengths" not in calls[0] and calls[0][calls[0].index("--device") + 1] == "cuda"
    assert {k: v["status"] for k, v in manifest["jobs"].items()} == {
        f"cost/{name}": "done" for name in (["attention", "train_throughput"] if device == "cpu" else ["attention"])}
    # each benchmark's wall time is an estimate the next plan uses (before: "cost ... unknown" in every plan)
    assert set(reproduce.measured_seconds(manifest)) == set(manifest["jobs"])
    calls.clear()
    assert reproduce.run_cost(device, tmp_path, manifest, "abc", "scaled_dot") and calls == []  # done: skipped


def _fake_run(root, name, acc, failed=False):
    """A run dir as train.py leaves it: the record files the report reads, plus files a record leaves out."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / "csv").mkdir()
    (run / "checkpoints").mkdir()
    for f in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (run / ".hydra" / f).write_text(f"# {name} {f}\n")
    (run / "csv" / "metrics.part1.csv").write_text("epoch,step\n0,4\n")
    (run / "csv" / "metrics.csv").write_text("epoch,step\n1,9\n")
    (run / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    (run / "train.log").write_text("log\n")
    if failed:
        (run / "failure.json").write_text(json.dumps({"status": "failed", "error": "boom"}))
    else:
        (run / "metrics.json").write_text(json.dumps({"test/acc": acc}))
    return run


def test_published_run_records_restore_into_a_new_results_dir(tmp_path, monkeypatch):
    """--from-published: the records --publish keeps (docs/results/<device>/runs/) come back into an empty results
    dir with their manifest records, and the plan then counts the finished ones done; a run the results dir has
    already is left alone, and a record without a manifest entry is refused."""
    repo = tmp_path / "repo"
    runs = repo / "docs" / "results" / "cpu" / "runs" / "compare"
    for name, acc in (("dot-trec-s0", 0.8), ("scaled_dot-trec-s0", 0.9)):
        written = reproduce.copy_run_record(_fake_run(tmp_path / "made", name, acc), runs / name)
        assert sorted(str(p.relative_to(runs / name)) for p in written) == [
            ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "csv/metrics.csv",
            "csv/metrics.part1.csv", "metrics.json"]  # no checkpoint, no log
    reproduce.copy_run_record(_fake_run(tmp_path / "made", "additive-trec-s0", None, failed=True),
                              runs / "additive-trec-s0")
    unfinished = _fake_run(tmp_path / "made", "cosine-trec-s0", None, failed=True)  # killed: .hydra and a log only
    (unfinished / "failure.json").unlink()
    reproduce.copy_run_record(unfinished, runs / "cosine-trec-s0")
    published = {f"compare/{n}": {"commits": ["abc"], "status": "done", "seconds": 1.0}
                 for n in ("dot-trec-s0", "scaled_dot-trec-s0", "additive-trec-s0", "cosine-trec-s0")}
    (repo / "docs" / "results" / "cpu" / "manifest.json").write_text(json.dumps({"jobs": published}))
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    out = tmp_path / "out"
    _fake_run(out / "compare", "dot-trec-s0", 0.7)  # already here: kept, not overwritten
    manifest = {"jobs": {}}
    assert reproduce.restore_published_runs(["compare"], out, "cpu", manifest, dry_run=True) == [
        "compare/additive-trec-s0", "compare/cosine-trec-s0", "compare/scaled_dot-trec-s0"]
    assert not (out / "compare" / "scaled_dot-trec-s0").exists() and manifest == {"jobs": {}}
    # every record, the unfinished one too (before: only those with metrics.json or failure.json), so that the
    # report of the restored dir lists it as the published one did
    assert reproduce.restore_published_runs(["compare"], out, "cpu", manifest) == [
        "compare/additive-trec-s0", "compare/cosine-trec-s0", "compare/scaled_dot-trec-s0"]
    assert (out / "compare" / "cosine-trec-s0" / ".hydra" / "config.yaml").is_file()
    assert json.loads((out / "compare" / "scaled_dot-trec-s0" / "metrics.json").read_text()) == {"test/acc": 0.9}
    assert json.loads((out / "compare" / "dot-trec-s0" / "metrics.json").read_text()) == {"test/acc": 0.7}
    assert manifest["jobs"]["compare/scaled_dot-trec-s0"] == {
        **published["compare/scaled_dot-trec-s0"], "restored_from": "docs/results/cpu/runs/compare/scaled_dot-trec-s0"}
    assert set(manifest["jobs"]) == {"compare/scaled_dot-trec-s0", "compare/additive-trec-s0",
                                     "compare/cosine-trec-s0"}
    assert reproduce.restore_published_runs(["compare"], out, "cpu", manifest) == []  # nothing left to restore
    reproduce.copy_run_record(_fake_run(tmp_path / "made", "l2-trec-s0", 0.5), runs / "l2-trec-s0")
    other = tmp_path / "other"
    with pytest.raises(SystemExit, match=r"l2-trec-s0 has no record in the manifest.json beside its runs/ "
                                         r"\(1 run\(s\) so\).*nothing was"):
        reproduce.restore_published_runs(["compare"], other, "cpu", {"jobs": {}})
    assert not other.exists()  # checked first: nothing half-restored


def test_unpublished_runs_kept_by_save_progress_restore_on_another_machine(tmp_path, monkeypatch, capsys):
    """--save-progress keeps the records of finished runs not yet published (docs/results/<device>/progress/, with
    their manifest records) while the reproduction still runs (no lock), and --from-published on a new results
    dir restores them after the published ones; an unfinished run and a run with no manifest record are not kept,
    and a run published from the same commits is not kept twice."""
    repo = tmp_path / "repo"
    pub = repo / "docs" / "results" / "cpu"
    reproduce.copy_run_record(_fake_run(tmp_path / "made", "dot-trec-s0", 0.8), pub / "runs" / "compare" / "dot-trec-s0")
    (pub / "manifest.json").write_text(json.dumps({"jobs": {"compare/dot-trec-s0": {"commits": ["abc"]}}}))
    monkeypatch.setattr(reproduce, "ROOT", repo)
    monkeypatch.chdir(repo)  # main() works in the current directory (--root)
    out = tmp_path / "machine1"
    for name in ("dot-trec-s0", "scaled_dot-trec-s0", "cosine-trec-s0"):
        _fake_run(out / "compare", name, 0.9)
    _fake_run(out / "compare", "additive-trec-s0", None, failed=True)  # not finished: nothing to keep
    (out / "compare" / "l2-trec-s0").mkdir()  # started, no metrics.json yet
    records = {f"compare/{n}": {"commits": ["abc"], "status": "done"}
               for n in ("dot-trec-s0", "scaled_dot-trec-s0", "additive-trec-s0", "l2-trec-s0")}  # cosine: none
    (out / "manifest.json").write_text(json.dumps({"jobs": records}))
    reproduce.lock_results_dir(out)  # a reproduction running on it
    assert reproduce.main(["--out", str(out), "--stages", "compare", "--save-progress"]) == 0
    assert "kept 1 finished run(s) in docs/results/cpu/progress/" in capsys.readouterr().out
    progress = pub / "progress"
    assert sorted(p.name for p in (progress / "runs" / "compare").iterdir()) == ["scaled_dot-trec-s0"]
    kept = json.loads((progress / "manifest.json").read_text())
    assert kept["jobs"] == {"compare/scaled_dot-trec-s0": {"commits": ["abc"], "status": "done"}}
    assert "not Results" in kept["what"]
    fresh = tmp_path / "machine2"
    manifest = {"jobs": {}}
    assert reproduce.restore_published_runs(["compare"], fresh, "cpu", manifest) == [
        "compare/dot-trec-s0", "compare/scaled_dot-trec-s0"]
    assert manifest["jobs"]["compare/scaled_dot-trec-s0"]["restored_from"] == \
        "docs/results/cpu/progress/runs/compare/scaled_dot-trec-s0"
    assert (fresh / "compare" / "scaled_dot-trec-s0" / "metrics.json").is_file()


def _record(root: Path, key: str, acc: float, commit: str, manifest: dict) -> None:
    run = root / key
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.json").write_text(json.dumps({"test/acc": acc}))
    manifest["jobs"][key] = {"commits": [commit], "status": "done"}


def test_a_re_run_kept_as_progress_is_restored_before_its_older_published_record(tmp_path, monkeypatch):
    """--save-progress keeps a run whose published record is of other commits (a re-run); --from-published took
    the published record first and never restored the re-run (found by a breaker: test/acc 0.5 instead of 0.99)."""
    repo = tmp_path / "repo"
    pub = repo / "docs" / "results" / "cpu"
    monkeypatch.setattr(reproduce, "ROOT", repo)
    published = {"jobs": {}}
    _record(pub / "runs", "compare/dot-trec-s0", 0.50, "old", published)
    (pub / "manifest.json").write_text(json.dumps(published))
    rerun, manifest = tmp_path / "rerun", {"jobs": {}}
    _record(rerun, "compare/dot-trec-s0", 0.99, "new", manifest)
    assert reproduce.save_progress(["compare"], rerun, "cpu", manifest) == ["compare/dot-trec-s0"]
    fresh, restored = tmp_path / "fresh", {"jobs": {}}
    assert reproduce.restore_published_runs(["compare"], fresh, "cpu", restored) == ["compare/dot-trec-s0"]
    assert json.loads((fresh / "compare" / "dot-trec-s0" / "metrics.json").read_text())["test/acc"] == 0.99
    assert restored["jobs"]["compare/dot-trec-s0"]["commits"] == ["new"]
    same, kept = tmp_path / "same", {"jobs": {}}  # the published run itself is not kept again
    _record(same, "compare/dot-trec-s0", 0.50, "old", kept)
    (pub / "progress" / "runs" / "compare" / "dot-trec-s0" / "metrics.json").unlink()
    assert reproduce.save_progress(["compare"], same, "cpu", kept) == []


def test_a_job_whose_baseline_ran_on_another_machine_gets_a_baseline_twin_here(tmp_path):
    """The report pairs rates only on one host (train_host, test_host). A reproduction continued on another
    machine (this project's sessions each get a new one) would leave its new runs of a seed without a scaled_dot
    pair; a twin of the seed's scaled_dot job runs here first, once, into its own dir."""
    def job(attention, seed):
        return reproduce.Job("compare", {"seed": str(seed), "data": "imdb", "attention": attention},
                             tmp_path / "compare" / f"{attention}-imdb-s{seed}")

    def finish(j, **record):
        j.run_dir.mkdir(parents=True, exist_ok=True)
        (j.run_dir / "metrics.json").write_text(json.dumps(record))

    rates = {"train/tokens_per_sec": 1000.0, "test/tokens_per_sec": 4000.0}
    jobs = [job(a, s) for s in (0, 1, 2, 3) for a in ("scaled_dot", "dot", "additive")]
    finish(jobs[0], **rates, train_host="b/2", test_host="b/2")  # seed 0: scaled_dot on machine b, dot too
    finish(jobs[1], **rates, train_host="b/2", test_host="b/2")  # additive-s0 still to run here: needs a twin
    finish(jobs[3], **rates)  # seed 1: scaled_dot recorded before hosts were (no host): a twin
    finish(jobs[6], **rates, train_host="a/1", test_host="a/1")  # seed 2: scaled_dot ran here: no twin
    # seed 3: all done, scaled_dot on b, dot on b, additive here: a twin for additive's pair
    finish(jobs[9], **rates, train_host="b/2", test_host="b/2")
    finish(jobs[10], **rates, train_host="b/2", test_host="b/2")
    finish(jobs[11], **rates, train_host="a/1", test_host="a/1")
    planned, twins = reproduce.with_baseline_twins(jobs, "a/1")
    assert [t.name for t in twins] == ["scaled_dot-imdb-s0-on-a-1", "scaled_dot-imdb-s1-on-a-1",
                                       "scaled_dot-imdb-s3-on-a-1"]
    assert [j.name for j in planned] == [
        "scaled_dot-imdb-s0", "dot-imdb-s0", "scaled_dot-imdb-s0-on-a-1", "additive-imdb-s0",
        "scaled_dot-imdb-s1", "scaled_dot-imdb-s1-on-a-1", "dot-imdb-s1", "additive-imdb-s1",
        "scaled_dot-imdb-s2", "dot-imdb-s2", "additive-imdb-s2",
        "scaled_dot-imdb-s3", "dot-imdb-s3", "scaled_dot-imdb-s3-on-a-1", "additive-imdb-s3"]
    twin = twins[0]
    assert twin.overrides == jobs[0].overrides and twin.status() == "todo"
    assert f"hydra.run.dir={tmp_path / 'compare' / 'scaled_dot-imdb-s0-on-a-1'}" in twin.command("cpu")
    # done here already (an earlier part of this reproduction): not again; a baseline without rates: none
    for done in twins:
        finish(done, **rates, train_host="a/1", test_host="a/1")
    finish(jobs[3])
    planned, twins = reproduce.with_baseline_twins(jobs, "a/1")
    assert twins == [] and len(planned) == len(jobs)
    assert reproduce.host_tag("vm/c4397b6f") == "vm-c4397b6f"


def test_report_only_on_the_cost_stage_says_it_has_no_report_to_write(tmp_path, capsys):
    """``--report-only --stages cost`` ran nothing and wrote nothing; it now says why instead of ending on
    "0 failed" alone: the cost stage's results are its benchmarks' files, which --publish copies."""
    assert reproduce.main(["--out", str(tmp_path), "--stages", "cost", "--report-only"]) == 0
    out = capsys.readouterr().out
    assert f"cost: no report to write; its results are the benchmark files in {tmp_path / 'cost'}" in out
    assert "(--publish copies them into docs/results/)" in out
    assert list(tmp_path.iterdir()) == []  # nothing: --report-only takes no lock of the results dir


def test_the_plan_stops_before_any_job_when_a_datasets_data_cannot_be_loaded(tmp_path, monkeypatch, capsys):
    """Without a local mirror and without the Hub, IMDB cannot be loaded: a full reproduction ran hours of SST-2
    and TREC jobs first and then failed each IMDB job. The plan checks every dataset of the jobs still to run once
    (attnbench.data.sources.preflight) and stops before any job with one message per dataset that names its jobs
    and the fix; the packaged SST-2 and TREC are said to come from the package. --dry-run only reports it."""
    monkeypatch.delenv("ATTNBENCH_DATA_DIR", raising=False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: the Hub probe fails at once
    out = tmp_path / "results"
    argv = ["--out", str(out), "--stages", "compare", "--grid", "seed=0", "--grid", "attention=dot",
            "--no-baseline-twins"]
    assert reproduce.main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "data: sst2 from package: package:sst2 (1 job(s) of compare)" in printed
    assert "data: 1 job(s) of compare cannot load their data: Cannot load dataset 'imdb'" in printed
    assert "ATTNBENCH_DATA_DIR" in printed.split("cannot load their data")[1]
    with pytest.raises(SystemExit, match="Stopped before any job ran: make the data above loadable"):
        reproduce.main(argv)
    assert not (out / "compare").exists()  # no job started, not even SST-2's


@pytest.mark.slow
def test_the_data_check_sees_an_empty_offline_cache_relative_paths_and_job_time_interpolations(
        tmp_path, monkeypatch, capsys, generated_mirror):
    """Three ways the check disagreed with the jobs (breaker's review): with HF_HUB_OFFLINE=1 the Hub plan passed
    although the local Hugging Face cache lacked IMDB (the jobs then failed); a relative ATTNBENCH_DATA_DIR was
    resolved from the caller's directory by the check and from the repository's root by the jobs; a `--set` that
    only a running job resolves (${hydra:runtime.output_dir}) crashed the plan with a traceback."""
    argv = ["--out", str(tmp_path / "results"), "--stages", "compare", "--grid", "seed=0", "--grid",
            "attention=dot", "--grid", "data=imdb", "--no-baseline-twins"]
    monkeypatch.delenv("ATTNBENCH_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # and, were the offline flag not read, no Hub either
    with pytest.raises(SystemExit, match="Stopped before any job ran"):
        reproduce.main(argv)
    assert ("HF_HUB_OFFLINE/HF_DATASETS_OFFLINE is set and the local Hugging Face cache does not hold "
            "stanfordnlp/imdb") in capsys.readouterr().out
    assert not (tmp_path / "results" / "compare").exists()

    monkeypatch.delenv("HF_HUB_OFFLINE")
    (tmp_path / "mirror").symlink_to(generated_mirror)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNBENCH_DATA_DIR", "mirror")  # relative to here, where the user is
    assert reproduce.main([*argv, "--dry-run"]) == 0
    assert f"data: imdb from local: {(tmp_path / 'mirror').resolve() / 'imdb'}" in capsys.readouterr().out
    assert __import__("os").environ["ATTNBENCH_DATA_DIR"] == str(tmp_path / "mirror")  # what the jobs get

    assert reproduce.main([*argv, "--set", "data.cache_dir=${hydra:runtime.output_dir}/cache", "--dry-run"]) == 0
    assert "data: imdb" not in capsys.readouterr().out  # not checked by the plan: the job's own preflight does


# A score function as a user adds it outside the package: one module and one YAML in a folder of their own
_SCRATCH_MODULE = '''
"""-||q - k||_1: the negative Manhattan distance, a user's own score function."""
from attnbench.attention import ScoreFunction


class ManhattanScore(ScoreFunction):
    name = "scratch_l1"

    def scores(self, query, key):
        return -(query.unsqueeze(-2) - key.unsqueeze(-3)).abs().sum(-1)

    def reference_scores(self, query, key):
        return -(query.unsqueeze(-2) - key.unsqueeze(-3)).abs().sum(-1)
'''


def _scratch_score_function(root: Path) -> str:
    """Write ``<root>/scratchpkg/scores.py`` and ``<root>/conf/attention/scratch_l1.yaml``; return the
    ``hydra.searchpath`` override that adds the YAML's folder."""
    (root / "scratchpkg").mkdir(parents=True)
    (root / "scratchpkg" / "__init__.py").write_text("")
    (root / "scratchpkg" / "scores.py").write_text(_SCRATCH_MODULE)
    (root / "conf" / "attention").mkdir(parents=True)
    (root / "conf" / "attention" / "scratch_l1.yaml").write_text(
        "_target_: scratchpkg.scores.ManhattanScore\nname: scratch_l1\n")
    return f"hydra.searchpath=[file://{root / 'conf'}]"


@pytest.mark.slow  # Hydra composes each of ~70 jobs of three plans; the dry run below shows the compare plan by default
def test_a_new_score_function_joins_every_stage_that_sweeps_all_of_them(tmp_path):
    """One module plus one YAML outside the package, added by ``hydra.searchpath``, and no other edit: the
    ``compare`` plan has its jobs for every seed and dataset, beside every packaged score function's, and the
    ``cost`` stage's training benchmark measures it; ``head_dim_sweep``, which names its score functions, does not
    take it."""
    searchpath = _scratch_score_function(tmp_path / "ext")
    packaged = sorted(p.stem for p in (REPO_ROOT / "conf" / "attention").glob("*.yaml"))
    jobs = reproduce.plan(["compare"], tmp_path / "out", ["seed=0,1"], [searchpath])
    by_attention: dict[str, list] = {}
    for job in jobs:
        by_attention.setdefault(job.overrides["attention"], []).append(job)
    assert sorted(by_attention) == sorted([*packaged, "scratch_l1"])
    seeds_x_data = {(j.overrides["seed"], j.overrides["data"]) for j in by_attention["scaled_dot"]}
    assert {(j.overrides["seed"], j.overrides["data"]) for j in by_attention["scratch_l1"]} == seeds_x_data
    assert len(seeds_x_data) == 6  # 2 seeds x 3 datasets
    job = by_attention["scratch_l1"][0]
    assert job.name == f"scratch_l1-{job.overrides['data']}-s{job.overrides['seed']}"
    assert searchpath in job.command("cpu")  # the job composes with the same search path
    assert "scratch_l1" in reproduce.cost_scores([searchpath]).split(",")
    head_dim = reproduce.plan(["head_dim_sweep"], tmp_path / "o2", ["seed=0", "model.head_dim=16"], [searchpath])
    assert "scratch_l1" not in {j.overrides["attention"] for j in head_dim}
    # without the search path the plan is the packaged score functions' alone
    plain = reproduce.plan(["compare"], tmp_path / "o3", ["seed=0", "data=trec"], [])
    assert sorted(j.overrides["attention"] for j in plain) == packaged


@pytest.mark.slow  # a subprocess per case: CI runs it
def test_the_dry_run_of_an_installed_command_shows_a_new_score_function(tmp_path, data_dir):
    """``attnbench reproduce --dry-run`` from a folder outside the repository, with the scratch score function on
    the search path: its plan's ``compare`` grid lists it and counts its jobs (one seed: one per dataset)."""
    searchpath = _scratch_score_function(tmp_path / "ext")
    env = {**os.environ, "ATTNBENCH_DATA_DIR": str(data_dir), "PYTHONPATH": str(tmp_path / "ext")}
    proc = subprocess.run([sys.executable, "-m", "attnbench", "reproduce", "--dry-run", "--stages", "compare",
                           "--grid", "seed=0", "--out", str(tmp_path / "out"), "--set", searchpath], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    grid = next(line for line in proc.stdout.splitlines() if line.startswith("compare: "))
    assert "scratch_l1" in grid.split("attention=", 1)[1].split(",")
    packaged = len(list((REPO_ROOT / "conf" / "attention").glob("*.yaml")))
    row = next(line for line in proc.stdout.splitlines() if line.startswith("compare "))
    assert int(row.split()[1]) == 3 * (packaged + 1)  # 3 datasets


@pytest.mark.slow  # two tiny jobs twice (about a minute on 2 cores)
@pytest.mark.skipif(not hasattr(reproduce.os, "sched_getaffinity") or len(reproduce.os.sched_getaffinity(0)) < 2,
                    reason="needs Linux CPU affinity and 2 CPUs")
def test_jobs_side_by_side_give_the_metrics_of_the_same_jobs_one_at_a_time(tmp_path):
    from .test_parallel_sweeps import outcome

    grid = ("--grid", "attention=dot,additive", "--no-report")
    both = _reproduce(tmp_path / "both", *grid, "--jobs", "2")
    assert both.returncode == 0, both.stdout + both.stderr
    alone = subprocess.run(_reproduce_cmd(tmp_path / "alone", *grid), cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert alone.returncode == 0, alone.stdout + alone.stderr
    manifest = json.loads((tmp_path / "both" / "manifest.json").read_text())
    cpus = set()
    for name in ("dot-trec-s0", "additive-trec-s0"):
        side, single = (json.loads((tmp_path / w / "compare" / name / "metrics.json").read_text())
                        for w in ("both", "alone"))
        assert side["torch_threads"] == single["torch_threads"] == 1
        assert side["cpus"] == manifest["jobs"][f"compare/{name}"]["cpus"] and len(side["cpus"]) == 1
        cpus.add(tuple(side["cpus"]))
        assert outcome(side) == outcome(single), name
    assert len(cpus) == 2


def test_a_second_publication_at_once_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    """A publication stages README.md and docs/ and writes back what changed: two at once (now that --report-only
    runs beside a reproduction) would revert each other's files. The second is refused while the first holds the
    checkout's publish lock."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "docs" / "results" / "cpu").mkdir(parents=True)
    (repo / "README.md").write_text("# r\n")
    monkeypatch.setattr(reproduce, "ROOT", repo)
    first = reproduce._hold_publish_lock("cpu")
    try:
        with pytest.raises(reproduce.PublishError, match="another attnbench reproduce --publish"):
            reproduce.publish(["compare"], tmp_path / "out", "cpu", started=0.0)
    finally:
        first.close()
    with pytest.raises(reproduce.PublishError, match="no stage of compare has results"):  # free again
        reproduce.publish(["compare"], tmp_path / "out", "cpu", started=0.0)
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md", "docs"]


def test_from_progress_restores_the_kept_re_run_and_leaves_older_published_runs_to_run_again(tmp_path, monkeypatch):
    """A re-run on new code continued on another machine: --from-published would count the stage's published runs
    (of the older code) as done and skip them; --from-progress restores only what --save-progress kept."""
    repo = tmp_path / "repo"
    pub = repo / "docs" / "results" / "cpu"
    monkeypatch.setattr(reproduce, "ROOT", repo)
    published = {"jobs": {}}
    for name in ("dot-trec-s0", "scaled_dot-trec-s0"):
        _record(pub / "runs", f"compare/{name}", 0.50, "old", published)
    (pub / "manifest.json").write_text(json.dumps(published))
    rerun, manifest = tmp_path / "rerun", {"jobs": {}}
    _record(rerun, "compare/scaled_dot-trec-s0", 0.99, "new", manifest)
    assert reproduce.save_progress(["compare"], rerun, "cpu", manifest) == ["compare/scaled_dot-trec-s0"]
    fresh, restored = tmp_path / "fresh", {"jobs": {}}
    assert reproduce.restore_published_runs(["compare"], fresh, "cpu", restored, published=False) == [
        "compare/scaled_dot-trec-s0"]
    assert restored["jobs"]["compare/scaled_dot-trec-s0"]["commits"] == ["new"]
    assert not (fresh / "compare" / "dot-trec-s0").exists()  # the old run is not taken as done: it runs again
    assert reproduce.restore_published_runs(["compare"], tmp_path / "all", "cpu", {"jobs": {}}) == [
        "compare/dot-trec-s0", "compare/scaled_dot-trec-s0"]


def test_the_plan_names_done_jobs_of_other_commits(tmp_path):
    """A results dir continued on newer code (or restored from another reproduction) counts its finished runs as
    done: the plan says how many ran on which other commit, so that no one reads them as this code's unchecked."""
    jobs = [reproduce.Job("compare", {"attention": a, "seed": "0"}, tmp_path / "compare" / f"{a}-s0")
            for a in ("dot", "scaled_dot", "cosine")]
    for job in jobs[:2]:
        job.run_dir.mkdir(parents=True)
        (job.run_dir / "metrics.json").write_text("{}")
    manifest = {"jobs": {"compare/dot-s0": {"commits": ["aaa", "bbb+dirty"]},
                         "compare/scaled_dot-s0": {"commits": ["bbb"]}, "compare/cosine-s0": {"commits": ["ccc"]}}}
    assert reproduce.done_on_other_commits(jobs, manifest, "bbb+dirty") == {"aaa": ["compare/dot-s0"]}
    assert reproduce.done_on_other_commits(jobs, manifest, "ddd") == {
        "aaa": ["compare/dot-s0"], "bbb": ["compare/dot-s0", "compare/scaled_dot-s0"]}  # cosine: not done


def test_from_progress_and_from_published_are_one_choice(capsys):
    with pytest.raises(SystemExit) as stop:
        reproduce.main(["--from-progress", "--from-published", "--dry-run"])
    assert stop.value.code == 2 and "choose one" in capsys.readouterr().err
