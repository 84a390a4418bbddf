"""The README's answer (``results:answer``): each bullet from the published files under a repository root, a
stage that is not published named as such, and the verdicts those of the equivalence tables."""

from __future__ import annotations

import csv

from attnbench.analysis.answer import render_answer


def _write(root, name, rows):
    path = root / "docs" / "results" / "cpu" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _run(data, attention, seed, acc, **extra):
    return {"job": f"{attention}-{data}-s{seed}", "status": "finished", "data": data, "attention": attention,
            "seed": str(seed), "test/acc": f"{acc:.6f}", "train_host": "", "stopped_by": "", **extra}


BASE = [0.800, 0.812, 0.795, 0.808, 0.803, 0.806, 0.799, 0.810, 0.802, 0.804]


def _compare():
    """SST-2, 10 seeds: additive 2 points below on every seed but with spread (worse), dot within ±0.1 (equivalent),
    uniform 10 points below (worse); TREC, 2 seeds (no power: left out)."""
    rows = []
    for s, x in enumerate(BASE):
        jitter = 0.001 * (s % 3 - 1)
        rows += [_run("sst2", "scaled_dot", s, x), _run("sst2", "additive", s, x - 0.02 + jitter),
                 _run("sst2", "dot", s, x + jitter), _run("sst2", "uniform", s, x - 0.10 + jitter)]
    for s in range(2):
        rows += [_run("trec", "scaled_dot", s, 0.85), _run("trec", "additive", s, 0.80 + 0.05 * s)]
    return rows


def test_answer_states_each_published_verdict_and_names_what_is_not_published(tmp_path):
    _write(tmp_path, "compare_jobs.csv", _compare())
    lines = render_answer(tmp_path).splitlines()
    assert len(lines) == 8 and all(line.startswith("- **") for line in lines)
    accuracy = lines[0]
    assert accuracy.startswith("- **Accuracy** (`compare`: one shared lr, up to 10 paired seeds")
    assert "`additive` is *worse* on sst2 (−2.01 [−2.07, −1.95] points)." in accuracy
    assert "Equivalent within ±1 on every dataset: `dot`." in accuracy
    assert "The `uniform` control is *worse* on sst2: attention matters there." in accuracy
    assert accuracy.endswith("Left out (MDD > 1 point): trec.")
    for line, stage in zip(lines[1:], ("compare_tuned", None, "head_dim_sweep", "d_a", "capacity", "long_context")):
        if stage:
            assert line.endswith(f"*not measured: the `{stage}` stage is not published*.")
    assert lines[2] == "- **Cost:** *not measured: the `compare` stage is not published*."
    assert lines[-1] == "- **GPU:** no GPU result is published: every figure is from CPU runs."


def test_answer_reads_tuned_lr_and_the_verdicts_it_changed(tmp_path):
    _write(tmp_path, "compare_jobs.csv", _compare())
    tuned = [dict(r, **{"test/acc": f"{float(r['test/acc']) + 0.02:.6f}"}) if r["attention"] == "additive" else r
             for r in _compare()]
    _write(tmp_path, "compare_tuned_jobs.csv", tuned)
    lines = render_answer(tmp_path).splitlines()
    assert lines[0].startswith("- **Accuracy** (`compare_tuned`: each score function at its own tuned lr")
    assert "`additive` is *equivalent within ±1* on sst2" in lines[0]
    assert lines[1].startswith("- **Learning rate:** tuning it per score function on validation changed 1 of 4 "
                               "verdicts: `additive` on sst2: worse → equivalent within ±1")


def test_answer_capacity_names_the_score_functions_that_fail_before_scaled_dot(tmp_path):
    rows = []
    for load, means in ((8, {"scaled_dot": 1.0, "additive": 0.99, "uniform": 0.20}),
                        (16, {"scaled_dot": 0.99, "additive": 0.50, "uniform": 0.12})):
        rows += [{"model.head_dim": "8", "data.num_pairs": str(load), "attention": a, "acc_mean": str(m),
                  "acc_ci": "0.002", "n": "3"} for a, m in means.items()]
    _write(tmp_path, "capacity.csv", rows)
    line = render_answer(tmp_path).splitlines()[5]
    assert line == ("- **Where attention must work** (associative recall, `capacity`): at d_k 8 `scaled_dot` holds "
                    "≥ 90% to 16 pairs, `additive` to 8. `uniform` stays 80–87 points below `scaled_dot`.")


def test_answer_says_what_the_long_context_control_shows_by_its_verdict(tmp_path):
    """`uniform` 5 points below `scaled_dot` on every seed at n = 512: attention matters there (no "cannot rank")."""
    rows = [_run("imdb", a, s, x - (0.05 + 0.001 * (s % 2) if a == "uniform" else 0.0), **{"data.max_length": "512"})
            for s, x in enumerate(BASE[:3]) for a in ("scaled_dot", "uniform")]
    _write(tmp_path, "long_context_jobs.csv", rows)
    line = render_answer(tmp_path).splitlines()[6]
    assert line.startswith("- **The control on long inputs:** on IMDB at n = 512 `uniform` is *worse* against "
                           "`scaled_dot` (−5.03 [")
    assert line.endswith(": attention matters there.") and "cannot rank" not in line


def test_answer_names_every_dataset_where_the_control_is_equivalent_in_one_sentence(tmp_path):
    rows = [r for r in _compare() if r["data"] == "sst2" and r["attention"] != "uniform"]
    for data in ("sst2", "imdb"):
        rows += [_run(data, "uniform", s, x + 0.001 * (s % 3 - 1)) for s, x in enumerate(BASE)]
        if data == "imdb":
            rows += [_run(data, "scaled_dot", s, x) for s, x in enumerate(BASE)]
    _write(tmp_path, "compare_jobs.csv", rows)
    accuracy = render_answer(tmp_path).splitlines()[0]
    assert accuracy.count("The `uniform` control") == 1
    assert ("The `uniform` control is *equivalent within ±1* on sst2 and imdb: there the task cannot tell score "
            "functions apart.") in accuracy


def test_answer_links_resolve_from_the_page_that_shows_it(tmp_path):
    """The README links to docs/cost.md; docs/results.md (``results:answer-docs``) to cost.md beside it."""
    _write(tmp_path, "compare.csv", [{"attention": "additive", "data": "sst2", "train_tok_s_ratio": "0.5",
                                      "test_tok_s_ratio": "0.25"}])
    readme, docs = render_answer(tmp_path), render_answer(tmp_path, "docs")
    assert "0.50× / 0.25× on sst2" in readme and "[Cost](docs/cost.md)" in readme
    assert docs == readme.replace("[Cost](docs/cost.md)", "[Cost](cost.md)") and "](docs/" not in docs
