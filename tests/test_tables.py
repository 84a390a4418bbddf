"""The renderers of ``attnbench tables``: each table by hand from a small result file, and ``--check`` on a scratch page."""

from __future__ import annotations

import json
import math

import pytest

from attnbench.analysis import tables

from .conftest import REPO_ROOT


def _bench_results(sdpa_s: float = 0.100, l2_s: float = 0.222) -> dict:
    """A bench_attention.py results.json with SDPA's and l2's rows at n=1024, d=64 (both modes)."""
    rows = [{"score": score, "path": path, "mode": mode, "n": 1024, "d": 64, "batch": 4, "heads": 4,
             "time_s": t, "peak_mem_bytes": 2 ** 20, "status": "ok"}
            for score, path, t in (("sdpa_scaled_dot", "sdpa", sdpa_s), ("l2", "fast", l2_s))
            for mode in ("fwd", "fwd_bwd")]
    return {"meta": {"config": {"threads": 2}}, "rows": rows}


def test_check_fails_on_a_drifted_number(tmp_path, capsys):
    (tmp_path / "docs" / "results" / "cpu").mkdir(parents=True)
    source_path = tmp_path / "docs" / "results" / "cpu" / "attention_cost.json"
    source_path.write_text(json.dumps(_bench_results()))
    good = tables.render("docs/results/cpu/attention_cost.json", tmp_path)
    assert "| 2.22 |" in good  # l2: 0.222 s / 0.100 s
    page = tmp_path / "docs" / "cost.md"
    page.write_text(f"text\n<!-- generated: docs/results/cpu/attention_cost.json -->\n{good}<!-- end generated -->\nmore\n")
    assert tables.main(["--check", "--root", str(tmp_path)]) == 0
    page.write_text(page.read_text().replace("| 2.22 |", "| 2.08 |"))  # a hand-edited ratio
    capsys.readouterr()
    assert tables.main(["--check", "--root", str(tmp_path)]) == 1
    assert f"{page}: stale generated block docs/results/cpu/attention_cost.json" in capsys.readouterr().out
    assert tables.main(["--root", str(tmp_path)]) == 0  # rewrite ...
    assert "| 2.22 |" in page.read_text() and tables.main(["--check", "--root", str(tmp_path)]) == 0
    source_path.write_text(json.dumps(_bench_results(l2_s=0.208)))  # ... and an edited source changes the ratio
    assert tables.main(["--check", "--root", str(tmp_path)]) == 1


def test_derived_columns_by_hand():
    runs = [{"batching": b, "seed": seed, "test/acc": acc, "val/acc_best": 0.5 + (seed == 1) * (b == "random") * 0.03}
            for b, values in (("random", (0.80, 0.81, 0.79)), ("length_grouped", (0.81, 0.83, 0.80)))
            for seed, acc in enumerate(values)]
    acc = tables.render_batching_accuracy({"runs": runs})
    # paired differences +0.01, +0.02, +0.01: their mean and Student-t half-width, by hand
    diffs = [0.01, 0.02, 0.01]
    mean = sum(diffs) / 3
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    half = 4.302652729911275 * std / math.sqrt(3)  # t(0.975, df=2)
    assert acc.splitlines()[2:5] == ["| 0 | 0.8000 | 0.8100 | +0.0100 |", "| 1 | 0.8100 | 0.8300 | +0.0200 |",
                                     "| 2 | 0.7900 | 0.8000 | +0.0100 |"]
    assert acc.splitlines()[5] == (f"| mean (95% t interval, n = 3) | 0.8000 | 0.8133 | +{mean:.4f} "
                                   f"[{'+' if mean - half > 0 else '−'}{abs(mean - half):.4f}, +{mean + half:.4f}] |")
    # val/acc_best: differences 0, −0.03, 0: mean −0.01, std 0.01·√3, half-width t·std/√3 = 4.3027·0.01
    assert acc.splitlines()[6] == ("| `val/acc_best`: mean (95% t interval) | 0.5100 | 0.5000 | −0.0100 "
                                   f"[−{0.01 + 4.302652729911275 * 0.01:.4f}, +{4.302652729911275 * 0.01 - 0.01:.4f}] |")


def test_a_report_number_retyped_in_prose_must_be_in_a_generated_table(tmp_path):
    """The audit's drifted numbers were in prose next to tables: on a page with generated tables, a four-decimal
    number in the prose must appear in one of them (a paired Δ of −0.0126 retyped as −0.0162 fails)."""
    page = ("Intro: the paired difference is −0.0126 [−0.0209, −0.0043].\n"
            "<!-- generated: docs/results/x.csv -->\n| dot | −0.0126 [−0.0209, −0.0043] |\n<!-- end generated -->\n"
            "```bash\npython x.py --lr 0.0003\n```\n| hand table | 0.7982 |\n")
    assert tables.unsourced_prose_numbers(page) == []  # code blocks and table rows are not prose
    assert tables.unsourced_prose_numbers(page.replace("is −0.0126", "is −0.0162")) == ["−0.0162"]
    assert tables.unsourced_prose_numbers(page.replace("is −0.0126", "is -0.0126")) == []  # ASCII minus
    assert tables.unsourced_prose_numbers("no tables here: 0.1234\n") == []
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(page.replace("is −0.0126", "is −0.0162").replace(
        "<!-- generated: docs/results/x.csv -->\n| dot | −0.0126 [−0.0209, −0.0043] |\n<!-- end generated -->\n", ""))
    assert tables.main(["--check", "--root", str(tmp_path)]) == 0  # without generated tables there is no source


def test_a_stage_named_before_it_is_published_says_so_and_a_lost_file_is_named(tmp_path, capsys):
    (tmp_path / "docs" / "results" / "cpu").mkdir(parents=True)
    page = tmp_path / "docs" / "results.md"
    page.write_text("<!-- generated: docs/results/cpu/d_a_jobs.csv -->\n<!-- end generated -->\n")
    assert tables.main(["--root", str(tmp_path)]) == 0
    assert ("*The `d_a` stage has not been published: `docs/results/cpu/d_a_jobs.csv` does not exist"
            in page.read_text())
    for lost, why in (("attention_cost.json", "a benchmark's file is not a stage"),
                      ("compare.csv", "its stage is published (compare_jobs.csv): lost, not unpublished"),
                      ("compre_jobs.csv", "no renderer: a typo, named")):
        (tmp_path / "docs" / "results" / "cpu" / "compare_jobs.csv").write_text("status\n")
        page.write_text(f"<!-- generated: docs/results/cpu/{lost} -->\n<!-- end generated -->\n")
        capsys.readouterr()
        assert tables.main(["--check", "--root", str(tmp_path)]) == 1, why
        assert f"{lost}: a generated block's source that does not exist" in capsys.readouterr().out, why


def test_unknown_source_is_named():
    with pytest.raises(KeyError, match="results/nope.json"):
        tables.regenerate("<!-- generated: results/nope.json -->\n| a |\n<!-- end generated -->\n")


# --------------------------------------------------------------------------- the experiments' report.csv tables

# report.csv as attnbench report writes it (columns of attnbench.analysis.stats.summarise, in its order); numbers
# chosen so every derived cell can be checked by hand
REPORT_COLUMNS = ("data,trainer.max_epochs,attention,acc_mean,acc_std,acc_ci,n,diff_mean,diff_ci,diff_n,train_tok_s,"
                  "test_tok_s,train_steps_s,peak_mem_mb,params,entropy_norm,saturated_frac,max_score,sec_per_step,"
                  "n_stopped,steps_done,steps_planned,extrapolated_sec")
COMPARE_CSV = REPORT_COLUMNS + """
sst2,3,scaled_dot,0.8,0.01,0.0124,5,,,,5430.0,36000.0,1.2,700.0,2000000,0.98,0.0,4.4,0.8333,0,,,
sst2,3,additive,0.79,0.02,0.0248,5,-0.01,0.02,5,1194.6,4320.0,0.3,900.0,2000000,0.983,0.0,1.6,3.3333,0,,,
trec,20,scaled_dot,0.83,,,1,,,,8000.0,34000.0,5.0,650.0,1300000,0.915,0.0,6.3,0.2,0,,,
trec,20,dot,0.844,,,1,0.014,,1,8320.0,30940.0,5.2,650.0,1300000,0.721,0.023,16.1,0.1923,0,,,
"""


def _rows(text: str) -> list[dict[str, str]]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


def test_compare_table_by_hand():
    lines = tables.render_compare(_rows(COMPARE_CSV)).splitlines()
    assert lines[0].startswith("| data | attention | seeds | test acc (mean ± std) | 95% CI | Δ vs scaled_dot")
    # scaled_dot's own row shows its absolute rates; 0.8 ± 0.0124 -> [0.788, 0.812]
    assert lines[2] == "| sst2 | `scaled_dot` | 5 | 0.8000 ± 0.0100 | [0.788, 0.812] | – | 1.00 (5,430/s) | " \
                       "1.00 (36,000/s) | 0.980 | 0.000 | 4.4 |"
    # 1194.6 / 5430 = 0.22, 4320 / 36000 = 0.12; Δ -0.01 ± 0.02 -> [-0.03, +0.01]
    assert lines[3] == "| sst2 | `additive` | 5 | 0.7900 ± 0.0200 | [0.765, 0.815] | −0.0100 [−0.0300, +0.0100] | " \
                       "0.22 | 0.12 | 0.983 | 0.000 | 1.6 |"
    # one seed: no interval, and the baseline first (attention_order), whatever the CSV's order; 8320 / 8000 = 1.04
    assert lines[4].startswith("| trec | `scaled_dot` | 1 | 0.8300 | 1 seed, no interval | – | 1.00 (8,000/s) |")
    assert lines[5] == "| trec | `dot` | 1 | 0.8440 | 1 seed, no interval | +0.0140 (1 seed, no interval) | 1.04 | " \
                       "0.91 | 0.721 | 0.023 | 16.1 |"


def test_compare_multiples_are_the_reports_paired_ratios_where_it_has_them():
    """A report.csv with ``train_tok_s_ratio``/``test_tok_s_ratio`` (summarise: the median of same-seed pairs) is
    shown as it is, not as the ratio of the two medians (which compares runs of different sessions); an empty
    ratio (no pair) is "–", never the medians' ratio in its place."""
    text = COMPARE_CSV.replace("extrapolated_sec\n", "extrapolated_sec,train_tok_s_ratio,test_tok_s_ratio\n", 1)
    rows = text.strip().splitlines()
    ratios = {"scaled_dot": ",1.0,1.0", "additive": ",0.5,0.25", "dot": ",,"}
    rows = [rows[0]] + [r + next(v for k, v in ratios.items() if f",{k}," in r) for r in rows[1:]]
    lines = tables.render_compare(_rows("\n".join(rows) + "\n")).splitlines()
    assert "| −0.0100 [−0.0300, +0.0100] | 0.50 | 0.25 |" in lines[3]  # not 0.22 / 0.12 (the medians' ratio)
    assert "| +0.0140 (1 seed, no interval) | – | – |" in lines[5]
    assert "| 1.00 (5,430/s) | 1.00 (36,000/s) |" in lines[2]  # the baseline: its absolute median rates


HEAD_DIM_CSV = """model.head_dim,attention,acc_mean,acc_std,acc_ci,n,diff_mean,diff_ci,diff_n,max_score,saturated_frac,entropy_norm
128,dot,0.775,0.01,0.0248,3,-0.029,0.01,3,98.9,0.197,0.298
128,scaled_dot,0.804,0.005,0.0124,3,,,,5.7,0.0,0.969
16,dot,0.798,0.01,0.0248,3,-0.001,0.03,3,4.0,0.0,0.952
16,scaled_dot,0.799,0.005,0.0124,3,,,,1.3,0.0,0.991
"""


def test_head_dim_tables_by_hand():
    text = tables.render_head_dim_sweep(_rows(HEAD_DIM_CSV))
    acc, delta, diag = text.split("\n\n")
    assert acc.splitlines()[0] == "| test acc (mean [95% CI]) | d_k=16 | d_k=128 |"  # d_k in numeric order
    assert acc.splitlines()[2] == "| `scaled_dot` | 0.7990 [0.787, 0.811] | 0.8040 [0.792, 0.816] |"
    assert acc.splitlines()[3] == "| `dot` | 0.7980 [0.773, 0.823] | 0.7750 [0.750, 0.800] |"
    # -0.029 ± 0.01 -> [-0.039, -0.019]: an interval without 0; -0.001 ± 0.03 contains it
    assert delta.splitlines()[2] == "| `dot` | −0.0010 [−0.0310, +0.0290] | −0.0290 [−0.0390, −0.0190] |"
    assert len(delta.splitlines()) == 3  # no row for the baseline itself
    assert "| `dot` max \\|score\\| | 4.0 | 98.9 |" in diag.splitlines()
    assert "| `dot` saturated rows | 0.000 | 0.197 |" in diag.splitlines()
    assert "| `scaled_dot` entropy (norm.) | 0.991 | 0.969 |" in diag.splitlines()


LONG_CONTEXT_CSV = """data.max_length,attention,acc_mean,acc_std,acc_ci,n,train_tok_s,peak_mem_mb,sec_per_step,n_stopped,steps_done,steps_planned,extrapolated_sec
256,scaled_dot,0.86,,,1,20000.0,1200.0,0.35,0,,,
256,additive,,,,0,400.0,1900.0,17.5,1,205,2229,39007.5
512,scaled_dot,0.87,,,1,15000.0,1600.0,0.9,0,,,
"""


def test_long_context_table_shows_unfinished_runs_by_their_cost():
    lines = tables.render_long_context(_rows(LONG_CONTEXT_CSV)).splitlines()
    assert lines[2] == "| 256 | `scaled_dot` | 0.8600 | 20,000 (1.000×) | 0.35 | finished | 1200 |"
    # stopped at 205 of 2,229 steps; 2,229 x 17.5 s = 39,007.5 s = 10.8 h; 400 / 20,000 = 0.020
    assert lines[3] == ("| 256 | `additive` | unfinished (max_time): 205 of 2,229 steps | 400 (0.020×) | 17.5 | "
                        "10.8 h (extrapolated) | 1900 |")
    assert lines[4] == "| 512 | `scaled_dot` | 0.8700 | 15,000 (1.000×) | 0.9 | finished | 1600 |"


def test_long_context_multiples_are_the_reports_paired_ones():
    """A report with paired multiples (``train_tok_s_ratio``: each run over the scaled_dot run of its own machine)
    shows those, not the ratio of the two rows' rates: with scaled_dot run on two machines (a baseline twin), its
    row's rate is the mean of both, and dividing by it would mix the machines (here 400 / 20,000 = 0.020)."""
    paired = LONG_CONTEXT_CSV.replace("extrapolated_sec\n", "extrapolated_sec,train_tok_s_ratio,train_tok_s_ratio_n\n")
    paired = paired.replace(",0,,,\n", ",0,,,,1.0,1\n").replace(",39007.5\n", ",39007.5,0.016,1\n")
    lines = tables.render_long_context(_rows(paired)).splitlines()
    assert lines[2] == "| 256 | `scaled_dot` | 0.8600 | 20,000 (1.000×) | 0.35 | finished | 1200 |"
    assert lines[3] == ("| 256 | `additive` | unfinished (max_time): 205 of 2,229 steps | 400 (0.016×) | 17.5 | "
                        "10.8 h (extrapolated) | 1900 |")


def test_a_report_with_another_varying_setting_is_refused():
    rows = _rows(COMPARE_CSV)
    rows.append(dict(rows[0], **{"trainer.max_epochs": "5"}))  # sst2 scaled_dot twice: the table would hide it
    with pytest.raises(ValueError, match="two rows for data=sst2, attention=scaled_dot: another setting varies "
                                         r"\(trainer.max_epochs"):
        tables.render_compare(rows)
    with pytest.raises(ValueError, match="report.csv has no 'model.head_dim' column"):
        tables.render_head_dim_sweep(rows)


def test_a_stage_csv_renders_through_the_markers(tmp_path):
    """The path attnbench reproduce writes (docs/results/cpu/<stage>.csv) has a renderer; --check holds its table."""
    source = "docs/results/cpu/compare.csv"
    assert tables.RENDERERS[source] is tables.render_compare
    assert tables.RENDERERS["docs/results/gpu/long_context.csv"] is tables.render_long_context
    (tmp_path / "docs" / "results" / "cpu").mkdir(parents=True)
    (tmp_path / source).write_text(COMPARE_CSV)
    page = tmp_path / "README.md"
    page.write_text(f"<!-- generated: {source} -->\n| stale |\n<!-- end generated -->\n")
    assert tables.main(["--check", "--root", str(tmp_path)]) == 1
    assert tables.main(["--root", str(tmp_path)]) == 0
    assert tables.render_compare(_rows(COMPARE_CSV)) in page.read_text()
    assert tables.main(["--check", "--root", str(tmp_path)]) == 0


def test_train_throughput_table_from_bench_train_json():
    """The cost stage's side-by-side training tokens/s (bench_train.py --attention --json): best of the runs,
    every run, and the ratio to the first score function, computed here by hand."""
    data = {"meta": {"threads": 1}, "result": {"repeats": 2, "best": {"scaled_dot": 6000.0, "additive": 1500.0},
                                               "runs": {"scaled_dot": [5000.0, 6000.0], "additive": [1500.0, 1400.0]}}}
    table = tables.render_train_throughput(data)
    assert "| `scaled_dot` | 6,000 | 5,000, 6,000 | 1.00 |" in table
    assert "| `additive` | 1,500 | 1,500, 1,400 | 0.25 |" in table  # 1500 / 6000
    assert tables.RENDERERS["docs/results/cpu/train_throughput.json"] is tables.render_train_throughput


def test_attention_cost_table_from_the_benchmarks_own_results_json():
    """The cost stage's attention benchmark, published as the bench wrote it (results.json): the table at n=1024,
    d=64 takes times and memory from its rows, multiples of the SDPA row (worked by hand here); a row skipped for
    memory shows "–", and another n is not mixed in."""
    def row(score, path, mode, time_s, mem=None, n=1024, status="ok"):
        return {"score": score, "path": path, "mode": mode, "n": n, "d": 64, "batch": 4, "heads": 4,
                "time_s": time_s, "peak_mem_bytes": mem, "status": status}

    mib = 2 ** 20
    data = {"meta": {"config": {"threads": 2}}, "rows": [
        row("sdpa_scaled_dot", "sdpa", "fwd", 0.050), row("sdpa_scaled_dot", "sdpa", "fwd_bwd", 0.100, 20 * mib),
        row("scaled_dot", "fast", "fwd", 0.055), row("scaled_dot", "fast", "fwd_bwd", 0.110, 20 * mib),
        row("additive", "fast", "fwd", 6.0), row("additive", "fast", "fwd_bwd", 15.0, 300 * mib),
        row("additive", "naive", "fwd", None, status="skipped_mem"),
        row("additive", "naive", "fwd_bwd", None, status="skipped_mem"),
        row("scaled_dot", "fast", "fwd_bwd", 9.9, 99 * mib, n=512),  # another n: not in the table
    ]}
    table = tables.render_bench_attention(data)
    lines = table.splitlines()
    assert lines[0].startswith("| B=4, H=4, n=1024, d=64, 2 thread(s) | fwd | × SDPA |")
    assert "| SDPA (`F.scaled_dot_product_attention`) | 50 ms | 1.00 | 100 ms | 1.00 | 20 MiB | 1.00 |" in lines
    assert "| `scaled_dot` | 55 ms | 1.10 | 110 ms | 1.10 | 20 MiB | 1.00 |" in lines
    assert ("| `additive` | 6,000 ms | 120.0 | 15,000 ms | 150.0 | 300 MiB | "
            "15.0 |") in lines
    assert "| `additive`, naive (n×n scores materialised) | – | – | – | – | – | – |" in lines
    assert len(lines) == 2 + 4  # header, rule, the four (score, path) pairs measured or skipped at n=1024
    assert tables.RENDERERS["docs/results/cpu/attention_cost.json"] is tables.render_bench_attention
    with pytest.raises(KeyError, match="no SDPA row at n=1024, d=64"):
        tables.render_bench_attention({"rows": [r for r in data["rows"] if r["score"] != "sdpa_scaled_dot"]})


def test_a_report_of_one_dataset_takes_its_dataset_from_jobs_csv(tmp_path):
    """`reproduce.py --stages compare --grid data=sst2 --publish`: report.py names only the settings that vary, so
    the report of one dataset has no `data` column, and rendering it raised `ValueError: report.csv has no 'data'
    column`. The one dataset every run of <stage>_jobs.csv shares is the table's; a jobs.csv that is missing or
    holds several is refused with one message naming the file and what to do."""
    rows = [r for r in _rows(COMPARE_CSV) if r["data"] == "sst2"]
    without = [{k: v for k, v in r.items() if k != "data"} for r in rows]
    pub = tmp_path / "docs" / "results" / "cpu"
    pub.mkdir(parents=True)
    import csv

    def write_compare_csv(table: list[dict]) -> None:
        with open(pub / "compare.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)

    write_compare_csv(without)
    with pytest.raises(ValueError, match=r"docs/results/cpu/compare.csv has no 'data' column and its one value "
                                         r"cannot be taken from docs/results/cpu/compare_jobs.csv \(it is missing\)"):
        tables.render("docs/results/cpu/compare.csv", tmp_path)
    (pub / "compare_jobs.csv").write_text("job,data,attention\nscaled_dot-sst2-s0,sst2,scaled_dot\n"
                                          "additive-sst2-s0,sst2,additive\n")
    # the same table as from a report with the column: every cell computed from the same numbers
    assert tables.render("docs/results/cpu/compare.csv", tmp_path) == tables.render_compare(rows)
    assert "| sst2 | `additive` | 5 | 0.7900 ± 0.0200 | [0.765, 0.815] |" in tables.render_compare(rows)
    (pub / "compare_jobs.csv").write_text("job,data,attention\nscaled_dot-sst2-s0,sst2,scaled_dot\n"
                                          "additive-trec-s0,trec,additive\n")
    with pytest.raises(ValueError, match=r"its 'data' column holds \['sst2', 'trec'\]"):
        tables.render("docs/results/cpu/compare.csv", tmp_path)
    # another setting varying is named with the file (the replay's 2- and 3-epoch runs of one score function)
    (pub / "compare_jobs.csv").write_text("job,data\na,sst2\n")
    write_compare_csv([{**without[0], "trainer.max_epochs": "2"}, {**without[0], "trainer.max_epochs": "3"}])
    with pytest.raises(ValueError, match=r"^docs/results/cpu/compare.csv: two rows for data=sst2, "
                                         r"attention=scaled_dot: another setting varies \(trainer.max_epochs\)"):
        tables.render("docs/results/cpu/compare.csv", tmp_path)


def test_the_two_machine_table_pairs_the_same_jobs_by_seed(tmp_path):
    """render_two_machines (the archived against the published compare_jobs.csv): per cell, each machine's mean ±
    std over the seeds both ran, the paired now − before difference and each machine's paired Δ to scaled_dot,
    with 95% t intervals recomputed here from the accuracies (scipy); a job only one machine ran is left out."""
    from scipy import stats

    def jobs(acc: dict[tuple[str, int], float]) -> list[dict[str, str]]:
        return [{"job": f"{name}-sst2-s{seed}", "data": "sst2", "attention": name, "test/acc": str(value)}
                for (name, seed), value in acc.items()]

    before = {("scaled_dot", 0): 0.80, ("scaled_dot", 1): 0.82, ("scaled_dot", 2): 0.81,
              ("dot", 0): 0.78, ("dot", 1): 0.79, ("dot", 2): 0.77}
    now = {("scaled_dot", 0): 0.81, ("scaled_dot", 1): 0.80, ("scaled_dot", 2): 0.83,
           ("dot", 0): 0.80, ("dot", 1): 0.76, ("dot", 2): 0.79, ("dot", 3): 0.10}

    def interval(x: list[float]) -> str:
        mean, half = sum(x) / len(x), stats.t.ppf(0.975, len(x) - 1) * stats.tstd(x) / len(x) ** 0.5
        return f"{tables._sign(mean)} [{tables._sign(mean - half)}, {tables._sign(mean + half)}]"

    rows = tables.render_two_machines(jobs(before), jobs(now)).splitlines()
    assert rows[0].startswith("| data | attention | seeds | test acc before | test acc now |")
    dot = [c.strip() for c in rows[3].strip("|").split("|")]  # the baseline's row first
    seeds = range(3)
    assert dot[:3] == ["sst2", "`dot`", "3"]
    assert dot[3] == f"{0.78:.4f} ± {stats.tstd([0.78, 0.79, 0.77]):.4f}"
    assert dot[4] == f"{0.78333333:.4f} ± {stats.tstd([0.80, 0.76, 0.79]):.4f}"
    assert dot[5] == interval([now["dot", s] - before["dot", s] for s in seeds])
    assert dot[6] == interval([before["dot", s] - before["scaled_dot", s] for s in seeds])
    assert dot[7] == interval([now["dot", s] - now["scaled_dot", s] for s in seeds])
    base = [c.strip() for c in rows[2].strip("|").split("|")]
    assert base[1] == "`scaled_dot`" and base[6:] == ["–", "–"] and len(rows) == 4
    with pytest.raises(ValueError, match="share no job name"):
        tables.render_two_machines(jobs(before), [])
    # a job twice in one CSV, or one seed under two job names, would count a seed twice: refused
    with pytest.raises(ValueError, match="published compare_jobs.csv has two finished rows of job dot-sst2-s1"):
        tables.render_two_machines(jobs(before), jobs(now) + [jobs(now)[4]])
    renamed = [dict(r, job="dot-sst2-rerun-s1") for r in jobs({("dot", 1): 0.7})]
    with pytest.raises(ValueError, match=r"data=sst2, attention=dot: two jobs of one seed \(dot-sst2-rerun-s1, "
                                         r"dot-sst2-s1\)"):
        tables.render_two_machines(jobs(before) + renamed, jobs(now) + renamed)


def test_a_report_paired_to_another_baseline_is_refused():
    """The tables say "Δ vs scaled_dot" and "× scaled_dot": a report.csv written with ``--baseline dot`` has its
    paired columns relative to dot (scaled_dot's own Δ is then not 0, its multiple not 1) and must not be shown
    under those headers."""
    rows = _rows(COMPARE_CSV)
    tables.render_compare(rows)  # scaled_dot's Δ empty: accepted
    rows[0] = dict(rows[0], diff_mean="0.0")
    tables.render_compare(rows)  # Δ exactly 0 (paired with itself): accepted
    rows[0] = dict(rows[0], diff_mean="0.014")
    with pytest.raises(ValueError, match=r"scaled_dot row \(data=sst2\) has diff_mean = 0.014: .*--baseline scaled_dot"):
        tables.render_compare(rows)
    text = COMPARE_CSV.replace("extrapolated_sec\n", "extrapolated_sec,train_tok_s_ratio\n", 1)
    lines = text.strip().splitlines()
    lines = [lines[0]] + [r + (",2.0" if ",scaled_dot," in r else ",1.0") for r in lines[1:]]
    with pytest.raises(ValueError, match="has train_tok_s_ratio = 2.0"):
        tables.render_compare(_rows("\n".join(lines) + "\n"))


def test_a_report_paired_to_a_baseline_the_setting_lacks_is_refused():
    """A report written with ``--baseline dot`` over runs without scaled_dot has no scaled_dot row to check, yet
    its Δ and multiples are relative to dot. Before: they were shown under "Δ vs scaled_dot". A report paired to
    scaled_dot has no paired value in a setting without scaled_dot (nothing to pair with)."""
    text = COMPARE_CSV.replace("extrapolated_sec\n", "extrapolated_sec,train_tok_s_ratio,test_tok_s_ratio\n", 1)
    lines = text.strip().splitlines()
    lines = [lines[0]] + [r + (",1.0,1.0" if ",scaled_dot," in r else ",0.9,0.8") for r in lines[1:]]
    rows = _rows("\n".join(lines) + "\n")
    tables.render_compare(rows)
    without_base = [r for r in rows if not (r["data"] == "trec" and r["attention"] == "scaled_dot")]
    with pytest.raises(ValueError, match=r"no scaled_dot row for data=trec but paired columns \(dot diff_mean, "
                                         r"dot test_tok_s_ratio, dot train_tok_s_ratio\)"):
        tables.render_compare(without_base)
    unpaired = [dict(r, diff_mean="", diff_ci="", diff_n="", train_tok_s_ratio="", test_tok_s_ratio="")
                if r["data"] == "trec" else r for r in without_base]
    assert "| trec | `dot` | 1 | 0.8440 | 1 seed, no interval | – | – | – |" in tables.render_compare(unpaired)


def test_the_two_machine_table_leaves_out_runs_the_wall_time_cap_stopped():
    """A run ``trainer.max_time`` stopped (``stopped_by``) has a test accuracy that is not a final one; the report
    leaves it out and so must this table. Before: it counted as a finished seed (here 0.55 of a stopped run
    moved dot's 'now' mean from 0.79 to 0.71)."""
    def job(attention, seed, acc, **extra):
        return {"job": f"{attention}-sst2-s{seed}", "data": "sst2", "attention": attention, "seed": str(seed),
                "test/acc": str(acc), "status": "finished", "stopped_by": "", **extra}

    before = [job(a, s, acc) for a, acc in (("scaled_dot", 0.80), ("dot", 0.79)) for s in range(3)]
    now = [job("scaled_dot", s, 0.80) for s in range(3)] + [job("dot", 0, 0.79), job("dot", 1, 0.79),
                                                            job("dot", 2, 0.55, stopped_by="max_time")]
    dot = next(line for line in tables.render_two_machines(before, now).splitlines() if "`dot`" in line)
    assert dot.startswith("| sst2 | `dot` | 2 | 0.7900 ± 0.0000 | 0.7900 ± 0.0000 | ±0.0000")
    failed = now[:5] + [job("dot", 2, 0.55, status="failed")]
    assert "| `dot` | 2 |" in tables.render_two_machines(before, failed)


def test_a_variant_without_a_test_accuracy_reads_as_none_not_nan():
    """A report row with n = 0 and no stopped run (its runs recorded no test accuracy). Before: 'nan'."""
    assert tables._acc({"n": "0", "acc_mean": "", "acc_std": "", "acc_ci": "", "n_stopped": "0"}) == \
        ("–", "no test accuracy")


def test_the_epoch_probe_table_names_each_runs_best_epoch_and_the_published_run_of_its_seed():
    run = {"val/acc_by_epoch": [0.8, 0.9, 0.85], "val/loss_by_epoch": [0.4, 0.5, 0.7], "test/acc": 0.81}
    data = {"runs": {"epochs3/x-s0": run, "epochs2/x-s0": {**run, "val/acc_by_epoch": [0.7, 0.8],
                                                           "val/loss_by_epoch": [0.5, 0.45], "test/acc": 0.82}},
            "published_2_epoch_runs": {"0": {"test/acc": 0.83, "twin": {"test/acc": 0.84}}}}
    rows = tables.render_epoch_probe(data).splitlines()[2:]
    assert rows == ["| 3 | 0 | 0.8000, 0.9000, 0.8500 | 0.9000 (1) | 0.400 → 0.700 | 0.8100 | 0.8300 (twin 0.8400) |",
                    "| 2 | 0 | 0.7000, 0.8000 | 0.8000 (1) | 0.500 → 0.450 | 0.8200 | 0.8300 (twin 0.8400) |"]


# ----------------------------------------------------------------------------------- tables of the composed config
def _cells(table: str, first: str) -> list[str]:
    """The cells of the row of ``table`` whose first cell is ``first``."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    return next(row for row in rows if row[0] == first)


def test_model_presets_count_the_parameters_of_the_documented_sizes():
    """Each preset's parameters besides the embeddings equal a count by hand from its row's sizes: per pre-LN
    block two LayerNorms (2·2d), the q, k, v projections d → h·d_k and the output projection back (with biases),
    the MLP d → d_ff → d (with biases); then the final LayerNorm and the 2-class head. The last column adds
    (16,000 + 64) × d of ``python train.py``'s embeddings."""
    table = tables.render("config:model-presets", REPO_ROOT)
    assert "(16,000 tokens, 64 positions)" in table
    for name in ("tiny", "recall", "small", "base"):
        _, d, heads, layers, d_ff, *_, besides, total = _cells(table, f"`{name}`")
        d, layers, d_ff = int(d), int(layers), int(d_ff)
        h, d_k = (int(x) for x in heads.split("×"))
        block = 2 * 2 * d + (d * 3 * h * d_k + 3 * h * d_k) + (h * d_k * d + d) + (d * d_ff + d_ff) + (d_ff * d + d)
        by_hand = layers * block + 2 * d + (d * 2 + 2)
        assert int(besides.replace(",", "")) == by_hand, name
        assert int(total.replace(",", "")) == by_hand + (16_000 + 64) * d, name
    assert _cells(table, "`small`")[1:4] == ["128", "4 × 32", "2"]
    assert _cells(table, "`small`")[-2] == "265,474"


@pytest.mark.slow  # renders the config tables four times (Hydra composes every option of every group each time);
# tests/test_readme_tables.py checks the repository's generated blocks by default
def test_config_tables_follow_the_config_and_check_fails_when_it_changes(tmp_path, capsys):
    """The defaults tables are rendered from the composed config: a preset's changed value and a new score
    function's YAML (with its own option) change the generated tables, so ``--check`` fails until they are
    regenerated; the rows name every source holding a value."""
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "conf", root / "conf")
    (root / "docs").mkdir()
    page = root / "docs" / "configuration.md"
    page.write_text("".join(f"<!-- generated: config:{name} -->\n<!-- end generated -->\n\n"
                            for name in ("groups", "defaults", "data-defaults")))
    assert tables.main(["--root", str(root)]) == 0
    text = page.read_text()
    assert "| `attention` | `additive`, `cosine`, `dot`, `euclidean`, `general`, `l2`, `scaled_dot`, `uniform` | " \
           "`scaled_dot` |" in text
    assert "| `optim.betas` | `[0.9, 0.98]` | `train`, `OptimConfig` |" in text
    assert "| `data.max_length` | `48` | `data=trec` |" in text
    assert "| `data.tokenizer.min_frequency` | `1` | `data=assoc_recall`, `data=trec` |" in text
    assert "| `attention.eps` | `1e-6` | `attention=cosine`, `attnbench.attention.cosine.CosineScore` |" in text
    assert tables.main(["--check", "--root", str(root)]) == 0

    trec = root / "conf" / "data" / "trec.yaml"
    trec.write_text(trec.read_text().replace("max_length: 48", "max_length: 40"))
    (root / "conf" / "attention" / "l2_small.yaml").write_text(
        "_target_: attnbench.attention.l2.L2Score\nname: l2_small\nchunk_bytes: 1024\n")
    capsys.readouterr()
    assert tables.main(["--check", "--root", str(root)]) == 1
    assert "stale generated block config:data-defaults" in capsys.readouterr().out
    assert tables.main(["--root", str(root)]) == 0
    text = page.read_text()
    assert "| `data.max_length` | `40` | `data=trec` |" in text
    assert "`l2`, `l2_small`, `scaled_dot`" in text
    assert "| `attention.chunk_bytes` | `1024` | `attention=l2_small` |" in text


def test_roofline_and_exponent_tables_take_their_ratios_from_the_benchmark_output():
    from attnbench.analysis.tables import render_exponents, render_roofline

    rates = {"gemm_gflops": 100.0, "tanh": {"in_cache": 2.0, "streaming": 1.0}}

    def row(score, path, mode, time_s, work, bound_s):
        return dict(score=score, path=path, mode=mode, n=512, d=64, batch=4, heads=4, threads=1, status="ok",
                    time_min_s=time_s, work=work, bound_s=bound_s, bound_fraction=bound_s / time_s)

    data = {"meta": {"rates": {"1": rates}}, "rows": [
        row("sdpa_scaled_dot", "sdpa", "fwd", 0.02, {"flops": 10**9}, 0.01),
        row("additive", "fast", "fwd", 0.8, {"flops": 10**9, "tanh": 4 * 10**8}, 0.21)]}
    text = render_roofline(data)
    assert "| SDPA (`F.scaled_dot_product_attention`) | fwd | 20.0 | 1 GFLOP | 10.0 | 50% |" in text
    assert "| `additive` | fwd | 800.0 | 1 GFLOP + 400 M tanh | 210.0 | 26% |" in text
    # measured 0.8 / 0.02; at the limit 0.21 / 0.01; with the streaming rate (0.4 + 0.01) / 0.01
    assert "measured 40.0×, at the limit 21.0× (with the 64 MiB tanh rate as the bound: 41.0×)" in text

    fits = [dict(score=s, path=p, mode="fwd", threads=1, axis="n", fixed=64, top=False, sizes=[64, 4096],
                 timings=35, exponent=e, ci_low=e - 0.1, ci_high=e + 0.1)
            for s, p, e in (("sdpa_scaled_dot", "sdpa", 1.9), ("additive", "fast", 2.0))]
    table = render_exponents({"rows": [dict(batch=1, heads=1)], "exponents": fits})
    assert "| `additive` | 2.00 [1.90, 2.10] |" in table and "n 64–4096 (d=64), 1 thr." in table


def test_cost_answer_takes_every_figure_from_its_result_files(tmp_path):
    from attnbench.analysis.tables import render_cost_answer

    base = tmp_path / "docs" / "results" / "cpu"
    base.mkdir(parents=True)
    rates = {"gemm_gflops": 100.0, "tanh": {"in_cache": 2.0, "streaming": 1.0}}

    def row(score, mode, time_s, bound_s, work=None):
        return dict(score=score, path="fast", mode=mode, n=512, d=64, batch=4, heads=4, threads=1, status="ok",
                    time_min_s=time_s, bound_s=bound_s, bound_fraction=bound_s / time_s,
                    work=work or {"flops": 10**9})

    tanh = {"flops": 10**9, "tanh": 4 * 10**8}
    rows = [row("sdpa_scaled_dot", "fwd", 0.02, 0.01), row("sdpa_scaled_dot", "fwd_bwd", 0.06, 0.03),
            row("additive", "fwd", 0.8, 0.21, tanh), row("additive", "fwd_bwd", 1.2, 0.42, tanh),
            row("dot", "fwd", 0.016, 0.01), row("dot", "fwd_bwd", 0.05, 0.03),
            row("cosine", "fwd", 0.02, 0.01), row("cosine", "fwd_bwd", 0.1, 0.03),
            row("l2", "fwd", 0.05, 0.01), row("l2", "fwd_bwd", 0.15, 0.03)]
    (base / "attention_roofline.json").write_text(json.dumps({"meta": {"rates": {"1": rates}}, "rows": rows}))
    fits = [dict(score=s, path="fast", mode="fwd", threads=1, axis=axis, fixed=64, top=True, sizes=[512, 4096],
                 exponent=e, ci_low=e - 0.1, ci_high=e + 0.1)
            for s, e in (("dot", 1.9), ("cosine", 1.95), ("additive", 2.1)) for axis in ("n", "d")]
    (base / "attention_exponents.json").write_text(json.dumps({"rows": [], "exponents": fits}))
    (base / "train_pair_fused_additive.json").write_text(json.dumps({"meta": {"threads": 1}, "result": {
        "model": "small", "data": "sst2", "best": {"scaled_dot": 100.0, "additive": 80.0},
        "runs": {"scaled_dot": [100.0, 90.0], "additive": [80.0, 45.0]}}}))
    job = {"side_by_side": {"test/acc": 0.5, "torch_threads": 1}, "one_at_a_time": {"test/acc": 0.5, "torch_threads": 2},
           "identical_metrics": False}
    (base / "sweep_cores.json").write_text(json.dumps({"ratio": 0.55, "steps": 300, "jobs": {"a": job, "b": job},
                                                       "wall_seconds": {"side_by_side": 55, "one_at_a_time": 100}}))
    text = render_cost_answer(tmp_path)
    assert "400 M of them" in text and "about 50 FLOPs" in text  # 100 GFLOP/s / 2 G tanh/s
    assert "**40.0×** SDPA's time, and **21.0×** at the limit" in text  # 0.8 / 0.02 and 0.21 / 0.01
    assert "forward + backward 20.0× measured, 14.0× at the limit" in text
    assert "reaches 26% of its bound (forward + backward 35%), SDPA 50% (50%)" in text
    assert "reach 50–62% of their GEMM bound in the forward and 30–60% with the backward" in text
    assert "n^1.90–1.95 for the matrix-multiply scores, n^2.10 for `additive`" in text
    assert "**0.80×** `scaled_dot`'s tokens/s, best of 2 interleaved runs each (round by round 0.50–0.80×)" in text
    assert "**0.55×** against 2 threads each, 300 steps a job (55 s against 100 s; equal test accuracy in 2 of 2" in text


def test_release_check_table_counts_each_stage_and_names_one_never_checked(tmp_path):
    pub = tmp_path / "docs" / "results" / "cpu"
    pub.mkdir(parents=True)
    row = {"commit": "aaa", "stage": "capacity", "overrides": {}, "identical": True, "head": "hhh"}
    (pub / "training_code_check.json").write_text(json.dumps({"meta": {"steps": 60, "seed": 0}, "checks": [
        row, {**row, "attention": "additive"}, {**row, "commit": "bbb", "identical": False},
        {**row, "commit": "old"}]}))  # "old": a replaced run's commit, no longer in the manifest
    (pub / "manifest.json").write_text(json.dumps({"jobs": {
        "capacity/x": {"commits": ["aaa", "bbb+dirty"]}, "capacity/y": {"commits": ["ccc"]},
        "d_a/y": {"commits": ["ddd"]}, "cost/attention": {"commits": ["aaa"]}}}))
    lines = tables.render_release_check(tmp_path).splitlines()
    assert lines[2] == "| `capacity` | 2 of 3 | 2 of 3 | `hhh` | `additive` |"  # ccc never checked
    assert lines[3] == "| `d_a` | none of 1 | – | – | – |" and not any("`cost`" in line for line in lines)


def test_equivalence_settings_in_numeric_order():
    rows = [{"status": "finished", "model.head_dim": d, "attention": a, "seed": str(s), "test/acc": str(acc + e),
             "train_host": ""}
            for d in ("128", "16") for s, e in enumerate((0.0, 0.01, -0.01))
            for a, acc in (("scaled_dot", 0.8), ("dot", 0.79 + 0.001 * s))]
    body = [line for line in tables.render_equivalence(rows, setting="model.head_dim").splitlines()
            if line.startswith("| 1")]
    assert [line.split(" | ")[0] for line in body] == ["| 16", "| 128"]
