"""Every command in README.md and docs/*.md is exercised, and every relative link resolves (issue 14).

Each fenced shell command (```bash blocks) of the README and the docs pages is covered in at least one way:

- **composed**: a ``python train.py ...`` (or ``attnbench train ...``) command is composed with Hydra's compose API, job by job (a ``-m``
  sweep expanded as Hydra's basic sweeper expands it, an experiment's ``hydra.sweeper.params`` included,
  Optuna's search space at both ends of each interval), resolved, and checked by
  :func:`attnbench.config.check_run_config` -- what ``python train.py ... --cfg job`` proves (the groups,
  options and keys exist, the values have the schema's types and ranges), without starting a process per job;
- **run**: a few commands run for real through ``train.py``, cut to a few steps (:data:`REAL_RUNS`);
- **flags**: an ``attnbench <command> ...`` or ``python scripts/<x>.py ...`` command's flags are each in that
  command's ``--help`` (``mutmut run --help`` for ``scripts/mutation.sh``, which passes its arguments on);
- **mapped**: the command is run by a named test or by CI (:data:`MAPPED`: command prefix -> test node ids
  that must exist, or ``.ci/run`` lines that must be there).

A command in the docs that none of these covers fails :func:`test_every_documented_command_is_covered`.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import OmegaConf, open_dict

from attnbench.config import check_run_config

from .conftest import REPO_ROOT, fmt_interval, signed, train_env

DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"bash", "sh", "shell", "console"}
#: A command with one of these is a template to fill in (a run dir, a date), not a command to compose as is.
PLACEHOLDER = re.compile(r"<[^>]*>|/path/to/|RUN_DIR_\d")


@dataclass(frozen=True)
class DocCommand:
    """One shell command of a fenced block: where it is, its text without the comment, its words."""

    path: Path
    line: int
    text: str
    env: tuple[tuple[str, str], ...]  # leading NAME=value assignments
    argv: tuple[str, ...]  # the words after the assignments and a `taskset -c <cpus>` prefix

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    @property
    def has_placeholder(self) -> bool:
        return bool(PLACEHOLDER.search(self.text))

    @property
    def is_train(self) -> bool:
        return self.argv[:2] in (("python", "train.py"), ("attnbench", "train"))

    @property
    def overrides(self) -> list[str]:
        """The Hydra overrides of a ``python train.py`` / ``attnbench train`` command (``-m`` dropped)."""
        return [a for a in self.argv[2:] if a not in ("-m", "--multirun")]

    @property
    def multirun(self) -> bool:
        return "-m" in self.argv or "--multirun" in self.argv


def doc_commands(files: list[Path] = DOC_FILES) -> list[DocCommand]:
    """Every command of the ```bash/sh/shell/console blocks of ``files``: comment-only lines skipped, a trailing
    ``\\`` joined with the next line, ``# ...`` comments removed (shell rules: ``#`` inside quotes stays)."""
    found = []
    for path in files:
        fence, pending, start = None, "", 0
        for number, raw in enumerate(path.read_text().splitlines(), 1):
            marker = re.match(r"^\s*```(\w*)", raw)
            if marker:
                fence = None if fence is not None else marker.group(1)
                continue
            if fence not in SHELL_FENCES or not raw.strip() or (not pending and raw.lstrip().startswith("#")):
                continue
            if not pending:
                start = number
            if raw.rstrip().endswith("\\"):
                pending += raw.rstrip()[:-1] + " "
                continue
            line, pending = pending + raw, ""
            words = shlex.split(line, comments=True)
            text = " ".join(words)
            env = []
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                name, value = words.pop(0).split("=", 1)
                env.append((name, value))
            if words[:2] == ["taskset", "-c"]:
                words = words[3:]
            found.append(DocCommand(path, start, text, tuple(env), tuple(words)))
    return found


COMMANDS = doc_commands()
TRAIN = [c for c in COMMANDS if c.is_train and not c.has_placeholder]

#: Commands run for real (cut to a few steps): the README's main job and a second dataset/model/score function.
REAL_RUNS = {
    "python train.py attention=scaled_dot": "scaled_dot-sst2-s0",
    "python train.py attention=cosine data=trec model=tiny trainer.max_epochs=10": "cosine-trec-s0",
}
#: The main job runs in the default suite; the second one is `slow` (CI runs both).
SLOW_RUNS = {"python train.py attention=cosine data=trec model=tiny trainer.max_epochs=10"}
#: data.max_* as tests/test_console.py's tiny run, so that in the whole suite the tokenized data is a cache hit.
CHEAP = {"trainer.max_steps": "2", "trainer.max_epochs": "1", "data.max_train_samples": "320",
         "data.max_eval_samples": "64", "logger": "csv", "callbacks.run_stats.warmup_steps": "0"}

#: Commands another test (or CI) runs: the first words of the command -> where. A test is
#: "tests/<file>.py::<function>" (the function must exist there); CI is ".ci/run: <text that must be in it>".
MAPPED: dict[str, list[str]] = {
    # set-up and the test commands: CI runs them as written (.ci/run)
    'pip install torch==2.13.0 -e .[dev]': [".ci/run: pip install --quiet torch==2.13.0",
                                            '.ci/run: pip install --quiet -e ".[dev]"'],
    "pip install -e .[dev]": ['.ci/run: pip install --quiet -e ".[dev]"'],
    "python -m pytest -m slow or mirror or release": ['.ci/run: python -m pytest -m "slow or mirror or release"'],
    "python -m pytest": [".ci/run: python -m pytest\n"],
    "export ATTNBENCH_DATA_DIR=": [".ci/run: export ATTNBENCH_DATA_DIR=",
                                   "tests/test_data_sources.py::test_fresh_machine_trains_on_the_packaged_data"],
    # sweeps: the launchers, Optuna, DDP run for real in these tests (with short-run overrides)
    "python train.py -m attention=": ["tests/test_train_e2e.py::test_multirun_jobs_are_distinct_runs_in_one_group"],
    "python train.py -m launcher=cores": [
        "tests/test_parallel_sweeps.py::test_launcher_cores_pins_each_job_to_its_own_cpu_with_the_metrics_of_one_at_a_time"],
    "python train.py -m hydra/launcher=submitit_local": [
        "tests/test_sweep.py::test_launcher_runs_two_jobs_with_two_wandb_runs"],
    "python train.py -m hparams_search=optuna": ["tests/test_sweep.py::test_optuna_sweep_writes_its_study"],
    "python train.py trainer=ddp_cpu": ["tests/test_ddp.py::test_ddp_cpu_is_one_job_and_learns_as_one_process_does"],
    "python train.py trainer=ddp trainer.num_nodes=2": ["tests/test_ddp.py::test_rank_from_env_and_child_command"],
    # resume: every documented form (same dir, new dir, last, a path, a sweep) against the uninterrupted run
    "python train.py attention=additive seed=1": [
        "tests/test_resume.py::test_resume_form_ends_with_the_uninterrupted_runs_metrics"],
    "python train.py -m attention=dot,additive seed=0,1 ckpt_path=last": [
        "tests/test_docs_commands.py::test_a_sweep_resumes_jobs_with_a_checkpoint_and_restarts_the_others"],
    # data: each example of docs/data.md on small real files
    "python scripts/mirror_data.py": ["tests/test_data_sources.py::test_hub_dataset_by_id_through_the_mirror_layout"],
    "python train.py data=hub": ["tests/test_data_sources.py::test_hub_dataset_by_id_through_the_mirror_layout"],
    "python train.py data=files data.name=reviews": [
        "tests/test_data_sources.py::test_local_files_of_every_format_give_the_same_splits"],
    "python train.py data=files data.name=mine": ["tests/test_data_sources.py::test_the_datasets_own_validation_split_is_used"],
    "python train.py data=files data.name=mr data.data_files=mr.csv data.test_split=null data.test_size": [
        "tests/test_data_sources.py::test_train_only_dataset_gets_a_stratified_disjoint_test_split"],
    "python train.py -m data=files": ["tests/test_data_sources.py::test_ten_fold_cross_validation_is_one_multirun"],
    "python train.py data=files data.name=pairs": [
        "tests/test_data_sources.py::test_sentence_pairs_are_joined_with_a_separator_token"],
    # reports
    "attnbench report outputs/train/runs": ["tests/test_report_runs.py::test_folder_of_single_runs"],
    "attnbench report RUN_DIR_1 RUN_DIR_2 --wandb": [
        "tests/test_report_runs.py::test_list_of_run_dirs_and_a_folder_of_sweeps",
        "tests/test_report_runs.py::test_wandb_project_group_through_the_api"],
    "attnbench report outputs/": ["tests/test_report.py::test_statistics_by_hand",
                                  "tests/test_train_e2e.py::test_report_reads_the_real_multirun"],
    "attnbench tables --check": ["tests/test_readme_tables.py::test_every_generated_block_matches_its_source"],
    # benchmarks
    "attnbench bench attention": ["tests/test_bench_attention.py::test_tiny_run_writes_real_measurements",
                                  "tests/test_bench_attention.py::test_default_sizes_sweep_n_at_d64_and_d_at_n1024"],
    "attnbench bench train": ["tests/test_bench_throughput.py::test_useful_flops_count_each_example_at_its_own_length",
                              "tests/test_bench_throughput.py::test_gemm_peak_is_a_rate"],
    "attnbench bench short": ["tests/test_bench_throughput.py::test_short_attention_ratios"],
    "attnbench bench gpu-check": ["tests/test_gpu_check.py::test_dry_run_prints_the_expected_duration_and_every_command"],
    # the one command behind the Results: plan, skip, resume, failures, reports
    "attnbench reproduce": ["tests/test_reproduce.py::test_the_plan_is_the_experiments_grid_in_sweep_order",
                            "tests/test_reproduce.py::test_runs_skips_resumes_reports_and_records",
                            "tests/test_reproduce.py::test_a_failed_job_is_recorded_and_the_others_still_run"],
    "attnbench reproduce --dry-run": [
        "tests/test_reproduce.py::test_the_dry_run_of_an_installed_command_shows_a_new_score_function"],
    "attnbench reproduce --stages compare --report-only": [
        "tests/test_reproduce.py::test_report_only_runs_no_job",
        "tests/test_reproduce.py::test_publish_of_one_dataset_renders_its_table_and_merges_the_manifest"],
    # mutation testing: the tests it runs per mutant (its flags are mutmut's: test_script_flags_are_in_its_help)
    "scripts/mutation.sh": ["tests/mutation/test_report_stats.py::test_mean_ci_two_values_by_hand"],
}


def mapped_to(command: DocCommand) -> list[str]:
    """The :data:`MAPPED` entries of the longest prefix of ``command`` (words compared, quotes removed)."""
    words = " ".join(command.argv)  # without NAME=value assignments and `taskset -c <cpus>`
    best = max((p for p in MAPPED if words.startswith(p)), key=len, default=None)
    return MAPPED[best] if best else []


def coverage(command: DocCommand) -> list[str]:
    """How ``command`` is exercised: ``composed``, ``run``, ``flags`` and the mapped tests/CI lines."""
    kinds = []
    if command.is_train and not command.has_placeholder:
        kinds.append("composed")
    if command.text in REAL_RUNS:
        kinds.append("run")
    if _script(command) is not None:
        kinds.append("flags")
    return kinds + mapped_to(command)


def _script(command: DocCommand) -> str | None:
    """``attnbench <command>`` (``attnbench bench <name>``), ``scripts/x.py`` or ``scripts/mutation.sh`` when the
    command runs one (not ``attnbench train``, whose overrides are composed), else None."""
    argv = command.argv
    if argv[:1] == ("attnbench",) and len(argv) > 1 and argv[1] != "train":
        return " ".join(argv[:3] if argv[1] == "bench" else argv[:2])
    if argv[:1] == ("python",) and len(argv) > 1 and argv[1].startswith("scripts/"):
        return argv[1]
    if argv[:1] and argv[0].startswith("scripts/") and argv[0].endswith(".sh"):
        return argv[0]
    return None


# --- the inventory -----------------------------------------------------------------------------------------

def test_the_docs_commands_are_found():
    """The extraction sees the README's set-up and main job and the pages' commands (a broken extractor would
    make every other test here pass vacuously)."""
    texts = [c.text for c in COMMANDS]
    assert "python train.py attention=scaled_dot" in texts
    assert any(c.text.startswith("pip install") and c.path.name == "README.md" for c in COMMANDS)
    # a `\`-continued line is one command
    slurm = [c for c in COMMANDS if "hydra.launcher.array_parallelism=8" in c.text]
    assert slurm and "attention=dot,scaled_dot,additive" in slurm[0].text
    # comments are not part of a command; a quoted `#`-free override keeps its quotes' content as one word
    assert all("#" not in w for c in COMMANDS for w in c.argv)
    assert any("data.fold=range(10)" in c.argv for c in COMMANDS)
    pages = {c.path.name for c in COMMANDS}
    assert {"README.md", "running.md", "configuration.md", "sweeps.md", "data.md", "cost.md", "results.md",
            "logging.md", "testing.md"} <= pages
    assert len(COMMANDS) >= 50


def test_every_documented_command_is_covered():
    uncovered = [f"{c.where}: {c.text}" for c in COMMANDS if not coverage(c)]
    assert not uncovered, ("commands in the docs that no test runs, composes or maps (add a test and an entry in "
                           "MAPPED, or make it composable):\n" + "\n".join(uncovered))


def _test_exists(node: str) -> bool:
    """``tests/x.py::test_y`` names a test function (module level or in a class) of that file."""
    file, _, name = node.partition("::")
    path = REPO_ROOT / file
    if not path.is_file():
        return False
    tree = ast.parse(path.read_text())
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in ast.walk(tree))


def test_mapped_tests_and_ci_lines_exist():
    """Every mapping names a test function that exists, or a line .ci/run really has."""
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    missing = []
    for prefix, targets in MAPPED.items():
        for target in targets:
            if target.startswith(".ci/run: "):
                if target[len(".ci/run: "):] not in ci:
                    missing.append(f"{prefix!r} -> {target!r}: not in .ci/run")
            elif not _test_exists(target):
                missing.append(f"{prefix!r} -> {target}: no such test")
    assert not missing, "\n".join(missing)
    # a mapping nothing in the docs uses any more is stale
    unused = [p for p in MAPPED if not any(mapped_to(c) is MAPPED[p] for c in COMMANDS)]
    assert not unused, f"MAPPED entries no command in the docs uses: {unused}"


def test_documented_extras_exist():
    """``pip install -e ".[<extra>]"`` in the docs names extras the project declares."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    texts = [p.read_text() for p in DOC_FILES]
    named = {m for t in texts for m in re.findall(r'pip install[^`\n]*-e "\.\[(\w+)\]"', t)}
    assert named and named <= set(extras), (named, sorted(extras))


# --- composed: what `--cfg job` would print, for every job of every documented train.py command ----------

def _sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The jobs of a basic-sweeper multirun of ``overrides`` (Hydra's own expansion: `a,b`, `range(...)`)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _covering_jobs(jobs: list[list[str]]) -> list[list[str]]:
    """A subset of a sweep's jobs in which every value of every swept key occurs (job i of the subset takes the
    i-th value of each key, cycling): as many jobs as the longest list of values, not their product."""
    values: dict[str, list[str]] = {}
    for job in jobs:
        for override in job:
            key = override.split("=", 1)[0]
            if override not in values.setdefault(key, []):
                values[key].append(override)
    width = max(len(v) for v in values.values())
    wanted = [{v[i % len(v)] for v in values.values()} for i in range(width)]
    return [next(job for job in jobs if set(job) == want) for want in wanted]


def _interval_ends(params: dict) -> list[list[str]]:
    """Optuna's search space as two jobs: every ``interval``/``choice`` at its first and at its last value."""
    lows, highs = [], []
    for key, spec in params.items():
        sweep = OverridesParser.create().parse_override(f"{key}={spec}").value()
        if hasattr(sweep, "start"):
            lo, hi = sweep.start, sweep.end
        else:
            lo, hi = sweep.list[0], sweep.list[-1]
        lows.append(f"{key}={lo}")
        highs.append(f"{key}={hi}")
    return [lows, highs]


def _compose_job(overrides: list[str]):
    """Compose one job as ``train.py`` does, resolve it under its Hydra config, check it. Returns the config."""
    cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
    job = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(job):
        del job["hydra"]
    hydra_config, before = HydraConfig.instance(), HydraConfig.instance().cfg
    hydra_config.set_config(cfg)  # ${hydra:...} resolves as in a job; other tests must not see it afterwards
    try:
        OmegaConf.resolve(job)
    finally:
        hydra_config.cfg = before
    check_run_config(job)
    return cfg, job


def _jobs_of(command: DocCommand) -> list[list[str]]:
    overrides = command.overrides
    if not command.multirun:
        return [overrides]
    cfg = compose(config_name="train", overrides=[o for o in overrides if "," not in o.split("=", 1)[-1]
                                                  and "range(" not in o], return_hydra_config=True)
    params = cfg.hydra.sweeper.get("params")
    # resolved: ${attnbench.score_functions:} is every score function on the search path
    params = OmegaConf.to_container(params, resolve=True) if params is not None else {}
    given = {o.split("=", 1)[0] for o in overrides}
    if cfg.hydra.sweeper._target_.endswith("OptunaSweeper"):
        return [overrides + ends for ends in _interval_ends(params)]
    extra = [f"{k}={v}" for k, v in params.items() if k not in given]  # the command line wins, as in Hydra
    return _sweep_jobs(overrides + extra)


@pytest.fixture(scope="module")
def hydra_configs():
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None, job_name="train"):
        yield


_COMPOSED: set[tuple[str, ...]] = set()  # a job documented twice (a command repeated on another page) composes once


def _composes_many_jobs(command: DocCommand) -> bool:
    """A published experiment's sweep or a ``range(...)`` sweep: 5 to 10 jobs to compose (seconds each on a CPU).
    CI's slow step composes them; the experiments' jobs compose by default in tests/test_config_presets.py."""
    return command.multirun and any(a.startswith("experiment=") or "range(" in a for a in command.argv)


@pytest.mark.parametrize("command", [pytest.param(c, marks=pytest.mark.slow) if _composes_many_jobs(c) else c
                                     for c in TRAIN], ids=[c.where for c in TRAIN])
def test_train_command_composes(hydra_configs, command):
    """The command's jobs compose (groups, options and keys exist; types and ranges hold; every value of every
    swept key at least once) and their choices are the ones the command asked for."""
    jobs = _jobs_of(command)
    assert jobs
    for overrides in _covering_jobs(jobs) if len(jobs) > 1 else jobs:
        if tuple(overrides) in _COMPOSED:
            continue
        _COMPOSED.add(tuple(overrides))
        cfg, job = _compose_job(overrides)
        choices = cfg.hydra.runtime.choices
        for override in overrides:
            key, _, value = override.partition("=")
            if key.startswith(("hydra.", "hydra/", "~", "+")):
                continue
            if key in choices:  # a config group: that option was picked
                assert choices[key] == value, (override, dict(choices))
            elif not key.startswith("data.data_files"):  # a value: it is in the job's config
                assert OmegaConf.select(job, key, throw_on_missing=False) is not None or value == "null", override


def test_experiment_sweeps_expand_to_the_documented_job_counts(hydra_configs):
    """Every documented ``python train.py -m experiment=...`` line that states ``N jobs`` states what the
    experiment expands to (score functions are discovered, so the count follows the attention group)."""
    stated = [(c, int(m.group(1))) for c in TRAIN if any(a.startswith("experiment=") for a in c.argv)
              and (m := re.search(r"# (\d+) jobs", c.path.read_text().splitlines()[c.line - 1]))]
    assert stated, "no documented experiment command states its job count"
    for command, count in stated:
        assert len(_jobs_of(command)) == count, (str(command.path), command.line, count)


# --- flags: each --flag a documented script command passes is one the script accepts ------------------------

SCRIPTS = sorted({s for c in COMMANDS if (s := _script(c))})


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_flags_are_in_its_help(script):
    help_cmd = (["mutmut", "run", "--help"] if script.endswith(".sh") else
                [sys.executable, "-m", *script.split(), "--help"] if script.startswith("attnbench ") else
                [sys.executable, script, "--help"])
    if script.endswith(".sh"):
        assert subprocess.run(["bash", "-n", script], cwd=REPO_ROOT, check=False).returncode == 0
        assert 'mutmut run "$@"' in (REPO_ROOT / script).read_text()  # its arguments are mutmut's
    proc = subprocess.run(help_cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    flags = {w.split("=")[0] for c in COMMANDS if _script(c) == script for w in c.argv if w.startswith("--")}
    unknown = sorted(f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", proc.stdout))
    assert not unknown, f"{script}: documented flags its --help does not list: {unknown}"


# --- run: a few commands for real, cut to a few steps ------------------------------------------------------

def _cheap(argv: tuple[str, ...], run_dir: Path) -> list[str]:
    """The command's overrides with the step/sample caps of :data:`CHEAP` (replacing its own values of them)."""
    kept = [a for a in argv[2:] if a.split("=", 1)[0] not in CHEAP]
    return [*kept, *(f"{k}={v}" for k, v in CHEAP.items()), f"hydra.run.dir={run_dir}"]


@pytest.mark.parametrize("text", [pytest.param(t, marks=pytest.mark.slow) if t in SLOW_RUNS else t
                                  for t in sorted(REAL_RUNS)])
@pytest.mark.slow
def test_documented_command_runs(text, tmp_path, data_dir, cache_dir):
    command = next(c for c in COMMANDS if c.text == text)
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "train.py", *_cheap(command.argv, run_dir)], cwd=REPO_ROOT,
                          env=train_env(data_dir, cache_dir), capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"attnbench · {REAL_RUNS[text]} · done" in proc.stdout + proc.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= metrics["test/acc"] <= 1.0
    if command.path.name == "README.md":  # the README shows what it prints: the same lines, in the same order
        shown = _printed_block_after(command)
        printed = (proc.stdout + proc.stderr).split(f"attnbench · {REAL_RUNS[text]} · done\n", 1)[1].splitlines()
        assert _labels(printed) == _labels(shown) and len(_labels(shown)) >= 5, (shown, printed)


def _printed_block_after(command: DocCommand) -> list[str]:
    """The lines of the first plain ``` block after ``command`` in its file (the output the docs show)."""
    lines = command.path.read_text().splitlines()[command.line:]
    fences = [i for i, line in enumerate(lines) if line.strip() == "```"]  # its block's end, then the output's
    return lines[fences[1] + 1:fences[2]]


def _labels(lines: list[str]) -> list[str]:
    """The headline's labels (``test/acc``, ``peak memory``, ...) of a printed summary: its indented lines'
    first field, up to the line that says where all the figures are."""
    labels = []
    done = [i for i, line in enumerate(lines) if line.startswith("attnbench · ") and line.endswith(" · done")]
    for line in lines[done[0] + 1 if done else 0:]:
        if line.startswith("All ") or not line.startswith("  "):
            break
        labels.append(re.split(r"\s{2,}", line.strip())[0])
    return labels


# --- links ---------------------------------------------------------------------------------------------------

def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (lower case, punctuation dropped, spaces to '-';
    a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    fence = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        match = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            yield slug if count == 0 else f"{slug}-{count}"


def _links(path: Path) -> list[tuple[int, str]]:
    """``[text](target)`` links outside code (fenced blocks and `code spans`) of a Markdown file."""
    found, fence = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        found += [(number, m) for m in re.findall(r"\]\(([^)\s]+)\)", line)]
    return found


def test_relative_links_point_to_existing_files_and_anchors():
    broken = []
    for path in DOC_FILES:
        for number, target in _links(path):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(REPO_ROOT)}:{number}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in set(_anchors(dest)):
                broken.append(f"{path.relative_to(REPO_ROOT)}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_link_checker_sees_a_broken_link(tmp_path):
    """The checker is not vacuous: a missing file and a missing heading are both found."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](nothere.md) [bad](#nope) `[code](nothere.md)`\n")
    links = dict((t, n) for n, t in _links(page))
    assert set(links) == {"#title", "nothere.md", "#nope"}
    assert set(_anchors(page)) == {"title"}
    anchors = list(_anchors(REPO_ROOT / "docs" / "configuration.md"))
    assert "score-functions" in anchors and "the-typed-schema" in anchors


def _layout_entries() -> list[tuple[str, str]]:
    """(path, description) of every entry of the Layout block of docs/architecture.md: an entry's name starts
    the line (two spaces per level below the folder above it); a description continues on indented lines."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```", 2)[1].split("\n", 1)[1]
    entries: list[list[str]] = []
    stack: list[str] = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if indent >= 20:  # a description's continuation
            entries[-1][1] += " " + line.strip()
            continue
        name, _, description = line.strip().partition(" ")
        depth = indent // 2
        stack = stack[:depth] + [name]
        entries.append(["".join(stack), description.strip()])
    return [(p, d) for p, d in entries]


def test_layout_names_only_paths_that_exist():
    """Every file and folder docs/architecture.md's Layout names exists, and so does every file its description
    of a folder names (``scripts/: mutation.sh ...``)."""
    entries = _layout_entries()
    assert ("src/attnbench/analysis/" in {p for p, _ in entries}
            and "src/attnbench/models/module.py" in {p for p, _ in entries})  # the parser sees nested entries
    missing = [p for p, _ in entries if not (REPO_ROOT / p).exists()]
    for path, description in entries:
        if path.endswith("/"):
            named = re.findall(r"(?<![\w/.])(\w+\.(?:py|sh|md|txt|yaml))\b", description)
            missing += [path + n for n in named if not (REPO_ROOT / path / n).exists()]
    assert not missing, f"the Layout names paths that do not exist: {missing}"


def test_composition_refuses_what_train_py_refuses(hydra_configs):
    """The compose check is not vacuous: an unknown option, a misspelt key (also a launcher's), a value of the
    wrong type or out of range fail it, as they fail ``python train.py``; sweeps expand to their jobs."""
    from hydra.errors import HydraException

    from attnbench.errors import ConfigError

    for bad in (["attention=dott"], ["model.d_modle=64"], ["optim.lr=fast"],
                ["hydra/launcher=joblib", "hydra.launcher.n_jobz=2"]):
        with pytest.raises(HydraException):
            _compose_job(bad)
    for bad, key in ((["data.batch_size=0"], "data.batch_size"), (["optim.lr=-1"], "optim.lr")):
        with pytest.raises(ConfigError, match=key):
            _compose_job(bad)
    assert not HydraConfig.initialized()  # no Hydra state left for the next test
    optuna = next(c for c in TRAIN if "hparams_search=optuna" in c.argv)
    low, high = _jobs_of(optuna)
    assert "optim.lr=0.0001" in low and "optim.lr=0.003" in high and "model.dropout=0.3" in high
    sweep = next(c for c in TRAIN if c.text == "python train.py -m attention=dot,scaled_dot,additive seed=0,1")
    jobs = _jobs_of(sweep)
    assert len(jobs) == 6 and len(_covering_jobs(jobs)) == 3
    assert {o for job in _covering_jobs(jobs) for o in job} == {o for job in jobs for o in job}


#: Keys the docs name on purpose although no config has them.
NOT_KEYS = {"model.d_modle",  # docs/troubleshooting.md: what a misspelt key prints
            "data.data_files.train",  # an entry of `data.data_files={train: ...}` (null in the presets), as the
            # message of a missing data file names it (docs/data.md, docs/troubleshooting.md)
            "trainer.accumulate_grad_batches"}  # a Lightning Trainer argument the docs add with `+trainer.`
#: Python names the docs use that a source checkout does not import: the installed wheel's config package
#: (`conf/` as `attnbench.conf`, tests/test_packaging.py).
#: dotted names that are not Python objects: the configs' package, a config resolver (``${attnbench.score_functions:}``)
NOT_NAMES = {"attnbench.conf", "attnbench.score_functions"}


def _config_keys() -> set[str]:
    """Every dotted key of the default config composed with each option of each config group (a key like
    ``attention.hidden_dim`` exists only under its option), plus Hydra's own under the default launcher."""
    keys: set[str] = set()

    def walk(node, prefix: str) -> None:
        if OmegaConf.is_dict(node):
            for key in node.keys():
                keys.add(prefix + str(key))
                walk(node._get_node(key), f"{prefix}{key}.")

    options = {group.name: sorted(o.stem for o in group.glob("*.yaml"))
               for group in sorted((REPO_ROOT / "conf").iterdir()) if group.is_dir() and group.name != "hydra"}
    width = max(len(v) for v in options.values())
    # each option of each group once: compose i takes the i-th option of every group (cycling)
    for i in range(width):
        walk(compose(config_name="train", overrides=[f"{g}={v[i % len(v)]}" for g, v in options.items()],
                     return_hydra_config=True), "")
    walk(compose(config_name="train", overrides=["hydra/launcher=joblib"], return_hydra_config=True), "")
    return keys


def test_config_keys_and_python_names_in_the_docs_exist(hydra_configs):
    """Every config key (`data.max_length`, `callbacks.run_stats.warmup_steps`, ...) and every dotted Python name
    (`attnbench.config.OptimConfig`, ...) in the code spans of the README and docs exists."""
    import importlib

    keys = _config_keys()
    assert {"data.max_length", "callbacks.run_stats.warmup_steps", "attention.hidden_dim"} <= keys
    missing = []
    for path in DOC_FILES:
        if path.name == "mutation.md":  # generated from a mutation run (scripts/mutation_report.py)
            continue
        for span in re.findall(r"`([^`\n]+)`", path.read_text()):
            for key in re.findall(r"(?<![\w/.])((?:attention|data|model|trainer|logger|callbacks|optim|hydra)"
                                  r"\.(?!md\b|py\b)[\w.]+)", span):
                key = key.rstrip(".")
                if key not in keys and key not in NOT_KEYS:
                    missing.append(f"{path.name}: config key {key}")
            for name in re.findall(r"(?<![\w/])attnbench(?:\.\w+)+", span):
                parts = name.split(".")
                if parts[-1] in ("yaml", "py", "md") or name in NOT_NAMES:
                    continue
                for cut in range(len(parts), 0, -1):
                    try:
                        obj = importlib.import_module(".".join(parts[:cut]))
                    except ImportError:
                        continue
                    try:
                        for attribute in parts[cut:]:
                            obj = getattr(obj, attribute)
                    except AttributeError:
                        missing.append(f"{path.name}: Python name {name}")
                    break
    assert not missing, "\n".join(sorted(set(missing)))


SWEEP_SHORT = ["model=tiny", "data.max_train_samples=320", "data.max_eval_samples=64", "data.batch_size=32",
               "trainer.max_epochs=2", "trainer.deterministic=true", "trainer.enable_progress_bar=false",
               "callbacks.run_stats.warmup_steps=2", "~callbacks.attention_diagnostics", "logger=csv"]


@pytest.mark.slow
def test_a_sweep_resumes_jobs_with_a_checkpoint_and_restarts_the_others(tmp_path, data_dir, cache_dir):
    """docs/sweeps.md, Resume: `-m ... ckpt_path=last hydra.sweep.dir=<that sweep>` resumes every job of the sweep
    that has a checkpoint and starts the others from scratch (with a warning); both end as the first sweep did.
    Job 0 is as if killed during epoch 1 (its last.ckpt is its epoch-0 checkpoint, no metrics.json), job 1 as
    if killed before its first checkpoint (no checkpoints, no metrics.json)."""
    sweep_dir, env = tmp_path / "sweep", train_env(data_dir, cache_dir)
    args = [sys.executable, "train.py", "-m", "attention=dot,scaled_dot", *SWEEP_SHORT,
            "callbacks.model_checkpoint.save_top_k=-1", f"hydra.sweep.dir={sweep_dir}"]  # every epoch's file kept
    first = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and (p / "metrics.json").is_file())
    assert [j.name for j in jobs] == ["0_dot-sst2-s0", "1_scaled_dot-sst2-s0"]
    before = {j.name: json.loads((j / "metrics.json").read_text()) for j in jobs}
    checkpoints = jobs[0] / "checkpoints"
    epoch0 = sorted(checkpoints.glob("epoch00-*.ckpt"))
    assert len(epoch0) == 1 and sorted(checkpoints.glob("epoch01-*.ckpt")), sorted(checkpoints.iterdir())
    for ckpt in checkpoints.glob("last*.ckpt*"):  # with its sha256 sidecar: the copy below is another file
        ckpt.unlink()
    for ckpt in checkpoints.glob("epoch01-*.ckpt"):
        ckpt.unlink()
    shutil.copy(epoch0[0], checkpoints / "last.ckpt")
    for job in jobs:
        (job / "metrics.json").unlink()
    for ckpt in (jobs[1] / "checkpoints").iterdir():
        ckpt.unlink()
    again = subprocess.run([*args, "ckpt_path=last"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=900, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("sweep_")]  # the same sweep dir, not a new one
    log0, log1 = ((job / "train.log").read_text() for job in jobs)
    for job in jobs:  # the jobs trained: their held .hydra/ copy and the sweep's job records are written
        assert "ckpt_path: last" in (job / ".hydra" / "config.yaml").read_text(), job.name
        assert "output_subdir=null" not in (job / ".hydra" / "hydra.yaml").read_text(), job.name
    records = [json.loads(p.read_text()) for p in sorted((sweep_dir / ".attnbench-jobs").glob("*.json"))]
    assert [(r["num"], r["status"], r["trained"]) for r in records] == [(0, "completed", True), (1, "completed", True)]
    assert "ckpt_path=last" in (sweep_dir / "multirun.yaml").read_text()
    assert "Resuming from" in log0 and "last" in log0.split("Resuming from", 1)[1].splitlines()[0]
    assert "no checkpoint in" in log1 and "training from scratch" in log1
    for job in jobs:
        after = json.loads((job / "metrics.json").read_text())
        assert after["test/acc"] == before[job.name]["test/acc"], job.name
        assert after["val/acc_best"] == before[job.name]["val/acc_best"], job.name


def test_the_wandb_commands_of_the_docs_run_as_written_on_a_run_dir(tmp_path):
    """Every inline `wandb leet inspect ... <run dir>` command of README.md and docs/*.md, typed with a run's
    output dir, prints that run's summary: the offline run sits in <run dir>/wandb/ as the W&B logger of a job
    puts it (`wandb leet inspect <run dir>` fails: it looks for <run dir>/latest-run)."""
    import wandb

    run_dir = tmp_path / "2026-01-01_10-00-00_scaled_dot-sst2-s0"
    run_dir.mkdir()
    run = wandb.init(mode="offline", dir=str(run_dir), project="attnbench", config={"seed": 0},
                     settings=wandb.Settings(silent=True))
    run.summary["test/acc"] = 0.75
    run.finish()
    commands = [(page.name, m.group(1)) for page in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
                for m in re.finditer(r"`(wandb leet inspect [^`]*<run dir>[^`]*)`", page.read_text())]
    assert commands, "no `wandb leet inspect ... <run dir>` command in the docs"
    wandb_bin = Path(sys.executable).with_name("wandb")
    for page, command in commands:
        args = shlex.split(command.replace("<run dir>", shlex.quote(str(run_dir))))[1:]
        proc = subprocess.run([str(wandb_bin), *args], capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, (page, command, proc.stderr[-2000:])
        assert json.loads(proc.stdout)["summary"]["test/acc"] == 0.75, (page, command)
