"""attnbench bench attention: a tiny real run, read back from its files."""

from __future__ import annotations

import csv
import json
import re

import pytest


# One torch thread: on a shared 2-core CI machine, two threads spend most of a
# tiny op waiting for a descheduled sibling, which makes this test slow, not wrong.
TINY = ["--scores", "dot,additive", "--lengths", "16,32", "--head-dims", "8", "--no-wandb",
        "--min-run-time", "0.01", "--threads", "1"]


@pytest.fixture(scope="module")
def bench():
    """The benchmark module (``attnbench bench attention``)."""
    from attnbench.bench import attention

    return attention


def _read_rows(out):
    with open(out / "results.csv", newline="") as fh:
        return {(r["score"], r["path"], r["mode"], int(r["n"]), int(r["d"])): r for r in csv.DictReader(fh)}


def test_tiny_run_writes_real_measurements(bench, tmp_path):
    assert bench.main([*TINY, "--out", str(tmp_path)]) == 0

    rows = _read_rows(tmp_path)
    combos = [("sdpa_scaled_dot", "sdpa"), ("dot", "fast"), ("dot", "naive"), ("additive", "fast"),
              ("additive", "naive")]
    expected = {(s, p, m, n, 8) for s, p in combos for m in ("fwd", "fwd_bwd") for n in (16, 32)}
    assert set(rows) == expected
    for key, row in rows.items():
        assert row["status"] == "ok", (key, row["note"])
        assert float(row["time_s"]) > 0, key
        assert int(row["peak_mem_bytes"]) > 0, key
        assert int(row["flops"]) > 0, key

    def mem(mode, n):
        return int(rows[("additive", "naive", mode, n, 8)]["peak_mem_bytes"])

    # The naive additive path materialises B×H×n×n×d_a: 4× the elements at twice n.
    for mode in ("fwd", "fwd_bwd"):
        assert mem(mode, 32) > 2 * mem(mode, 16), mode
    # Forward FLOPs of dot attention are 2 matmuls of 2·B·H·n²·d each: 4× at twice n.
    for path in ("fast", "naive"):
        small = int(rows[("dot", path, "fwd", 16, 8)]["flops"])
        large = int(rows[("dot", path, "fwd", 32, 8)]["flops"])
        assert large / small == pytest.approx(4.0, rel=0.1), path
        assert small == 2 * 2 * 4 * 4 * 16 * 16 * 8, path  # B = H = 4 by default

    for png in ("time_vs_n.png", "memory_vs_n.png", "time_vs_d.png"):
        data = (tmp_path / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, png
    meta = json.loads((tmp_path / "results.json").read_text())["meta"]
    assert any("matmul-type ops only" in note for note in meta["notes"])
    assert meta["hardware"]["torch"]
    # the code it ran: this checkout's HEAD (or the fallback outside a git checkout)
    assert meta["hardware"]["commit"] == bench.code_commit()
    assert re.fullmatch(r"[0-9a-f]{12}(\+dirty)?|unknown \(not a git checkout\)", meta["hardware"]["commit"])
    assert not (tmp_path / "wandb").exists()


def test_sizes_over_the_memory_budget_are_skipped_with_their_estimate(bench, tmp_path):
    # Naive additive at n=32 needs about 1.2 MB by the script's estimate, n=16 about 0.3 MB.
    args = ["--scores", "additive", "--paths", "naive", "--modes", "fwd", "--lengths", "16,32", "--head-dims", "8",
            "--max-mem-gb", "0.0005", "--no-wandb", "--min-run-time", "0.01", "--threads", "1"]
    assert bench.main([*args, "--out", str(tmp_path)]) == 0
    rows = _read_rows(tmp_path)
    assert rows[("additive", "naive", "fwd", 16, 8)]["status"] == "ok"
    skipped = rows[("additive", "naive", "fwd", 32, 8)]
    assert skipped["status"] == "skipped_mem"
    assert int(skipped["est_mem_bytes"]) > 500_000
    assert skipped["time_s"] == "" and "budget" in skipped["note"]


def test_default_sizes_sweep_n_at_d64_and_d_at_n1024(bench):
    sizes = bench.size_grid([64, 1024, 4096], [16, 64, 256], at_n=1024, at_d=64, full=False)
    assert sizes == [(64, 64), (1024, 64), (4096, 64), (1024, 16), (1024, 256)]
    assert len(bench.size_grid([64, 1024], [16, 64], at_n=1024, at_d=64, full=True)) == 4


def test_ratio_tables_divide_by_the_baseline_of_the_same_n_d_and_mode(bench):
    """Synthetic rows at three sizes (two d at one n, two n at one d) and two modes, each size and mode with its
    own baseline time/memory: every ratio cell is the score's value over the baseline of its own (n, d, mode).
    Hand values: fwd_bwd time 2 ms/1 ms, 8/4, 6/3 -> 2.00; memory 3,000/1,000 ... -> 3.00; fwd 50/100 -> 0.50."""
    import types

    sizes = [(64, 32), (64, 64), (128, 32)]
    base_ms = {(64, 32): 1.0, (64, 64): 4.0, (128, 32): 3.0}
    rows = []
    for (n, d), ms in base_ms.items():
        for mode, scale_t, scale_m in (("fwd_bwd", 1.0, 1.0), ("fwd", 100.0, 7.0)):
            base = {"n": n, "d": d, "mode": mode, "status": "ok"}
            rows.append({**base, "score": bench.BASELINE_SCORE, "path": bench.BASELINE_PATH,
                         "time_s": ms * scale_t * 1e-3, "peak_mem_bytes": ms * scale_m * 1000})
            t_ratio, m_ratio = (2.0, 3.0) if mode == "fwd_bwd" else (0.5, 0.25)
            rows.append({**base, "score": "additive", "path": "fast", "time_s": ms * scale_t * t_ratio * 1e-3,
                         "peak_mem_bytes": ms * scale_m * m_ratio * 1000})
    cfg = types.SimpleNamespace(scores=["additive"], paths=["fast"], sizes=sizes)

    def cells(table):
        return {col.header: list(col._cells) for col in table.columns}

    for mode, want_t, want_m in (("fwd_bwd", "2.00", "3.00"), ("fwd", "0.50", "0.25")):
        time_table, mem_table = bench.ratio_tables(rows, cfg, mode=mode)
        for table, want in ((time_table, want_t), (mem_table, want_m)):
            by_col = cells(table)
            assert by_col["score / path"] == ["sdpa (absolute)", "additive / fast"]
            for n, d in sizes:
                assert by_col[f"n={n}\nd={d}"][1] == want, (mode, n, d, by_col)
        # the absolute baseline row shows each size's own baseline time
        assert [cells(time_table)[f"n={n}\nd={d}"][0] for n, d in sizes] == [
            f"{base_ms[s] * (1.0 if mode == 'fwd_bwd' else 100.0):.3g} ms" for s in sizes]


def test_every_row_has_its_bound_at_rates_of_the_same_run(bench, tmp_path):
    """Every discovered score function gets a bound from its own work at the rates measured in the run, at each
    thread count; the fraction is bound / fastest timing, from at least --repeats timings."""
    from attnbench.attention import available

    assert bench.main(["--lengths", "16,32,48", "--head-dims", "8", "--no-wandb", "--min-run-time", "0.001",
                       "--threads", "1,2", "--paths", "fast", "--modes", "fwd", "--repeats", "3", "--no-memory",
                       "--batch", "1", "--heads", "2", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    rates = data["meta"]["rates"]
    assert set(rates) == {"1", "2"}
    assert {"tanh", "sqrt"} <= set(rates["1"]) and rates["1"]["gemm_gflops"] > 0
    rows = data["rows"]
    assert {r["score"] for r in rows} == {"sdpa_scaled_dot", *available()}
    for row in rows:
        assert row["status"] == "ok" and len(row["times_s"]) >= 3 and row["peak_mem_bytes"] is None, row
        assert row["bound_s"] == pytest.approx(bench.bound_seconds(row["work"], rates[str(row["threads"])]))
        assert row["bound_fraction"] == pytest.approx(row["bound_s"] / min(row["times_s"]))
    additive = next(r for r in rows if r["score"] == "additive" and r["n"] == 32)
    assert additive["work"]["tanh"] == 1 * 2 * 32 * 32 * 8  # B·H·n²·d_a, d_a = d
    fits = {(f["score"], f["threads"], f["axis"]) for f in data["exponents"]}
    assert ("additive", 2, "n") in fits and all(f["timings"] >= 9 for f in data["exponents"])


def test_bounds_count_each_score_functions_work():
    from attnbench.attention import build_score_function

    b, h, n, d = 2, 3, 10, 4
    assert build_score_function("scaled_dot", n_heads=h, head_dim=d).work(b, n, n, d) == {
        "flops": 2 * b * h * n * n * (d + d)}
    additive = build_score_function("additive", n_heads=h, head_dim=d, hidden_dim=5).work(b, n, n, d)
    assert additive == {"flops": 2 * b * h * 2 * n * d * 5 + b * h * n * n * (3 * 5 + 2 * d),
                        "tanh": b * h * n * n * 5}
    assert build_score_function("l2", n_heads=h, head_dim=d).work(b, n, n, d)["sqrt"] == b * h * n * n
    from attnbench.bench.attention import bound_seconds

    rates = {"gemm_gflops": 100.0, "tanh": {"in_cache": 2.0, "streaming": 1.0}}
    work = {"flops": 4 * 10**9, "tanh": 10**9}
    assert bound_seconds(work, rates) == pytest.approx(0.04 + 0.5)
    assert bound_seconds(work, rates, backward=True) == pytest.approx(0.12 + 1.0)


def test_fitted_exponents_recover_a_known_power_law(bench):
    rows = [dict(score="s", path="fast", mode="fwd", threads=1, n=n, d=64, status="ok",
                 times_s=[1e-9 * n**2 * (1 + 0.01 * k) for k in range(5)]) for n in (64, 128, 256, 512)]
    rows += [dict(score="s", path="fast", mode="fwd", threads=1, n=256, d=d, status="ok",
                  times_s=[1e-9 * 256**2 * d / 64 * (1 + 0.01 * k) for k in range(5)]) for d in (16, 32, 128)]
    fits = {f["axis"]: f for f in bench.fit_exponents(rows) if not f["top"]}
    assert fits["n"]["exponent"] == pytest.approx(2.0, abs=1e-9) and fits["n"]["fixed"] == 64
    assert fits["n"]["ci_low"] < 2.0 < fits["n"]["ci_high"] and fits["n"]["timings"] == 20
    assert fits["d"]["exponent"] == pytest.approx(1.0, abs=1e-9) and fits["d"]["sizes"] == [16, 32, 64, 128]
