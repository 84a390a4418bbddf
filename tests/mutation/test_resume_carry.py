"""ResumeState's checkpoint hooks and carry_checkpoint_states, in process, against hand-written states.

carry_checkpoint_states rewrites a ModelCheckpoint state saved in another dir so that Lightning keeps the best
score when a run resumes into a new dir. The expected states here are written out by hand from the docstring
(copies named after the old files in the new dir, last_model_path cleared, the score forgotten when the best
file is nowhere), and the copied files are compared byte for byte with their sources.
"""

from __future__ import annotations

import logging
import os
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pytorch_lightning.trainer.states import TrainerFn

from attnbench.run import resume as rs

KEY = "ModelCheckpoint{'monitor': 'val/acc'}"


def _callback(dirpath, key=KEY):
    return SimpleNamespace(state_key=key, dirpath=None if dirpath is None else str(dirpath))


def _trainer(*callbacks, zero=True):
    return SimpleNamespace(checkpoint_callbacks=list(callbacks), is_global_zero=zero)


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _state(old, **extra):
    """A ModelCheckpoint state saved in ``old`` with epoch-1 best (0.8), epoch-0 second best (0.7), a last.ckpt."""
    state = {"monitor": "val/acc", "dirpath": str(old),
             "best_k_models": {str(old / "e1.ckpt"): torch.tensor(0.8), str(old / "e0.ckpt"): torch.tensor(0.7)},
             "best_model_path": str(old / "e1.ckpt"), "best_model_score": torch.tensor(0.8),
             "kth_best_model_path": str(old / "e0.ckpt"), "kth_value": torch.tensor(0.7),
             "last_model_path": str(old / "last.ckpt")}
    state.update(extra)
    return state


@pytest.fixture
def old_run(tmp_path):
    old = tmp_path / "old" / "checkpoints"
    _write(old / "e1.ckpt", "best")
    _write(old / "e0.ckpt", "second")
    _write(old / "last.ckpt", "last")
    return old


def test_carry_copies_the_best_files_and_rewrites_the_state(tmp_path, old_run):
    new = tmp_path / "new" / "checkpoints"  # does not exist yet: created
    checkpoint = {"callbacks": {KEY: _state(old_run)}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, str(old_run / "last.ckpt"))
    state = checkpoint["callbacks"][KEY]
    assert set(state["best_k_models"]) == {str(new / "e1.ckpt"), str(new / "e0.ckpt")}
    assert state["best_k_models"][str(new / "e1.ckpt")].item() == pytest.approx(0.8)
    assert state["best_k_models"][str(new / "e0.ckpt")].item() == pytest.approx(0.7)
    assert state["best_model_path"] == str(new / "e1.ckpt")
    assert state["kth_best_model_path"] == str(new / "e0.ckpt")
    assert state["best_model_score"].item() == pytest.approx(0.8) and state["kth_value"].item() == pytest.approx(0.7)
    assert state["last_model_path"] == "" and state["dirpath"] == str(new)
    assert (new / "e1.ckpt").read_text() == "best" and (new / "e0.ckpt").read_text() == "second"
    assert not (new / "last.ckpt").exists()  # this run writes its own
    assert (old_run / "e1.ckpt").read_text() == "best"  # copied, not moved
    assert notes == [(logging.INFO, f"best checkpoint so far (val/acc=0.8000) carried from {old_run / 'e1.ckpt'} "
                                    f"to {new / 'e1.ckpt'}")]


def test_carry_keeps_the_file_times_of_the_copies(tmp_path, old_run):
    os.utime(old_run / "e1.ckpt", (1_000_000_000, 1_000_000_000))
    new = tmp_path / "new"
    rs.carry_checkpoint_states(_trainer(_callback(new)), {"callbacks": {KEY: _state(old_run)}}, None)
    assert os.stat(new / "e1.ckpt").st_mtime == 1_000_000_000


def test_carry_finds_files_of_a_moved_run_next_to_the_resumed_checkpoint(tmp_path):
    """The state names /gone/checkpoints/*: the files are found next to ``source`` (the moved dir)."""
    gone = tmp_path / "gone" / "checkpoints"
    moved = tmp_path / "moved" / "checkpoints"
    _write(moved / "e1.ckpt", "best")
    _write(moved / "e0.ckpt", "second")
    new = tmp_path / "new"
    checkpoint = {"callbacks": {KEY: _state(gone)}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, str(moved / "last.ckpt"))
    state = checkpoint["callbacks"][KEY]
    assert state["best_model_path"] == str(new / "e1.ckpt") and (new / "e1.ckpt").read_text() == "best"
    assert state["kth_best_model_path"] == str(new / "e0.ckpt") and (new / "e0.ckpt").read_text() == "second"
    assert [level for level, _ in notes] == [logging.INFO]


def test_carry_finds_files_in_the_saved_dirpath_when_the_paths_are_relative(tmp_path):
    """best_k_models may name files by a path that no longer resolves (another cwd); dirpath/<name> is tried."""
    old = tmp_path / "old"
    _write(old / "e1.ckpt", "best")
    new = tmp_path / "new"
    state = {"monitor": "val/acc", "dirpath": str(old), "best_k_models": {"elsewhere/e1.ckpt": 0.8},
             "best_model_path": "elsewhere/e1.ckpt", "best_model_score": 0.8, "kth_best_model_path": "",
             "last_model_path": ""}
    checkpoint = {"callbacks": {KEY: state}}
    rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, None)
    assert state["best_model_path"] == str(new / "e1.ckpt") and (new / "e1.ckpt").read_text() == "best"
    assert state["best_k_models"] == {str(new / "e1.ckpt"): 0.8} and state["kth_best_model_path"] == ""


def test_carry_uses_files_already_in_the_new_dir(tmp_path):
    """The run dir itself was moved: nothing to copy, the files are where the new dirpath says."""
    gone = tmp_path / "gone"
    new = tmp_path / "new"
    _write(new / "e1.ckpt", "already here")
    _write(new / "e0.ckpt", "second here")
    checkpoint = {"callbacks": {KEY: _state(gone)}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, None)
    state = checkpoint["callbacks"][KEY]
    assert state["best_model_path"] == str(new / "e1.ckpt") and (new / "e1.ckpt").read_text() == "already here"
    assert set(state["best_k_models"]) == {str(new / "e1.ckpt"), str(new / "e0.ckpt")}
    assert state["best_model_score"].item() == pytest.approx(0.8)
    assert [level for level, _ in notes] == [logging.INFO]


def test_carry_forgets_a_best_score_whose_file_is_nowhere(tmp_path):
    gone = tmp_path / "gone"
    new = tmp_path / "new"
    source = str(tmp_path / "elsewhere" / "last.ckpt")
    checkpoint = {"callbacks": {KEY: _state(gone)}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, source)
    state = checkpoint["callbacks"][KEY]
    assert state == {"monitor": "val/acc", "dirpath": str(new), "best_k_models": {}, "best_model_path": "",
                     "best_model_score": None, "kth_best_model_path": "", "last_model_path": ""}
    assert notes == [(logging.WARNING,
                      f"the best checkpoint so far ({gone / 'e1.ckpt'}, val/acc=0.8000) is not in {gone} nor next to "
                      f"{source}: this run tests the best of the epochs it trains itself, which may differ from an "
                      "uninterrupted run. Copy that file next to the checkpoint you resume from to keep it.")]
    assert not new.exists()  # nothing copied, no dir made


def test_carry_forgets_a_missing_best_of_a_state_without_a_kth_value(tmp_path):
    """A state saved before Lightning set kth_value (or by another version): forgetting the best still works."""
    gone = tmp_path / "gone"
    state = _state(gone)
    del state["kth_value"]
    checkpoint = {"callbacks": {KEY: state}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(tmp_path / "new")), checkpoint, None)
    assert state["best_model_score"] is None and state["best_k_models"] == {} and "kth_value" not in state
    assert [level for level, _ in notes] == [logging.WARNING]


def test_carry_copies_every_top_k_file_not_only_the_best_and_kth(tmp_path):
    """save_top_k = 3: the middle checkpoint is named only in best_k_models."""
    old = tmp_path / "old"
    for name in ("e0", "e1", "e2"):
        _write(old / f"{name}.ckpt", name)
    new = tmp_path / "new"
    state = {"monitor": "val/acc", "dirpath": str(old),
             "best_k_models": {str(old / "e2.ckpt"): 0.9, str(old / "e1.ckpt"): 0.8, str(old / "e0.ckpt"): 0.7},
             "best_model_path": str(old / "e2.ckpt"), "best_model_score": 0.9,
             "kth_best_model_path": str(old / "e0.ckpt"), "kth_value": 0.7, "last_model_path": ""}
    checkpoint = {"callbacks": {KEY: state}}
    rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, None)
    assert state["best_k_models"] == {str(new / "e2.ckpt"): 0.9, str(new / "e1.ckpt"): 0.8,
                                      str(new / "e0.ckpt"): 0.7}
    assert [(new / f"e{i}.ckpt").read_text() for i in range(3)] == ["e0", "e1", "e2"]


def test_carry_copies_the_best_of_a_callback_without_a_monitor(tmp_path):
    """monitor=None: Lightning sets best_model_path to the latest save and leaves best_k_models empty."""
    old = tmp_path / "old"
    _write(old / "epoch=3.ckpt", "latest")
    new = tmp_path / "new"
    state = {"monitor": None, "dirpath": str(old), "best_k_models": {}, "best_model_path": str(old / "epoch=3.ckpt"),
             "best_model_score": None, "kth_best_model_path": "", "last_model_path": ""}
    checkpoint = {"callbacks": {KEY: state}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, None)
    assert state["best_model_path"] == str(new / "epoch=3.ckpt") and (new / "epoch=3.ckpt").read_text() == "latest"
    assert notes == [(logging.INFO, f"best checkpoint so far (None=None) carried from {old / 'epoch=3.ckpt'} to "
                                    f"{new / 'epoch=3.ckpt'}")]


def test_carry_skips_checkpoint_callbacks_without_a_dirpath_and_goes_on(tmp_path, old_run):
    """A custom Checkpoint callback (no dirpath attribute) and one without a saved state come before the
    ModelCheckpoint: both are skipped, the ModelCheckpoint is still carried."""
    new = tmp_path / "new"
    custom = SimpleNamespace(state_key=KEY)  # a Checkpoint subclass that keeps no files
    unsaved = _callback(tmp_path / "x", key="ModelCheckpoint{'monitor': 'val/f1'}")
    checkpoint = {"callbacks": {KEY: _state(old_run)}}
    rs.carry_checkpoint_states(_trainer(custom, unsaved, _callback(new)), checkpoint, None)
    assert _same_state(checkpoint["callbacks"][KEY], {**_state(old_run), "best_k_models": {
        str(new / "e1.ckpt"): torch.tensor(0.8), str(new / "e0.ckpt"): torch.tensor(0.7)},
        "best_model_path": str(new / "e1.ckpt"), "kth_best_model_path": str(new / "e0.ckpt"),
        "last_model_path": "", "dirpath": str(new)})
    assert not (tmp_path / "x").exists()


def test_carry_keeps_the_best_when_only_the_kth_file_is_missing(tmp_path, old_run):
    (old_run / "e0.ckpt").unlink()
    new = tmp_path / "new"
    checkpoint = {"callbacks": {KEY: _state(old_run)}}
    rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, None)
    state = checkpoint["callbacks"][KEY]
    assert set(state["best_k_models"]) == {str(new / "e1.ckpt")}  # the missing one dropped
    assert state["kth_best_model_path"] == ""  # its file is gone
    assert state["best_model_path"] == str(new / "e1.ckpt") and state["best_model_score"].item() == pytest.approx(0.8)
    assert state["kth_value"].item() == pytest.approx(0.7)


def test_carry_without_a_best_so_far_leaves_the_empty_fields(tmp_path, old_run):
    """A state saved before any validation: no best, no k-th, no note."""
    new = tmp_path / "new"
    state = {"monitor": "val/acc", "dirpath": str(old_run), "best_k_models": {}, "best_model_path": "",
             "best_model_score": None, "kth_best_model_path": "", "last_model_path": str(old_run / "last.ckpt")}
    checkpoint = {"callbacks": {KEY: state}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, None)
    assert notes == []
    assert state == {"monitor": "val/acc", "dirpath": str(new), "best_k_models": {}, "best_model_path": "",
                     "best_model_score": None, "kth_best_model_path": "", "last_model_path": ""}
    assert not new.exists()


def test_carry_on_other_ranks_rewrites_without_copying(tmp_path, old_run):
    new = tmp_path / "new"
    _write(new / "placeholder", "")  # the dir exists on the shared file system
    checkpoint = {"callbacks": {KEY: _state(old_run)}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new), zero=False), checkpoint, None)
    state = checkpoint["callbacks"][KEY]
    assert state["best_model_path"] == str(new / "e1.ckpt") and state["dirpath"] == str(new)
    assert not (new / "e1.ckpt").exists() and not (new / "e0.ckpt").exists()  # rank 0 copies
    assert [level for level, _ in notes] == [logging.INFO]


def test_carry_does_not_copy_a_file_onto_itself(tmp_path, old_run):
    """The new dir is a link to the old one but spelt differently in a best_k path: the same file is left alone."""
    new = tmp_path / "new"
    new.symlink_to(old_run)
    state = _state(tmp_path / "gone")  # saved dirpath differs; files found in the new dir itself (same inode)
    state["best_k_models"] = {str(new / "e1.ckpt"): 0.8}
    state["best_model_path"] = str(new / "e1.ckpt")
    state["kth_best_model_path"] = ""
    before = os.stat(old_run / "e1.ckpt").st_mtime_ns
    os.utime(old_run / "e1.ckpt", ns=(before - 10**9, before - 10**9))
    checkpoint = {"callbacks": {KEY: state}}
    rs.carry_checkpoint_states(_trainer(_callback(new)), checkpoint, None)
    assert (old_run / "e1.ckpt").read_text() == "best"
    assert os.stat(old_run / "e1.ckpt").st_mtime_ns == before - 10**9  # not rewritten
    assert state["best_model_path"] == str(new / "e1.ckpt")


def test_carry_overwrites_a_stale_file_of_the_same_name(tmp_path, old_run):
    new = tmp_path / "new"
    _write(new / "e1.ckpt", "stale")
    rs.carry_checkpoint_states(_trainer(_callback(new)), {"callbacks": {KEY: _state(old_run)}}, None)
    assert (new / "e1.ckpt").read_text() == "best"


def test_carry_in_the_same_dir_only_respells_it(tmp_path, old_run):
    link = tmp_path / "link"
    link.symlink_to(old_run)
    checkpoint = {"callbacks": {KEY: _state(old_run)}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(link)), checkpoint, None)
    assert notes == []
    assert _same_state(checkpoint["callbacks"][KEY], {**_state(old_run), "dirpath": str(link)})
    assert not (link / "e1.ckpt").is_symlink() and sorted(os.listdir(old_run)) == ["e0.ckpt", "e1.ckpt", "last.ckpt"]


def _same_state(a, b):
    """States with tensor values: equal keys and values (tensor == compares elementwise)."""
    if set(a) != set(b):
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            if not _same_state(x, y):
                return False
        elif isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("case", ["no state", "no new dirpath", "no saved dirpath", "other key", "no callbacks"])
def test_carry_leaves_states_it_cannot_place_alone(tmp_path, old_run, case):
    new = tmp_path / "new"
    state = _state(old_run)
    if case == "no saved dirpath":
        state["dirpath"] = None
    checkpoint = {"callbacks": {KEY: state}}
    callback = _callback(new)
    if case == "no state":
        checkpoint["callbacks"] = {}
    elif case == "no new dirpath":
        callback = _callback(None)
    elif case == "other key":
        callback = _callback(new, key="ModelCheckpoint{'monitor': 'val/loss'}")
    elif case == "no callbacks":
        checkpoint = {}
    want = {**_state(old_run), "dirpath": None} if case == "no saved dirpath" else _state(old_run)
    assert rs.carry_checkpoint_states(_trainer(callback), checkpoint, None) == []
    if case != "no state" and case != "no callbacks":
        assert _same_state(checkpoint["callbacks"][KEY], want)
    assert not new.exists()


def test_carry_handles_each_checkpoint_callback(tmp_path, old_run):
    other = tmp_path / "other"
    _write(other / "l1.ckpt", "loss best")
    new_a, new_b = tmp_path / "a", tmp_path / "b"
    key_b = "ModelCheckpoint{'monitor': 'val/loss'}"
    state_b = {"monitor": "val/loss", "dirpath": str(other), "best_k_models": {str(other / "l1.ckpt"): 0.25},
               "best_model_path": str(other / "l1.ckpt"), "best_model_score": 0.25, "kth_best_model_path": "",
               "last_model_path": ""}
    checkpoint = {"callbacks": {KEY: _state(old_run), key_b: state_b}}
    notes = rs.carry_checkpoint_states(_trainer(_callback(new_a), _callback(new_b, key_b)), checkpoint, None)
    assert checkpoint["callbacks"][KEY]["best_model_path"] == str(new_a / "e1.ckpt")
    assert state_b["best_model_path"] == str(new_b / "l1.ckpt") and (new_b / "l1.ckpt").read_text() == "loss best"
    assert state_b["best_k_models"] == {str(new_b / "l1.ckpt"): 0.25}
    assert notes[1] == (logging.INFO, f"best checkpoint so far (val/loss=0.2500) carried from {other / 'l1.ckpt'} "
                                      f"to {new_b / 'l1.ckpt'}")


def test_save_checkpoint_holds_rng_wandb_id_and_scalar_metrics():
    torch.manual_seed(5)
    np.random.seed(6)
    random.seed(7)
    cb = rs.ResumeState(wandb_run={"id": "abc123", "mode": "offline"})
    checkpoint = {"global_step": 4}
    metrics = {"val/acc": torch.tensor(0.625), "val/loss": torch.tensor(1.5, dtype=torch.float64),
               "hist": torch.ones(3)}
    cb.on_save_checkpoint(SimpleNamespace(callback_metrics=metrics), None, checkpoint)
    saved = checkpoint["attnbench"]
    assert set(saved) == {"rng_states", "wandb_run", "callback_metrics", "inside_step"}
    assert saved["inside_step"] is None  # not inside a training step (no trainer loop here)
    assert saved["wandb_run"] == {"id": "abc123", "mode": "offline"}
    assert set(saved["callback_metrics"]) == {"val/acc", "val/loss"}
    assert saved["callback_metrics"]["val/loss"].dtype == torch.float64
    assert saved["callback_metrics"]["val/acc"].item() == 0.625
    want = (torch.rand(2), np.random.rand(2), random.random())
    rs.set_rng_states(saved["rng_states"])
    got = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[2] == want[2]
    assert checkpoint["global_step"] == 4


def _fitting_trainer(callbacks, ckpt_path, root):
    return SimpleNamespace(state=SimpleNamespace(fn=TrainerFn.FITTING), checkpoint_callbacks=callbacks,
                           is_global_zero=True, ckpt_path=ckpt_path, default_root_dir=str(root),
                           callback_metrics={})


def test_load_checkpoint_while_fitting_carries_states_and_logs_each_note(tmp_path, old_run, caplog):
    new = tmp_path / "new"
    trainer = _fitting_trainer([_callback(new)], str(old_run / "last.ckpt"), tmp_path / "run")
    checkpoint = {"callbacks": {KEY: _state(old_run)}, "global_step": 12,
                  "attnbench": {"rng_states": {"torch": torch.get_rng_state()},
                                "callback_metrics": {"val/acc": torch.tensor(0.5)}}}
    cb = rs.ResumeState()
    with caplog.at_level(logging.INFO, logger=rs.__name__):
        cb.on_load_checkpoint(trainer, None, checkpoint)
    assert checkpoint["callbacks"][KEY]["best_model_path"] == str(new / "e1.ckpt")
    records = [r for r in caplog.records if r.name == rs.__name__]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.INFO, f"Resuming into {tmp_path / 'run'}: best checkpoint so far (val/acc=0.8000) carried from "
                       f"{old_run / 'e1.ckpt'} to {new / 'e1.ckpt'}.")]
    assert cb._resumed_from_step == 12 and isinstance(cb._resumed_from_step, int)
    assert torch.equal(cb._rng_states["torch"], checkpoint["attnbench"]["rng_states"]["torch"])
    assert cb._callback_metrics["val/acc"].item() == 0.5


def test_load_checkpoint_for_testing_leaves_the_states_alone(tmp_path, old_run):
    """trainer.test loading the best checkpoint is not a resume: nothing is carried."""
    new = tmp_path / "new"
    trainer = _fitting_trainer([_callback(new)], str(old_run / "e1.ckpt"), tmp_path)
    trainer.state = SimpleNamespace(fn=TrainerFn.TESTING)
    checkpoint = {"callbacks": {KEY: _state(old_run)}, "global_step": 3.0, "attnbench": None}
    cb = rs.ResumeState()
    cb.on_load_checkpoint(trainer, None, checkpoint)
    assert _same_state(checkpoint["callbacks"][KEY], _state(old_run)) and not new.exists()
    assert cb._resumed_from_step == 3 and isinstance(cb._resumed_from_step, int)
    assert cb._rng_states is None and cb._callback_metrics is None


def test_load_checkpoint_without_a_step_resumes_from_step_zero(tmp_path):
    cb = rs.ResumeState()
    cb.on_load_checkpoint(_fitting_trainer([], None, tmp_path), None, {})
    assert cb._resumed_from_step == 0


def test_fit_end_restores_the_last_metrics_once_without_overwriting_newer_ones():
    cb = rs.ResumeState()
    cb._callback_metrics = {"val/acc": torch.tensor(0.75), "val/acc_best": torch.tensor(0.8)}
    trainer = SimpleNamespace(callback_metrics={"val/acc": torch.tensor(0.5)})
    cb.on_fit_end(trainer, SimpleNamespace(device=torch.device("cpu")))
    assert trainer.callback_metrics["val/acc"].item() == 0.5  # logged after the checkpoint: kept
    assert trainer.callback_metrics["val/acc_best"].item() == pytest.approx(0.8)
    assert cb._callback_metrics is None
    trainer.callback_metrics.pop("val/acc_best")
    cb.on_fit_end(trainer, SimpleNamespace(device=torch.device("cpu")))  # a second fit: nothing left to restore
    assert set(trainer.callback_metrics) == {"val/acc"}


def test_new_callback_starts_empty():
    cb = rs.ResumeState()
    assert cb.wandb_run is None and cb.replay is None and cb._rng_states is None
    assert cb._resumed_from_step is None and cb._align_log_step is False and cb._callback_metrics is None
    assert rs.ResumeState(wandb_run={"id": "x"}).wandb_run == {"id": "x"}
    assert rs.CHECKPOINT_KEY == "attnbench"


def test_load_checkpoint_looks_for_moved_files_next_to_the_resumed_checkpoint(tmp_path):
    """on_load_checkpoint passes trainer.ckpt_path as the place a moved run's files are looked for."""
    gone = tmp_path / "gone"
    moved = tmp_path / "moved"
    _write(moved / "e1.ckpt", "best")
    _write(moved / "e0.ckpt", "second")
    new = tmp_path / "new"
    trainer = _fitting_trainer([_callback(new)], str(moved / "last.ckpt"), tmp_path / "run")
    checkpoint = {"callbacks": {KEY: _state(gone)}, "global_step": 2}
    rs.ResumeState().on_load_checkpoint(trainer, None, checkpoint)
    state = checkpoint["callbacks"][KEY]
    assert state["best_model_path"] == str(new / "e1.ckpt") and (new / "e1.ckpt").read_text() == "best"
    assert state["best_model_score"].item() == pytest.approx(0.8)


def test_cuda_rng_states_are_saved_when_cuda_was_used_and_restored_where_cuda_is(monkeypatch):
    """torch.cuda faked (this machine has no GPU): the documented rule, save every device's state when CUDA is
    available and initialised, restore it when the checkpoint has one and CUDA is available."""
    fake = [torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([4], dtype=torch.uint8)]
    restored = []
    cuda = {"available": True, "initialized": True}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda["available"])
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: cuda["initialized"])
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: fake)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    states = rs.collect_rng_states()
    assert states["cuda"] is fake
    rs.set_rng_states(states)
    assert restored == [fake]
    cuda["initialized"] = False  # CUDA present but never used in this process: no state to save
    assert "cuda" not in rs.collect_rng_states()
    rs.set_rng_states({k: v for k, v in states.items() if k != "cuda"})  # a CPU run's checkpoint on a GPU machine
    assert restored == [fake]
    cuda.update(available=False, initialized=True)
    assert "cuda" not in rs.collect_rng_states()
    rs.set_rng_states(states)  # a GPU run's checkpoint on a CPU-only machine: the CPU states only
    assert restored == [fake]
