"""The one place configuration becomes typed settings: every group, every command.

Hydra composes ``conf/``; this module turns the composed OmegaConf nodes (or the plain dict a
checkpoint stores) into frozen dataclasses of plain values before any work starts: OmegaConf
checks each value's type, unknown keys and missing ones against the dataclasses (structured
configs), this module each value's range and the rules across values, and every problem is one
readable line that names the key and the fix, e.g. ``model.d_model=512 is not divisible by
heads=3``. The library packages receive these
dataclasses and never read configuration themselves. Defaults live in ``conf/`` (the model's
in :class:`~translate.nn.config.TransformerConfig`, which ``conf/model/`` repeats, tested equal).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import BooleanNode, DictConfig, FloatNode, IntegerNode, ListConfig, OmegaConf
from omegaconf.errors import (
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

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
    except OmegaConfBaseException as err:
        raise UserError(_in_one_line(err, name)) from None


def _key(group: str, key: str) -> str:
    """A key as the command line spells it: ``group.key``, or ``key`` for a command's own
    top-level keys (``group`` empty)."""
    return f"{group}.{key}" if group else key


def build(cls, node: Any, name: str):
    """``cls`` (a settings dataclass) from a config node or dict; ``name`` is the config group
    (``""``: the command's own top-level keys). OmegaConf reads the values onto ``cls`` as a
    structured config, which refuses a value of another type, an unknown key and a missing one;
    the checks OmegaConf does not know are :func:`_check`'s."""
    values = plain(node, name)
    if not isinstance(values, dict):
        raise UserError(f"config {name} must be a group of keys, not {values!r}")
    # A group given as a node is resolved where it stands (model.num_heads: ${heads}).
    values = {key: _literal(plain(value, _key(name, key))) for key, value in values.items()}
    try:
        settings = OmegaConf.to_object(OmegaConf.merge(_schema(cls), values))
    except OmegaConfBaseException as err:
        raise UserError(_in_one_line(err, name)) from None
    _check(settings, name)
    return settings


def _literal(value: Any) -> Any:
    """Resolved ``value`` as OmegaConf reads text: each ``${`` escaped (and the backslashes just
    before it), so that a folder named ``m${x}`` is that name again, no interpolation."""
    if isinstance(value, str):
        return re.sub(r"(\\*)\$\{", lambda m: 2 * m[1] + "\\${", value)
    if isinstance(value, dict):
        return {key: _literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_literal(item) for item in value]
    return value


@functools.cache  # OmegaConf.merge fills a copy
def _schema(cls) -> DictConfig:
    """``cls`` as a structured config that OmegaConf.merge can fill: writable (a frozen
    dataclass makes its node read-only, and the merge lifts that for the top node only), with
    each group of no default made now (the merge would make it read-only)."""
    schema = OmegaConf.structured(cls)
    OmegaConf.set_readonly(schema, False)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[field.name]):
            schema[field.name] = _schema(hints[field.name])
        elif isinstance(node := schema._get_node(field.name), DictConfig):  # data.hub: None
            OmegaConf.set_readonly(node, False)
    return schema


# What a value must be, by the node of its type that refused it.
_WANTED = {
    IntegerNode: "an integer",
    FloatNode: "a number",
    BooleanNode: "true or false",
    ListConfig: "a list",
    DictConfig: "a group of keys",
}


def _in_one_line(err: OmegaConfBaseException, name: str) -> str:
    """OmegaConf's complaint about the group ``name`` in our words, the key as the command
    line spells it."""
    full = err.full_key
    key = full if full == name or full.startswith(f"{name}.") else _key(name, full)
    if isinstance(err, MissingMandatoryValue):
        return f"{key} is not set: add {key}=<value> to the command"
    if isinstance(err, ConfigKeyError) and dataclasses.is_dataclass(err.object_type):
        known = ", ".join(sorted(field.name for field in dataclasses.fields(err.object_type)))
        return f"unknown key {key}; known keys: {known}"
    wanted = _WANTED.get(type(err.child_node))
    if isinstance(err, ValidationError) and wanted:
        return f"{key}={err.value!r} must be {wanted}"
    return f"{key or 'config'}: {str(err.msg).strip().splitlines()[0]}"


# The checks of a group against the layers above translate.schema, which it does not import:
# the searches (translate.decoding) and the data sources (translate.data).
_CHECKS_ABOVE = {
    DecodeSettings: lambda decode: choice("decode.strategy", decode.strategy, STRATEGIES),
    DataSettings: lambda data: source(data.source),
}


def _check(settings, name: str) -> None:
    """What the types leave to us, each group's first: a finite number where one is due (NaN
    passes every range check, its comparisons all false; null is "no limit"), each field's
    range, declared with it (``doc(..., check=positive)``), and the checks across fields, the
    dataclass's ``validate()``."""
    for field in dataclasses.fields(settings):
        key, value = _key(name, field.name), getattr(settings, field.name)
        if dataclasses.is_dataclass(value):
            _check(value, key)
        elif isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{key}={value} must be a finite number")
    bad = out_of_range(settings)
    if bad is not None:
        field_name, value, check = bad
        raise UserError(f"{_key(name, field_name)}={value} must be {check.must}")
    if type(settings) in _CHECKS_ABOVE:
        _CHECKS_ABOVE[type(settings)](settings)
    if hasattr(settings, "validate"):
        settings.validate()


# ------------------------------------------------------------------------ commands


def model_settings(node: Any) -> ModelSettings:
    return build(ModelSettings, node, "model")


def decode_settings(node: Any) -> DecodeSettings:
    return build(DecodeSettings, node, "decode")


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
        node = OmegaConf.merge(OmegaConf.create(_literal(plain(node, "data"))), overrides)
    return build(DataSettings, node, "data")


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
    config: dict = doc(
        "the resolved config, as the checkpoints keep it", key=False, default_factory=dict
    )
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
    # The groups are typed from the resolved config, which the checkpoints keep as it is.
    config = plain(cfg, "")
    keys = [field.name for field in dataclasses.fields(TrainSettings) if field.metadata["key"]]
    values = {key: config[key] for key in keys if key in config}
    settings = build(TrainSettings, {**values, "run_dir": run_dir, "sweep_job": sweep_job}, "")
    data = settings.data
    for role, why in (("valid", "validation"), ("test", "the final scoring")):
        if role not in data.split_names:
            raise UserError(f"data.splits.{role} is null; training needs it for {why}")
    if data.eval_max_len is None:  # without a cap one long dev line can exhaust the memory
        raise UserError(
            "data.eval_max_len is null: set it to the longest sentence, in tokens, that "
            "validation and test may feed the model (e.g. data.filter.max_src_len)"
        )
    return dataclasses.replace(settings, config=config)


@dataclass(frozen=True)
class CheckpointCommand:
    """What ``evaluate``, ``translate`` and ``analyze`` share: a checkpoint and where to run."""

    checkpoint: str = doc(
        "the checkpoint to load", "file", "<run_dir>/checkpoints/best.pt or another .pt"
    )
    runtime: RuntimeSettings = doc("where and how it computes (conf/runtime/)")


def command_settings(cls, cfg: DictConfig):
    """``cls``, a command's settings, from the top-level keys of its config of the same names."""
    return build(cls, {field.name: cfg.get(field.name) for field in dataclasses.fields(cls)}, "")


def checkpoint_command(cfg: DictConfig) -> CheckpointCommand:
    if cfg.get("checkpoint") is None:
        raise UserError("pass checkpoint=<run_dir>/checkpoints/best.pt")
    return command_settings(CheckpointCommand, cfg)


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
    return command_settings(EngineCommand, cfg)


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
    return command_settings(ExportCommand, cfg)


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
