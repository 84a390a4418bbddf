"""Faults during a run: one message each, what was computed is kept, and nothing overwrites another run."""

from __future__ import annotations

import http.server
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import datasets
import pytest
import torch
from hydra import compose, initialize_config_dir

from attnbench.attention import available
from attnbench.errors import ConfigError
from attnbench.run.hydra_callbacks import FreshOutputDir, claim_dir
from attnbench.errors import RunInterrupted
from attnbench.errors import NonFiniteLossError, OutOfMemory, OutputWriteError
from attnbench.run.loggers import make_wandb_logger
from attnbench.models.module import TextClassifierModule
from attnbench.run.train import check_config, train

from .conftest import REPO_ROOT

WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull"]
POSITIVE = {"good", "fine", "great", "nice"}


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> list[str]:
    """Overrides for a tiny two-class dataset in the layout of ../shared/data (trains in about a second)."""
    root = tmp_path_factory.mktemp("toy")
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    for split, n in (("train", 200), ("test", 40)):
        words = [(WORDS[i % 8], WORDS[(3 * i) % 8]) for i in range(n)]
        data = {"text": [f"{a} movie {b} plot" for a, b in words], "label": [int(a in POSITIVE) for a, _ in words]}
        path = root / "data" / "toy" / f"{split}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_dict(data, features=features).to_parquet(str(path))
    return ["data.name=toy", "data.hub_id=nobody/toy", "data.text_column=text", "data.test_split=test",
            f"data.local_dir={root / 'data'}", f"data.cache_dir={root / 'cache'}", "data.val_size=40",
            "data.batch_size=8", "data.max_length=16", "model=tiny", "trainer.enable_progress_bar=false",
            "callbacks.run_stats.warmup_steps=1", "trainer.num_sanity_val_steps=0"]


def compose_cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def run_in_process(toy: list[str], out: Path, *overrides: str) -> dict:
    return train(compose_cfg([*toy, "logger=csv", *overrides, f"+output_dir={out}"]))


# ------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("override, message", [
    ("model.d_model=0", "invalid config: model sizes must be >= 1, got {'d_model': 0}"),
    ("model.n_layers=-1", "invalid config: model sizes must be >= 1, got {'n_layers': -1}"),
    ("model.head_dim=0", "invalid config: model sizes must be >= 1, got {'head_dim': 0}"),
    ("data.tokenizer.vocab_size=0", "data.tokenizer.vocab_size must be an integer >= 1, got 0"),
    ("model.attn_dropout=-0.1", "invalid config: model.attn_dropout must be in [0, 1), got -0.1"),
    ("model.dropout=1.0", "invalid config: model.dropout must be in [0, 1), got 1.0"),
    ("model.pooling=avg", "invalid config: model.pooling must be one of mean, max, cls, last, got 'avg'"),
    ("data.max_length=0", "data.max_length must be an integer >= 1, got 0"),
    ("data.eval_batch_size=-1", "data.eval_batch_size must be an integer >= 1, got -1"),
    ("attention.name=bilinear", ("invalid config: unknown score function 'bilinear'; choose one of: "
                                 f"{', '.join(available())}")),  # every discovered one
    ("logger.wandb.mode=onlin", "logger.wandb.mode must be auto, online, offline or disabled, got 'onlin'"),
    ("optim.lr=0", "optim.lr must be a number > 0, got 0"),
    # beyond the list: what a new user tried
    ("trainer.max_steps=0", "trainer.max_steps must be an integer >= 1, or -1 for no limit, got 0 (0 would test an "),
    ("trainer.max_epochs=0", "trainer.max_epochs must be an integer >= 1, or -1 for no limit, got 0"),
    ("ckpt_path=/nowhere/last.ckpt", "ckpt_path=/nowhere/last.ckpt: no such checkpoint file. Use the path printed"),
    ("optim.betas=[0.9]", "optim.betas must be two numbers in [0, 1), e.g. [0.9, 0.98], got [0.9]"),
    ("optim.warmup_ratio=1.5", "optim.warmup_ratio must be a number in [0, 1], got 1.5"),
    # trainer values Lightning takes and then divides by (a ZeroDivisionError mid-fit) or silently reinterprets
    ("trainer.val_check_interval=0", "trainer.val_check_interval must be a fraction in (0, 1] of an epoch, a number "
                                     "of training batches >= 1, or a time 'DD:HH:MM:SS', got 0"),
    ("trainer.val_check_interval=0.0", "trainer.val_check_interval must be a fraction in (0, 1] of an epoch"),
    ("trainer.check_val_every_n_epoch=0", "trainer.check_val_every_n_epoch must be an integer >= 1, or null"),
    ("trainer.limit_train_batches=0", "trainer.limit_train_batches must be null, a fraction in (0, 1] or a number of "
                                      "batches >= 1, got 0 (0 would test an untrained model)"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val must be null, 0 (no clipping) or a number > 0, got -1"),
    ("+trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches must be an integer >= 1, got 0"),
    ("trainer.log_every_n_steps=-1", "trainer.log_every_n_steps must be an integer >= 1, or 0 for no per-step"),
    ("trainer.num_sanity_val_steps=-2", "trainer.num_sanity_val_steps must be an integer >= 0, or -1 for the whole"),
    ("trainer.max_epochs=-2", "trainer.max_epochs must be an integer >= 1, or -1 for no limit, got -2"),
    ("callbacks.throughput_monitor.window_size=1", "callbacks.throughput_monitor.window_size must be an integer >= 2"),
    # refused by Lightning's own Trainer constructor, built by the check
    ("trainer.limit_val_batches=-1", "invalid trainer config: You have passed invalid value -1 for limit_val_batches"),
])
def test_bad_values_are_refused_before_any_data_work(override, message):
    with pytest.raises(ConfigError) as err:
        check_config(compose_cfg([override]))
    assert str(err.value).startswith(message)


@pytest.mark.slow  # a subprocess per case: CI runs it
def test_a_value_a_score_function_refuses_answers_before_lightning_and_data_load(toy, tmp_path):
    """`attention.hidden_dim=-1` (additive), `attention.init_temperature=-1` (cosine) and an option an
    out-of-package score function (hydra.searchpath) refuses were only checked once Lightning had loaded and the
    run had started (9-12 s): the command line builds the attention module itself after the torch-free checks
    (attnbench.config.check_attention), so the answer comes before Lightning is imported and before any data
    work (no data cache is created)."""
    (tmp_path / "strictpkg").mkdir()
    (tmp_path / "strictpkg" / "__init__.py").write_text(
        "from attnbench.attention.scaled_dot import ScaledDotScore\n\n\n"
        "class StrictScore(ScaledDotScore):\n"
        "    name = 'strict'\n\n"
        "    def __init__(self, n_heads, head_dim, margin=1.0):\n"
        "        if not margin > 0:\n"
        "            raise ValueError(f'strict: attention.margin must be > 0, got {margin}')\n"
        "        super().__init__(n_heads=n_heads, head_dim=head_dim)\n")
    (tmp_path / "conf" / "attention").mkdir(parents=True)
    (tmp_path / "conf" / "attention" / "strict.yaml").write_text("_target_: strictpkg.StrictScore\nname: strict\n"
                                                                 "margin: 1.0\n")
    cases = [
        (["attention=additive", "attention.hidden_dim=-1"],
         "invalid config: additive: attention.hidden_dim must be an integer >= 1 (or null for head_dim), got -1"),
        (["attention=additive", "attention.compile=maybe"],
         "invalid config: additive: attention.compile must be true or false, got 'maybe'"),
        (["attention=cosine", "attention.eps=-1"],
         "invalid config: cosine: attention.eps must be a number > 0 (the norm floor; default 1e-6), got -1"),
        (["attention=cosine", "attention.init_temperature=-1"],
         "invalid config: cosine: attention.init_temperature must be > 0 (or null for √head_dim), got -1.0"),
        (["attention=strict", "attention.margin=0", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"],
         "invalid config: strict: attention.margin must be > 0, got 0"),
    ]
    cache = tmp_path / "cache"
    for overrides, message in cases:
        env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run([sys.executable, "-X", "importtime", "train.py", *toy, f"data.cache_dir={cache}",
                               "logger=none", f"hydra.run.dir={tmp_path / 'run'}", *overrides], cwd=REPO_ROOT,
                              capture_output=True, text=True, env={**os.environ, **env}, timeout=180, check=False)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
        assert proc.returncode == 1 and errors == [f"Error: {message}"], (overrides, proc.stderr[-3000:])
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "torch" in imported and "pytorch_lightning" not in imported, overrides
        assert not cache.exists(), overrides


@pytest.mark.parametrize("override, message", [
    ("seed=abc", "seed must be an integer, got 'abc'"),
    ("model.d_model=64.5", "model.d_model must be an integer, got 64.5"),
    ("optim.lr=fast", "optim.lr must be a number > 0, got 'fast'"),
    ("optim.betas=[0.9,high]", "optim.betas must be two numbers in [0, 1), e.g. [0.9, 0.98], got 'high'"),
    ("model.pooling=[max]", "model.pooling must be a string, got ['max']"),
])
def test_values_of_the_wrong_type_are_refused_while_composing(override, message):
    """The schema (attnbench.config) refuses a value of the wrong type before any check runs; the message is
    the range check's own words (the command line prints it: tests/test_cli.py)."""
    from hydra.errors import ConfigCompositionException

    from attnbench.config import type_error_message

    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg([override])
    assert type_error_message(err.value) == message


# ------------------------------------------------------------------------------------------ training
def test_nan_train_loss_stops_with_the_step_and_a_hint(toy, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(NonFiniteLossError) as err:
        run_in_process(toy, out, "optim.lr=1e6", "trainer.max_steps=1000")
    msg = str(err.value)
    assert msg.startswith("train/loss became nan at step ") and "training stopped before that update" in msg
    assert "no checkpoint had been written yet" in msg and "Lower optim.lr (now 1000000.0)" in msg
    failure = json.loads((out / "failure.json").read_text())
    assert failure["status"] == "failed" and failure["error"] == msg
    assert not (out / "metrics.json").exists() and not list(out.glob("checkpoints/*.ckpt"))


def test_nan_val_loss_keeps_the_last_good_checkpoint(toy, tmp_path):
    """lr ramps to 1e3 with validation every 2 steps: the weights overflow around step 11-12. Whichever loss sees
    it first (train or val; float rounding decides), training stops and the last good checkpoint stays, finite."""
    out = tmp_path / "run"
    with pytest.raises(NonFiniteLossError) as err:
        run_in_process(toy, out, "optim.lr=1e3", "optim.warmup_ratio=1.0", "trainer.max_steps=10000",
                       "trainer.val_check_interval=2")
    last = out / "checkpoints" / "last.ckpt"
    match = re.match(r"(train|val)/loss became nan at step (\d+) \(epoch 0\); training stopped before "
                     r"(?:that update|checkpointing these weights), the last good checkpoint is kept: (\S+)\. Lower "
                     r"optim\.lr", str(err.value))
    assert match and match[3] == str(last), str(err.value)
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    # The last validation's checkpoint before the overflow. A NaN val/loss at step N stops before step N's
    # checkpoint; a NaN train/loss at step N comes from the weights after N updates, which validation at step N
    # (N even) may still have found finite and checkpointed.
    step, nan_step = ckpt["global_step"], int(match[2])
    assert 0 < step and step % 2 == 0
    assert step <= nan_step if match[1] == "train" else step < nan_step, (step, str(err.value))
    assert all(torch.isfinite(t).all() for t in ckpt["state_dict"].values())
    assert not (out / "checkpoints" / "interrupted.ckpt").exists()


@pytest.mark.parametrize("error", [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 14.75 GiB total capacity)"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
                 "to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"),
])
def test_out_of_memory_names_the_knobs(toy, tmp_path, monkeypatch, error):
    real_forward = TextClassifierModule.forward

    def forward(self, input_ids, padding_mask, **kwargs):
        if self.training and self.global_step == 3:
            raise error
        return real_forward(self, input_ids, padding_mask, **kwargs)

    monkeypatch.setattr(TextClassifierModule, "forward", forward)
    out = tmp_path / "run"
    with pytest.raises(OutOfMemory) as err:
        run_in_process(toy, out, "attention=additive", "trainer.max_steps=10")
    msg = str(err.value)
    assert msg.startswith("Out of memory at step 3 (epoch 0) (")
    assert ("Lower data.batch_size (now 8), data.max_length (now 16), attention.chunk_bytes (now 67108864); on a "
            "GPU, trainer.precision=bf16-mixed also halves activation memory.") in msg
    # the weights of step 3 were fine: saved for a resume
    assert torch.load(out / "checkpoints" / "interrupted.ckpt", weights_only=False)["global_step"] == 3


def test_a_monitor_key_that_is_never_logged_is_a_config_error(toy, tmp_path):
    """Lightning finds an unlogged `monitor` at the first validation (after training, or on a resume before the first
    new step, when the run's dir has been written to): the config check refuses it before the output dir exists."""
    with pytest.raises(ConfigError) as err:
        run_in_process(toy, tmp_path / "run", "trainer.max_steps=4", "trainer.val_check_interval=2",
                       "callbacks.model_checkpoint.monitor=val/accc")
    assert str(err.value) == ("callbacks.model_checkpoint.monitor=val/accc: the run never logs that metric; monitor one "
                              "of train/loss, train/acc, val/loss, val/acc, val/f1_macro, val/acc_best, epoch, step.")
    assert not (tmp_path / "run").exists()


def test_the_declared_metric_names_are_those_the_module_logs(toy, tmp_path, monkeypatch):
    """TextClassifierModule.LOGGED_METRICS (what `check_monitors` accepts) is every name the module logs in a fit and
    a test, and no other."""
    logged = set()
    log, log_dict = TextClassifierModule.log, TextClassifierModule.log_dict

    def spy_log(self, name, *args, **kwargs):
        logged.add(name)
        return log(self, name, *args, **kwargs)

    def spy_log_dict(self, dictionary, *args, **kwargs):
        logged.update(dictionary)
        return log_dict(self, dictionary, *args, **kwargs)

    monkeypatch.setattr(TextClassifierModule, "log", spy_log)
    monkeypatch.setattr(TextClassifierModule, "log_dict", spy_log_dict)
    run_in_process(toy, tmp_path / "run", "trainer.max_steps=2", "trainer.val_check_interval=2", "callbacks=none")
    assert logged == set(TextClassifierModule.LOGGED_METRICS)


@pytest.mark.parametrize("override, message", [
    ("callbacks.model_checkpoint.mode=sideways",
     "invalid callbacks config: callbacks.model_checkpoint: `mode` can be min, max but got sideways"),
    ("+callbacks.bogus._target_=nope.Nope", "invalid callbacks config: callbacks.bogus._target_ cannot be imported "
                                            "(Error loading 'nope.Nope': ModuleNotFoundError(\"No module named 'nope'\")"),
    ("+callbacks.model_checkpoint.every=3",
     "invalid callbacks config: callbacks.model_checkpoint: got an unexpected keyword argument 'every'"),
    ("callbacks.model_checkpoint.save_top_k=-2",
     "invalid callbacks config: callbacks.model_checkpoint: Invalid value for save_top_k=-2. Must be >= -1"),
    ("callbacks.learning_rate_monitor.logging_interval=hour",
     "invalid callbacks config: callbacks.learning_rate_monitor: logging_interval should be `step` or `epoch`"),
    ("callbacks.model_checkpoint.monitor=val/nope", "callbacks.model_checkpoint.monitor=val/nope: the run never logs "
                                                   "that metric; monitor one of train/loss, train/acc, val/loss,"),
    ("callbacks.model_checkpoint.monitor=test/acc", "callbacks.model_checkpoint.monitor=test/acc: the run logs that "
                                                   "metric only while testing, after the fit; monitor one of"),
    ("+callbacks.stop={_target_:pytorch_lightning.callbacks.EarlyStopping,monitor:val/accc}",
     "callbacks.stop.monitor=val/accc: the run never logs that metric"),
    ("+callbacks.stop={_target_:pytorch_lightning.callbacks.EarlyStopping}",
     "invalid callbacks config: callbacks.stop: missing a required argument: 'monitor'"),
    # validation off, yet the checkpoint's monitor (or the metric returned to a sweeper) is a val/* metric: the run
    # trained and tested, then ended in an error about optimized_metric
    ("trainer.limit_val_batches=0", "trainer.limit_val_batches=0 switches validation off, but "
                                    "callbacks.model_checkpoint.monitor=val/acc needs it: validate on some batches"),
    ("trainer.limit_val_batches=0 callbacks=none", "trainer.limit_val_batches=0 switches validation off, but "
                                                   "optimized_metric=val/acc_best needs it"),
    ("+trainer.enable_checkpointing=false", "invalid trainer config: Trainer was configured with "
                                            "`enable_checkpointing=False` but found `ModelCheckpoint` in callbacks"),
])
def test_callbacks_are_built_and_checked_before_any_data_work(override, message):
    """The config check builds the callbacks (their constructors' checks, and each `monitor` against
    TextClassifierModule.LOGGED_METRICS) and the trainer with them: one ConfigError naming the key, before any data,
    model or output-dir work (these used to pass the check and fail mid-run, or as a raw traceback)."""
    with pytest.raises(ConfigError) as err:
        check_config(compose_cfg(["model=tiny", *override.split()]))
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("override, torch_version, visible, why", [
    ("trainer=gpu", "2.13.0+cpu", None, "(the installed torch 2.13.0+cpu is a CPU-only build)"),
    ("trainer=ddp", "2.13.0", "", "(CUDA_VISIBLE_DEVICES='' hides every GPU)"),
    ("trainer.accelerator=cuda", "2.13.0+cu126", "-1", "(CUDA_VISIBLE_DEVICES='-1' hides every GPU)"),
    ("trainer=gpu", "2.13.0+rocm6.2", None, None),  # not certain without torch: left to Lightning's check
])
def test_a_gpu_trainer_where_torch_has_no_gpu_is_refused_before_torch_loads(monkeypatch, override, torch_version,
                                                                            visible, why):
    """`trainer=gpu` on a machine without CUDA answered after Lightning loaded (15 s on a loaded core) with
    Lightning's "No supported gpu backend found!": the torch-free check answers with the reason and trainer=cpu."""
    from attnbench.config import check_accelerator

    monkeypatch.setattr("importlib.metadata.version", lambda name: torch_version)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    accelerator = compose_cfg(["model=tiny", override]).trainer.accelerator
    if why is None:
        check_accelerator(accelerator)
        return
    with pytest.raises(ConfigError) as err:
        check_accelerator(accelerator)
    accelerator = "cuda" if override.endswith("cuda") else "gpu"
    assert str(err.value) == (f"trainer.accelerator={accelerator}: this machine has no GPU that torch can use {why}. "
                              "Use trainer=cpu (or trainer.accelerator=auto).")


def test_a_value_lightning_refuses_inside_the_fit_is_one_config_error():
    """A ValueError raised in Lightning's own code during the fit is Lightning's word on a setting (one line); a
    ValueError from elsewhere (the model's or data's code) is a bug and keeps its traceback."""
    from pytorch_lightning.utilities.combined_loader import CombinedLoader

    from attnbench.run.failures import FailureHandler
    from attnbench.run.resume import InterruptCheckpoint

    handler = FailureHandler(compose_cfg(["model=tiny"]), Path("unused"), InterruptCheckpoint(Path("unused")))
    with pytest.raises(ValueError) as err:
        CombinedLoader([[1]], mode="sideways")
    shown = handler.translate(err.value)
    assert isinstance(shown, ConfigError)
    assert str(shown).startswith("invalid trainer or callbacks config: Unsupported mode 'sideways', please select")
    assert handler.translate(ValueError("a bug in the model's code")) is None


def test_an_early_stopping_that_may_miss_its_metric_passes_the_check():
    check_config(compose_cfg(["model=tiny", "+callbacks.stop={_target_:pytorch_lightning.callbacks.EarlyStopping,"
                                            "monitor:val/accc,strict:false}"]))
    # no validation, and nothing that needs it
    check_config(compose_cfg(["model=tiny", "trainer.limit_val_batches=0", "callbacks=none", "optimized_metric=null"]))


def test_checkpoint_write_failure_names_the_path_and_keeps_the_metrics(toy, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").write_text("a file where the checkpoint folder should be")  # like a disk that refuses
    with pytest.raises(OutputWriteError) as err:
        run_in_process(toy, out, "trainer.max_steps=4", "trainer.val_check_interval=2")
    msg = str(err.value)
    assert msg.startswith(f"Could not write {out / 'checkpoints'}: File exists. Free disk space or make it writable")
    assert f"metrics so far are in {out / 'csv'} and {out / 'failure.json'}" in msg
    failure = json.loads((out / "failure.json").read_text())
    assert failure["metrics_so_far"]["val/acc"] >= 0 and failure["error_type"] == "OutputWriteError"
    assert "val/acc" in (out / "csv" / "metrics.csv").read_text().splitlines()[0]


# ------------------------------------------------------------------------------------------ output dirs
def test_a_finished_run_dir_is_never_reused(toy, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.json").write_text('{"test/acc": 0.9}')
    with pytest.raises(ConfigError) as err:
        run_in_process(toy, out, "trainer.max_steps=2")
    assert str(err.value).startswith(f"{out} already holds a previous run's outputs (metrics.json); it is never "
                                     "overwritten. Choose another output dir (hydra.run.dir=...)")
    assert (out / "metrics.json").read_text() == '{"test/acc": 0.9}'


def _claim(args):
    path, barrier = args
    barrier.wait()
    return str(claim_dir(Path(path), ".hydra"))


def test_jobs_racing_for_one_dir_get_distinct_ones(tmp_path):
    wanted = tmp_path / "2026-01-01_10-00-00_scaled_dot-sst2-s0"
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(6)
        with ctx.Pool(6) as pool:
            got = pool.map(_claim, [(str(wanted), barrier)] * 6)
    assert sorted(got) == sorted([str(wanted)] + [f"{wanted}_{i}" for i in range(2, 7)])
    assert all((Path(d) / ".hydra").is_dir() for d in got)


def test_fresh_output_dir_moves_a_run_off_a_taken_dir(tmp_path):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfgs = [compose("train", overrides=[f"hydra.run.dir={tmp_path / 'run'}"], return_hydra_config=True)
                for _ in range(2)]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.log").write_text("an earlier run")
    for cfg in cfgs:
        FreshOutputDir().on_run_start(cfg)
    assert [cfg.hydra.run.dir for cfg in cfgs] == [str(tmp_path / "run_2"), str(tmp_path / "run_3")]
    assert (tmp_path / "run" / "train.log").read_text() == "an earlier run"


def test_ddp_worker_processes_share_rank_zeros_dir(tmp_path):
    """Lightning re-launches train.py for DDP ranks with rank 0's dir and output_subdir=.pl_ddp_hydra_<rank>."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.log").write_text("rank 0 is running")
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"hydra.run.dir={tmp_path / 'run'}", "hydra.output_subdir=.pl_ddp_hydra_1"],
                      return_hydra_config=True)
    FreshOutputDir().on_run_start(cfg)
    assert cfg.hydra.run.dir == str(tmp_path / "run") and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def _cli(args, env_extra=None, timeout=180):
    env = {**os.environ, "WANDB_MODE": "offline", **(env_extra or {})}
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "train.py", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=env, timeout=timeout, check=False)


@pytest.mark.slow
def test_a_rerun_through_hydra_gets_its_own_dir(tmp_path):
    """A re-run with the run dir of an earlier job: the new job writes next to it and touches none of its files."""
    run_dir = tmp_path / "2026-01-01_10-00-00_scaled_dot-sst2-s0"
    earlier = {".hydra/overrides.yaml": "- model.n_heads=4\n", "train.log": "[..][attnbench][INFO] Summary: {}\n",
               "metrics.json": '{"test/acc": 0.8}'}
    for name, text in earlier.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(text)
    proc = _cli(["logger=none", f"hydra.run.dir={run_dir}", "model.n_heads=5"])
    assert proc.returncode == 1, proc.stderr
    assert f"{run_dir} already holds another run; this one writes to {run_dir}_2" in proc.stderr
    assert {name: (run_dir / name).read_text() for name in earlier} == earlier
    assert sorted(d.name for d in tmp_path.iterdir()) == [run_dir.name, run_dir.name + "_2"]
    new = tmp_path / (run_dir.name + "_2")
    assert "model.n_heads=5" in (new / ".hydra" / "overrides.yaml").read_text()
    assert "is not divisible by n_heads=5" in (new / "train.log").read_text()


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_a_failing_job_does_not_stop_the_sweep(toy, tmp_path):
    """Job 1 of 3 has a bad config: jobs 0 and 2 still train; then one line per failed job and exit code 1.
    The sweep dir is taken by an earlier sweep, so this one goes next to it."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("an earlier sweep")
    proc = _cli(["-m", *toy, "logger=csv", "trainer.max_steps=2", "model.n_heads=2,3,1", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert (sweep / "multirun.yaml").read_text() == "an earlier sweep"
    jobs = sorted((tmp_path / "sweep_2").glob("*_scaled_dot-toy-s0"))
    assert [j.name[0] for j in jobs] == ["0", "1", "2"]
    assert [(j / "metrics.json").is_file() for j in jobs] == [True, False, True]
    lines = proc.stderr[proc.stderr.index(f"Sweep {tmp_path / 'sweep_2'}: "):].splitlines()
    assert lines[0] == (f"Sweep {tmp_path / 'sweep_2'}: 3 jobs, 1 failed "
                        "(each failed job wrote error.json and failure.json in its dir)")
    assert lines[2].startswith(f"  failed  {jobs[1].name}  Error: invalid config: d_model=64 is not divisible by "
                               "n_heads=3; set model.d_model to a multiple")
    for line, job in ((lines[1], jobs[0]), (lines[3], jobs[2])):
        test_acc = json.loads((job / "metrics.json").read_text())["test/acc"]
        assert line.startswith(f"  ok      {job.name}  test/acc {test_acc:.4f}  train tokens/s "), line
    assert lines[4] == f"Report: attnbench report {tmp_path / 'sweep_2'}"
    failure = json.loads((jobs[1] / "failure.json").read_text())
    assert failure["status"] == "failed" and failure["where"] == "before training"
    assert lines[2].endswith(f"Error: {failure['error']}")
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------ signals
def _wandb_run(out: Path) -> dict:
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    wandb_bin = Path(sys.executable).with_name("wandb")
    proc = subprocess.run([str(wandb_bin), "leet", "inspect", "--summary", "--json", str(runs[0])],
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_sigterm_writes_a_checkpoint_finishes_wandb_and_exits_143(toy, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "train.py", *toy, "trainer.max_epochs=-1", "trainer.max_steps=100000", f"hydra.run.dir={out}"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    deadline = time.monotonic() + 180
    while not list(out.glob("checkpoints/*.ckpt")):  # validated and checkpointed once: training is under way
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "timeout"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, stdout[-3000:]
    ckpt = out / "checkpoints" / "interrupted.ckpt"
    match = re.search(r"Error: Interrupted by SIGTERM at step (\d+) \(epoch \d+\); checkpoint saved to (\S+)\. "
                      r"Resume with: python train\.py .*ckpt_path=(\S+)\.$", stdout, re.MULTILINE)
    assert match and match[2] == match[3] == str(ckpt), stdout[-3000:]
    assert f" hydra.run.dir={out} ckpt_path=" in stdout  # the resume continues in this run's dir
    assert "Traceback" not in stdout
    assert torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"] == int(match[1]) > 0
    failure = json.loads((out / "failure.json").read_text())
    assert failure["status"] == "interrupted" and failure["checkpoint"] == str(ckpt)
    assert not (out / "metrics.json").exists()
    run = _wandb_run(out)  # the offline W&B run was finished, marked failed with the exit code
    assert run["state"] == "failed" and run["exit_code"] == 143 and run["summary"]["val/acc"] > 0


def test_ctrl_c_writes_a_checkpoint_and_says_how_to_resume(toy, tmp_path, monkeypatch):
    """A real SIGINT to this process at step 5 (what Ctrl-C sends)."""
    real_forward = TextClassifierModule.forward

    def forward(self, input_ids, padding_mask, **kwargs):
        if self.training and self.global_step == 5:
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # handled before it returns
        return real_forward(self, input_ids, padding_mask, **kwargs)

    monkeypatch.setattr(TextClassifierModule, "forward", forward)
    out = tmp_path / "run"
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh process, whatever earlier tests set
    try:
        with pytest.raises(RunInterrupted) as err:
            run_in_process(toy, out, "trainer.max_steps=100")
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Lightning ignores further Ctrl-C after one
    ckpt = out / "checkpoints" / "interrupted.ckpt"
    assert err.value.exit_code == 130
    assert str(err.value) == (f"Interrupted by Ctrl-C (SIGINT) at step 5 (epoch 0); checkpoint saved to {ckpt}. "
                              f"Resume with: python train.py ckpt_path={ckpt}.")
    assert torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"] == 5
    assert json.loads((out / "failure.json").read_text())["status"] == "interrupted"


# ------------------------------------------------------------------------------------------ W&B
class _RefusingWandbServer(http.server.BaseHTTPRequestHandler):
    """Answers every request like a W&B server asked for an entity that does not exist."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"errors": [{"message": "entity no-such-team not found"}]}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def refusing_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingWandbServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture(autouse=True)
def _fresh_wandb():
    """wandb keeps its settings (server, key) per process: start each test from the environment it sets."""
    import wandb

    wandb.teardown()
    yield
    wandb.teardown()


# The two tests below pin "went offline without waiting for W&B's online start". Their time includes W&B
# starting its offline service (1.4 s idle, many times that on a loaded machine), so the online start is given
# an init_timeout far above any such time and the bound sits well below it: a run that waited for the timeout
# takes INIT_TIMEOUT s and fails; one that went offline at once passes however loaded the machine is.
INIT_TIMEOUT = 600
NOT_WAITED = INIT_TIMEOUT / 3


def _start_wandb(tmp_path, **kwargs):
    t0 = time.perf_counter()
    with pytest.warns(UserWarning) as caught:
        logger = make_wandb_logger(tmp_path, "run", {"seed": 0}, mode="online", init_timeout=INIT_TIMEOUT, **kwargs)
    try:
        return logger, " ".join(str(w.message) for w in caught), time.perf_counter() - t0
    finally:
        if logger is not None:
            logger.experiment.finish()


@pytest.mark.slow
def test_wandb_online_without_credentials_goes_offline_at_once(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    logger, warning, seconds = _start_wandb(tmp_path)
    assert logger is not None and logger.experiment.settings.mode == "offline"
    assert (f"W&B could not start online (no API key: set WANDB_API_KEY or run `wandb login`); this run logs "
            f"offline to {tmp_path / 'wandb'}") in warning
    assert seconds < NOT_WAITED, seconds


def test_wandb_server_unreachable_goes_offline_without_waiting(tmp_path, monkeypatch):
    # a port bound but not listening, held for the whole test: connections to it are refused, and no other
    # process can take it meanwhile (a port closed before use could be taken and answer)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
        logger, warning, seconds = _start_wandb(tmp_path)
        assert logger is not None and logger.experiment.settings.mode == "offline"
        assert f"W&B could not start online (cannot reach 127.0.0.1:{port} (ConnectionRefusedError" in warning
        assert seconds < NOT_WAITED, seconds  # the probe answered, not the init_timeout


def test_wandb_bad_entity_still_trains_and_logs_offline(toy, tmp_path, monkeypatch, refusing_server):
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", refusing_server)
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match=r"W&B could not start online \(.*entity no-such-team not found.*\); "
                                         r"this run logs offline to "):
        summary = train(compose_cfg([*toy, "trainer.max_steps=4", "logger.wandb.entity=no-such-team",
                                     "logger.wandb.init_timeout=20", f"+output_dir={out}"]))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["wandb_mode"] == "offline" and metrics["test/acc"] == summary["test/acc"]
    # what the sweep's summary reads to put the macro-F1 beside an imbalanced accuracy (the toy test set: 20 + 20)
    assert metrics["num_classes"] == 2 and metrics["test_largest_class_share"] == 0.5
    run = _wandb_run(out)
    assert run["state"] == "finished" and run["summary"]["test/acc"] == pytest.approx(summary["test/acc"])


def test_a_value_a_callback_refuses_is_one_config_error_naming_the_key():
    """`callbacks.attention_maps.n_sentences=0`: before, a ValueError traceback under "Error executing job";
    now a ConfigError (one `Error: ...` line on the command line) with the callback's own words."""
    from omegaconf import OmegaConf

    from attnbench.errors import ConfigError
    from attnbench.run.train import build

    node = OmegaConf.create({"_target_": "attnbench.viz.AttentionMapLogger", "n_sentences": 0})
    with pytest.raises(ConfigError) as err:
        build(node, "callbacks")
    assert str(err.value) == ("invalid callbacks config: callbacks.attention_maps: n_sentences and min_tokens must be "
                              ">= 1 and max_tokens >= min_tokens, got 0, 5, 16")


def test_a_bug_in_a_callback_constructor_keeps_its_own_exception():
    """A TypeError inside a constructor is a bug: the exception itself, not Hydra's wrapper, not a ConfigError."""
    from omegaconf import OmegaConf

    from attnbench.run.train import build

    node = OmegaConf.create({"_target_": "attnbench.viz.AttentionMapLogger", "n_sentences": [2]})
    with pytest.raises(TypeError) as err:
        build(node, "callbacks")
    assert "int() argument must be" in str(err.value)
    assert err.traceback[-1].name == "__init__"  # the constructor's own frame, not Hydra's wrapper


def _files(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of ``folder``: its bytes and mode."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mode) for p in sorted(folder.rglob("*"))
            if p.is_file()}


#: the cases of the test below run by default (one train.py process each): the issue's reproducer, a refusal by
#: the torch-free check, by the checkpoint's digest and inside the fit; CI runs every case (``slow``)
_DEFAULT_REFUSALS = ("seed=7", "trainer=gpu", "", "+callbacks.refuses._target_=tests.fault_callbacks.RefusesInTheFit")


@pytest.mark.parametrize("cases_run", ["default", pytest.param("all", marks=pytest.mark.slow)])
def test_a_command_refused_before_training_leaves_every_file_of_the_run_dir_as_it_was(toy, tmp_path, cases_run):
    """Issue 38: `seed=7 ckpt_path=last hydra.run.dir=<finished run>` was refused, yet Hydra had rewritten the
    run's .hydra/*.yaml (config.yaml said seed: 7) and an ERROR line was appended to its train.log. A command
    refused or failed before training (the dir holds a finished run, a value out of range, a checkpoint of another
    model, other settings than the run's own, a damaged checkpoint, a trainer Lightning refuses) ends in one line and
    leaves every byte of the dir as it was, with any hydra/job_logging (`default` writes <job name>.log through a
    plain logging.FileHandler), hydra.job.chdir."""
    finished, stopped = tmp_path / "finished", tmp_path / "stopped"
    base = [*toy, "logger=csv", "~callbacks.attention_diagnostics", "~callbacks.attention_maps"]
    proc = _cli([*base, "trainer.max_steps=4", "trainer.val_check_interval=2", f"hydra.run.dir={finished}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    import shutil

    shutil.copytree(finished, stopped)
    (stopped / "metrics.json").unlink()  # killed while testing: a run ckpt_path=last continues
    damaged = tmp_path / "damaged"
    shutil.copytree(stopped, damaged)
    last = (damaged / "checkpoints" / "last.ckpt").resolve()
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    flipped = tmp_path / "flipped"  # killed while testing, a byte of last.ckpt inverted: it still loads
    shutil.copytree(finished, flipped, symlinks=True)  # last.ckpt may link to the best file and its sidecar
    (flipped / "metrics.json").unlink()
    _flip_in_largest_tensor((flipped / "checkpoints" / "last.ckpt").resolve())
    cases = [
        # a trainer Lightning refuses, into an interrupted run: refused before any logger is built (the CSV log would
        # set metrics.csv aside as metrics.part1.csv, W&B would create wandb/offline-run-*) and before data work
        (stopped, ["trainer.devices=0", "logger=wandb"], "invalid trainer config: `Trainer(devices=0)` value is not"),
        *([] if torch.cuda.is_available() else [
            (stopped, ["trainer=gpu", "logger=wandb"], "this machine has no GPU that torch can use (")]),
        (finished, ["seed=7"], f"{finished} already holds a previous run's outputs (metrics.json)"),
        (finished, ["seed=7", "hydra/job_logging=default"], f"{finished} already holds a previous run's outputs"),
        (stopped, ["optim.lr=-1"], "holds a run with other settings than this command's (1 differ: optim.lr: "),
        (stopped, ["optim.lr=-1", "hydra.output_subdir=null"], "optim.lr must be a number > 0, got -1"),
        (stopped, ["optim.lr=-1", "hydra/job_logging=default", "hydra.job.chdir=true"], "optim.lr: "),
        (stopped, ["seed=7"], "(1 differ: seed: 0 -> 7); a resumed run keeps its seed, model, attention, data"),
        (stopped, ["model=small"], "holds a run with other settings than this command's"),
        (stopped, ["model=small", "hydra.output_subdir=null"], "holds the weights of another model than this run"),
        (damaged, [], "is not a readable checkpoint (truncated or damaged"),
        (flipped, [], "is not a readable checkpoint (truncated or damaged: its SHA-256 differs from the one written "
                      "with it in "),
        # failed inside Lightning's fit before the first new step (the .hydra/ files, train.log, csv/ and failure.json
        # were written, and val_check_interval=0 left a ZeroDivisionError traceback and an interrupted.ckpt):
        # refused by the config check, or once the data's batch count is known, before any write
        (stopped, ["callbacks.model_checkpoint.monitor=val/nope"],
         "callbacks.model_checkpoint.monitor=val/nope: the run never logs that metric; monitor one of"),
        (stopped, ["trainer.val_check_interval=0"], "trainer.val_check_interval must be a fraction in (0, 1] of an"),
        (stopped, ["trainer.val_check_interval=1000"], "trainer.val_check_interval=1000 is more than the 22 training "
                                                       "batches of an epoch: set it to at most 22,"),
        (stopped, ["callbacks.model_checkpoint.mode=sideways"], "callbacks.model_checkpoint: `mode` can be min, max"),
        # any other refusal inside the fit before training starts (here a callback's): the
        # loggers and the held files are written only once training starts
        (stopped, ["+callbacks.refuses._target_=tests.fault_callbacks.RefusesInTheFit", "logger=wandb"],
         "invalid trainer or callbacks config: this run is refused inside the fit, before its first training step"),
    ]
    if cases_run == "default":
        cases = [case for case in cases if (case[1] or [""])[0] in _DEFAULT_REFUSALS and case[0] is not damaged
                 and not (case[0] is stopped and case[1] == ["seed=7"])]
        assert len(cases) == 4 + (not torch.cuda.is_available()), cases
    for run_dir, extra, message in cases:
        before = _files(run_dir)
        proc = _cli([*base, "trainer.max_steps=4", "trainer.val_check_interval=2", *extra, "ckpt_path=last",
                     f"hydra.run.dir={run_dir}"])
        assert proc.returncode == 1, (extra, proc.stderr[-3000:])
        errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and message in errors[0], (extra, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr
        if "another model" in message:  # refused from the checkpoint's own sizes, before the data loads
            assert "Parquet" not in proc.stdout + proc.stderr and "tokeniz" not in proc.stdout + proc.stderr, extra
        assert _files(run_dir) == before, extra
        assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged", "finished", "flipped", "stopped"], extra


@pytest.mark.parametrize("where", [  # two of the four cases by default (each is a train.py process)
    "hydra.run.dir={file}", pytest.param("hydra.run.dir={file}/run", marks=pytest.mark.slow),
    pytest.param("hydra.run.dir={file} ckpt_path=last", marks=pytest.mark.slow), "-m hydra.sweep.dir={file} seed=0,1"])
def test_an_output_dir_that_is_a_file_is_refused_in_one_line(tmp_path, where):
    """`hydra.run.dir=<an existing regular file>` trained silently into `<file>_2`; a path through a file, a resume
    and a sweep dir alike now end in one line naming the file, before anything is written or loaded."""
    file = tmp_path / "notes.txt"
    file.write_text("a file")
    args = where.format(file=file).split()
    proc = _cli([*[a for a in args if a == "-m"], "logger=none", *[a for a in args if a != "-m"]], timeout=120)
    what = "it is a file, not a folder" if where.endswith(("{file}", "ckpt_path=last", "seed=0,1")) else \
        f"{file} is a file, not a folder"
    key = "hydra.sweep.dir" if "-m" in args else "hydra.run.dir"
    target = file / "run" if "/run" in where else file
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == (
        f"Error: cannot create the output dir {target}: {what}. Choose a writable {key}=<dir>."), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and file.read_text() == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_damaged_checkpoint_is_named_in_one_whole_sentence(tmp_path):
    """torch.load's text was cut at 160 characters mid-sentence (`... in order to u`): the message quotes whole
    sentences of it only, or its exception type alone, and says what to do."""
    from attnbench.run.resume import load_checkpoint

    garbage = tmp_path / "checkpoints" / "last.ckpt"
    garbage.parent.mkdir()
    garbage.write_bytes(b"not a checkpoint " * 20)
    with pytest.raises(ConfigError) as err:
        load_checkpoint(garbage)
    assert str(err.value) == (f"{garbage} is not a readable checkpoint (truncated or damaged: torch.load raised "
                              f"RuntimeError); resume from another .ckpt file of {garbage.parent} (ckpt_path=<file>), "
                              "or start afresh.")


def _tree(folder: Path) -> tuple[dict[str, bytes], list[str]]:
    """Every file's bytes and every directory of ``folder``."""
    return _files(folder), sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_dir())


@pytest.mark.slow  # a sweep and two refused sweeps, each a train.py -m process; the single run's case above is default
def test_a_refused_sweep_resume_leaves_every_file_of_the_sweep_dir_as_it_was(toy, tmp_path):
    """A sweep resumed into a finished sweep dir (`-m ... ckpt_path=last hydra.sweep.dir=<sweep>`) whose jobs
    had all finished (each job dir holds a finished run), with either job_logging, ends with the jobs listed as
    done and exit code 0; another sweep (`seed=7,8`) into that dir is refused before Hydra writes anything. Both
    leave every file and folder of the sweep dir as it was: Hydra's multirun.yaml and each job's .hydra/ copy and
    log file, the jobs' records; nothing is left next to it. A resume whose job trains moves the sweep's new
    multirun.yaml and records in."""
    sweep = tmp_path / "sweep"
    base = [*toy, "logger=csv", "~callbacks.attention_diagnostics", "~callbacks.attention_maps",
            "trainer.max_steps=2", "trainer.val_check_interval=2"]
    proc = _cli(["-m", *base, "seed=0,1", f"hydra.sweep.dir={sweep}"], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in sweep.glob("*/metrics.json")) == ["metrics.json"] * 2
    done = f"Sweep {sweep}: 2 jobs, 0 failed, 2 done before (skipped, results kept)"
    for extra, message in ((["seed=0,1"], done), (["seed=0,1", "hydra/job_logging=default"], done),
                           (["seed=7,8"], f"Error: {sweep} already holds a previous sweep's outputs (the sweep of "
                                          f"`{' '.join(sorted([*base, 'seed=0,1']))}`); it is never overwritten.")):
        before = _tree(sweep)
        proc = _cli(["-m", *base, *extra, "ckpt_path=last", f"hydra.sweep.dir={sweep}"], timeout=300)
        assert proc.returncode == (0 if message == done else 1), (extra, proc.stderr[-3000:])
        assert message in proc.stdout + proc.stderr and "Traceback" not in proc.stderr, (extra, proc.stderr[-3000:])
        if message == done:
            assert len(re.findall(r"^  done    \d_scaled_dot-toy-s\d  test/acc 0\.\d{4}  ", proc.stdout,
                                  re.MULTILINE)) == 2, proc.stdout[-3000:]
        assert _tree(sweep) == before, extra
        assert [p.name for p in tmp_path.iterdir()] == ["sweep"], extra
    job = next(sweep.glob("1_*"))
    (job / "metrics.json").unlink()  # job 1 resumes from its last checkpoint, job 0 is done
    log_before = (job / "train.log").read_text()
    proc = _cli(["-m", *base, "seed=0,1", "hydra/job_logging=default", "ckpt_path=last", f"hydra.sweep.dir={sweep}"],
                timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"Sweep {sweep}: 2 jobs, 0 failed, 1 done before" in proc.stdout, proc.stdout[-3000:]
    records = [json.loads(p.read_text()) for p in sorted((sweep / ".attnbench-jobs").glob("*.json"))]
    assert [(r["num"], r["status"], r["trained"]) for r in records] == [(0, "completed", False),
                                                                        (1, "completed", True)]
    multirun = (sweep / "multirun.yaml").read_text()
    assert "- ckpt_path=last" in multirun and f"dir: {sweep}\n" in multirun
    assert (job / "metrics.json").is_file() and (job / "train.log").read_text() == log_before
    assert "Resuming from" in (job / "cli.log").read_text()  # hydra/job_logging=default: <job name>.log
    assert "class: logging.FileHandler" in (job / ".hydra" / "hydra.yaml").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["sweep"]


def test_a_resumed_sweep_skips_its_finished_jobs_as_done_and_exits_0(toy, tmp_path):
    """A resumed sweep whose jobs had finished refused them ("already holds a previous run's outputs") and exited 1.
    Each is done, as `attnbench reproduce` counts it: skipped before torch loads, its dir kept byte for byte,
    listed as `done` with its figures (the macro-F1 beside test/acc on an imbalanced test set, as in a single
    run's summary), and the sweep exits 0."""
    sweep = tmp_path / "sweep"
    overrides = [*toy, "logger=none", "seed=0,1"]
    (sweep).mkdir()
    (sweep / "multirun.yaml").write_text(json.dumps({"hydra": {"overrides": {"task": overrides}}}))
    figures = {0: {"test/acc": 0.9, "test/f1_macro": 0.55, "num_classes": 2, "test_largest_class_share": 0.9,
                   "train/tokens_per_sec": 1234.0},
               1: {"test/acc": 0.75, "test/f1_macro": 0.74, "num_classes": 2, "test_largest_class_share": 0.5}}
    for seed, metrics in figures.items():
        (sweep / f"{seed}_scaled_dot-toy-s{seed}").mkdir()
        (sweep / f"{seed}_scaled_dot-toy-s{seed}" / "metrics.json").write_text(json.dumps(metrics))
    before = _tree(sweep)
    proc = _cli(["-m", *overrides, "ckpt_path=last", f"hydra.sweep.dir={sweep}"], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-4:] == [
        f"Sweep {sweep}: 2 jobs, 0 failed, 2 done before (skipped, results kept)",
        "  done    0_scaled_dot-toy-s0  test/acc 0.9000 (macro-F1 0.5500)  train tokens/s 1,234  test tokens/s -",
        "  done    1_scaled_dot-toy-s1  test/acc 0.7500  train tokens/s -  test tokens/s -",
        f"Report: attnbench report {sweep}"], proc.stdout[-3000:]
    assert _tree(sweep) == before and [p.name for p in tmp_path.iterdir()] == ["sweep"]


def test_a_sweep_resumes_only_the_sweep_its_dir_holds(tmp_path):
    """`-m ... ckpt_path=last hydra.sweep.dir=<dir>` resumes the sweep of <dir>'s multirun.yaml: the same task
    overrides in any order (ckpt_path and launcher aside), or any sweep when multirun.yaml is the empty claim of a
    sweeper that records none (Optuna); another sweep, or a dir with no multirun.yaml, is refused before Hydra
    writes."""
    from omegaconf import OmegaConf

    from attnbench.errors import OutputDirTaken
    from attnbench.run.hydra_callbacks import check_same_sweep

    def command(*overrides: str):  # what check_same_sweep reads of a multirun's config, as Hydra makes it
        return OmegaConf.create({"hydra": {"overrides": {"task": list(overrides), "hydra": []}}})

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    OmegaConf.save(command("model=tiny", "seed=0,1"), sweep / "multirun.yaml")
    for same in (["seed=0,1", "model=tiny", "ckpt_path=last"], ["model=tiny", "seed=0,1", "ckpt_path=/a/last.ckpt"],
                 ["model=tiny", "seed=0,1", "ckpt_path=last", "launcher=cores"]):
        check_same_sweep(command(*same), sweep)
    for other in (["model=tiny", "seed=7,8", "ckpt_path=last"], ["model=tiny", "seed=0,1", "optim.lr=1e-3"]):
        with pytest.raises(OutputDirTaken, match=r"sweep already holds a previous sweep's outputs \(the sweep of "
                                                 r"`model=tiny seed=0,1`\); it is never overwritten"):
            check_same_sweep(command(*other), sweep)
    (sweep / "multirun.yaml").write_text("")
    check_same_sweep(command("seed=7,8", "ckpt_path=last"), sweep)
    (sweep / "multirun.yaml").unlink()
    (sweep / "metrics.json").write_text("{}")
    with pytest.raises(OutputDirTaken, match=r"\(no readable multirun.yaml\)"):
        check_same_sweep(command("seed=0,1", "ckpt_path=last"), sweep)


def test_an_output_dir_that_cannot_be_created_is_one_line(tmp_path):
    proc = _cli(["logger=none", "hydra.run.dir=/proc/attnbench-x"])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("Error: cannot create the output dir /proc/attnbench-x")


def test_a_checkpoint_write_that_fails_or_is_killed_leaves_the_previous_file_whole(tmp_path, monkeypatch):
    """Issue 38 #3/#4: a kill or a full disk during a checkpoint write left a truncated last.ckpt (the good one
    gone) and temp files in $TMPDIR, and the message named Lightning's temp file. The write goes to a temporary
    file in the checkpoint's own folder, then os.replace; a failed write removes it and names the checkpoint."""
    import errno

    from attnbench.run import resume
    from attnbench.run.resume import AtomicCheckpointIO, load_checkpoint

    folder = tmp_path / "checkpoints"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 13, "state_dict": {"w": torch.ones(1000)}}, folder / "last.ckpt")
    good = (folder / "last.ckpt").read_bytes()

    def disk_full(obj, file):  # torch.save into the open temporary file, as a full disk makes Python's write fail
        file.write(b"half a checkpoint")
        file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(resume.torch, "save", disk_full)
    with pytest.raises(OSError) as err:
        io.save_checkpoint({"global_step": 26}, folder / "last.ckpt")
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(folder / "last.ckpt")
    assert (folder / "last.ckpt").read_bytes() == good
    assert sorted(p.name for p in folder.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]
    monkeypatch.undo()
    # a kill in the middle of the write (SIGKILL: no clean-up runs): the previous file is whole and still the one
    # `ckpt_path=last` takes; the partial write lies in checkpoints/ under a name no resume picks
    script = (f"import os, signal, torch\nfrom attnbench.run import resume\n"
              f"def killed(obj, file):\n    file.write(b'half')\n    file.flush()\n    os.kill(os.getpid(), signal.SIGKILL)\n"
              f"resume.torch.save = killed\n"
              f"resume.AtomicCheckpointIO().save_checkpoint({{'global_step': 26}}, {str(folder / 'last.ckpt')!r})\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (folder / "last.ckpt").read_bytes() == good
    assert resume.resolve_checkpoint("last", tmp_path) == str(folder / "last.ckpt")
    assert load_checkpoint(folder / "last.ckpt")["global_step"] == 13
    # a damaged file is named in one line
    (folder / "last.ckpt").write_bytes(good[: len(good) // 2])
    with pytest.raises(ConfigError, match=r"last\.ckpt is not a readable checkpoint \(truncated or damaged"):
        load_checkpoint(folder / "last.ckpt")


def _flip_in_largest_tensor(path: Path) -> None:
    """Invert one byte in the middle of the largest tensor's bytes of the checkpoint ``path`` (its zip entry is
    stored uncompressed): the file keeps its length and still loads."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as file:
        file.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", file.read(4))
        at = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
        file.seek(at)
        byte = file.read(1)[0]
        file.seek(at)
        file.write(bytes([byte ^ 0xFF]))


def test_a_checkpoint_with_a_flipped_byte_is_named_in_one_line_by_its_sidecar(tmp_path):
    """A checkpoint with one byte of a tensor inverted still loads (torch.load does not check the zip's CRCs): a
    resume from it would go on from other weights. Every checkpoint gets a sha256sum-format sidecar; a load that finds
    the bytes changed ends in one ConfigError naming the file and its sidecar, through attnbench's load and
    through Lightning's (AtomicCheckpointIO.load_checkpoint: trainer.fit and trainer.test) and the report's
    attention maps."""
    from attnbench.run.resume import AtomicCheckpointIO, load_checkpoint
    from attnbench.viz.attention_maps import load_model

    folder = tmp_path / "checkpoints"
    ckpt = folder / "epoch00-step13.ckpt"
    io = AtomicCheckpointIO()
    weights = torch.arange(10_000, dtype=torch.float32)
    io.save_checkpoint({"global_step": 13, "state_dict": {"w": weights}}, ckpt)
    side = folder / "epoch00-step13.ckpt.sha256"
    proc = subprocess.run(["sha256sum", "-c", side.name], cwd=folder, capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout == "epoch00-step13.ckpt: OK\n", proc.stdout + proc.stderr
    assert torch.equal(load_checkpoint(ckpt)["state_dict"]["w"], weights)

    _flip_in_largest_tensor(ckpt)
    silently = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]["w"]
    assert silently.shape == weights.shape and not torch.equal(silently, weights)  # what a resume trained on
    message = (f"{ckpt} is not a readable checkpoint (truncated or damaged: its SHA-256 differs from the one written "
               f"with it in {side.name}; delete that file to load it unchecked); resume from another .ckpt file of "
               f"{folder} (ckpt_path=<file>), or start afresh.")
    for load in (load_checkpoint, io.load_checkpoint, load_model):  # resume, trainer.fit/test, attention maps
        with pytest.raises(ConfigError) as err:
            load(ckpt)
        assert str(err.value) == message
    # a sidecar that is not a digest is named too
    side.write_text("garbage\n")
    with pytest.raises(ConfigError, match=r"its digest file epoch00-step13\.ckpt\.sha256 holds no SHA-256 digest"):
        load_checkpoint(ckpt)
    # ModelCheckpoint dropping a superseded file removes its sidecar as well
    io.remove_checkpoint(ckpt)
    assert list(folder.iterdir()) == []


def test_a_checkpoint_without_a_sidecar_loads_unchecked_and_a_lone_sidecar_is_harmless(tmp_path):
    """A checkpoint written before sidecars (none beside it) loads as before; a sidecar whose checkpoint is gone
    neither counts as a checkpoint for ckpt_path=last nor crashes a load of the missing file."""
    from attnbench.run import resume
    from attnbench.run.resume import AtomicCheckpointIO, load_checkpoint

    folder = tmp_path / "checkpoints"
    old = folder / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 5, "state_dict": {"w": torch.ones(100)}}, old)
    (folder / "last.ckpt.sha256").unlink()
    _flip_in_largest_tensor(old)  # unchecked: its damage goes unseen, as before sidecars
    assert load_checkpoint(old)["global_step"] == 5
    assert AtomicCheckpointIO().load_checkpoint(old)["global_step"] == 5

    lone = tmp_path / "lone" / "checkpoints"
    lone.mkdir(parents=True)
    (lone / "last.ckpt.sha256").write_text("0" * 64 + "  last.ckpt\n")
    assert resume.resolve_checkpoint("last", lone.parent) is None
    with pytest.raises(ConfigError, match=r"last\.ckpt is not a readable checkpoint \(truncated or damaged: "
                                          r"torch\.load raised FileNotFoundError"):
        load_checkpoint(lone / "last.ckpt")


def test_a_resume_keeps_the_settings_of_the_run_it_continues(tmp_path):
    """`ckpt_path=last hydra.run.dir=<run>` with other settings than the run's saved .hydra/config.yaml is refused
    before Hydra writes, naming each differing key of seed, model, attention, data and optim; the length of
    training, the trainer, callbacks, logger, tags and the loader's workers may change."""
    from omegaconf import OmegaConf

    from attnbench.errors import ConfigError
    from attnbench.run.hydra_callbacks import check_same_run

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    saved = {"seed": 0, "ckpt_path": None, "optim": {"lr": 0.001}, "trainer": {"max_steps": 10},
             "data": {"num_workers": 0, "max_length": 64}, "logger": {"_target_": "csv"}, "tags": []}
    OmegaConf.save(OmegaConf.create(saved), run / ".hydra" / "config.yaml")

    def command(**changes):
        cfg = OmegaConf.merge(OmegaConf.create(saved), OmegaConf.create(changes))
        cfg.hydra = {"output_subdir": ".hydra"}
        return cfg

    check_same_run(command(ckpt_path="last", trainer={"max_steps": 50}, data={"num_workers": 2},
                           logger={"_target_": "wandb", "offline": True}, tags=["x"],
                           callbacks={"kill": {"epoch": 1}}), run)
    with pytest.raises(ConfigError, match=r"\(2 differ: data.max_length: 64 -> 32; seed: 0 -> 7\); a resumed run "
                                          r"keeps its seed, model, "
                                          r"attention, data, optim settings"):
        check_same_run(command(ckpt_path="last", seed=7, data={"max_length": 32}), run)
    with pytest.raises(ConfigError, match=r"\(1 differ: optim.lr: 0.001 -> 0.01\)"):
        check_same_run(command(optim={"lr": 0.01}), run)
    check_same_run(command(seed=7), tmp_path / "elsewhere")  # no saved config: nothing to compare
    unsaved = command(seed=7)
    unsaved.hydra.output_subdir = None
    check_same_run(unsaved, run)  # hydra.output_subdir=null: not checked


@pytest.mark.parametrize("killed_after", ["first sidecar", "rename"])
def test_a_checkpoint_replaced_and_killed_at_any_step_keeps_a_sidecar_that_holds_its_digest(tmp_path, monkeypatch,
                                                                                           killed_after):
    """A fresh tester killed a run while it replaced last.ckpt: the old sidecar was removed before the rename and
    the new one written after, so a kill in between (about 10 ms a save) left last.ckpt unchecked, and a byte
    flipped later resumed silently. Now the sidecar lists the old and the new digest across the rename: the file
    left by a kill after either step matches its sidecar, and a flipped byte in it is still refused."""
    from attnbench.digests import mismatch
    from attnbench.run import resume
    from attnbench.run.resume import AtomicCheckpointIO, load_checkpoint

    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 4, "state_dict": {"w": torch.zeros(10_000)}}, ckpt)
    real_replace, real_write = resume.replace_checked.__globals__["os"].replace, \
        resume.replace_checked.__globals__["write_sidecar"]

    class Killed(BaseException):
        pass

    def write(*args, **kwargs):
        real_write(*args, **kwargs)
        if killed_after == "first sidecar":
            raise Killed

    def replace(src, dst):  # the checkpoint's rename (the sidecar's own write renames a temporary file too)
        real_replace(src, dst)
        if killed_after == "rename" and str(dst).endswith(".ckpt"):
            raise Killed

    monkeypatch.setitem(resume.replace_checked.__globals__, "write_sidecar", write)
    monkeypatch.setattr(resume.replace_checked.__globals__["os"], "replace", replace)
    with pytest.raises(Killed):
        io.save_checkpoint({"global_step": 8, "state_dict": {"w": torch.ones(10_000)}}, ckpt)
    monkeypatch.undo()
    assert (tmp_path / "checkpoints" / "last.ckpt.sha256").is_file() and mismatch(ckpt) is None
    assert load_checkpoint(ckpt)["global_step"] == (4 if killed_after == "first sidecar" else 8)
    _flip_in_largest_tensor(ckpt)
    with pytest.raises(ConfigError, match="its SHA-256 differs from the one written with it in last.ckpt.sha256"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_last_checkpoint_left_in_a_finished_run_is_kept_not_loaded(tmp_path, damage):
    """A fresh tester resumed into a dir whose last.ckpt was damaged, from another dir's finished checkpoint: the run
    trained no step, tested, wrote metrics.json, then the step that links last.ckpt to the best checkpoint
    torch.loaded the damaged file and ended in a PytorchStreamReader traceback beside the finished metrics. A file
    that does not load or differs from its sidecar is not the best one's twin: both files stay as they are."""
    from attnbench.run.outputs import link_last_to_best
    from attnbench.run.resume import AtomicCheckpointIO

    folder = tmp_path / "checkpoints"
    io = AtomicCheckpointIO()
    state = {"global_step": 13, "state_dict": {"w": torch.ones(10_000)}}
    best, last = folder / "epoch00-step13.ckpt", folder / "last.ckpt"
    io.save_checkpoint(state, best)
    io.save_checkpoint(state, last)
    if damage == "truncated":
        last.write_bytes(last.read_bytes()[:1000])
    else:
        _flip_in_largest_tensor(last)
    before = last.read_bytes()
    assert link_last_to_best(best, last) is False
    assert not last.is_symlink() and last.read_bytes() == before
