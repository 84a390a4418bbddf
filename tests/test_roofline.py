"""The roofline benchmark (attnbench.bench.roofline): its bounds' arithmetic and one small run of its table."""

from __future__ import annotations

import pytest

from attnbench.bench import roofline


def test_bounds_count_the_work_of_each_score_function():
    # SDPA: 4·B·H·n²·d FLOPs = 4·4·4·512²·64 = 1.07e9 at 100 GFLOP/s
    assert roofline.gemm_bound_seconds(4, 4, 512, 64, 100.0) == pytest.approx(4 * 16 * 512**2 * 64 / 100e9)
    # additive: B·H·n²·d_a tanh at 2 G/s, plus 2·B·H·n²·(d_a + d) FLOPs at 100 GFLOP/s
    tanh = 16 * 512**2 * 32 / 2e9
    assert roofline.tanh_bound_seconds(4, 4, 512, 32, 2.0) == pytest.approx(tanh)
    assert roofline.additive_bound_seconds(4, 4, 512, 32, 64, 2.0, 100.0) == pytest.approx(
        tanh + 2 * 16 * 512**2 * 96 / 100e9)


def test_rates_are_measured_and_positive():
    assert roofline.gemm_peak_gflops(size=128, repeats=1) > 0
    assert roofline.tanh_rate(numel=1024, repeats=1, calls=2) > 0


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_main_prints_every_path_against_its_bound(capsys, clock):
    assert roofline.main(["--threads", "1", "--batch", "1", "--heads", "2", "--length", "24", "--head-dim", "8",
                          "--repeats", "1", "--clock", clock]) == 0
    out = capsys.readouterr().out
    for row in ("| scaled_dot | SDPA | forward |", "| additive | fused | forward |",
                "| additive | fused | forward+backward |", "| additive | blocked | forward |"):
        assert row in out
    assert "additive (fused) / SDPA, forward: measured" in out and f"{clock} clock\n" in out


def test_bad_arguments_get_one_message(capsys):
    with pytest.raises(SystemExit):
        roofline.main(["--length", "0"])
    assert "--length must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="clock must be one of wall, cpu, got 'gpu'"):
        roofline.set_clock("gpu")
