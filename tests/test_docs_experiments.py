"""docs/results.md's experiments (the command block's comments and the experiments table) against what each
``experiment=<name>`` composes to, for every dataset it runs: budgets (steps, epochs, time cap), seeds, grids,
datasets and model sizes are read from the prose and compared with the composed config and its sweep params."""

from __future__ import annotations

import re

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from .conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "results.md"
DATA = {"SST-2": "sst2", "TREC": "trec", "IMDB": "imdb", "sst2": "sst2", "trec": "trec", "imdb": "imdb"}
SCORES = {"dot", "scaled_dot", "general", "additive", "euclidean", "l2", "cosine"}


def documented() -> list[tuple[str, str, list[str], str]]:
    """(where, experiment, extra overrides, claim text) for each command-block line and each table row, a
    backticked other experiment inside a row (``(`x_cpu`: ...)``) taking the text after it."""
    out = []
    lines = DOC.read_text().splitlines()
    for i, line in enumerate(lines, 1):
        m = re.match(r"python train\.py -m experiment=(\w+)((?:\s+[\w.]+=\S+)*)\s+#\s*(.+)$", line)
        if m:
            out.append((f"results.md:{i}", m.group(1), m.group(2).split(), m.group(3)))
            continue
        m = re.match(r"\| `(\w+)` \| (.+?) \| .* \|$", line)
        if m and (REPO_ROOT / "conf" / "experiment" / f"{m.group(1)}.yaml").exists():
            parts = re.split(r"`(\w+_cpu)`:", m.group(2))
            out.append((f"results.md:{i}", m.group(1), [], parts[0]))
            for name, text in zip(parts[1::2], parts[2::2]):
                out.append((f"results.md:{i}", name, [], text))
    return out


DOCUMENTED = documented()


@pytest.fixture(scope="module")
def hydra_configs():
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base=None, job_name="train"):
        yield


def _composed(name: str, extra: list[str]):
    """(sweep grid {key: [values]}, {data name: resolved job config}) of ``experiment=name`` + ``extra``."""
    cfg = compose(config_name="train", overrides=[f"experiment={name}", *extra], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params or {}, resolve=False)
    grid = {k: [v.strip() for v in str(val).split(",")] for k, val in params.items()}
    for o in extra:
        grid[o.split("=", 1)[0]] = o.split("=", 1)[1].split(",")
    jobs = {}
    for data in grid.get("data", [cfg.data.name]):
        job = compose(config_name="train", overrides=[f"experiment={name}", f"data={data}", *extra])
        jobs[data] = OmegaConf.to_container(job, resolve=True)
    return grid, jobs


def test_every_shipped_experiment_is_documented():
    names = {p.stem for p in (REPO_ROOT / "conf" / "experiment").glob("*.yaml")}
    assert {name for _, name, _, _ in DOCUMENTED} == names


@pytest.mark.parametrize("where,name,extra,text", DOCUMENTED, ids=[f"{w}-{n}" for w, n, _, _ in DOCUMENTED])
def test_documented_experiment_is_what_it_composes_to(hydra_configs, where, name, extra, text):
    grid, jobs = _composed(name, extra)
    text = text.replace("`", "").replace("…", "..").replace(" .. ", "..")
    checked = 0

    def check(what, got, want):
        nonlocal checked
        checked += 1
        assert got == want, f"{where} says {what} = {want!r} for experiment={name}; it composes to {got!r}"

    for n in re.findall(r"(?:all )?(\d+) score functions|all (\d+)\b", text):
        check("number of score functions", len(grid["attention"]), int(n[0] or n[1]))
    for n in re.findall(r"(\d+) seeds?\b", text):
        check("number of seeds", len(grid.get("seed", ["x"])), int(n))
    for data, n in re.findall(r"(SST-2|TREC|IMDB) (\d+) steps", text):
        check(f"{data} max_steps", jobs[DATA[data]]["trainer"]["max_steps"], int(n))
    for n, data in re.findall(r"(\d+) epochs (SST-2|TREC|IMDB)", text):
        check(f"{data} max_epochs", jobs[DATA[data]]["trainer"]["max_epochs"], int(n))
    for n in re.findall(r"(?<![\w-])(\d+) epochs(?! (?:SST-2|TREC|IMDB))", text):
        check("max_epochs", {j["trainer"]["max_epochs"] for j in jobs.values()}, {int(n)})
    for n in re.findall(r"(?<![\w-])(\d+) steps\b", re.sub(r"(SST-2|TREC|IMDB) \d+ steps", "", text)):
        check("max_steps", {j["trainer"]["max_steps"] for j in jobs.values()}, {int(n)})
    for lo, hi in re.findall(r"(?:head_dim|d_k) (\d+)\.\.(\d+)", text):
        check("head_dim range", (min(map(int, grid["model.head_dim"])), max(map(int, grid["model.head_dim"]))),
              (int(lo), int(hi)))
    for values in re.findall(r"max_length (\d+(?:, \d+(?!\d| [a-zA-Z]))*)", text):
        check("max_length grid", [int(v) for v in grid["data.max_length"]], [int(v) for v in values.split(", ")])
    for n in re.findall(r"(\d+) h (?:cap|per job)", text):
        check("max_time", {j["trainer"]["max_time"] for j in jobs.values()}, {f"00:{int(n):02d}:00:00"})
    for n in re.findall(r"(\d+) heads\b", text):
        check("n_heads", {j["model"]["n_heads"] for j in jobs.values()}, {int(n)})
    for n in re.findall(r"d_model (\d+)", text):
        check("d_model", {j["model"]["d_model"] for j in jobs.values()}, {int(n)})
    for items in re.findall(r"\{([^{}]+)\}", text):
        names = [re.sub(r" \d+ steps$", "", s.strip()) for s in items.split(",")]
        if set(names) <= SCORES:
            check("score functions", grid["attention"], names)
        elif set(names) <= set(DATA):
            check("datasets", sorted(jobs), sorted(DATA[s] for s in names))
    named = {DATA[d] for d in re.findall(r"\b(SST-2|TREC|IMDB|sst2|trec|imdb)\b", text)}
    if named:
        check("datasets", sorted(jobs), sorted(named))
    if "as bytes" in text or "word level" in text or "words" in text:
        check("tokenizer", {j["data"]["tokenizer"]["kind"] for j in jobs.values()},
              {"bytes" if "as bytes" in text else "wordpiece"})
    assert checked or not re.search(r"\d", text), f"{where}: no claim about experiment={name} was recognised in {text!r}"


def test_per_dataset_lengths_keep_the_presets_where_results_were_published(hydra_configs):
    """``max_length_by_data`` gives each dataset of an experiment its ``data.max_length``; for SST-2 and TREC, whose
    compare results are published, it must be the preset's own length (the published jobs ran without it)."""
    checked = 0
    for path in sorted((REPO_ROOT / "conf" / "experiment").glob("*.yaml")):
        grid, jobs = _composed(path.stem, [])
        lengths = compose(config_name="train", overrides=[f"experiment={path.stem}"]).max_length_by_data
        if lengths is None:
            continue
        assert set(jobs) <= set(lengths), f"{path.name}: max_length_by_data names {sorted(lengths)}, runs {sorted(jobs)}"
        for data, job in jobs.items():
            assert job["data"]["max_length"] == lengths[data]
            checked += 1
            if data in ("sst2", "trec"):
                preset = compose(config_name="train", overrides=[f"data={data}"]).data.max_length
                assert lengths[data] == preset, f"{path.name}: {data} at {lengths[data]} tokens, its preset {preset}"
    assert checked >= 3
