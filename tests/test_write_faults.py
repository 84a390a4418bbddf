"""A disk that is full, read-only or has a file where a folder should be: one line naming the folder and what to
change, no partial file under a final name, the previous good file kept (checkpoints, the CSV log, the data cache).

The full and read-only disks are real: small tmpfs mounts (root only; skipped elsewhere)."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
import torch

from attnbench.data.errors import DataConfigError
from attnbench.errors import OutputWriteError
from attnbench.run.loggers import make_csv_logger
from attnbench.run.resume import AtomicCheckpointIO, load_checkpoint

from .test_faults import run_in_process, toy  # noqa: F401  (toy: the fixture)


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(size, read_only=False)``: a fresh tmpfs of ``size`` (``"256k"``) mounted in ``tmp_path``."""
    mounts: list[Path] = []

    def mount(size: str, read_only: bool = False) -> Path:
        folder = tmp_path / f"disk{len(mounts)}"
        folder.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                                               capture_output=True, check=False).returncode != 0:
            pytest.skip("mounting a small tmpfs needs root")
        mounts.append(folder)
        return folder

    yield mount
    for folder in mounts:
        subprocess.run(["umount", "--lazy", str(folder)], capture_output=True, check=False)  # a file may be open


def _fill(folder: Path) -> None:
    """Take every free byte of ``folder``'s file system."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_a_checkpoint_save_on_a_full_disk_is_one_oserror_and_keeps_the_previous_checkpoint(small_disk):
    """torch.save to a path on a full disk raised two RuntimeErrors (`basic_ios::clear`, `inline_container.cc`):
    the checkpoint IO writes through a Python file, so the save ends in OSError(ENOSPC) naming the checkpoint, and
    the previous last.ckpt stays whole with no temporary file beside it."""
    disk = small_disk("1m")
    last = disk / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"weights": torch.arange(1000.0)}, last)
    good = last.read_bytes()
    with pytest.raises(OSError) as err:
        io.save_checkpoint({"weights": torch.arange(500_000.0)}, last)  # 2 MB
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(last)
    assert last.read_bytes() == good and sorted(os.listdir(last.parent)) == ["last.ckpt", "last.ckpt.sha256"]
    assert torch.equal(load_checkpoint(last)["weights"], torch.arange(1000.0))


def test_a_run_whose_disk_fills_ends_in_one_error_naming_the_full_folder(toy, small_disk):  # noqa: F811
    """A run dir on a 256 KiB disk: the first checkpoint does not fit. One OutputWriteError naming the checkpoint
    and its full folder; no checkpoint file and no temporary file is left in checkpoints/."""
    out = small_disk("256k") / "run"
    with pytest.raises(OutputWriteError) as err:
        run_in_process(toy, out, "trainer.max_steps=4", "trainer.val_check_interval=2",
                       "~callbacks.attention_diagnostics", "~callbacks.attention_maps")
    message = str(err.value)
    assert message.startswith(f"Could not write {out / 'checkpoints'}/epoch00-step2")
    assert f"No space left on device ({out / 'checkpoints'} is full). Free disk space" in message
    assert "\n" not in message and os.listdir(out / "checkpoints") == []


@pytest.mark.parametrize("case", ["full", "read-only", "a file"])
def test_an_unwritable_data_cache_is_one_line_naming_the_folder_and_the_setting(toy, small_disk,  # noqa: F811
                                                                               tmp_path, case):
    """data.cache_dir on a full disk, a read-only one, or under a regular file: a raw OSError (or tokenizers'
    `Exception: ... (os error 28)`) before; now one DataConfigError naming the folder and data.cache_dir /
    ATTNBENCH_CACHE_DIR, and nothing half-written left in the folder."""
    if case == "a file":
        (tmp_path / "file").write_text("not a folder")
        cache, why = tmp_path / "file" / "cache", "Not a directory"
    else:
        disk = small_disk("64k", read_only=case == "read-only")
        cache, why = disk / "cache", "No space left on device" if case == "full" else "Read-only file system"
        if case == "full":
            cache.mkdir()
            _fill(disk)
    with pytest.raises(DataConfigError) as err:
        run_in_process(toy, tmp_path / "run", "trainer.max_steps=2", f"data.cache_dir={cache}")
    assert str(err.value) == (
        f"Cannot write the tokenized-data cache in {cache}: {why}. Free space there or make it writable, or point "
        "data.cache_dir (or the ATTNBENCH_CACHE_DIR environment variable) at a writable folder with room.")
    if case == "full":
        assert os.listdir(cache) == []


def test_the_csv_log_keeps_its_last_whole_version_when_the_disk_fills(small_disk):
    """Lightning's ExperimentWriter appends to metrics.csv, and rewrites it in place when a new column appears:
    on a full disk that left it at 0 bytes. Each save goes to a copy that replaces metrics.csv, so a failed save
    leaves the last whole metrics.csv (the rows saved before) and no temporary file."""
    disk = small_disk("64k")
    logger = make_csv_logger(disk)
    logger.log_metrics({"train/loss": 0.5}, step=1)
    logger.save()
    saved = (disk / "csv" / "metrics.csv").read_text()
    assert saved.splitlines() == ["step,train/loss", "1,0.5"]
    _fill(disk)
    logger.log_metrics({"train/loss": 0.4, "val/acc": 0.75}, step=2)  # a new column: the file is rewritten
    with pytest.raises(OSError) as err:
        logger.save()
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(disk / "csv" / "metrics.csv")
    assert (disk / "csv" / "metrics.csv").read_text() == saved
    assert os.listdir(disk / "csv") == ["metrics.csv"]
    (disk / "filler").unlink()
    logger.save()  # the rows not written are kept and written once there is room
    assert (disk / "csv" / "metrics.csv").read_text().splitlines() == [
        "step,train/loss,val/acc", "1,0.5,", "2,0.4,0.75"]


def test_atomic_target_writes_whole_files_or_leaves_the_old_one(tmp_path):
    """Every result file (reports, figures, manifests, metrics) goes through ``atomic_target``: the writer fills a
    hidden temporary file with the same suffix (so matplotlib still picks PNG), which replaces the target only when
    the write finished; a writer that fails leaves the previous file and no temporary one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnbench.paths import atomic_target, write_text_atomically

    figure = tmp_path / "capacity.png"
    fig, _ = plt.subplots()
    with atomic_target(figure) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png" and tmp.name.startswith(".")
        fig.savefig(tmp)
    plt.close(fig)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = tmp_path / "report.csv"
    write_text_atomically(report, "a,b\n1,2\n")
    with pytest.raises(OSError):
        with atomic_target(report) as tmp:
            tmp.write_text("a,b\n1,")  # half a file, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
    assert report.read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capacity.png", "report.csv"]
