"""What a run prints at its end: the headline figures in human units (no torch or Lightning import).

The full set of figures stays in ``<output_dir>/metrics.json`` and ``csv/metrics.csv``;
the console shows the few a reader compares first, once.
"""

from __future__ import annotations

import math
from typing import Any

# (label, metric key, kind) in the order printed; "-" where the run has no such figure
HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("test/acc", "test/acc", "ratio"),
    ("val/acc_best", "val/acc_best", "ratio"),
    ("train tokens/s", "train/tokens_per_sec", "rate"),
    ("test tokens/s", "test/tokens_per_sec", "rate"),
    ("peak memory", "perf/peak_mem_bytes", "bytes"),
    ("parameters", "model/params", "count"),
    ("total time", "time/total_sec", "seconds"),
)


def imbalanced(info: dict[str, Any]) -> bool:
    """Whether the test set of a run (``info``: ``num_classes``, ``test_largest_class_share``) is imbalanced: its
    largest class holds more than 1.2 / ``num_classes`` of it, where accuracy alone flatters a classifier (always
    answering that class scores ``test_largest_class_share``) and the macro-F1 goes beside it."""
    share, classes = info.get("test_largest_class_share"), info.get("num_classes")
    return bool(share and classes and share > 1.2 / classes)


def human_bytes(n: float) -> str:
    """``776548352`` -> ``"740.6 MiB"`` (binary units: KiB = 1024 bytes)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    """``24.1`` -> ``"24.1 s"``, ``125`` -> ``"2 min 05 s"``, ``3725`` -> ``"1 h 02 min"``."""
    s = float(s)
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        minutes, seconds = divmod(round(s), 60)
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(round(s / 60), 60)
    return f"{hours} h {minutes:02d} min"


def _format(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-" if value is None else str(value)
    if kind == "ratio":
        return f"{value:.4f}"
    if kind == "rate":
        return f"{value:,.0f}"
    if kind == "bytes":
        return human_bytes(value)
    if kind == "count":
        return f"{value / 1e6:.2f} M" if value >= 1e6 else f"{value:,.0f}"
    return human_seconds(value)


def format_summary(summary: dict[str, Any], info: dict[str, Any]) -> str:
    """The end-of-run text: a title line, the :data:`HEADLINE` figures one per line, where the rest is.

    A rate whose thread had less than :data:`attnbench.callbacks.throughput.MIN_CPU_SHARE` of a CPU core (``*/cpu_share``:
    the process was paused or shared its core) is printed with that share and marked as disturbed.

    Args:
        summary: the run summary (metric key -> float), as written to ``metrics.json``.
        info: ``run_name``, ``output_dir``, ``num_classes`` and ``test_largest_class_share`` (an imbalanced test
            set, whose largest class holds more than 1.2 / num_classes of it, gets the macro-F1 beside its
            accuracy: :func:`imbalanced`), ``stopped_by`` (``"max_time"`` when ``trainer.max_time`` ended the
            fit early: the title says so, with ``train/steps_done`` of ``train/steps_planned``) and, when W&B
            ran, ``wandb_run_dir`` and ``wandb_mode``.
    """
    state = "done"
    if info.get("stopped_by"):  # the wall-time cap ended the fit early: its test/acc is not a final figure
        done, planned = summary.get("train/steps_done"), summary.get("train/steps_planned")
        steps = f" after {done:,.0f} of {planned:,.0f} steps" if done is not None and planned is not None else ""
        state = f"stopped by trainer.{info['stopped_by']}{steps} (not trained to its budget)"
    lines = [f"attnbench · {info['run_name']} · {state}"]
    from attnbench.callbacks.throughput import MIN_CPU_SHARE, RATE_COLUMNS

    cpu_share = {metric: share for _, metric, share in RATE_COLUMNS}  # the share that vouches for each rate
    width = max(len(label) for label, _, _ in HEADLINE)
    for label, key, kind in HEADLINE:
        line = f"  {label:<{width}}  {_format(summary.get(key), kind)}"
        if key == "test/acc" and imbalanced(info) and "test/f1_macro" in summary:
            line += (f"  (macro-F1 {summary['test/f1_macro']:.4f}; the largest class is "
                     f"{info['test_largest_class_share']:.0%} of the test set)")
        share = summary.get(cpu_share.get(key, ""))
        if share is not None and share < MIN_CPU_SHARE:  # a pause or a shared core: the rate understates the run
            line += f"  (disturbed: cpu share {share:.2f} < {MIN_CPU_SHARE}; reports leave this rate out)"
        lines.append(line)
    lines.append(f"All {len(summary)} figures: {info['output_dir']}/metrics.json (and csv/metrics.csv, checkpoints/)")
    if info.get("wandb_run_dir"):
        if info.get("wandb_mode") == "offline":
            lines.append(f"W&B offline run: {info['wandb_run_dir']}\n"
                         f"  upload: wandb sync {info['wandb_run_dir']}    browse here: wandb leet {info['wandb_run_dir']}")
        else:
            lines.append(f"W&B run: {info['wandb_run_dir']}")
    return "\n".join(lines)
