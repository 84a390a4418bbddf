"""What a researcher must know about each run, in the report: an inexact (mid-epoch) resume and where ``val/loss``
was lowest.

A mid-epoch resume replays the first batches of the epoch it resumes in and never shows its last ones
(:class:`attnbench.run.resume.ResumeState`); ``metrics.json`` records it as ``resume`` but the report
said nothing, and four of the 75 published ``head_dim_sweep`` runs were resumed so. The docs' convergence claims
("lowest ``val/loss`` before the last epoch in 72 of the 75 runs") rested on logs the published files did not
carry. These tests build run dirs as train.py writes them (``metrics.json``, Lightning's ``csv/metrics.csv``) and
check every figure the report gives against the numbers written into them.
"""

from __future__ import annotations

import json
import math
import warnings

import pandas as pd
import pytest

from attnbench.analysis.stats import (
    convergence_counts,
    inexact_resumes,
    join_log_segments,
    resume_record,
    summarise,
    val_loss_epochs,
)
from attnbench.analysis import report


# the `resume` record of the published run dot-dk32-sst2-s2 (docs/results/cpu/head_dim_sweep_jobs.csv before the
# report flattened it): killed at batch 498 of epoch 2's 1,001, resumed from its step checkpoint
MID_EPOCH = {"batches_done": 498, "batches_per_epoch": 1001, "epoch": 2, "exact": False,
             "replayed_batches": [0, 497], "unseen_batches": [503, 1000]}
# additive-dk256-sst2-s1: killed one batch before the end of epoch 0
LAST_BATCH = {"batches_done": 1000, "batches_per_epoch": 1001, "epoch": 0, "exact": False,
              "replayed_batches": [0, 0], "unseen_batches": [1000, 1000]}
VAL_HISTORY = ("val/epochs_validated", "val/loss_lowest_epoch", "val/last_epoch")
EPOCH_END = {"epoch": 1, "batches_done": 0, "batches_per_epoch": 5, "exact": True}  # tests/test_console.py's


def _csv_log(val_losses: dict[int, float], steps_per_epoch: int = 10) -> str:
    """A Lightning CSVLogger ``metrics.csv``: a train row every 5 steps (no val/loss), one val row per epoch."""
    lines = ["epoch,step,train/loss,val/acc,val/loss"]
    for epoch, loss in val_losses.items():
        for step in range(epoch * steps_per_epoch + 4, (epoch + 1) * steps_per_epoch, 5):
            lines.append(f"{epoch},{step},0.5,,")
        lines.append(f"{epoch},{(epoch + 1) * steps_per_epoch - 1},,0.8,{loss}")
    return "\n".join(lines) + "\n"


def _run(root, name, attention, seed, acc, val_losses=None, resume=None):
    run = root / name
    (run / "csv").mkdir(parents=True)
    metrics = {"attention": attention, "data": "sst2", "seed": seed, "test/acc": acc,
               "train/tokens_per_sec": 1000.0, "train/cpu_share": 0.99}
    if resume is not None:
        metrics["resume"] = resume
    (run / "metrics.json").write_text(json.dumps(metrics))
    if val_losses is not None:
        (run / "csv" / "metrics.csv").write_text(_csv_log(val_losses))
    return run


def test_resume_record_counts_the_replayed_and_unseen_batches():
    # [first, last] inclusive: 0-497 is 498 batches, 503-1000 is 498; 0-0 and 1000-1000 one each
    assert resume_record(MID_EPOCH) == {"resume/exact": False, "resume/epoch": 2, "resume/batches_done": 498,
                                        "resume/batches_per_epoch": 1001, "resume/replayed_batches": 498,
                                        "resume/unseen_batches": 498}
    one = resume_record(LAST_BATCH)
    assert (one["resume/replayed_batches"], one["resume/unseen_batches"]) == (1, 1)
    exact = resume_record(EPOCH_END)
    assert exact["resume/exact"] is True and exact["resume/replayed_batches"] == 0
    assert exact["resume/unseen_batches"] == 0
    assert resume_record(None) == {}


def test_inexact_resumes_read_back_from_a_csv(tmp_path):
    """jobs.csv gives the flag back as text: False/True, and empty for runs that never resumed."""
    frame = pd.DataFrame({"resume/exact": [False, True, None, float("nan")]})
    assert inexact_resumes(frame).tolist() == [True, False, False, False]
    frame.to_csv(tmp_path / "jobs.csv", index=False)
    assert inexact_resumes(pd.read_csv(tmp_path / "jobs.csv")).tolist() == [True, False, False, False]
    assert inexact_resumes(pd.DataFrame({"resume/exact": [True, False]})).tolist() == [False, True]  # bool dtype
    assert inexact_resumes(pd.DataFrame({"x": [1]})).tolist() == [False]


def test_val_loss_epochs_of_a_lightning_log(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(_csv_log({0: 0.45, 1: 0.41, 2: 0.43}))
    assert val_loss_epochs(pd.read_csv(path)) == {"val/epochs_validated": 3, "val/loss_lowest_epoch": 1,
                                                  "val/last_epoch": 2}
    path.write_text(_csv_log({0: 0.45, 1: 0.41, 2: 0.40}))  # still falling
    assert val_loss_epochs(pd.read_csv(path))["val/loss_lowest_epoch"] == 2
    path.write_text(_csv_log({2: 0.40}))  # a log that holds its resumed epoch only
    assert val_loss_epochs(pd.read_csv(path)) == {"val/epochs_validated": 1, "val/loss_lowest_epoch": 2,
                                                  "val/last_epoch": 2}
    assert val_loss_epochs(pd.DataFrame({"epoch": [0], "train/loss": [1.0]})) == {}


def _runs(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    _run(root, "scaled_dot-s0", "scaled_dot", 0, 0.80, {0: 0.45, 1: 0.41, 2: 0.43})
    _run(root, "scaled_dot-s1", "scaled_dot", 1, 0.82, {0: 0.45, 1: 0.42, 2: 0.40})  # still falling
    _run(root, "additive-s0", "additive", 0, 0.79, {0: 0.47, 1: 0.40, 2: 0.44}, resume=LAST_BATCH)
    _run(root, "additive-s1", "additive", 1, 0.81, {2: 0.43}, resume=MID_EPOCH)  # log: its resumed epoch only
    _run(root, "dot-s0", "dot", 0, 0.78, {0: 0.50, 1: 0.46, 2: 0.48}, resume=EPOCH_END)  # exact
    _run(root, "dot-s1", "dot", 1, 0.77)  # no CSV log
    return root


def test_the_report_lists_inexact_resumes_and_counts_them(tmp_path):
    jobs, swept, fixed = report.read_runs([_runs(tmp_path)])
    out = tmp_path / "out"
    markdown = report.build_report(jobs, swept, "runs", out, fixed=fixed)
    assert "Jobs: 6 — 6 finished (2 of them resumed mid-epoch: inexact, listed below), 0 failed" in markdown
    section = markdown.split("## Runs resumed mid-epoch (inexact)", 1)[1].split("\n## ", 1)[0]
    assert "| additive-s0 | additive | 0 | 0 | 1,000 / 1,001 | 1 | 1 |" in section
    assert "| additive-s1 | additive | 1 | 2 | 498 / 1,001 | 498 | 498 |" in section
    assert "dot-s0" not in section  # an epoch-end resume is exact: not listed
    table = pd.read_csv(out / "report.csv").set_index("attention")
    assert table["n_inexact_resume"].to_dict() == {"scaled_dot": 0, "additive": 2, "dot": 0}
    assert table.loc["additive", "n"] == 2  # their accuracy still counts
    published = pd.read_csv(out / "jobs.csv").set_index("job")
    assert "resume" not in published  # counts, not the text of a dict
    assert published.loc["additive-s1", "resume/replayed_batches"] == 498
    assert published.loc["additive-s1", "resume/unseen_batches"] == 498
    assert inexact_resumes(published.reset_index()).sum() == 2
    assert str(published.loc["dot-s0", "resume/exact"]) == "True"


def test_the_report_states_where_val_loss_was_lowest(tmp_path):
    jobs, swept, fixed = report.read_runs([_runs(tmp_path)])
    out = tmp_path / "out"
    markdown = report.build_report(jobs, swept, "runs", out, fixed=fixed)
    published = pd.read_csv(out / "jobs.csv").set_index("job")
    assert published.loc["scaled_dot-s0", ["val/epochs_validated", "val/loss_lowest_epoch", "val/last_epoch"]
                         ].tolist() == [3, 1, 2]
    assert published.loc["scaled_dot-s1", "val/loss_lowest_epoch"] == 2
    assert published.loc["additive-s1", "val/epochs_validated"] == 1
    assert math.isnan(published.loc["dot-s1", "val/epochs_validated"])
    assert convergence_counts(published.reset_index()) == {"before_last": 3, "still_falling": 1, "one_epoch": 1,
                                                            "unknown": 1}
    assert ("`val/loss` was lowest before the last validated epoch in 3 of the 6 finished runs, lowest at the last "
            "(still falling) in 1, and 1 run(s)' log holds one validated epoch only (cannot tell); 1 run(s) have no "
            "validation history.") in markdown


def test_paired_delta_is_written_as_its_interval(tmp_path):
    """Δ's header says "(paired, 95% CI)": the cell gives the interval's ends, as the 95% CI column does."""
    from scipy import stats

    jobs, swept, fixed = report.read_runs([_runs(tmp_path)])
    table = summarise(jobs, swept)
    markdown = report.markdown_table(table, ["attention"], "scaled_dot")
    diffs = [0.79 - 0.80, 0.81 - 0.82]  # additive - scaled_dot, seeds 0 and 1
    half = stats.t.ppf(0.975, 1) * stats.tstd(diffs) / math.sqrt(2)
    assert half == pytest.approx(0.0, abs=1e-9)  # both differences are -0.01: a zero-width interval
    assert f"| -0.0100 [{-0.01 - half:+.4f}, {-0.01 + half:+.4f}] |" in markdown
    diffs = [0.78 - 0.80, 0.77 - 0.82]  # dot - scaled_dot
    mean = sum(diffs) / 2
    half = stats.t.ppf(0.975, 1) * stats.tstd(diffs) / math.sqrt(2)
    assert f"| {mean:+.4f} [{mean - half:+.4f}, {mean + half:+.4f}] |" in markdown
    assert " ± " + f"{half:.4f}" not in markdown


def test_bool_overrides_read_as_the_config_writes_them():
    """Hydra's parser writes ``data.packaged=false`` as ``False``; the config (and format_setting) as ``false``:
    one setting must read alike in every table, and a sweep's jobs match the runs' configs."""
    parsed = report._parse_overrides(["data.packaged=false", "model.flag=true,false", "optim.lr=1e-3",
                                      "seed=range(0,2)", "attention=dot,additive"])
    assert parsed == {"data.packaged": ["false"], "model.flag": ["true", "false"], "optim.lr": ["0.001"],
                      "seed": ["0", "1"], "attention": ["dot", "additive"]}


def test_no_legend_warning_for_a_setting_without_rates():
    """A setting whose runs logged no training rate draws nothing on its pareto panel: no empty legend (matplotlib's
    'No artists with labels found' UserWarning on the report's console)."""
    table = pd.DataFrame({"data": ["sst2", "sst2", "trec"], "attention": ["dot", "scaled_dot", "dot"],
                          "n": [1, 1, 1], "acc_mean": [0.8, 0.81, 0.7], "acc_ci": [math.nan] * 3,
                          "train_tok_s": [1000.0, 1100.0, math.nan]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figs = report.figures(table, ["data", "attention"], {})
    fig = figs["pareto.png"]
    assert not fig.axes[1].get_lines() and not fig.axes[1].containers  # trec's panel: nothing drawn
    (legend,) = fig.legends  # one legend for the figure, of what was drawn
    assert [t.get_text() for t in legend.get_texts()] == ["dot", "scaled_dot"]


def test_every_figure_column_of_report_csv_is_known_to_readme_tables(tmp_path):
    """readme_tables.py tells a report.csv's variant keys from its figures by FIGURE_COLUMNS: a figure column
    summarise adds (n_inexact_resume, n_disturbed, ...) and the list lacks would be read as a setting that differs
    between rows, splitting the published tables."""
    from attnbench.analysis import tables

    jobs, swept, _ = report.read_runs([_runs(tmp_path)])
    stopped = jobs.assign(stopped_by="max_time", **{"train/steps_done": 5, "train/steps_planned": 10,
                                                    "diag/entropy_norm": 0.5, "perf/peak_mem_bytes": 2**20,
                                                    "model/params": 10})
    for frame in (jobs, stopped):
        columns = set(summarise(frame, swept).columns) - {"attention", "data", "seed"}
        assert columns <= tables.FIGURE_COLUMNS, sorted(columns - tables.FIGURE_COLUMNS)


def test_the_val_loss_history_of_a_wandb_run():
    """From W&B the history comes from ``run.history(keys=[...])`` (the rows that logged either key; a row without
    val/loss is a training step): the same three columns as from a run dir's CSV log."""
    from types import SimpleNamespace

    calls = []

    def history(keys, pandas):
        calls.append((tuple(keys), pandas))
        return pd.DataFrame({"epoch": [0, 0, 1, 1, 2, 2], "val/loss": [None, 0.47, None, 0.44, None, 0.45]})

    run = SimpleNamespace(history=history)
    assert report._wandb_val_history(run) == {"val/epochs_validated": 3, "val/loss_lowest_epoch": 1,
                                              "val/last_epoch": 2}
    assert calls == [(("epoch", "val/loss", "trainer/global_step"), True)]

    def broken(keys, pandas):
        raise ConnectionError("offline")

    assert report._wandb_val_history(SimpleNamespace(history=broken)) == {}
    assert report._wandb_val_history(SimpleNamespace()) == {}


def test_an_epoch_end_resume_without_rng_states_is_listed_as_inexact(tmp_path):
    """ResumeState marks a resume from a checkpoint without its RNG states inexact even at an epoch end (dropout and
    the batch order differ): listed, with nothing replayed and the reason said."""
    root = tmp_path / "runs"
    root.mkdir()
    _run(root, "scaled_dot-s0", "scaled_dot", 0, 0.80, {0: 0.45, 1: 0.41})
    _run(root, "dot-s0", "dot", 0, 0.78, {0: 0.50, 1: 0.46},
         resume={"epoch": 1, "batches_done": 0, "batches_per_epoch": 5, "exact": False})
    jobs, swept, fixed = report.read_runs([root])
    markdown = report.build_report(jobs, swept, "runs", tmp_path / "out", fixed=fixed)
    assert ("| dot-s0 | dot | 1 | 0 / 5 | 0 (checkpoint without RNG states: dropout and batch order differ) | 0 |"
            in markdown)


def test_a_resumed_runs_history_joins_its_segments_and_drops_the_replayed_rows():
    """A resumed run's CSV log comes in segments (``metrics.part1.csv``, then ``metrics.csv``); each later segment
    supersedes the earlier rows from its first logged step on (those steps were replayed from the checkpoint)."""
    first = pd.DataFrame({"epoch": [0, 0, 1, 1], "step": [4, 9, 14, 19], "val/loss": [None, 0.45, None, 0.50]})
    resumed = pd.DataFrame({"epoch": [1, 1, 2], "step": [14, 19, 29], "val/loss": [None, 0.41, 0.43]})
    joined = join_log_segments([first, resumed])
    assert joined["step"].tolist() == [4, 9, 14, 19, 29]
    assert joined["val/loss"].dropna().tolist() == [0.45, 0.41, 0.43]  # epoch 1's replayed 0.50 dropped
    assert val_loss_epochs(joined) == {"val/epochs_validated": 3, "val/loss_lowest_epoch": 1, "val/last_epoch": 2}
    empty = pd.DataFrame({"epoch": [], "step": [], "val/loss": []})
    assert join_log_segments([first, empty])["step"].tolist() == [4, 9, 14, 19]  # killed before it logged
    assert join_log_segments([]).empty
    with pytest.raises(KeyError):
        join_log_segments([pd.DataFrame({"epoch": [0]})])


def test_the_report_reads_every_segment_of_a_resumed_runs_csv_log(tmp_path):
    """Before: the report read ``csv/metrics.csv`` only, which holds the last segment of a resumed run, so a run
    resumed in its last epoch counted one validated epoch (the published ``head_dim_sweep`` had such a run)."""
    run = _run(tmp_path, "additive-s1", "additive", 1, 0.81, {2: 0.43}, resume=MID_EPOCH)
    (run / "csv" / "metrics.part1.csv").write_text(_csv_log({0: 0.45, 1: 0.41}))
    record = report.read_job(run)
    assert {k: record[k] for k in VAL_HISTORY} == {"val/epochs_validated": 3, "val/loss_lowest_epoch": 1,
                                                  "val/last_epoch": 2}
    (run / "metrics.json").unlink()  # an unfinished run: its last step is the last segment's
    (run / "csv" / "metrics.csv").write_text("epoch,step,train/loss\n")  # killed before its first row
    assert report.read_job(run)["last_step"] == 19


def test_the_test_loops_rows_do_not_cut_a_resumed_runs_history(tmp_path):
    """The test loop's throughput rows count their own ``step`` (test batches: 50, 100, ...). In the last segment
    of a resumed run they superseded every earlier row from step 50 on: the published IMDB ``compare`` run
    ``dot-imdb-s1`` (interrupted in epoch 1, resumed exactly) counted 1 validated epoch where its log holds 2. Nor
    is a test batch count a training step a killed run reached."""
    run = _run(tmp_path, "dot-s1", "dot", 1, 0.81, {1: 0.41}, resume=EPOCH_END)
    (run / "csv" / "metrics.part1.csv").write_text(_csv_log({0: 0.45}))
    log = (run / "csv" / "metrics.csv").read_text().splitlines()
    log[0] += ",test/batches,test/samples"
    log = [log[0]] + [line + ",," for line in log[1:]] + [f",{step},,,,{step},{step * 64}" for step in (5, 10, 50)]
    (run / "csv" / "metrics.csv").write_text("\n".join(log) + "\n")
    record = report.read_job(run)
    assert {k: record[k] for k in VAL_HISTORY} == {"val/epochs_validated": 2, "val/loss_lowest_epoch": 1,
                                                  "val/last_epoch": 1}
    (run / "metrics.json").unlink()
    (run / "csv" / "metrics.csv").write_text("epoch,step,train/loss,test/batches\n,60,,60\n")  # test rows only
    assert report.read_job(run)["last_step"] == 9  # the first segment's last training step, not the test's 60


@pytest.mark.parametrize("failure, log, status", [
    ({"status": "interrupted", "error": "Interrupted by SIGTERM"}, True, "incomplete"),
    ({"status": "interrupted", "error": "Interrupted by SIGTERM"}, False, "incomplete"),  # its record: no log
    ({"status": "failed", "error": "RuntimeError: boom"}, False, "failed"),
    (None, True, "failed"),  # a run from before failure.json: its log's ERROR line
])
def test_an_interrupted_run_is_incomplete_with_or_without_its_log(tmp_path, failure, log, status):
    """A SIGTERM'd run logs an ERROR line and writes failure.json with status "interrupted"; the report called it
    failed from the log line, and incomplete from its published record (which has no train.log). Found by a
    breaker: what the run itself wrote decides."""
    run = tmp_path / "run"
    run.mkdir()
    if failure is not None:
        (run / "failure.json").write_text(json.dumps(failure))
    if log:
        (run / "train.log").write_text("[2026-12-01 05:00:00,000][attnbench][ERROR] Interrupted by SIGTERM\n")
    record = report.read_job(run)
    assert record["status"] == status
    assert (record["error"] is None) == (status == "incomplete")
