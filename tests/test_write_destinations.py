"""Every command's output option against every destination the one door for writes refuses
(translate/io.py): each refusal is one ``error:`` line and a non-zero exit, and the destination
is left exactly as it was. The commands run in this process (Hydra's entry points take a
composed config; the benchmarks and ``ablation speed`` take argv), so the whole matrix costs
seconds: every refusal comes before any model is loaded or timed."""

from __future__ import annotations

import importlib
import os
import stat
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compose_config

from translate import io
from translate.ablation import speed
from translate.average import main as average_main
from translate.bench import attention, decode, train
from translate.errors import UserError
from translate.export import main as export_main
from translate.translate import main as translate_main

sys.path.insert(0, str(ROOT / "scripts"))  # the sample corpus's generator, a script
sample_corpus = importlib.import_module("make_sample_corpus")

FILE_DESTINATIONS = [
    "checkpoint",
    "results.json",
    "tensorboard events",
    "sweep's multirun.yaml",
    "sweep's report",
    "tokenizer cache",
    "another command's output",
    "the command's input",
    "device",
    "folder",
    "symbolic link",
]


@pytest.fixture(scope="module")
def places(trained_run, cache_dir, tmp_path_factory) -> dict[str, Path]:
    """One path of each kind a command must never write over, each already there."""
    run, results = trained_run
    root = tmp_path_factory.mktemp("destinations")
    sweep = root / "sweep"
    io.write(sweep / "multirun.yaml", "hydra: {}\n", "hydra record")
    io.write(sweep / "ablation.csv", "heads,bleu\n", "ablation report")
    io.write(root / "other.txt", "someone's output\n", "evaluation hypotheses")
    (root / "folder").mkdir()
    (root / "link").symlink_to(root / "other.txt")
    (root / "in.de").write_text("Ein Hund.\n", encoding="utf-8")
    return {
        "checkpoint": Path(results["checkpoint"]),
        "results.json": run / "results.json",
        "tensorboard events": next((run / "tensorboard").glob("events.out.tfevents.*")),
        "sweep's multirun.yaml": sweep / "multirun.yaml",
        "sweep's report": sweep / "ablation.csv",
        "tokenizer cache": next(cache_dir.glob("spm-*.model")),
        "another command's output": root / "other.txt",
        "device": Path("/dev/full"),
        "folder": root / "folder",
        "symbolic link": root / "link",
        "input": root / "in.de",
        "sweep": sweep,
    }


def _state(path: Path):
    """What must not change: a link and its target, a file's bytes and inode, a folder's
    names, a device's type."""
    if path.is_symlink():
        return ("link", os.readlink(path), _state(path.resolve()))
    if path.is_dir():
        return ("folder", sorted(p.name for p in path.iterdir()))
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        return ("special", stat.S_IFMT(info.st_mode))
    return ("file", info.st_ino, path.read_bytes())


def _run(command, capsys) -> tuple[int, str]:
    """Exit status and stderr of an in-process command (argparse and ``fail`` exit)."""
    status = 0
    try:
        status = command() or 0
    except SystemExit as stop:
        status = stop.code
    return status, capsys.readouterr().err


def _commands(places: dict[str, Path], steps: list[Path]):
    """Each command's output option, as ``name -> (run(dest), its input or None)``."""
    src, ckpt = places["input"], places["checkpoint"]
    translate = ["decode=greedy", "decode.max_len_a=0", "decode.max_len_b=4"]
    return {
        "translate output=": (
            lambda dest: translate_main(
                compose_config(
                    "translate",
                    [f"checkpoint={ckpt}", f"input={src}", f"output={dest}", *translate],
                )
            ),
            src,
        ),
        "average output=": (
            lambda dest: average_main(
                compose_config(
                    "average", [f"checkpoints=[{steps[0]},{steps[1]}]", f"output={dest}"]
                )
            ),
            steps[0],
        ),
        "bench.attention --json": (lambda d: attention.main(["--quick", "--json", str(d)]), None),
        "bench.decode --json": (lambda d: decode.main(["--quick", "--json", str(d)]), None),
        "bench.train --json": (lambda d: train.main(["--quick", "--json", str(d)]), None),
        "ablation speed --json": (
            lambda d: speed.main(
                [str(places["sweep"]), "--json", str(d), "--no-ct2", "--system-malloc"]
            ),
            None,
        ),
    }


@pytest.mark.parametrize("destination", FILE_DESTINATIONS)
def test_no_output_option_writes_over_what_is_not_its_own(trained_run, places, destination, capsys):
    if destination == "device" and not places["device"].exists():
        pytest.skip("no /dev/full on this system")
    steps = sorted((trained_run[0] / "checkpoints").glob("step_*.pt"))
    for name, (command, its_input) in _commands(places, steps).items():
        if destination == "the command's input":
            if its_input is None:
                continue
            dest = its_input
        else:
            dest = places[destination]
        before = _state(dest)
        status, err = _run(lambda: command(dest), capsys)  # noqa: B023
        errors = [line for line in err.splitlines() if "error:" in line]
        assert status == 2 and len(errors) == 1, f"{name} onto the {destination}: {err}"
        assert str(dest) in errors[0] and "Traceback" not in err, f"{name}: {errors[0]}"
        assert _state(dest) == before, f"{name} changed the {destination}"


@pytest.mark.parametrize("destination", ["run dir", "a file", "device"])
def test_export_never_writes_into_or_over_what_is_there(trained_run, places, destination, capsys):
    dest = {
        "run dir": trained_run[0],
        "a file": places["results.json"],
        "device": Path("/dev/full"),
    }
    dest = dest[destination]
    before = _state(dest)
    config = compose_config("export", [f"checkpoint={places['checkpoint']}", f"output={dest}"])
    status, err = _run(lambda: export_main(config), capsys)
    assert status == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert _state(dest) == before


@pytest.mark.parametrize("target", ["an empty folder", "nothing"])
def test_a_symbolic_link_as_an_output_folder_is_one_line(tmp_path, target, capsys):
    """A link as export's output=, sample_corpus --out or a cache dir (before: 'cannot write
    output=link (Not a directory)', a FileExistsError traceback, 'cannot create the folder
    (File exists)'): one line that says it is a link; nothing is written through it."""
    link, pointed = tmp_path / "link", tmp_path / "pointed"
    if target == "an empty folder":
        pointed.mkdir()
    link.symlink_to(pointed)
    with pytest.raises(UserError, match=f"--out={link} is a symbolic link"):
        io.check_output_folder(link, "--out")
    if target == "nothing":
        with pytest.raises(UserError, match=f"data.cache_dir={link} is a symbolic link to"):
            io.make_folder(link, "data.cache_dir")
    status, err = _run(lambda: sample_corpus.main(["--out", str(link), "--train", "2"]), capsys)
    assert status == 2 and err.count("error:") == 1 and "symbolic link" in err, err
    assert link.is_symlink() and (not pointed.exists() or not any(pointed.iterdir()))
