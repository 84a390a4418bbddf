"""scripts/gpu_check.py's plan, checked on a CPU (it has not run on a GPU yet: no GPU was lent)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from attnbench.config import check_run_config

from .conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check  # its dataclass looks its module up
_spec.loader.exec_module(gpu_check)


def test_dry_run_prints_the_expected_duration_and_every_command(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/gpu_check.py", "--dry-run", "--out", str(tmp_path / "o")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("GPU check: 5 parts, expected about 6.1 min") and "at most 9.0 min" in first
    assert "trainer=gpu trainer.precision=bf16-mixed" in proc.stdout
    assert "--device cuda --dtype bfloat16 --lengths 64,128,256,512,1024,2048,4096 " in proc.stdout
    assert "experiment=compare seed=0 data=sst2,trec trainer.max_steps=200 trainer.max_epochs=-1" in proc.stdout
    assert not (tmp_path / "o").exists()  # a dry run writes nothing
    # a clean clone has no .whl/: the dry run says so (the lead passes the wheels with the device tool's carry)
    has_wheels = any((REPO_ROOT / ".whl").glob("*.whl")) if (REPO_ROOT / ".whl").is_dir() else False
    line = next(line for line in proc.stdout.splitlines() if line.startswith("wheels: "))
    assert line.startswith("wheels: none (") == (not (REPO_ROOT / ".whl").is_dir())
    assert ("installed by the env part" in line) == has_wheels


def test_the_dry_run_names_the_wheels_it_would_install(tmp_path):
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    full.mkdir()
    for name in ("hydra_core-1.3.2-py3-none-any.whl", "omegaconf-2.3.0-py3-none-any.whl"):
        (full / name).write_bytes(b"")
    assert gpu_check.wheels_line(gpu_check.parse_args(["--wheels", str(full)])) == \
        f"wheels: 2 in {full} (installed by the env part with pip --no-index)"
    assert "holds no .whl file" in gpu_check.wheels_line(gpu_check.parse_args(["--wheels", str(empty)]))


def test_the_plan_fits_one_call_of_the_device_tool():
    """The device tool runs at most 600 s per command and a task has 15 minutes of device time, the machine's
    start included (/work/.library/device/README.md): the whole check is one call of at most 540 s (before:
    `--budget-s 780`, "at most 12.9 min", which the tool would have cut off at 10 min). Every part is kept: the
    main job in bf16, the benchmark to n = 4096 and the short compare with its report."""
    args = gpu_check.parse_args(["--out", "x"])
    parts = gpu_check.plan(args)
    assert [p.name for p in parts] == ["env", "main_bf16", "bench", "compare", "compare_report"]
    assert args.budget_s == gpu_check.BUDGET_S == 540
    assert sum(p.timeout_s for p in parts) <= gpu_check.BUDGET_S <= gpu_check.COMMAND_LIMIT_S - 60
    assert all(p.expected_s < p.timeout_s for p in parts)
    bench = next(p for p in parts if p.name == "bench").command
    assert bench[bench.index("--lengths") + 1].endswith(",2048,4096")


@pytest.mark.parametrize("argv, message", [
    (["--parts", "main,bench"], "--parts: unknown part(s) main; choose from main_bf16, bench, compare"),
    (["--compare-steps", "0"], "--compare-steps must be >= 1, got 0"),
    (["--budget-s", "10"], "--budget-s must be >= 60, got 10"),
    (["--budget-s", "780"], "--budget-s must be <= 570, got 780: the device tool stops a command after 600 s"),
])
def test_bad_arguments_are_one_message(argv, message, capsys):
    with pytest.raises(SystemExit):
        gpu_check.parse_args(argv)
    assert message in capsys.readouterr().err


def test_out_defaults_to_the_device_tools_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check.parse_args([]).out == tmp_path
    assert [p.name for p in gpu_check.plan(gpu_check.parse_args(["--parts", "bench"]))] == ["env", "bench"]


def test_the_training_parts_compose_and_pass_the_config_checks():
    """The Hydra overrides of main_bf16 and compare name existing keys and pass the range checks."""
    parts = {p.name: p for p in gpu_check.plan(gpu_check.parse_args(["--out", "x"]))}
    for name in ("main_bf16", "compare"):
        # a sweep's list (data=sst2,trec) is the multirun's: one job of it is composed (data=trec below)
        overrides = [a for a in parts[name].command[2:]
                     if "=" in a and "," not in a and not a.startswith(("hydra.", "~"))]
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=[*overrides, "data=trec"])
        check_run_config(cfg)
        assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.max_steps == 200 and cfg.seed == 0
