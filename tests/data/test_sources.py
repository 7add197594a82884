"""Reading files: damaged gzip, missing files and folders, blank training text, input lines."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from conftest import data_config

from translate.data import sources
from translate.data.corpus import load_corpus
from translate.data.tokenizer import train_or_load_tokenizer
from translate.errors import UserError
from translate.settings import data_settings

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "tests" / "fixtures" / "text"

GOOD_GZ = gzip.compress(b"Ein Hund spielt.\nZwei Hunde spielen.\n" * 50)
BAD_GZ = {
    "garbage deflate body": GOOD_GZ[:10] + b"\x00garbage" * 20 + GOOD_GZ[-8:],
    "truncated stream": GOOD_GZ[: len(GOOD_GZ) // 2],
    "not gzip at all": b"plain text, not gzip\n",
}


def user_error(fn, *args) -> str:
    with pytest.raises(UserError) as err:
        fn(*args)
    message = str(err.value)
    assert "\n" not in message
    return message


def corpus_folder(tmp_path: Path, **files: bytes) -> Path:
    """The text fixture's train/test files in a new folder, some replaced (``train_de=...``)."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name in ("train.de", "train.en", "test.de", "test.en"):
        key = name.replace(".", "_")
        if key in files:
            (folder / name).write_bytes(files[key])
        else:
            (folder / name).write_bytes((TEXT / name).read_bytes())
    return folder


def load_text_corpus(tmp_path: Path, folder: Path):
    cfg = data_config("multi30k")
    cfg.merge_with_dotlist(
        [
            f"dir={folder}",
            f"cache_dir={tmp_path / 'cache'}",
            "tokenizer.vocab_size=90",
            "splits.valid=null",
            "splits.test=test",
        ]
    )
    return load_corpus(data_settings(cfg))


# ------------------------------------------------------------------ damaged gzip


@pytest.mark.parametrize("kind", list(BAD_GZ))
def test_damaged_gzip_is_one_line_naming_the_file(tmp_path, kind):
    path = tmp_path / "train.de.gz"
    path.write_bytes(BAD_GZ[kind])
    for read in (sources.read_lines, sources.read_input_lines):
        message = user_error(read, path)
        assert message.startswith(f"{path}: not a readable gzip file")
        assert "download or compress it again" in message


def test_damaged_gzip_through_load_corpus(tmp_path):
    folder = corpus_folder(tmp_path)
    (folder / "train.de").unlink()
    (folder / "train.de.gz").write_bytes(BAD_GZ["garbage deflate body"])
    message = user_error(load_text_corpus, tmp_path, folder)
    assert str(folder / "train.de.gz") in message and "gzip" in message


# ------------------------------------------------------------------ missing file, folder


def test_read_lines_on_a_missing_file_or_a_folder(tmp_path):
    missing = tmp_path / "nope.de"
    for read in (sources.read_lines, sources.read_input_lines):
        assert user_error(read, missing) == f"{missing} does not exist; check the path"
        assert user_error(read, tmp_path).startswith(f"{tmp_path} is a folder, not a file")


# ------------------------------------------------------------------ blank training text


def test_whitespace_only_training_files_say_the_split_has_no_text(tmp_path):
    blank = b"  \n\t\n \r\n\n"
    folder = corpus_folder(tmp_path, train_de=blank, train_en=blank)
    message = user_error(load_text_corpus, tmp_path, folder)
    assert "training split 'train'" in message and "has no de text" in message
    assert str(folder / "train.de") in message and "empty or whitespace" in message


def test_one_blank_side_is_named(tmp_path):
    lines = len((TEXT / "train.en").read_bytes().splitlines())
    folder = corpus_folder(tmp_path, train_en=b" \n" * lines)
    message = user_error(load_text_corpus, tmp_path, folder)
    assert "has no en text" in message and str(folder / "train.en") in message


def test_tokenizer_on_blank_text_is_a_user_error(tmp_path):
    def blank():
        return iter(["", "   ", "\t"])

    with pytest.raises(UserError, match="training split has no text") as err:
        train_or_load_tokenizer(
            blank, cache_dir=tmp_path, key_parts={"source": "blank"}, vocab_size=20
        )
    assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())  # nothing cached, nor marked


# ------------------------------------------------------------------ input lines


def test_split_input_lines_splits_on_newline_only():
    text = "a\rb\x0bc\x0cd\x1ce\x1df\x1eg\x85h\u2028i\u2029j\r\n  padded  \n\nlast"
    assert sources.split_input_lines(text) == [
        "a\rb\x0bc\x0cd\x1ce\x1df\x1eg\x85h\u2028i\u2029j",
        "  padded  ",
        "",
        "last",
    ]
    assert sources.split_input_lines("") == []
    assert sources.split_input_lines("one\n") == ["one"]
    assert sources.split_input_lines("one\r\n") == ["one"]
    assert sources.split_input_lines("one\n\n") == ["one", ""]
    assert sources.split_input_lines("\n") == [""]
    assert sources.split_input_lines("one\r") == ["one\r"]  # a lone \r ends no line


def test_read_input_lines_keeps_one_line_per_newline(tmp_path):
    text = "Er sagte:\rHallo.\n\x0cSeite zwei\u2028neue Zeile \r\n  Einzug\n"
    expected = ["Er sagte:\rHallo.", "\x0cSeite zwei\u2028neue Zeile ", "  Einzug"]
    plain, packed = tmp_path / "in.txt", tmp_path / "in.txt.gz"
    plain.write_bytes(b"\xef\xbb\xbf" + text.encode())  # a BOM is not part of the first line
    packed.write_bytes(gzip.compress(text.encode()))
    assert sources.read_input_lines(plain) == expected
    assert sources.read_input_lines(packed) == expected
    assert len(sources.read_lines(plain)) == 4  # corpus files: \r ends a line too
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("ok\nGröße\n".encode("latin-1"))
    assert user_error(sources.read_input_lines, bad).startswith(f"{bad}, line 2: ")


def test_decode_input_names_stdin_and_the_line():
    assert sources.decode_input(b"eins\x0czwei\ndrei\n") == ["eins\x0czwei", "drei"]
    message = user_error(sources.decode_input, b"ok\nstill ok\n\xfcber\n")
    assert message.startswith("stdin, line 3: bytes that are not UTF-8")
    assert "convert the text to UTF-8" in message
    assert user_error(sources.decode_input, b"\xff", "input.txt").startswith("input.txt, line 1")
