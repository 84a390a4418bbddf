"""The state Lightning's checkpoints lack: RNG states, the W&B run id, the last metrics (:class:`ResumeState`).

Which checkpoint a run resumes from: :mod:`attnbench.run.resume`.

Lightning's checkpoint restores weights, optimizer, learning-rate scheduler,
loop counters and callback states (best checkpoint so far). :class:`ResumeState`
adds the random-number generators (torch, CUDA, NumPy, Python) and the W&B
run id. With the data order a function of (seed, epoch) alone
(:class:`attnbench.data.EpochShuffleSampler`), a run resumed from an
epoch-end checkpoint continues exactly as the uninterrupted run would have. So does one resumed from a
mid-epoch checkpoint (``callbacks.last_checkpoint.every_n_train_steps``, ``interrupted.ckpt``): the training
loader (:class:`attnbench.data.ResumableDataLoader`) stores its place in the epoch's order in the
checkpoint, and the resume continues with the next batch of that order. A resume stays inexact, and says so
in the log and in ``metrics.json`` ``resume`` (``exact: false`` with a ``reason``), only when

- the checkpoint holds no loader position (written by attnbench before exact mid-epoch resumes): the epoch's
  order restarts, and ``replayed_batches`` / ``unseen_batches`` say which batches were trained twice / never;
- it was taken inside an optimizer step or a gradient-accumulation window (Ctrl-C there): gradients
  accumulated so far, or dropout already drawn after the optimizer stepped, are not in any checkpoint;
- it holds no RNG states (not written by attnbench).

A run resumed into another output dir than the one its checkpoint was written in
(``ckpt_path=<file> hydra.run.dir=<new dir>``, or a run dir that was moved) keeps the
best checkpoint so far: :func:`carry_checkpoint_states` copies it into the new
``checkpoints/`` and points ``ModelCheckpoint``'s state there (Lightning alone
drops the best score when the dir changes, so a worse later epoch became "best"
and was tested). A ``trainer.max_steps`` run resumed at an epoch end gets the
batch order and the logging steps of the uninterrupted run
(:func:`_samplers_follow_current_epoch`, :meth:`ResumeState.on_train_epoch_start`).
The metrics last logged before a checkpoint (``trainer.callback_metrics``: the last
validation's ``val/*``) are stored in it and restored, so a run that stops before
validating again reports them, and saves its stop checkpoint, as the uninterrupted run does.
"""

from __future__ import annotations

import logging
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.trainer.states import TrainerFn

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "attnbench"
#: ``metrics.json`` ``resume.reason`` of a mid-epoch resume from a checkpoint without a loader position
OLD_CHECKPOINT_REASON = ("the checkpoint holds no data-loader position (written by an attnbench before exact "
                         "mid-epoch resumes)")


def collect_rng_states() -> dict[str, Any]:
    """The global RNG states (torch CPU, every CUDA device, NumPy, Python) in a form ``torch.load`` accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore the states of :func:`collect_rng_states`."""
    torch.set_rng_state(states["torch"])
    npst = states["numpy"]
    np.random.set_state((npst["kind"], npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"],
                         npst["gauss"]))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _same_path(a: str | Path, b: str | Path) -> bool:
    return os.path.realpath(os.path.expanduser(str(a))) == os.path.realpath(os.path.expanduser(str(b)))


def carry_checkpoint_states(trainer: pl.Trainer, checkpoint: dict[str, Any],
                            source: str | None) -> list[tuple[int, str]]:
    """Make the ``ModelCheckpoint`` states of a checkpoint written in another dir valid in this run's dir.

    Lightning's ``ModelCheckpoint.load_state_dict`` keeps the best score, the
    top-k files and the last path only when the checkpoint's ``dirpath`` equals
    the callback's. For each checkpoint callback of ``trainer`` whose saved
    ``dirpath`` differs, this copies the files it refers to (``best_k_models``,
    ``best_model_path``, ``kth_best_model_path``) into the callback's
    ``dirpath`` and rewrites the saved state (in place, before Lightning loads
    it) to name the copies; ``last_model_path`` is cleared (this run writes its
    own ``last.ckpt``). A file missing from the old dir is looked for next to
    ``source`` (a moved run dir). Only global rank 0 copies; every rank
    rewrites the same state.

    Args:
        trainer: the trainer restoring ``checkpoint``.
        checkpoint: the loaded checkpoint dict (``checkpoint["callbacks"]`` is changed in place).
        source: path of the checkpoint file being resumed from, or ``None``.

    Returns:
        ``(logging level, message)`` pairs: what was carried (INFO) or could not be (WARNING).
    """
    states = checkpoint.get("callbacks") or {}
    notes: list[tuple[int, str]] = []
    for callback in trainer.checkpoint_callbacks:
        state = states.get(getattr(callback, "state_key", None))
        new_dir = getattr(callback, "dirpath", None)
        old_dir = (state or {}).get("dirpath")
        if not state or new_dir is None or old_dir is None or _same_path(old_dir, new_dir):
            if state and new_dir is not None and old_dir is not None:
                state["dirpath"] = new_dir  # the same folder spelt differently (symlink, relative path)
            continue
        referenced = {str(p) for p in (*(state.get("best_k_models") or {}), state.get("best_model_path"),
                                       state.get("kth_best_model_path")) if p}
        mapping: dict[str, str] = {}
        for old in sorted(referenced):
            name = Path(old).name
            found = next((c for c in (Path(old), Path(old_dir) / name,
                                      *([Path(source).parent / name] if source else []))
                          if c.is_file()), None)
            target = Path(new_dir) / name
            if found is None:
                if target.is_file():  # the run dir was moved: the file is already where it belongs
                    mapping[old] = str(target)
                continue
            if trainer.is_global_zero and not (target.exists() and os.path.samefile(found, target)):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(found, target)
            mapping[old] = str(target)
        best = state.get("best_model_path") or ""
        if best and best not in mapping:
            # Without the file, keeping the score would leave no checkpoint to test; forget both, say so.
            notes.append((logging.WARNING,
                f"the best checkpoint so far ({best}, {state.get('monitor')}={_score(state.get('best_model_score'))})"
                f" is not in {old_dir} nor next to {source}: this run tests the best of the epochs it trains itself, "
                "which may differ from an uninterrupted run. Copy that file next to the checkpoint you resume from "
                "to keep it."))
            state["best_model_score"] = None
            state["best_k_models"] = {}
            state["kth_best_model_path"] = ""
            state.pop("kth_value", None)  # Lightning's default (no k-th best yet)
        else:
            state["best_k_models"] = {mapping[p]: v for p, v in (state.get("best_k_models") or {}).items()
                                      if p in mapping}
            if state.get("kth_best_model_path"):
                state["kth_best_model_path"] = mapping.get(state["kth_best_model_path"], "")
            if best:
                notes.append((logging.INFO, f"best checkpoint so far ({state.get('monitor')}="
                              f"{_score(state.get('best_model_score'))}) carried from {best} to {mapping[best]}"))
        state["best_model_path"] = mapping.get(best, "")
        state["last_model_path"] = ""
        state["dirpath"] = new_dir
    return notes


def _score(value: Any) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


def _scalar_metrics(metrics: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The scalar entries of ``trainer.callback_metrics`` as detached CPU tensors (dtype kept: exact on reload)."""
    return {k: v.detach().cpu().clone() for k, v in metrics.items() if isinstance(v, torch.Tensor) and v.numel() == 1}


def _samplers_follow_current_epoch(trainer: pl.Trainer) -> None:
    """Make the training samplers' ``set_epoch`` use ``trainer.current_epoch`` for the rest of a resumed fit.

    Lightning calls ``set_epoch(epoch_progress.current.processed)`` at each epoch start. After resuming a
    ``trainer.max_steps`` run from an epoch-end checkpoint, Lightning re-runs the end of the checkpoint's epoch
    and that counter runs one ahead of ``current_epoch``: epoch 1 got epoch 2's order (measured: every batch
    of epochs 1 and 2 differed from the uninterrupted run). The sampler's order must be that of the epoch being
    trained, as in the uninterrupted run.
    """
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    for dataloader in (loader.flattened if loader is not None else []):
        for sampler in (getattr(dataloader, "sampler", None),
                        getattr(getattr(dataloader, "batch_sampler", None), "sampler", None)):
            set_epoch = getattr(sampler, "set_epoch", None)
            if set_epoch is None or getattr(set_epoch, "follows_current_epoch", False):
                continue

            def follow(_epoch: int, _set_epoch=set_epoch) -> None:
                _set_epoch(trainer.current_epoch)

            follow.follows_current_epoch = True  # type: ignore[attr-defined]
            sampler.set_epoch = follow


def _train_loaders(trainer: pl.Trainer) -> list[Any]:
    """The training loaders that record their place in the epoch (``state_dict``/``load_state_dict``)."""
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    return [dl for dl in (loader.flattened if loader is not None else [])
            if hasattr(dl, "state_dict") and hasattr(dl, "resume_at")]


class ResumeState(pl.Callback):
    """Checkpoints the RNG states and the W&B run id; on resume restores the RNGs, puts the training loader at the
    checkpoint's place in the epoch, and logs whether the run continues exactly (and if not, why).

    The RNG states are restored when training starts (after the sanity check,
    before the first batch), which is where the uninterrupted run stood when
    the checkpoint was written at the end of validation.

    Args:
        wandb_run: ``{"id": ..., "mode": "online"|"offline"}`` of this job's W&B
            run, or ``None``; written into every checkpoint.
    """

    def __init__(self, wandb_run: dict[str, str] | None = None) -> None:
        super().__init__()
        self.wandb_run = wandb_run
        self._rng_states: dict[str, Any] | None = None
        self._resumed_from_step: int | None = None
        #: where the resume continued (``metrics.json`` ``resume``): epoch, batches_done, batches_per_epoch, exact;
        #: when not exact a reason, and after a mid-epoch resume from a checkpoint without a loader position
        #: replayed_batches / unseen_batches as [first, last] batch of the epoch
        self.replay: dict[str, Any] | None = None
        self._align_log_step = False
        self._align_batch_step = False
        self._callback_metrics: dict[str, torch.Tensor] | None = None
        self._inside_step_note: str | None = None  # why the checkpoint resumed from cannot continue exactly
        # the global step and torch/CUDA RNG states where the current training batch started: a checkpoint taken
        # inside the step (Ctrl-C there) stores these, since Lightning runs that batch again on resume
        self._batch_start: tuple[int, dict[str, Any]] | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # torch (and CUDA) only, the generators a training step draws from (dropout): 5 us a batch, where
        # collect_rng_states' NumPy and Python states cost 280 us (measured, one CPU core)
        states: dict[str, Any] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
        self._batch_start = (trainer.global_step, states)
        if self._align_batch_step:
            # A checkpoint taken inside a training step: Lightning's restart adds the step its loop adds after a
            # batch end, so every later point would be logged one step late; log at the uninterrupted run's
            # steps (one optimizer: one stepped batch per optimizer step).
            self._align_batch_step = False
            loop = trainer.fit_loop.epoch_loop
            if len(trainer.optimizers) == 1 and hasattr(loop, "_batches_that_stepped"):
                loop._batches_that_stepped = trainer.global_step

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        rng_states, inside_step = collect_rng_states(), None
        epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        progress = epoch_loop.batch_progress.current if epoch_loop is not None else None
        if getattr(trainer, "training", False) and progress is not None and progress.ready > progress.processed:
            # Taken inside a training step (Ctrl-C there): the resume runs this batch again, so it needs the RNG
            # states of the batch's start; exact only if the optimizer has not stepped on it yet.
            if self._batch_start is not None and self._batch_start[0] == trainer.global_step:
                rng_states, inside_step = {**rng_states, **self._batch_start[1]}, "before_optimizer_step"
            else:
                inside_step = "after_optimizer_step"
        checkpoint[CHECKPOINT_KEY] = {"rng_states": rng_states, "wandb_run": self.wandb_run,
                                      "callback_metrics": _scalar_metrics(trainer.callback_metrics),
                                      "inside_step": inside_step}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        if trainer.state.fn == TrainerFn.FITTING:  # not when trainer.test loads the best checkpoint
            for level, note in carry_checkpoint_states(trainer, checkpoint, trainer.ckpt_path):
                log.log(level, "Resuming into %s: %s.", trainer.default_root_dir, note)
        extras = checkpoint.get(CHECKPOINT_KEY) or {}
        self._rng_states = extras.get("rng_states")
        self._callback_metrics = extras.get("callback_metrics")
        self._resumed_from_step = int(checkpoint.get("global_step", 0))
        self._inside_step_note = None
        if extras.get("inside_step") == "after_optimizer_step":
            self._inside_step_note = ("the checkpoint was taken inside a training step after its optimizer step: "
                                      "the resume trains that batch again on the updated weights")
        self._align_batch_step = extras.get("inside_step") is not None
        if self._rng_states is None:
            log.warning("The checkpoint holds no RNG states (not written by attnbench): dropout and data order "
                        "after the resume differ from an uninterrupted run.")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A checkpoint from the run's last epoch end (the run was killed while testing): Lightning's fit loop is
        # already done, so training never starts and on_train_start never restores the metrics; restore them
        # here, so the resumed run ends with the same val/* and val/acc_best as the uninterrupted one.
        if self._callback_metrics:
            for key, value in self._callback_metrics.items():
                trainer.callback_metrics.setdefault(key, value.to(pl_module.device))
            self._callback_metrics = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._resumed_from_step is None:
            return
        _samplers_follow_current_epoch(trainer)
        if self._callback_metrics:
            # The metrics last logged before the checkpoint (the last validation's val/*, val/acc_best, ...) are
            # what the uninterrupted run still holds here. Lightning does not checkpoint them: a resumed run that
            # stops before validating again (a trainer.max_steps run ending inside the epoch after the
            # checkpoint) ended with no val/* at all, and ModelCheckpoint skipped its end-of-training save.
            trainer.callback_metrics.update({k: v.to(pl_module.device) for k, v in self._callback_metrics.items()})
            self._callback_metrics = None
        exact = self._rng_states is not None
        if self._rng_states is not None:
            set_rng_states(self._rng_states)
            self._rng_states = None
        batches = int(trainer.num_training_batches)
        accumulate = trainer.accumulate_grad_batches
        epoch = trainer.current_epoch
        # batches of this epoch done before the checkpoint according to the optimizer steps taken (a step
        # checkpoint is written before Lightning counts its batch as completed, so count optimizer steps)
        done = (self._resumed_from_step - epoch * math.ceil(batches / accumulate)) * accumulate
        if done >= batches:  # a max_steps run resumed at an epoch end: Lightning first closes that epoch again
            epoch, done = epoch + 1, 0
        self.replay = {"epoch": epoch, "batches_done": max(done, 0), "batches_per_epoch": batches, "exact": exact}
        fit_loop = trainer.fit_loop
        loop = getattr(fit_loop, "epoch_loop", None)
        # the batches Lightning's loop counts as done: where it continues (and how many it still fetches)
        lightning_done = (loop.batch_progress.current.completed + int(loop.restarted_on_train_batch_end)
                          if loop is not None else done)
        if getattr(fit_loop, "_combined_loader_states_to_load", None) and fit_loop.restarting:
            # Lightning gives the loaders their checkpointed state in FitLoop.setup_data, but that ran before the
            # checkpoint was restored (configure_optimizers asks for trainer.estimated_stepping_batches, which
            # sets up the train loader) and does not run again: hand the states over now, with its own method.
            fit_loop._load_combined_loader_states()
        loaders = _train_loaders(trainer)
        positioned = bool(loaders) and all(getattr(dl, "restored", None) is not None
                                           and dl.restored.get("epoch") == epoch for dl in loaders)
        mid_epoch = bool(getattr(fit_loop, "restarted_mid_epoch", False)) and 0 < lightning_done < batches
        for dl in loaders:  # continue where Lightning's loop continues, with the next batch of the epoch's order
            dl.resume_at(epoch, lightning_done if mid_epoch and positioned else 0)
        if mid_epoch and positioned:
            reasons = [] if exact else ["the checkpoint holds no RNG states"]
            if self._inside_step_note:
                reasons.append(self._inside_step_note)
            if lightning_done != done:
                reasons.append(f"the checkpoint was taken inside a gradient-accumulation window (trainer."
                               f"accumulate_grad_batches={accumulate}): the gradients of batches {done}-"
                               f"{lightning_done - 1} of the epoch were not saved and are lost")
            self.replay.update(batches_done=lightning_done, exact=not reasons)
            if reasons:
                self.replay["reason"] = "; ".join(reasons)
                log.warning("Resumed mid-epoch at step %d: epoch %d continues at batch %d of its %d, but not "
                            "exactly as it would have: %s.", self._resumed_from_step, epoch, lightning_done,
                            batches, self.replay["reason"])
            else:
                log.info("Resumed mid-epoch at step %d: epoch %d continues at batch %d of its %d (the "
                         "uninterrupted run's order); the run continues exactly as it would have.",
                         self._resumed_from_step, epoch, lightning_done, batches)
        elif 0 < done < batches:
            # No loader position in the checkpoint (written by an attnbench before exact mid-epoch resumes, or
            # another data module's loader): the epoch's order restarts from its first batch.
            replayed = min(done, batches - done)
            self.replay.update(replayed_batches=[0, replayed - 1], unseen_batches=[max(done, batches - done),
                                                                                    batches - 1], exact=False,
                               reason=OLD_CHECKPOINT_REASON)
            log.warning(
                "Resumed mid-epoch at step %d: epoch %d had run %d of its %d batches. Weights, optimizer, scheduler "
                "and RNG states are those of step %d, but the checkpoint holds no data-loader position (written "
                "by an attnbench before exact mid-epoch resumes): the epoch's remaining "
                "%d steps take batches 0-%d of the epoch's order again, so %d batch(es) seen before the "
                "interruption are replayed (batches 0-%d) and batches %d-%d of this epoch are not seen. From epoch %d "
                "on the batches are the uninterrupted run's; the final metrics are not. Checkpoints written by "
                "this version resume exactly.",
                self._resumed_from_step, epoch, done, batches, self._resumed_from_step, batches - done,
                batches - done - 1, replayed, replayed - 1, max(done, batches - done), batches - 1, epoch + 1,
            )
        else:
            log.info("Resumed at the start of epoch %d (step %d): the run continues exactly as it would have.",
                     epoch, self._resumed_from_step)
            self._align_log_step = True
        self._resumed_from_step = None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """After an epoch-end resume of a ``trainer.max_steps`` run, Lightning (2.6) counts one stepped batch too
        many and logs every later point one step late (val/loss of step 25 at step 26): log at the steps of the
        uninterrupted run (one optimizer: one stepped batch per optimizer step)."""
        if not self._align_log_step:
            return
        self._align_log_step = False
        loop = trainer.fit_loop.epoch_loop
        if len(trainer.optimizers) == 1 and getattr(loop, "_batches_that_stepped", None) == trainer.global_step + 1:
            loop._batches_that_stepped = trainer.global_step
