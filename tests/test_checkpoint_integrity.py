"""A checkpoint damaged inside (bytes overwritten, not cut off) is refused at load with the same
one line a truncated one gets, never loaded into wrong weights or a later unrelated error."""

from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import assert_one_line_error, file_size_limit, run_cli

from translate.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from translate.errors import UserError

WEIGHT = torch.arange(4096, dtype=torch.float32)


def _entry_data(path: Path, suffix: str) -> tuple[int, int]:
    """``(offset, size)`` of the bytes of the zip entry whose name ends with ``suffix``; the
    local header is read from the file, since torch pads its extra field for alignment."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(suffix))
    with path.open("rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.compress_size


@pytest.fixture
def damaged(tmp_path) -> Path:
    """A checkpoint whose one tensor has 8 bytes overwritten in the middle of its data."""
    path = tmp_path / "step_8.pt"
    state = {
        "format_version": FORMAT_VERSION,
        "model": {"w": WEIGHT},
        "config": {},
        "tokenizer": b"model bytes",
        "step": 8,
    }
    save_checkpoint(state, path)
    offset, size = _entry_data(path, "data/0")
    assert size == WEIGHT.numel() * 4  # stored, not compressed: these are the tensor's bytes
    data = bytearray(path.read_bytes())
    data[offset + size // 2 : offset + size // 2 + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    return path


def test_the_damage_goes_unnoticed_by_torch_load(damaged):
    """The control: torch.load reads the damaged tensor without complaint, wrong."""
    loaded = torch.load(damaged, weights_only=True)
    assert not torch.equal(loaded["model"]["w"], WEIGHT)


def test_a_checkpoint_with_overwritten_bytes_is_refused_as_corrupt(damaged):
    with pytest.raises(UserError) as err:
        load_checkpoint(damaged)
    message = str(err.value)
    assert f"checkpoint {damaged} is truncated or corrupt" in message
    assert "use another one" in message and "\n" not in message


@pytest.mark.parametrize(
    "content",
    [b"hello\n", b"", b"\x80\x02]q\x00.", b"PK\x03\x04" + b"\x00" * 200],
    ids=["text", "empty", "a pickle", "a zip header alone"],
)
def test_a_file_that_is_no_zip_archive_is_refused_in_one_line(content, tmp_path):
    """torch.load reads any bytes but a zip as its old pickle format and fails in any way (a
    text file named .pt: KeyError 101, a traceback); every checkpoint torch.save writes is a zip."""
    path = tmp_path / "best.pt"
    path.write_bytes(content)
    with pytest.raises(UserError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert f"checkpoint {path} is truncated or corrupt, or no checkpoint at all" in message
    assert "\n" not in message


def test_evaluate_refuses_a_checkpoint_with_overwritten_bytes(damaged, tmp_path):
    proc = run_cli("translate.evaluate", f"checkpoint={damaged}", f"hydra.run.dir={tmp_path}")
    assert_one_line_error(proc, "truncated or corrupt", str(damaged))


# ---------------------------------------------------------------- crafted fields


def _state(**fields) -> dict:
    state = {
        "format_version": FORMAT_VERSION,
        "model": {"w": WEIGHT},
        "config": {"model": {}},
        "tokenizer": b"model bytes",
        "step": 8,
        "progress": {"step": 8, "last_dev_loss": None},
    }
    return {**state, **fields}


@pytest.mark.parametrize(
    "fields,said",
    [
        ({"step": "abc"}, "its step is 'abc', not an integer"),
        ({"step": True}, "its step is True, not an integer"),
        ({"step": -1}, "its step is -1, not a step count (>= 0)"),
        ({"format_version": "3"}, "its format_version is '3', not an integer"),
        ({"model": [WEIGHT]}, "its model is a list, not a table of weights"),
        ({"model": {"w": 1.5}}, "its model.w is 1.5, not a tensor"),
        ({"config": "x"}, "its config is 'x', not a group of settings"),
        ({"config": {"model": 7}}, "its config.model is 7, not a group of settings"),
        ({"tokenizer": 5}, "its tokenizer is 5, not the bytes of a SentencePiece model"),
        ({"progress": {"step": "abc"}}, "its progress.step is 'abc', not a number"),
        ({"optimizer": [1]}, "its optimizer is a list, not an optimizer state"),
    ],
)
def test_a_crafted_field_is_one_line_at_load(fields, said, tmp_path):
    """Before, a step of 'abc' (or a weight table that is a list, a config that is a string)
    loaded, and the command failed later with a traceback."""
    path = tmp_path / "crafted.pt"
    save_checkpoint(_state(**fields), path)
    with pytest.raises(UserError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert f"{path} is not a usable translate checkpoint: {said}" in message
    assert "use another one" in message and "\n" not in message


def test_a_plain_state_still_loads(tmp_path):
    path = tmp_path / "plain.pt"
    save_checkpoint(_state(), path)
    assert load_checkpoint(path)["step"] == 8


def test_evaluate_refuses_a_checkpoint_whose_step_is_text(trained_run, tmp_path):
    ckpt = torch.load(trained_run[0] / "checkpoints" / "best.pt", weights_only=True)
    crafted = tmp_path / "crafted.pt"
    torch.save({**ckpt, "step": "abc"}, crafted)
    proc = run_cli("translate.evaluate", f"checkpoint={crafted}", f"hydra.run.dir={tmp_path}/e")
    assert_one_line_error(proc, f"{crafted} is not a usable translate checkpoint: its step is")


def test_a_full_disk_says_the_size_a_checkpoint_really_takes(trained_run, tmp_path):
    """Before, the tensors alone: the quick-start's 9.24 MiB checkpoint 'needs about 8.8 MiB'.
    A real run's checkpoint, saved again under a file-size limit it exceeds."""
    saved = trained_run[0] / "checkpoints" / "best.pt"
    target = tmp_path / "step_9.pt"
    code = (
        "import sys, torch; from pathlib import Path\n"
        "from translate.checkpoint import load_checkpoint, save_checkpoint\n"
        "from translate.errors import UserError\n"
        f"state = torch.load({str(saved)!r}, weights_only=True)\n"
        "try:\n"
        f"    save_checkpoint(state, Path({str(target)!r}))\n"
        "except UserError as err:\n"
        "    print(err, file=sys.stderr); sys.exit(2)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=file_size_limit(64 * 1024),
    )
    assert proc.returncode == 2, proc.stderr
    needs = f"a checkpoint needs {saved.stat().st_size / 2**20:,.2f} MiB"
    assert needs in proc.stderr and not target.exists()
