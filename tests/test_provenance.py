"""What every result records of what produced it (``translate.runtime.provenance``): the
commit of the package's own checkout (none for an installed copy), the package and torch
versions, torch's CPU kernels, the CPU, threads, device and command line; in results.json,
evaluate's scores.json and the benchmarks' machine section."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SHORT_DECODE, compose_config

from translate.checkpoint import load_checkpoint
from translate.errors import UserError
from translate.runtime.provenance import git_state, machine, provenance

CPU = torch.device("cpu")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    """A git checkout whose package folder tracks a runtime/provenance.py, as an editable
    install's."""
    package = tmp_path / "checkout" / "translate"
    (package / "runtime").mkdir(parents=True)
    (package / "runtime" / "provenance.py").write_text("x = 1\n")
    _git(package, "init", "-q")
    _git(package, "add", ".")
    _git(package, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    return package


@needs_git
def test_the_commit_is_the_checkouts_and_dirty_means_changed_tracked_files(checkout):
    uncached = git_state.__wrapped__
    head = _git(checkout, "rev-parse", "HEAD")
    assert uncached(checkout) == (head, False)
    (checkout / "notes.txt").write_text("untracked\n")
    assert uncached(checkout) == (head, False)
    (checkout / "runtime" / "provenance.py").write_text("x = 2\n")
    assert uncached(checkout) == (head, True)


@needs_git
def test_an_installed_copy_has_no_commit_even_inside_a_checkout(checkout, tmp_path):
    """site-packages in a virtual environment inside a repository: git finds the repository,
    but its HEAD is not the code that runs."""
    installed = checkout / ".venv" / "lib" / "site-packages" / "translate"
    (installed / "runtime").mkdir(parents=True)
    (installed / "runtime" / "provenance.py").write_text("x = 1\n")
    assert git_state.__wrapped__(installed) == (None, None)
    elsewhere = tmp_path / "site-packages" / "translate"
    elsewhere.mkdir(parents=True)
    assert git_state.__wrapped__(elsewhere) == (None, None)


def test_provenance_names_code_torch_cpu_threads_device_and_command(monkeypatch):
    argv = ["/x/translate/train.py", "experiment=quickstart", "heads=4"]
    monkeypatch.setattr(sys, "argv", argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        p = provenance(CPU)
    finally:
        torch.set_num_threads(threads)
    assert p["threads"] == 1 and p["argv"] == argv and p["device"] == "cpu"
    assert p["torch"] == torch.__version__
    assert p["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    shown = torch.__config__.show()
    assert p["blas"] is None or f"BLAS_INFO={p['blas']}" in shown
    assert p["math_libraries"] and all(line in shown for line in p["math_libraries"])
    assert p["package_version"] == importlib.metadata.version("translate")
    assert p["cpu_model"] and p["device_name"].startswith(p["cpu_model"])
    if (ROOT / ".git").exists():  # run from this checkout (an editable install)
        assert re.fullmatch("[0-9a-f]{40}", p["git_commit"]) and p["git_dirty"] in (True, False)
    json.dumps(p)  # every value is plain JSON


def test_the_benchmarks_machine_section_carries_the_provenance():
    assert set(provenance(CPU)) <= set(machine(CPU))


def test_results_json_and_scores_json_record_it(trained_run, tmp_path):
    run, results = trained_run
    written = json.loads((run / "results.json").read_text())["provenance"]
    assert written == results["provenance"] and written["argv"] == sys.argv
    assert (written["git_commit"], written["git_dirty"]) == git_state()
    assert written["device"] == "cpu" and written["threads"] >= 1
    overrides = [f"checkpoint={results['checkpoint']}", f"output_dir={tmp_path}", *SHORT_DECODE]
    from translate.evaluate import evaluate

    evaluate(compose_config("evaluate", overrides))
    scores = json.loads((tmp_path / "scores.json").read_text())["provenance"]
    assert set(scores) == set(written) and scores["device"] == "cpu"


def test_scores_json_names_the_scored_checkpoint_by_its_bytes(trained_run, tmp_path):
    """Before, scores.json named the checkpoint only by the path given: a file replaced since
    (a run writing best.pt anew, a copy) left nothing to tell which weights were scored."""
    checkpoint = Path(trained_run[1]["checkpoint"])
    overrides = [f"checkpoint={checkpoint}", f"output_dir={tmp_path}", *SHORT_DECODE]
    from translate.evaluate import evaluate

    evaluate(compose_config("evaluate", overrides))
    scored = json.loads((tmp_path / "scores.json").read_text())["scored"]
    digest = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    step = load_checkpoint(checkpoint)["step"]
    assert scored == {"path": str(checkpoint.resolve()), "sha256": digest, "step": step}


def test_a_checkpoint_replaced_while_evaluate_loads_it_is_refused(
    trained_run, tmp_path, monkeypatch
):
    """The hash is of the file loaded: one replaced meanwhile would record other bytes."""
    from translate import evaluate as command

    checkpoint = Path(shutil.copy(trained_run[1]["checkpoint"], tmp_path / "best.pt"))
    real = command.load_engine

    def load_then_replace(*args, **kwargs):
        loaded = real(*args, **kwargs)
        shutil.copy(checkpoint, tmp_path / "new.pt")
        os.replace(tmp_path / "new.pt", checkpoint)  # as training replaces best.pt
        return loaded

    monkeypatch.setattr(command, "load_engine", load_then_replace)
    overrides = [f"checkpoint={checkpoint}", f"output_dir={tmp_path / 'eval'}", *SHORT_DECODE]
    with pytest.raises(UserError, match=re.escape(f"{checkpoint} was replaced while it was")):
        command.evaluate(compose_config("evaluate", overrides))
    assert not (tmp_path / "eval" / "scores.json").exists()


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
@pytest.mark.parametrize("changed", [False, True])
def test_evaluate_says_when_the_test_split_is_not_the_text_the_run_scored(
    trained_run, tmp_path, caplog, changed, engine
):
    """The run's test split read from a copy of its files: the same text is said nothing of;
    one sentence changed since, and the scores cannot be compared with results.json. An
    export carries its checkpoint's fingerprints for this."""
    from translate.data.sources import sample_dir
    from translate.evaluate import evaluate

    data = shutil.copytree(sample_dir(), tmp_path / "data")
    if changed:
        lines = (data / "test.de").read_text(encoding="utf-8").splitlines(keepends=True)
        (data / "test.de").write_text("Ein anderer Satz.\n" + "".join(lines[1:]), "utf-8")
    model = [f"checkpoint={trained_run[1]['checkpoint']}"]
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
        from translate.decoding.ct2_export import export_checkpoint

        exported = export_checkpoint(trained_run[1]["checkpoint"], tmp_path / "m", "float32", None)
        model = ["engine=ctranslate2", f"model_dir={exported}"]
    overrides = [*model, f"output_dir={tmp_path / 'out'}", *SHORT_DECODE]
    with caplog.at_level("WARNING", logger="translate.evaluate"):
        evaluate(compose_config("evaluate", [*overrides, "data=sample", f"data.dir={data}"]))
    said = "is not the text the checkpoint's run scored as its test split" in caplog.text
    assert said == changed
