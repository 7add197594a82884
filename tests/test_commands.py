"""`translate` and `evaluate` with bad files and input: one line, exit 2, nothing half-written;
and one output line per input line, the same for stdin and files."""

from __future__ import annotations

import pytest
from conftest import SHORT_DECODE, assert_one_line_error, listing, run_cli


@pytest.fixture
def ckpt(trained_run) -> str:
    return trained_run[1]["checkpoint"]


def translate(ckpt: str, *args: str, stdin: str | bytes | None = None):
    return run_cli("translate.translate", f"checkpoint={ckpt}", "decode=greedy", *SHORT_DECODE,
                   *args, stdin=stdin)  # fmt: skip


def test_stdin_and_input_file_split_lines_alike(ckpt, tmp_path):
    # \r, form feed and U+2028 inside a line do not end it; only \n (and \r\n) do.
    text = "Der Hund.\r\nDie Katze\x0cschläft.\n\nEin Haus\u2028brennt.\rJa\n"
    source = tmp_path / "in.de"
    source.write_text(text, encoding="utf-8", newline="")
    from_stdin = translate(ckpt, stdin=text)
    from_file = translate(ckpt, f"input={source}")
    assert from_stdin.returncode == from_file.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout == from_file.stdout
    assert from_stdin.stdout.count("\n") == text.count("\n") == 4
    assert from_stdin.stdout.split("\n")[2] == ""


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_translate_with_a_bad_input_is_one_line(ckpt, tmp_path, kind):
    source = tmp_path / "in.de"
    if kind == "folder":
        source.mkdir()
    proc = translate(ckpt, f"input={source}")
    assert_one_line_error(proc, "does not exist" if kind == "missing" else "is a folder")


def test_an_output_in_a_missing_folder_fails_before_decoding(ckpt, tmp_path):
    target = tmp_path / "nope" / "out.en"
    proc = translate(ckpt, f"output={target}", stdin="Der Hund.\n")
    assert_one_line_error(proc, "output=", "does not exist")
    assert not target.parent.exists()


def test_the_output_file_is_written_whole(ckpt, tmp_path):
    target = tmp_path / "out.en"
    proc = translate(ckpt, f"output={target}", stdin="Der Hund.\n\nDie Katze.\n")
    assert proc.returncode == 0 and proc.stdout == ""
    assert target.read_text(encoding="utf-8").count("\n") == 3
    assert listing(tmp_path) == ["out.en"]  # no temporary file left


def test_non_utf8_stdin_names_the_line(ckpt):
    proc = translate(ckpt, stdin="Gr\u00fc\u00dfe\nK\u00e4se\n".encode("latin-1"))
    assert_one_line_error(proc, "stdin, line 1", "not UTF-8")


def test_fp16_on_the_cpu_names_the_commands_own_key(ckpt):
    proc = translate(ckpt, "runtime.device=cpu", "runtime.precision=fp16", stdin="Hallo\n")
    assert_one_line_error(proc, "runtime.precision=fp16 needs a CUDA GPU", "runtime.precision=bf16")
    assert "trainer." not in proc.stderr


@pytest.mark.parametrize("case", ["missing_ref", "empty"])
def test_evaluate_with_bad_src_or_ref_is_one_line(ckpt, tmp_path, case):
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text("" if case == "empty" else "Der Hund.\n", encoding="utf-8")
    if case == "empty":
        ref.write_text("", encoding="utf-8")
    proc = run_cli("translate.evaluate", f"checkpoint={ckpt}", f"src={src}", f"ref={ref}",
                   f"hydra.run.dir={tmp_path / 'eval'}")  # fmt: skip
    assert_one_line_error(proc, "does not exist" if case == "missing_ref" else "has no lines")


@pytest.mark.parametrize(
    "command,key,said",
    [
        ("translate.train", "head=8", "unknown key head (heads?); train takes analysis, data,"),
        ("translate.serve", "chekpoint=x", "unknown key chekpoint (checkpoint?); serve takes"),
        ("translate.translate", "src=x", "unknown key src; translate takes checkpoint, decode,"),
    ],
)
def test_an_unknown_key_names_the_keys_the_command_takes(tmp_path, command, key, said):
    """Before: Hydra's `To append to your config use +head=8`, which was then refused too."""
    proc = run_cli(command, key, f"hydra.run.dir={tmp_path / 'out'}")
    assert_one_line_error(proc, said, f"(conf/{command.split('.')[1]}.yaml)")
    assert "+" not in proc.stderr


@pytest.mark.parametrize(
    "key,said",
    [("head=1,2", "unknown key head (heads?)"), ("+head=1,2", "train does not use +head=1,2")],
)
def test_a_sweep_with_an_unknown_key_is_refused_before_its_sweep_dir_is_made(tmp_path, key, said):
    """Before, Hydra made the sweep dir (its multirun.yaml; with +head, a job dir each and an
    empty report), then refused every job."""
    sweep = tmp_path / "sweep"
    proc = run_cli("translate.train", "-m", key, f"hydra.sweep.dir={sweep}")
    assert_one_line_error(proc, said)
    assert not sweep.exists()


@pytest.mark.parametrize("command", ["translate.evaluate", "translate.analyze"])
def test_a_bad_value_names_the_key_as_typed(tmp_path, command):
    """Before: `command.keep_freed_memory='maybe' ...`, a key no command line has."""
    proc = run_cli(command, "checkpoint=x.pt", "runtime.keep_freed_memory=maybe",
                   f"hydra.run.dir={tmp_path / 'out'}")  # fmt: skip
    assert_one_line_error(proc, "runtime.keep_freed_memory='maybe' must be true or false")
    assert "command." not in proc.stderr


@pytest.mark.parametrize(
    "command,keys",
    [
        ("translate.evaluate", ["+model=transformer", "model.d_model=64"]),
        ("translate.translate", ["+data=sample"]),
        ("translate.analyze", ["+beam=5"]),
    ],
)
def test_keys_a_command_does_not_use_are_refused(ckpt, tmp_path, command, keys):
    """Before, they were accepted with exit 0 and ignored (Hydra's help suggests +key=)."""
    proc = run_cli(command, f"checkpoint={ckpt}", *keys, f"hydra.run.dir={tmp_path / 'out'}",
                   stdin="Hallo\n")  # fmt: skip
    name = command.split(".")[1]
    assert_one_line_error(proc, f"{name} does not use {' '.join(keys)}", "checkpoint")
    assert not (tmp_path / "out" / "hyp.txt").exists()


@pytest.mark.parametrize("command", ["translate.evaluate", "translate.analyze"])
def test_a_data_key_without_data_is_one_line(tmp_path, command):
    """Before: Hydra's 6-line "Could not override 'data.dir'" report and exit 1."""
    proc = run_cli(command, "checkpoint=x.pt", "data.dir=y", f"hydra.run.dir={tmp_path / 'out'}")
    assert_one_line_error(proc, "data.dir= sets a key of the data group", "add data=<name>")


def test_evaluate_with_another_data_config_names_the_cap_it_cuts_at(ckpt, tmp_path):
    """data=jsonl caps sources at its own data.eval_max_len (256), not the run's (64): the
    warning says so, where it called 255 "the model's maximum source length"."""
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text(" ".join(["Hund"] * 400) + "\n", encoding="utf-8")
    ref.write_text("Dog.\n", encoding="utf-8")
    proc = run_cli("translate.evaluate", f"checkpoint={ckpt}", f"src={src}", f"ref={ref}",
                   "data=jsonl", "data.dir=tests/fixtures/jsonl", *SHORT_DECODE,
                   f"hydra.run.dir={tmp_path / 'eval'}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warning = next(line for line in proc.stderr.splitlines() if "truncated" in line)
    assert "truncated to the first 255 (data.eval_max_len=256 of this command's data" in warning
    assert "evaluated with 64" in warning and "maximum source length" not in warning
