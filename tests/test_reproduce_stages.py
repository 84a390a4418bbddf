"""The re-run's stages beyond one product grid: tune_lr chooses each (score function, dataset)'s learning rate on
validation, compare_tuned trains at it (its shared-lr jobs are compare's, not trained twice), d_a sweeps additive's
hidden size beside one scaled_dot per setting; and the plan counts each."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnbench.experiments import reproduce
from attnbench.experiments.registry import TUNE_METRIC

EVERY = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "conf" / "attention").glob("*.yaml"))


def _finished(job: reproduce.Job, metrics: dict) -> None:
    """Give ``job`` a finished run's record: metrics.json, its composed config and a CSV log."""
    (job.run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    (job.run_dir / "metrics.json").write_text(json.dumps(metrics))
    (job.run_dir / ".hydra" / "config.yaml").write_text(f"task_name: {job.stage}\nseed: {job.overrides['seed']}\n")
    (job.run_dir / "csv").mkdir(exist_ok=True)
    (job.run_dir / "csv" / "metrics.csv").write_text("step,val/acc\n0,0.5\n")


@pytest.mark.slow
def test_tune_lr_is_a_log_grid_around_the_shared_lr_for_every_score_function_and_its_shared_points_are_compares(
        tmp_path):
    """Every score function x SST-2, IMDB x optim.lr 3e-4 ... 1e-2 (33x, the shared 1e-3 included), seed 0; with
    compare in the plan, its 16 shared-lr jobs are compare's seed-0 jobs (reuse), the other 48 train."""
    jobs = reproduce.plan(["compare", "tune_lr"], tmp_path, [], [])
    tune = [j for j in jobs if j.stage == "tune_lr"]
    assert len(tune) == len(EVERY) * 2 * 4
    assert {j.overrides["attention"] for j in tune} == set(EVERY)
    assert {j.overrides["data"] for j in tune} == {"sst2", "imdb"} and {j.overrides["seed"] for j in tune} == {"0"}
    lrs = sorted({float(j.overrides["optim.lr"]) for j in tune})
    assert lrs == [3e-4, 1e-3, 3e-3, 1e-2] and lrs[-1] / lrs[0] >= 10
    reused = [j for j in tune if j.status() == "reuse"]
    assert len(reused) == len(EVERY) * 2
    assert all(j.overrides["optim.lr"] == "0.001" for j in reused)
    assert {(j.name, j.same_as.stage, j.same_as.name) for j in reused} == {
        (f"{j.overrides['attention']}-{j.overrides['data']}-lr0.001-s0", "compare",
         f"{j.overrides['attention']}-{j.overrides['data']}-s0") for j in reused}
    # alone, with compare's jobs not run: its shared-lr jobs train here
    alone = reproduce.plan(["tune_lr"], tmp_path / "alone", ["data=sst2", "attention=dot"], [])
    assert [j.status() for j in alone] == ["todo"] * 4


def test_the_chosen_lr_is_the_best_validation_with_ties_to_the_shared_lr(tmp_path):
    """The choice reads each run's TUNE_METRIC: the best wins; a tie goes to the shared lr (then the smaller); a
    (dataset, score function) with an unfinished lr has no choice yet."""
    values = {("sst2", "dot"): {3e-4: 0.80, 1e-3: 0.81, 3e-3: 0.83, 1e-2: 0.79},
              ("sst2", "additive"): {3e-4: 0.82, 1e-3: 0.82, 3e-3: 0.82, 1e-2: 0.70},
              ("imdb", "dot"): {3e-4: 0.86, 1e-3: 0.85, 3e-3: 0.86, 1e-2: 0.84},
              ("imdb", "additive"): {3e-4: 0.80, 1e-3: None, 3e-3: 0.85, 1e-2: 0.84}}
    jobs = []
    for (data, attention), by_lr in values.items():
        for lr, value in by_lr.items():
            job = reproduce.Job("tune_lr", {"seed": "0", "data": data, "attention": attention, "optim.lr": repr(lr)},
                                tmp_path / "tune_lr" / f"{attention}-{data}-lr{lr}-s0")
            if value is not None:
                _finished(job, {TUNE_METRIC: value, "val/acc": value - 0.01})
            jobs.append(job)
    path = reproduce.write_chosen_lr("tune_lr", jobs, tmp_path)
    assert path == tmp_path / "tune_lr" / "chosen_lr.json"
    written = json.loads(path.read_text())
    assert written["chosen"] == {"sst2": {"dot": 3e-3, "additive": 1e-3}, "imdb": {"dot": 3e-4}}
    assert written["incomplete"] == ["imdb/additive"]
    assert written["metric"] == TUNE_METRIC == "val/acc_best" and written["shared_lr"] == 1e-3
    assert written["values"]["sst2"]["dot"] == {"0.0003": 0.80, "0.001": 0.81, "0.003": 0.83, "0.01": 0.79}
    assert not list((tmp_path / "tune_lr").glob(".*tmp"))  # written atomically, no temp file left


@pytest.mark.slow
def test_compare_tuned_takes_the_chosen_lr_and_reuses_compares_run_where_it_is_the_shared_one(tmp_path, capsys):
    """Before tune_lr's choice every job waits and the plan says its time is an upper bound; with the choice each
    job gets optim.lr=<chosen>, and the one whose chosen lr is the shared 1e-3 is compare's job: copied, not run."""
    grid = ["seed=0", "data=sst2", "attention=additive,scaled_dot"]
    before = reproduce.plan(["compare", "compare_tuned"], tmp_path, grid, [])
    tuned = [j for j in before if j.stage == "compare_tuned"]
    assert [j.waits_for for j in tuned] == ["tune_lr", "tune_lr"] and [j.status() for j in tuned] == ["todo"] * 2
    table = {"compare/additive/data=sst2": 300.0, "compare/scaled_dot/data=sst2": 200.0}
    total = reproduce.print_plan(before, table, ["compare", "compare_tuned"], tmp_path)
    assert total == 1000.0  # compare's two jobs and, as the upper bound, compare_tuned's two at compare's times
    printed = capsys.readouterr().out
    assert "compare_tuned: 2 job(s) wait for tune_lr's chosen learning rates" in printed
    assert "an upper bound" in printed

    (tmp_path / "tune_lr").mkdir()
    (tmp_path / "tune_lr" / "chosen_lr.json").write_text(json.dumps(
        {"chosen": {"sst2": {"additive": 0.003, "scaled_dot": 0.001}}}))
    after = reproduce.plan(["compare", "compare_tuned"], tmp_path, grid, [])
    compare = {j.name: j for j in after if j.stage == "compare"}
    tuned = {j.name: j for j in after if j.stage == "compare_tuned"}
    assert tuned["additive-sst2-s0"].overrides["optim.lr"] == "0.003"
    assert tuned["additive-sst2-s0"].status() == "todo" and tuned["additive-sst2-s0"].same_as is None
    assert "optim.lr=0.003" in tuned["additive-sst2-s0"].command("cpu")
    assert tuned["scaled_dot-sst2-s0"].same_as is compare["scaled_dot-sst2-s0"]
    assert tuned["scaled_dot-sst2-s0"].status() == "reuse"
    assert reproduce.print_plan(after, table, ["compare", "compare_tuned"], tmp_path) == 800.0
    assert "wait for" not in capsys.readouterr().out

    # compare's run finishes: its record is copied into compare_tuned, with its manifest record
    source = compare["scaled_dot-sst2-s0"]
    _finished(source, {TUNE_METRIC: 0.81, "test/acc": 0.80})
    manifest = {"jobs": {"compare/scaled_dot-sst2-s0": {"status": "done", "commits": ["abc"], "seconds": 200.0}}}
    copied = reproduce.copy_reused(after, manifest, tmp_path)
    target = tuned["scaled_dot-sst2-s0"]
    assert copied == [target] and target.status() == "done"
    for name in ("metrics.json", ".hydra/config.yaml", "csv/metrics.csv"):
        assert (target.run_dir / name).read_bytes() == (source.run_dir / name).read_bytes()
    record = manifest["jobs"]["compare_tuned/scaled_dot-sst2-s0"]
    assert record["reused_from"] == "compare/scaled_dot-sst2-s0" and record["commits"] == ["abc"]
    assert record["overrides"]["optim.lr"] == "0.001"


@pytest.mark.slow
def test_d_a_sweeps_additive_hidden_size_beside_one_scaled_dot_per_setting(tmp_path):
    """d_a at fixed d_k = 32: additive at d_a 128 and 512 and at its default (d_a = d_k = 32), and scaled_dot once
    per (dataset, seed), on SST-2 and associative recall at 24 pairs (model=recall), 3 seeds: 24 jobs, no scaled_dot
    twice. On SST-2 the default additive and scaled_dot jobs are compare's (reuse)."""
    jobs = reproduce.plan(["compare", "d_a"], tmp_path, [], [])
    d_a = [j for j in jobs if j.stage == "d_a"]
    names = sorted(j.name for j in d_a)
    expected = sorted(f"{a}-{data}-s{s}" for s in range(3) for data in ("sst2", "assoc_recall")
                      for a in ("additive-da128", "additive-da512", "additive", "scaled_dot"))
    assert names == expected
    recall = [j for j in d_a if j.overrides["data"] == "assoc_recall"]
    assert all(j.overrides["model"] == "recall" and j.overrides["data.num_pairs"] == "24" for j in recall)
    assert [j.overrides.get("attention.hidden_dim") for j in d_a if j.overrides["attention"] == "scaled_dot"] \
        == [None] * 6
    reused = {j.name: j.same_as.name for j in d_a if j.status() == "reuse"}
    assert reused == {f"{a}-sst2-s{s}": f"{a}-sst2-s{s}" for a in ("additive", "scaled_dot") for s in range(3)}
    # the setting separates the estimates: d_a 128 and 512 never share one
    keys = {j.estimate_key for j in d_a if j.overrides["data"] == "sst2"}
    assert keys == {"d_a/additive/data=sst2,attention.hidden_dim=128",
                    "d_a/additive/data=sst2,attention.hidden_dim=512", "d_a/additive/data=sst2",
                    "d_a/scaled_dot/data=sst2"}


@pytest.mark.slow
def test_a_reproduction_runs_tune_lr_then_compare_tuned_at_the_chosen_lr_and_trains_nothing_twice(tmp_path,
                                                                                                   monkeypatch):
    """compare, tune_lr, compare_tuned in one reproduction (each job "trained" by writing its metrics.json): tune_lr's
    shared-lr jobs are copied from compare, the choice is written after tune_lr's runs, and compare_tuned then trains
    only the job whose chosen lr is not the shared one (additive at 3e-3); scaled_dot's (1e-3) is compare's run."""
    grid = ["seed=0", "data=sst2", "attention=additive,scaled_dot"]
    best = {"scaled_dot": "0.001", "additive": "0.003"}
    ran = []

    def train(todo, groups, device, manifest, out, commit, table):
        for job in todo:
            ran.append(f"{job.stage}/{job.name}")
            lr = job.overrides.get("optim.lr", "0.001")
            _finished(job, {TUNE_METRIC: 0.85 if lr == best[job.overrides["attention"]] else 0.80})
            manifest["jobs"][f"{job.stage}/{job.name}"] = {"status": "done", "commits": ["c"]}
        return []

    monkeypatch.setattr(reproduce, "run_jobs", train)
    stages = ["compare", "tune_lr", "compare_tuned"]
    jobs = reproduce.plan(stages, tmp_path, grid, [])
    manifest = {"jobs": {}}
    args = SimpleNamespace(grid=grid, extra=[], device="cpu")
    assert reproduce.run_phases(jobs, stages, args, [None], manifest, tmp_path, "c", {}) == []
    assert ran == ["compare/additive-sst2-s0", "compare/scaled_dot-sst2-s0",
                   *(f"tune_lr/{a}-sst2-lr{lr}-s0" for a in ("additive", "scaled_dot")
                     for lr in ("0.0003", "0.003", "0.01")),
                   "compare_tuned/additive-sst2-s0"]
    chosen = json.loads((tmp_path / "tune_lr" / "chosen_lr.json").read_text())["chosen"]
    assert chosen == {"sst2": {"additive": 0.003, "scaled_dot": 0.001}}
    assert sorted(k for k, v in manifest["jobs"].items() if "reused_from" in v) == [
        "compare_tuned/scaled_dot-sst2-s0", "tune_lr/additive-sst2-lr0.001-s0", "tune_lr/scaled_dot-sst2-lr0.001-s0"]
    assert sorted(p.parent.name for p in (tmp_path / "compare_tuned").glob("*/metrics.json")) == [
        "additive-sst2-s0", "scaled_dot-sst2-s0"]
