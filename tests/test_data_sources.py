"""Any text-classification dataset by config (issue 12): each README example on small real files.

Fixtures are 400 real SST-2 rows (a seeded sample of ../shared/data/sst2/train.parquet) written as CSV, TSV,
JSON Lines and Parquet, and a small synthetic sentence-pair dataset. The Hub is unreachable here: a "Hub dataset
by id" goes through the local mirror layout that scripts/mirror_data.py writes.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pandas as pd
import pytest

from attnbench.data import DataConfigError, DataUnavailableError, TextClassificationDataModule
from attnbench.data import sources
from attnbench.data.sources import PACKAGED, PACKAGED_DIR
from attnbench.data.splits import contained, cv_fold, fold_assignment, normal_form

from .conftest import REPO_ROOT, train_env

NAMES = ["negative", "positive"]
TINY_RUN = ["model=tiny", "logger=csv", "trainer.enable_progress_bar=false", "trainer.max_steps=3",
            "trainer.val_check_interval=3", "data.batch_size=16"]


@pytest.fixture(scope="module")
def sst2_sample(data_dir) -> pd.DataFrame:
    """400 real SST-2 rows of at least 4 words (text ``sentence``, string labels ``label``)."""
    df = pd.read_parquet(data_dir / "sst2" / "train.parquet")
    df = df[df["sentence"].str.split().str.len() >= 4].sample(400, random_state=0).reset_index(drop=True)
    return pd.DataFrame({"sentence": df["sentence"], "label": [NAMES[y] for y in df["label"]]})


def write(df: pd.DataFrame, path: Path) -> Path:
    """``df`` as the file format of ``path``'s extension (.csv, .tsv, .jsonl, .parquet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    elif path.suffix == ".tsv":
        df.to_csv(path, sep="\t", index=False)
    elif path.suffix == ".jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        df.to_parquet(path, index=False)
    return path


def module(tmp_path: Path, **kwargs) -> TextClassificationDataModule:
    args = {"name": "mini", "hub_id": None, "text_column": "sentence", "label_column": "label", "local_dir": None,
            "cache_dir": str(tmp_path / "cache"), "val_size": 40, "max_length": 32,
            "tokenizer": {"vocab_size": 500, "min_frequency": 1}, **kwargs}
    return TextClassificationDataModule(**args)


def run_train(args: list[str], data_dir: Path, cache: Path, cwd: Path, drop_data_dir: bool = False,
              timeout: int = 600) -> subprocess.CompletedProcess:
    env = train_env(data_dir, cache)
    if drop_data_dir:
        env.pop("ATTNBENCH_DATA_DIR")
    return subprocess.run([sys.executable, str(REPO_ROOT / "train.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------ local CSV / TSV / JSONL / Parquet
@pytest.mark.parametrize("ext", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_local_files_of_every_format_give_the_same_splits(sst2_sample, tmp_path, ext):
    """README "local CSV" / "local JSON Lines": data_files + builder from the extension, string labels."""
    train, test = sst2_sample.iloc[:320], sst2_sample.iloc[320:]
    files = {"train": str(write(train, tmp_path / f"train{ext}")), "test": str(write(test, tmp_path / f"test{ext}"))}
    dm = module(tmp_path, data_files=files)
    dm.setup()
    assert dm.label_names == NAMES
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == 320 and len(dm.splits["test"]) == 80
    assert dm.splits["test"].labels == [NAMES.index(y) for y in test["label"]]  # row order kept, names mapped
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    assert meta["roles"] == {"train": "train", "val": None, "test": "test"}  # no validation file: carved
    # every format gives the same token ids as Parquet (the reference)
    ref = module(tmp_path / "ref", data_files={"train": str(write(train, tmp_path / "ref" / "train.parquet")),
                                              "test": str(write(test, tmp_path / "ref" / "test.parquet"))})
    ref.setup()
    for split in ("train", "val", "test"):
        assert dm.splits[split].input_ids == ref.splits[split].input_ids
        assert dm.splits[split].row_ids == ref.splits[split].row_ids


def test_the_datasets_own_validation_split_is_used(sst2_sample, tmp_path):
    files = {s: str(write(df, tmp_path / f"{s}.csv")) for s, df in
             (("train", sst2_sample.iloc[:300]), ("validation", sst2_sample.iloc[300:350]),
              ("test", sst2_sample.iloc[350:]))}
    dm = module(tmp_path, data_files=files)
    dm.setup()
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [300, 50, 50]
    assert dm.splits["val"].row_ids == list(range(50))
    carved = module(tmp_path, data_files=files, val_split=None)  # configurable: always carve
    carved.setup()
    assert len(carved.splits["train"]) + len(carved.splits["val"]) == 300
    assert carved.cache_dir != dm.cache_dir


# ---------------------------------------------------------------------------- train-only: carved test, k-fold CV
def test_train_only_dataset_gets_a_stratified_disjoint_test_split(sst2_sample, tmp_path):
    """README "train-only dataset": data.test_split=null carves test (stratified, group-aware) then validation."""
    df = pd.concat([sst2_sample, sst2_sample.iloc[:20]])  # 20 verbatim repeats: they must stay on one side
    dm = module(tmp_path, data_files=str(write(df, tmp_path / "all.csv")), test_split=None, test_size=0.2)
    dm.setup()
    n = len(df)
    train, val, test = (dm.splits[s] for s in ("train", "val", "test"))
    ids = [set(s.row_ids) for s in (train, val, test)]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert ids[0] | ids[1] | ids[2] == set(range(n))
    assert 0.18 * n <= len(test) <= 0.2 * n + 1
    share = df["label"].eq("positive").mean()
    assert abs(sum(test.labels) - share * len(test)) <= 2  # stratified: the class share of the whole
    texts = [normal_form(t) for t in df["sentence"]]
    held = [texts[r] for r in test.row_ids]
    assert not any(contained(held, [texts[r] for r in train.row_ids + val.row_ids]))
    meta = json.loads((dm.cache_dir / "meta.json").read_text())
    assert meta["leakage"]["test"]["substring"] == 0 and meta["leakage"]["test_from"] == "train"


def test_k_fold_partitions_rows_stratified_and_by_text():
    texts = [f"review {i // 2} says {'good' if i % 3 else 'bad'} things" for i in range(300)]  # pairs of duplicates
    labels = [int(i % 3 != 0) for i in range(300)]
    folds = fold_assignment(texts, labels, 10, seed=1234)
    assert sorted(set(folds)) == list(range(10))
    for t in set(texts):
        assert len({f for f, u in zip(folds, texts) if u == t}) == 1  # identical texts share a fold
    for f in range(10):
        rows = [r for r in range(300) if folds[r] == f]
        assert 28 <= len(rows) <= 32 and abs(sum(labels[r] for r in rows) - 2 / 3 * len(rows)) <= 2
    held = [set(cv_fold(texts, labels, 10, f, 1234).val) for f in range(10)]
    assert sum(len(h) for h in held) == 300 and set().union(*held) == set(range(300))


def test_cross_validation_folds_hold_out_disjoint_rows(sst2_sample, tmp_path):
    path = str(write(sst2_sample, tmp_path / "all.jsonl"))
    tests = []
    for fold in range(3):
        dm = module(tmp_path, data_files=path, test_split=None, cv_folds=10, fold=fold)
        dm.setup()
        tests.append(set(dm.splits["test"].row_ids))
        assert 36 <= len(tests[-1]) <= 40
        assert not tests[-1] & set(dm.splits["train"].row_ids + dm.splits["val"].row_ids)
    assert not (tests[0] & tests[1]) and not (tests[0] & tests[2]) and not (tests[1] & tests[2])


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_ten_fold_cross_validation_is_one_multirun(sst2_sample, tmp_path, data_dir, cache_dir):
    """README "10-fold cross-validation": one `-m` command, jobs that differ only in data.fold."""
    path = write(sst2_sample, tmp_path / "reviews.csv")
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "data=files", "data.name=reviews", f"data.data_files={path}", "data.test_split=null",
                      "data.cv_folds=10", "data.fold=0,1,2", "data.text_column=sentence", *TINY_RUN,
                      f"hydra.sweep.dir={sweep}"], data_dir, cache_dir, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and (p / "metrics.json").is_file())
    assert len(jobs) == 3
    folds = []
    for job in jobs:
        metrics = json.loads((job / "metrics.json").read_text())
        assert 0.0 <= metrics["test/acc"] <= 1.0
        overrides = (job / ".hydra" / "overrides.yaml").read_text()
        folds.append([line for line in overrides.splitlines() if "data.fold" in line])
    assert sorted(folds) == [["- data.fold=0"], ["- data.fold=1"], ["- data.fold=2"]]


# ---------------------------------------------------------------------------------------- sentence pairs
def pair_rows(n: int) -> pd.DataFrame:
    """Synthetic pairs: the hypothesis restates the premise's adjective (entailment) or its opposite."""
    nouns = ["film", "plot", "cast", "score", "script", "ending", "actor", "scene"]
    adj = [("good", "bad"), ("long", "short"), ("funny", "dull"), ("new", "old")]
    rows = []
    for i in range(n):
        noun, (a, b) = nouns[i % 8], adj[(i // 8) % 4]
        same = (i // 32) % 2 == 0
        rows.append({"premise": f"the {noun} number {i} was {a}", "hypothesis": f"it was {a if same else b}",
                     "label": "entailment" if same else "contradiction"})
    return pd.DataFrame(rows)


def test_sentence_pairs_are_joined_with_a_separator_token(tmp_path):
    """README "sentence-pair dataset": data.text_pair_column; the model sees `premise [SEP] hypothesis`."""
    from tokenizers import Tokenizer

    df = pair_rows(256)
    df.loc[5, "hypothesis"] = ""  # an empty second text: the row is dropped and counted
    files = {"train": str(write(df.iloc[:200], tmp_path / "train.jsonl")),
             "test": str(write(df.iloc[200:], tmp_path / "test.jsonl"))}
    dm = module(tmp_path, data_files=files, text_column="premise", text_pair_column="hypothesis", val_size=20)
    dm.setup()
    assert dm.label_names == ["contradiction", "entailment"]
    tok = Tokenizer.from_file(str(dm.cache_dir / "tokenizer.json"))
    sep = tok.token_to_id("[SEP]")
    assert sep == 2 and tok.token_to_id("[PAD]") == 0
    for split in ("train", "val", "test"):
        assert all(ids.count(sep) == 1 for ids in dm.splits[split].input_ids)
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == 199  # row 5 dropped
    row = dm.splits["test"].row_ids.index(0)
    assert tok.decode(dm.splits["test"].input_ids[row], skip_special_tokens=False).split() == \
        "the film number 200 was long [SEP] it was long".split()
    single = module(tmp_path, data_files=files, text_column="premise", val_size=20)
    assert single._locate()[0] != dm._locate()[0]  # the pair column is in the cache key


def test_a_missing_pair_column_names_the_key(tmp_path):
    files = {"train": str(write(pair_rows(64), tmp_path / "train.csv")),
             "test": str(write(pair_rows(64), tmp_path / "test.csv"))}
    with pytest.raises(DataConfigError) as err:
        module(tmp_path, data_files=files, text_column="premise", text_pair_column="second").setup()
    assert "mini/train has no column 'second'" in str(err.value) and "data.text_pair_column" in str(err.value)


# --------------------------------------------------------------------------- Hub by id, through the mirror
@pytest.mark.slow
def test_hub_dataset_by_id_through_the_mirror_layout(sst2_sample, tmp_path, data_dir, cache_dir):
    """README "Hub dataset by id": scripts/mirror_data.py writes <out>/<name>/<split>.parquet (tested on a local
    folder: load_dataset(path) reads a folder of train/validation/test files as a Hub repo), then data=hub."""
    repo = tmp_path / "repo"
    for split, part in (("train", sst2_sample.iloc[:300]), ("validation", sst2_sample.iloc[300:340]),
                        ("test", sst2_sample.iloc[340:])):
        write(part, repo / f"{split}.csv")
    mirror = tmp_path / "mirror"
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "mirror_data.py"), str(repo), "--name",
                           "mini", "--out", str(mirror)], capture_output=True, text=True, timeout=300,
                          env=train_env(data_dir, cache_dir))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (mirror / "mini").iterdir()) == ["test.parquet", "train.parquet",
                                                                   "validation.parquet"]
    assert pd.read_parquet(mirror / "mini" / "test.parquet")["sentence"].tolist() == \
        sst2_sample["sentence"].iloc[340:].tolist()
    proc = run_train(["data=hub", "data.hub_id=someone/mini", "data.name=mini", f"data.local_dir={mirror}",
                      "data.text_column=sentence", *TINY_RUN, f"hydra.run.dir={tmp_path / 'run'}"],
                     data_dir, cache_dir, tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["data"] == "mini" and 0.0 <= metrics["test/acc"] <= 1.0
    cache = next(cache_dir.glob("mini-*"))
    meta = json.loads((cache / "meta.json").read_text())
    assert meta["roles"] == {"train": "train", "val": "validation", "test": "test"}
    assert meta["counts"] == {"train": 300, "val": 40, "test": 60}


def test_mirror_of_an_unreachable_hub_fails_in_one_line(tmp_path, data_dir, cache_dir):
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "mirror_data.py"), "nobody/nothing",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env=train_env(data_dir, cache_dir))
    assert proc.returncode == 1
    assert proc.stderr.count("mirror_data: cannot mirror 'nobody/nothing'") == 1 and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- no data, packaged default data
def test_no_test_split_and_no_hub_id_say_so_without_none(tmp_path):
    """Before: `data.test_split=null` looked for None.parquet; `data.hub_id=null` gave a TypeError."""
    dm = module(tmp_path, local_dir=str(tmp_path / "nowhere"), test_split=None)
    t0 = time.perf_counter()
    with pytest.raises(DataUnavailableError) as err:
        dm.prepare_data()
    msg = str(err.value)
    assert time.perf_counter() - t0 < 5
    assert "None" not in msg and "TypeError" not in msg
    assert "no local Parquet files at" in msg and "mini/{train}.parquet" in msg
    assert "no Hub dataset is named (data.hub_id is null)" in msg and "data.data_files" in msg


def test_no_data_anywhere_fails_fast_without_retrying_the_hub(tmp_path, monkeypatch):
    """No local files and no Hub: the probe's refusal ends it, ``load_dataset`` (20-24 s of retries) is never
    called. The Hub is played by a local port that is bound but not listening (``HF_ENDPOINT``, which the probe
    honours), held for the whole test so no other process can take it: every connection is refused at once, with
    no DNS lookup (not covered by the probe's timeout: 5-20 s) and no chance that the real Hub answers. "Fast" is
    pinned by ``calls == []`` (no retries started), not by a clock, which would measure the machine's load."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(sources, "_PROBES", {})  # no earlier test's answer reused
    calls = []
    real = datasets.load_dataset

    def counting(path, *args, **kwargs):
        calls.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", counting)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    dm = TextClassificationDataModule(name="imdb", hub_id="stanfordnlp/imdb", text_column="text",
                                      label_column="label", local_dir=None, cache_dir=str(tmp_path))
    try:
        with pytest.raises(DataUnavailableError) as err:
            dm.prepare_data()
    finally:
        closed.close()
    assert calls == []  # the probe answered: load_dataset's retries never started
    assert "the Hugging Face Hub (stanfordnlp/imdb) failed: ConnectionError: cannot connect to" in str(err.value)
    assert f"127.0.0.1:{port} (ConnectionRefusedError" in str(err.value)  # the probe asked HF_ENDPOINT's host


@pytest.mark.parametrize("args, name", [(["data=imdb"], "imdb"), (["data.packaged=false"], "sst2")])
def test_train_py_with_no_data_prints_the_error_once_before_torch_loads(tmp_path, data_dir, cache_dir, args, name):
    """No data anywhere (ATTNBENCH_DATA_DIR unset or an empty folder, no Hub, no packaged copy): one `Error:` line,
    in train.log once, failure.json; and neither torch, Lightning nor datasets imported (the data source is
    resolved before them: before, the error came after about 5 s of importing torch on an idle core)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = train_env(empty, cache_dir)
    if name == "imdb":
        env.pop("ATTNBENCH_DATA_DIR")
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # offline mode would read the HF cache (after torch)
        env.pop(key, None)
    run_dir = tmp_path / "run"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", str(REPO_ROOT / "train.py"), *args,
                           "trainer.max_steps=5", "logger=csv", f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: Cannot load dataset '{name}'"), out[-3000:]
    assert out.count(f"Cannot load dataset '{name}'") == 1 and "Retrying" not in out and "Traceback" not in out
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported and not {"torch", "pytorch_lightning", "lightning", "datasets"} & imported
    assert (run_dir / "train.log").read_text().count(f"Cannot load dataset '{name}'") == 1
    failure = json.loads((run_dir / "failure.json").read_text())
    assert failure["error_type"] == "DataUnavailableError" and f"Error: {failure['error']}" == errors[0]
    print(f"train.py with no data: exit 1 after {wall:.1f} s (interpreter and imports included)")


def test_a_misspelt_data_file_on_the_command_line_is_named_before_torch_loads(tmp_path, data_dir, cache_dir):
    """`data=files 'data.data_files={train: <misspelt>}'`: before, "data.data_files has no 'test' entry"."""
    proc = subprocess.run([sys.executable, "-X", "importtime", str(REPO_ROOT / "train.py"), "data=files",
                           "+data.data_files.train=reviews_tarin.csv", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=train_env(data_dir, cache_dir), capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert proc.returncode == 1 and errors == [
        f"Error: data.data_files.train: no file reviews_tarin.csv (split 'train'; from the launch directory: "
        f"{tmp_path.resolve() / 'reviews_tarin.csv'}). Set data.data_files.train to an existing file (the syntax, "
        "with examples: docs/data.md)."], proc.stderr[-3000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert not {"torch", "datasets"} & imported


def test_the_preflight_and_the_data_module_resolve_the_same_source(tmp_path, data_dir, monkeypatch):
    """One implementation (resolve_source): the command line's preflight finds what the data module then reads,
    and with nowhere to read from raises the data module's own error; a reachable Hub keeps the packaged
    copy as its fallback."""
    from attnbench.data.sources import preflight

    base = dict(name="sst2", hub_id="stanfordnlp/sst2", text_column="sentence", test_split="validation",
                cache_dir=str(tmp_path / "cache"), max_train_samples=None)
    assert preflight({**base, "local_dir": str(data_dir)}).where == str(data_dir / "sst2")
    plan = preflight({**base, "local_dir": str(tmp_path)})
    assert plan.kind == "package" and plan.files["train"] == [str(PACKAGED_DIR / "sst2" / "train.parquet")]
    with pytest.raises(DataUnavailableError) as before:
        preflight({**base, "local_dir": str(tmp_path), "packaged": False})
    with pytest.raises(DataUnavailableError) as after:
        TextClassificationDataModule(**base, local_dir=str(tmp_path), packaged=False).prepare_data()
    assert str(before.value) == str(after.value) and "Cannot load dataset 'sst2'" in str(after.value)
    import socket

    with socket.socket() as server:  # a reachable "Hub": the plan says Hub, with the packaged copy behind it
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        plan = preflight({**base, "local_dir": None})
    assert plan.kind == "hub" and plan.fallback is not None and plan.fallback.kind == "package"


@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_packaged_default_data_is_the_real_data(mirror_dir, name):
    files = sorted(p.name for p in (PACKAGED_DIR / name).glob("*.parquet"))
    assert files == sorted(p.name for p in (mirror_dir / name).glob("*.parquet"))
    for f in files:
        assert (PACKAGED_DIR / name / f).read_bytes() == (mirror_dir / name / f).read_bytes()


@pytest.mark.slow  # 10-200 s on 2 cores: CI's slow step runs it, so the default suite stays under 15 min
def test_fresh_machine_trains_on_the_packaged_data(tmp_path, data_dir):
    """Nothing exported, no Hub: `python train.py trainer.max_steps=...` trains on the packaged SST-2."""
    cache = tmp_path / "cache"
    proc = run_train(["trainer.max_steps=5", "trainer.val_check_interval=5", "logger=csv", "model=tiny",
                      "trainer.enable_progress_bar=false", "data.max_eval_samples=64",
                      f"hydra.run.dir={tmp_path / 'run'}"], data_dir, cache, tmp_path, drop_data_dir=True,
                     timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "using the copy packaged with attnbench" in " ".join(out.split())
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["data"] == "sst2" and 0.0 <= metrics["test/acc"] <= 1.0
    meta = json.loads((next(cache.glob("sst2-*")) / "meta.json").read_text())
    assert meta["source"] == "package:sst2" and meta["counts"]["test"] == 872
    assert meta["counts"]["train"] + meta["counts"]["val"] == 67_349


# --------------------------------------------------------------------------------------------- cache key
NEW_KEY_SETTINGS = [
    ("text_pair_column", "other"), ("val_split", None), ("test_split", None), ("test_size", 30),
    ("cv_folds", 5), ("fold", 1), ("builder", "tsv"),
]


@pytest.mark.parametrize("key, value", NEW_KEY_SETTINGS, ids=[f"{k}={v}" for k, v in NEW_KEY_SETTINGS])
def test_every_new_setting_that_changes_the_splits_changes_the_cache_key(sst2_sample, tmp_path, key, value):
    """The settings issue 12 added are in the key; test_data_trust covers the others."""
    df = sst2_sample.iloc[:120].assign(other=sst2_sample["sentence"].iloc[120:240].to_numpy())
    files = {s: str(write(part, tmp_path / f"{s}.csv")) for s, part in
             (("train", df.iloc[:80]), ("validation", df.iloc[80:100]), ("test", df.iloc[100:]))}
    base = dict(data_files=files, test_split=None, cv_folds=3) if key == "fold" else \
        dict(data_files=files, test_split=None) if key in ("test_size", "cv_folds") else dict(data_files=files)
    # builder=tsv: the same bytes read as TSV are another table (one column): another key
    first = module(tmp_path, **base)
    other = module(tmp_path, **{**base, key: value})
    assert other._locate()[0] != first._locate()[0]
    again = module(tmp_path, **{**base, key: value})
    assert again._locate()[0] == other._locate()[0]


# ------------------------------------------------------------------ other shapes, by config alone (issue 12, 4.)
def test_train_dev_test_with_a_dev_split_is_used_as_validation(data_dir, tmp_path):
    """TREC (6 classes) in the mirror layout with a `dev` split: `val_split: auto` takes it."""
    train = datasets.Dataset.from_parquet(str(data_dir / "trec" / "train.parquet"))  # keeps the ClassLabel names
    root = tmp_path / "mirror" / "six"
    root.mkdir(parents=True)
    train.select(range(4000)).to_parquet(str(root / "train.parquet"))
    train.select(range(4000, len(train))).to_parquet(str(root / "dev.parquet"))
    (root / "test.parquet").write_bytes((data_dir / "trec" / "test.parquet").read_bytes())
    dm = TextClassificationDataModule(name="six", hub_id=None, text_column="text", label_column="coarse_label",
                                      local_dir=str(tmp_path / "mirror"), cache_dir=str(tmp_path / "cache"),
                                      max_length=32, tokenizer={"vocab_size": 2000, "min_frequency": 1})
    dm.setup()
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [4000, 1452, 500]
    assert dm.label_names == ["ABBR", "ENTY", "DESC", "HUM", "LOC", "NUM"]


def test_a_test_only_dataset_is_carved_into_train_val_and_test(data_dir, tmp_path):
    root = tmp_path / "mirror" / "only"
    root.mkdir(parents=True)
    (root / "test.parquet").write_bytes((data_dir / "trec" / "test.parquet").read_bytes())
    dm = TextClassificationDataModule(name="only", hub_id=None, text_column="text", label_column="coarse_label",
                                      train_split="test", test_split=None, test_size=0.2, val_size=0.1,
                                      local_dir=str(tmp_path / "mirror"), cache_dir=str(tmp_path / "cache"),
                                      max_length=32, tokenizer={"vocab_size": 1000, "min_frequency": 1})
    dm.setup()
    sizes = [len(dm.splits[s]) for s in ("train", "val", "test")]
    assert sum(sizes) == 500 and 90 <= sizes[2] <= 100 and sizes[1] >= 30
    assert set().union(*(set(dm.splits[s].row_ids) for s in ("train", "val", "test"))) == set(range(500))


@pytest.mark.parametrize("preset, key", [("hub", "data.hub_id is null"), ("files", "data.data_files")])
def test_generic_presets_without_their_dataset_name_the_key(tmp_path, preset, key):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"data={preset}", f"data.local_dir={tmp_path}",
                                          f"data.cache_dir={tmp_path / 'cache'}"])
    dm = instantiate(cfg.data, seed=cfg.seed)
    with pytest.raises(DataUnavailableError) as err:
        dm.prepare_data()
    assert key in str(err.value) and "stanfordnlp" not in str(err.value)


def test_missing_local_files_and_no_hub_id_is_said_once(tmp_path, caplog):
    """`data.hub_id=null` and no files under data.local_dir: before, a WARNING "Local data not found (...); no Hub
    dataset is named." came right before the error saying the same; now only the error, which names every fix."""
    (tmp_path / "nowhere").mkdir()
    dm = module(tmp_path, local_dir=str(tmp_path / "nowhere"), test_split=None)
    with caplog.at_level(logging.WARNING, logger="attnbench"), pytest.raises(DataUnavailableError) as err:
        dm.prepare_data()
    assert "no Hub dataset is named (data.hub_id is null)" in str(err.value)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
