"""The one place configuration becomes typed settings: every group, every command.

Hydra composes ``conf/``; this module turns the composed OmegaConf nodes (or the plain dict a
checkpoint stores) into frozen dataclasses of plain values, checks every value's type and range
before any work starts, and fails with one readable line that names the key and the fix, e.g.
``model.d_model=512 is not divisible by heads=3``. The library packages receive these
dataclasses and never read configuration themselves. Defaults live in ``conf/`` (the model's
in :class:`~translate.nn.config.TransformerConfig`, which ``conf/model/`` repeats, tested equal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from translate.data.registry import source
from translate.decoding.generate import STRATEGIES
from translate.errors import UserError
from translate.nn.config import doc, out_of_range
from translate.schema import (
    AnalysisSettings,
    DataSettings,
    DecodeSettings,
    ModelSettings,
    OptimSettings,
    RuntimeSettings,
    TrainerSettings,
)
from translate.schema import help as command_keys
from translate.schema.checks import choice

# ------------------------------------------------------------------------ reading and typing


def plain(node: Any, name: str) -> Any:
    """A config node as plain Python values (dicts, lists, scalars), interpolations resolved."""
    if not OmegaConf.is_config(node):
        return node
    try:
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as err:
        key = err.full_key if err.full_key.startswith(f"{name}.") else f"{name}.{err.full_key}"
        raise UserError(f"{key} is not set: add {key}=<value> to the command") from None
    except OmegaConfBaseException as err:
        msg = str(getattr(err, "msg", None) or err).strip().splitlines()[0]
        raise UserError(f"config {name}: {msg}") from None


def _typed(value: Any, hint: Any, key: str) -> Any:
    """``value`` checked against the type ``hint`` (ints are ints, booleans are booleans)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        # bool | str (trainer.resume=true|auto): the first type that takes the value.
        for hint in inner[:-1]:
            with contextlib.suppress(UserError):
                return _typed(value, hint, key)
        return _typed(value, inner[-1], key)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, key)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, (str, int, float)) and not isinstance(value, bool),
        list: isinstance(value, (list, tuple)),
        dict: isinstance(value, dict),
    }.get(origin or hint, True)
    if not ok:
        want = {bool: "true or false", int: "an integer", float: "a number"}.get(
            hint, f"a {getattr(origin or hint, '__name__', hint)}"
        )
        raise UserError(f"{key}={value!r} must be {want}")
    if hint is str and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # runtime.precision=32 arrives as a number
    if hint is float and not math.isfinite(value):
        # Hydra reads nan/inf as numbers, and every range check passes NaN (its comparisons
        # are all false): no setting of ours means anything with them; null is "no limit".
        raise UserError(f"{key}={value} must be a finite number")
    return float(value) if hint is float else value


def _key(group: str, key: str) -> str:
    """A key as the command line spells it: ``group.key``, or ``key`` for a command's own
    top-level keys (``group`` empty)."""
    return f"{group}.{key}" if group else key


def build(cls, node: Any, name: str):
    """``cls`` (a settings dataclass) from a config node or dict, every field type-checked;
    ``name`` is the config group (``""``: the command's own top-level keys)."""
    values = plain(node, name)
    if not isinstance(values, dict):
        raise UserError(f"config {name} must be a group of keys, not {values!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        known_keys = ", ".join(sorted(known))
        raise UserError(f"unknown key {_key(name, unknown[0])}; known keys: {known_keys}")
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [k for k in required if k not in values]
    if missing:
        raise UserError(f"config {name} lacks the key {_key(name, missing[0])}")
    settings = cls(**{k: _typed(v, hints[k], _key(name, k)) for k, v in values.items()})
    _check_ranges(settings, name)
    if hasattr(settings, "validate"):
        settings.validate()
    return settings


def _check_ranges(settings, name: str) -> None:
    """Each field's own range, declared with it (``doc(..., check=positive)``); the checks
    across fields are the dataclass's ``validate()``."""
    bad = out_of_range(settings)
    if bad is not None:
        key, value, check = bad
        raise UserError(f"{_key(name, key)}={value} must be {check.must}")


# ------------------------------------------------------------------------ commands


def model_settings(node: Any) -> ModelSettings:
    return build(ModelSettings, node, "model")


def decode_settings(node: Any) -> DecodeSettings:
    settings = build(DecodeSettings, node, "decode")
    choice("decode.strategy", settings.strategy, STRATEGIES)
    return settings


# evaluate's and translate's decode group (``decode: from_run`` in their conf/*.yaml): every key
# null, "as the run decoded"; a key set on the command line (decode.beam_size=5) replaces that
# one alone, decode=beam or decode=greedy replaces them all. Made from DecodeSettings, so a new
# key needs nothing here; registered on import, as the resolvers are.
ConfigStore.instance().store(
    group="decode",
    name="from_run",
    node={field.name: None for field in dataclasses.fields(DecodeSettings)},
)


def decode_overrides(node: Any) -> dict:
    """The decode keys a command set (``decode: from_run`` leaves the others null)."""
    values = plain(node, "decode")
    if not isinstance(values, dict):
        raise UserError(f"config decode must be a group of keys, not {values!r}")
    return {key: value for key, value in values.items() if value is not None}


def decode_over(stored: dict, overrides: DecodeSettings | dict | None) -> DecodeSettings:
    """The decode settings a command uses: a run's ``stored`` ones, with ``overrides`` (the
    keys a command set, or whole settings) in their place."""
    if isinstance(overrides, DecodeSettings):
        return overrides
    return decode_settings({**stored, **(overrides or {})})


def analysis_settings(node: Any) -> AnalysisSettings:
    return build(AnalysisSettings, node, "analysis")


def data_settings(node: Any, overrides: Any = None) -> DataSettings:
    """The data group; ``overrides`` (``data=<source> data.dir=...`` given to evaluate or
    analyze) are merged over ``node`` (the data config a checkpoint was trained with)."""
    if overrides is not None:
        node = OmegaConf.merge(OmegaConf.create(plain(node, "data")), overrides)
    data = build(DataSettings, node, "data")
    source(data.source)  # the sources are the data layer's, which translate.schema sits below
    return data


@dataclass(frozen=True)
class TrainSettings:
    """Everything ``train`` needs, typed; ``config`` is the resolved config a checkpoint keeps."""

    model: ModelSettings = doc("the Transformer (conf/model/)")
    optim: OptimSettings = doc("the optimiser recipe (conf/optim/)")
    trainer: TrainerSettings = doc("how the run goes (conf/trainer/)")
    runtime: RuntimeSettings = doc("where and how it computes (conf/runtime/)")
    decode: DecodeSettings = doc("how the test split is decoded (conf/decode/)")
    data: DataSettings = doc("the corpus, its tokenizer and its batches (conf/data/)")
    analysis: AnalysisSettings = doc("the per-head summary at the end (conf/analysis/)")
    seed: int = doc("seed of every random generator", "seed", "any integer")
    run_dir: str = doc(
        "where the run writes everything (checkpoints, TensorBoard, hypotheses, results.json)",
        "folder",
        "a path; by default Hydra's run dir",
        mechanics=True,
    )
    config: dict = doc("the resolved config, as the checkpoints keep it", key=False)
    # With trainer.resume=true a sweep job that has no checkpoint yet starts, where a single
    # run stops (a mistyped dir).
    sweep_job: str | None = doc(
        "a multirun job's name (heads=4,seed=2), None for a single run", key=False, default=None
    )


def mechanics_keys(cls=TrainSettings, prefix: str = "") -> tuple[str, ...]:
    """The dotted keys of the fields marked ``doc(..., mechanics=True)``: how a job runs, not
    what it trains. A resume may change them unremarked (``training.resume.MECHANICS``) and a
    sweep job's directory name leaves them out (``conf/hydra/default.yaml``'s ``exclude_keys``
    reads them through the ``mechanics_keys`` resolver)."""
    hints, keys = typing.get_type_hints(cls), []
    for field in dataclasses.fields(cls):
        if field.metadata["mechanics"]:
            keys.append(prefix + field.name)
        elif dataclasses.is_dataclass(hints[field.name]):
            keys += mechanics_keys(hints[field.name], f"{prefix}{field.name}.")
    return tuple(keys)


def _sweep_dir_excluded(*also: str) -> list[str]:
    """Hydra's ``exclude_keys`` (conf/hydra/default.yaml's ``${mechanics_keys:...}``): ``also``
    and every mechanics key, which a sweep job's directory name leaves out."""
    return [*also, *mechanics_keys()]


# Registered on import: every command imports this module before Hydra composes its config.
OmegaConf.register_new_resolver("mechanics_keys", _sweep_dir_excluded, replace=True)


def train_settings(cfg: DictConfig, sweep_job: str | None = None) -> TrainSettings:
    """Validate the composed training config; raises UserError on the first problem."""
    try:
        run_dir = str(cfg.run_dir)
    except OmegaConfBaseException as err:
        raise UserError("run_dir is not set; run through the CLI or pass run_dir=<folder>") from err
    data = data_settings(cfg.data)
    for role, why in (("valid", "validation"), ("test", "the final scoring")):
        if role not in data.split_names:
            raise UserError(f"data.splits.{role} is null; training needs it for {why}")
    if data.eval_max_len is None:  # without a cap one long dev line can exhaust the memory
        raise UserError(
            "data.eval_max_len is null: set it to the longest sentence, in tokens, that "
            "validation and test may feed the model (e.g. data.filter.max_src_len)"
        )
    return TrainSettings(
        model=model_settings(cfg.model),
        optim=build(OptimSettings, cfg.optim, "optim"),
        trainer=build(TrainerSettings, cfg.trainer, "trainer"),
        runtime=build(RuntimeSettings, cfg.runtime, "runtime"),
        decode=decode_settings(cfg.decode),
        data=data,
        analysis=analysis_settings(cfg.analysis),
        seed=_typed(plain(cfg.seed, "seed"), int, "seed"),
        run_dir=run_dir,
        config=plain(cfg, "config"),
        sweep_job=sweep_job,
    )


@dataclass(frozen=True)
class CheckpointCommand:
    """What ``evaluate``, ``translate`` and ``analyze`` share: a checkpoint and where to run."""

    checkpoint: str = doc(
        "the checkpoint to load", "file", "<run_dir>/checkpoints/best.pt or another .pt"
    )
    runtime: RuntimeSettings = doc("where and how it computes (conf/runtime/)")


def checkpoint_command(cfg: DictConfig) -> CheckpointCommand:
    if cfg.get("checkpoint") is None:
        raise UserError("pass checkpoint=<run_dir>/checkpoints/best.pt")
    values = {"checkpoint": str(plain(cfg.checkpoint, "checkpoint")), "runtime": cfg.runtime}
    return build(CheckpointCommand, values, "")


# What each engine of translate and evaluate decodes from (translate.decoding.engine_switch).
ENGINE_SOURCES = {"torch": "checkpoint", "ctranslate2": "model_dir"}
_SOURCE_HINTS = {
    "checkpoint": "<run_dir>/checkpoints/best.pt",
    "model_dir": "<a folder written by python -m translate.export>",
}


@dataclass(frozen=True)
class EngineCommand:
    """What ``evaluate`` and ``translate`` decode with: ``engine=torch checkpoint=<ckpt>`` (our
    model) or ``engine=ctranslate2 model_dir=<dir>`` (an exported one), and where."""

    engine: str = doc(
        "what decodes: our model, or its CTranslate2 export", "name", " | ".join(ENGINE_SOURCES)
    )
    checkpoint: str | None = doc(
        "engine=torch: the checkpoint to load", "file", "a .pt file; null for ctranslate2"
    )
    model_dir: str | None = doc(
        "engine=ctranslate2: a folder written by python -m translate.export",
        "folder",
        "null for torch",
    )
    runtime: RuntimeSettings = doc("where and how it computes (conf/runtime/)")

    @property
    def source(self) -> str:
        """The checkpoint or model folder the engine loads."""
        return getattr(self, ENGINE_SOURCES[self.engine])

    def validate(self) -> None:
        if self.engine not in ENGINE_SOURCES:
            raise UserError(
                f"engine={self.engine} is unknown; choose one of {', '.join(ENGINE_SOURCES)}"
            )
        key = ENGINE_SOURCES[self.engine]
        for owner, other in ENGINE_SOURCES.items():
            if other != key and getattr(self, other) is not None:
                raise UserError(
                    f"{other}= is for engine={owner}; add engine={owner}, or pass {key}= "
                    f"for engine={self.engine}"
                )
        if getattr(self, key) is None:
            raise UserError(f"pass {key}={_SOURCE_HINTS[key]}")
        if self.engine == "ctranslate2" and self.runtime.precision != "auto":
            raise UserError(
                f"runtime.precision={self.runtime.precision} is for engine=torch; an exported "
                "model computes in the quantization it was exported with (python -m "
                "translate.export quantization=)"
            )


def engine_command(cfg: DictConfig) -> EngineCommand:
    values = {k: plain(cfg.get(k), k) for k in ("engine", "checkpoint", "model_dir")}
    values = {k: None if v is None else str(v) for k, v in values.items()}
    return build(EngineCommand, {**values, "runtime": cfg.runtime}, "")


QUANTIZATIONS = ("float32", "int8", "int8_float32", "float16")
# Most rows of an exported position table, far beyond any sentence; checked before the table is
# allocated (max_positions=100000000 asked for 102 GB).
MAX_POSITIONS = 2**16


@dataclass(frozen=True)
class ExportCommand:
    """``python -m translate.export``: a checkpoint, the folder to write, how to store weights,
    and the rows of the position table (None: what the checkpoint's run needs)."""

    checkpoint: str = doc("the checkpoint to export", "file", "a .pt file")
    output: str = doc("the model folder to write", "folder", "new, or an empty folder")
    quantization: str = doc(
        "how the weights are stored and computed (int8: 8-bit weights and matrix products)",
        "name",
        " | ".join(QUANTIZATIONS),
    )
    max_positions: int | None = doc(
        "rows of the position table: the longest source and output the exported model takes",
        "tokens",
        f"1 to {MAX_POSITIONS}; null = what the checkpoint's run evaluates with",
    )

    def validate(self) -> None:
        if self.quantization not in QUANTIZATIONS:
            choices = ", ".join(QUANTIZATIONS)
            raise UserError(f"quantization={self.quantization} is unknown; choose one of {choices}")
        if self.max_positions is not None and not 0 < self.max_positions <= MAX_POSITIONS:
            raise UserError(f"max_positions={self.max_positions} must be in [1, {MAX_POSITIONS}]")


def export_command(cfg: DictConfig) -> ExportCommand:
    if cfg.get("checkpoint") is None or cfg.get("output") is None:
        raise UserError("pass checkpoint=<run_dir>/checkpoints/best.pt output=<folder to write>")
    values = {
        k: plain(cfg[k], k) for k in ("checkpoint", "output", "quantization", "max_positions")
    }
    for key in ("checkpoint", "output", "quantization"):
        values[key] = str(values[key])
    return build(ExportCommand, values, "")


def optional_path(cfg: DictConfig, key: str) -> str | None:
    """A command's optional file argument (``src=``, ``input=``) as a string, or None."""
    value = cfg.get(key)
    return None if value is None else str(value)


# ------------------------------------------------------------------------ help

# The settings each command's --help lists (conf/hydra/help/command.yaml; train's: train.yaml).
COMMAND_KEYS = {
    "translate": (EngineCommand, command_keys.TranslateKeys),
    "evaluate": (EngineCommand, command_keys.EvaluateKeys),
    "analyze": (CheckpointCommand, command_keys.AnalyzeKeys),
    "export": (ExportCommand,),
    "average": (command_keys.AverageKeys,),
    "inspect_data": (command_keys.InspectDataKeys,),
}


def settings_help(cls, node: Any) -> list[str]:
    """Every config key of ``cls`` (a settings dataclass) with its value in ``node`` (the
    composed config), what it means, its unit and its range
    (:func:`translate.schema.help.settings_help`)."""
    return command_keys.settings_help(cls, functools.partial(_config_value, node))


def command_help(config_name: str, *, _root_: DictConfig) -> str:
    """The key list of ``python -m translate.<command> --help`` for ``conf/<config_name>.yaml``.
    "$$": Hydra fills its $NAMES into the template after this, and a value such as
    ${hydra:runtime.output_dir} would read as one."""
    lines = [line for cls in COMMAND_KEYS[config_name] for line in settings_help(cls, _root_)]
    return "\n".join(lines).replace("$", "$$")


OmegaConf.register_new_resolver("translate_command_help", command_help, replace=True)


def _config_value(root: DictConfig, key: str) -> tuple[Any, str] | None:
    """The value at the dotted ``key`` of ``root`` as plain values, and for an interpolation
    (``${heads}``) how it is written: as written where it cannot be resolved here (``???``).
    None where the config lacks the key."""
    parent_key, _, name = key.rpartition(".")
    parent = OmegaConf.select(root, parent_key, default=None) if parent_key else root
    written = OmegaConf.to_container(parent, resolve=False) if OmegaConf.is_config(parent) else {}
    if name not in written:
        return None
    raw = written[name]
    origin = raw if isinstance(raw, str) and "${" in raw else ""
    try:
        value = parent[name]
    except OmegaConfBaseException:
        return raw, ""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    return value, origin
