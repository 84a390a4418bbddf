"""Breaker round 3 (throughput trust): real faults found after the cpu-share guard (commits ac05fdf, e2f5d65).

Each test failed on the code it was written against (commit e2f5d65) and pins one fault a user would read as the
framework's speed (or cost) with nothing saying it is wrong; all three are fixed in 48de6be.

1. Gradient accumulation: ``train/steps_per_sec`` counts micro-batches (one per ``on_train_batch_end``) while
   ``train/steps_planned`` and ``trainer.max_steps`` count optimizer steps, so the report's "s/step" and its
   extrapolated whole-budget time (``steps_planned / steps_per_sec``) are ``accumulate_grad_batches`` times too
   low. Measured: a run with ``+trainer.accumulate_grad_batches=4`` stopped by ``max_time`` at 50 of 200 steps
   read 13.19 steps/s and "whole budget (extrapolated) 15.2 s"; at that batch rate the 800 batches of its budget
   take 60.6 s.
2. The report's "Runs left out of the throughput columns (disturbed)" table, when nothing is swept (one run, or
   runs of one setting), has a header with 5 cells (an empty one for the missing swept keys), a delimiter row with
   4 and rows with 4: not a Markdown table, and read by position its "train cpu share" column holds the test share.
3. The end-of-run console printout gives "train tokens/s" of a run whose thread had half a core
   (``train/cpu_share`` 0.485, two runs on one core: 8,865 tokens/s against 19,089 alone) with nothing saying so.
"""

from __future__ import annotations

import pandas as pd
import pytest

from attnbench.analysis import report
from attnbench.analysis.stats import ACC, STATUS_OK
from attnbench.run.console import format_summary

from .test_faults import run_in_process, toy  # noqa: F401 - toy is a fixture used here


TOY_TRAIN_BATCHES = 22  # the toy split: 176 training rows in batches of 8 (tests/test_max_time.py)


def test_steps_per_sec_counts_the_steps_that_max_steps_and_steps_planned_count(toy, tmp_path):  # noqa: F811
    """With ``accumulate_grad_batches=2`` one epoch of 22 batches is 11 optimizer steps (``trainer.global_step``,
    ``train/steps_done``). With ``warmup_steps=0`` every step is measured, so ``train/steps_per_sec`` x
    ``train/time_sec`` must be those 11 steps, the unit ``train/steps_planned`` (and so the report's
    ``extrapolated_sec = steps_planned / steps_per_sec``) uses; it is 22 (batches)."""
    summary = run_in_process(toy, tmp_path / "run", "+trainer.accumulate_grad_batches=2", "trainer.max_epochs=1",
                             "callbacks.run_stats.warmup_steps=0")
    assert summary["train/steps_done"] == TOY_TRAIN_BATCHES // 2
    measured_steps = summary["train/steps_per_sec"] * summary["train/time_sec"]
    assert measured_steps == pytest.approx(summary["train/steps_done"], rel=1e-9), (
        "train/steps_per_sec counts micro-batches, train/steps_planned optimizer steps")


def test_the_warm_up_ends_on_an_optimizer_step_with_accumulation(toy, tmp_path):  # noqa: F811
    """With ``accumulate_grad_batches=2`` and one warm-up batch, the first optimizer step's first micro-batch is
    warm-up: the step must be left out whole, else it is counted as a step with half its time (and the samples
    per counted step are not 2 x 8). 10 steps = 20 batches: the first step (2 batches) warms up, 9 whole steps
    of up to 16 rows are measured (143 rows: one toy batch holds 7). Before: 10 steps over 19 batches' time (151
    rows)."""
    summary = run_in_process(toy, tmp_path / "run", "+trainer.accumulate_grad_batches=2", "trainer.max_epochs=-1",
                             "trainer.max_steps=10", "callbacks.run_stats.warmup_steps=1")
    assert summary["train/steps_done"] == 10
    assert summary["train/steps_per_sec"] * summary["train/time_sec"] == pytest.approx(9, rel=1e-9)
    assert 18 * 8 - 7 <= summary["train/samples"] <= 18 * 8  # 18 batches, not 19


def _disturbed_job(job: str) -> dict:
    return {"job": job, "status": STATUS_OK, ACC: 0.8, "train/tokens_per_sec": 9889.0, "test/tokens_per_sec": 31686.0,
            "train/steps_per_sec": 13.19, "train/cpu_share": 0.49, "test/cpu_share": 0.97}


def test_the_disturbed_table_is_a_table_when_nothing_is_swept(tmp_path):
    """One disturbed run, nothing swept: the section's header, delimiter and row must have the same number of
    cells, and the cell under "train cpu share" must be the train share (0.49), not the test share (0.97)."""
    text = report.build_report(pd.DataFrame([_disturbed_job("g4")]), [], "test", tmp_path)
    section = text.split("## Runs left out of the throughput columns (disturbed)")[1].split("\n## ")[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    header, delimiter, row = table[0], table[1], table[2]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in (header, delimiter, row)]
    assert len(cells[0]) == len(cells[1]) == len(cells[2]), table
    assert dict(zip(cells[0], cells[2]))["train cpu share"] == "0.49"


def test_the_console_says_when_the_printed_rate_was_disturbed():
    """The console's "train tokens/s" of a run at ``train/cpu_share`` 0.485 (measured: two real runs on one core)
    must not read as the framework's speed: the printout must name the share (0.49 or 49%) as it does in the
    report's disturbed section."""
    summary = {"test/acc": 0.758, "val/acc_best": 0.7275, "train/tokens_per_sec": 8865.2, "test/tokens_per_sec": 31805.6,
               "train/cpu_share": 0.485, "test/cpu_share": 0.496, "perf/peak_mem_bytes": 893_000_000.0,
               "model/params": 2_321_666.0, "time/total_sec": 48.7}
    text = format_summary(summary, {"run_name": "scaled_dot-sst2-s0", "output_dir": "/tmp/run"})
    train_line = next(line for line in text.splitlines() if "train tokens/s" in line)
    assert "8,865" in train_line and f"cpu share {0.485:.2f}" in train_line and "disturbed" in train_line, text
    # the test loop had half a core too (0.496), and an undisturbed rate is printed plain
    assert "disturbed" in next(line for line in text.splitlines() if "test tokens/s" in line)
    plain = format_summary({**summary, "test/cpu_share": 0.97}, {"run_name": "r", "output_dir": "/tmp/run"})
    assert "disturbed" not in next(line for line in plain.splitlines() if "test tokens/s" in line)
    assert "disturbed" not in format_summary({"train/tokens_per_sec": 1.0}, {"run_name": "r", "output_dir": "/o"})
