"""Documented defaults against the code: the docs' tables of defaults, the config groups' defaults, the model
presets and every default stated in prose are read from README.md and docs/*.md and compared with the config
``python train.py`` composes (``conf/train.yaml`` and its structured schema) and with the Python classes'
own defaults, so a default changed in the code (or in the docs) alone fails here, naming the key, the doc
and both values. (Comparing the composed config with ``OptimConfig()`` compares the code with itself.)
"""

from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import attnbench.config as run_config
from attnbench.data.config import DataConfig

from .conftest import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
DEFAULTS_HEADER = ["key", "default", "holds for"]
_ABSENT = object()


# ------------------------------------------------------------------------------------------ reading the docs
def markdown_tables(path: Path) -> list[tuple[int, list[str], list[tuple[int, list[str]]]]]:
    """Every pipe table of ``path``: (line of the header, header cells, [(line, cells), ...])."""
    tables, lines = [], path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|[\s|:-]+\|", lines[i + 1].strip()):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            rows, j = [], i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append((j + 1, [c.strip() for c in lines[j].strip().strip("|").split("|")]))
                j += 1
            tables.append((i + 1, header, rows))
            i = j
        else:
            i += 1
    return tables


def literal(text: str) -> Any:
    """A documented value as YAML reads it (``1.0e-3``, ``[0.9, 0.98]``, ``null``, ``max``); ``1e-3`` (a string
    to YAML 1.1) as a number."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value.replace(",", "")) if re.fullmatch(r"[-+\d.,eE]+", value) else value
        except ValueError:
            return value
    return value


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@dataclasses.dataclass(frozen=True)
class Row:
    doc: str
    line: int
    key: str
    text: str  # the value as written
    holds_for: tuple[str, ...]

    @property
    def value(self) -> Any:
        return literal(self.text)


def documented_defaults() -> list[Row]:
    """Every row of every ``| key | default | holds for |`` table in README.md and docs/*.md."""
    rows = []
    for path in DOCS:
        for _, header, body in markdown_tables(path):
            if [h.lower() for h in header] != DEFAULTS_HEADER:
                continue
            for line, cells in body:
                key, value, holds = ticked(cells[0]), ticked(cells[1]), ticked(cells[2])
                assert len(key) == 1 and value and holds, f"{path.name}:{line}: a defaults row needs `key`, " \
                                                          f"`value` and `holds for` in backticks: {cells}"
                rows.append(Row(path.relative_to(REPO_ROOT).as_posix(), line, key[0], value[0], tuple(holds)))
    return rows


ROWS = documented_defaults()
PROSE = re.compile(r"`([A-Za-z_][\w]*(?:\.[\w]+)+|seed)`\s+\(default\s+`?([^`)]+?)`?\)")
# the same claim written as an override: "the default is now `data.batching=length_grouped`",
# "`optim.impl=fused` (**the default now**)", "default: `model=small`" (a config group's option)
PROSE_OVERRIDE = re.compile(r"the\s+default\s+is\s+(?:now\s+)?`([\w.]+)=([^`\s]+)`"
                            r"|`([\w.]+)=([^`\s]+)`\s+\(\*\*the\s+default"
                            r"|default:\s+`(\w+)=(\w+)`")


def prose_defaults() -> list[tuple[str, int, str, str]]:
    """Every ``\\`key\\` (default value)`` sentence in README.md and docs/*.md: (doc, line, key, value)."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in PROSE.finditer(text):
            found.append((path.relative_to(REPO_ROOT).as_posix(), text.count("\n", 0, match.start()) + 1,
                          match.group(1), match.group(2).strip()))
        for match in PROSE_OVERRIDE.finditer(text):
            key, value = [g for g in match.groups() if g is not None]
            found.append((path.relative_to(REPO_ROOT).as_posix(), text.count("\n", 0, match.start()) + 1, key, value))
    return found


# ------------------------------------------------------------------------------------------ reading the code
@lru_cache(maxsize=None)
def composed(override: str | None = None):
    """``conf/train.yaml`` composed as ``python train.py [override]`` composes it (with its hydra node)."""
    with initialize_config_dir(str(run_config.config_dir()), version_base=None):
        return compose("train", overrides=[override] if override else [], return_hydra_config=True)


def walk(node: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif not isinstance(node, dict) and hasattr(node, part):
            node = getattr(node, part)
        else:
            return _ABSENT
    return node


def code_value(source: str, key: str, documented: Any) -> Any:
    """The value of ``key`` in ``source`` (``train``, ``<group>=<option>``, ``OptimConfig``, ``CompileConfig``,
    ``DataConfig``, or ``attnbench.<module>.<Class>``: its keyword default); an interpolation
    (``${oc.env:...}``) is compared as written."""
    if source.startswith("attnbench."):  # a class's (or function's) keyword default: the Python API
        import importlib
        import inspect

        module, _, name = source.rpartition(".")
        parameter = inspect.signature(getattr(importlib.import_module(module), name)).parameters.get(key.split(".")[-1])
        return _ABSENT if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
    if source == "train" or re.fullmatch(r"(data|model|attention|trainer|callbacks|logger)=\w+", source):
        cfg = composed(None if source == "train" else source)
        container = OmegaConf.to_container(cfg, resolve=False)
        raw = walk(container, key.split("."))
        if raw is _ABSENT or (isinstance(documented, str) and "${" in documented):
            return raw
        return OmegaConf.select(cfg, key)  # interpolations (${optim.lr} ...) resolved
    section, _, rest = key.partition(".")
    classes = {"OptimConfig": ("optim", run_config.OptimConfig), "CompileConfig": ("compile", run_config.CompileConfig),
               "DataConfig": ("data", lambda: DataConfig(name="x"))}
    if source not in classes:
        raise AssertionError(f"unknown 'holds for' {source!r}: use train, <group>=<option>, attnbench.<module>.<Class>, "
                             f"{', '.join(classes)}")
    want, make = classes[source]
    assert section == want, f"{key}: {source} holds only {want}.* keys"
    return walk(make(), rest.split("."))


CHECKS = [(row, source) for row in ROWS for source in row.holds_for]


@pytest.mark.parametrize("row, source", CHECKS, ids=[f"{r.doc}:{r.key}@{s}" for r, s in CHECKS])
def test_documented_default_is_the_codes(row, source):
    """Each row of the docs' defaults tables (docs/configuration.md and docs/data.md, section Defaults) equals
    the composed config / the class's default it says it holds for, e.g. ``optim.betas`` [0.9, 0.98],
    ``optim.warmup_ratio`` 0.06, ``data.megabatch_size`` 50 (also in ``DataConfig``), ``model.pooling`` max."""
    documented = row.value
    actual = code_value(source, row.key, row.text)
    assert actual is not _ABSENT, f"{row.doc}:{row.line}: `{row.key}` is documented but {source} has no such key"
    if isinstance(actual, tuple):
        actual = list(actual)
    assert actual == documented, (f"{row.doc}:{row.line}: `{row.key}` is documented as {documented!r} but "
                                  f"{source} has {actual!r}")


def test_the_defaults_tables_cover_every_optim_and_compile_key_and_the_named_ones():
    """Every ``optim.*`` and ``compile.*`` key has a documented default (a new key cannot stay undocumented),
    and the tables hold the defaults the docs' prose and README lean on (a table that stopped parsing fails)."""
    keys = {(r.key, s) for r in ROWS for s in r.holds_for}
    for schema, section in ((run_config.OptimConfig, "optim"),):
        for f in dataclasses.fields(schema):
            assert (f"{section}.{f.name}", "train") in keys, f"docs/configuration.md: no default row for {section}.{f.name}"
    for key in ("optim.betas", "optim.warmup_ratio", "data.megabatch_size", "model.pooling", "data.tokenizer.kind",
                "data.tokenizer.min_frequency", "data.val_size", "data.split_seed", "data.test_size"):
        assert (key, "train") in keys, f"no documented default row for {key}"
    for key in ("data.megabatch_size", "data.val_size", "data.split_seed", "data.test_size", "data.tokenizer.kind",
                "data.tokenizer.vocab_size", "data.tokenizer.min_frequency", "data.batching", "data.max_length"):
        assert (key, "DataConfig") in keys, f"docs/data.md: no DataConfig default row for {key}"
    docs = {r.doc for r in ROWS}
    assert {"docs/configuration.md", "docs/data.md"} <= docs


def test_every_default_stated_in_prose_is_in_a_defaults_table():
    """A sentence ``\\`key\\` (default value)`` anywhere in README.md or docs/*.md (e.g. docs/data.md's
    ``data.megabatch_size`` (default 50)), or the same claim as an override (docs/running.md's "the default is
    now ``data.batching=length_grouped``", docs/cost.md's "``optim.impl=fused`` (**the default now**)", README's
    "default: ``model=small``"), has a row of that key with that value holding for ``train`` in a defaults table, which the test
    above compares with the code (a config group's option: with what ``python train.py`` composes)."""
    prose = prose_defaults()
    assert {"data.megabatch_size", "callbacks.last_checkpoint.every_n_train_steps",
            "callbacks.attention_diagnostics.every_n_steps", "data.batching", "optim.impl", "model"
            } <= {k for _, _, k, _ in prose}, prose
    table = {}
    for r in ROWS:  # prose states what `python train.py` runs with
        if "train" in r.holds_for:
            table.setdefault(r.key, []).append(r.value)
    for group, option in composed().hydra.runtime.choices.items():  # `model=small`: the group's default
        table.setdefault(group, []).append(option)
    wrong = [f"{doc}:{line}: `{key}` (default {text}) but the defaults tables say {table.get(key, 'nothing')}"
             for doc, line, key, text in prose if literal(text) not in table.get(key, [])]
    assert not wrong, "\n".join(wrong)


# ---------------------------------------------------------------------------------------------- config groups
def test_config_group_defaults_and_options_are_the_documented_ones():
    """docs/configuration.md, Config groups: each group's options are the YAMLs in conf/<group>/ and its
    default (``scaled_dot``, ``small``, ``sst2``, ...; ``none``) is what ``python train.py`` composes."""
    tables = [t for t in markdown_tables(REPO_ROOT / "docs" / "configuration.md")
              if t[1][0].startswith("group") and t[1][2] == "default"]
    assert len(tables) == 1
    choices = composed().hydra.runtime.choices
    conf = run_config.config_dir()
    rows = tables[0][2]
    assert len(rows) >= 9
    for line, cells in rows:
        group = ticked(cells[0])[0]
        options = set(ticked(cells[1]))
        default = ticked(cells[2])[0] if ticked(cells[2]) else None
        assert cells[2] == "none" or default, f"configuration.md:{line}: default of {group}"
        assert options == {p.stem for p in (conf / group).glob("*.yaml")}, f"configuration.md:{line}: {group}"
        assert choices.get(group) == default, (f"docs/configuration.md:{line}: `{group}` is documented to default "
                                                f"to {default!r} but train.yaml composes {choices.get(group)!r}")


# ---------------------------------------------------------------------------------------------- model presets
def hand_count(d: int, heads: int, head_dim: int, layers: int, d_ff: int, classes: int) -> int:
    """Parameters besides the embeddings, counted from the sizes: per pre-LN block two LayerNorms (2·2d), the
    q, k, v projections d -> h·d_k with biases, the output projection h·d_k -> d with bias, the MLP d -> d_ff
    -> d with biases; then the final LayerNorm (2d) and the head d -> classes with bias. ``scaled_dot`` has no
    parameters of its own."""
    inner = heads * head_dim
    block = 2 * 2 * d + (d * 3 * inner + 3 * inner) + (inner * d + d) + (d * d_ff + d_ff) + (d_ff * d + d)
    return layers * block + 2 * d + (d * classes + classes)


def preset_rows() -> list[tuple[int, dict[str, str]]]:
    tables = [t for t in markdown_tables(REPO_ROOT / "docs" / "configuration.md") if t[1][0] == "`model=`"]
    assert len(tables) == 1, "docs/configuration.md: the model presets table is missing"
    _, header, body = tables[0]
    return [(line, dict(zip(header, cells))) for line, cells in body]


def test_model_presets_are_the_documented_sizes_and_small_is_the_default():
    """docs/configuration.md, Model: each preset composes to the table's d_model, heads × head_dim, layers,
    d_ff, dropouts and pooling, and ``python train.py`` composes ``small``'s (2 layers, d_model 128, 4 heads
    of 32, max pooling)."""
    rows = preset_rows()
    assert {ticked(r["`model=`"])[0] for _, r in rows} == {p.stem for p in (run_config.config_dir() / "model").glob("*.yaml")}
    for line, r in rows:
        name = ticked(r["`model=`"])[0]
        heads, head_dim = (int(x) for x in r["n_heads × head_dim"].split("×"))
        documented = {"d_model": int(r["d_model"]), "n_heads": heads, "n_layers": int(r["n_layers"]),
                      "d_ff": int(r["d_ff"]), "dropout": float(r["dropout"]), "attn_dropout": float(r["attn_dropout"]),
                      "pooling": r["pooling"]}
        for source in [f"model={name}"] + (["train"] if name == "small" else []):
            model = OmegaConf.to_container(composed(None if source == "train" else source).model, resolve=True)
            actual = {k: model[k] for k in documented}
            assert actual == documented, f"docs/configuration.md:{line}: {source}: documented {documented}, code {actual}"
            effective = model["head_dim"] if model["head_dim"] is not None else model["d_model"] // model["n_heads"]
            assert effective == head_dim, f"docs/configuration.md:{line}: {source}: head_dim {effective} != {head_dim}"


def test_model_parameter_counts_are_the_hand_counts_of_the_documented_sizes():
    """docs/configuration.md, Model: the parameters besides the embeddings of each preset equal a count by hand
    from the table's sizes (:func:`hand_count`), and the built model has exactly that many plus
    (vocabulary + max_length) × d_model embeddings (SST-2: 16,000 + 64; ``small``: 2,321,666 in all)."""
    from attnbench.models.model import TransformerClassifier

    text = (REPO_ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    match = re.search(r"`small` has ([\d,]+) more, ([\d,]+) in all", " ".join(text.split()))
    assert match, "docs/configuration.md: the sentence with small's embedding and total parameter counts is gone"
    vocab, max_length, classes = 16_000, 64, 2
    for line, r in preset_rows():
        name = ticked(r["`model=`"])[0]
        heads, head_dim = (int(x) for x in r["n_heads × head_dim"].split("×"))
        d, layers, d_ff = int(r["d_model"]), int(r["n_layers"]), int(r["d_ff"])
        by_hand = hand_count(d, heads, head_dim, layers, d_ff, classes)
        documented = int(next(v for k, v in r.items() if k.startswith("parameters")).replace(",", ""))
        assert documented == by_hand, f"docs/configuration.md:{line}: {name}: documented {documented:,}, by hand {by_hand:,}"
        model_cfg = OmegaConf.to_container(composed(f"model={name}").model, resolve=True)
        model = TransformerClassifier(vocab_size=vocab, num_classes=classes, max_length=max_length, score="scaled_dot",
                                      **model_cfg)
        built = sum(p.numel() for p in model.parameters())
        embeddings = (vocab + max_length) * d
        assert built == by_hand + embeddings, f"{name}: built {built:,}, by hand {by_hand + embeddings:,}"
        if name == "small":
            assert int(match.group(1).replace(",", "")) == embeddings
            assert int(match.group(2).replace(",", "")) == by_hand + embeddings
