"""Whole-run throughput, peak memory and parameter count (:class:`Throughput`), for the summary and ``metrics.json``.

The per-step throughput series comes from Lightning's own ``ThroughputMonitor``
(configured in ``conf/callbacks/default.yaml`` with :func:`batch_size` and
:func:`num_tokens`); :class:`Throughput` adds the whole-run figures that go into
the run summary and ``metrics.json``.
"""

from __future__ import annotations

import functools
import logging
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)

#: the host of measured steps restored from a checkpoint written before checkpoints named their host
UNKNOWN_HOST = "unknown"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@functools.cache
def machine_boot() -> str:
    """This machine, in this boot: ``<hostname>/<first 8 hex digits of the kernel's boot id>`` (Linux's
    ``/proc/sys/kernel/random/boot_id``, new at every boot), or the hostname alone where there is no boot id.

    Two rates measured under one value were measured on one machine between two restarts; a rate of another
    machine, or of the same virtual machine started again (its hostname may be the same), gets another value.
    :func:`attnbench.analysis.stats.summarise` pairs rates only within one value (two machines of one name can
    differ in speed).
    """
    node = socket.gethostname() or "unknown-host"
    try:
        boot = BOOT_ID.read_text().strip().replace("-", "")[:8]
    except OSError:
        return node
    return f"{node}/{boot}" if boot else node


def batch_size(batch: dict[str, Any]) -> int:
    """Number of samples in a collated batch (``ThroughputMonitor.batch_size_fn``)."""
    return int(batch["labels"].shape[0])


def num_tokens(batch: dict[str, Any]) -> int:
    """Non-padding tokens in a collated batch (``ThroughputMonitor.length_fn``)."""
    return int(batch["num_tokens"])


def _proc_status_kib(field: str) -> int | None:
    """A ``/proc/self/status`` field in KiB (Linux), or ``None`` where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window: the CUDA allocator's peak, or on Linux the process's RSS high-water mark.

    On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets ``VmHWM``, so a
    job's peak excludes earlier work in the same process (data preparation,
    earlier jobs of a Hydra multirun). Elsewhere the CPU peak stays the
    process's lifetime peak.
    """
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory in bytes since :func:`reset_peak_memory`: CUDA allocator peak on GPU, else peak RSS.

    On CPU this is the process's RSS high-water mark (``VmHWM`` on Linux, else
    ``getrusage(RUSAGE_SELF).ru_maxrss``) — the whole process (interpreter,
    libraries and data included), so compare it across variants of one
    config, not as the attention's own footprint.
    """
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    hwm = _proc_status_kib("VmHWM")
    if hwm is not None:
        return hwm * 1024
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # bytes on macOS, KiB on Linux


class Throughput(pl.Callback):
    """Whole-run throughput, peak memory and parameter count.

    Training rate: samples and non-padding tokens of every training batch after the first ``warmup_steps``
    batches, over the wall seconds of those batches (CUDA-synchronised; data loading between batches counted;
    validation, the end of an epoch with its checkpoint and the first fetch after each are not; a mid-epoch
    checkpoint counts in the next batch). ``train/steps_per_sec`` counts optimizer steps (``trainer.global_step``,
    the unit of ``trainer.max_steps``: one per k batches with ``accumulate_grad_batches=k``). Test rate: the same
    over the whole test loop. Under DDP both count every process's samples and tokens over the slowest process's
    time (evaluation loaders give each process distinct rows, :func:`attnbench.distributed.eval_sampler`).

    After a run, :attr:`summary` holds ``train/samples_per_sec``, ``train/tokens_per_sec``,
    ``train/steps_per_sec``, ``train/time_sec`` (the measured steps), ``train/samples`` and ``train/tokens``
    (counted in the measured steps, all processes), ``test/samples_per_sec``, ``test/tokens_per_sec``,
    ``test/samples``, ``test/tokens``, ``perf/peak_mem_bytes`` and ``model/params``.

    A single-process CPU run also records ``train/cpu_share`` and ``test/cpu_share``: the CPU seconds of the
    training thread (``time.thread_time``) over the wall seconds of the same steps. An undisturbed run reads about
    1.0 with any number of intra-op threads (the calling thread takes part in every parallel region); a paused
    process or one sharing its core reads less (half a core: about 0.5); another process on a worker thread's
    core is not seen. :func:`attnbench.analysis.stats.summarise` leaves runs below :data:`MIN_CPU_SHARE` out of
    its throughput columns. Not recorded on GPU (the thread waits for the device) nor under DDP (processes wait
    for each other in the all-reduce).

    :attr:`measured_on` names where each rate was measured: ``train_host`` and ``test_host``
    (:func:`machine_boot`; under DDP rank 0's); a resumed run's training steps measured on several hosts are
    sorted and joined by ``+``, and steps restored from a checkpoint that names no host count as
    :data:`UNKNOWN_HOST`. These are text: they go to ``metrics.json`` and the W&B summary, not to metric rows.

    Resume: ``perf/peak_mem_bytes`` is the largest of the run's processes (each checkpoint keeps the peak so
    far). A single-process run keeps its measured seconds, CPU seconds, samples, tokens and steps in every
    checkpoint (:meth:`state_dict`) and counts on from them, so it reports the rate of every measured step, steps
    lost with an interruption counted once, when trained again; each process start excludes its own first
    ``warmup_steps``. Under DDP the checkpoint holds rank 0's counters only, so a resumed DDP run reports the steps
    after its checkpoint.

    Args:
        warmup_steps: training batches excluded from the rate (allocator warm-up, kernel selection, first-touch
            page faults), extended to the end of the optimizer step they end in, so every measured step is timed
            whole.
    """

    def __init__(self, warmup_steps: int = 20) -> None:
        super().__init__()
        self.warmup_steps = int(warmup_steps)
        self.summary: dict[str, float] = {}
        self.measured_on: dict[str, str] = {}
        self._restored_hosts: set[str] = set()  # the hosts of the measured steps counted on from a checkpoint
        self._reset_train()
        self._test_samples = 0
        self._test_tokens = 0
        self._test_t0 = 0.0
        self._test_cpu0 = 0.0
        self._world_size = 1
        self._restored: dict[str, float] = {}
        self._restored_peak = 0  # bytes: the peak of the processes before a resume (a whole run's peak is the max)
        self._device: torch.device | None = None

    #: the measured-step counters a checkpoint keeps (see the class docstring)
    _MEASURED = ("_train_time", "_train_cpu", "_train_samples", "_train_tokens", "_train_steps")

    def state_dict(self) -> dict[str, Any]:
        """The measured-step counters so far (seconds, CPU seconds, samples, tokens, optimizer steps), the hosts
        they were measured on (``hosts``: :func:`machine_boot` values), the peak memory so far (bytes) and the world
        size they were counted under; saved in every checkpoint.

        A checkpoint restored but not yet counted on from (a checkpoint written between the restore and the start
        of training, e.g. ``interrupted.ckpt`` on a Ctrl-C there) is included, so no resume loses the counters
        and peak of the processes before it."""
        pending = self._restored
        peak = max(self._restored_peak, int(pending.get("peak_mem_bytes", 0)),
                   peak_memory_bytes(self._device) if self._device is not None else 0)
        return {"world_size": self._world_size, "peak_mem_bytes": peak, **self._counters_with(pending, self._world_size),
                "hosts": sorted(self._hosts_with(pending, self._world_size))}

    def _counters_with(self, restored: dict[str, Any], world_size: int) -> dict[str, Any]:
        """This process's measured-step counters plus ``restored``'s, where both are one single-process run."""
        counters = {name: getattr(self, name) for name in self._MEASURED}
        if self._counted_on(restored, world_size):
            counters = {name: value + type(value)(restored.get(name, 0)) for name, value in counters.items()}
        return counters

    @staticmethod
    def _counted_on(restored: dict[str, Any], world_size: int) -> bool:
        """Whether a checkpoint's counters add to this process's: both are one single-process run."""
        return restored.get("world_size") == 1 and world_size == 1

    @staticmethod
    def _checkpoint_hosts(restored: dict[str, Any]) -> set[str]:
        """The hosts of a checkpoint's measured steps: its ``hosts``; for a checkpoint without ``hosts``,
        :data:`UNKNOWN_HOST` if it had measured steps."""
        if "hosts" in restored:
            return set(restored["hosts"])
        return {UNKNOWN_HOST} if float(restored.get("_train_time", 0.0)) > 0 else set()

    def _hosts_with(self, restored: dict[str, Any], world_size: int) -> set[str]:
        """The hosts of the measured steps so far: those counted on from a checkpoint, this process's if it
        measured a step, and ``restored``'s where its counters add to this process's."""
        hosts = set(self._restored_hosts)
        if self._train_steps_here:
            hosts.add(machine_boot())
        if self._counted_on(restored, world_size):
            hosts |= self._checkpoint_hosts(restored)
        return hosts

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's counters until training starts (or, for a resumed run whose training had already
        ended, until the fit ends): Lightning restores callbacks before or after ``on_fit_start`` by strategy."""
        self._restored = dict(state_dict)

    def _count_on_from_checkpoint(self, trainer: pl.Trainer) -> None:
        """Add the restored counters (once) to this process's, for a single-process run counted as one."""
        restored, self._restored = self._restored, {}
        self._restored_peak = max(self._restored_peak, int(restored.get("peak_mem_bytes", 0)))
        if self._counted_on(restored, trainer.world_size):
            self._restored_hosts |= self._checkpoint_hosts(restored)
        for name, value in self._counters_with(restored, trainer.world_size).items():
            setattr(self, name, value)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._count_on_from_checkpoint(trainer)

    def _reset_train(self) -> None:
        self._steps_seen = 0
        self._warming = self.warmup_steps > 0
        self._train_time = 0.0
        self._train_cpu = 0.0
        self._train_samples = 0
        self._train_tokens = 0
        self._train_steps = 0
        self._train_steps_here = 0  # measured batches of this process (not restored): its host counts
        self._last_end: float | None = None
        self._last_cpu = 0.0
        self._last_step = 0

    @staticmethod
    def _now(pl_module: pl.LightningModule) -> float:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    @staticmethod
    def _records_cpu_share(trainer, pl_module) -> bool:
        return pl_module.device.type == "cpu" and trainer.world_size <= 1

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reset_train()
        self._world_size, self._device, self._restored_peak = trainer.world_size, pl_module.device, 0
        self._restored_hosts = set()
        # one Throughput fitted again: nothing of the earlier fit's rates or hosts may pass for this one's
        self.measured_on.clear()
        for key in [k for k in self.summary if k.startswith(("train/", "test/"))]:
            del self.summary[key]
        reset_peak_memory(pl_module.device)  # the peak of this job's training and test, not of data preparation
        self.summary["model/params"] = float(sum(p.numel() for p in pl_module.parameters()))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._last_end is None:  # first step after start, validation or checkpointing
            self._last_end, self._last_cpu = self._now(pl_module), time.thread_time()
            self._last_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now, cpu, step = self._now(pl_module), time.thread_time(), trainer.global_step
        self._steps_seen += 1
        if self._warming:
            # the warm-up ends with an optimizer step: with accumulate_grad_batches=k a step whose first
            # micro-batches were warm-up would be counted with part of its time
            self._warming = self._steps_seen < self.warmup_steps or step == self._last_step
        elif self._last_end is not None:
            self._train_time += now - self._last_end
            self._train_cpu += cpu - self._last_cpu
            self._train_samples += batch_size(batch)
            self._train_tokens += num_tokens(batch)
            # optimizer steps (the unit of trainer.max_steps and train/steps_planned): with
            # accumulate_grad_batches=k the global step moves on every k-th batch (and on an epoch's last)
            self._train_steps += step - self._last_step
            self._train_steps_here += 1
        self._last_end, self._last_cpu, self._last_step = now, cpu, step

    def on_validation_start(self, trainer, pl_module) -> None:
        self._last_end = None

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._last_end = None

    @staticmethod
    def _whole_job(trainer, samples: int, tokens: int, seconds: float) -> tuple[float, float, float]:
        """Samples and tokens summed over all processes of the job; seconds: the slowest process's."""
        if trainer.world_size <= 1:
            return float(samples), float(tokens), float(seconds)
        local = torch.tensor([samples, tokens, seconds], dtype=torch.float64, device=trainer.strategy.root_device)
        gathered = trainer.strategy.all_gather(local).reshape(-1, 3).cpu()
        return float(gathered[:, 0].sum()), float(gathered[:, 1].sum()), float(gathered[:, 2].max())

    def on_fit_end(self, trainer, pl_module) -> None:
        self._count_on_from_checkpoint(trainer)  # training never started: the checkpoint was the last one
        samples, tokens, seconds = self._whole_job(trainer, self._train_samples, self._train_tokens, self._train_time)
        if seconds > 0:
            self.summary["train/samples"], self.summary["train/tokens"] = samples, tokens  # the measured steps
            self.summary["train/samples_per_sec"] = samples / seconds
            self.summary["train/tokens_per_sec"] = tokens / seconds
            self.summary["train/steps_per_sec"] = self._train_steps / seconds  # every process takes every step
            self.summary["train/time_sec"] = seconds
            self.measured_on["train_host"] = "+".join(sorted(self._hosts_with({}, trainer.world_size)))
            if self._records_cpu_share(trainer, pl_module):
                self.summary["train/cpu_share"] = self._train_cpu / seconds
        elif self._steps_seen:
            log.warning(
                "Only %d training steps in this process, all within the %d warm-up steps, and none measured "
                "before a checkpoint it resumed from: no training throughput is reported (train/samples, train/tokens "
                "and the train/*_per_sec rates are absent; lower callbacks.run_stats.warmup_steps or train longer).",
                self._steps_seen, self.warmup_steps,
            )
        self.summary["perf/peak_mem_bytes"] = float(max(self._restored_peak, peak_memory_bytes(pl_module.device)))

    def on_test_epoch_start(self, trainer, pl_module) -> None:
        self.measured_on.pop("test_host", None)  # a test loop that measures nothing leaves no earlier loop's figures
        for key in [k for k in self.summary if k.startswith("test/")]:
            del self.summary[key]
        self._test_samples = 0
        self._test_tokens = 0
        self._test_t0, self._test_cpu0 = self._now(pl_module), time.thread_time()

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._test_samples += batch_size(batch)
        self._test_tokens += num_tokens(batch)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        samples, tokens, elapsed = self._whole_job(trainer, self._test_samples, self._test_tokens,
                                                   self._now(pl_module) - self._test_t0)
        self.summary["test/samples"], self.summary["test/tokens"] = samples, tokens
        if elapsed > 0 and samples:
            self.summary["test/samples_per_sec"] = samples / elapsed
            self.summary["test/tokens_per_sec"] = tokens / elapsed
            self.measured_on["test_host"] = machine_boot()
            if self._records_cpu_share(trainer, pl_module):
                self.summary["test/cpu_share"] = (time.thread_time() - self._test_cpu0) / elapsed
        self.summary["perf/peak_mem_bytes"] = float(max(self._restored_peak, peak_memory_bytes(pl_module.device)))


#: a run whose training (test) thread ran on a CPU core for less than this share of the wall time of its measured
#: steps (``train/cpu_share``, ``test/cpu_share``: :class:`Throughput`) was paused or shared its core: the report
#: leaves its training (test) rates out of the throughput columns and the console marks them. An undisturbed CPU
#: run reads 0.98-0.99; two runs on one core read 0.49 each (measured here).
MIN_CPU_SHARE = 0.9
#: summary column, metric, the cpu-share metric that vouches for it
RATE_COLUMNS = (
    ("train_tok_s", "train/tokens_per_sec", "train/cpu_share"),
    ("test_tok_s", "test/tokens_per_sec", "test/cpu_share"),
    ("train_steps_s", "train/steps_per_sec", "train/cpu_share"),
)
