"""``scripts/check_training_code.py``: the published runs' older commits train bit for bit as the final code does.

The Results call every published run one "of the final code" although the runs span many commits. The check
behind that claim trains each (commit, stage, config) of the manifest again beside the current code and
compares weights and logged values; its record is ``docs/results/cpu/training_code_check.json``. These tests pin
that the record covers every published run's commit, that it found them identical, that no file that trains
changed after it ran, and that its comparison sees a one-ulp change of one weight or a changed loss.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import subprocess

import pytest
import torch

from .conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("check_training_code", REPO_ROOT / "scripts" / "check_training_code.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

PUB = REPO_ROOT / "docs" / "results" / "cpu"
RECORD = json.loads((PUB / "training_code_check.json").read_text())


def _job(command: str, *commits: str) -> dict:
    return {"command": command, "commits": list(commits)}


def test_stage_configs_keeps_each_commit_stage_and_config_once_and_skips_the_benchmarks():
    manifest = {"jobs": {
        "compare/dot-sst2-s0": _job("/x/train.py experiment=compare seed=0 data=sst2 attention=dot "
                                    "trainer=cpu hydra.run.dir=/o/a", "aaa"),
        "compare/additive-sst2-s1": _job("/x/train.py experiment=compare seed=1 data=sst2 attention=additive "
                                         "trainer=cpu hydra.run.dir=/o/b", "aaa"),
        "compare/cosine-imdb-s0": _job("/x/train.py experiment=compare seed=0 data=imdb attention=cosine "
                                       "trainer=cpu hydra.run.dir=/o/c ckpt_path=last", "aaa", "bbb"),
        "long_context/dot-L512-imdb-s0": _job("/x/train.py experiment=long_context seed=0 data.max_length=512 "
                                              "attention=dot trainer=cpu", "bbb"),
        "cost/attention": _job("scripts/bench_attention.py --out /o/cost --threads 2", "bbb"),
        "cost/train_throughput": _job("scripts/bench_train.py --attention dot,additive --repeats 3", "bbb"),
    }}
    assert check.stage_configs(manifest) == [
        ("aaa", "compare", {"experiment": "compare", "data": "sst2"}),
        ("aaa", "compare", {"experiment": "compare", "data": "imdb"}),
        ("bbb", "compare", {"experiment": "compare", "data": "imdb"}),
        ("bbb", "long_context", {"experiment": "long_context", "data.max_length": "512"}),
    ]
    manifest["jobs"]["compare/dot-sst2-s0"]["commits"] = ["ccc+dirty"]
    with pytest.raises(SystemExit, match="compare/dot-sst2-s0 ran on ccc\\+dirty"):
        check.stage_configs(manifest)


def _fake_run(path, weights: dict[str, torch.Tensor], losses: list[float]):
    (path / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": weights}, path / "checkpoints" / "last.ckpt")
    (path / "csv").mkdir()
    with (path / "csv" / "metrics.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["step", "train/loss", "val/acc", "test/acc", "time/total_sec"])
        writer.writeheader()
        for step, loss in enumerate(losses):
            writer.writerow({"step": step, "train/loss": loss, "time/total_sec": 1.0 + step})
        writer.writerow({"step": len(losses), "val/acc": 0.5, "test/acc": 0.75, "time/total_sec": 9.0})


def test_compare_runs_sees_a_one_ulp_weight_change_and_a_changed_loss_but_not_the_wall_time(tmp_path):
    weights = {"embed.weight": torch.randn(8, 4, generator=torch.Generator().manual_seed(0)), "head.bias": torch.zeros(2)}
    _fake_run(tmp_path / "ref", weights, [0.7, 0.6])
    same = tmp_path / "same"
    _fake_run(same, {k: v.clone() for k, v in weights.items()}, [0.7, 0.6])
    (same / "csv" / "metrics.csv").write_text((same / "csv" / "metrics.csv").read_text().replace(",9.0", ",99.0"))
    result = check.compare_runs(tmp_path / "ref", same)
    assert result["identical"] and result["n_tensors"] == 2 and result["n_logged"] == 4
    assert result["max_abs_weight_diff"] == 0.0

    nudged = {k: v.clone() for k, v in weights.items()}
    nudged["embed.weight"][3, 1] = torch.nextafter(nudged["embed.weight"][3, 1], torch.tensor(1e9))
    _fake_run(tmp_path / "nudged", nudged, [0.7, 0.6])
    result = check.compare_runs(tmp_path / "ref", tmp_path / "nudged")
    assert not result["identical"] and not result["weights_equal"] and result["logged_equal"]
    assert 0 < result["max_abs_weight_diff"] < 1e-6

    _fake_run(tmp_path / "loss", {k: v.clone() for k, v in weights.items()}, [0.7, 0.6000001])
    result = check.compare_runs(tmp_path / "ref", tmp_path / "loss")
    assert not result["identical"] and result["weights_equal"] and result["differing_logged"] == ["train/loss@1"]


def test_the_published_check_covers_every_published_run_and_found_each_identical():
    manifest = json.loads((PUB / "manifest.json").read_text())
    expected = check.stage_configs(manifest)
    checked = [(row["commit"], row["stage"], row["overrides"]) for row in RECORD["checks"]]
    assert checked == expected
    assert RECORD["meta"]["steps"] >= 60 and RECORD["meta"]["attention"] == "scaled_dot"
    for row in RECORD["checks"]:
        assert row["identical"] and row["weights_equal"] and row["logged_equal"], row
        # weights of the whole model, and the loss at every logged step plus validation and test
        assert row["n_tensors"] >= 30 and row["n_logged"] >= RECORD["meta"]["steps"] // RECORD["meta"]["log_every"]
        # only scaled_dot trains in the check: the other score functions stand on their own files (the score
        # modules and their configs) being unchanged. The model, the Lightning module and the optimizer are run by
        # every score function, scaled_dot's check included, whose weights and losses came out bit for bit
        untested = ("src/attnbench/attention/", "conf/attention/")
        assert not [f for f in row["changed_files"] if f.startswith(untested)], row


def test_no_file_that_trains_changed_after_the_published_check_ran():
    head = RECORD["meta"]["head"]
    known = subprocess.run(["git", "cat-file", "-e", f"{head}^{{commit}}"], cwd=REPO_ROOT, capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"this checkout's history lacks {head} (a shallow clone?)")
    changed = subprocess.run(["git", "diff", "--name-only", head, "HEAD", "--", *check.TRAINING_PATHS],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert not changed, (f"{changed} changed after the training-code check ran on {head}: run "
                         "`taskset -c 1 python scripts/check_training_code.py` again and commit its JSON, or the "
                         "Results no longer come from the final code")


def test_the_published_negative_controls_differ():
    """The check can fail on real training: each published control (a throwaway commit changing one thing that
    trains, its diff kept in ``patch``) was reported as differing, in its weights and its logged losses."""
    controls = json.loads((PUB / "training_code_check_controls.json").read_text())
    assert len(controls["checks"]) >= 2
    for row in controls["checks"]:
        assert row["patch"].startswith("diff --git") and row["changed_files"], row["commit"]
        assert not row["identical"] and not row["weights_equal"] and row["max_abs_weight_diff"] > 0
        assert any(key.startswith("train/loss@") for key in row["differing_logged"])


def test_the_results_page_states_what_the_records_hold():
    """docs/results.md's account of the check: its counts, its commit, the files that differ and the controls'
    figures are those of the two records."""
    text = " ".join((REPO_ROOT / "docs" / "results.md").read_text().split())
    section = text[text.index("#### Every published run's commit trains as the final code does"):]
    section = section[:section.index("### GPU check")]
    checks, meta = RECORD["checks"], RECORD["meta"]
    n, commits = len(checks), {row["commit"] for row in checks}
    assert f"ran over several days on {len(commits)} commits" in section
    assert f"For each of the manifest's {n} distinct (commit, stage, configuration)" in section
    assert f"trains {meta['steps']} steps" in section and f"`train/loss` every {meta['log_every']} steps" in section
    assert f"All {n} were identical to the final code's runs, on `{meta['head'][:7]}`" in section
    assert f"# {n} checks," in section
    changed = sorted({f.removeprefix("src/attnbench/") for row in checks for f in row["changed_files"]})
    named = section[section.index("The files that differ,"):section.index("are none of")]
    assert sorted(re.findall(r"`([^`]+)`", named)) == changed
    controls = json.loads((PUB / "training_code_check_controls.json").read_text())["checks"]
    diffs = " and ".join(f"{row['max_abs_weight_diff']:.3f}" for row in controls)
    assert f"(largest difference {diffs})" in section
    counts = " and ".join(str(row["n_differing_logged"]) for row in controls)
    assert f"in {counts} of their {controls[0]['n_logged']} logged values" in section
