"""The run config's schema: Hydra structured configs (dataclasses in the ConfigStore, ``train_schema``, named by
``conf/train.yaml``'s defaults), the one source of the defaults, types and ranges of the run's own keys. No torch
import: a bad value answers in about a second.

- a value of the wrong type (``seed=abc``) is refused while Hydra composes the config, in the words of
  :func:`type_error_message` (``seed must be an integer, got 'abc'``);
- each field's range is in the schema (``field(metadata=must(...))``), those of the ``_target_`` groups' keys
  that Lightning or W&B would only reject mid-run in :data:`TARGET_RANGES`; :func:`check_run_config` checks them
  all once, before torch loads, with the model sizes and the ``data.*`` keys
  (:class:`attnbench.data.config.DataConfig`). ``attention.*`` is checked by the score function's own constructor,
  which :func:`check_attention` runs before any data work.

Importing this module registers the schema and the resolvers: code that composes ``conf/train.yaml`` with
Hydra's compose API imports it first, as ``tests/conftest.py`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from attnbench.errors import ConfigError

_ABSENT = object()

SCHEDULES = ("cosine", "linear", "constant")
OPTIM_IMPLS = ("for_loop", "foreach", "fused")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
WANDB_MODES = ("auto", "online", "offline", "disabled")
POOLINGS = ("mean", "max", "cls", "last")
# Precisions whose weights (and so AdamW's moments) are float16: AdamW's eps 1e-8 rounds to 0 there and the
# second moments of small gradients underflow to 0, so the first update divides 0 by 0 (NaN at step 1).
FLOAT16_WEIGHTS = ("16-true", "transformer-engine-float16")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _in(low: float, high: float, high_open: bool = False) -> Callable[[Any], bool]:
    return lambda v: _number(v) and low <= v and (v < high if high_open else v <= high)


def _steps(value: Any) -> bool:
    return value is None or _integer(value) and (value >= 1 or value == -1)


def _batches(value: Any) -> bool:
    """``trainer.limit_train_batches`` and the like: null, a fraction in (0, 1] of the loader's batches or a count
    >= 1 (Lightning's own rule, less 0: no batches)."""
    return value is None or _number(value) and 0 < value and (value <= 1 or float(value).is_integer())


def _interval(value: Any) -> bool:
    """``trainer.val_check_interval``: :func:`_batches`, or a time-based interval (a ``"DD:HH:MM:SS"`` string or a
    mapping of days/hours/minutes/seconds, checked by Lightning)."""
    return isinstance(value, str | dict) or _batches(value)


def _duration(value: Any) -> bool:
    """``trainer.max_time``: null, ``"DD:HH:MM:SS"`` (Lightning's ``Timer`` format) or a mapping of
    days/hours/minutes/seconds (``{minutes: 50}``) that adds up to more than 0 seconds."""
    if value is None:
        return True
    if isinstance(value, str):
        match = re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", value.strip())
        return bool(match) and any(int(part) for part in match.groups())
    units = ("days", "hours", "minutes", "seconds")
    return (isinstance(value, dict) and bool(value) and set(value) <= set(units)
            and all(_number(v) and v >= 0 for v in value.values()) and any(v > 0 for v in value.values()))


def must(what: str, ok: Callable[[Any], bool], note: str = "") -> dict[str, Any]:
    """A schema field's range (``dataclasses.field(metadata=must(...))``): the message reads
    ``<key> must be <what>, got <value><note>``."""
    return {"must": (what, ok, note)}


@dataclass
class OptimConfig:
    """AdamW (Loshchilov & Hutter 2019) and learning-rate schedule settings: the defaults of ``optim.*``.

    Attributes:
        lr: peak learning rate (after warm-up), > 0.
        weight_decay: decoupled weight decay of the decayed group
            (:func:`attnbench.models.optim.decay_parameter_groups`), >= 0.
        betas: AdamW's (β1, β2), each in [0, 1).
        eps: AdamW's ε added to the second-moment root, > 0.
        warmup_ratio: fraction of all optimizer steps of linear warm-up, in [0, 1].
        schedule: ``cosine``, ``linear`` or ``constant`` decay after warm-up.
        min_lr_ratio: learning rate at the end of the decay, as a fraction of ``lr``, in [0, 1].
        impl: AdamW's implementation in torch: ``for_loop`` (one parameter at a time), ``foreach`` (multi-tensor
            ops) or ``fused`` (one fused kernel, CPU and CUDA). The same update rule; the three round
            differently in the last bits (README: Cost).
    """

    lr: float = field(default=1.0e-3, metadata=must("a number > 0", lambda v: _number(v) and v > 0))
    weight_decay: float = field(default=0.05, metadata=must("a number >= 0", lambda v: _number(v) and v >= 0))
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98], metadata=must(
        "two numbers in [0, 1), e.g. [0.9, 0.98]",
        lambda v: isinstance(v, list | tuple) and len(v) == 2 and all(_number(b) and 0 <= b < 1 for b in v)))
    eps: float = field(default=1.0e-8, metadata=must("a number > 0", lambda v: _number(v) and v > 0))
    warmup_ratio: float = field(default=0.06, metadata=must("a number in [0, 1]", _in(0.0, 1.0)))
    schedule: str = field(default="cosine", metadata=must("'cosine', 'linear' or 'constant'",
                                                          lambda v: v in SCHEDULES))
    min_lr_ratio: float = field(default=0.0, metadata=must("a number in [0, 1]", _in(0.0, 1.0)))
    impl: str = field(default="fused", metadata=must("'for_loop', 'foreach' or 'fused'",
                                                     lambda v: v in OPTIM_IMPLS))  # README: Cost


@dataclass
class ModelConfig:
    """``model.*``: the keyword arguments of :class:`attnbench.models.model.TransformerClassifier` (the values
    are those of the chosen ``conf/model/<name>.yaml``); :func:`check_model` checks them with the model's words."""

    d_model: int = MISSING
    n_heads: int = MISSING
    head_dim: Optional[int] = None  # per-head d_k; None = d_model / n_heads
    n_layers: int = MISSING
    d_ff: int = MISSING
    dropout: float = MISSING
    attn_dropout: float = MISSING
    pooling: str = MISSING  # mean | max | cls | last


@dataclass
class CompileConfig:
    """``compile.*``: ``torch.compile`` of the model (:class:`attnbench.models.module.TextClassifierModule`).

    Attributes:
        enabled: compile the model's forward (and so its backward) with ``torch.compile``; off = eager.
        dynamic: ``torch.compile``'s ``dynamic``: True traces sequence length and batch size as symbols (one
            graph for every batch shape, as length-grouped batches need); False specialises per shape;
            None lets torch decide (recompiles once a second shape is seen).
        mode: ``torch.compile``'s ``mode``: ``default``, ``reduce-overhead``, ``max-autotune`` or
            ``max-autotune-no-cudagraphs``.
    """

    enabled: bool = field(default=False, metadata=must("true or false", lambda v: isinstance(v, bool)))
    dynamic: Optional[bool] = field(default=True, metadata=must("true, false or null",
                                                                lambda v: v in (True, False, None)))
    mode: str = field(default="default", metadata=must(
        "'default', 'reduce-overhead', 'max-autotune' or 'max-autotune-no-cudagraphs'", lambda v: v in COMPILE_MODES))


@dataclass
class RunConfig:
    """The root of ``conf/train.yaml``: the config groups (``attention``, ``model``, ``data``, ``trainer``,
    ``callbacks``, ``logger``) and the run's own keys."""

    attention: Any = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    data: Any = MISSING
    trainer: Any = MISSING
    callbacks: Any = None
    logger: Any = None
    optim: OptimConfig = field(default_factory=OptimConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    module: Any = None  # _target_ config of the LightningModule, with its _partial_ optimizer and scheduler
    task_name: str = "train"
    seed: int = 0
    tags: list[str] = field(default_factory=list)
    ckpt_path: Optional[str] = None  # last | <file>.ckpt | null (see docs/sweeps.md: Resume)
    optimized_metric: Optional[str] = "val/acc_best"  # the metric returned to Hydra sweepers
    run_name: str = MISSING
    budget: Optional[dict[str, int]] = None  # an experiment's per-dataset step or epoch budget
    # an experiment's per-dataset data.max_length (tokens), as ``data.max_length: ${max_length_by_data.${data.name}}``
    max_length_by_data: Optional[dict[str, int]] = None
    # when trainer.max_time stopped the fit before its budget: test on this many batches only (enough for the
    # inference rate; an unfinished run's accuracy is not reported), or null: the whole test split
    test_batches_if_stopped: Optional[int] = field(default=None, metadata=must(
        "null or an integer >= 1", lambda v: v is None or _integer(v) and v >= 1))
    output_dir: Optional[str] = None  # outside Hydra (tests, notebooks): where the job writes


ConfigStore.instance().store(name="train_schema", node=RunConfig)

#: The ranges of the ``_target_`` groups' keys that Lightning or W&B would only reject mid-run (their configs
#: are the constructors' arguments, not a schema of attnbench's); checked when the key is present.
TARGET_RANGES: dict[str, tuple[str, Callable[[Any], bool], str]] = {
    "trainer.max_steps": ("an integer >= 1, or -1 for no limit", _steps, " (0 would test an untrained model)"),
    "trainer.max_epochs": ("an integer >= 1, or -1 for no limit", _steps, " (0 would test an untrained model)"),
    # Lightning takes these and only fails mid-run (val_check_interval=0, check_val_every_n_epoch=0 and
    # accumulate_grad_batches=0 divide by zero in the fit), or silently does something else: 0 training batches
    # tests an untrained model, val_check_interval=0.0 validates after every batch, a negative gradient_clip_val
    # switches clipping off, num_sanity_val_steps=-2 skips the sanity check. (Lightning's own constructor refuses
    # other values, e.g. limit_val_batches=-1.)
    "trainer.val_check_interval": ("a fraction in (0, 1] of an epoch, a number of training batches >= 1, or a time "
                                   "'DD:HH:MM:SS'", _interval, ""),
    "trainer.check_val_every_n_epoch": ("an integer >= 1, or null (validate every val_check_interval batches across "
                                        "epochs)", lambda v: v is None or _integer(v) and v >= 1, ""),
    "trainer.limit_train_batches": ("null, a fraction in (0, 1] or a number of batches >= 1", _batches,
                                    " (0 would test an untrained model)"),
    "trainer.accumulate_grad_batches": ("an integer >= 1", lambda v: _integer(v) and v >= 1, ""),
    "trainer.gradient_clip_val": ("null, 0 (no clipping) or a number > 0", lambda v: v is None or _number(v) and v >= 0,
                                  ""),
    "trainer.num_sanity_val_steps": ("an integer >= 0, or -1 for the whole validation split",
                                     lambda v: _integer(v) and v >= -1, ""),
    "trainer.log_every_n_steps": ("an integer >= 1, or 0 for no per-step logging",
                                  lambda v: v is None or _integer(v) and v >= 0, ""),
    # Lightning asserts it (a bare AssertionError) only when the fit sets the callback up
    "callbacks.throughput_monitor.window_size": ("an integer >= 2 (steps per rate)", lambda v: _integer(v) and v >= 2,
                                                 ""),
    "trainer.max_time": ("null, a duration 'DD:HH:MM:SS' > 0 or a mapping of days/hours/minutes/seconds, "
                         "e.g. {minutes: 50}", _duration, ""),
    "logger.wandb.mode": ("auto, online, offline or disabled", lambda v: v in WANDB_MODES, ""),
    "logger.wandb.init_timeout": ("a number of seconds > 0", lambda v: _number(v) and v > 0, ""),
}
#: every range by its dotted key: the schema's fields (:func:`must`) and :data:`TARGET_RANGES`
RANGES: dict[str, tuple[str, Callable[[Any], bool], str]] = {
    **{f"{prefix}{f.name}": f.metadata["must"] for prefix, schema in (("", RunConfig), ("optim.", OptimConfig),
                                                                        ("compile.", CompileConfig))
       for f in fields(schema) if "must" in f.metadata},
    **TARGET_RANGES,
}


def range_message(key: str, value: Any) -> str:
    """``<key> must be <what>, got <value>`` for a key of :data:`RANGES`."""
    what, _, note = RANGES[key]
    return f"{key} must be {what}, got {list(value) if isinstance(value, tuple) else value!r}{note}"


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def _checked(settings: Any, schema: type, section: str, what: str) -> dict[str, Any]:
    """``settings`` (a mapping or DictConfig, or None) over the defaults of dataclass ``schema``, each value
    checked against its field's range.

    Raises:
        ConfigError: an unknown key (``unknown <what> setting(s) <section>.<key>; ...``), or a value out of range.
    """
    settings = dict(_plain(settings) or {})
    defaults = OmegaConf.to_container(OmegaConf.structured(schema))
    unknown = sorted(set(settings) - set(defaults))
    if unknown:
        raise ConfigError(f"unknown {what} setting(s) {', '.join(section + '.' + k for k in unknown)}; "
                          f"{section} has: {', '.join(sorted(defaults))}")
    values = {**defaults, **settings}
    for f in fields(schema):
        if "must" in f.metadata and not f.metadata["must"][1](values[f.name]):
            raise ConfigError(range_message(f"{section}.{f.name}", values[f.name]))
    return values


def check_optim(optim: Any) -> dict[str, Any]:
    """The ``optim`` mapping with the :class:`OptimConfig` defaults for missing keys, checked.

    Raises:
        ConfigError: an unknown key, or a value out of range; the message names ``optim.<key>``.
    """
    return _checked(optim, OptimConfig, "optim", "optimizer")


def check_compile(settings: Any) -> dict[str, Any]:
    """The ``compile`` mapping with the :class:`CompileConfig` defaults for missing keys, checked.

    Raises:
        ConfigError: an unknown key or a value of the wrong kind; the message names ``compile.<key>``.
    """
    return _checked(settings, CompileConfig, "compile", "compile")


def check_model(model: Any) -> None:
    """The model sizes, dropouts, pooling and heads (in the words of the model's own checks), before any model
    or data work.

    Raises:
        ConfigError: ``invalid config: ...`` naming the key.
    """
    m = _plain(model) or {}
    sizes = {k: m[k] for k in ("d_model", "n_heads", "n_layers", "d_ff", "head_dim") if _number(m.get(k)) and m[k] < 1}
    if sizes:
        raise ConfigError(f"invalid config: model sizes must be >= 1, got {sizes}; fix these in conf/model or on "
                          "the command line.")
    for name in ("dropout", "attn_dropout"):
        if _number(m.get(name)) and not 0.0 <= m[name] < 1.0:
            raise ConfigError(f"invalid config: model.{name} must be in [0, 1), got {m[name]}")
    if "pooling" in m and m["pooling"] not in POOLINGS:
        raise ConfigError(f"invalid config: model.pooling must be one of {', '.join(POOLINGS)}, got {m['pooling']!r}")
    d_model, n_heads = m.get("d_model"), m.get("n_heads")
    if m.get("head_dim") is None and _integer(d_model) and _integer(n_heads) and d_model % n_heads:
        raise ConfigError(f"invalid config: d_model={d_model} is not divisible by n_heads={n_heads}; "
                          "set model.d_model to a multiple of model.n_heads (or set model.head_dim).")


def check_run_config(cfg: DictConfig) -> None:
    """Every check that needs no torch, no model and no data: the ranges of :data:`RANGES`, the model's sizes
    (:func:`check_model`), ``ckpt_path``, ``trainer.precision`` and the data keys. What this machine can run
    (:func:`check_accelerator`) is not checked here: a SLURM job is composed where it is submitted.

    Raises:
        ConfigError: with the key, the value and what it must be.
    """
    from attnbench.paths import user_path

    for key in ("test_batches_if_stopped", *TARGET_RANGES):
        node = OmegaConf.select(cfg, key, default=_ABSENT)
        if node is _ABSENT or key.startswith("logger.wandb.") and node is None:
            continue
        if not RANGES[key][1](_plain(node)):
            raise ConfigError(range_message(key, _plain(node)))
    check_model(cfg.get("model"))
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path not in (None, "", "last", "best", "hpc", "registry") and not user_path(ckpt_path).is_file():
        raise ConfigError(f"ckpt_path={ckpt_path}: no such checkpoint file. Use the path printed when the run "
                          "stopped (e.g. <output_dir>/checkpoints/interrupted.ckpt or last.ckpt).")
    check_optim(cfg.get("optim") or {})
    check_compile(cfg.get("compile") or {})
    trainer = cfg.get("trainer") or {}
    check_precision(trainer.get("precision"), (cfg.get("optim") or {}).get("impl"), trainer.get("gradient_clip_val"))
    if cfg.get("data") is not None:
        from attnbench.data.config import DataConfig  # no torch: the data keys' one validation

        DataConfig.check(cfg.data)


def check_accelerator(accelerator: Any) -> None:
    """Refuse ``trainer.accelerator=gpu`` or ``cuda`` (``trainer=gpu``, ``trainer=ddp``) where torch certainly has no
    CUDA device, without importing torch: the installed torch is a CPU-only build (its version ends in ``+cpu``),
    ``CUDA_VISIBLE_DEVICES`` hides every device, or (Linux, a torch not built for ROCm) no NVIDIA driver is loaded
    (no ``/proc/driver/nvidia/version``). Anything less certain is left to Lightning's own check, which the config
    check runs once torch has loaded (:func:`attnbench.run.train.check_trainer`). On macOS ``gpu`` means MPS:
    Lightning's check too.

    Raises:
        ConfigError: naming the reason and ``trainer=cpu``.
    """
    import os
    import sys

    if str(accelerator) not in ("gpu", "cuda") or sys.platform == "darwin":
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if torch_version.endswith("+cpu"):
        why = f"the installed torch {torch_version} is a CPU-only build"
    elif visible is not None and visible.strip() in ("", "-1"):
        why = f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    elif sys.platform.startswith("linux") and "rocm" not in torch_version \
            and not Path("/proc/driver/nvidia/version").exists():
        why = "no NVIDIA driver is loaded (no /proc/driver/nvidia/version)"
    else:
        return
    raise ConfigError(f"trainer.accelerator={accelerator}: this machine has no GPU that torch can use ({why}). "
                      "Use trainer=cpu (or trainer.accelerator=auto).")


def check_attention(cfg: DictConfig) -> None:
    """The attention module of one layer (:class:`attnbench.attention.MultiHeadAttention`) built once from
    ``cfg.attention`` and the model's ``d_model``, ``n_heads``, ``head_dim`` and ``attn_dropout``, so that every
    value the score function's own constructor refuses (a built-in or one outside the package, found through
    ``hydra.searchpath``) answers before any data or Lightning work. It imports torch (about a second) and builds
    a few small linear layers; no data is needed. Run it after :func:`check_run_config` (the model sizes are then
    known to be valid).

    Raises:
        ConfigError: ``invalid config: <the constructor's own message>`` for a ``ValueError``/``KeyError`` it raised
            (a :class:`ConfigError`, such as an unknown option, is a ``ValueError``). A ``TypeError`` or any other
            exception of a constructor is a bug in it and keeps its own traceback.
    """
    model, attention = _plain(cfg.get("model")), cfg.get("attention")
    if not isinstance(model, dict) or attention is None \
            or not all(_integer(model.get(key)) for key in ("d_model", "n_heads")):
        return
    from attnbench.attention import MultiHeadAttention

    try:
        MultiHeadAttention(model["d_model"], model["n_heads"], attention, attn_dropout=model.get("attn_dropout") or 0.0,
                           head_dim=model.get("head_dim"))
    except (ValueError, KeyError) as err:
        raise ConfigError(f"invalid config: {err.args[0] if err.args else repr(err)}") from None


def check_precision(precision: Any, impl: Any = None, gradient_clip_val: Any = None) -> None:
    """Refuse ``trainer.precision`` values whose weights are float16 (AdamW cannot train them), and float16 mixed
    precision with a fused AdamW and gradient clipping (its grad scaler scales the gradients, and the fused step
    unscales them inside, so they cannot be clipped: Lightning fails at the first step).

    Raises:
        ConfigError: naming ``trainer.precision`` and the settings that work.
    """
    if str(precision) in FLOAT16_WEIGHTS:
        raise ConfigError(
            f"trainer.precision={precision} keeps the weights and AdamW's moments in float16, where AdamW's eps "
            f"(optim.eps) rounds to 0 and small gradients' second moments underflow: the first update is NaN. "
            "Use trainer.precision=16-mixed (float16 compute, float32 weights), bf16-mixed or bf16-true."
        )
    if str(precision) in ("16-mixed", "16") and impl == "fused" and gradient_clip_val:
        raise ConfigError(
            f"trainer.precision={precision} scales the loss, and optim.impl=fused unscales the gradients inside its "
            f"step, so they cannot be clipped first (trainer.gradient_clip_val={gradient_clip_val}). Use "
            "optim.impl=foreach, trainer.precision=bf16-mixed (no scaling), or trainer.gradient_clip_val=0."
        )


def type_error_message(err: BaseException) -> str | None:
    """The message for a value of the wrong type refused by the schema while Hydra composes the config
    (OmegaConf's ``ValidationError``, the cause of Hydra's error), or ``None`` for other errors.

    ``seed=abc`` -> ``seed must be an integer, got 'abc'`` (the words of :data:`RANGES` where the key has a
    range; else ``<key> must be <type>, got <value>``).
    """
    from omegaconf.errors import ValidationError

    cause = err if isinstance(err, ValidationError) else err.__cause__
    if not isinstance(cause, ValidationError):
        return None
    key = str(getattr(cause, "full_key", "") or "").split("[")[0]  # optim.betas[0] -> optim.betas
    value = getattr(cause, "value", None)
    if key in RANGES:
        return range_message(key, value)
    declared = {f.name: str(f.type) for f in fields(cause.object_type)} if is_dataclass(cause.object_type) else {}
    wanted = declared.get(key.rsplit(".", 1)[-1], "").replace("Optional[", "").rstrip("]")
    words = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}
    return f"{key} must be {words.get(wanted, 'of type ' + (wanted or 'another type'))}, got {value!r}"


def config_dir() -> Path:
    """The folder of ``train.yaml`` and its groups: the installed package ``attnbench.conf`` (the wheel carries
    the repository's top-level ``conf/`` under that name, and an editable install maps the name to it; see
    ``setup.py``), else, in a source checkout run with ``PYTHONPATH=src``, the checkout's ``conf/``."""
    from importlib.util import find_spec

    spec = find_spec("attnbench.conf")  # a folder of YAML files: a namespace package, found where it is installed
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(location) / "train.yaml").is_file():
            return Path(location)
    return Path(__file__).resolve().parents[2] / "conf"  # src/attnbench/config.py -> <checkout>/conf


def sqlite_url(path: str) -> str:
    """``${attnbench.sqlite:outputs/hpo/optuna.db}`` -> ``sqlite:////abs/outputs/hpo/optuna.db``, folder created."""
    file = Path(path).expanduser().resolve()
    file.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{file}"


def fold_suffix(cv_folds: Any, fold: Any) -> str:
    """``${attnbench.fold:${data.cv_folds},${data.fold}}`` in ``run_name``: ``-fold<k>`` when the run tests fold k
    of a cross-validation (``data.cv_folds`` set), else nothing."""
    return f"-fold{fold}" if cv_folds else ""


def _searchpath_folders(searchpath: Any) -> list[Path]:
    """The folders of ``hydra.searchpath`` entries (``file://<dir>``, ``pkg://<package>``) that exist."""
    from importlib.resources import files

    folders = []
    for entry in list(searchpath or []):
        scheme, _, where = str(entry).partition("://")
        try:
            folder = Path(where) if scheme == "file" else Path(str(files(where.replace("/", ".")))) if where else None
        except (ModuleNotFoundError, TypeError, ValueError):
            folder = None
        if folder is not None and folder.is_dir():
            folders.append(folder)
    return folders


def config_groups_help(searchpath: Any = None) -> str:
    """The ``group: option, option, ...`` lines of ``--help`` (Hydra's ``$APP_CONFIG_GROUPS``), with the options
    that ``hydra.searchpath`` adds (Hydra lists only the primary config's search path there, while a job composes
    with the whole one). Hydra's own ``hydra/`` groups are left out, as in Hydra's listing."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    options: dict[str, set[str]] = {}
    if GlobalHydra.instance().is_initialized():
        loader = GlobalHydra.instance().config_loader()

        def walk(parent: str) -> None:
            for group in loader.list_groups(parent):
                name = f"{parent}/{group}" if parent else group
                if name == "hydra" or name.startswith("hydra/"):
                    continue
                found = loader.get_group_options(name, ObjectType.CONFIG)
                if found:
                    options.setdefault(name, set()).update(found)
                walk(name)

        walk("")
    for folder in ([] if options else [config_dir()]) + _searchpath_folders(searchpath):
        for path in folder.rglob("*.yaml"):
            group = path.parent.relative_to(folder).as_posix()
            if group != "." and group != "hydra" and not group.startswith("hydra/"):
                options.setdefault(group, set()).add(path.stem)
    return "".join(f"{group}: {', '.join(sorted(names))}\n" for group, names in sorted(options.items()))


OmegaConf.register_new_resolver("attnbench.config_groups", config_groups_help, replace=True)
OmegaConf.register_new_resolver("attnbench.sqlite", sqlite_url, replace=True)
OmegaConf.register_new_resolver("attnbench.fold", fold_suffix, replace=True)

import attnbench.experiments.registry  # noqa: E402,F401  (registers ${attnbench.score_functions:}, used by conf/experiment)
