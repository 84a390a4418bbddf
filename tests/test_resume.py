"""Resume after a hard kill, and determinism: same seed, same metrics (CPU, trainer.deterministic=true)."""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnbench.run.resume import ResumeState

from .conftest import REPO_ROOT, train_env

# The run of issue 10 §4 (13 batches an epoch). Under max_steps epoch 0 is its best epoch, so a resume that
# forgets the best checkpoint tests a later, worse one (under max_epochs, with today's data, epoch 2 is).
RUN = [
    "model=tiny",
    "data.max_train_samples=200",
    "data.max_eval_samples=64",
    "data.batch_size=16",
    "data.max_length=32",
    "trainer.deterministic=true",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=5",
    "callbacks.run_stats.warmup_steps=2",
    "~callbacks.attention_diagnostics",
    "logger=csv",
]
BATCHES = 13  # ceil(200 / 16) training batches an epoch
# The two stopping rules; 33 steps ends inside the third epoch.
STOPS = {"max_epochs": ["trainer.max_epochs=3"], "max_steps": ["trainer.max_epochs=-1", "trainer.max_steps=33"]}
# Every documented resume form (README "Resume").
FORMS = {
    "same_dir-last": ("same", "last"),                      # hydra.run.dir=<run> ckpt_path=last
    "same_dir-epoch_file": ("same", "epoch"),               # the printed/explicit epoch-end checkpoint path
    "new_dir-epoch_file": ("new", "epoch"),                 # another dir, an epoch-end checkpoint of the stopped run
    "new_dir-last_file": ("new", "last.ckpt"),              # another dir, the stopped run's last.ckpt
    "new_dir-finished_run_epoch_file": ("finished", "epoch"),  # issue 10 §4: a finished run's epoch00 checkpoint
}
# Every form resumes after epoch 0 (step 13); these also after epoch 1 (step 26), where max_steps=33 ends inside
# the next epoch without validating again: the run must still end with the validation of step 26 (before: every
# val/* was None and ModelCheckpoint skipped its save at the stop). Those runs keep every epoch's checkpoint
# (KEEP_ALL): with save_top_k=1, Lightning 2.6 rewrites last.ckpt only when an epoch is a new best, so neither
# an epoch-1 file nor a step-26 last.ckpt would exist when epoch 1 is not the best.
LATER_FORMS = ("same_dir-last", "new_dir-finished_run_epoch_file")
KEEP_ALL = ["callbacks.model_checkpoint.save_top_k=-1"]
# The training outcome: everything but timings, throughput and memory.
COMPARED = ("train/loss", "train/acc", "val/loss", "val/acc", "val/acc_best", "val/f1_macro",
            "test/acc", "test/f1_macro", "test/loss")


def _train(args: list[str], env: dict[str, str], expect: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "train.py", *args], check=False, cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == expect, \
        f"train.py exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def _epoch_file(run_dir: Path, epoch: int = 0) -> Path:
    (path,) = (run_dir / "checkpoints").glob(f"epoch{epoch:02d}-*.ckpt")
    return path


def _best_so_far(ckpt: Path) -> Path:
    """The best checkpoint (monitor val/acc) named in the ModelCheckpoint state of ``ckpt``."""
    states = torch.load(ckpt, map_location="cpu", weights_only=False)["callbacks"]
    (best,) = {s["best_model_path"] for k, s in states.items()
               if k.startswith("ModelCheckpoint") and s.get("monitor") == "val/acc"}
    return Path(best)


def _score_in_name(path: Path) -> float:
    """val/acc from a checkpoint's name (``epoch00-step13-val_acc0.6250.ckpt``)."""
    return float(path.stem.rsplit("val_acc", 1)[1])


def _history(run_dir: Path, from_step: int) -> list[tuple[int, str, str]]:
    """(step, key, value) of every logged train/loss and val/loss from ``from_step`` on (csv/metrics.csv)."""
    rows = csv.DictReader((run_dir / "csv" / "metrics.csv").open())
    return sorted((int(r["step"]), k, r[k]) for r in rows for k in ("train/loss", "val/loss")
                  if r.get(k) and int(r["step"]) >= from_step)


def _weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


def _kill_after_epoch(epoch: int) -> list[str]:
    """SIGKILL the run when epoch ``epoch + 1`` starts: its checkpoints end at epoch ``epoch``."""
    return ["+callbacks.kill._target_=tests.resume_helpers.KillAtEpochStart", f"+callbacks.kill.epoch={epoch + 1}"]


def _stopped_name(name: str, stop: str, after_epoch: int) -> str:
    return f"{name}-{stop}" if after_epoch == 0 else f"{name}-{stop}-after_epoch{after_epoch}"


def _keep(after_epoch: int, where: str = "") -> list[str]:
    """The checkpoint overrides of the runs a resume after epoch ``after_epoch`` from ``where`` uses: keep every
    epoch's file after epoch 1, and for a finished run's epoch file (kept only if it is the run's best otherwise)."""
    return KEEP_ALL if after_epoch or where == "finished" else []


CTRL_C_AT_STEP_18 = ["+callbacks.stop._target_=tests.resume_helpers.CtrlCAtStep", "+callbacks.stop.step=18"]
ACCUMULATE = ["+trainer.accumulate_grad_batches=2"]  # 7 optimizer steps an epoch (the last over one batch)
WORKERS = ["data.num_workers=2"]
RANDOM = ["data.batching=random"]  # RUN's data takes length_grouped batches


def _signal_at(batch: int, sig: str = "SIGTERM", hook: str = "batch_end") -> list[str]:
    return ["+callbacks.stop._target_=tests.resume_helpers.SignalAtBatch", f"+callbacks.stop.batch={batch}",
            f"+callbacks.stop.signal={sig}", f"+callbacks.stop.hook={hook}"]


# Mid-epoch stops, each resumed with ckpt_path=last in its own dir: (stopping rule, extra run args, stop args,
# exit code of the stopped run, reference run, resume step, epoch, batches of it done, checkpoint resumed from).
MID_EPOCH = {
    # Ctrl-C once step 18 is done: 5 of epoch 1's 13 batches (the stop of the run the old-checkpoint test reuses)
    "ctrl_c": ("max_epochs", [], CTRL_C_AT_STEP_18, 128 + signal.SIGINT, "reference-max_epochs", 18, 1, 5,
               "interrupted.ckpt"),
    "sigterm": ("max_epochs", [], _signal_at(20), 128 + signal.SIGTERM, "reference-max_epochs", 20, 1, 7,
                "interrupted.ckpt"),
    # Ctrl-C inside step 20 (gradients computed, weights not yet updated): Lightning trains batch 20 again
    "ctrl_c_inside_step": ("max_epochs", [], _signal_at(20, "SIGINT", "before_optimizer_step"),
                           128 + signal.SIGINT, "reference-max_epochs", 19, 1, 6, "interrupted.ckpt"),
    # the every-N-steps last.ckpt (step 20), then a hard kill at batch 23
    "every_n_train_steps": ("max_epochs", ["callbacks.last_checkpoint.every_n_train_steps=10"],
                            _signal_at(23, "SIGKILL"), -signal.SIGKILL, "reference-max_epochs", 20, 1, 7,
                            "last.ckpt"),
    "max_steps-sigterm": ("max_steps", [], _signal_at(29), 128 + signal.SIGTERM, "reference-max_steps", 29, 2, 3,
                          "interrupted.ckpt"),
    # Ctrl-C inside step 30 of a max_steps run, which ends inside that epoch: its train/acc counts the epoch's
    # batches before the checkpoint too (the stored torchmetrics state of the step's start)
    "max_steps-ctrl_c_inside_step": ("max_steps", [], _signal_at(30, "SIGINT", "before_optimizer_step"),
                                     128 + signal.SIGINT, "reference-max_steps", 29, 2, 3, "interrupted.ckpt"),
    # SIGTERM after batch 16 of 2-batch accumulation windows (inside step 9's window): it stops at step 9's end
    "accumulate-sigterm": ("max_epochs", ACCUMULATE, _signal_at(16), 128 + signal.SIGTERM,
                           "reference-accumulate", 9, 1, 4, "interrupted.ckpt"),
    # issue 38's reproducer: loader workers, the step-20 last.ckpt, a hard kill at batch 23, under either batching
    # (before: epoch 1 went on with epoch 0's first batches and metrics.json said exact)
    "workers": ("max_steps", [*WORKERS, "callbacks.last_checkpoint.every_n_train_steps=10"],
                _signal_at(23, "SIGKILL"), -signal.SIGKILL, "reference-max_steps", 20, 1, 7, "last.ckpt"),
    "workers-random": ("max_steps", [*WORKERS, *RANDOM, "callbacks.last_checkpoint.every_n_train_steps=10"],
                       _signal_at(23, "SIGKILL"), -signal.SIGKILL, "reference-random", 20, 1, 7, "last.ckpt"),
    "random": ("max_steps", [*RANDOM, "callbacks.last_checkpoint.every_n_train_steps=10"],
               _signal_at(23, "SIGKILL"), -signal.SIGKILL, "reference-random", 20, 1, 7, "last.ckpt"),
}


def _record(path: Path) -> list[str]:
    return ["+callbacks.record._target_=tests.resume_helpers.RecordBatches", f"+callbacks.record.path={path}"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir, cache_dir):
    """Built once, in parallel: one uninterrupted deterministic run per stopping rule (recording its batches),
    and the stopped runs the resume tests continue: per rule, one SIGKILLed when epoch 1 starts for each
    same-dir form and one whose files the new-dir forms only read; for LATER_FORMS, an uninterrupted run and
    one SIGKILLed when epoch 2 starts, keeping every epoch's checkpoint; and one stopped by Ctrl-C at step 18."""
    root = tmp_path_factory.mktemp("resume")
    # one thread per process: parallel runs do not compete for cores, and every run sums in the same order
    env = {**train_env(data_dir, cache_dir), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    _train([*RUN, *STOPS["max_epochs"], f"hydra.run.dir={root / 'warm-cache'}", "data.max_train_samples=16",
            "trainer.max_epochs=1"], env)  # tokenize once before the parallel runs share the cache
    stopped = {0: ("stopped", *(form for form, (where, _) in FORMS.items() if where == "same")),
               1: tuple(form for form in LATER_FORMS if FORMS[form][0] == "same")}
    jobs: list[tuple[list[str], int]] = []
    for stop, rule in STOPS.items():
        jobs.append(([*rule, f"hydra.run.dir={root / f'reference-{stop}'}",
                      *_record(root / f"reference-{stop}.batches.jsonl")], 0))
        jobs.append(([*rule, f"hydra.run.dir={root / f'reference-{stop}-keep_all'}", *KEEP_ALL], 0))
        jobs += [([*rule, f"hydra.run.dir={root / _stopped_name(name, stop, after)}", *_kill_after_epoch(after),
                   *_keep(after)], -signal.SIGKILL) for after, names in stopped.items() for name in names]
    jobs.append(([*STOPS["max_epochs"], *ACCUMULATE, f"hydra.run.dir={root / 'reference-accumulate'}",
                  *_record(root / "reference-accumulate.batches.jsonl")], 0))
    # the same checkpoint callbacks as the runs it is compared with: the last of two save_last callbacks decides
    # which step last.ckpt holds at the stop
    jobs.append(([*STOPS["max_steps"], *RANDOM, "callbacks.last_checkpoint.every_n_train_steps=10",
                  f"hydra.run.dir={root / 'reference-random'}", *_record(root / "reference-random.batches.jsonl")], 0))
    jobs += [([*STOPS[stop], *extra, *stop_args, f"hydra.run.dir={root / f'mid-epoch-{case}'}",
               *_record(root / f"mid-epoch-{case}.first.jsonl")], code)
             for case, (stop, extra, stop_args, code, *_) in MID_EPOCH.items()]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda job: _train([*RUN, *job[0]], env, expect=job[1]), jobs))
    for stop in STOPS:  # each stopped run holds the checkpoints up to its last epoch and nothing after them
        for after, names in stopped.items():
            for name in names:
                run_dir = root / _stopped_name(name, stop, after)
                assert not (run_dir / "metrics.json").exists()
                last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
                assert last["global_step"] == (after + 1) * BATCHES
    # the Ctrl-C run as it stopped, for the old-checkpoint test (the exact-resume test resumes it in place)
    shutil.copytree(root / "mid-epoch-ctrl_c", root / "mid-epoch-stopped")
    for stop in STOPS:  # which checkpoints a run keeps does not change its training
        assert ({k: _metrics(root / f"reference-{stop}-keep_all")[k] for k in COMPARED}
                == {k: _metrics(root / f"reference-{stop}")[k] for k in COMPARED})
    return root, env, {stop: root / f"reference-{stop}" for stop in STOPS}


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_same_seed_same_metrics(reference):
    """trainer.deterministic=true on CPU: a second run of the same seed gives identical metrics."""
    root, env, refs = reference
    _train([*RUN, *STOPS["max_epochs"], f"hydra.run.dir={root / 'again'}"], env)
    first, second = _metrics(refs["max_epochs"]), _metrics(root / "again")
    print("same seed twice: " + ", ".join(f"{k} {second[k]:.6f}/{first[k]:.6f}" for k in ("test/acc", "val/loss")))
    assert {k: second[k] for k in COMPARED} == {k: first[k] for k in COMPARED}


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
@pytest.mark.parametrize("stop", list(STOPS))
@pytest.mark.parametrize(("form", "after_epoch"),
                         [*((form, 0) for form in FORMS), *((form, 1) for form in LATER_FORMS)])
def test_resume_form_ends_with_the_uninterrupted_runs_metrics(reference, form, after_epoch, stop):
    """Issue 10 §4: every documented resume form, under either stopping rule, ends with exactly the metrics,
    the best checkpoint and the final weights of the uninterrupted run (before: a resume into a new dir
    forgot the best checkpoint so far and tested a worse later one, test/acc 0.625 instead of 0.515625; a
    max_steps run resumed at an epoch end trained epoch 1 on epoch 2's batch order and logged one step late;
    a max_steps run resumed after epoch 1, which stops inside epoch 2 without validating again, ended with
    val/acc, val/acc_best, val/f1_macro and val/loss all None)."""
    root, env, refs = reference
    where, which = FORMS[form]
    ref_dir = root / f"reference-{stop}-keep_all" if _keep(after_epoch, where) else refs[stop]
    if where == "same":  # SIGKILLed after epoch `after_epoch` (fixture), resumed in its own dir
        source_dir = run_dir = root / _stopped_name(form, stop, after_epoch)
    else:
        source_dir = ref_dir if where == "finished" else root / _stopped_name("stopped", stop, after_epoch)
        run_dir = root / f"{_stopped_name(form, stop, after_epoch)}-resumed"
    resume_epoch, resume_step = after_epoch + 1, (after_epoch + 1) * BATCHES
    before = {p.name: p.stat().st_mtime_ns for p in (source_dir / "checkpoints").iterdir()}
    ckpt = {"last": "last", "epoch": str(_epoch_file(source_dir, after_epoch)),
            "last.ckpt": str(source_dir / "checkpoints" / "last.ckpt")}[which]
    expected = source_dir / "checkpoints" / "last.ckpt" if ckpt == "last" else Path(ckpt)
    best_so_far = _best_so_far(expected)
    _train([*RUN, *STOPS[stop], f"hydra.run.dir={run_dir}", f"ckpt_path={ckpt}", *_keep(after_epoch, where)], env)

    resumed, uninterrupted = _metrics(run_dir), _metrics(ref_dir)
    assert Path(resumed["resumed_from"]).resolve() == expected.resolve()
    print(f"{form} {stop}: " + ", ".join(f"{k} {resumed[k]:.6f}/{uninterrupted[k]:.6f}"
                                          for k in ("test/acc", "val/acc_best", "val/acc")))
    assert {k: resumed[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}
    assert f"Resumed at the start of epoch {resume_epoch} (step {resume_step})" in (run_dir / "train.log").read_text()
    # the best checkpoint tested is the uninterrupted run's, and lies in this run's own dir
    best = Path(resumed["best_checkpoint"])
    assert best.parent == run_dir / "checkpoints" and best.name == Path(uninterrupted["best_checkpoint"]).name
    ref_weights = _weights(ref_dir / "checkpoints" / "last.ckpt")
    weights = _weights(run_dir / "checkpoints" / "last.ckpt")
    assert weights.keys() == ref_weights.keys()
    assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights), "final weights differ"
    # the logged history goes on at the uninterrupted run's steps with its values
    assert _history(run_dir, resume_step) == _history(ref_dir, resume_step) != []
    assert resumed["resume"] == {"epoch": resume_epoch, "batches_done": 0, "batches_per_epoch": BATCHES,
                                 "exact": True}
    if where != "same":  # the best checkpoint so far came along; the run resumed from is only read
        assert (f"best checkpoint so far (val/acc={_score_in_name(best_so_far):.4f}) carried from "
                f"{best_so_far} to {run_dir / 'checkpoints' / best_so_far.name}"
                in " ".join((run_dir / "train.log").read_text().split()))
        assert {p.name: p.stat().st_mtime_ns for p in (source_dir / "checkpoints").iterdir()} == before


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_resume_of_a_run_killed_while_testing_ends_with_its_metrics(reference, tmp_path):
    """A run killed after its last epoch's checkpoint (while testing: no metrics.json) resumed with
    ckpt_path=last: Lightning's fit loop is already done, so training never starts. The resumed run must still
    end with the uninterrupted run's val/* and val/acc_best (before: "optimized_metric=val/acc_best is not in
    the run summary", exit 1), and test the same best checkpoint."""
    import shutil

    root, env, refs = reference
    finished = root / "reference-max_epochs-keep_all"  # last.ckpt written at every epoch end (KEEP_ALL)
    assert torch.load(finished / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 3 * BATCHES
    killed = tmp_path / "killed-while-testing"
    shutil.copytree(finished, killed, ignore=shutil.ignore_patterns("metrics.json"))
    _train([*RUN, *STOPS["max_epochs"], *KEEP_ALL, f"hydra.run.dir={killed}", "ckpt_path=last"], env)
    assert {k: _metrics(killed)[k] for k in COMPARED} == {k: _metrics(finished)[k] for k in COMPARED}


def _order(path: Path, epoch: int) -> list[str]:
    """The sha1 of every recorded training batch of epoch ``epoch`` (RecordBatches), in order."""
    return [r["sha1"] for r in map(json.loads, path.read_text().splitlines()) if r["epoch"] == epoch]


# the default suite resumes the two Ctrl-C stops (after a step, inside one); the other stops run with -m slow
@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
@pytest.mark.parametrize("case", list(MID_EPOCH))
def test_mid_epoch_resume_is_exact(reference, case):
    """Stopped inside an epoch (Ctrl-C, SIGTERM, Ctrl-C inside a step, the every-N-steps last.ckpt then a hard
    kill, max_steps runs, gradient accumulation), then `ckpt_path=last`: the run ends with exactly the
    uninterrupted run's metrics, best checkpoint, final weights and logged history, the epoch goes on with the
    batches the uninterrupted run took next, and metrics.json says resume.exact: true. Before: the epoch's order
    restarted at batch 0 (Ctrl-C at step 18: batches 0-4 trained twice, 8-12 never; test/acc 0.484375 instead
    of 0.53125), SIGTERM inside an accumulation window stopped there, losing the window's gradients, and a
    max_steps run's last, resumed epoch reported a train/acc of the batches after the resume only (0.768 instead
    of 0.827)."""
    root, env, refs = reference
    stop, extra, _, _, ref_name, step, epoch, done, source = MID_EPOCH[case]
    run_dir, ref_dir = root / f"mid-epoch-{case}", root / ref_name
    first, second = root / f"mid-epoch-{case}.first.jsonl", root / f"mid-epoch-{case}.second.jsonl"
    ckpt = torch.load(run_dir / "checkpoints" / source, weights_only=False)
    assert ckpt["global_step"] == step
    assert max(p.stat().st_mtime_ns for p in (run_dir / "checkpoints").glob("*.ckpt")) == \
        (run_dir / "checkpoints" / source).stat().st_mtime_ns  # ckpt_path=last takes this one
    _train([*RUN, *STOPS[stop], *extra, f"hydra.run.dir={run_dir}", "ckpt_path=last", *_record(second)], env)

    resumed, uninterrupted = _metrics(run_dir), _metrics(ref_dir)
    assert Path(resumed["resumed_from"]).name == source
    print(f"{case}: " + ", ".join(f"{k} {resumed[k]:.6f}/{uninterrupted[k]:.6f}" for k in ("test/acc", "val/acc")))
    assert {k: resumed[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}
    assert resumed["resume"] == {"epoch": epoch, "batches_done": done, "batches_per_epoch": BATCHES, "exact": True}
    assert (f"Resumed mid-epoch at step {step}: epoch {epoch} continues at batch {done} of its {BATCHES}"
            in (run_dir / "train.log").read_text())
    assert Path(resumed["best_checkpoint"]).name == Path(uninterrupted["best_checkpoint"]).name
    ref_weights, weights = _weights(ref_dir / "checkpoints" / "last.ckpt"), _weights(run_dir / "checkpoints" /
                                                                                      "last.ckpt")
    assert weights.keys() == ref_weights.keys()
    assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights), "final weights differ"
    assert _history(run_dir, step + 1) == _history(ref_dir, step + 1)
    assert _history(ref_dir, step + 1) or stop == "max_steps"  # a max_steps run logs nothing after step 29
    # the batches: the stopped run's first `done` of the epoch, then the rest of the same order, no replay
    ref_batches = root / f"{ref_name}.batches.jsonl"
    before, after = _order(first, epoch), _order(second, epoch)
    assert before[:done] == _order(ref_batches, epoch)[:done]
    assert after == _order(ref_batches, epoch)[done:]
    assert _order(second, epoch + 1) == _order(ref_batches, epoch + 1)


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_mid_epoch_resume_from_an_old_checkpoint_replays_what_the_log_says(reference, tmp_path):
    """A mid-epoch checkpoint written before exact mid-epoch resumes (no loader position: Ctrl-C at step 18, 5 of
    epoch 1's 13 batches done) still loads; the resume cannot be exact, and the log and metrics.json say so and
    which batches: 0-4 replayed, 8-12 not seen, as the recorded batches show; from epoch 2 on, the batches are
    the uninterrupted run's again."""
    root, env, refs = reference
    run_dir = tmp_path / "old-mid-epoch"
    shutil.copytree(root / "mid-epoch-stopped", run_dir)
    path = run_dir / "checkpoints" / "interrupted.ckpt"
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["global_step"] == 18
    del checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]  # as the old code wrote it
    del checkpoint["attnbench"]["inside_step"]
    torch.save(checkpoint, path)
    (run_dir / "checkpoints" / "interrupted.ckpt.sha256").unlink()  # nor did it write a SHA-256 sidecar
    second = tmp_path / "second.jsonl"
    _train([*RUN, *STOPS["max_epochs"], f"hydra.run.dir={run_dir}", "ckpt_path=last", *_record(second)], env)

    log = (run_dir / "train.log").read_text()
    assert ("Resumed mid-epoch at step 18: epoch 1 had run 5 of its 13 batches" in log
            and "batches 0-7 of the epoch's order again, so 5 batch(es) seen before the interruption are replayed "
                "(batches 0-4) and batches 8-12 of this epoch are not seen" in log), log[-3000:]
    assert _metrics(run_dir)["resume"] == {
        "epoch": 1, "batches_done": 5, "batches_per_epoch": 13, "replayed_batches": [0, 4], "unseen_batches": [8, 12],
        "exact": False, "reason": "the checkpoint holds no data-loader position (written by an attnbench before "
                                  "exact mid-epoch resumes)"}
    ref_batches = root / "reference-max_epochs.batches.jsonl"
    ref1, ref2 = _order(ref_batches, 1), _order(ref_batches, 2)
    assert _order(root / "mid-epoch-ctrl_c.first.jsonl", 1) == ref1[:5]  # before Ctrl-C: batches 0-4 of epoch 1
    assert _order(second, 1) == ref1[:8]      # after the resume: batches 0-7 again (0-4 replayed), 8-12 never
    assert _order(second, 2) == ref2          # the next epoch is the uninterrupted run's


def test_carry_checkpoint_states_copies_the_best_checkpoint(tmp_path, caplog):
    """A checkpoint written in another dir: its best file is copied into the new checkpoints/ and Lightning keeps
    the best score; from a moved dir it is found next to the resumed file; when it is gone, a warning says the
    run cannot test the same best checkpoint, and the score is dropped with it."""
    from types import SimpleNamespace

    from pytorch_lightning.callbacks import ModelCheckpoint

    from attnbench.run.resume import carry_checkpoint_states

    old, new = tmp_path / "old" / "checkpoints", tmp_path / "new" / "checkpoints"
    old.mkdir(parents=True)
    (old / "epoch00.ckpt").write_bytes(b"best")
    (old / "last.ckpt").write_bytes(b"last")

    def state() -> dict:
        return {"monitor": "val/acc", "best_model_score": torch.tensor(0.625), "dirpath": str(old),
                "best_model_path": str(old / "epoch00.ckpt"), "best_k_models": {str(old / "epoch00.ckpt"): 0.625},
                "kth_best_model_path": str(old / "epoch00.ckpt"), "kth_value": torch.tensor(0.625),
                "current_score": torch.tensor(0.6), "last_model_path": str(old / "last.ckpt")}

    def carry(source: Path | None, dirpath: Path = new) -> tuple[ModelCheckpoint, list]:
        callback = ModelCheckpoint(dirpath=dirpath, monitor="val/acc", mode="max", save_last=True)
        checkpoint = {"callbacks": {callback.state_key: state()}}
        trainer = SimpleNamespace(checkpoint_callbacks=[callback], is_global_zero=True)
        notes = carry_checkpoint_states(trainer, checkpoint, str(source) if source else None)
        callback.load_state_dict(checkpoint["callbacks"][callback.state_key])
        return callback, notes

    callback, notes = carry(old / "last.ckpt")
    assert (new / "epoch00.ckpt").read_bytes() == b"best" and not (new / "last.ckpt").exists()
    assert callback.best_model_path == str(new / "epoch00.ckpt") and float(callback.best_model_score) == 0.625
    assert callback.best_k_models == {str(new / "epoch00.ckpt"): 0.625} and callback.last_model_path == ""
    assert notes and "carried from" in notes[0][1]
    # the whole run dir moved: the files are where the resumed checkpoint lies
    moved = tmp_path / "moved" / "checkpoints"
    moved.parent.mkdir()
    old.rename(moved)
    callback, _ = carry(moved / "last.ckpt", dirpath=moved)
    assert callback.best_model_path == str(moved / "epoch00.ckpt") and float(callback.best_model_score) == 0.625
    # the best file is gone: say so, and do not keep a score without its checkpoint
    (moved / "epoch00.ckpt").unlink()
    callback, notes = carry(moved / "last.ckpt", dirpath=tmp_path / "third")
    assert callback.best_model_score is None and callback.best_model_path == ""
    assert notes[0][0] == logging.WARNING and "may differ from an uninterrupted run" in notes[0][1]


def test_wandb_run_resumes_online_and_continues_offline(monkeypatch, tmp_path):
    """The W&B id stored in a checkpoint: resumed under that id online; offline, a new run that names it."""
    import pytorch_lightning.loggers as pl_loggers

    import attnbench.run.loggers as loggers_mod
    from attnbench.run.loggers import make_wandb_logger

    calls = []

    class FakeLogger:
        def __init__(self, **kwargs):
            calls.append(kwargs)

        @property
        def experiment(self):
            return type("Run", (), {"id": calls[-1].get("id", "new"), "url": ""})()

    monkeypatch.setattr(pl_loggers, "WandbLogger", FakeLogger)
    # pretend credentials and a reachable server (without them online falls back to offline at once)
    monkeypatch.setattr(loggers_mod, "wandb_credentials_available", lambda: True)
    monkeypatch.setattr(loggers_mod, "wandb_server_unreachable", lambda *a, **k: None)
    make_wandb_logger(tmp_path, "run", {"seed": 0}, mode="online", resume={"id": "abc123", "mode": "online"})
    assert calls[-1]["id"] == "abc123" and calls[-1]["resume"] == "allow" and calls[-1]["mode"] == "online"
    make_wandb_logger(tmp_path, "run", {"seed": 0}, mode="offline", resume={"id": "abc123", "mode": "offline"})
    assert "id" not in calls[-1] and calls[-1]["config"]["resumed_from"] == "abc123"


def test_csv_log_of_a_resumed_run_is_kept(tmp_path):
    from attnbench.run.loggers import make_csv_logger

    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text("step,val/acc\n79,0.7\n")
    logger = make_csv_logger(tmp_path)
    logger.log_metrics({"val/acc": 0.8}, step=158)
    logger.save()
    assert (tmp_path / "csv" / "metrics.part1.csv").read_text() == "step,val/acc\n79,0.7\n"
    assert "158" in (tmp_path / "csv" / "metrics.csv").read_text()


def test_resolve_checkpoint(tmp_path):
    from attnbench.errors import ConfigError
    from attnbench.run.resume import resolve_checkpoint

    assert resolve_checkpoint(None, tmp_path) is None
    assert resolve_checkpoint("last", tmp_path) is None  # nothing yet: start from scratch (warns)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert resolve_checkpoint("last", tmp_path) == str(tmp_path / "checkpoints" / "last.ckpt")
    # a Ctrl-C/SIGTERM checkpoint written after it is newer: `last` resumes from there
    os.utime(tmp_path / "checkpoints" / "last.ckpt", (1_000_000_000, 1_000_000_000))
    (tmp_path / "checkpoints" / "interrupted.ckpt").write_bytes(b"")
    assert resolve_checkpoint("last", tmp_path) == str(tmp_path / "checkpoints" / "interrupted.ckpt")
    with pytest.raises(ConfigError, match="no such checkpoint file"):
        resolve_checkpoint(str(tmp_path / "missing.ckpt"), tmp_path)


def _toy_loader(batching: str, sampler_kind: str, rank: int = 0, num_workers: int = 0):
    """A training loader as the data module builds it, over 50 rows of lengths 1-50 (batch 8: 7 batches; under
    a 2-process DistributedSampler 25 rows a process: 4 batches)."""
    from torch.utils.data.distributed import DistributedSampler

    from attnbench.data.samplers import (
        EpochShuffleSampler,
        LengthGroupedBatchSampler,
        PadCollator,
        ResumableDataLoader,
        TokenizedSplit,
    )

    rows = [list(range(1, 1 + (7 * i) % 50 + 1)) for i in range(50)]
    data = TokenizedSplit(rows, [i % 2 for i in range(50)], list(range(50)))
    sampler = (EpochShuffleSampler(data, 3) if sampler_kind == "epoch_shuffle"
               else DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=3))
    common = dict(collate_fn=PadCollator(0), generator=torch.Generator().manual_seed(3), num_workers=num_workers,
                  persistent_workers=num_workers > 0)
    if batching == "random":
        return ResumableDataLoader(data, batch_size=8, sampler=sampler, **common)
    lengths = [len(r) for r in rows]
    return ResumableDataLoader(data, batch_sampler=LengthGroupedBatchSampler(sampler, 8, False, lengths, 2, True, 3),
                               **common)


def _ids(batches) -> list[list[list[int]]]:
    return [b["input_ids"].tolist() for b in batches]


def _epoch_of(loader, epoch: int) -> list:
    (loader.batch_sampler.sampler if hasattr(loader.batch_sampler, "lengths") else loader.sampler).set_epoch(epoch)
    return _ids(loader)


@pytest.mark.parametrize("sampler_kind", ["epoch_shuffle", "distributed-rank0", "distributed-rank1"])
@pytest.mark.parametrize("batching", ["random", "length_grouped"])
def test_resumable_loader_continues_the_epoch_after_its_batches_done(batching, sampler_kind):
    """The train loader's state after d batches of epoch 1, given to a new loader (a resumed process): epoch 1
    yields exactly batches d..n-1 of the uninterrupted order, epoch 2 all of its batches; the state of an
    epoch-end or another epoch skips nothing; len() is the whole epoch's either way (Lightning's fetcher
    counts from it). Under DDP (Lightning's DistributedSampler) each process skips within its own shard."""
    kind, rank = sampler_kind.split("-")[0], int(sampler_kind.rsplit("rank", 1)[1]) if "rank" in sampler_kind else 0
    reference = _toy_loader(batching, kind, rank)
    full1, full2 = _epoch_of(reference, 1), _epoch_of(reference, 2)
    n = len(full1)
    assert n == (7 if kind == "epoch_shuffle" else 4) and full1 != full2
    for done in range(1, n):
        first = _toy_loader(batching, kind, rank)
        (first.batch_sampler.sampler if batching == "length_grouped" else first.sampler).set_epoch(1)
        seen = []
        for batch in first:
            seen.append(batch["input_ids"].tolist())
            if len(seen) == done:
                break
        state = first.state_dict()
        assert state == {"epoch": 1, "batches_done": done, "batches_per_epoch": n}
        assert seen == full1[:done]
        resumed = _toy_loader(batching, kind, rank)
        resumed.load_state_dict(state)
        assert len(resumed) == n
        assert _epoch_of(resumed, 1) == full1[done:], f"after {done} batches"
        assert resumed.state_dict() == {"epoch": 1, "batches_done": n, "batches_per_epoch": n}
        assert _epoch_of(resumed, 2) == full2
    other = _toy_loader(batching, kind, rank)
    other.load_state_dict({"epoch": 0, "batches_done": 3, "batches_per_epoch": n})
    assert _epoch_of(other, 1) == full1  # a state of another epoch skips nothing


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batching", ["random", "length_grouped"])
def test_resumed_loader_takes_its_position_from_the_first_fetch_with_and_without_workers(batching, num_workers):
    """Lightning makes the training loader's iterator (FitLoop.setup_data) before a resume restores the loader's
    position and sets the sampler's epoch. With workers, DataLoader's iterator reads the order and prefetches as
    soon as it exists, so the resumed epoch took epoch 0's first batches (issue 38: batches 7-12 of epoch 1 were
    epoch 0's 0-5) while metrics.json said exact. The order is read at the first fetch, whatever the workers,
    and the loader records where it started (what ResumeState checks before it calls a resume exact)."""
    reference = _toy_loader(batching, "epoch_shuffle")
    full1, full2 = _epoch_of(reference, 1), _epoch_of(reference, 2)
    resumed = _toy_loader(batching, "epoch_shuffle", num_workers=num_workers)
    iterator = iter(resumed)  # FitLoop.setup_data, before the checkpoint is restored
    resumed.load_state_dict({"epoch": 1, "batches_done": 3, "batches_per_epoch": len(full1)})
    (resumed.batch_sampler.sampler if batching == "length_grouped" else resumed.sampler).set_epoch(1)
    assert _ids(iterator) == full1[3:]
    assert resumed.started_at == (1, 3)
    assert _epoch_of(resumed, 2) == full2 and resumed.started_at == (2, 0)


@pytest.mark.slow  # three train.py runs, 50-70 s on 2 loaded cores
def test_max_steps_resume_at_an_epoch_end_under_max_epochs_takes_the_uninterrupted_runs_steps(
        tmp_path, data_dir, cache_dir):
    """max_steps=33 with max_epochs=3 (the default): 33 steps end inside the third epoch. Resumed from the
    epoch-0 checkpoint, the run must take steps 14-33 and end with the uninterrupted run's metrics (before:
    Lightning counted epoch 0 as processed twice, the fit stopped at max_epochs after step 26 with train/loss
    0.5795 instead of 0.5449, and metrics.json still said exact: true)."""
    env = {**train_env(data_dir, cache_dir), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rule = ["trainer.max_epochs=3", "trainer.max_steps=33"]
    ref_dir, run_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda job: _train([*RUN, *rule, *job[0]], env, expect=job[1]),
                      [([f"hydra.run.dir={ref_dir}"], 0),
                       ([f"hydra.run.dir={run_dir}", *_kill_after_epoch(0)], -signal.SIGKILL)]))
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == BATCHES
    _train([*RUN, *rule, f"hydra.run.dir={run_dir}", "ckpt_path=last"], env)

    resumed, uninterrupted = _metrics(run_dir), _metrics(ref_dir)
    assert uninterrupted["train/steps_done"] == resumed["train/steps_done"] == 33
    assert {k: resumed[k] for k in COMPARED} == {k: uninterrupted[k] for k in COMPARED}
    assert _history(run_dir, BATCHES) == _history(ref_dir, BATCHES) != []
    assert resumed["resume"] == {"epoch": 1, "batches_done": 0, "batches_per_epoch": BATCHES, "exact": True}


@pytest.mark.parametrize(("end_step", "should_stop", "exact"), [(33, False, True), (26, False, False),
                                                               (26, True, True)])
def test_a_resume_that_ends_off_the_uninterrupted_runs_last_step_is_not_exact(end_step, should_stop, exact):
    """ResumeState.on_train_end: a resume claimed exact that ends before the step budget without a stop request
    (early stopping, max_time) took other steps than the uninterrupted run, and metrics.json says so."""
    state = ResumeState()
    state.replay = {"epoch": 1, "batches_done": 0, "batches_per_epoch": BATCHES, "exact": True}
    trainer = SimpleNamespace(global_step=end_step, should_stop=should_stop, estimated_stepping_batches=33)
    state.on_train_end(trainer, None)
    assert state.replay["exact"] is exact
    if not exact:
        assert state.replay["reason"] == "the resumed run ended at step 26, the uninterrupted run ends at step 33"


def test_a_carried_best_checkpoint_is_copied_whole_or_not_at_all(tmp_path, monkeypatch):
    """The best checkpoint a resume copies into its new checkpoints/ (and its digest) is written through a temporary
    file in that folder and ``os.replace``: a copy that fails half-way (a full disk, a kill) leaves the target as
    it was and no temporary file, never a truncated checkpoint under the final name."""
    import errno
    import shutil

    from attnbench.run import outputs

    source, target = tmp_path / "best.ckpt", tmp_path / "new" / "best.ckpt"
    source.write_bytes(b"x" * 1000)
    target.parent.mkdir()
    target.write_bytes(b"previous")

    def half_copy(src, dst, **_):
        Path(dst).write_bytes(Path(src).read_bytes()[:300])
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(shutil, "copy2", half_copy)
    with pytest.raises(OSError):
        outputs.copy_file(source, target)
    assert target.read_bytes() == b"previous" and sorted(p.name for p in target.parent.iterdir()) == ["best.ckpt"]
    monkeypatch.undo()
    outputs.copy_file(source, target)
    assert target.read_bytes() == b"x" * 1000 and sorted(p.name for p in target.parent.iterdir()) == ["best.ckpt"]
