"""The one rule for every file a command writes (translate.io): a new file, or an earlier
output of the same kind that is unchanged since it was written; never the command's own input,
a file a run keeps, a device or a symbolic link; a named pipe written through; and a write the
system refuses (a full disk, a file-size limit) one line with nothing earlier lost. The failures
are real ones: a real device node, a real symbolic link, a real file-size limit (RLIMIT_FSIZE,
the same EFBIG a full quota gives) on a real writer, torch's zip writer included."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SHORT_DECODE, assert_one_line_error, file_size_limit, run_cli

from translate import io
from translate.checkpoint import save_checkpoint
from translate.errors import UserError
from translate.io import MARKS, check_output_file, check_output_folder, make_folder


def _translate(ckpt: Path, *args: str, **kwargs):
    return run_cli("translate.translate", f"checkpoint={ckpt}", *SHORT_DECODE, *args, **kwargs)


def _run_limited(limit: int, *argv: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "TRANSLATE_DEBUG")}
    return subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=file_size_limit(limit),
        timeout=300,
        text=True,
    )


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "in.de"
    path.write_text("Ein Hund läuft.\nZwei Männer.\n", encoding="utf-8")
    return path


# -- never the command's own input, never a run's record --------------------------------------


def test_translate_refuses_to_write_over_its_own_input(trained_run, source):
    before = source.read_bytes()
    proc = _translate(trained_run[1]["checkpoint"], f"input={source}", f"output={source}")
    assert_one_line_error(proc, f"output={source} is also this command's input")
    assert source.read_bytes() == before


def test_translate_refuses_to_write_over_the_file_standard_input_reads(trained_run, source):
    """`translate output=t.en < t.en` (before: exit 0, the text replaced by its translation)."""
    text = source.with_name("earlier.en")
    io.write(text, source.read_bytes(), "translation")  # even an earlier translation
    before = text.read_bytes()
    ckpt = trained_run[1]["checkpoint"]
    command = ["-m", "translate.translate", f"checkpoint={ckpt}", *SHORT_DECODE, f"output={text}"]
    with open(text, "rb") as stdin:
        proc = subprocess.run(
            [sys.executable, *command], cwd=ROOT, stdin=stdin, capture_output=True, text=True
        )
    assert_one_line_error(proc, f"output={text} is also this command's input (/dev/stdin)")
    assert text.read_bytes() == before


def test_translate_refuses_a_hard_link_to_its_own_input(trained_run, source, tmp_path):
    link = tmp_path / "link.txt"
    os.link(source, link)
    before = source.read_bytes()
    proc = _translate(trained_run[1]["checkpoint"], f"input={source}", f"output={link}")
    assert_one_line_error(proc, "is also this command's input")
    assert source.read_bytes() == before and os.path.samefile(source, link)


def _other_checkpoint(run: Path, ckpt: str) -> Path:
    """A step checkpoint of ``run`` that is not ``ckpt`` (which is the command's input)."""
    steps = sorted((run / "checkpoints").glob("step_*.pt"))
    return next(p for p in steps if not os.path.samefile(p, ckpt))


@pytest.mark.parametrize("name", ["checkpoint", "results.json", ".hydra/config.yaml"])
def test_translate_never_replaces_a_file_of_a_run(trained_run, source, tmp_path, name):
    run, results = trained_run
    target = _other_checkpoint(run, results["checkpoint"]) if name == "checkpoint" else run / name
    if not target.exists():  # the in-process fixture has no Hydra record of its own: a copy
        run = Path(shutil.copytree(run, tmp_path / "run"))  # gets one, the shared run is read
        target = run / name
        target.parent.mkdir(exist_ok=True)
        target.write_text("model: {}\n")
    before = target.read_bytes()
    proc = _translate(results["checkpoint"], f"input={source}", f"output={target}")
    assert_one_line_error(proc, f"output={target} is", "nothing was written", "pass another")
    assert target.read_bytes() == before


def test_a_checkpoint_outside_any_run_is_not_replaced_either(trained_run, tmp_path):
    copy = tmp_path / "model.bin.bak"  # a checkpoint under a name that does not say so
    copy.write_bytes(Path(trained_run[1]["checkpoint"]).read_bytes())
    with pytest.raises(UserError, match="a checkpoint"):
        check_output_file(copy, "output", "translation")


def test_an_earlier_translation_is_replaced_a_file_translate_did_not_write_is_not(
    trained_run, source, tmp_path
):
    out = tmp_path / "out.en"
    out.write_text("the user's own notes\n")
    proc = _translate(trained_run[1]["checkpoint"], f"input={source}", f"output={out}")
    assert_one_line_error(proc, "a file this command did not write", "pass another output=")
    assert out.read_text() == "the user's own notes\n"
    out.unlink()
    for _ in range(2):  # a new file, then the same command's earlier output
        proc = _translate(trained_run[1]["checkpoint"], f"input={source}", f"output={out}")
        assert proc.returncode == 0, proc.stderr
        assert len(out.read_text().splitlines()) == 2


def test_an_earlier_output_edited_since_or_of_another_kind_is_not_replaced(tmp_path):
    out = tmp_path / "out.json"
    io.write(out, "{}\n", "decode benchmark result")
    with pytest.raises(UserError, match="the decode benchmark result output of an earlier"):
        check_output_file(out, "--json", "attention benchmark result")
    out.write_text('{"edited": true}\n')
    with pytest.raises(UserError, match="changed since it was written"):
        check_output_file(out, "--json", "decode benchmark result")
    assert out.read_text() == '{"edited": true}\n'


def test_a_copy_of_an_earlier_output_is_not_replaced(tmp_path):
    """A mark vouches for the file it was written with, not for one copied over it."""
    out, other = tmp_path / "a" / "out.en", tmp_path / "b" / "out.en"
    io.write(out, "one\n", "translation")
    io.write(other, "two\n", "translation")
    shutil.copyfile(other, out)
    with pytest.raises(UserError, match="changed since it was written"):
        io.write(out, "three\n", "translation")


# -- devices, pipes, links --------------------------------------------------------------------


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symbolic_link_is_refused_and_what_it_points_to_kept(
    trained_run, source, tmp_path, dangling
):
    """This package never makes a link, so a link at an output path is someone else's:
    writing through it would replace a file the command was not given."""
    target, link = tmp_path / "real.en", tmp_path / "link.en"
    if not dangling:
        io.write(target, "old\n", "translation")  # even an earlier translation
    link.symlink_to(target)
    proc = _translate(trained_run[1]["checkpoint"], f"input={source}", f"output={link}")
    assert_one_line_error(proc, f"output={link} is a symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.exists() != dangling and (dangling or target.read_text() == "old\n")


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_a_device_is_refused_in_one_line_and_stays_a_device(trained_run, source, device):
    if not Path(device).exists():
        pytest.skip(f"no {device} on this system")
    proc = _translate(trained_run[1]["checkpoint"], f"input={source}", f"output={device}")
    assert_one_line_error(proc, f"output={device} is a device", "nothing was written")
    assert stat.S_ISCHR(os.stat(device).st_mode)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_stdout_on_a_full_device_is_one_line(trained_run, source):
    ckpt = trained_run[1]["checkpoint"]
    command = [sys.executable, "-m", "translate.translate", f"checkpoint={ckpt}", *SHORT_DECODE]
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [*command, f"input={source}"],
            cwd=ROOT,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("error: ") == 1 and "Traceback" not in proc.stderr
    assert "could not write to standard output: no space left" in proc.stderr


# The attention benchmark's --quick at a tiny model's sizes, one length, one timed round (as the
# GPU check's CPU plumbing run, translate.bench.gpu): a refused write is the same at any size,
# and the default sizes took 25-30 s a run (d_model 512 at L=2048, with a memory subprocess for
# each of its three implementations).
TINY_ATTENTION = ["translate.bench.attention", "--quick", "--d-model", "32", "--heads", "2"]
TINY_ATTENTION += ["--threads", "1", "--lengths", "16", "--tokens", "64", "--repeats", "1"]
TINY_ATTENTION += ["--warmup", "0"]

# Every kind of entry: a Hydra command that prints (data) or logs (average), a benchmark, the
# ablation study's commands (--help: a successful exit too).
FULL_STDOUT_COMMANDS = {
    "data": lambda run, tmp: ["translate.data"],
    "average": lambda run, tmp: [
        "translate.average",
        f"run_dir={run}",
        "n=2",
        f"output={tmp}/a.pt",
    ],
    "bench": lambda run, tmp: TINY_ATTENTION,
    "ablation": lambda run, tmp: ["translate.ablation", "--help"],
}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("command", sorted(FULL_STDOUT_COMMANDS))
def test_every_command_with_stdout_on_a_full_device_says_it_in_one_line(
    trained_run, tmp_path, command
):
    argv = FULL_STDOUT_COMMANDS[command](trained_run[0], tmp_path)
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", *argv],
            cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
        )  # fmt: skip
    proc.stdout = ""  # it went to /dev/full
    assert_one_line_error(proc, "could not write to standard output: no space left on the device")


def test_a_reader_that_stopped_reading_ends_the_command_without_a_word():
    """``python -m translate.train --help | head``: the pipe's reader is gone before the first
    write, as ``head`` is after its lines; the command exits as a SIGPIPE'd tool does."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "translate.ablation", "--help"],
            cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (128 + signal.SIGPIPE, "")


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    output = check_output_file(fifo, "output", "translation")
    assert output.path == fifo and output.through
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    output.write("through\n")
    assert reader.communicate(timeout=60)[0] == b"through\n"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_folder_or_a_missing_folder_is_refused_before_any_work(tmp_path):
    with pytest.raises(UserError, match="is a folder"):
        check_output_file(tmp_path, "output", "translation")
    with pytest.raises(UserError, match="does not exist; create it first"):
        check_output_file(tmp_path / "no" / "out.txt", "output", "translation")


# -- a write the system refuses ---------------------------------------------------------------


def test_a_translation_larger_than_the_file_limit_is_one_line(trained_run, source, tmp_path):
    out = tmp_path / "out.en"
    io.write(out, "earlier\n", "translation")
    code = "from translate.io import check_output_file as c; c({!r}, 'output', 'translation')"
    proc = _run_limited(1024, "-c", code.format(str(out)) + ".write('x' * 4096)")
    assert proc.returncode != 0
    assert "could not write" in proc.stderr and "ulimit -f" in proc.stderr
    assert out.read_text() == "earlier\n"  # the earlier output is still whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKS, "in.de", "out.en"]  # no temp


def test_a_benchmark_refused_its_json_is_one_line(tmp_path):
    """Every ``python -m translate.bench.*`` entry ends a UserError so (run_plain_command)."""
    out = tmp_path / "ba.json"
    proc = _run_limited(1024, "-m", *TINY_ATTENTION, "--json", str(out))  # its JSON: 3 KiB
    assert_one_line_error(proc, f"could not write {out}", "ulimit -f")
    assert not out.exists()


def test_evaluate_refused_its_scores_leaves_a_dir_that_the_rerun_it_asks_for_uses(
    trained_run, source, tmp_path
):
    """Before, hyp.txt stayed without scores.json, and the rerun the message asks for was
    refused: 'already holds the outputs of an earlier evaluate (hyp.txt)'."""
    ref = tmp_path / "ref.en"
    ref.write_text("A dog runs.\nTwo men.\n", encoding="utf-8")
    out = tmp_path / "eval"
    args = [
        "-m", "translate.evaluate", f"checkpoint={trained_run[1]['checkpoint']}", *SHORT_DECODE,
        f"src={source}", f"ref={ref}", f"hydra.run.dir={out}",
    ]  # fmt: skip
    # 1 KiB: the two lines' hyp.txt fits, scores.json (its provenance) does not; no .hydra
    # record, which is larger.
    proc = _run_limited(1024, *args, "hydra.output_subdir=null")
    assert_one_line_error(proc, f"could not write {out / 'scores.json'}", "run the command again")
    assert not (out / "hyp.txt").exists() and not (out / "scores.json").exists()
    again = run_cli(*args[1:])
    assert again.returncode == 0, again.stderr
    assert (out / "hyp.txt").read_text().count("\n") == 2 and (out / "scores.json").is_file()


def test_a_checkpoint_save_that_the_disk_refuses_keeps_the_earlier_one(tmp_path):
    """torch's zip writer turns the write error into a RuntimeError; the line still comes."""
    path = tmp_path / "last.pt"
    save_checkpoint({"w": torch.zeros(10)}, path)
    before = path.read_bytes()
    code = (
        "import sys, torch; from pathlib import Path; "
        "from translate.checkpoint import save_checkpoint; from translate.errors import UserError\n"
        "try:\n"
        f"    save_checkpoint({{'w': torch.zeros(200_000)}}, Path({str(path)!r}))\n"
        "except UserError as err:\n"
        "    print(err, file=sys.stderr); sys.exit(2)\n"
    )
    proc = _run_limited(64 * 1024, "-c", code)
    assert proc.returncode == 2, proc.stderr
    assert f"could not save last.pt in {tmp_path}: a checkpoint needs" in proc.stderr
    assert "(ulimit -f); the checkpoints already there are intact; raise the limit" in proc.stderr
    assert "the checkpoints already there are intact" in proc.stderr
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKS, "last.pt"]  # no temporary


# -- folders: caches, run dirs ---------------------------------------------------------------


def test_a_cache_dir_that_cannot_be_a_folder_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match=f"{blocker} is a file, not a folder"):
        make_folder(blocker / "cache", "data.cache_dir")
    with pytest.raises(UserError, match="cannot create the folder"):
        make_folder("/proc/translate-cache", "data.cache_dir")


def test_train_with_a_file_as_cache_dir_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = tmp_path / "run"
    proc = run_cli(
        "translate.train",
        "experiment=quickstart",
        f"data.cache_dir={blocker}",
        f"hydra.run.dir={run}",
    )
    assert_one_line_error(proc, f"data.cache_dir={blocker}", "is a file, not a folder")


def test_a_run_dir_that_is_a_file_is_one_line_before_hydra_starts(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = run_cli("translate.train", "experiment=quickstart", f"hydra.run.dir={blocker}")
    assert_one_line_error(proc, f"hydra.run.dir={blocker} is a file, not a folder")
    assert blocker.read_text() == "x"


@pytest.fixture
def unwritable(tmp_path):
    """``(folder, why)``: a folder no file can be made in, and the reason a refusal names. As
    root, whom a folder's mode does not stop, a read-only tmpfs mounted there; otherwise a
    folder of mode 0o555. Skipped when neither stops this process's writes."""
    folder = tmp_path / "unwritable"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)]
    root = os.geteuid() == 0 and shutil.which("mount")
    if root and subprocess.run(mount, capture_output=True).returncode == 0:
        assert not os.access(folder, os.W_OK)
        yield folder, "read-only file system"
        subprocess.run(["umount", str(folder)], check=True)
        return
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("no read-only mount, and a folder's mode does not stop this process")
        yield folder, "permission denied"
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("inside", [False, True])
def test_a_run_dir_that_cannot_be_written_is_one_line_before_hydra_starts(unwritable, inside):
    """Before: Hydra's traceback, of its mkdir (a run dir to make in the folder) or of its
    log file (the folder as the run dir)."""
    folder, why = unwritable
    run = folder / "run" if inside else folder
    where = f": {folder}" if inside else ""
    for key, args in [("hydra.run.dir", []), ("hydra.sweep.dir", ["-m", "heads=2,4"])]:
        proc = run_cli("translate.train", *args, "experiment=quickstart", f"{key}={run}")
        assert_one_line_error(
            proc,
            f"{key}={run} cannot be written ({why}{where}); pass a writable folder with "
            f"{key}=<folder>",
        )


def test_the_default_run_dir_under_a_read_only_current_directory_is_one_line(unwritable):
    """The default run and sweep dirs (outputs/... under the current directory), which the
    command line does not name; a command that writes nothing there still runs."""
    folder, why = unwritable
    for key, args in [("hydra.run.dir=outputs/runs/", []), ("hydra.sweep.dir=outputs/", ["-m"])]:
        proc = run_cli("translate.train", *args, "experiment=quickstart", cwd=folder)
        assert_one_line_error(proc, key, f"cannot be written ({why}: {folder}); pass a writable")
    proc = run_cli("translate.data", f"data.cache_dir={folder.parent / 'cache'}", cwd=folder)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_an_output_folder_with_files_is_refused_an_empty_one_used(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "train.tags.de-en.de").write_text("real release\n")
    with pytest.raises(UserError, match="is not empty"):
        check_output_folder(tmp_path / "full", "--out")
    assert not check_output_folder(tmp_path / "new" / "deeper", "--out").exists()  # not yet
    (tmp_path / "empty").mkdir()
    assert check_output_folder(tmp_path / "empty", "--out") == tmp_path / "empty"
