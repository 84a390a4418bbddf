"""The data module on the real SST-2 / TREC files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import attnbench.data as data_mod
from attnbench.data import DataUnavailableError, PadCollator, TextClassificationDataModule

from .conftest import SST2


def test_sst2_row_counts_labels_and_disjoint_validation(sst2):
    dm, _ = sst2
    train, val, test = (dm.splits[s] for s in ("train", "val", "test"))
    assert len(train) + len(val) == 67_349
    assert 0.98 * round(0.05 * 67_349) <= len(val) <= round(0.05 * 67_349)  # whole groups of texts: at most 5%
    assert len(test) == 872  # the official validation split is the test set
    assert dm.label_names == ["negative", "positive"]
    assert set(train.labels) == set(val.labels) == set(test.labels) == {0, 1}
    assert not set(train.row_ids) & set(val.row_ids)
    assert set(train.row_ids) | set(val.row_ids) == set(range(67_349))
    assert max(len(ids) for ids in train.input_ids) <= 64
    assert dm.cache_hit is False


def test_tokenizer_cache_is_reused(sst2, data_dir, monkeypatch):
    dm, cache = sst2

    def boom(*args, **kwargs):
        raise AssertionError("re-tokenized although a cache exists")

    monkeypatch.setattr(TextClassificationDataModule, "_train_tokenizer", boom)
    again = TextClassificationDataModule(**SST2, local_dir=str(data_dir), cache_dir=str(cache), max_length=64)
    again.prepare_data()
    again.setup()
    assert again.cache_hit is True
    assert again.cache_dir == dm.cache_dir
    assert again.splits["train"].input_ids[:50] == dm.splits["train"].input_ids[:50]


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_changed_setting_gets_its_own_cache(sst2, data_dir):
    dm, cache = sst2
    other = TextClassificationDataModule(**SST2, local_dir=str(data_dir), cache_dir=str(cache), max_length=16,
                                         max_train_samples=100, max_eval_samples=50)
    other.prepare_data()
    other.setup()
    assert other.cache_dir != dm.cache_dir and other.cache_hit is False
    assert max(len(ids) for ids in other.splits["train"].input_ids) <= 16
    assert [len(other.splits[s]) for s in ("train", "val", "test")] == [100, 50, 50]


def test_trec_coarse_labels(data_dir, tmp_path):
    dm = TextClassificationDataModule(name="trec", hub_id="CogComp/trec", text_column="text",
                                      label_column="coarse_label", local_dir=str(data_dir), cache_dir=str(tmp_path),
                                      val_size=500)
    dm.setup()
    assert dm.label_names == ["ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM"]
    assert (len(dm.splits["train"]), len(dm.splits["val"]), len(dm.splits["test"])) == (4952, 500, 500)
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    # TREC repeats 11 of its 500 test questions verbatim in train (counted, not hidden); validation none.
    assert meta["leakage"]["test"] == {"n": 500, "verbatim": 11, "substring": 11, "substring_checked": 500}
    assert meta["leakage"]["val"] == {"n": 500, "verbatim": 0, "substring": 0, "substring_checked": 500}


def test_collator_pads_dynamically():
    batch = PadCollator(pad_id=0)([([5, 6, 7], 1), ([8], 0)])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["padding_mask"].tolist() == [[False, False, False], [False, True, True]]
    assert batch["labels"].tolist() == [1, 0] and batch["num_tokens"] == 4


def test_no_local_files_and_no_hub_gives_one_clear_error(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'stanfordnlp/sst2' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(data_mod.datasets, "load_dataset", offline)
    dm = TextClassificationDataModule(**SST2, local_dir=str(tmp_path / "nowhere"), cache_dir=str(tmp_path),
                                      packaged=False)  # the packaged copy is the last resort (test_data_sources)
    with pytest.raises(DataUnavailableError) as err:
        dm.prepare_data()
    msg = str(err.value)
    assert "ATTNBENCH_DATA_DIR" in msg and "Hub" in msg and "sst2/train.parquet" in msg
    assert not list(tmp_path.glob("sst2-*"))  # nothing half-written


def test_bytes_tokenizer_is_one_token_per_utf8_byte(data_dir, tmp_path):
    """The Long Range Arena Text setting: no learned vocabulary, each UTF-8 byte one token, truncated."""
    import pandas as pd
    from tokenizers import Tokenizer

    dm = TextClassificationDataModule(name="trec", hub_id="CogComp/trec", text_column="text",
                                      label_column="coarse_label", local_dir=str(data_dir), cache_dir=str(tmp_path),
                                      val_size=500, max_length=24, tokenizer={"kind": "bytes", "lowercase": False})
    dm.prepare_data()
    dm.setup()
    assert dm.vocab_size == 2 + 256  # [PAD], [UNK] and the 256 byte values
    tokenizer = Tokenizer.from_file(str(dm.cache_dir / "tokenizer.json"))
    texts = pd.read_parquet(data_dir / "trec" / "test.parquet")["text"].tolist()
    for row, ids in zip(dm.splits["test"].row_ids[:50], dm.splits["test"].input_ids[:50]):
        raw = texts[row].encode("utf-8")
        assert len(ids) == min(len(raw), 24)
        assert tokenizer.decode(ids).encode("utf-8") == raw[:24]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wordpiece", "byte_bpe"])
def test_token_ids_do_not_depend_on_the_training_run(data_dir, kind):
    """Three trainings on the same texts give the same vocabulary and ids (across processes: test_data_trust)."""
    texts = pd.read_parquet(data_dir / "trec" / "train.parquet")["text"].tolist()
    dm = TextClassificationDataModule(name="x", hub_id="x", text_column="text", label_column="coarse_label",
                                      local_dir=None, cache_dir="/nonexistent", max_length=32,
                                      tokenizer={"kind": kind, "vocab_size": 3000, "min_frequency": 1})
    tokenizers = [dm._train_tokenizer(texts).to_str() for _ in range(3)]
    assert tokenizers[1] == tokenizers[0] and tokenizers[2] == tokenizers[0]
    vocab = dm._train_tokenizer(texts).get_vocab()
    assert vocab["[PAD]"] == 0 and vocab["[UNK]"] == 1 and len(vocab) == 3000


@pytest.mark.slow
def test_sst2_validation_text_is_never_inside_a_training_text(sst2, data_dir):
    """SST-2 train is phrases: a random 5% carve put 88.7% of the validation phrases inside a training phrase."""
    from attnbench.data.splits import normal_form

    dm, _ = sst2
    texts = pd.read_parquet(data_dir / "sst2" / "train.parquet")["sentence"].tolist()
    train = [normal_form(texts[r]) for r in dm.splits["train"].row_ids]
    joined = "\n".join(train)
    val = [normal_form(texts[r]) for r in dm.splits["val"].row_ids]
    assert sum(t in joined for t in val) == 0
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    assert meta["leakage"]["val"] == {"n": len(val), "verbatim": 0, "substring": 0, "substring_checked": len(val)}
    # The official test sentences: 2 of 872 occur inside a training phrase (as the issue measured), none verbatim.
    assert meta["leakage"]["test"] == {"n": 872, "verbatim": 0, "substring": 2, "substring_checked": 872}
    assert meta["leakage"]["phrase_level"] is True


def test_overlap_counts_are_logged_on_a_cache_hit(sst2, data_dir, caplog):
    dm, cache = sst2
    again = TextClassificationDataModule(**SST2, local_dir=str(data_dir), cache_dir=str(cache), max_length=64)
    with caplog.at_level("INFO", logger="attnbench.data"):
        again.setup()
    assert again.cache_hit is True
    n_val = len(dm.splits["val"])
    assert (f"sst2: overlap with the training texts: val 0 of {n_val:,} identical to a training text, 0 contained as "
            "a substring; test 0 of 872 identical to a training text, 2 contained as a substring") in caplog.text
