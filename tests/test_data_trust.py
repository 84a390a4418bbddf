"""Measurements to trust: held-out text never inside training text, tokenizers the same in every process,
a cache key of every setting that changes the tokenized splits, labels matched by name."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest

from attnbench.data import DataConfigError, TextClassificationDataModule
from attnbench.data import splits
from attnbench.data.splits import carve_disjoint, contained, normal_form, overlap_counts

from .conftest import REPO_ROOT, train_env
from .test_data_faults import toy_module, write_split

# ----------------------------------------------------------------------------------------------- carving
SENTENCES = [f"the {a} film was {b} and {c}" for a in ("long", "short", "odd", "new", "old")
             for b in ("good", "bad", "dull", "fine") for c in ("funny", "slow", "sad")]


def phrase_rows() -> dict[str, list]:
    """Phrase-level data like SST-2 under any name: each sentence, its sub-phrases, and some verbatim repeats."""
    texts = []
    for s in SENTENCES:
        w = s.split()
        texts += [s, " ".join(w[1:3]), " ".join(w[3:5]), " ".join(w[:5]), " ".join(w[4:])]
    texts += SENTENCES[:10] + ["Was GOOD  and funny"]  # exact repeats, and a repeat up to case and spaces
    return {"text": texts, "label": [i % 2 for i in range(len(texts))]}


def test_carving_is_group_aware_for_any_phrase_level_dataset(tmp_path):
    data = phrase_rows()
    for split in ("train", "test"):
        write_split(tmp_path / "data", split, data)
    dm = toy_module(tmp_path / "data", tmp_path / "cache", val_size=0.2)
    dm.setup()
    texts = data["text"]
    train = [normal_form(texts[r]) for r in dm.splits["train"].row_ids]
    val = [normal_form(texts[r]) for r in dm.splits["val"].row_ids]
    assert len(val) >= 0.15 * len(texts) and len(train) + len(val) == len(texts)
    joined = "\n".join(train)
    assert [t for t in val if t in joined] == []  # no validation text inside a training text
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    assert meta["leakage"]["phrase_level"] is True
    assert meta["leakage"]["val"]["substring"] == 0 and meta["leakage"]["val"]["verbatim"] == 0
    # The test split is the same rows: the training rows are counted in the training texts, the validation ones not.
    assert meta["leakage"]["test"] == {"n": len(texts), "verbatim": len(train), "substring": len(train),
                                       "substring_checked": len(texts)}


def test_carving_keeps_identical_texts_on_one_side():
    texts = [f"question {i % 40:02d} here" for i in range(400)]  # 40 texts, each 10 times
    carving = carve_disjoint(texts, 100, seed=0)
    val = {texts[i] for i in carving.val}
    assert len(carving.val) == 100 and len(val) == 10  # whole groups of 10
    assert not val & {texts[i] for i in carving.train}
    assert carving.phrase_level is False and carving.moved_to_train == 0


def test_a_phrase_goes_to_validation_only_with_every_sentence_that_contains_it():
    texts = ["a b c d", "b c", "c d", "e f g", "f g", "b c", "x b c y"]  # "b c" is in two sentences, and twice
    for seed in range(20):
        carving = carve_disjoint(texts, 3, seed=seed)
        val = [texts[i] for i in carving.val]
        train = "\n".join(texts[i] for i in carving.train)
        assert not [t for t in val if t in train], seed
        assert sorted(carving.train + carving.val) == list(range(7))
        assert ("b c" in val) == ("a b c d" in val and "x b c y" in val)


@pytest.mark.parametrize("chunk, max_places", [(3, 64), (64, 2), (None, 64)])
def test_contained_agrees_with_a_plain_substring_search(monkeypatch, chunk, max_places):
    """The windowed-hash search against ``any(n in h for h in haystacks)`` on random texts: short and long
    needles (anchor = whole needle, or its middle 32 bytes), multi-byte UTF-8, repetitive text, needles that
    span two haystacks (never contained), needles sharing their anchor, the hash chunks' seams (``chunk``
    window starts) and the plain-search fallback for common anchors (``max_places``)."""
    if chunk:
        monkeypatch.setattr(splits, "_CHUNK", chunk)
    monkeypatch.setattr(splits, "_MAX_PLACES", max_places)
    rng = random.Random(chunk or 0)
    for trial in range(100):
        alphabet = rng.choice(["a", "ab", "ab é", "abcdefghij ", "x€y "])
        hays = ["".join(rng.choices(alphabet, k=rng.randint(0, 90))) for _ in range(rng.randint(0, 10))]
        needles = []
        for _ in range(rng.randint(1, 25)):
            if hays and rng.random() < 0.5:
                h = rng.choice(hays)
                a = rng.randint(0, len(h))
                needles.append(h[a:rng.randint(a, len(h))])
            else:
                needles.append("".join(rng.choices(alphabet, k=rng.randint(0, 80))))
        if len(hays) >= 2:
            needles.append(hays[0][-4:] + hays[1][:4])  # across the seam of two haystacks
            needles.append(hays[0][:40] + "#")  # same anchor as a contained needle, not contained
        assert contained(needles, hays) == [any(n in h for h in hays) for n in needles], trial


def long_texts(n: int, rng: random.Random, words: int) -> list[str]:
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(5000)]
    return [" ".join(rng.choices(vocab, k=words)) for _ in range(n)]


def test_a_validation_text_quoted_in_a_long_training_text_moves_to_train():
    """Long texts, as IMDB: a 300-character text quoted inside a longer one (IMDB train row 8699, 297 characters,
    inside a 309-character review). Before: the final substring pass was skipped past a cost budget that this
    data passes (checked below), so quoted texts stayed in validation and the counts, on a sample, showed 0."""
    rng = random.Random(0)
    quoted = long_texts(400, rng, 50)  # ~300 characters each
    filler = long_texts(17_600, rng, 250)  # ~1,500
    quoting = [f"{a} {q} {b}" for q, a, b in zip(quoted, filler[:400], filler[400:800])]  # quoted[i] in quoting[i]
    texts = quoted + quoting + filler[800:]
    rng.shuffle(texts)
    row = {t: r for r, t in enumerate(texts)}
    n_val = 900
    carving = carve_disjoint(texts, n_val, seed=0)
    assert carving.containment_searched is False and carving.phrase_level is False  # long texts: no phrase search
    train, val = set(carving.train), set(carving.val)
    assert sorted(train | val) == list(range(len(texts))) and not train & val
    joined = "\n".join(texts[r] for r in train)
    assert sum(len(joined) * (1 + len(texts[r]) / 256) for r in val) > 1e11  # the former CARVE_SCAN_BUDGET
    # Every text is distinct and only quoted[i] is inside another text (quoting[i]), so exactly the quoted texts
    # picked for validation whose quoting text was not moved them (n_val - len(val) of them) back to training.
    leaked = [i for i in range(400) if row[quoted[i]] in val and row[quoting[i]] in train]
    assert leaked == []
    movable = [i for i in range(400) if row[quoted[i]] in train and row[quoting[i]] in train]
    assert 1 <= carving.moved_to_train == n_val - len(val) <= len(movable)
    assert [texts[r] for r in sorted(val)[:60] if texts[r] in joined] == []  # a plain search agrees (sample)
    train_texts = [texts[r] for r in sorted(train)]
    counts = overlap_counts(train_texts, [texts[r] for r in sorted(val)])
    assert counts == {"n": len(val), "verbatim": 0, "substring": 0, "substring_checked": len(val)}
    # Test texts: 3 copies of training texts (identical, so also contained), 2 parts of training texts, 4 new.
    in_train = [texts[r] for r in sorted(train)[:5]]
    test = [in_train[0], in_train[1].upper(), in_train[2], in_train[3][100:400], in_train[4][:50]] + long_texts(
        4, random.Random(1), 60)
    assert overlap_counts(train_texts, test) == {"n": 9, "verbatim": 3, "substring": 5, "substring_checked": 9}


def imdb_texts(data_dir: Path, split: str) -> list[str]:
    return pq.read_table(data_dir / "imdb" / f"{split}.parquet", columns=["text"]).column("text").to_pylist()


def test_imdb_carving_shares_no_text_with_training(mirror_dir):
    """Real IMDB, the data module's carving (size and seed of conf/data/imdb.yaml): long reviews, where the phrase
    search stops at its budget. Train row 8699 (297 characters) is quoted in a 309-character training review.
    Before: it stayed in validation (moved_to_train 0) and the log said "val 0 of 1,250 ... 0 contained (searched
    a sample of 104)", test "118 identical, 0 contained (sample of 104)". Now every text is searched: the review
    moves to training, and the test's contained count includes its 118 identical reviews."""
    texts = imdb_texts(mirror_dir, "train")
    start = time.perf_counter()
    carving = carve_disjoint(texts, 1250, seed=1234)
    train = [texts[r] for r in carving.train]
    val_counts = overlap_counts(train, [texts[r] for r in carving.val])
    test_counts = overlap_counts(train, imdb_texts(mirror_dir, "test"))
    seconds = time.perf_counter() - start
    assert carving.containment_searched is False and carving.moved_to_train == 1
    assert 8699 in carving.train and len(carving.val) == 1249
    assert val_counts == {"n": 1249, "verbatim": 0, "substring": 0, "substring_checked": 1249}
    assert test_counts == {"n": 25000, "verbatim": 118, "substring": 118, "substring_checked": 25000}
    quoted = normal_form(texts[8699])
    assert len(quoted) == 297 and [t for t in train if len(t) == 309 and quoted in normal_form(t)]
    # a hang guard only (a search that never ends), not a speed target: measured 7 s idle, 12 s on 2 loaded
    # cores; how fast it runs on a given machine belongs in a benchmark script
    assert seconds < 600, seconds


@pytest.mark.slow
def test_imdb_data_module_logs_full_overlap_counts(mirror_dir, tmp_path, caplog):
    """The same as :func:`test_imdb_carving_shares_no_text_with_training` through the data module: its
    ``meta.json`` and log line (~95 s on 2 loaded cores, mostly tokenizing and saving 50,000 reviews)."""
    dm = TextClassificationDataModule(name="imdb", hub_id="stanfordnlp/imdb", text_column="text",
                                      label_column="label", local_dir=str(mirror_dir), cache_dir=str(tmp_path),
                                      val_size=0.05, split_seed=1234, max_length=8, tokenizer={"kind": "bytes"})
    with caplog.at_level("INFO"):
        dm.setup()
    leak = json.loads((dm.cache_dir / "meta.json").read_text())["leakage"]
    assert leak["moved_to_train"] == 1 and 8699 in dm.splits["train"].row_ids
    assert leak["val"] == {"n": 1249, "verbatim": 0, "substring": 0, "substring_checked": 1249}
    assert leak["test"] == {"n": 25000, "verbatim": 118, "substring": 118, "substring_checked": 25000}
    assert ("val 0 of 1,249 identical to a training text, 0 contained as a substring; test 118 of 25,000 identical "
            "to a training text, 118 contained as a substring") in caplog.text
    assert "sample" not in caplog.text


# -------------------------------------------------------------------------------------- tokenizers
TRAIN_TOKENIZERS = r"""
import sys, pandas as pd
from pathlib import Path
from attnbench.data import TextClassificationDataModule
from omegaconf import OmegaConf
root, out = Path(sys.argv[1]), Path(sys.argv[2])
for name, n in (("sst2", 20000), ("trec", None), ("imdb", 1500)):
    cfg = OmegaConf.load(f"conf/data/{name}.yaml")
    if name != "sst2":
        cfg = OmegaConf.merge(OmegaConf.load("conf/data/sst2.yaml"), cfg)
    texts = pd.read_parquet(root / name / "train.parquet")[cfg.text_column].tolist()[:n]
    for kind in ("wordpiece", "byte_bpe", "bytes"):
        tok = {**OmegaConf.to_container(cfg.tokenizer), "kind": kind}
        dm = TextClassificationDataModule(name=name, hub_id="x", text_column="t", label_column="l", local_dir=None,
                                          cache_dir=str(out), max_length=int(cfg.max_length), tokenizer=tok)
        dm._train_tokenizer(texts).save(str(out / f"{name}-{kind}.json"))
"""


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_tokenizers_trained_in_separate_processes_are_byte_identical(mirror_dir, tmp_path):
    """Every kind, every dataset config's settings: ``tokenizer.json`` the same bytes from two fresh processes.

    Before: WordPiece gave a different vocabulary in every process (TREC: 3 processes, 3 vocabularies).
    """
    outs = []
    for i in range(2):
        out = tmp_path / f"p{i}"
        out.mkdir()
        proc = subprocess.run([sys.executable, "-c", TRAIN_TOKENIZERS, str(mirror_dir), str(out)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs.append(out)
    files = sorted(p.name for p in outs[0].glob("*.json"))
    assert len(files) == 9
    for name in files:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    vocab = json.loads((outs[0] / "trec-wordpiece.json").read_text())
    assert [t["content"] for t in vocab["added_tokens"]] == ["[PAD]", "[UNK]"]  # "##x" are not added tokens
    assert len(vocab["model"]["vocab"]) == 8000


REPRO = ["model=tiny", "data=trec", "data.max_train_samples=320", "data.max_eval_samples=128",
         "trainer.max_epochs=1", "trainer.deterministic=true", "logger=csv", "trainer.enable_progress_bar=false"]


@pytest.mark.slow
def test_two_fresh_caches_give_the_same_run(data_dir, tmp_path):
    """The issue's reproducer: test/acc 0.515625 vs 0.484375 with two empty caches before; now identical."""
    metrics = []
    for i in range(2):
        env = train_env(data_dir, tmp_path / f"cache{i}")
        proc = subprocess.run([sys.executable, "train.py", *REPRO, f"hydra.run.dir={tmp_path / f'run{i}'}"],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        metrics.append(json.loads((tmp_path / f"run{i}" / "metrics.json").read_text()))
        tok = (next((tmp_path / f"cache{i}").glob("trec-*")) / "tokenizer.json").read_bytes()
        metrics[-1]["tokenizer"] = tok
    keys = ("test/acc", "val/acc", "val/acc_best", "test/f1_macro")
    assert [metrics[0][k] for k in keys] == [metrics[1][k] for k in keys]
    assert metrics[0]["tokenizer"] == metrics[1]["tokenizer"]


# ------------------------------------------------------------------------------------------ cache key
KEY_SETTINGS = [
    ("text_column", "text2"), ("label_column", "label2"), ("train_split", "train2"), ("test_split", "test2"),
    ("val_size", 5), ("split_seed", 7), ("max_length", 8), ("tokenizer", {"kind": "byte_bpe"}),
    ("tokenizer", {"kind": "bytes"}), ("tokenizer", {"vocab_size": 150}), ("tokenizer", {"lowercase": False}),
    ("tokenizer", {"min_frequency": 2}), ("name", "toy2"), ("hub_config", "other"),
]


@pytest.mark.parametrize("key, value", KEY_SETTINGS, ids=[f"{k}={v}" for k, v in KEY_SETTINGS])
def test_every_setting_that_changes_the_splits_changes_the_cache_key(tmp_path, key, value):
    data = {"text": [f"{w} Movie number {i}" for i, w in enumerate(["Good", "BAD", "fine"] * 8)],
            "label": [0, 1, 0] * 8}
    data2 = {"text2": data["text"][::-1], "label2": data["label"][::-1]}
    feats = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["n", "p"]),
                               "text2": datasets.Value("string"), "label2": datasets.ClassLabel(names=["n", "p"])})
    for split in ("train", "test", "train2", "test2"):
        for name in ("toy", "toy2"):
            write_split(tmp_path / "data", split, {**data, **data2}, feats, name=name)
    base = toy_module(tmp_path / "data", tmp_path / "cache")
    base.prepare_data()
    if key == "tokenizer":
        value = {**base.cfg.tokenizer, **value}
    other = toy_module(tmp_path / "data", tmp_path / "cache", **{key: value})
    other.prepare_data()
    assert other.cache_hit is False and other.cache_dir != base.cache_dir
    again = toy_module(tmp_path / "data", tmp_path / "cache", **{key: value})
    again.prepare_data()
    assert again.cache_hit is True and again.cache_dir == other.cache_dir


def test_another_tokenizers_release_gets_its_own_cache(tmp_path, monkeypatch):
    import tokenizers

    data = {"text": [f"text number {i}" for i in range(24)], "label": [i % 2 for i in range(24)]}
    for split in ("train", "test"):
        write_split(tmp_path / "data", split, data)
    base = toy_module(tmp_path / "data", tmp_path / "cache")
    base.prepare_data()
    monkeypatch.setattr(tokenizers, "__version__", "0.0.1")
    other = toy_module(tmp_path / "data", tmp_path / "cache")
    other.prepare_data()
    assert other.cache_hit is False and other.cache_dir != base.cache_dir


# ------------------------------------------------------------------------------------------ label names
def test_labels_of_a_split_with_reordered_class_names_are_matched_by_name(tmp_path):
    texts = [f"text {w} number {i}" for i, w in enumerate(["good", "bad", "fine", "awful"] * 6)]
    names = ["negative", "positive"]
    train = {"text": texts, "label": [i % 2 for i in range(24)]}  # 0 = negative
    test = {"text": texts[:8], "label": [1 - (i % 2) for i in range(8)]}  # 0 = positive there: same classes
    write_split(tmp_path / "data", "train", train, datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names)}))
    write_split(tmp_path / "data", "test", test, datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names[::-1])}))
    dm = toy_module(tmp_path / "data", tmp_path / "cache")
    dm.setup()
    assert dm.label_names == names
    # Row i of test is class names[i % 2] by name: ids follow train's order.
    assert [dm.splits["test"].labels[dm.splits["test"].row_ids.index(i)] for i in range(8)] == [i % 2 for i in range(8)]


def test_a_split_with_other_class_names_is_refused_naming_them(tmp_path):
    write_split(tmp_path / "data", "train", {"text": ["a b", "c d", "e f"] * 4, "label": [0, 1, 0] * 4},
                datasets.Features({"text": datasets.Value("string"),
                                   "label": datasets.ClassLabel(names=["negative", "positive"])}))
    write_split(tmp_path / "data", "test", {"text": ["a b", "c d"], "label": [0, 1]},
                datasets.Features({"text": datasets.Value("string"),
                                   "label": datasets.ClassLabel(names=["neg", "pos"])}))
    with pytest.raises(DataConfigError) as err:
        toy_module(tmp_path / "data", tmp_path / "cache").prepare_data()
    msg = str(err.value)
    assert "toy/test" in msg and "['neg', 'pos']" in msg and "['negative', 'positive']" in msg
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


# ------------------------------------------------------------------------------------- relative paths
TINY = ["model=tiny", "data=trec", "data.max_train_samples=64", "data.max_eval_samples=32", "logger=csv",
        "trainer.enable_progress_bar=false"]


@pytest.mark.slow  # two train.py processes per case (a run, then its resume by a relative checkpoint path)
@pytest.mark.parametrize("chdir", [False, True])
def test_relative_paths_resolve_against_the_launch_dir(data_dir, tmp_path, chdir):
    """Before: under hydra.job.chdir=true a relative data.local_dir was looked for inside the run dir and failed."""
    (tmp_path / "mydata").symlink_to(data_dir, target_is_directory=True)
    env = train_env(data_dir, tmp_path / "unused-cache")
    env.pop("ATTNBENCH_DATA_DIR")

    def train(*extra: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, str(REPO_ROOT / "train.py"), *TINY, f"hydra.job.chdir={chdir}",
                               "data.local_dir=mydata", "data.cache_dir=mycache", *extra],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    train("trainer.max_epochs=1", "hydra.run.dir=runs/a")
    assert list((tmp_path / "mycache").glob("trec-*/meta.json"))  # the cache is where the user said
    assert not (tmp_path / "runs" / "a" / "mycache").exists() and not (tmp_path / "unused-cache").exists()
    ckpt = "runs/a/checkpoints/last.ckpt"
    assert (tmp_path / ckpt).is_file()
    train("trainer.max_epochs=2", "hydra.run.dir=runs/b", f"ckpt_path={ckpt}")
    metrics = json.loads((tmp_path / "runs" / "b" / "metrics.json").read_text())
    assert metrics["resumed_from"] == str((tmp_path / ckpt).resolve())
