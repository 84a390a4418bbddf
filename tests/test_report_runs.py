"""attnbench report on any set of runs: a folder of single runs, run dirs, a sweep over several settings, W&B.

Each run here is what train.py leaves (``.hydra/config.yaml``, ``hydra.yaml``'s choices, ``overrides.yaml``,
``metrics.json``), written by hand so that the expected numbers are known; intervals come from scipy's t
quantile, computed here independently of the report's code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from matplotlib.container import ErrorbarContainer
from scipy import stats

from attnbench.analysis import report


def _config(attention: str, seed: int, data: str = "sst2", head_dim: int | None = None, max_steps: int = 150,
            run: int = 0) -> dict:
    """A composed config as train.py's .hydra/config.yaml holds it (the parts the report reads)."""
    return {
        "attention": {"name": attention, "_target_": f"attnbench.attention.{attention}",
                      **({"hidden_dim": 32} if attention == "additive" else {})},
        "model": {"d_model": 64, "n_heads": 2, "head_dim": head_dim, "n_layers": 1},
        "data": {"_target_": "attnbench.data.TextClassificationDataModule", "name": data, "max_length": 64,
                 "batch_size": 32, "max_train_samples": 2000, "local_dir": f"/data/{run}",
                 "cache_dir": f"/cache/{run}", "tokenizer": {"kind": "wordpiece", "vocab_size": 16000}},
        "trainer": {"max_steps": max_steps, "max_epochs": 3, "enable_progress_bar": run % 2 == 0},
        "logger": {"wandb": {"project": "attnbench", "group": None}} if run % 2 else {"csv": {}},
        "optim": {"lr": 0.001},
        "seed": seed, "task_name": "train", "run_name": f"{attention}-{data}-s{seed}", "tags": [],
    }


def _run(root: Path, name: str, config: dict, overrides: list[str], metrics: dict | None, model: str = "tiny",
         log: str = "") -> Path:
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    choices = {"attention": config["attention"]["name"], "data": config["data"]["name"], "model": model,
               "trainer": "default", "logger": "csv" if "csv" in config["logger"] else "wandb",
               "callbacks": "default", "experiment": None, "hydra/launcher": "basic"}
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (run / "train.log").write_text(log)
    if metrics is not None:
        (run / "metrics.json").write_text(json.dumps({**metrics, "attention": config["attention"]["name"],
                                                      "seed": config["seed"], "data": config["data"]["name"]}))
    return run


def _metrics(acc: float, speed: float = 1000.0) -> dict:
    return {"test/acc": acc, "train/tokens_per_sec": speed, "train/samples_per_sec": speed / 10,
            "test/tokens_per_sec": 4 * speed, "perf/peak_mem_bytes": 2.0**29, "model/params": 5000.0}


@pytest.fixture
def runs_folder(tmp_path):
    """outputs/train/runs as a user has it: single runs started with different command lines (one with
    logger=csv, one with a typo'd run that failed), each one seed, same data and steps."""
    root = tmp_path / "runs"
    _run(root, "2026-11-30_05-00-00_scaled_dot-sst2-s0", _config("scaled_dot", 0, run=0),
         ["trainer.max_steps=150", "logger=csv"], _metrics(0.80, 8000.0))
    _run(root, "2026-11-30_05-01-00_dot-sst2-s0", _config("dot", 0, run=1),
         ["attention=dot", "trainer.max_steps=150"], _metrics(0.78, 8100.0))
    _run(root, "2026-11-30_05-02-00_additive-sst2-s0", _config("additive", 0, run=2),
         ["attention=additive", "trainer.max_steps=150", "data.max_train_samples=2000"], _metrics(0.79, 2000.0))
    _run(root, "2026-11-30_05-03-00_additive-sst2-s0", _config("additive", 0, run=3),
         ["attention=additive", "trainer.max_steps=150", "optim.lr=1e-3"], None,
         log="[2026-11-30 05:03:09,000][attnbench][ERROR] Error: Loss became NaN at step 12: lower optim.lr\n")
    (root / "notes").mkdir()  # a folder that is not a run is skipped
    return root


def test_folder_of_single_runs(runs_folder, tmp_path, capsys):
    """Before: runs whose overrides differ (logger=csv in one only) gave NaN variant keys; the plot's groupby
    dropped them and `report.py outputs/train/runs` ended in `ValueError: Number of columns must be a
    positive integer, not 0`."""
    out = tmp_path / "out"
    assert report.main([str(runs_folder), "--out", str(out), "--no-attention-maps"]) == 0
    markdown = capsys.readouterr().out
    jobs, swept, fixed = report.read_runs([runs_folder])
    # only the score function differs in what matters: paths, loggers, progress bars and run names do not count
    assert swept == ["attention"]
    assert len(jobs) == 4 and sorted(jobs["status"]) == ["failed", "finished", "finished", "finished"]
    assert fixed["trainer.max_steps"] == "150" and fixed["data"] == "sst2" and fixed["model"] == "tiny"
    assert fixed["optim.lr"] == "0.001" and fixed["seed"] == "0" and fixed["data.max_train_samples"] == "2000"
    assert not any(k.startswith(("logger", "data.local_dir", "data.cache_dir", "run_name", "trainer.enable_progress"))
                   for k in fixed)
    assert "attention.hidden_dim" not in fixed and "attention.hidden_dim" not in swept  # named by attention itself
    assert ("Fixed: data=sst2, model=tiny, seed=0, trainer.max_steps=150, trainer.max_epochs=3, "
            "data.max_train_samples=2000, data.max_length=64, model.head_dim=null, data.batch_size=32, "
            "optim.lr=0.001.") in markdown
    assert "- **trainer** (default): max_epochs=3, max_steps=150" in markdown  # the full list under "Settings"
    # one seed each: no interval, said in words
    assert "| scaled_dot | 1 | 0.8000 | 1 seed, no interval | – |" in markdown
    assert "| dot | 1 | 0.7800 | 1 seed, no interval | -0.0200 (1 seed, no interval) |" in markdown
    assert "Loss became NaN at step 12" in markdown
    assert (out / "pareto.png").stat().st_size > 10_000
    table = pd.read_csv(out / "report.csv").set_index("attention")
    assert table.loc["additive", "acc_mean"] == pytest.approx(0.79) and table.loc["additive", "n"] == 1


def test_one_seed_draws_no_error_bars_and_titles_name_the_fixed_settings(runs_folder):
    jobs, swept, fixed = report.read_runs([runs_folder])
    table = report.summarise(jobs, swept)
    figs = report.figures(table, [k for k in swept if k != "seed"], fixed)
    fig = figs["pareto.png"]
    (ax,) = fig.axes
    assert not [c for c in ax.containers if isinstance(c, ErrorbarContainer)]  # no bar where one seed gives none
    points = [line for line in ax.get_lines() if line.get_linestyle() == "None"]  # markers, not the baseline's line
    assert sorted(float(y) for line in points for y in line.get_ydata()) == pytest.approx([0.78, 0.79, 0.80])
    assert all(line.get_markerfacecolor() == "none" for line in points)  # hollow: one seed
    # a score function's colour and marker are its own, and the figure's one legend names each
    assert len({(line.get_color(), line.get_marker()) for line in points}) == 3
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == list(table["attention"])  # the table's order
    assert "fixed: data=sst2, model=tiny, seed=0, trainer.max_steps=150" in fig.get_suptitle().replace("\n", " ")
    assert "1 seed, no interval" in ax.get_ylabel()


def _sweep_runs(root: Path) -> dict:
    """datasets x head_dims x {scaled_dot, additive} x 3 seeds, as single runs in one folder. Within every
    setting additive is exactly 0.01·(1 + seed) above the baseline; the baselines differ by 0.05-0.25 between
    settings, so pairing across settings would give another Δ."""
    base = {("sst2", 16): 0.80, ("sst2", 64): 0.75, ("trec", 16): 0.60, ("trec", 64): 0.85}
    n = 0
    for (data, head_dim), acc in base.items():
        for seed in range(3):
            for attention in ("scaled_dot", "additive"):
                value = acc + 0.002 * seed + (0.01 * (1 + seed) if attention == "additive" else 0.0)
                _run(root, f"{n:02d}_{attention}-{data}-dk{head_dim}-s{seed}",
                     _config(attention, seed, data=data, head_dim=head_dim, run=n),
                     [f"attention={attention}", f"data={data}", f"model.head_dim={head_dim}", f"seed={seed}"],
                     _metrics(value))
                n += 1
    return base


def test_paired_delta_stays_within_each_setting(tmp_path):
    root = tmp_path / "sweep"
    base = _sweep_runs(root)
    jobs, swept, fixed = report.read_runs([root])
    assert set(swept) == {"attention", "data", "model.head_dim", "seed"}
    assert "model.head_dim" not in fixed and fixed["trainer.max_steps"] == "150"
    table = report.summarise(jobs, swept)
    additive = table[table["attention"] == "additive"]
    assert len(additive) == 4
    t = stats.t.ppf(0.975, df=2)
    for _, row in additive.iterrows():
        assert row["diff_n"] == 3
        assert row["diff_mean"] == pytest.approx(0.02, abs=1e-12)  # differences 0.01, 0.02, 0.03
        assert row["diff_ci"] == pytest.approx(t * 0.01 / math.sqrt(3), rel=1e-9)
        acc = base[row["data"], int(row["model.head_dim"])]
        values = [acc + 0.002 * s + 0.01 * (1 + s) for s in range(3)]
        mean = sum(values) / 3
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / 2)
        assert row["acc_mean"] == pytest.approx(mean, rel=1e-12)
        assert row["acc_ci"] == pytest.approx(t * std / math.sqrt(3), rel=1e-9)
    markdown = report.build_report(jobs, swept, str(root), tmp_path / "out", fixed=fixed)
    half = t * 0.01 / math.sqrt(3)
    for data, head_dim in base:
        assert f"| {data} | {head_dim} | additive | 3 |" in markdown
    # the Δ column is headed "(paired, 95% CI)": the mean and its interval's ends, as the 95% CI column writes them
    assert markdown.count(f"| +0.0200 [{0.02 - half:+.4f}, {0.02 + half:+.4f}] |") == 4
    assert "± " + f"{half:.4f}" not in markdown
    # three seeds: the pareto plot has its interval bars, of the hand-computed half-width
    figs = report.figures(table, ["data", "model.head_dim", "attention"], fixed)
    bars = [c for ax in figs["pareto.png"].axes for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 8  # one per score function and setting
    segments = [s for bar in bars[:2] for s in bar.lines[2][0].get_segments()]  # sst2, d_k 16: scaled_dot, additive
    # seeds' offsets 0, .002, .004 (std .002) and .01, .022, .034 (std .012): bar = 2 · t · std / sqrt(3)
    assert [s[1][1] - s[0][1] for s in segments] == pytest.approx(
        [2 * t * 0.002 / math.sqrt(3), 2 * t * 0.012 / math.sqrt(3)], rel=1e-6)
    assert "head_dim.png" in figs
    # accuracy over head_dim: each variant's connecting line has its markers' colour (it took the next colour of
    # the cycle for itself when drawn first, so every line was another variant's colour)
    from matplotlib.colors import to_hex

    acc_ax = figs["head_dim.png"].axes[0]
    markers = {(tuple(c.lines[0].get_ydata()), to_hex(c.lines[0].get_color()))
               for c in acc_ax.containers if isinstance(c, ErrorbarContainer)}
    lines = {(tuple(line.get_ydata()), to_hex(line.get_color())) for line in acc_ax.get_lines()
             if line.get_alpha() == 0.6}
    assert len(lines) == 4 and lines == markers
    # colour and marker are the score function's; the dataset is the line style (solid sst2, dashed trec)
    styles = {(to_hex(line.get_color()), line.get_linestyle()) for line in acc_ax.get_lines() if line.get_alpha() == 0.6}
    assert len({colour for colour, _ in styles}) == 2 and {style for _, style in styles} == {"-", "--"}


def test_list_of_run_dirs_and_a_folder_of_sweeps(runs_folder, tmp_path):
    dirs = sorted(p for p in runs_folder.iterdir() if p.name.startswith("2026"))
    jobs, swept, _ = report.read_runs([dirs[0], dirs[1], dirs[0]])  # a run named twice counts once
    assert len(jobs) == 2 and swept == ["attention"]
    sweeps = tmp_path / "multiruns"
    _sweep_runs(sweeps / "2026-11-30_06-00-00")
    jobs, swept, _ = report.read_runs([sweeps])  # a folder holding sweeps: every job of each
    assert len(jobs) == 24 and (jobs["status"] == "finished").all()


def test_a_folder_without_runs_is_one_clear_error(tmp_path, capsys):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    assert report.main([str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "holds no runs" in err and "Traceback" not in err


# --------------------------------------------------------------------------- W&B as the source


class FakeRun(SimpleNamespace):
    pass


class FakeApi:
    """What report.py uses of ``wandb.Api``: ``runs(path, filters=...)`` of runs with config/summary/state."""

    def __init__(self, runs):
        self._runs = runs
        self.calls = []

    def runs(self, path, filters=None):
        self.calls.append((path, filters))
        return iter(self._runs)


def _wandb_runs():
    runs = []
    for i, (attention, seed, acc, state) in enumerate([
        ("scaled_dot", 0, 0.80, "finished"), ("scaled_dot", 1, 0.82, "finished"),
        ("additive", 0, 0.78, "finished"), ("additive", 1, 0.81, "finished"), ("additive", 2, None, "crashed"),
    ]):
        config = _config(attention, seed, run=i)
        summary = {"test/acc": acc, "train/tokens_per_sec": 1000.0 + i, "_step": 150, "flag": True,
                   "attention_maps": {"_type": "images/separated"}} if acc is not None else {"_step": 12}
        runs.append(FakeRun(name=f"{attention}-sst2-s{seed}", url=f"https://wandb.ai/me/attnbench/runs/{i}",
                            config=config, summary=summary, state=state, job_type=None))
    runs.append(FakeRun(name="report-g", url="u", config={"source": "x"}, summary={"test/acc": 1.0},
                        state="finished", job_type="report"))
    return runs


def test_wandb_project_group_through_the_api(tmp_path):
    api = FakeApi(_wandb_runs())
    jobs, swept, fixed = report.read_wandb("me/attnbench", "train-g", api=api)
    assert api.calls == [("me/attnbench", {"group": "train-g"})]
    assert len(jobs) == 5  # the summary run of an earlier report is not a run of the comparison
    assert swept == ["attention", "seed"] and fixed["trainer.max_steps"] == "150" and fixed["data"] == "sst2"
    crashed = jobs[jobs["status"] == "failed"].iloc[0]
    assert crashed["error"] == "W&B state crashed, no test/acc in its summary"
    table = report.summarise(jobs, swept).set_index("attention")
    assert table.loc["additive", "diff_mean"] == pytest.approx(((0.78 - 0.80) + (0.81 - 0.82)) / 2)
    assert table.loc["scaled_dot", "acc_mean"] == pytest.approx(0.81)
    assert table.loc["scaled_dot", "acc_ci"] == pytest.approx(
        stats.t.ppf(0.975, 1) * stats.tstd([0.80, 0.82]) / math.sqrt(2), rel=1e-9)
    markdown = report.build_report(jobs, swept, "W&B me/attnbench group train-g", tmp_path, fixed=fixed)
    assert "Jobs: 5 — 4 finished, 1 failed" in markdown and "Fixed: data=sst2, model=tiny" not in markdown
    assert "Fixed: data=sst2, trainer.max_steps=150" in markdown  # W&B configs carry no group choice for model


def test_wandb_run_the_cap_stopped_is_not_averaged_as_final():
    """A W&B run trainer.max_time stopped before its budget (its summary: train/steps_done < train/steps_planned,
    its config: a max_time) is unfinished, as its run dir's metrics.json says (stopped_by: max_time): its accuracy
    is left out of acc_mean and the pairing, as a dir-read run's is. Before: the W&B summary has no stopped_by
    (a string, and only numbers were read), so seed 1's unfinished 0.60 was averaged with the final 0.80, 0.82
    and 0.81 (acc_mean 0.7575, n 4, instead of 0.81, n 3); with trainer.max_time not defining a variant, a capped
    and an uncapped run are one variant. A run that finished within its cap, or stopped without one, is not marked."""
    runs = []
    for seed, acc, done, max_time in ((0, 0.80, 150, None), (1, 0.60, 40, "00:00:10:00"), (2, 0.82, 150, "00:00:10:00"),
                                      (3, 0.81, 149, None)):
        config = _config("additive", seed, run=seed)
        config["trainer"]["max_time"] = max_time
        summary = {"test/acc": acc, "train/steps_done": done, "train/steps_planned": 150.0}
        runs.append(FakeRun(name=f"additive-sst2-s{seed}", url=f"u{seed}", config=config, summary=summary,
                            state="finished", job_type=None))
    jobs, swept, _ = report.read_wandb("me/attnbench", None, api=FakeApi(runs))
    assert list(jobs.set_index("seed")["stopped_by"].fillna("-")) == ["-", "max_time", "-", "-"]
    row = report.summarise(jobs, swept).iloc[0]
    assert row["n"] == 3 and row["n_stopped"] == 1
    assert row["acc_mean"] == pytest.approx((0.80 + 0.82 + 0.81) / 3)


def test_wandb_runs_pair_their_rates_only_on_one_host():
    """The hosts of a W&B run's rates are text in its summary (Throughput.measured_on). Before: read_wandb kept
    numbers only, so a report over W&B paired dot's rate of machine B with scaled_dot's of machine A (1.4x)."""
    runs = []
    for seed, attention, rate, host in ((0, "scaled_dot", 1000.0, "A/1"), (0, "dot", 1400.0, "B/2"),
                                        (1, "scaled_dot", 1000.0, "A/1"), (1, "dot", 900.0, "A/1")):
        summary = {"test/acc": 0.8, "train/tokens_per_sec": rate, "test/tokens_per_sec": rate,
                   "train_host": host, "test_host": host}
        runs.append(FakeRun(name=f"{attention}-sst2-s{seed}", url=f"u{seed}{attention}",
                            config=_config(attention, seed, run=seed), summary=summary, state="finished",
                            job_type=None))
    jobs, swept, _ = report.read_wandb("me/attnbench", None, api=FakeApi(runs))
    assert set(jobs["train_host"]) == {"A/1", "B/2"}
    dot = report.summarise(jobs, swept).set_index("attention").loc["dot"]
    assert dot["train_tok_s_ratio"] == pytest.approx(0.9) and dot["train_tok_s_ratio_n"] == 1  # seed 1 only


def test_wandb_unreachable_is_one_clear_error(monkeypatch, capsys):
    class Unreachable:
        def runs(self, path, filters=None):
            raise ConnectionError("Max retries exceeded with url: /graphql (Failed to resolve 'api.wandb.ai')")

    with pytest.raises(report.WandbUnavailable, match=r"cannot read W&B project 'me/attnbench' group 'g': "
                                                      r"ConnectionError: Max retries exceeded.*offline, pass the run"):
        report.read_wandb("me/attnbench", "g", api=Unreachable())
    import wandb

    def no_api(*args, **kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty). call wandb.login(key=[your_api_key])")

    monkeypatch.setattr(wandb, "Api", no_api)
    assert report.main(["--wandb-project", "me/attnbench", "--wandb-group", "g"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: cannot read W&B project 'me/attnbench' group 'g': UsageError: api_key not")
    assert "Traceback" not in err


def test_a_run_dir_without_hydra_counts_on_the_keys_it_has(runs_folder):
    bare = runs_folder / "copied-run"
    bare.mkdir()
    (bare / "metrics.json").write_text(json.dumps({**_metrics(0.7), "attention": "cosine", "seed": 0, "data": "sst2"}))
    jobs, swept, fixed = report.read_runs([runs_folder])
    assert swept == ["attention"] and fixed["trainer.max_steps"] == "150"  # its missing config keys change nothing
    row = jobs[jobs["job"] == "copied-run"].iloc[0]
    assert (row["attention"], row["seed"], row["status"]) == ("cosine", "0", "finished")
    (bare / "metrics.json").write_text(json.dumps({**_metrics(0.7), "attention": "cosine", "seed": 5, "data": "sst2"}))
    jobs, swept, fixed = report.read_runs([runs_folder])
    assert swept == ["attention", "seed"] and "seed" not in fixed


def test_cross_validation_folds_are_replicates_of_one_variant(tmp_path):
    """A k-fold multirun (`data.cv_folds=5 data.fold=0,...,4`, issue 12) is one variant per score function: the
    folds are averaged into one mean with its interval, and Δ to scaled_dot is paired fold by fold."""
    root = tmp_path / "cv"
    fold_acc = [0.70, 0.74, 0.72, 0.78, 0.76]
    n = 0
    for fold, acc in enumerate(fold_acc):
        for attention in ("scaled_dot", "additive"):
            value = acc + (0.01 * (fold + 1) if attention == "additive" else 0.0)  # Δ 0.01 ... 0.05
            config = _config(attention, 0, data="mr", run=n)
            config["data"].update(cv_folds=5, fold=fold)
            _run(root, f"{n:02d}_{attention}-mr-f{fold}", config,
                 [f"attention={attention}", "data.cv_folds=5", f"data.fold={fold}"], _metrics(value))
            n += 1
    jobs, swept, fixed = report.read_runs([root])
    assert set(swept) == {"attention", "data.fold"} and fixed["data.cv_folds"] == "5"
    table = report.summarise(jobs, swept)
    assert sorted(table["attention"]) == ["additive", "scaled_dot"]  # not ten variants, one per fold
    t = stats.t.ppf(0.975, df=4)
    base = table[table["attention"] == "scaled_dot"].iloc[0]
    assert base["n"] == 5
    assert base["acc_mean"] == pytest.approx(sum(fold_acc) / 5, rel=1e-12)
    assert base["acc_ci"] == pytest.approx(t * stats.tstd(fold_acc) / math.sqrt(5), rel=1e-9)
    additive = table[table["attention"] == "additive"].iloc[0]
    assert additive["diff_n"] == 5
    assert additive["diff_mean"] == pytest.approx(0.03, abs=1e-12)  # paired by fold: 0.01 ... 0.05
    assert additive["diff_ci"] == pytest.approx(t * stats.tstd([0.01, 0.02, 0.03, 0.04, 0.05]) / math.sqrt(5),
                                                rel=1e-9)
    markdown = report.build_report(jobs, swept, str(root), tmp_path / "out", fixed=fixed, attention_maps=False)
    assert "Cross-validation: each variant's 5 folds (data.fold) are replicates" in markdown


def test_a_single_run_failed_by_a_bug_counts_as_failed_with_its_error(tmp_path, capsys):
    """A single run whose job raised a bug (not a user-facing error) writes no ERROR line to train.log, only
    failure.json. Before: the report called it "incomplete (killed or still running)" with error "–"."""
    root = tmp_path / "runs"
    _run(root, "2026-11-30_06-00-00_scaled_dot-sst2-s0", _config("scaled_dot", 0), ["trainer.max_steps=150"],
         _metrics(0.80))
    bug = _run(root, "2026-11-30_06-01-00_dot-sst2-s0", _config("dot", 0), ["attention=dot"], None,
               log="[2026-11-30 06:01:02,000][attnbench][INFO] Loading sst2\n")
    (bug / "failure.json").write_text(json.dumps({
        "status": "failed", "error": "NameError: name 'undefined_name' is not defined", "error_type": "NameError",
        "where": "before training", "checkpoint": None, "metrics_so_far": {}}))
    killed = _run(root, "2026-11-30_06-02-00_dot-sst2-s0", _config("dot", 0), ["attention=dot"], None)
    (killed / "failure.json").write_text(json.dumps({
        "status": "interrupted", "error": "Interrupted at step 3", "error_type": "RunInterrupted",
        "where": "step 3", "checkpoint": "x.ckpt", "metrics_so_far": {}}))
    assert report.main([str(root), "--out", str(tmp_path / "out"), "--no-attention-maps"]) == 0
    markdown = capsys.readouterr().out
    jobs, _, _ = report.read_runs([root])
    status = dict(zip(jobs["job"], jobs["status"]))
    assert status["2026-11-30_06-01-00_dot-sst2-s0"] == "failed"
    assert status["2026-11-30_06-02-00_dot-sst2-s0"] == "incomplete"  # an interruption is not a failure
    assert "1 finished, 1 failed, 1 incomplete" in markdown
    assert "NameError: name 'undefined_name' is not defined" in markdown


def test_references_to_other_keys_are_no_settings_of_their_own(tmp_path, capsys):
    """.hydra/config.yaml is saved unresolved: train.yaml's `module` node is references (`lr: ${optim.lr}`).
    Before: the report's "Settings held fixed" and the W&B summary's `fixed` listed `module.optimizer.lr=${optim.lr}`,
    `module.model=${model}`, ...; the keys they name (optim.lr, model) are the settings."""
    root = tmp_path / "runs"
    for attention, acc in (("scaled_dot", 0.8), ("dot", 0.7)):
        config = _config(attention, 0)
        config["module"] = {"_target_": "attnbench.models.module.TextClassifierModule", "model": "${model}",
                            "attention": "${attention}", "optimizer": {"lr": "${optim.lr}", "betas": "${optim.betas}"},
                            "scheduler": {"warmup_ratio": 0.1}}
        config["data"]["local_dir"] = "${oc.env:ATTNBENCH_DATA_DIR,null}"
        _run(root, f"2026-11-30_07-00-0{int(acc * 10)}_{attention}-sst2-s0", config, [f"attention={attention}"],
             _metrics(acc))
    assert report.main([str(root), "--out", str(tmp_path / "out"), "--no-attention-maps"]) == 0
    markdown = capsys.readouterr().out
    _, swept, fixed = report.read_runs([root])
    assert swept == ["attention"]
    assert "${" not in markdown.split("## Settings", 1)[1].split("##", 1)[0]
    assert not any(k in fixed for k in ("module.model", "module.attention", "module.optimizer.lr"))
    assert fixed["module.scheduler.warmup_ratio"] == "0.1"  # a value of its own stays a setting
    assert fixed["optim.lr"] == "0.001"


def test_an_interpolated_value_is_compared_resolved(tmp_path):
    """experiment=compare sets `trainer.max_epochs: ${budget.${data.name}}` (3 on SST-2, 20 on TREC), and Hydra
    saves it unresolved. Before: the report read the same text in every run and called max_epochs a fixed
    setting, and its plot title (matplotlib mathtext on the `$`) raised ValueError."""
    root = tmp_path / "runs"
    for data, acc in (("sst2", 0.8), ("trec", 0.7)):
        for attention in ("scaled_dot", "dot"):
            config = _config(attention, 0, data=data)
            config["budget"] = {"sst2": 3, "trec": 20}
            config["trainer"]["max_epochs"] = "${budget.${data.name}}"
            _run(root, f"{attention}-{data}-s0", config, [f"attention={attention}", f"data={data}"],
                 _metrics(acc + (0.01 if attention == "dot" else 0)))
    assert report.main([str(root), "--out", str(tmp_path / "out"), "--no-attention-maps"]) == 0
    jobs, swept, fixed = report.read_runs([root])
    assert "trainer.max_epochs" not in fixed
    by_data = dict(zip(jobs["data"], jobs["trainer.max_epochs"]))
    assert by_data == {"sst2": "3", "trec": "20"}
    assert (tmp_path / "out" / "pareto.png").is_file()


# Accuracies chosen by hand: (data, attention) -> per-seed test/acc. The paired Δ to scaled_dot per dataset is
# sst2: (0.77-0.80, 0.81-0.82) -> mean -0.02; trec: (0.66-0.60, 0.70-0.64) -> mean +0.06. Pooled across the two
# datasets (the bug this pins) the means would be 0.715 (scaled_dot) / 0.735 (cosine) and Δ would not be these.
_HAND_ACC = {("sst2", "scaled_dot"): (0.80, 0.82), ("sst2", "cosine"): (0.77, 0.81),
             ("trec", "scaled_dot"): (0.60, 0.64), ("trec", "cosine"): (0.66, 0.70)}
_HAND_DIFF = {("sst2", "cosine"): (-0.03, -0.01), ("trec", "cosine"): (0.06, 0.06)}


def _bare_run(root: Path, name: str, acc: float, **info) -> Path:
    """A run dir as copied without its .hydra/: metrics.json only, carrying what train.run_info records."""
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({**_metrics(acc), **info}))
    return run


@pytest.mark.parametrize("source", ["bare", "mixed", "hydra"])
def test_runs_of_two_datasets_are_grouped_and_paired_per_dataset(tmp_path, source):
    """Pins (breaker row 5, "statistics grouped over the wrong keys"): every setting a run records separates
    its group, whether it is read from ``metrics.json`` (a run dir without ``.hydra/``: ``bare``), from
    ``.hydra/config.yaml`` (``hydra``, no override names ``data``), or from both kinds at once (``mixed``: sst2
    runs with ``.hydra/``, trec runs bare). ``data`` must be a swept key and each (data, attention) row's mean,
    replicate count and paired Δ to scaled_dot must equal the hand computation above, per dataset."""
    root = tmp_path / "runs"
    for (data, attention), accs in _HAND_ACC.items():
        for seed, acc in enumerate(accs):
            name = f"{attention}-{data}-s{seed}"
            if source == "bare" or (source == "mixed" and data == "trec"):
                _bare_run(root, name, acc, attention=attention, data=data, seed=seed)
            else:
                _run(root, name, _config(attention, seed, data=data), [], _metrics(acc))
    jobs, swept, fixed = report.read_runs([root])
    assert "data" in swept and "attention" in swept and "data" not in fixed
    table = report.summarise(jobs, swept)
    assert len(table) == 4
    for (data, attention), accs in _HAND_ACC.items():
        row = table[(table["data"] == data) & (table["attention"] == attention)]
        assert len(row) == 1, (data, attention, table[["data", "attention"]])
        row = row.iloc[0]
        assert row["n"] == 2
        assert row["acc_mean"] == pytest.approx(sum(accs) / 2, abs=1e-12)
        if attention == "scaled_dot":
            assert row["diff_mean"] == pytest.approx(0.0, abs=1e-12) and row["diff_n"] == 2
        else:
            diffs = _HAND_DIFF[data, attention]
            assert row["diff_n"] == 2
            assert row["diff_mean"] == pytest.approx(sum(diffs) / 2, abs=1e-12)


@pytest.mark.parametrize("key,values", [
    ("model.head_dim", (16, 64)), ("data.max_length", (64, 128)), ("data.tokenizer.kind", ("wordpiece", "bytes")),
    ("trainer.max_steps", (150, 300)), ("optim.lr", (0.001, 0.0003)),
])
def test_every_config_setting_separates_groups(tmp_path, key, values):
    """Pins (row 5's kind, generalised): any setting recorded in a run's ``.hydra/config.yaml`` that differs
    between single runs (no multirun.yaml, no override naming it) is a swept key, and the means and paired Δ are
    computed within each of its values: two settings x (scaled_dot, cosine) x 2 seeds with hand accuracies."""
    root = tmp_path / "runs"
    offsets = {values[0]: 0.0, values[1]: 0.1}  # the second setting's runs are 0.1 higher, cosine a further +d
    deltas = {values[0]: -0.02, values[1]: 0.05}
    for value in values:
        for attention in ("scaled_dot", "cosine"):
            for seed in (0, 1):
                config = _config(attention, seed)
                node = config
                *parents, leaf = key.split(".")
                for p in parents:
                    node = node[p]
                node[leaf] = value
                acc = 0.7 + offsets[value] + 0.01 * seed + (deltas[value] + 0.001 * seed if attention == "cosine"
                                                           else 0.0)
                _run(root, f"{attention}-{value}-s{seed}", config, [], _metrics(acc))
    jobs, swept, fixed = report.read_runs([root])
    assert key in swept and key not in fixed
    table = report.summarise(jobs, swept)
    assert len(table) == 4
    for value in values:
        rows = table[table[key].astype(str) == report.format_setting(value)]
        assert len(rows) == 2, (key, value, table)
        base = rows[rows["attention"] == "scaled_dot"].iloc[0]
        cos = rows[rows["attention"] == "cosine"].iloc[0]
        assert base["acc_mean"] == pytest.approx(0.7 + offsets[value] + 0.005, abs=1e-12)
        assert cos["diff_n"] == 2
        assert cos["diff_mean"] == pytest.approx(deltas[value] + 0.0005, abs=1e-12)


def test_head_dim_and_seq_len_lines_stay_within_each_setting():
    """A sweep over two datasets x two head_dims (x two max_lengths): head_dim.png and seq_len.png draw one line
    per (score function, dataset), each through that dataset's points only (hand table below), never a line
    that joins SST-2's and TREC's points at one x."""
    rows = []
    for data, base in (("sst2", 0.80), ("trec", 0.60)):
        for att, off in (("dot", 0.0), ("scaled_dot", 0.05)):
            for x, dx in ((32, 0.0), (64, 0.01)):
                rows.append({"attention": att, "data": data, "model.head_dim": x, "data.max_length": x * 4,
                             "acc_mean": base + off + dx, "acc_ci": 0.01, "n": 3, "saturated_frac": base / 10,
                             "train_tok_s": 1000.0 * (1 if data == "sst2" else 3) + x, "peak_mem_mb": 100.0 + x})
    table = pd.DataFrame(rows)
    for key, name, other in (("model.head_dim", "head_dim.png", "data.max_length"),
                             ("data.max_length", "seq_len.png", "model.head_dim")):
        # the figure's own key and data vary; the other size moves with the figure's key (not a setting here)
        figs = report.figures(table.drop(columns=[other]), ["attention", "data", key])
        for ax in figs[name].axes:
            lines = [line for line in ax.get_lines() if line.get_linestyle() not in ("None", "none", "")]
            assert len(lines) == 4, [line.get_label() for line in lines]  # 2 score functions x 2 datasets
            for line in lines:
                xs = [float(x) for x in line.get_xdata()]
                assert len(xs) == len(set(xs)) == 2, xs  # one point per x: no line through two datasets
        labels = {t.get_text() for t in figs[name].axes[0].get_legend().get_texts()}
        assert labels == {f"{a}, data={d}" for a in ("dot", "scaled_dot") for d in ("sst2", "trec")}
    # one dataset: the lines are named by the score function alone, as before
    one = report.figures(table[table["data"] == "sst2"].drop(columns=["data.max_length"]),
                         ["attention", "model.head_dim"])
    assert {t.get_text() for t in one["head_dim.png"].axes[0].get_legend().get_texts()} == {"dot", "scaled_dot"}


@pytest.mark.parametrize("key,value", [
    ("trainer.max_time", "00:01:00:00"), ("test_batches_if_stopped", 20), ("budget", {"sst2": 3, "trec": 10}),
])
def test_run_guards_and_budget_pointers_do_not_separate_groups(tmp_path, key, value):
    """A wall-time cap, the stopped-run test limit and an experiment's budget table do not define a variant: a
    finished run is the same run under any cap (a stopped one says so itself: stopped_by), and the budget reaches
    the run as trainer.max_epochs. Seed 0's runs lack the key (as jobs from before it existed do), seed 1's set
    it. Before: the key was a swept setting, so long_context's additive job (test_batches_if_stopped=20) sat in a
    group of its own, without scaled_dot to pair with or divide by."""
    root = tmp_path / "runs"
    accs = {("scaled_dot", 0): 0.80, ("scaled_dot", 1): 0.82, ("cosine", 0): 0.78, ("cosine", 1): 0.81}
    for (attention, seed), acc in accs.items():
        config = _config(attention, seed)
        if seed == 1:
            *parents, leaf = key.split(".")
            node = config
            for p in parents:
                node = node[p]
            node[leaf] = value
        _run(root, f"{attention}-s{seed}", config, [], _metrics(acc))
    jobs, swept, fixed = report.read_runs([root])
    assert key not in swept and not any(k.startswith(key + ".") for k in swept), swept
    table = report.summarise(jobs, swept)
    assert len(table) == 2 and set(table["n"]) == {2}
    cosine = table[table["attention"] == "cosine"].iloc[0]
    assert cosine["diff_n"] == 2 and cosine["diff_mean"] == pytest.approx(((0.78 - 0.80) + (0.81 - 0.82)) / 2, abs=1e-12)


def test_an_offline_resumed_wandb_run_is_one_job_with_its_whole_history():
    """Resumed offline, a run continues as a new W&B run whose config names the one it resumed (``resumed_from``,
    attnbench.run.loggers). Before: the interrupted segment counted as a failed job, the resumed one's history was
    its own epochs only, and ``resumed_from`` (present in one run of the variant) split the variant in two."""
    def history_of(rows):
        def history(keys, pandas):
            return pd.DataFrame(rows, columns=["epoch", "val/loss", "trainer/global_step"])[list(keys)]
        return history

    runs = []
    for seed, acc in ((0, 0.80), (1, 0.82)):
        runs.append(FakeRun(id=f"whole{seed}", name=f"scaled_dot-sst2-s{seed}", url=f"u{seed}",
                            config=_config("scaled_dot", seed, run=seed), summary={"test/acc": acc},
                            state="finished", job_type=None,
                            history=history_of([(0, 0.45, 9), (1, 0.41, 19), (2, 0.43, 29)])))
    first = FakeRun(id="seg1", name="additive-sst2-s0", url="a1", config=_config("additive", 0, run=2),
                    summary={"_step": 20}, state="crashed", job_type=None,
                    history=history_of([(0, 0.47, 9), (1, 0.40, 19), (2, 0.60, 25)]))  # killed at step 25
    resumed_config = {**_config("additive", 0, run=2), "resumed_from": "seg1"}
    second = FakeRun(id="seg2", name="additive-sst2-s0", url="a2", config=resumed_config,
                     summary={"test/acc": 0.78}, state="finished", job_type=None,
                     history=history_of([(2, 0.44, 29)]))  # resumed from the step-19 checkpoint
    jobs, swept, _ = report.read_wandb("me/attnbench", None, api=FakeApi([*runs, second, first]))
    assert len(jobs) == 3 and set(jobs["status"]) == {"finished"}
    assert swept == ["attention", "seed"]  # resumed_from is no setting
    additive = jobs.set_index("job").loc["additive-sst2-s0"]
    assert (additive["val/epochs_validated"], additive["val/loss_lowest_epoch"], additive["val/last_epoch"]) == (
        3, 1, 2)
    assert additive["dir"] == "a2" and additive["test/acc"] == 0.78
    table = report.summarise(jobs, swept).set_index("attention")
    assert table.loc["additive", "n"] == 1


def _segment(id_, resumed_from, state, rows, acc=None, created_at=""):
    config = _config("additive", 0, run=2)
    if resumed_from is not None:
        config = {**config, "resumed_from": resumed_from}

    def history(keys, pandas):
        return pd.DataFrame(rows, columns=["epoch", "val/loss", "trainer/global_step"])[list(keys)]

    return FakeRun(id=id_, name="additive-sst2-s0", url=id_, config=config, created_at=created_at,
                   summary={"test/acc": acc} if acc is not None else {"_step": 1}, state=state, job_type=None,
                   history=history)


@pytest.mark.parametrize("case", ["chain of three", "two resumed from one", "cycle", "itself"])
def test_odd_resumed_from_links_still_give_one_job_with_its_history(case):
    """Found by a breaker: a segment that crashed before its first checkpoint leaves the next one to resume from the
    same run (both name it), and a copied W&B dir can make two runs name each other, or one itself. Before, the
    abandoned segment counted as a failed job with the first segment's history, and a cycle or a self-link hid the
    finished run (or made the report say the project had no runs)."""
    runs = {
        "chain of three": [_segment("s1", None, "crashed", [(0, 0.5, 9)]),
                           _segment("s2", "s1", "crashed", [(1, 0.4, 19)]),
                           _segment("s3", "s2", "finished", [(2, 0.45, 29)], acc=0.8)],
        "two resumed from one": [_segment("s1", None, "crashed", [(0, 0.5, 9)], created_at="2026-01-01T00"),
                                 _segment("s2", "s1", "crashed", [], created_at="2026-01-01T01"),
                                 _segment("s3", "s1", "finished", [(1, 0.4, 19)], acc=0.8,
                                          created_at="2026-01-01T02")],
        "cycle": [_segment("s1", "s2", "crashed", [(0, 0.5, 9)]),
                  _segment("s2", "s1", "finished", [(1, 0.4, 19)], acc=0.8)],
        "itself": [_segment("s1", "s1", "finished", [(0, 0.5, 9)], acc=0.8)],
    }[case]
    jobs, _, _ = report.read_wandb("me/p", None, api=FakeApi(runs))
    assert list(jobs["status"]) == ["finished"] and list(jobs["test/acc"]) == [0.8]
    expected = {"chain of three": 3, "two resumed from one": 2, "cycle": 2, "itself": 1}[case]
    assert jobs.iloc[0]["val/epochs_validated"] == expected
