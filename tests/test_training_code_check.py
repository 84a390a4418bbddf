"""``scripts/check_training_code.py``: the published runs' older commits train bit for bit as the final code does.

The Results call every published run one "of the final code" although the runs span many commits. The check
behind that claim trains each (commit, stage, config) of the manifest again beside the current code and
compares weights and logged values; its record is ``docs/results/cpu/training_code_check.json``. Re-running it
(39 min on one core) is a release step (docs/testing.md), not a test: the code may change between releases.

Default tests: the check's own logic (which runs it re-trains, that its comparison sees a one-ulp change of one
weight or a changed loss). ``release`` tests: the committed records cover every published run's commit, found
each identical, and the negative controls differed.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch

from .conftest import REPO_ROOT

from scripts import check_training_code as check  # scripts/ is a namespace package under the repository root

PUB = REPO_ROOT / "docs" / "results" / "cpu"


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
        # attnbench reproduce's command since the one-command CLI: python -m attnbench train ...
        "capacity/dot-p8-dk8-s0": _job("-m attnbench train experiment=capacity seed=0 data.num_pairs=8 "
                                       "model.head_dim=8 attention=dot trainer=cpu", "bbb"),
        "cost/attention": _job("scripts/bench_attention.py --out /o/cost --threads 2", "bbb"),
        "cost/train_throughput": _job("scripts/bench_train.py --attention dot,additive --repeats 3", "bbb"),
    }}
    assert check.stage_configs(manifest) == [
        ("aaa", "compare", {"experiment": "compare", "data": "sst2"}),
        ("aaa", "compare", {"experiment": "compare", "data": "imdb"}),
        ("bbb", "compare", {"experiment": "compare", "data": "imdb"}),
        ("bbb", "long_context", {"experiment": "long_context", "data.max_length": "512"}),
        ("bbb", "capacity", {"experiment": "capacity", "model.head_dim": "8"}),
    ]
    benchmarks_only = {"jobs": {k: v for k, v in manifest["jobs"].items() if k.startswith("cost/")}}
    with pytest.raises(SystemExit, match="none of the manifest's 2 job"):  # nothing to check is no pass
        check.stage_configs(benchmarks_only)
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


@pytest.mark.release
def test_the_published_check_covers_every_published_run_and_found_each_identical():
    record = json.loads((PUB / "training_code_check.json").read_text())
    manifest = json.loads((PUB / "manifest.json").read_text())
    known = {p.stem for p in (REPO_ROOT / "conf" / "attention").glob("*.yaml")}
    key = lambda commit, stage, overrides: json.dumps([commit, stage, overrides], sort_keys=True)  # noqa: E731
    checked = {key(r["commit"], r["stage"], r["overrides"]) for r in record["checks"]
               if r.get("attention", "scaled_dot") == "scaled_dot"}
    assert checked == {key(*c) for c in check.stage_configs(manifest)}
    assert record["meta"]["steps"] >= 60
    by_attention = {(key(r["commit"], r["stage"], r["overrides"]), r.get("attention", "scaled_dot")): r
                    for r in record["checks"]}
    for row in record["checks"]:
        assert row["identical"] and row["weights_equal"] and row["logged_equal"], row
        # weights of the whole model, and the loss at every logged step plus validation and test
        assert row["n_tensors"] >= 30 and row["n_logged"] >= record["meta"]["steps"] // record["meta"]["log_every"]
        # the model, the Lightning module and the optimizer run in scaled_dot's check; a score function whose own
        # files (or the shared attention files) changed since the commit has its own check, identical too
        ran = check.attentions_run(manifest, row["commit"], row["stage"], row["overrides"])
        for name in check.touched_score_functions(row["changed_files"], ran, known):
            assert (key(row["commit"], row["stage"], row["overrides"]), name) in by_attention, (name, row)


def test_touched_score_functions_maps_changed_files_to_the_score_functions_that_ran():
    known, ran = {"dot", "scaled_dot", "additive", "cosine", "uniform"}, {"dot", "scaled_dot", "additive"}
    assert check.touched_score_functions(["src/attnbench/run/train.py"], ran, known) == []
    assert check.touched_score_functions(["src/attnbench/attention/additive_kernel.cpp",
                                          "conf/attention/dot.yaml"], ran, known) == ["additive", "dot"]
    assert check.touched_score_functions(["src/attnbench/attention/scaled_dot.py"], ran, known) == []
    # a score function the stage did not run (uniform, new) touches nothing; a shared file touches every one
    assert check.touched_score_functions(["src/attnbench/attention/uniform.py"], ran, known) == []
    assert check.touched_score_functions(["src/attnbench/attention/base.py"], ran, known) == ["additive", "dot"]
    manifest = {"jobs": {
        "capacity/dot-p8-dk8-s0": _job("-m attnbench train experiment=capacity seed=0 data.num_pairs=8 "
                                       "model.head_dim=8 attention=dot trainer=cpu", "aaa"),
        "capacity/l2-p16-dk8-s1": _job("-m attnbench train experiment=capacity seed=1 data.num_pairs=16 "
                                       "model.head_dim=8 attention=l2 trainer=cpu", "aaa", "bbb"),
        "capacity/cosine-p8-dk64-s0": _job("-m attnbench train experiment=capacity seed=0 data.num_pairs=8 "
                                           "model.head_dim=64 attention=cosine trainer=cpu", "aaa")}}
    config = {"experiment": "capacity", "model.head_dim": "8"}
    assert check.attentions_run(manifest, "aaa", "capacity", config) == {"dot", "l2"}
    assert check.attentions_run(manifest, "bbb", "capacity", config) == {"l2"}


@pytest.mark.release
def test_the_published_negative_controls_differ():
    """The check can fail on real training: each published control (a throwaway commit changing one thing that
    trains, its diff kept in ``patch``) was reported as differing, in its weights and its logged losses."""
    controls = json.loads((PUB / "training_code_check_controls.json").read_text())
    assert len(controls["checks"]) >= 2
    for row in controls["checks"]:
        assert row["patch"].startswith("diff --git") and row["changed_files"], row["commit"]
        assert not row["identical"] and not row["weights_equal"] and row["max_abs_weight_diff"] > 0
        assert any(key.startswith("train/loss@") for key in row["differing_logged"])
