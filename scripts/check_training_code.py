"""Check that the published runs' older commits train exactly as the current code does.

The published records (``docs/results/cpu/manifest.json``) ran over several
days on the commits of their time; the Results call them runs "of the final
code" because no file that trains changed since. This script checks that
claim by running it, not by reading diffs: for every distinct (commit, stage,
dataset) of the manifest it checks the commit out in a git worktree, trains a
short run of that stage's configuration (same Hydra overrides, with
``attention=scaled_dot``, seed 0 and ``--steps`` optimizer steps) with a fresh
data cache (so the tokenizer is trained and the data tokenized by that
commit's code), and compares it with the same run of the current checkout:

* every weight of the last checkpoint (``torch.equal``, bit for bit),
* the logged ``train/loss`` at every ``--log-every`` steps, ``val/*`` and
  ``test/acc``/``test/loss`` (exact float equality).

Both runs happen on this machine, one after another, on one torch thread, so
floating-point order cannot differ between them; a difference therefore
means that data, tokenizer, initialisation, optimiser or step changed.
``scaled_dot`` is trained for every (commit, stage, dataset); each other score
function the stage ran is trained as well where ``git diff`` shows a change to
its own files since the commit (``attention/<name>*.py``/``.cpp``/``.h``,
``conf/attention/<name>.yaml``), and every one of them where a shared file of
``attention/`` changed (:func:`touched_score_functions`): the model, module and
optimiser are run by ``scaled_dot``'s check, a score function's own code only
by its own.

Writes ``--json`` (default ``docs/results/cpu/training_code_check.json``)
whole or not at all: ``{"meta": {head, steps, torch, processor, seconds},
"checks": [{commit, stage, overrides, attention, head, changed_files, identical, ...}]}``.
With ``--only STAGE`` the record's rows of other stages are kept (each with the
``head`` it was checked against) and that stage's rows replaced.

    taskset -c 1 python scripts/check_training_code.py --work /tmp/codecheck   # 30-40 min on one core
    python scripts/check_training_code.py --steps 20 --only compare
    python scripts/check_training_code.py --only capacity   # re-check one stage, keep the others' rows

Exit status 1 when any run differs, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnbench.bench.train import cpu_model
from attnbench.paths import write_text_atomically

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MANIFEST = REPO_ROOT / "docs" / "results" / "cpu" / "manifest.json"
DEFAULT_JSON = REPO_ROOT / "docs" / "results" / "cpu" / "training_code_check.json"
#: the paths whose changes could change a training run (as attnbench reproduce's "+dirty" check, less scripts/)
TRAINING_PATHS = ("src", "conf", "train.py")
#: the job overrides that define a stage's configuration; seed, attention, output dir and resume are not kept
CONFIG_KEYS = ("experiment", "data", "data.max_length", "model.head_dim", "model")


def git(*args: str, cwd: Path = REPO_ROOT) -> str:
    """stdout of ``git *args``; raises ``SystemExit`` with git's message when it fails."""
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def training_overrides(command: str) -> list[str] | None:
    """The Hydra overrides of a manifest job's ``command`` when it trains (``<path>/train.py ...``,
    ``-m attnbench train ...`` or ``attnbench train ...``); None for any other command (the cost benchmarks)."""
    words = command.split()
    for i, word in enumerate(words):
        if Path(word).name == "train.py":
            return words[i + 1:]
        if Path(word).name == "attnbench" and words[i + 1:i + 2] == ["train"]:
            return words[i + 2:]
    return None


def stage_configs(manifest: dict) -> list[tuple[str, str, dict[str, str]]]:
    """Distinct ``(commit, stage, config overrides)`` of the manifest's training jobs, in manifest order.

    A job that resumed on another commit contributes each of its commits. Jobs that do not train
    (:func:`training_overrides`: the cost benchmarks) are left out.

    Raises:
        SystemExit: a training job ran on a dirty tree (``+dirty``), or the manifest has jobs but none of them
            is recognised as training (a check of nothing would pass vacuously).
    """
    seen, out = set(), []
    for name, job in manifest["jobs"].items():
        words = training_overrides(job.get("command", ""))
        if words is None:
            continue
        overrides = dict(w.split("=", 1) for w in words if "=" in w)
        config = {k: overrides[k] for k in CONFIG_KEYS if k in overrides}
        for commit in job.get("commits", []):
            if commit.endswith("+dirty"):
                raise SystemExit(f"{name} ran on {commit}: a dirty tree cannot be checked out again")
            key = (commit, name.split("/")[0], tuple(sorted(config.items())))
            if key not in seen:
                seen.add(key)
                out.append((commit, name.split("/")[0], config))
    if manifest["jobs"] and not out:
        raise SystemExit(f"none of the manifest's {len(manifest['jobs'])} job(s) is recognised as a training run "
                         f"(a command with train.py or 'attnbench train'), so there is nothing to check; first "
                         f"command: {next(iter(manifest['jobs'].values())).get('command', '')!r}")
    return out


def attentions_run(manifest: dict, commit: str, stage: str, config: dict[str, str]) -> set[str]:
    """The score functions (``attention=``) of the manifest's training jobs of ``stage`` with ``config`` that ran on
    ``commit`` (:func:`stage_configs`' key)."""
    names = set()
    for name, job in manifest["jobs"].items():
        words = training_overrides(job.get("command", ""))
        if words is None or name.split("/")[0] != stage or commit not in job.get("commits", []):
            continue
        overrides = dict(w.split("=", 1) for w in words if "=" in w)
        if {k: overrides[k] for k in CONFIG_KEYS if k in overrides} == config and "attention" in overrides:
            names.add(overrides["attention"])
    return names


def touched_score_functions(changed: list[str], ran: set[str], known: set[str]) -> list[str]:
    """The score functions of ``ran`` whose code ``changed`` (paths relative to the repository root) touches: a
    file of ``src/attnbench/attention/`` or ``conf/attention/`` named after a score function of ``known`` (its
    module, ``<name>_kernel.cpp``, its YAML) touches that one; any other file there (``base.py``, the multi-head
    module, shared kernels) touches every one. ``scaled_dot``, trained by every check, is left out."""
    touched: set[str] = set()
    for path in changed:
        if not path.startswith(("src/attnbench/attention/", "conf/attention/")):
            continue
        stem = Path(path).name.split(".")[0]
        own = {n for n in known | ran if stem == n or stem.startswith(f"{n}_")}
        touched |= (own & ran) if own else set(ran)
    return sorted(touched - {"scaled_dot"})


def train(checkout: Path, config: dict[str, str], steps: int, log_every: int, out_dir: Path,
          attention: str = "scaled_dot") -> None:
    """Train ``steps`` steps of ``config`` with ``attention`` and ``checkout``'s code into ``out_dir`` (one torch
    thread).

    A run that finished before (its ``metrics.json`` is written last) is kept, so that a check stopped midway
    continues where it stopped when given the same ``--work``; a run that did not finish is trained again."""
    if (out_dir / "metrics.json").is_file():
        return
    shutil.rmtree(out_dir, ignore_errors=True)
    val_every = max(1, steps // 2)
    overrides = [f"{k}={v}" for k, v in config.items()] + [
        f"attention={attention}", "seed=0", "trainer=cpu", "logger=csv", f"trainer.max_steps={steps}",
        f"trainer.log_every_n_steps={log_every}", f"trainer.val_check_interval={val_every}",
        "trainer.limit_val_batches=5", "trainer.limit_test_batches=5", "trainer.enable_progress_bar=false",
        f"hydra.run.dir={out_dir}"]
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"), ATTNBENCH_CACHE_DIR=str(out_dir / "cache"),
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")
    log = out_dir.with_suffix(".log")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        proc = subprocess.run([sys.executable, str(checkout / "train.py"), *overrides], cwd=checkout, env=env,
                              stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"training with {checkout} failed (exit {proc.returncode}); see {log}")


def logged_values(run_dir: Path) -> dict[str, float]:
    """``{"<metric>@<step>": value}`` of the run's CSV log for train/loss, val/* and test/acc, test/loss."""
    values = {}
    with (run_dir / "csv" / "metrics.csv").open() as fh:
        for row in csv.DictReader(fh):
            for key, cell in row.items():
                keep = key == "train/loss" or key.startswith("val/") or key in ("test/acc", "test/loss")
                if keep and cell not in ("", None):
                    values[f"{key}@{row['step']}"] = float(cell)
    return values


def compare_runs(reference: Path, candidate: Path) -> dict:
    """Weights and logged values of ``candidate`` against ``reference``: ``{identical, weights_equal,
    n_tensors, max_abs_weight_diff, n_logged, logged_equal, n_differing_logged, differing_logged}`` (the first
    20 differing ``<metric>@<step>`` keys)."""
    import torch

    ref = torch.load(reference / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    cand = torch.load(candidate / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    same_keys = ref.keys() == cand.keys()
    max_diff = 0.0
    equal = same_keys
    for key in ref.keys() & cand.keys():
        a, b = ref[key], cand[key]
        if a.shape != b.shape:
            equal, max_diff = False, math.inf
            continue
        if not torch.equal(a, b):
            equal = False
            max_diff = max(max_diff, (a.double() - b.double()).abs().max().item())
    ref_logged, cand_logged = logged_values(reference), logged_values(candidate)
    differing = sorted(k for k in ref_logged.keys() | cand_logged.keys() if ref_logged.get(k) != cand_logged.get(k))
    return {"identical": equal and not differing, "weights_equal": equal, "n_tensors": len(ref),
            "max_abs_weight_diff": max_diff, "n_logged": len(ref_logged), "logged_equal": not differing,
            "n_differing_logged": len(differing), "differing_logged": differing[:20]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="attnbench reproduce's manifest.json")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the result")
    parser.add_argument("--work", type=Path, default=None,
                        help="worktrees and runs, kept (give the same one again to continue a stopped check); "
                             "default: a temporary dir, removed at the end")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run (default 60)")
    parser.add_argument("--log-every", type=int, default=5, help="train/loss logging interval in steps")
    parser.add_argument("--only", default=None, help="check only this stage (compare, head_dim_sweep, ...)")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.log_every < 1:
        parser.error("--steps must be at least 2 and --log-every at least 1")
    if not args.manifest.is_file():
        parser.error(f"no manifest at {args.manifest}; pass --manifest <results dir>/manifest.json")
    if git("status", "--porcelain", "--", *TRAINING_PATHS):
        parser.error("src/, conf/ or train.py has uncommitted changes: commit them so that HEAD is what is checked")

    import torch

    head = git("rev-parse", "--short=12", "HEAD")
    checks = stage_configs(json.loads(args.manifest.read_text()))
    if args.only:
        stages = sorted({c[1] for c in checks})
        checks = [c for c in checks if c[1] == args.only]
        if not checks:
            parser.error(f"--only {args.only}: the manifest has no training job of that stage (stages: "
                         f"{', '.join(stages)})")
    manifest = json.loads(args.manifest.read_text())
    known = {p.stem for p in (REPO_ROOT / "conf" / "attention").glob("*.yaml")}
    work = args.work or Path(tempfile.mkdtemp(prefix="attnbench-codecheck-"))
    start = time.perf_counter()
    results, references = [], {}
    print(f"{len(checks)} (commit, stage, config) to check against HEAD {head}, {args.steps} steps each, "
          f"scaled_dot and each score function whose files changed; work in {work}")
    try:
        for i, (commit, stage, config) in enumerate(checks, 1):
            changed = git("diff", "--name-only", commit, "HEAD", "--", *TRAINING_PATHS).splitlines()
            extra = touched_score_functions(changed, attentions_run(manifest, commit, stage, config), known)
            checkout = work / "worktrees" / commit
            if not checkout.exists():
                git("worktree", "add", "--detach", str(checkout), commit)
            for attention in ["scaled_dot", *extra]:
                label = "-".join([attention, *(f"{v}" for v in config.values())]).replace("/", "_")
                ref_key = (attention, tuple(sorted(config.items())))
                if ref_key not in references:
                    references[ref_key] = work / "runs" / f"HEAD-{label}"
                    train(REPO_ROOT, config, args.steps, args.log_every, references[ref_key], attention)
                run_dir = work / "runs" / f"{commit}-{label}"
                train(checkout, config, args.steps, args.log_every, run_dir, attention)
                row = {"commit": commit, "stage": stage, "overrides": config, "attention": attention, "head": head,
                       "changed_files": changed, **compare_runs(references[ref_key], run_dir)}
                results.append(row)
                print(f"[{i}/{len(checks)}] {commit} {stage} {config} {attention}: "
                      f"{'identical' if row['identical'] else 'DIFFERS'} ({row['n_tensors']} tensors, "
                      f"{row['n_logged']} logged values; changed since: {', '.join(changed) or 'nothing'})",
                      flush=True)
    finally:
        for commit in {c for c, _, _ in checks}:
            if (work / "worktrees" / commit).exists():
                subprocess.run(["git", "worktree", "remove", "--force", str(work / "worktrees" / commit)],
                               cwd=REPO_ROOT, capture_output=True)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    meta = {"head": head, "steps": args.steps, "log_every": args.log_every, "seed": 0,
            "torch": torch.__version__, "processor": cpu_model(), "machine": platform.machine(),
            "seconds": round(time.perf_counter() - start, 1),
            "command": " ".join(["scripts/check_training_code.py", *(argv if argv is not None else sys.argv[1:])])}
    kept = []
    if args.only and args.json.is_file():  # the other stages' rows stay, each with the head it was checked against
        old = json.loads(args.json.read_text())
        kept = [{**row, "head": row.get("head", old["meta"]["head"])} for row in old["checks"]
                if row["stage"] != args.only]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.json, json.dumps({"meta": meta, "checks": kept + results}, indent=1) + "\n")
    n_same = sum(r["identical"] for r in results)
    print(f"{n_same} of {len(results)} identical to HEAD {head} in {meta['seconds']:.0f} s; written {args.json}")
    return 0 if n_same == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
