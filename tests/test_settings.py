"""Typed settings: every value is checked by type and range before any work, one line each."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from conftest import CONF, TINY, compose_config, run_cli
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import translate.schema
from translate.errors import UserError
from translate.nn.config import TransformerConfig
from translate.schema.commands import CheckpointCommand, EngineCommand
from translate.schema.decoding import DecodeOverrides
from translate.settings import (
    COMMANDS,
    TrainSettings,
    build,
    decode_overrides,
    mechanics_keys,
    train_settings,
)
from translate.training.resume import MECHANICS


def settings(*overrides: str):
    return train_settings(compose_config("train", [*TINY, "run_dir=unused", *overrides]))


def test_the_model_yaml_writes_out_the_model_config_defaults():
    """conf/model/transformer.yaml, as train composes it without a preset, holds every field
    of TransformerConfig at its default: the YAML repeats the one declaration, never differs."""
    model = compose_config("train", ["~experiment"]).model
    defaults = dataclasses.asdict(TransformerConfig())
    assert OmegaConf.to_container(model, resolve=True) == defaults


def test_how_a_job_runs_is_one_flag_for_the_resume_check_and_the_sweep_dir_names():
    """The fields marked doc(..., mechanics=True) are what a resume may change unremarked and
    what a sweep job's directory name leaves out: resume reads the flags, and Hydra's list is
    made of them (the mechanics_keys resolver) when it composes."""
    how = {
        "run_dir",
        "data.cache_dir",
        "runtime.device",
        "runtime.num_threads",
        "trainer.resume",
        "trainer.overwrite",
        "trainer.progress_bar",
        "runtime.keep_freed_memory",
        "runtime.cpu_bf16_padding",
        "trainer.attention_heatmaps",
        "trainer.heatmap_every_n_validations",
    }
    assert set(mechanics_keys()) == how
    assert set(MECHANICS) == how | {"task_name"}
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        full = compose("train", [], return_hydra_config=True)
    excluded = set(full.hydra.job.config.override_dirname.exclude_keys)
    assert excluded == set(mechanics_keys()) | {"experiment", "data.dir", "data.path"}


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_preset_composes_into_valid_settings(preset):
    """Each conf/experiment file, found on disk, so a new preset is checked without a test."""
    overrides = [f"experiment={preset}", "run_dir=unused"]
    try:
        s = train_settings(compose_config("train", overrides))
    except UserError as err:  # a local-folder preset: any folder will do for the settings
        assert "data.dir is not set" in str(err)
        s = train_settings(compose_config("train", [*overrides, "data.dir=m30k"]))
    assert s.model.num_heads == s.config["heads"] and isinstance(s.optim.lr, float)
    # Multi-head unless asked: kv_heads follows heads, in every preset.
    assert s.model.num_kv_heads == s.config["kv_heads"]
    assert s.model.num_heads % s.model.num_kv_heads == 0


def test_from_run_names_every_decode_setting():
    """evaluate and translate start from decode/from_run, which translate.settings makes from
    DecodeSettings: a key it lacked could not be set on their command line (Hydra: not in
    struct), and each key set replaces that one alone."""
    from_run = compose_config("evaluate", ["checkpoint=c.pt"]).decode
    fields = {f.name for f in dataclasses.fields(translate.schema.DecodeSettings)}
    assert set(from_run) == fields and all(v is None for v in from_run.values())
    one = compose_config("translate", ["checkpoint=c.pt", "decode.max_len_b=7"]).decode
    assert decode_overrides(build(DecodeOverrides, one, "decode")) == {"max_len_b": 7}


@pytest.mark.parametrize(
    "override,message",
    [
        ("decode.beam_size=2.5", "decode.beam_size=2.5 must be an integer"),
        ("decode.length_penalty=abc", "decode.length_penalty='abc' must be a number"),
        ("decode.strategy=sample", "decode.strategy=sample is unknown; choose one of beam, greedy"),
        ("heads=abc", "model.num_heads='abc' must be an integer"),
        ("kv_heads=abc", "model.num_kv_heads='abc' must be an integer"),
        ("kv_heads=3", "kv_heads=3 must be >= 1 and divide heads=2"),
        ("kv_heads=0", "kv_heads=0 must be >= 1 and divide heads=2"),
        ("kv_heads=4", "kv_heads=4 must be >= 1 and divide heads=2"),
        # The model's own rule (nn.config.check_heads), worded with the config's keys.
        ("heads=3", "model.d_model=32 is not divisible by heads=3; pick heads from the divisors"),
        ("heads=0", "heads=0 must be >= 1"),
        ("runtime.precision=fp8", "runtime.precision=fp8 is unknown; choose one of auto, bf16"),
        # torch knows these device types, but nothing here runs on them (before: a traceback
        # in the first step, after the run dir was made).
        ("runtime.device=meta", "runtime.device=meta must be auto, cpu, cuda or cuda:N"),
        ("runtime.device=mps", "runtime.device=mps must be auto, cpu, cuda or cuda:N"),
        ("runtime.device=cuda:x", "runtime.device=cuda:x must be auto, cpu, cuda or cuda:N"),
        # Before: a segfault (100,000 thread stacks), or libgomp's out-of-memory abort.
        ("runtime.num_threads=100000", "runtime.num_threads=100000 must be in 1.."),
        ("runtime.num_threads=0", "runtime.num_threads=0 must be in 1.."),
        ("optim.lr=abc", "optim.lr='abc' must be a number"),
        ("seed=abc", "seed='abc' must be an integer"),
        ("trainer.max_steps=2.5", "trainer.max_steps=2.5 must be an integer"),
        ("trainer.resume=maybe", "trainer.resume=maybe is unknown; choose one of true, false"),
        ("data.splits.test=null", "data.splits.test is null"),
        ("data.splits.valid=null", "data.splits.valid is null"),
        ("trainer.max_steps=0", "trainer.max_steps=0 must be > 0"),
        ("trainer.keep_last_checkpoints=0", "trainer.keep_last_checkpoints=0 must be > 0"),
        ("+model.depth=3", "unknown key model.depth"),
        ("optim.betas=[0.9]", "optim.betas=[0.9] must be two numbers"),
        (
            "data=multi30k",
            "data.dir is not set: add data.dir=<value> to the command; Multi30k "
            "comes from its official repository, https://github.com/multi30k/dataset",
        ),
        # NaN passes every range check (its comparisons are false), infinity most of them.
        ("optim.lr=nan", "optim.lr=nan must be a finite number"),
        ("optim.lr=inf", "optim.lr=inf must be a finite number"),
        ("decode.max_len_a=nan", "decode.max_len_a=nan must be a finite number"),
        ("decode.length_penalty=-inf", "decode.length_penalty=-inf must be a finite number"),
        ("model.dropout=nan", "model.dropout=nan must be a finite number"),
        ("trainer.max_minutes=inf", "trainer.max_minutes=inf must be a finite number"),
        ("optim.betas=[nan,0.98]", "optim.betas=[nan, 0.98] must be two numbers in [0, 1)"),
    ],
)
def test_bad_values_are_one_line_errors_before_any_work(override, message):
    with pytest.raises(UserError) as err:
        settings(override)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_greedy_with_a_beam_is_refused_not_ignored():
    with pytest.raises(UserError, match="decode.strategy=greedy keeps one hypothesis, but decod"):
        settings("decode.strategy=greedy", "decode.beam_size=3")
    assert settings("decode.strategy=greedy", "decode.beam_size=1").decode.strategy == "greedy"


def test_numbers_where_text_is_expected_are_read_as_text():
    """``runtime.precision=32`` arrives from the command line as the integer 32."""
    assert settings("runtime.precision=32").runtime.precision == "32"
    assert settings("optim.lr=1").optim.lr == 1.0


def test_the_multi30k_heads_study_is_one_command_of_equal_update_counts():
    overrides = ["experiment=heads_ablation_multi30k", "data.dir=m30k"]
    s = train_settings(compose_config("train", [*overrides, "run_dir=unused"]))
    assert (s.trainer.max_minutes, s.trainer.max_steps) == (None, 1800)
    assert s.data.source == "multi30k" and s.model.d_model == 256
    assert s.trainer.average_last_n == 5
    # the recipe the committed study ran, whatever multi30k_cpu has become since
    assert (s.model.dropout, s.decode.length_penalty, s.runtime.precision) == (0.0, 1.2, "32")
    assert (s.optim.cooldown, s.trainer.val_bleu_sentences) == (0.0, 300)
    assert not s.trainer.average_around_best and s.model.attention_impl == "sdpa"
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        full = compose("train", overrides, return_hydra_config=True)
    params = full.hydra.sweeper.params
    assert params.heads == "1,4,8,16" and params.seed == "1,2,3,4,5"


def test_the_multi30k_kv_heads_study_sweeps_kv_heads_at_8_heads_on_the_same_recipe():
    heads_study = ["experiment=heads_ablation_multi30k", "data.dir=m30k", "run_dir=unused"]
    kv_study = ["experiment=kv_heads_ablation_multi30k", "data.dir=m30k", "run_dir=unused"]
    s = train_settings(compose_config("train", [*kv_study, "kv_heads=2"]))
    same = train_settings(compose_config("train", [*heads_study, "heads=8"]))
    assert (s.model.num_heads, s.model.num_kv_heads) == (8, 2)
    assert (s.trainer, s.optim, s.data) == (same.trainer, same.optim, same.data)
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        full = compose("train", kv_study[:2], return_hydra_config=True)
    params = full.hydra.sweeper.params
    assert {k: str(v) for k, v in params.items()} == {"kv_heads": "1,2,4,8", "seed": "1"}
    assert full.hydra.sweep.dir == "outputs/multirun/kv_heads_ablation_multi30k"


@pytest.mark.parametrize("kv_heads", [1, 2, 4, 8])
def test_kv_heads_set_the_key_value_heads_of_the_model(kv_heads):
    """``heads=8 kv_heads=K``, as each job of ``-m heads=8 kv_heads=1,2,4,8`` composes it."""
    s = settings("heads=8", f"kv_heads={kv_heads}")
    assert (s.model.num_heads, s.model.num_kv_heads) == (8, kv_heads)
    assert s.config["model"]["num_kv_heads"] == kv_heads
    model = s.model.build(vocab_size=20, pad_id=0)
    attn = model.decoder_layers[0].cross_attn
    assert attn.num_kv_heads == kv_heads
    assert attn.k_proj.weight.shape == (kv_heads * 32 // 8, 32)  # TINY: d_model 32


def test_kv_heads_follow_heads_on_the_command_line():
    s = settings("heads=4")
    assert (s.model.num_heads, s.model.num_kv_heads) == (4, 4)


def test_the_quickstart_is_a_step_budget():
    """Before, a 1.5-minute clock: on a busy machine it made 80 of 1,500 updates (BLEU 0.2)."""
    s = train_settings(compose_config("train", ["experiment=quickstart", "run_dir=unused"]))
    assert s.trainer.max_minutes is None and s.trainer.max_steps == 1000
    assert s.runtime.num_threads == 1  # beside other CPU-bound work, 2 threads wait on each other


# ------------------------------------------------------------------------ help

SETTINGS = [
    *(getattr(translate.schema, name) for name in translate.schema.__all__),
    *COMMANDS.values(),
    CheckpointCommand,
    EngineCommand,
]


def group_of(cls, field):
    """The settings dataclass ``field`` holds (also when optional), or None."""
    hint = typing.get_type_hints(cls)[field.name]
    return next((t for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)), None)


def train_keys(cls=TrainSettings, prefix: str = "") -> dict[str, str]:
    """Every config key training reads -> its help text."""
    keys = {}
    for field in dataclasses.fields(cls):
        group = group_of(cls, field)
        if not field.metadata["key"]:
            continue
        if group is not None:
            keys |= train_keys(group, f"{prefix}{field.name}.")
        else:
            keys[f"{prefix}{field.name}"] = field.metadata["help"]
    return keys


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda cls: cls.__name__)
def test_every_setting_says_what_it_means_its_unit_and_its_range(cls):
    for field in dataclasses.fields(cls):
        meta = field.metadata
        assert meta.get("help"), f"{cls.__name__}.{field.name} has no help"
        if meta["key"] and group_of(cls, field) is None:
            assert meta["unit"] and meta["range"], f"{cls.__name__}.{field.name}: unit, range"


def test_train_help_lists_every_setting_with_its_value_and_meaning():
    proc = run_cli("translate.train", "experiment=quickstart", "heads=4", "--help")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    keys = train_keys()
    assert len(keys) > 80 and "data.tokenizer.vocab_size" in keys
    for key, help_text in keys.items():
        (i,) = [i for i, line in enumerate(lines) if line.startswith(f"{key}=")]
        assert help_text.startswith(lines[i + 1].strip()), key
        assert lines[i + 1].startswith("    ")
    assert "model.num_heads=4  (from ${heads})" in lines  # the command's overrides show
    assert "    unit: features; range: > 0, a multiple of model.num_heads" in lines
