"""The one place configuration becomes typed settings: every group, every command.

The composed config (or a checkpoint's dict) becomes frozen dataclasses before any work starts:
OmegaConf checks types, unknown and missing keys, this module each range and the rules across
values, each problem one line naming the key and the fix. The library packages receive these
dataclasses and never read configuration.
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

from translate.data.registry import SOURCES, source
from translate.errors import UserError, choice
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
from translate.schema.commands import (
    AnalyzeCommand,
    AverageCommand,
    EvaluateCommand,
    ExportCommand,
    InspectDataCommand,
    ServeCommand,
    TranslateCommand,
)
from translate.schema.decoding import DecodeOverrides
from translate.schema.help import group_type, leaf_fields, settings_help

# ------------------------------------------------------------------------ reading and typing


def _plain(node: Any, name: str) -> Any:
    """A config node as plain values, interpolations resolved."""
    if not OmegaConf.is_config(node):
        return node
    try:
        return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as err:
        raise UserError(_in_one_line(err, name)) from None


def _key(group: str, key: str) -> str:
    """A key as the command line spells it (``group`` empty: a command's own keys)."""
    return f"{group}.{key}" if group else key


def build(cls, node: Any, name: str):
    """``cls`` (a settings dataclass) from a config node or dict of the group ``name`` (``""``:
    a command's own keys), checked by OmegaConf, then by :func:`_check`."""
    values = _plain(node, name)
    if not isinstance(values, dict):
        raise UserError(f"config {name} must be a group of keys, not {values!r}")
    # A group given as a node is resolved where it stands (model.num_heads: ${heads}).
    values = {key: _literal(_plain(value, _key(name, key))) for key, value in values.items()}
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
    dataclass's node is read-only, and the merge lifts that for the top node only), each group
    of no default made now (the merge would make it read-only)."""
    schema = OmegaConf.structured(cls)
    OmegaConf.set_readonly(schema, False)
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        group = group_type(hints[field.name])
        if group is not None and field.default is dataclasses.MISSING:
            schema[field.name] = _schema(group)
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
    """OmegaConf's complaint about the group ``name`` in our words."""
    full = err.full_key
    key = full if full == name or full.startswith(f"{name}.") else _key(name, full)
    if isinstance(err, MissingMandatoryValue):
        # For a data folder not given, where the data set comes from: a newcomer's first question.
        data, origin = err.parent_node, ""
        if key == "data.dir" and isinstance(data, DictConfig) and data.get("source") in SOURCES:
            origin = SOURCES[data.source].origin
        return f"{key} is not set: add {key}=<value> to the command{origin}"
    if isinstance(err, ConfigKeyError) and dataclasses.is_dataclass(err.object_type):
        known = ", ".join(sorted(field.name for field in dataclasses.fields(err.object_type)))
        return f"unknown key {key}; known keys: {known}"
    wanted = _WANTED.get(type(err.child_node))
    if isinstance(err, ValidationError) and wanted:
        return f"{key}={err.value!r} must be {wanted}"
    return f"{key or 'config'}: {str(err.msg).strip().splitlines()[0]}"


def _check_strategy(decode: DecodeSettings) -> None:
    # The searches import torch: only a command that decodes pays for it, not --help.
    from translate.decoding.generate import STRATEGIES

    choice("decode.strategy", decode.strategy, STRATEGIES)


# The checks of a group against the layers above translate.schema, which it does not import:
# the searches (translate.decoding) and the data sources (translate.data).
_CHECKS_ABOVE = {DecodeSettings: _check_strategy, DataSettings: lambda d: source(d.source).check(d)}


def _check(settings, name: str) -> None:
    """What the types leave to us, each group's first: a finite number (NaN passes every range
    check, its comparisons all false), each field's range (``doc(..., check=positive)``), and
    the checks across fields, the dataclass's ``validate()``."""
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


def analysis_settings(node: Any) -> AnalysisSettings:
    return build(AnalysisSettings, node, "analysis")


# evaluate's and translate's decode group: every key null, "as the run decoded" (DecodeOverrides);
# decode.beam_size=5 replaces that key alone, decode=beam|greedy them all.
ConfigStore.instance().store(
    group="decode",
    name="from_run",
    node={field.name: None for field in dataclasses.fields(DecodeSettings)},
)


def decode_overrides(decode: DecodeOverrides) -> dict:
    """The decode keys a command line set (``decode: from_run`` leaves the others null)."""
    return {key: value for key, value in dataclasses.asdict(decode).items() if value is not None}


def decode_over(stored: dict, overrides: DecodeSettings | dict | None) -> DecodeSettings:
    """A run's ``stored`` decode settings, with ``overrides`` (keys, or whole settings) in place."""
    if isinstance(overrides, DecodeSettings):
        return overrides
    return decode_settings({**stored, **(overrides or {})})


def data_settings(node: Any, overrides: DataSettings | None = None) -> DataSettings:
    """The data group; ``overrides`` (``data=<source> data.dir=...`` given to evaluate or
    analyze) in place of ``node`` (the data config a checkpoint was trained with)."""
    return overrides or build(DataSettings, node, "data")


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


def mechanics_keys() -> tuple[str, ...]:
    """The dotted keys marked ``doc(..., mechanics=True)``: how a job runs, not what it trains.
    A resume may change them unremarked; a sweep job's dir name leaves them out (``exclude_keys``
    in ``conf/hydra/default.yaml``, through this resolver)."""
    return tuple(key for key, field in leaf_fields(TrainSettings) if field.metadata["mechanics"])


# Registered on import: every command imports this module before Hydra composes its config.
OmegaConf.register_new_resolver(
    "mechanics_keys", lambda *also: [*also, *mechanics_keys()], replace=True
)


def train_settings(cfg: DictConfig, sweep_job: str | None = None) -> TrainSettings:
    """Validate the composed training config; raises UserError on the first problem."""
    try:
        run_dir = str(cfg.run_dir)
    except OmegaConfBaseException as err:
        raise UserError("run_dir is not set; run through the CLI or pass run_dir=<folder>") from err
    # The groups are typed from the resolved config, which the checkpoints keep as it is.
    config = _plain(cfg, "")
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


def command_settings(cls, cfg: DictConfig):
    """``cls``, a command's settings, from the keys of its config of the same names."""
    return build(cls, {field.name: cfg.get(field.name) for field in dataclasses.fields(cls)}, "")


# ------------------------------------------------------------------------ help

# The settings each command reads and its --help lists (conf/hydra/help/command.yaml; train's:
# train.yaml), by its config's name.
COMMANDS = {
    "train": TrainSettings,
    "translate": TranslateCommand,
    "evaluate": EvaluateCommand,
    "analyze": AnalyzeCommand,
    "export": ExportCommand,
    "average": AverageCommand,
    "inspect_data": InspectDataCommand,
    "serve": ServeCommand,
}


def command_help(config_name: str, *, _root_: DictConfig) -> str:
    """The key list of ``python -m translate.<command> --help`` for ``conf/<config_name>.yaml``.
    "$$": Hydra fills its $NAMES into the template after this, and a value such as
    ${hydra:runtime.output_dir} would read as one."""
    lines = settings_help(COMMANDS[config_name], functools.partial(_config_value, _root_))
    return "\n".join(lines).replace("$", "$$")


OmegaConf.register_new_resolver("translate_command_help", command_help, replace=True)


def _config_value(root: DictConfig, key: str) -> tuple[Any, str] | None:
    """The value at the dotted ``key`` of ``root`` and how an interpolation (``${heads}``) is
    written; the written text as the value where it cannot be resolved here (``???``); None:
    no such key."""
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
