"""Where a run continues: which checkpoint it resumes from, what a checkpoint holds beyond Lightning's own
state, how it is written, and whether the resume continues exactly as the uninterrupted run would.

- :func:`resolve_checkpoint` (``ckpt_path``) and :func:`checkpoint_extras` (a checkpoint read once, a damaged
  file named in one line);
- :class:`AtomicCheckpointIO`: every checkpoint is written to a temporary file in its own folder, then renamed,
  with a SHA-256 sidecar checked on every load;
- :class:`ResumeState`: the RNG states, the W&B run id and the last metrics in every checkpoint; on resume the
  training loader is put at the checkpoint's place in the epoch, and ``metrics.json`` ``resume`` says whether the
  run continued exactly (checked on the first batch the loader delivers), and if not, why;
- :class:`InterruptCheckpoint`: ``checkpoints/interrupted.ckpt`` on Ctrl-C, SIGTERM or a crash.

Lightning's checkpoint restores weights, optimizer, scheduler, loop counters and callback states (each
callback's ``state_dict``, the training loader's position: :class:`attnbench.data.ResumableDataLoader`). An
epoch's batch order is a function of (seed, epoch) only, so a loader that skips the batches done continues with
the batches the uninterrupted run took next, with or without loader workers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from attnbench.digests import mismatch, remove_sidecar, replace_checked, sha256_of, sidecar
from attnbench.errors import ConfigError, NonFiniteLossError, whole_sentences, write_error
from attnbench.paths import user_path
from attnbench.run.outputs import copy_file

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "attnbench"
INTERRUPTED_CKPT = "interrupted.ckpt"
#: ``metrics.json`` ``resume.reason`` of a mid-epoch resume from a checkpoint without a loader position
OLD_CHECKPOINT_REASON = ("the checkpoint holds no data-loader position (written by an attnbench before exact "
                         "mid-epoch resumes)")


def resolve_checkpoint(ckpt_path: str | None, output_dir: Path) -> str | None:
    """The checkpoint file a run resumes from, or ``None`` to start from scratch.

    Args:
        ckpt_path: ``None``; ``"last"``: the newest of ``last*.ckpt`` and ``interrupted.ckpt`` in
            ``<output_dir>/checkpoints/`` (``hydra.run.dir=<run dir>``, or ``hydra.sweep.dir=<sweep dir>``);
            or a path to a ``.ckpt`` file (relative: from the launch dir).
        output_dir: the job's output directory.

    Raises:
        ConfigError: ``ckpt_path`` names a file that does not exist.
    """
    if ckpt_path in (None, ""):
        return None
    if str(ckpt_path) == "last":
        folder = output_dir / "checkpoints"
        candidates = sorted([*folder.glob("last*.ckpt"), *folder.glob(INTERRUPTED_CKPT)],
                            key=lambda p: p.stat().st_mtime)
        if not candidates:
            log.warning("ckpt_path=last: no checkpoint in %s yet; training from scratch.", output_dir / "checkpoints")
            return None
        return str(candidates[-1])
    path = user_path(ckpt_path)
    if not path.is_file():
        raise ConfigError(
            f"ckpt_path={ckpt_path}: no such checkpoint file. Give a .ckpt file, or ckpt_path=last together with "
            "hydra.run.dir=<the run's output dir> to resume that run from its last checkpoint."
        )
    return str(path.resolve())


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load`` of a checkpoint file (memory-mapped, on the CPU), checked first against its SHA-256 sidecar
    (:func:`check_digest`).

    Raises:
        ConfigError: the file is not a readable checkpoint (truncated, damaged, not a checkpoint), naming it.
    """
    check_digest(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as err:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError, ...
        raise damaged(path, f"torch.load raised {whole_sentences(err, 100)}") from None


def damaged(path: str | os.PathLike, why: str) -> ConfigError:
    """The one-line error for the damaged checkpoint ``path``: ``why`` and what to do instead."""
    return ConfigError(f"{path} is not a readable checkpoint (truncated or damaged: {why}); resume from another "
                       f".ckpt file of {Path(path).parent} (ckpt_path=<file>), or start afresh.")


def check_digest(path: str | os.PathLike) -> None:
    """Refuse a checkpoint whose bytes differ from its ``<file>.sha256`` sidecar (:func:`attnbench.digests.mismatch`:
    a flipped byte that ``torch.load`` would read silently). A checkpoint without a sidecar passes unchecked.

    Raises:
        ConfigError: naming the file and its sidecar; deleting the sidecar loads the file unchecked.
    """
    why = mismatch(path)
    if why is not None:
        raise damaged(path, f"{why}; delete that file to load it unchecked")


def checkpoint_extras(path: str) -> dict[str, Any]:
    """What :class:`ResumeState` stored in the checkpoint at ``path`` (``{}`` for other checkpoints), with its
    ``global_step`` and ``epoch``. Raises :class:`ConfigError` for a damaged file (:func:`load_checkpoint`)."""
    checkpoint = load_checkpoint(path)
    extras = dict(checkpoint.get(CHECKPOINT_KEY) or {})
    extras["global_step"] = int(checkpoint.get("global_step", 0))
    extras["epoch"] = int(checkpoint.get("epoch", 0))
    return extras


def check_checkpoint_fits(path: str, module: torch.nn.Module) -> None:
    """Refuse a checkpoint whose weights do not fit ``module`` (written under another ``model``/``attention``).

    Raises:
        ConfigError: naming the file, the first differing weights and what to change.
    """
    weights = load_checkpoint(path).get("state_dict") or {}
    own = module.state_dict()
    differ = sorted(own.keys() ^ weights.keys()) + sorted(
        k for k in own.keys() & weights.keys() if tuple(own[k].shape) != tuple(weights[k].shape))
    if differ:
        shown = ", ".join(f"{k} {tuple(weights[k].shape) if k in weights else '-'} vs "
                          f"{tuple(own[k].shape) if k in own else '-'}" for k in differ[:3])
        raise ConfigError(f"{path} holds the weights of another model than this run builds ({len(differ)} differ: "
                          f"{shown}, checkpoint vs run). Resume with the model=, attention= and data= settings it "
                          "was trained with (its run's .hydra/config.yaml).")


def check_checkpoint_model(path: str, build: Callable[..., torch.nn.Module]) -> None:
    """:func:`check_checkpoint_fits` before any data work: the run's module is built (``build(vocab_size=...,
    num_classes=..., max_length=..., pad_id=...)``) with the data sizes the checkpoint was trained with (its
    ``hyper_parameters``), so another ``model``/``attention`` is refused in the time of a config error. A checkpoint
    without those sizes (not attnbench's) is checked once the data is known.

    Raises:
        ConfigError: as :func:`check_checkpoint_fits`.
    """
    hparams = load_checkpoint(path).get("hyper_parameters") or {}
    sizes = {key: hparams.get(key) for key in ("vocab_size", "num_classes", "max_length", "pad_id")}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in sizes.values()):
        check_checkpoint_fits(path, build(**sizes))


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O with whole files and SHA-256 sidecars (:mod:`attnbench.digests`).

    - save: ``torch.save`` into ``.<name>.tmp`` in the checkpoint's own folder, then ``os.replace``: a kill or a
      full disk during the write leaves the previous file whole and no partial one under the final name (the
      temporary file is removed when the write fails), with ``<name>.sha256`` kept valid across the rename
      (:func:`attnbench.digests.replace_checked`): a kill at any moment leaves the checkpoint with a sidecar that
      holds its digest;
    - load (``trainer.fit``/``trainer.test`` with ``ckpt_path``): :func:`check_digest` first;
    - remove (``ModelCheckpoint`` dropping a superseded file): the sidecar too.

    Raises:
        OSError: the write failed (a full disk, no permission), with ``filename`` the checkpoint's final path (or
            its sidecar's).
        ConfigError: a load of a checkpoint that differs from its sidecar.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as file:  # through Python's file: a full disk is OSError(ENOSPC), not the
                torch.save(checkpoint, file)  # RuntimeErrors of torch's own stream writer
            replace_checked(tmp, path, sha256_of(tmp))
        except BaseException as err:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            cause = err if isinstance(err, OSError) else err.__cause__ or err.__context__
            if isinstance(cause, OSError) and cause.errno is not None and cause.filename in (None, str(tmp)):
                raise OSError(cause.errno, cause.strerror, str(path)) from err  # the file, not its temporary name
            raise

    def load_checkpoint(self, path: str | os.PathLike, *args: Any, **kwargs: Any) -> dict[str, Any]:
        check_digest(path)
        return super().load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        super().remove_checkpoint(path)
        remove_sidecar(path)


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

    Lightning's ``ModelCheckpoint.load_state_dict`` keeps the best score and the top-k files only when the
    checkpoint's ``dirpath`` equals the callback's. For each checkpoint callback whose saved ``dirpath`` differs,
    the files its state names (``best_k_models``, ``best_model_path``, ``kth_best_model_path``; looked for next to
    ``source`` too, for a moved run dir) are copied with their sidecars into the callback's ``dirpath`` (global rank
    0 only) and the saved state (``checkpoint["callbacks"]``, changed in place) names the copies;
    ``last_model_path`` is cleared.
    Without the best file, its score is dropped as well.

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
                remove_sidecar(target)
                copy_file(found, target)
                if sidecar(found).is_file():  # its digest goes with it: the copy is checked when it is loaded
                    copy_file(sidecar(found), sidecar(target))
            mapping[old] = str(target)
        best = state.get("best_model_path") or ""
        if best and best not in mapping:
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


def _train_loaders(trainer: pl.Trainer) -> list[Any]:
    """The training loaders of ``trainer`` (``trainer.train_dataloader``: one, a list or a dict of them)."""
    loaders = getattr(trainer, "train_dataloader", None)
    if loaders is None:
        return []
    if isinstance(loaders, dict):
        return list(loaders.values())
    return list(loaders) if isinstance(loaders, list | tuple) else [loaders]


def _samplers_follow_current_epoch(trainer: pl.Trainer) -> None:
    """Make the training samplers' ``set_epoch`` use ``trainer.current_epoch`` for the rest of a resumed fit.

    Lightning calls ``set_epoch(epoch_progress.current.processed)`` at each epoch start; after resuming a
    ``trainer.max_steps`` run from an epoch-end checkpoint Lightning counts that epoch processed twice (taken
    back by :func:`_count_reclosed_epoch_once`), and the epoch would take the next epoch's order by that count.
    """
    for dataloader in _train_loaders(trainer):
        for sampler in (getattr(dataloader, "sampler", None),
                        getattr(getattr(dataloader, "batch_sampler", None), "sampler", None)):
            set_epoch = getattr(sampler, "set_epoch", None)
            if set_epoch is None or getattr(set_epoch, "follows_current_epoch", False):
                continue

            def follow(_epoch: int, _set_epoch=set_epoch) -> None:
                _set_epoch(trainer.current_epoch)

            follow.follows_current_epoch = True  # type: ignore[attr-defined]
            sampler.set_epoch = follow


def _count_reclosed_epoch_once(trainer: pl.Trainer) -> None:
    """Keep Lightning's epoch count right after a ``trainer.max_steps`` run resumes from an epoch-end checkpoint.

    The checkpoint is written in ``on_train_epoch_end``, after ``epoch_progress`` counted the epoch processed
    and before it counted it completed. For iteration-based training (``max_steps`` set) ``FitLoop`` restarts
    in its ``restarted_on_epoch_end`` stage and runs that epoch's end again, which counts it processed a second
    time; ``FitLoop.done`` compares the processed count with ``max_epochs``, so a run that ``max_steps`` would
    end inside its last epoch stopped one epoch early (``pytorch_lightning/loops/fit_loop.py``: ``restarting``,
    ``update_restart_stage``, ``on_advance_end``, ``done``). The processed count is taken back by one so that
    the epoch end run again counts once. Left as it is when the checkpoint's epoch was the run's last
    (``processed >= max_epochs``): the fit ends at once, as the uninterrupted one did.
    """
    fit_loop = trainer.fit_loop
    # both are FitLoop internals (Lightning 2.6 has them); a loop without them has no such restart stage
    iteration_based = getattr(fit_loop, "_iteration_based_training", None)
    if not (getattr(fit_loop, "restarted_on_epoch_end", False) and iteration_based is not None and iteration_based()):
        return
    progress = fit_loop.epoch_progress
    if fit_loop.max_epochs not in (None, -1) and progress.current.processed >= fit_loop.max_epochs:
        return
    progress.current.processed -= 1
    progress.total.processed -= 1


def planned_steps(trainer: pl.Trainer) -> float:
    """The fit's optimizer-step budget (``trainer.estimated_stepping_batches``: ``max_steps``, or ``max_epochs`` x
    batches per epoch, whichever ends first); ``inf`` when it has no end or a loader has no length."""
    try:
        return float(trainer.estimated_stepping_batches)
    except Exception:  # noqa: BLE001 - a loader without a length
        return float("inf")


def _scalar_metrics(metrics: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The scalar entries of ``trainer.callback_metrics`` as detached CPU tensors (dtype kept: exact on reload)."""
    return {k: v.detach().cpu().clone() for k, v in metrics.items() if isinstance(v, torch.Tensor) and v.numel() == 1}


class ResumeState(pl.Callback):
    """Checkpoints the RNG states, the W&B run id and the last metrics; on resume restores them, puts the
    training loader at the checkpoint's place in the epoch, and records in :attr:`replay` whether the run
    continues exactly (and if not, why).

    Exactness is claimed only where it holds: RNG states present, the checkpoint taken outside a training step
    and at the end of a gradient-accumulation window, the loader position present, and the first batch the loader
    delivers after the resume the one the uninterrupted run took next (checked: ``started_at`` of
    :class:`attnbench.data.ResumableDataLoader`), and the fit ending at the uninterrupted run's last step
    (checked in :meth:`on_train_end`).

    Args:
        wandb_run: ``{"id": ..., "mode": "online"|"offline"}`` of this job's W&B run, or ``None``; written into
            every checkpoint.
    """

    def __init__(self, wandb_run: dict[str, str] | None = None) -> None:
        super().__init__()
        self.wandb_run = wandb_run
        #: where the resume continued (``metrics.json`` ``resume``): epoch, batches_done, batches_per_epoch, exact;
        #: when not exact a reason, and after a mid-epoch resume from a checkpoint without a loader position
        #: replayed_batches / unseen_batches as [first, last] batch of the epoch
        self.replay: dict[str, Any] | None = None
        self._rng_states: dict[str, Any] | None = None
        self._resumed_from_step: int | None = None
        self._loader_states: list[dict[str, Any]] = []
        self._expected_start: tuple[int, int] | None = None  # (epoch, batch) the loader must continue at
        self._align_log_step = False
        self._align_batch_step = False
        self._callback_metrics: dict[str, torch.Tensor] | None = None
        self._inside_step_note: str | None = None
        # the global step and torch/CUDA RNG states where the current training batch started: a checkpoint taken
        # inside the step (Ctrl-C there) stores these, since Lightning runs that batch again on resume
        self._batch_start: tuple[int, dict[str, Any]] | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        states: dict[str, Any] = {"torch": torch.get_rng_state()}  # what a training step draws from (dropout)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
        self._batch_start = (trainer.global_step, states)
        if self._expected_start is not None:
            self._check_loader_start(trainer)
        if self._align_batch_step:
            # A checkpoint taken inside a training step: Lightning's restart counts one stepped batch too many,
            # so every later point would be logged one step late (one optimizer: one stepped batch per step).
            self._align_batch_step = False
            loop = trainer.fit_loop.epoch_loop
            if len(trainer.optimizers) == 1 and hasattr(loop, "_batches_that_stepped"):
                loop._batches_that_stepped = trainer.global_step

    def _check_loader_start(self, trainer: pl.Trainer) -> None:
        """The first batch after a mid-epoch resume: did every loader continue where the checkpoint left off?"""
        expected, self._expected_start = self._expected_start, None
        wrong = [dl.started_at for dl in _train_loaders(trainer) if getattr(dl, "started_at", expected) != expected]
        if wrong and self.replay is not None and self.replay.get("exact"):
            epoch, start = wrong[0] or (None, None)
            self.replay.update(exact=False, reason=f"the training loader started epoch {epoch} at batch {start}, "
                                                   f"not at batch {expected[1]} of epoch {expected[0]}")
            log.warning("Resumed mid-epoch, but not exactly: %s.", self.replay["reason"])

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        rng_states, inside_step = collect_rng_states(), None
        epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        progress = epoch_loop.batch_progress.current if epoch_loop is not None else None
        if getattr(trainer, "training", False) and progress is not None and progress.ready > progress.processed:
            # inside a training step (Ctrl-C there): the resume runs this batch again from its start's RNG states;
            # exact only if the optimizer has not stepped on it yet
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
        # the training loader's position (FitLoop's checkpoint of stateful loaders): Lightning hands it to the
        # loader only when it sets the loader up after the restore, which this run's LR schedule prevents
        fit_state = ((checkpoint.get("loops") or {}).get("fit_loop") or {}).get("state_dict") or {}
        self._loader_states = list(fit_state.get("combined_loader") or [])
        self._inside_step_note = None
        if extras.get("inside_step") == "after_optimizer_step":
            self._inside_step_note = ("the checkpoint was taken inside a training step after its optimizer step: "
                                      "the resume trains that batch again on the updated weights")
        self._align_batch_step = extras.get("inside_step") is not None
        if self._rng_states is None:
            log.warning("The checkpoint holds no RNG states (not written by attnbench): dropout and data order "
                        "after the resume differ from an uninterrupted run.")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A checkpoint of the run's last epoch end (killed while testing): training never starts again, so the
        # metrics are restored here, and the run ends with the uninterrupted run's val/* and val/acc_best.
        if self._callback_metrics:
            for key, value in self._callback_metrics.items():
                trainer.callback_metrics.setdefault(key, value.to(pl_module.device))
            self._callback_metrics = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._resumed_from_step is None:
            return
        _count_reclosed_epoch_once(trainer)
        _samplers_follow_current_epoch(trainer)
        if self._callback_metrics:
            # the last validation's val/*: a resumed run that stops before validating again still reports them
            # (and ModelCheckpoint saves its stop checkpoint), as the uninterrupted run does
            trainer.callback_metrics.update({k: v.to(pl_module.device) for k, v in self._callback_metrics.items()})
            self._callback_metrics = None
        exact = self._rng_states is not None
        if self._rng_states is not None:
            set_rng_states(self._rng_states)
            self._rng_states = None
        batches = int(trainer.num_training_batches)
        accumulate = trainer.accumulate_grad_batches
        epoch = trainer.current_epoch
        # batches of this epoch done before the checkpoint by the optimizer steps taken
        done = (self._resumed_from_step - epoch * math.ceil(batches / accumulate)) * accumulate
        if done >= batches:  # a max_steps run resumed at an epoch end: Lightning first closes that epoch again
            epoch, done = epoch + 1, 0
        self.replay = {"epoch": epoch, "batches_done": max(done, 0), "batches_per_epoch": batches, "exact": exact}
        fit_loop = trainer.fit_loop
        loop = getattr(fit_loop, "epoch_loop", None)
        # the batches Lightning's loop counts as done: where it continues (and how many it still fetches)
        lightning_done = (loop.batch_progress.current.completed + int(loop.restarted_on_train_batch_end)
                          if loop is not None else done)
        loaders = [dl for dl in _train_loaders(trainer) if hasattr(dl, "resume_at")]
        if self._loader_states and len(self._loader_states) == len(loaders):
            for dl, state in zip(loaders, self._loader_states, strict=True):
                dl.load_state_dict(state)
        self._loader_states = []
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
            self._expected_start = (epoch, lightning_done)
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
            # no loader position in the checkpoint: the epoch's order restarts from its first batch
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
            self._expected_start = (epoch, 0)
            self._align_log_step = True
        self._resumed_from_step = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A resume is exact only if it ends at the uninterrupted run's last step: a fit that ends elsewhere
        without a stop request (early stopping, ``max_time``, a signal) took other steps."""
        if not (self.replay and self.replay.get("exact")) or trainer.should_stop:
            return
        planned = planned_steps(trainer)
        if planned != float("inf") and trainer.global_step != planned:
            self.replay.update(exact=False, reason=f"the resumed run ended at step {trainer.global_step}, the "
                                                   f"uninterrupted run ends at step {planned:.0f}")
            log.warning("Resumed, but not exactly: %s.", self.replay["reason"])

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """After an epoch-end resume of a ``trainer.max_steps`` run, Lightning counts one stepped batch too many
        and logs every later point one step late: log at the steps of the uninterrupted run."""
        if not self._align_log_step:
            return
        self._align_log_step = False
        loop = trainer.fit_loop.epoch_loop
        if len(trainer.optimizers) == 1 and getattr(loop, "_batches_that_stepped", None) == trainer.global_step + 1:
            loop._batches_that_stepped = trainer.global_step


class InterruptCheckpoint(pl.Callback):
    """Saves ``<dirpath>/interrupted.ckpt`` when training stops on an exception (Ctrl-C, SIGTERM, a crash).

    Lightning's ``OnExceptionCheckpoint`` does the save, but its presence makes ``fit(ckpt_path=None)`` resume
    from the newest checkpoint; this callback keeps ``ckpt_path`` meaning what the user wrote, and

    - stops within one optimizer step of a SIGTERM, at the end of its gradient-accumulation window, so that the
      checkpoint resumes exactly;
    - records :attr:`signal_name` (``"Ctrl-C (SIGINT)"`` or ``"SIGTERM"``) and :attr:`checkpoint` (the file
      written, or ``None`` with the reason in :attr:`checkpoint_error`);
    - writes nothing while testing, after a NaN loss, after a failed write, inside validation (resuming from there
      would skip it) or before training has (re)started in this process (the checkpoint would hold trained
      weights at step 0 with a fresh optimizer).

    Args:
        dirpath: the run's ``checkpoints/`` folder.
    """

    def __init__(self, dirpath: str | Path) -> None:
        super().__init__()
        self.ckpt_path = Path(dirpath) / INTERRUPTED_CKPT
        self.checkpoint: Path | None = None
        self.checkpoint_error: str | None = None
        self.signal_name: str | None = None
        self.trainer: pl.Trainer | None = None
        self._training = False
        self._sigterm_deferred = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.trainer = trainer

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._training = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._training = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Lightning stops after any batch once its SIGTERM flag is set: hold the flag back until the
        # accumulation window's last batch, whose optimizer step is in the checkpoint
        connector = getattr(trainer, "_signal_connector", None)
        should_accumulate = getattr(trainer.fit_loop.epoch_loop, "_should_accumulate", lambda: False)
        if trainer.received_sigterm and connector is not None and should_accumulate():
            connector.received_sigterm = False
            self._sigterm_deferred = True
            return
        if trainer.received_sigterm or self._sigterm_deferred:
            if connector is not None:
                connector.received_sigterm = True
            raise SIGTERMException(128 + signal.SIGTERM)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt):
            self.signal_name = "Ctrl-C (SIGINT)"
        elif isinstance(exception, SIGTERMException) or trainer.received_sigterm:
            self.signal_name = "SIGTERM"
        if trainer.state.fn != TrainerFn.FITTING or isinstance(exception, NonFiniteLossError):
            return
        if write_error(exception) is not None:
            return
        if not self._training:
            self.checkpoint_error = ("interrupted before training started: a checkpoint now would hold step 0 "
                                     "without the optimizer and loop state")
            return
        if trainer.validating or trainer.sanity_checking:
            self.checkpoint_error = "interrupted during validation, whose checkpoint would skip it on resume"
            return
        try:
            trainer.save_checkpoint(self.ckpt_path)
            self.checkpoint = self.ckpt_path
        except Exception as err:  # noqa: BLE001 - report it in the message instead
            self.checkpoint_error = f"{type(err).__name__}: {err}"
