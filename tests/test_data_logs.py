"""What the data log says: the packaged copy once, in one line; the validation carve as it happened."""

from __future__ import annotations

import logging
import socket

import pytest

from attnbench.data import sources
from attnbench.data.config import DataConfig

from .test_data_faults import rows, toy_module, write_split


@pytest.fixture
def hub_unreachable(monkeypatch):
    """The Hub played by a bound, not listening local port: every probe is refused at once."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed.getsockname()[1]}")
    monkeypatch.setattr(sources, "_PROBES", {})
    monkeypatch.setattr(sources, "_SAID_PACKAGED", set())
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    yield
    closed.close()


SST2 = dict(name="sst2", hub_id="stanfordnlp/sst2", text_column="sentence", test_split="validation")


def data_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("attnbench.data") and r.levelno >= logging.INFO]


def test_the_packaged_default_is_said_once_in_one_info_line(hub_unreachable, caplog, tmp_path):
    with caplog.at_level(logging.DEBUG, logger="attnbench"):
        for _ in range(3):  # three jobs of a sweep in one process
            source = sources.load_source(DataConfig(**SST2, local_dir=None), None)
            assert source.where == "package:sst2"
    said = data_records(caplog)
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("INFO", "sst2: using the copy packaged with attnbench (no ATTNBENCH_DATA_DIR, Hub not reachable).")]
    assert "ConnectionRefusedError" in caplog.text  # the Hub's error, at DEBUG


def test_a_local_dir_without_the_files_is_a_warning(hub_unreachable, caplog, tmp_path):
    (tmp_path / "mirror").mkdir()
    with caplog.at_level(logging.INFO, logger="attnbench"):
        for _ in range(2):
            sources.load_source(DataConfig(**SST2, local_dir=str(tmp_path / "mirror")), tmp_path / "mirror")
    assert [(r.levelname, r.getMessage()) for r in data_records(caplog)] == [
        ("WARNING", f"sst2: using the copy packaged with attnbench ({tmp_path / 'mirror' / 'sst2'} lacks it, Hub not "
                    "reachable).")]


def overlap_line(caplog) -> str:
    return next(r.getMessage() for r in caplog.records if "overlap with the training texts" in r.getMessage())


def test_the_carve_is_described_as_it_happened(tmp_path, caplog):
    """Texts inside other texts: their count; none: no word of phrases (MR and SMS spam were called phrase-level)."""
    train = rows(40)
    train["text"] = [f"review {i} " + t for i, t in enumerate(train["text"])]
    train["text"][1] = "review 2"  # inside "review 2 ..." (and "review 20 ...", ...)
    train["text"][3] = train["text"][5][:-5]  # a prefix of row 5's text
    write_split(tmp_path / "data", "train", train)
    write_split(tmp_path / "data", "test", rows(10))
    with caplog.at_level(logging.INFO, logger="attnbench"):
        toy_module(tmp_path / "data", tmp_path / "cache", val_size=8).setup()
    assert ("validation carved from train, identical texts kept on one side, and the 2 of 40 distinct texts that "
            "occur inside a longer text kept with a text containing them" in overlap_line(caplog))
    caplog.clear()
    write_split(tmp_path / "plain", "train", {"text": [f"review {i} " + t for i, t in enumerate(rows(40)["text"])],
                                              "label": rows(40)["label"]})
    write_split(tmp_path / "plain", "test", rows(10))
    with caplog.at_level(logging.INFO, logger="attnbench"):
        toy_module(tmp_path / "plain", tmp_path / "cache", val_size=8).setup()
    line = overlap_line(caplog)
    assert "(validation carved from train, identical texts kept on one side)." in line and "longer" not in line
