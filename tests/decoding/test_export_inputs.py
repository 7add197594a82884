"""What an export and the inference commands refuse, each with the real fault: a tokenizer
from another model beside an exported one, NaN weights written into a checkpoint, a broken
tokenizer or misfit weights in one, a position table no machine holds; and what an export
leaves when a real signal stops it. The checkpoint is the session's tiny trained run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SHORT_DECODE, assert_one_line_error, compose_config, listing, run_cli

from translate.checkpoint import load_checkpoint, save_checkpoint
from translate.data.tokenizer import Tokenizer, train_or_load_tokenizer
from translate.decoding.ct2 import MANIFEST, SENTENCEPIECE, load_exported, tokenizer_identity
from translate.decoding.ct2_export import export_checkpoint
from translate.decoding.translator import load_translator
from translate.errors import UserError, hydra_quoted, override_word
from translate.schema.commands import ExportCommand
from translate.settings import command_settings

pytest.importorskip("ctranslate2")

SAMPLE = ROOT / "translate" / "resources" / "sample"
# A folder name a shell and Hydra both read specially: spaces, quotes, '=', ',' and '$'.
AWKWARD = 'my model\'s=v1, "final" ${x}'


@pytest.fixture(scope="module")
def checkpoint(trained_run) -> Path:
    return Path(trained_run[1]["checkpoint"])


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory) -> Path:
    """The tiny run's float32 export; tests that alter it work on a copy."""
    folder = tmp_path_factory.mktemp("export")
    return export_checkpoint(checkpoint, folder / "model", "float32", None)


def foreign_tokenizer(folder: Path, vocab_size: int, model_type: str = "unigram") -> Path:
    """A real SentencePiece model of the sample corpus, other than the run's."""
    lines = (SAMPLE / "train.de").read_text(encoding="utf-8").splitlines()
    key = {"source": "foreign", "lines": len(lines)}
    _, path = train_or_load_tokenizer(
        lambda: lines, cache_dir=folder, key_parts=key, vocab_size=vocab_size, model_type=model_type
    )
    return path


# ------------------------------------------------------------------- a tokenizer from elsewhere


@pytest.mark.parametrize(
    "vocab_size, model_type, manifest_identity",
    [
        (400, "unigram", True),  # more subwords than the model: before, exit 0 and wrong output
        (250, "unigram", True),  # fewer: before, a KeyError traceback on the first unknown piece
        (400, "unigram", False),  # a translate.json edited to name the foreign tokenizer
        (300, "bpe", False),  # the same, with as many subwords as the model, other ones
    ],
)
def test_an_export_refuses_a_tokenizer_from_another_model(
    exported, tmp_path, vocab_size, model_type, manifest_identity
):
    model_dir = Path(shutil.copytree(exported, tmp_path / "model"))
    foreign = foreign_tokenizer(tmp_path / "cache", vocab_size, model_type)
    shutil.copyfile(foreign, model_dir / SENTENCEPIECE)
    if not manifest_identity:  # then the model's vocabulary tells it
        manifest = json.loads((model_dir / MANIFEST).read_text())
        manifest["tokenizer"] = tokenizer_identity(Tokenizer(foreign.read_bytes()))
        (model_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserError) as err:
        load_exported(model_dir, "cpu")
    message = str(err.value)
    assert f"{model_dir / SENTENCEPIECE} is not the tokenizer" in message and "\n" not in message
    assert "export the checkpoint again: python -m translate.export" in message


def test_a_foreign_tokenizer_is_one_line_from_the_command(exported, tmp_path):
    model_dir = Path(shutil.copytree(exported, tmp_path / "model"))
    shutil.copyfile(foreign_tokenizer(tmp_path / "cache", 250), model_dir / SENTENCEPIECE)
    proc = run_cli(
        "translate.translate", "engine=ctranslate2", f"model_dir={model_dir}", stdin="Ein Haus.\n"
    )
    assert_one_line_error(proc, "is not the tokenizer", "export the checkpoint again")
    assert proc.stdout == ""


def test_the_export_records_its_tokenizer_and_model_and_loads_them(exported):
    manifest = json.loads((exported / MANIFEST).read_text())
    proto = (exported / SENTENCEPIECE).read_bytes()
    assert manifest["tokenizer"] == {"sha256": hashlib.sha256(proto).hexdigest(), "vocab_size": 300}
    weights = (exported / "model.bin").read_bytes()
    assert manifest["model_bin"] == {"sha256": hashlib.sha256(weights).hexdigest()}
    assert load_exported(exported, "cpu").tokenizer.vocab_size == 300


# ------------------------------------------------------------------- the export's own files


@pytest.fixture(scope="module")
def int8_export(checkpoint, tmp_path_factory) -> Path:
    """The same checkpoint exported with other weights' bytes: another model.bin."""
    return export_checkpoint(checkpoint, tmp_path_factory.mktemp("int8") / "model", "int8", None)


def test_a_model_bin_from_another_export_is_refused_naming_it(exported, int8_export, tmp_path):
    """Before, evaluate scored the other export's weights under this translate.json's name, and
    scores.json recorded only the folder."""
    model_dir = Path(shutil.copytree(exported, tmp_path / "model"))
    shutil.copyfile(int8_export / "model.bin", model_dir / "model.bin")
    out = tmp_path / "eval"
    proc = run_cli(
        "translate.evaluate", "engine=ctranslate2", f"model_dir={model_dir}", *SHORT_DECODE,
        f"hydra.run.dir={out}",
    )  # fmt: skip
    said = f"{model_dir / 'model.bin'} is not the model {model_dir} was exported with"
    assert_one_line_error(proc, said, "export the checkpoint again")
    assert not (out / "scores.json").exists() and not (out / "hyp.txt").exists()


def _edit(manifest: dict, path: str, value) -> None:
    """Set the field ``path`` (dotted) of ``manifest``; None removes it."""
    *parents, key = path.split(".")
    for parent in parents:
        manifest = manifest[parent]
    if value is None:
        del manifest[key]
    else:
        manifest[key] = value


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("step", "abc", "field 'step' is \"abc\", not a whole number >= 0"),
        ("step", None, "no field 'step'"),
        ("max_positions", 0, "field 'max_positions' is 0, not a whole number in [1, 65536]"),
        ("special_ids.eos", 5, "field 'special_ids.eos' is 5, not 3"),  # before: ignored
        ("special_ids", [0, 1, 2, 3], "field 'special_ids' is [0, 1, 2, 3], not an object"),
        ("tokenizer.sha256", 7, "field 'tokenizer.sha256' is 7, not a SHA-256"),
        ("model_bin.sha256", "abc", "field 'model_bin.sha256' is \"abc\", not a SHA-256"),
        ("quantization", "float8", "field 'quantization' is \"float8\", not one of float32"),
        ("decode.beam_size", "x", "field 'decode' holds a bad setting (decode.beam_size='x'"),
        ("data", "multi30k", "field 'data' is \"multi30k\", not an object"),
        # Before, blamed on the tokenizer's SHA-256, which is the one recorded.
        ("tokenizer.vocab_size", 500, "field 'tokenizer.vocab_size' is 500, but"),
        ("data_fingerprints", {"test": "x"}, "not an object of SHA-256s by split role"),
    ],
)
def test_every_field_of_the_manifest_is_checked_on_load(exported, tmp_path, field, value, said):
    model_dir = Path(shutil.copytree(exported, tmp_path / "model"))
    manifest = json.loads((model_dir / MANIFEST).read_text())
    _edit(manifest, field, value)
    (model_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserError) as err:
        load_exported(model_dir, "cpu")
    message = str(err.value)
    assert message.startswith(f"{model_dir / MANIFEST}") and said in message, message
    assert "\n" not in message and "export the checkpoint again" in message


def test_an_export_carries_the_runs_text_fingerprints_and_loads_without_them(
    exported, checkpoint, tmp_path
):
    """For evaluate's check of the test split's text; an export made before has none."""
    fingerprints = load_checkpoint(checkpoint)["data_fingerprints"]
    assert load_exported(exported, "cpu").fingerprints == fingerprints
    model_dir = Path(shutil.copytree(exported, tmp_path / "model"))
    manifest = json.loads((model_dir / MANIFEST).read_text())
    del manifest["data_fingerprints"]
    (model_dir / MANIFEST).write_text(json.dumps(manifest))
    assert load_exported(model_dir, "cpu").fingerprints == {}


def test_a_hand_edited_step_is_one_line_from_the_command(exported, tmp_path):
    """Before, a ValueError traceback."""
    model_dir = Path(shutil.copytree(exported, tmp_path / "model"))
    manifest = json.loads((model_dir / MANIFEST).read_text())
    (model_dir / MANIFEST).write_text(json.dumps({**manifest, "step": "abc"}))
    proc = run_cli(
        "translate.translate", "engine=ctranslate2", f"model_dir={model_dir}", stdin="Ein Haus.\n"
    )
    assert_one_line_error(proc, f"{model_dir / MANIFEST}: field 'step' is \"abc\"")
    assert proc.stdout == ""


# ------------------------------------------------------------------- broken checkpoints


def write_altered(checkpoint: Path, path: Path, alter) -> Path:
    """A real checkpoint file: ``checkpoint`` with ``alter(ckpt)`` applied, saved as training
    saves it."""
    ckpt = load_checkpoint(checkpoint)
    alter(ckpt)
    save_checkpoint(ckpt, path)
    return path


def poison(ckpt: dict) -> None:
    """A NaN in the first weight and an infinity in the last: what a diverged run saves."""
    names = list(ckpt["model"])
    ckpt["model"][names[0]][0] = float("nan")
    ckpt["model"][names[-1]].fill_(float("inf"))


def test_non_finite_weights_are_neither_exported_nor_decoded(checkpoint, tmp_path):
    bad = write_altered(checkpoint, tmp_path / "diverged.pt", poison)
    first = next(iter(load_checkpoint(bad)["model"]))
    refusal = re.escape(f"checkpoint {bad} has non-finite weights ({first} and 1 more)")
    with pytest.raises(UserError, match=refusal):
        export_checkpoint(bad, tmp_path / "model", "float32", None)
    assert listing(tmp_path) == ["diverged.pt"]  # nothing written
    with pytest.raises(UserError, match=refusal):
        load_translator(bad, "cpu", "32")
    proc = run_cli("translate.translate", f"checkpoint={bad}", *SHORT_DECODE, stdin="Ein Haus.\n")
    assert_one_line_error(proc, str(bad), first)
    assert proc.stdout == ""


def test_a_garbage_tokenizer_in_a_checkpoint_names_the_file(checkpoint, tmp_path):
    bad = write_altered(
        checkpoint, tmp_path / "t.pt", lambda ckpt: ckpt.update(tokenizer=b"not a model")
    )
    with pytest.raises(UserError) as err:
        load_translator(bad, "cpu", "32")
    message = str(err.value)
    assert f"checkpoint {bad} holds a broken tokenizer: not a SentencePiece model" in message
    assert "\n" not in message


def test_missing_and_unexpected_weights_are_one_line(checkpoint, tmp_path):
    def misfit(ckpt: dict) -> None:
        weights = ckpt["model"]
        for name in list(weights)[:5]:
            del weights[name]
        weights["extra.weight"] = torch.zeros(2)

    bad = write_altered(checkpoint, tmp_path / "w.pt", misfit)
    names = list(load_checkpoint(checkpoint)["model"])[:3]
    with pytest.raises(UserError) as err:
        export_checkpoint(bad, tmp_path / "model", "float32", None)
    message = str(err.value)
    assert f"checkpoint {bad}: its weights do not fit its own model config" in message
    assert f"missing {', '.join(names)} and 2 more; unexpected extra.weight" in message
    assert "\n" not in message and "Error(s)" not in message


def test_float16_refuses_weights_beyond_its_range_naming_the_tensor(checkpoint, tmp_path):
    """Before, 1e38 was written as infinity, and the export translated to empty lines."""
    name = "encoder_layers.0.ffn.fc1.weight"

    def huge(ckpt: dict) -> None:
        ckpt["model"][name][0, 0] = 1e38

    bad = write_altered(checkpoint, tmp_path / "huge.pt", huge)
    out = tmp_path / "model"
    proc = run_cli("translate.export", f"checkpoint={bad}", f"output={out}", "quantization=float16")
    assert_one_line_error(proc, f"quantization=float16 cannot hold the weight {name}", "1e+38")
    assert not out.exists()
    assert export_checkpoint(bad, out, "float32", None) == out  # float32 holds it


# ------------------------------------------------------------------- sizes and hints


def test_an_export_refuses_a_position_table_no_machine_holds():
    cfg = compose_config("export", ["checkpoint=c.pt", "output=m", "max_positions=100000000"])
    with pytest.raises(UserError, match=re.escape("max_positions=100000000 must be in [1, 65536]")):
        command_settings(ExportCommand, cfg)
    ok = compose_config("export", ["checkpoint=c.pt", "output=m", "max_positions=65536"])
    command_settings(ExportCommand, ok)


def test_the_printed_translate_command_names_any_export_folder_exactly(checkpoint, tmp_path):
    """Before, a folder holding a space, quote, '=' or ',' gave a command Hydra could not
    parse; the hint is read back as a user pastes it: by the shell, then by Hydra."""
    out = tmp_path / AWKWARD
    proc = run_cli(
        "translate.export", f"checkpoint={checkpoint}", f"output={hydra_quoted(str(out))}"
    )
    assert proc.returncode == 0, proc.stderr
    hint = next(line for line in proc.stdout.splitlines() if line.startswith("translate with: "))
    words = shlex.split(hint.removeprefix("translate with: "))
    assert words[:3] == ["python", "-m", "translate.translate"]
    cfg = compose_config("translate", words[3:])
    assert cfg.engine == "ctranslate2" and cfg.model_dir == str(out)


@pytest.mark.parametrize(
    "value",
    ["deploy/de-en", "/tmp/a_b.c/-x", "-x", "42", "1e3", "inf", "True", "null", "a b", AWKWARD],
)
def test_an_override_is_quoted_only_where_hydra_or_the_shell_needs_it(value):
    """The word reads back as exactly ``value`` (shell, then Hydra); a plain path unquoted."""
    word = override_word("model_dir", value)
    [pasted] = shlex.split(word)
    cfg = compose_config("translate", ["engine=ctranslate2", pasted])
    assert cfg.model_dir == value and isinstance(cfg.model_dir, str)
    if re.fullmatch(r"[\w/.-]+", value) and value.count("/"):
        assert word == f"model_dir={value}"


# ------------------------------------------------------------------- signals


# The export run as a user runs it, held just before its last step (renaming the complete
# partial folder to the output) by an audit hook that waits there: the signal then always lands
# mid-export, however slow or loaded the machine, with no sleep racing the export.
HELD_EXPORT = """
import os, runpy, sys, time
def hold(event, args):
    if event == "os.rename" and ".partial-" in os.path.basename(os.fsdecode(args[0])):
        time.sleep(600)
sys.addaudithook(hold)
sys.argv[0] = "translate.export"
runpy.run_module("translate.export", run_name="__main__", alter_sys=True)
"""


def held_export(checkpoint: Path, output: Path) -> tuple[subprocess.Popen, Path]:
    """An export to ``output`` held mid-write, once its partial folder is complete."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    args = [f"checkpoint={checkpoint}", f"output={hydra_quoted(str(output))}"]
    proc = subprocess.Popen(
        [sys.executable, "-c", HELD_EXPORT, *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    partial = output.parent / f".{output.name}.partial-{proc.pid}"
    deadline = time.monotonic() + 180
    while not (partial / MANIFEST).exists():  # the last file written before the rename
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the export never reached its rename"
        time.sleep(0.1)
    return proc, partial


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_export_removes_its_partial_folder_and_says_so(checkpoint, tmp_path, sig):
    out = tmp_path / AWKWARD
    proc, partial = held_export(checkpoint, out)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    said = f"error: {sig.name} interrupted the export; nothing was written to {out}"
    assert errors == [said], stderr
    assert "Traceback" not in stderr + stdout
    assert listing(tmp_path) == []  # neither the output nor the partial folder


def test_a_killed_export_s_partial_folder_goes_with_the_next_export(checkpoint, tmp_path):
    out = tmp_path / AWKWARD
    proc, stale = held_export(checkpoint, out)
    proc.kill()
    proc.wait(timeout=60)
    live = out.parent / f".{out.name}.partial-1"  # pid 1 always runs: a live export's folder
    live.mkdir()
    assert stale.is_dir()  # what SIGKILL leaves: nothing can remove it but a later export
    assert export_checkpoint(checkpoint, out, "float32", None) == out
    assert listing(tmp_path) == sorted([out.name, live.name])
