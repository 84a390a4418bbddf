"""README/docs tables generated from result files (scripts/readme_tables.py) match their sources."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from .conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("readme_tables", REPO_ROOT / "scripts" / "readme_tables.py")
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)


def test_every_generated_table_matches_its_source():
    """Fails when a number between `<!-- generated: ... -->` markers was edited by hand or its source changed
    without `python scripts/readme_tables.py` being re-run (the script prints the diff with --check)."""
    found = []
    for path in tables.markdown_files():
        text = path.read_text(encoding="utf-8")
        found += tables.sources_in(text)
        assert tables.regenerate(text) == text, f"{path}: run python scripts/readme_tables.py"
    # every result file with a renderer is shown somewhere (a table moved to docs/ keeps its markers)
    assert sorted(set(found)) == sorted(tables.RENDERERS)


def test_check_fails_on_a_drifted_number(tmp_path):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    source = json.loads((REPO_ROOT / "docs" / "results" / "attention_cost_cpu.json").read_text())
    (tmp_path / "docs" / "results" / "attention_cost_cpu.json").write_text(json.dumps(source))
    good = tables.render("docs/results/attention_cost_cpu.json")
    page = tmp_path / "docs" / "cost.md"
    page.write_text(f"text\n<!-- generated: docs/results/attention_cost_cpu.json -->\n{good}<!-- end generated -->\nmore\n")
    assert tables.main(["--check", "--root", str(tmp_path)]) == 0
    page.write_text(page.read_text().replace("| 2.22 |", "| 2.08 |"))  # the drift the audit found
    assert tables.main(["--check", "--root", str(tmp_path)]) == 1
    assert tables.main(["--root", str(tmp_path)]) == 0  # rewrite ...
    assert "| 2.22 |" in page.read_text() and tables.main(["--check", "--root", str(tmp_path)]) == 0
    source["rows"][-1]["time_ms"] = 208  # ... and an edited source changes the derived ratio
    (tmp_path / "docs" / "results" / "attention_cost_cpu.json").write_text(json.dumps(source))
    assert tables.main(["--check", "--root", str(tmp_path)]) == 1


def test_derived_columns_by_hand():
    cost = tables.render_attention_cost({"baseline": "b", "rows": [{"name": "b", "time_ms": 104, "peak_mib": 22.1},
                                                                  {"name": "x", "time_ms": 231, "peak_mib": 264}]})
    assert cost.splitlines()[2] == "| b | 104 ms | 1.00 | 22.1 MiB | 1.00 |"
    assert cost.splitlines()[3] == "| x | 231 ms | 2.22 | 264 MiB | 11.9 |"  # 231/104, 264/22.1
    runs = [{"batching": b, "seed": seed, "test/acc": acc}
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


def test_unknown_source_is_named():
    with pytest.raises(KeyError, match="results/nope.json"):
        tables.regenerate("<!-- generated: results/nope.json -->\n| a |\n<!-- end generated -->\n")
