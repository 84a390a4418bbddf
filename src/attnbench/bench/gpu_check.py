#!/usr/bin/env python
"""A GPU check in under 15 minutes on one GPU: the main job in bf16, the attention benchmark up to
n = 4096 and a short compare, each part under its own timeout, so that one failure does not lose the others.

    attnbench bench gpu-check --dry-run            # the plan: each part's command, timeout and expected time
    attnbench bench gpu-check                      # run it (on the GPU machine); results in $OUT or --out
    attnbench bench gpu-check --parts bench         # one part (env always runs first)

Parts, in order (expected / timeout on an H200; expected figures are estimates, not yet measured). The
timeouts add up to at most ``--budget-s`` (540 s): the check fits one call of the device tool (600 s at most per
command) with a minute to spare.

- ``env``: nvidia-smi, the torch/CUDA versions, and the Python packages the run needs. A machine without network
  (the project's lent H200) lacks hydra-core, omegaconf, antlr4, datasets and wandb; with ``--wheels DIR`` (wheels
  prepared on a machine with a registry, see docs/results.md: GPU) they are installed into ``<work>/site`` with
  ``pip --no-index`` and put on ``PYTHONPATH``, beside the machine's own CUDA torch.
- ``main_bf16``: the main job (``attnbench train``: SST-2, model=small, 3 epochs) with ``trainer=gpu``
  (``trainer.precision=bf16-mixed``), CSV logger; its ``metrics.json``.
- ``bench``: ``attnbench bench attention --device cuda --dtype bfloat16`` at n = 64 ... 4096 (d = 64) and
  d = 16 ... 256 (n = 1024), B = 4, H = 4, every score function, fast and naive paths, fwd and fwd+bwd.
- ``compare``: ``experiment=compare`` with one seed and ``trainer.max_steps`` (default 200) on SST-2 and TREC
  (14 jobs), then ``attnbench report`` on it.

Writes into ``--out`` (default: ``$OUT`` when set, else ``outputs/gpu_check/<time>``) at most 8 files, one folder
deep (the device tool brings back 8): ``gpu_check.json`` (each part's command, exit status, wall time, and the
headline figures), ``gpu_check.log`` (every part's output), ``main_bf16_metrics.json``, ``bench_results.csv``,
``bench_time_vs_n.png``, ``compare_report.md``, ``compare_report.csv``. Runs and caches stay in ``--work``.
Exit status 0 when every part succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from attnbench.paths import write_text_atomically

#: the folder that holds the ``attnbench`` package (``src/`` of a checkout, or site-packages): on the parts'
#: ``PYTHONPATH``, so that a GPU machine without attnbench installed runs this copy
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
#: the wheels' default folder, in the current directory (a checkout's ``.whl/``, passed to the machine by ``carry``)
WHEELS = Path(".whl")
# the whole check is ONE command of the device tool (at most 600 s): 540 s leave a minute for Python's start and
# the copy of the results
COMMAND_LIMIT_S = 600
BUDGET_S = 540
NEEDED_MODULES = ("torch", "pytorch_lightning", "hydra", "omegaconf", "datasets", "tokenizers", "torchmetrics",
                  "rich", "matplotlib", "pandas", "scipy", "wandb")
#: the distributions attnbench needs that the GPU machines' image lacks, dependencies included (Python 3.12, Linux
#: x86-64); ``--fetch-wheels`` downloads each at the version installed here, so the GPU runs what the tests ran
GPU_WHEELS = ("annotated-types", "antlr4-python3-runtime", "cwevals", "datasets", "dill", "distro",
              "googleapis-common-protos", "hydra-core", "multiprocess", "omegaconf", "opentelemetry-api",
              "opentelemetry-exporter-http-transport", "opentelemetry-exporter-otlp-common",
              "opentelemetry-exporter-otlp-proto-common", "opentelemetry-exporter-otlp-proto-http",
              "opentelemetry-proto", "opentelemetry-sdk", "opentelemetry-semantic-conventions", "platformdirs",
              "pydantic", "pydantic-core", "sniffio", "typing-inspection", "wandb")
#: the GPU machines' Python and platform, for which the wheels are fetched
WHEEL_TARGET = ["--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                "--platform", "manylinux_2_5_x86_64", "--platform", "manylinux1_x86_64"]


@dataclasses.dataclass
class Part:
    """One part of the check: its command, its timeout and expected wall time (seconds)."""

    name: str
    command: list[str]
    timeout_s: int
    expected_s: int
    what: str


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, default=None,
                        help="where the result files go (default: $OUT, else outputs/gpu_check/<time>)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/attnbench_gpu_check"),
                        help="runs, caches and installed wheels")
    parser.add_argument("--parts", default="main_bf16,bench,compare",
                        help="comma-separated subset of main_bf16, bench, compare (env always runs)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs the parts")
    parser.add_argument("--wheels", type=Path, default=None,
                        help="a folder of wheels for the missing packages (pip --no-index); default: .whl if present")
    parser.add_argument("--compare-steps", type=int, default=200, help="trainer.max_steps of each compare job")
    parser.add_argument("--max-n", type=int, default=4096, help="the benchmark's longest sequence")
    parser.add_argument("--budget-s", type=int, default=BUDGET_S,
                        help="wall-time budget of the whole check: a part's timeout is cut to what is left of it")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (commands, timeouts) and exit")
    parser.add_argument("--fetch-wheels", action="store_true",
                        help="on a machine with a package index: download the wheels the GPU machine lacks "
                             "(GPU_WHEELS, at the versions installed here, for CPython 3.12 on Linux x86-64) into "
                             "--wheels (default .whl), then exit")
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(args.parts) - {"main_bf16", "bench", "compare"})
    if unknown:
        parser.error(f"--parts: unknown part(s) {', '.join(unknown)}; choose from main_bf16, bench, compare")
    if args.compare_steps < 1:
        parser.error(f"--compare-steps must be >= 1, got {args.compare_steps}")
    if args.budget_s < 60:
        parser.error(f"--budget-s must be >= 60, got {args.budget_s}")
    if args.budget_s > COMMAND_LIMIT_S - 30:
        parser.error(f"--budget-s must be <= {COMMAND_LIMIT_S - 30}, got {args.budget_s}: the device tool stops a "
                     f"command after {COMMAND_LIMIT_S} s, and the check must end (and write gpu_check.json) before")
    if args.max_n < 64:
        parser.error(f"--max-n must be >= 64, got {args.max_n}")
    if args.out is None:
        args.out = Path(os.environ["OUT"]) if os.environ.get("OUT") else \
            Path("outputs/gpu_check") / dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    if args.wheels is None and (args.fetch_wheels or WHEELS.is_dir()):
        args.wheels = WHEELS
    return args


def plan(args: argparse.Namespace) -> list[Part]:
    """The parts to run, in order (``env`` first)."""
    py, work = args.python, args.work
    check = ("import importlib.util, torch; "
             f"missing = [m for m in {NEEDED_MODULES!r} if importlib.util.find_spec(m) is None]; "
             "print('missing packages:', missing or 'none'); "
             "print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available()); "
             "print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO GPU')")
    env_cmd = "nvidia-smi || true; "
    if args.wheels is not None:
        env_cmd += (f"{py} -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
                    f"--target {work}/site {args.wheels}/*.whl; ")
    env_cmd += f"{py} -c \"{check}\""
    common = ["logger=csv", "trainer.enable_progress_bar=false"]
    lengths = ",".join(str(n) for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384) if n <= args.max_n)
    parts = [Part("env", ["bash", "-c", env_cmd], 45, 20, "GPU, torch/CUDA, missing packages (installs --wheels)")]
    if "main_bf16" in args.parts:
        parts.append(Part("main_bf16", [py, "-m", "attnbench", "train", "trainer=gpu", "trainer.precision=bf16-mixed", *common,
                                        f"hydra.run.dir={work}/main_bf16"], 150, 100,
                          "the main job (SST-2, model=small, 3 epochs) in bf16"))
    if "bench" in args.parts:
        parts.append(Part("bench", [py, "-m", "attnbench", "bench", "attention", "--device", "cuda", "--dtype", "bfloat16",
                                    "--lengths", lengths, "--min-run-time", "0.05", "--no-wandb",
                                    "--out", f"{work}/bench"], 120, 80,
                          f"one attention call per score function, n = 64 ... {args.max_n}, bf16"))
    if "compare" in args.parts:
        parts.append(Part("compare", [py, "-m", "attnbench", "train", "-m", "experiment=compare", "seed=0", "data=sst2,trec",
                                      f"trainer.max_steps={args.compare_steps}", "trainer.max_epochs=-1", *common,
                                      "~callbacks.attention_maps", f"hydra.sweep.dir={work}/compare"], 195, 150,
                          f"every score function x {{SST-2, TREC}}, 1 seed, {args.compare_steps} steps each"))
        parts.append(Part("compare_report", [py, "-m", "attnbench", "report", f"{work}/compare", "--out",
                                             f"{work}/compare_report", "--no-attention-maps"], 30, 15,
                          "the compare report (table, Δ to scaled_dot)"))
    return parts


def wheels_line(args: argparse.Namespace) -> str:
    """Whether the wheels for the packages the GPU machine lacks are there (a clean clone has no ``.whl/``:
    pass it to the device tool with ``carry``)."""
    if args.wheels is None:
        return (f"wheels: none ({WHEELS.resolve()} is absent; a clean clone has none): a GPU machine without "
                "hydra-core, omegaconf, antlr4, datasets and wandb fails at env; pass .whl/ (carry) or --wheels DIR")
    found = sorted(p.name for p in Path(args.wheels).glob("*.whl")) if Path(args.wheels).is_dir() else []
    if not found:
        return f"wheels: {args.wheels} holds no .whl file: the env part installs nothing"
    return f"wheels: {len(found)} in {args.wheels} (installed by the env part with pip --no-index)"


def fetch_wheels(dest: Path, packages: tuple[str, ...] = GPU_WHEELS, python: str = sys.executable) -> list[Path]:
    """Download one wheel per package of ``packages`` into ``dest``, at the version installed in this Python, for
    the GPU machines' CPython 3.12 on Linux x86-64 (``pip download --no-deps --only-binary=:all:``). A package
    the index has no wheel of (antlr4-python3-runtime 4.9.3, which hydra-core 1.3 pins, ships only an sdist) is
    built into one here (``pip wheel --no-deps``), which must come out pure Python (``-none-any``). Returns the
    wheels, one per package.

    Raises:
        SystemExit: a package not installed here (install attnbench first), or one that neither downloads nor
            builds into a pure-Python wheel; one message naming it.
    """
    import importlib.metadata

    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for name in packages:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"--fetch-wheels: {name} is not installed here; install attnbench first "
                             "(pip install -e .), so that its version is the one the tests ran with") from None
        before = set(dest.glob("*.whl"))
        pin = f"{name}=={version}"
        got = subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              *WHEEL_TARGET, "-d", str(dest), pin], capture_output=True, text=True, check=False)
        how = "downloaded"
        if got.returncode != 0:
            how = "built here (the index has no wheel)"
            got = subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), pin],
                                 capture_output=True, text=True, check=False)
        new = sorted(set(dest.glob("*.whl")) - before) or sorted(
            p for p in dest.glob("*.whl") if p.name.lower().replace("_", "-").startswith(f"{name}-{version}-"))
        if got.returncode != 0 or not new:
            said = (got.stderr or got.stdout).strip().splitlines()
            raise SystemExit(f"--fetch-wheels: no wheel of {pin} for CPython 3.12 on Linux x86-64: "
                             f"{said[-1] if said else 'pip said nothing'}")
        if how.startswith("built") and not new[0].name.endswith("-none-any.whl"):
            raise SystemExit(f"--fetch-wheels: {new[0].name} was built for this machine, not the GPU's: {pin} "
                             "has no wheel for CPython 3.12 on Linux x86-64")
        print(f"  {new[0].name}: {how}", flush=True)
        wheels.append(new[0])
    return wheels


def environment(args: argparse.Namespace) -> dict[str, str]:
    """The parts' environment: the wheels' folder and this package's on PYTHONPATH, offline data and W&B, caches in work."""
    env = dict(os.environ)
    paths = [str(args.work / "site")] if args.wheels is not None else []
    paths += [str(PACKAGE_ROOT), env.get("PYTHONPATH", "")]
    env.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), WANDB_MODE="offline", HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", ATTNBENCH_CACHE_DIR=str(args.work / "cache"), PYTHONUNBUFFERED="1",
               MPLBACKEND="Agg")
    return env


def _human(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def run_part(part: Part, env: dict[str, str], log, left_s: float) -> dict:
    """Run ``part`` under its timeout, cut to ``left_s`` (what is left of the whole budget); its output goes to
    ``log``. Returns its record (command, status, exit code, wall time)."""
    timeout = max(1, int(min(part.timeout_s, left_s)))
    log.write(f"\n===== {part.name}: {' '.join(part.command)}\n")
    log.flush()
    start = time.perf_counter()
    try:
        proc = subprocess.run(part.command, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
        rc, status = proc.returncode, "ok" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        rc, status = None, "timeout"
    except OSError as err:
        rc, status = None, f"could not start: {err}"
    wall = time.perf_counter() - start
    log.write(f"===== {part.name}: {status} after {wall:.1f} s (timeout {timeout} s)\n")
    log.flush()
    return {"command": part.command, "status": status, "returncode": rc, "wall_s": round(wall, 1),
            "timeout_s": timeout, "expected_s": part.expected_s}


def collect(args: argparse.Namespace, record: dict) -> None:
    """Copy the result files into ``--out`` (flat: the device tool brings back 8 files, one folder deep) and
    add the headline figures to ``record``."""
    work, out = args.work, args.out
    copies = {work / "main_bf16" / "metrics.json": "main_bf16_metrics.json",
              work / "bench" / "results.csv": "bench_results.csv",
              work / "bench" / "time_vs_n.png": "bench_time_vs_n.png",
              work / "compare_report" / "report.md": "compare_report.md",
              work / "compare_report" / "report.csv": "compare_report.csv"}
    for source, name in copies.items():
        if source.is_file():
            shutil.copyfile(source, out / name)
    metrics = work / "main_bf16" / "metrics.json"
    if metrics.is_file():
        data = json.loads(metrics.read_text())
        record["main_bf16"] = {k: data.get(k) for k in ("test/acc", "val/acc_best", "train/tokens_per_sec",
                                                         "test/tokens_per_sec", "perf/peak_mem_bytes",
                                                         "time/total_sec")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fetch_wheels:
        print(f"fetching {len(GPU_WHEELS)} wheels into {args.wheels} for CPython 3.12 on Linux x86-64", flush=True)
        wheels = fetch_wheels(args.wheels)
        mib = sum(p.stat().st_size for p in wheels) / 2**20
        print(f"{len(wheels)} wheels, {mib:.1f} MiB in {args.wheels}: pass it to the GPU machine with the device "
              f"tool's carry ({args.wheels.name}), and the env part installs them", flush=True)
        return 0
    parts = plan(args)
    expected = sum(p.expected_s for p in parts)
    worst = min(sum(p.timeout_s for p in parts), args.budget_s)
    print(f"GPU check: {len(parts)} parts, expected about {_human(expected)} (estimated, not yet measured on a GPU; "
          f"at most {_human(worst)}: the timeouts, within --budget-s); results in {args.out}", flush=True)
    for p in parts:
        print(f"  {p.name:<15} expected {_human(p.expected_s):>8}, timeout {_human(p.timeout_s):>8}: {p.what}\n"
              f"  {'':<15} $ {' '.join(p.command)}", flush=True)
    print(wheels_line(args), flush=True)
    if args.dry_run:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    env = environment(args)
    record: dict = {"started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "expected_s": expected, "parts": {}}
    start = time.perf_counter()
    with open(args.out / "gpu_check.log", "w") as log:
        for part in parts:
            left = args.budget_s - (time.perf_counter() - start)
            if left < 5:
                record["parts"][part.name] = {"command": part.command, "status": "skipped: budget spent",
                                              "returncode": None, "wall_s": 0.0, "timeout_s": 0,
                                              "expected_s": part.expected_s}
                print(f"{part.name}: skipped, --budget-s spent", flush=True)
                continue
            record["parts"][part.name] = result = run_part(part, env, log, left)
            print(f"{part.name}: {result['status']} in {result['wall_s']} s", flush=True)
            collect(args, record)
            write_text_atomically(args.out / "gpu_check.json", json.dumps(record, indent=2))  # after every part
    record["total_s"] = round(sum(r["wall_s"] for r in record["parts"].values()), 1)
    write_text_atomically(args.out / "gpu_check.json", json.dumps(record, indent=2))
    failed = [name for name, r in record["parts"].items() if r["status"] != "ok"]
    print(f"GPU check done in {_human(record['total_s'])}; " + (f"failed: {', '.join(failed)}" if failed else
                                                                 "every part succeeded"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
