"""Hand-typed (not generated) measured tables in docs/: every derived column is recomputed from the table's own
measured columns (their source runs are not in the repository, so the table is its own source):

- a ``ratio`` column next to one ``tokens/s`` column: the row's tokens/s over the reference row's (the last row
  above it, or itself, whose ratio reads 1.00); ``ratio, best / median``: best and median each over the reference's;
- a ``ratio`` column next to two ``tokens/s`` columns: the second over the first;
- ``tokens/s (runs)``: the figure shown is the best (largest) of its runs; a ``median`` column is their median;
- ``MFU useful (padded)`` next to ``FLOPs/step padded / useful``: padded MFU / useful MFU = padded / useful FLOPs.
"""

from __future__ import annotations

import re
import statistics

import pytest

from .conftest import REPO_ROOT

DOCS = sorted((REPO_ROOT / "docs").glob("*.md")) + [REPO_ROOT / "README.md"]


def hand_tables() -> list[tuple[str, list[str], list[tuple[int, list[str]]]]]:
    """(file:line, header cells, [(line, cells)]) of every Markdown table outside ``<!-- generated -->`` blocks."""
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        generated = False
        i = 0
        while i < len(lines):
            if lines[i].startswith("<!-- generated"):
                generated = True
            elif lines[i].startswith("<!-- end generated"):
                generated = False
            if (not generated and lines[i].startswith("|") and i + 1 < len(lines)
                    and re.match(r"\|(-+\|)+$", lines[i + 1].replace(" ", ""))):
                header = [c.strip() for c in lines[i].strip("|").split("|")]
                rows, j = [], i + 2
                while j < len(lines) and lines[j].startswith("|"):
                    rows.append((j + 1, [c.strip() for c in lines[j].strip("|").split("|")]))
                    j += 1
                out.append((f"{path.relative_to(REPO_ROOT)}:{i + 1}", header, rows))
                i = j
                continue
            i += 1
    return out


def numbers(cell: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", cell.replace("**", ""))]


TABLES = [t for t in hand_tables() if any(h.startswith("ratio") for h in t[1])
          and any("tokens/s" in h for h in t[1])]


def test_the_hand_typed_ratio_tables_are_found():
    """docs/cost.md's four measured batching/variant tables (a parser that finds none would check nothing)."""
    assert sum(where.startswith("docs/cost.md") for where, _, _ in TABLES) >= 4


def _close(printed: float, value: float, where: str, what: str) -> None:
    decimals = 2
    assert abs(printed - value) <= 0.5 * 10 ** -decimals + 1e-9, f"{where}: {what} printed {printed}, its own " \
                                                                 f"columns give {value:.4f}"


@pytest.mark.parametrize("where,header,rows", TABLES, ids=[t[0] for t in TABLES])
def test_every_ratio_in_a_hand_typed_table_is_its_own_columns(where, header, rows):
    rate_cols = [i for i, h in enumerate(header) if "tokens/s" in h]
    ratio_col = next(i for i, h in enumerate(header) if h.startswith("ratio"))
    median_col = next((i for i, h in enumerate(header) if h == "median"), None)
    ref = None
    for line, cells in rows:
        at = f"{where.split(':')[0]}:{line}"
        runs_of = {}
        for c in rate_cols:
            shown, *runs = numbers(cells[c])
            if "(runs)" in header[c]:
                runs = runs or [shown]
                if "(" in cells[c] or len(runs) > 1:
                    runs = numbers(cells[c])[1:] if "(" in cells[c] else numbers(cells[c])
                    assert shown == max(runs), f"{at}: the best of {runs} is {max(runs)}, printed {shown}"
            runs_of[c] = (shown, runs)
        if median_col is not None:
            runs = runs_of[rate_cols[0]][1]
            assert numbers(cells[median_col])[0] == statistics.median(runs), f"{at}: median of {runs}"
        printed = numbers(cells[ratio_col])
        if len(rate_cols) == 2:
            a, b = (runs_of[c][0] for c in rate_cols)
            _close(printed[0], b / a, at, "ratio")
            continue
        best = runs_of[rate_cols[0]][0]
        median = numbers(cells[median_col])[0] if median_col is not None else None
        if printed[0] == 1.0:
            ref = (best, median)
        assert ref is not None, f"{at}: no reference row (ratio 1.00) above it"
        _close(printed[0], best / ref[0], at, "ratio")
        if "best / median" in header[ratio_col] and len(printed) > 1:
            _close(printed[1], median / ref[1], at, "median ratio")


MFU_TABLES = [t for t in hand_tables() if any(h.startswith("MFU useful (padded)") for h in t[1])
              and any(h.startswith("FLOPs/step padded / useful") for h in t[1])]


@pytest.mark.parametrize("where,header,rows", MFU_TABLES, ids=[t[0] for t in MFU_TABLES])
def test_padded_over_useful_mfu_is_padded_over_useful_flops(where, header, rows):
    """Both MFUs divide by the same peak at the same steps/s, so their quotient is the FLOPs quotient (each MFU
    printed to 0.1%: the bound is the quotient's rounding spread)."""
    mfu = next(i for i, h in enumerate(header) if h.startswith("MFU useful (padded)"))
    flops = next(i for i, h in enumerate(header) if h.startswith("FLOPs/step padded / useful"))
    for line, cells in rows:
        useful, padded = numbers(cells[mfu])[:2]
        p_flops, u_flops = numbers(cells[flops])[:2]
        lo = (padded - 0.05) / (useful + 0.05) * 0.99
        hi = (padded + 0.05) / (useful - 0.05) * 1.01
        assert lo <= (p_flops / u_flops) <= hi, f"{where}: line {line}: MFU {useful}% ({padded}%) vs FLOPs " \
                                                 f"{p_flops} / {u_flops}"
