"""``python -m translate.ablation report|speed|align``: the study commands behind one module, each
with its own options (their behaviour: the other tests here)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, assert_plain_help

from translate.ablation.__main__ import main


def run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "translate.ablation", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_help_names_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m translate.ablation {report,speed,align} SWEEP_DIR")
    assert "\n  report " in out and "\n  speed " in out and "`" not in out  # plain text
    assert "\n  align " in out


@pytest.mark.parametrize("argv,says", [([], "no command"), (["plot"], "unknown command 'plot'")])
def test_a_missing_or_unknown_command_is_one_usage_error(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m translate.ablation") and says in err


@pytest.mark.parametrize("command", ["report", "speed", "align"])
def test_each_command_has_its_own_help_and_refuses_a_missing_sweep_dir(command, tmp_path):
    shown = run(command, "--help")
    assert_plain_help(shown)
    assert shown.stdout.startswith(f"usage: python -m translate.ablation {command} [-h]")
    assert "sweep_dir" in shown.stdout
    missing = run(command, str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: ") and len(missing.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", ["report", "speed", "align"])
def test_a_file_as_sweep_dir_is_called_a_file(command, tmp_path):
    """Before: 'sweep dir <file> does not exist'."""
    given = tmp_path / "ablation.md"
    given.write_text("# a report\n")
    proc = run(command, str(given))
    assert proc.returncode == 2
    hint = "give the dir a multirun made, e.g. outputs/multirun/<date_time>"
    assert proc.stderr == f"error: {given} is a file, not a sweep dir: {hint}\n"


def test_speed_refuses_zero_threads_before_any_work(tmp_path):
    """Before, --threads 0 was taken as 'not given' and the timing ran at torch's default."""
    proc = run("speed", str(tmp_path), "--threads", "0")
    assert proc.returncode == 2
    assert proc.stderr == "error: --threads 0 must be >= 1\n"


@pytest.mark.parametrize("option", ["--bootstrap-samples", "--baseline-heads"])
def test_report_refuses_a_count_below_one_before_any_work(option, tmp_path):
    """Before, --bootstrap-samples 0 was numpy's ValueError traceback."""
    proc = run("report", str(tmp_path), option, "0")
    assert proc.returncode == 2
    assert proc.stderr == f"error: {option} 0 must be >= 1\n"
