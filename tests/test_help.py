"""``--help`` of every command but train (test_settings.py has train's): the command's own keys
as its conf/<command>.yaml defines them and the groups it reads, each with its value, meaning,
unit and range, an example line, and nothing of training or of Hydra's generic page (issue 31
case 4)."""

from __future__ import annotations

import re
import typing

import pytest
from conftest import CONF, assert_one_line_error, assert_plain_help, run_cli
from omegaconf import OmegaConf
from test_settings import train_keys

from translate.settings import TrainSettings

# python -m <module> -> its config in conf/
COMMANDS = {
    "translate.translate": "translate",
    "translate.evaluate": "evaluate",
    "translate.analyze": "analyze",
    "translate.export": "export",
    "translate.average": "average",
    "translate.data": "inspect_data",
    "translate.serve": "serve",
}
# A config group's name -> its settings dataclass, as training reads the group.
GROUPS = typing.get_type_hints(TrainSettings)


def config_keys(config_name: str) -> set[str]:
    """Every key a command reads: the top-level keys of conf/<config_name>.yaml, and each key of
    the groups in its defaults list (their settings dataclass, as training reads them)."""
    conf = OmegaConf.to_container(OmegaConf.load(CONF / f"{config_name}.yaml"))
    groups = [next(iter(entry)) for entry in conf.pop("defaults") if isinstance(entry, dict)]
    groups = [g for g in groups if not g.startswith("override ") and g != "hydra"]
    keys = {key for key in conf if key != "hydra"}
    for group in groups:
        keys |= set(train_keys(GROUPS[group], f"{group}."))
    return keys


def plain_help(module: str) -> str:
    """``python -m <module> --help``'s text (:func:`conftest.assert_plain_help`)."""
    return assert_plain_help(run_cli(module, "--help"))


@pytest.mark.parametrize("module", COMMANDS)
def test_help_lists_the_commands_keys_and_nothing_else(module):
    """Plain text too (:func:`plain_help`): one --help run per command, not two."""
    text = plain_help(module)
    lines = text.splitlines()
    listed = {m.group(1) for line in lines if (m := re.match(r"([a-z0-9_.]+)=", line))}
    expected = config_keys(COMMANDS[module])
    assert expected and listed == expected, (sorted(expected - listed), sorted(listed - expected))
    for i, line in enumerate(lines):
        if re.match(r"[a-z0-9_.]+=", line):  # each key: its meaning, then its unit and range
            assert lines[i + 1].startswith("    ") and lines[i + 1].strip(), line
            assert any(
                s.startswith("    unit: ") and "; range: " in s for s in lines[i + 2 : i + 9]
            )
    assert not any(line.startswith(("model.", "optim.", "trainer.", "seed=")) for line in lines)
    assert "Powered by Hydra" not in text and "== Configuration groups ==" not in text
    assert any(line.startswith("Example: ") and f"python -m {module} " in line for line in lines)


@pytest.mark.parametrize(
    "module,override,fragment",
    [
        *((m, "foo.bar=1", f"unknown key foo.bar; {name} takes ") for m, name in COMMANDS.items()),
        (
            "translate.train",
            "traner.max_steps=1",
            "unknown key traner.max_steps (trainer.max_steps?)",
        ),
        (
            "translate.train",
            "experiment=nonexistent",
            "Could not find 'experiment/nonexistent'. Available options in 'experiment': "
            "heads_ablation, ",
        ),
        ("translate.evaluate", "runtime=nope", "Available options in 'runtime': default"),
    ],
)
def test_hydras_own_errors_under_help_are_one_line(module, override, fragment):
    """Hydra reports a bad override itself when a command runs, but under --help its exception
    escaped: a 40-line traceback, exit 1."""
    proc = run_cli(module, override, "--help")
    assert_one_line_error(proc, fragment)
    assert "Config search path" not in proc.stderr


@pytest.mark.parametrize(
    "module,overrides,fragment",
    [
        ("translate.train", ["experiment=nonexistent"], "Could not find 'experiment/nonexistent'"),
        ("translate.evaluate", ["runtime=nope"], "Available options in 'runtime': default"),
        # A key of the schema that the picked group (data=iwslt2017) lacks: Hydra would suggest
        # +data.dir=x, which the hub reader then ignores.
        (
            "translate.train",
            ["data.dir=x"],
            "data.dir is not a key of the data config in use; data=jsonl, multi30k and sample "
            "have it: pick one with data=<name>",
        ),
        ("translate.train", ["data=multi30k", "data.path=x"], "data=iwslt2017 has it"),
    ],
)
def test_a_config_hydra_cannot_compose_is_one_line(module, overrides, fragment):
    """Without --help Hydra printed these itself: five to eight lines and exit 1."""
    proc = run_cli(module, *overrides)
    assert_one_line_error(proc, fragment)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# Every command a user runs with --help but those whose --help the tests above and below read
# (plain_help), and the heads study's (python -m translate.ablation report|speed|align --help,
# tests/ablation/test_ablation_command.py).
PLAIN_HELP = [
    *(f"translate.bench.{name}" for name in ("attention", "decode", "gpu", "ladder", "train")),
    "translate.bench.serve",
]


@pytest.mark.parametrize("module", PLAIN_HELP)
def test_every_help_reads_as_plain_text(module):
    plain_help(module)


def test_train_help_shows_a_sweep():
    """Plain text too (:func:`plain_help`)."""
    assert re.search(
        r"python -m translate\.train -m heads=\d+(,\d+)+", plain_help("translate.train")
    )
