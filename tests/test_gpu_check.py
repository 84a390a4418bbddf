"""attnbench bench gpu-check's plan, checked on a CPU (it has not run on a GPU yet: no GPU was lent)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from attnbench.bench import gpu_check
from attnbench.config import check_run_config, config_dir

from .conftest import REPO_ROOT


def test_dry_run_prints_the_expected_duration_and_every_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnbench", "bench", "gpu-check", "--dry-run", "--out", str(tmp_path / "o")],
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
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = compose("train", overrides=[*overrides, "data=trec"])
        check_run_config(cfg)
        assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.max_steps == 200 and cfg.seed == 0


def test_fetch_wheels_downloads_each_at_the_installed_version_and_builds_what_has_no_wheel(tmp_path, monkeypatch):
    """--fetch-wheels: one `pip download --no-deps --only-binary=:all:` per package, pinned to the version installed
    here, for CPython 3.12 on Linux x86-64; antlr4-python3-runtime 4.9.3 (hydra-core 1.3's pin) has only an sdist
    on the index, so the documented `pip download --only-binary` recipe failed on it: it is built here with `pip
    wheel`, and refused unless the wheel is pure Python. pip itself is a stand-in that writes the files."""
    import importlib.metadata

    calls = []

    def fake_pip(cmd, **kwargs):
        calls.append(cmd)
        pin = cmd[-1]
        name, version = pin.split("==")
        dist = name.replace("-", "_")
        if cmd[3] == "download" and name == "antlr4-python3-runtime":
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")
        tag = "cp312-cp312-manylinux_2_17_x86_64" if name == "pydantic-core" else "py3-none-any"
        (Path(cmd[cmd.index("-d" if cmd[3] == "download" else "-w") + 1]) / f"{dist}-{version}-{tag}.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(gpu_check.subprocess, "run", fake_pip)
    wheels = gpu_check.fetch_wheels(tmp_path / "whl", ("hydra-core", "antlr4-python3-runtime", "pydantic-core"))
    assert [w.name.split("-")[0] for w in wheels] == ["hydra_core", "antlr4_python3_runtime", "pydantic_core"]
    downloads = [c for c in calls if c[3] == "download"]
    assert [c[-1] for c in downloads] == [f"{n}=={importlib.metadata.version(n)}"
                                          for n in ("hydra-core", "antlr4-python3-runtime", "pydantic-core")]
    assert all("--no-deps" in c and "--only-binary=:all:" in c and c[c.index("--python-version") + 1] == "3.12"
               for c in downloads)
    (built,) = [c for c in calls if c[3] == "wheel"]
    assert built[-1].startswith("antlr4-python3-runtime==") and "--no-deps" in built

    def platform_only(cmd, **kwargs):  # the index has no wheel, and the one built here is not pure Python
        if cmd[3] == "wheel":
            (Path(cmd[cmd.index("-w") + 1]) / "antlr4_python3_runtime-4.9.3-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(gpu_check.subprocess, "run", platform_only)
    with pytest.raises(SystemExit, match="built for this machine, not the GPU's"):
        gpu_check.fetch_wheels(tmp_path / "other", ("antlr4-python3-runtime",))
    with pytest.raises(SystemExit, match="no-such-package is not installed here"):
        gpu_check.fetch_wheels(tmp_path / "other", ("no-such-package",))


def test_the_wheel_list_covers_every_package_the_gpu_image_lacks():
    """GPU_WHEELS holds the distributions of the modules the env part finds missing on the GPU image (hydra,
    omegaconf and its antlr4, datasets, wandb) and each is installed here, so --fetch-wheels can pin it."""
    import importlib.metadata

    for name in ("hydra-core", "omegaconf", "antlr4-python3-runtime", "datasets", "wandb"):
        assert name in gpu_check.GPU_WHEELS
    for name in gpu_check.GPU_WHEELS:
        assert importlib.metadata.version(name)
