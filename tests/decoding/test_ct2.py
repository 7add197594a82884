"""Export to CTranslate2 and decode with it (``translate.export``, ``engine=ctranslate2``).

Tiny models trained for 120 updates (so they say something other than noise) in each
architecture CTranslate2 must reproduce: pre-norm ReLU, post-norm GELU, grouped-query and
multi-query attention. Their exports must score reference targets as our model does and give
our greedy and beam (length penalty 0) hypotheses on the dev split; the commands' engine switch
must give our engine's output. Compared with our own engine, never with stored numbers.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (
    ROOT,
    TINY,
    assert_one_line_error,
    built_once,
    compose_config,
    listing,
    run_cli,
)
from torch import nn

from translate.data.batching import collate
from translate.data.corpus import load_raw_split
from translate.data.tokenizer import Tokenizer
from translate.decoding.ct2 import load_exported, output_limit
from translate.decoding.ct2_export import export_checkpoint
from translate.decoding.engine import TorchEngine
from translate.decoding.engine_switch import ENGINES
from translate.decoding.translator import Loaded, Translator, load_translator
from translate.errors import UserError
from translate.schema import DecodeSettings
from translate.schema.commands import ENGINE_SOURCES, EngineCommand
from translate.settings import command_settings, decode_settings

# Our modules import ctranslate2 only when they export or decode with it.
pytest.importorskip("ctranslate2")

VARIANTS = {
    "pre-norm relu": [],
    "post-norm gelu": ["model.norm_first=false", "model.activation=gelu"],
    "grouped-query": ["heads=4", "kv_heads=2"],
    "multi-query": ["heads=4", "kv_heads=1"],
}
# Enough updates and width for hypotheses that differ by source, some ending with EOS and some
# at the length limit; short limits keep every decode quick.
TRAIN = [
    *TINY,
    "model.d_model=64",
    "model.d_ff=128",
    "optim.lr=3e-3",
    "optim.warmup_steps=20",
    "trainer.max_steps=120",
    "trainer.val_every_n_steps=120",
    "decode.max_len_a=1.0",
    "decode.max_len_b=5",
]


@dataclasses.dataclass
class Run:
    checkpoint: str
    exported: Path
    ours: Loaded  # our engine on the checkpoint
    theirs: Loaded  # CTranslate2 on its float32 export
    decode: DecodeSettings  # the checkpoint's
    src: list[list[int]]  # dev sources and references, token ids
    tgt: list[list[int]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    """``runs(variant)``: that variant trained and exported once per module (and once for all
    the xdist workers: conftest.built_once), loaded once per module."""
    from translate.train import train

    made: dict[str, Run] = {}

    def build(variant: str, folder: Path) -> None:
        overrides = [*TRAIN, f"run_dir={folder / 'run'}", f"data.cache_dir={cache_dir}"]
        checkpoint = train(compose_config("train", overrides + VARIANTS[variant]))["checkpoint"]
        export_checkpoint(checkpoint, folder / "float32", "float32", None)

    def get(variant: str) -> Run:
        if variant not in made:
            name = "ct2-" + variant.replace(" ", "-")
            folder = built_once(tmp_path_factory, name, lambda f: build(variant, f))
            checkpoint = json.loads((folder / "run" / "results.json").read_text())["checkpoint"]
            exported = folder / "float32"
            ours = load_translator(checkpoint, "cpu", "32")
            _, sources, references = load_raw_split(ours.data, "valid")
            tokenize = ours.tokenizer.encode
            src, tgt = tokenize(sources), tokenize(references)
            theirs, decode = load_exported(exported, "cpu"), ours.translator.decode
            made[variant] = Run(checkpoint, exported, ours, theirs, decode, src, tgt)
        return made[variant]

    return get


@pytest.fixture(params=list(VARIANTS))
def run(request, runs) -> Run:
    return runs(request.param)


def our_log_probs(loaded: Loaded, src: list[list[int]], tgt: list[list[int]]) -> list[np.ndarray]:
    """Teacher-forced log-probabilities of each target token and the EOS, from our model."""
    batch = collate([(i, s, t) for i, (s, t) in enumerate(zip(src, tgt))])
    with torch.no_grad():
        logits = loaded.model(batch.src, batch.tgt_in, batch.src_padding_mask)  # (B, T, V)
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    picked = lprobs.gather(2, batch.tgt_out.unsqueeze(2)).squeeze(2)  # (B, T)
    return [picked[row, : len(t) + 1].numpy() for row, t in enumerate(tgt)]


def ct2_log_probs(loaded: Loaded, src: list[list[int]], tgt: list[list[int]]):
    """The same from an exported model: CTranslate2's ``score_batch`` (EOS included)."""
    engine = loaded.translator.engine
    pieces = [[engine.pieces[i] for i in ids] for ids in (*src, *tgt)]
    results = engine.translator.score_batch(pieces[: len(src)], pieces[len(src) :])
    return [np.array(r.log_probs) for r in results]


class Blocked(nn.Module):
    """Our model with PAD and BOS taken out before the softmax, where CTranslate2 takes them
    out; our search takes them out after it (translate.decoding.ct2 explains the difference)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def encode(self, src, src_padding_mask=None):
        return self.model.encode(src, src_padding_mask)

    def new_cache(self):
        return self.model.new_cache()

    def decode(self, tgt, memory, memory_padding_mask=None, cache=None):
        logits = self.model.decode(tgt, memory, memory_padding_mask, cache=cache)
        logits[..., [Tokenizer.PAD, Tokenizer.BOS]] = float("-inf")
        return logits


def decode_with(run: Run, ours: Translator, **changes):
    """``ours`` and CTranslate2's hypotheses of the dev sources, the run's decode + changes."""
    decode = dataclasses.replace(run.decode, **changes)
    out = []
    for translator in (ours, run.theirs.translator):
        translator.decode = decode
        out.append(translator.translate_ids(run.src))
    return out[0], out[1]


def test_exported_model_scores_targets_as_ours(run):
    ours = our_log_probs(run.ours, run.src, run.tgt)
    theirs = ct2_log_probs(run.theirs, run.src, run.tgt)
    assert [len(t) for t in theirs] == [len(t) for t in ours]
    assert max(np.abs(a - b).max() for a, b in zip(ours, theirs)) < 1e-4


def test_greedy_hypotheses_are_ours(run):
    ours, theirs = decode_with(run, run.ours.translator, beam_size=1)
    assert theirs == ours
    # The model says different things, and some hypotheses end with EOS, some at the limit.
    assert len({tuple(h) for h in ours}) > 1
    limits = [output_limit(len(ids) + 1, run.decode) for ids in run.src]
    assert {len(h) < n for h, n in zip(ours, limits)} == {True, False}


def test_beam_hypotheses_without_length_penalty_are_ours(run):
    t = run.ours.translator
    engine = TorchEngine(Blocked(t.model), t.device, "32")
    blocked = Translator(engine, t.tokenizer, t.decode, t.max_tokens, t.max_src_len)
    ours, theirs = decode_with(run, blocked, beam_size=4, length_penalty=0.0)
    assert theirs == ours


def test_int8_scores_targets_close_to_float32(runs, tmp_path):
    """int8 weights change each per-token log-probability only slightly.

    The usual check, int8 BLEU within 0.5 of float32, says nothing here: a model this small and
    briefly trained scores about 0 BLEU in both. What int8 must keep is the model's function:
    each reference token's log-probability moves by a few hundredths of a nat on average, where
    a misplaced scale or an unquantized tied projection would move it by whole nats.
    """
    run = runs("pre-norm relu")
    int8 = load_exported(export_checkpoint(run.checkpoint, tmp_path / "int8", "int8", None), "cpu")
    assert int8.translator.precision.startswith("int8")
    exact = np.concatenate(ct2_log_probs(run.theirs, run.src, run.tgt))
    quantized = np.concatenate(ct2_log_probs(int8, run.src, run.tgt))
    assert np.abs(quantized - exact).mean() < 0.05
    assert abs(quantized.mean() - exact.mean()) < 0.01 * abs(exact.mean())


def test_outputs_stop_at_the_exported_positions(runs, capsys):
    """Outputs longer than the position table stop at its last row (CTranslate2 fails past
    it), and loading says so once when the decode settings allow them."""
    run = runs("pre-norm relu")
    loaded = load_exported(run.exported, "cpu", dataclasses.replace(run.decode, max_len_a=8.0))
    assert "max_positions=" in capsys.readouterr().err
    loaded.translator.engine.max_positions = 12  # as if the table had 12 rows
    assert max(map(len, loaded.translator.translate_ids(run.src))) == 12


def test_every_engine_name_has_a_loader():
    assert set(ENGINES) == set(ENGINE_SOURCES)


@pytest.mark.parametrize(
    "args, message",
    [
        (["engine=ctranslate2"], "pass model_dir="),
        (["model_dir=m"], "model_dir= is for engine=ctranslate2; add engine=ctranslate2"),
        (
            ["engine=ctranslate2", "model_dir=m", "checkpoint=c.pt"],
            "checkpoint= is for engine=torch",
        ),
        (
            ["engine=ctranslate2", "model_dir=m", "runtime.precision=bf16"],
            "runtime.precision=bf16 is for engine=torch",
        ),
        (["engine=onnx", "checkpoint=c.pt"], "engine=onnx is unknown"),
    ],
)
def test_engine_switch_mistakes_are_one_line(args, message):
    with pytest.raises(UserError) as err:
        command_settings(EngineCommand, compose_config("translate", args))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_export_refuses_what_it_would_overwrite_or_cut(runs, tmp_path):
    run = runs("pre-norm relu")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="is not empty"):
        export_checkpoint(run.checkpoint, taken, "float32", None)
    assert listing(tmp_path) == ["taken"]  # nothing else written
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]
    cap = run.theirs.data.eval_cap
    with pytest.raises(UserError, match=f"max_positions={cap} or more"):
        export_checkpoint(run.checkpoint, tmp_path / "short", "float32", cap - 1)


def test_export_makes_the_folders_above_its_output(runs, tmp_path):
    """The README's Deploy block exports to deploy/de-en in a fresh checkout, where deploy/
    does not exist yet (before: 'the folder deploy does not exist; create it')."""
    checkpoint = runs("pre-norm relu").checkpoint
    out = export_checkpoint(checkpoint, tmp_path / "deploy" / "de-en", "float32", None)
    assert out == tmp_path / "deploy" / "de-en" and (out / "model.bin").is_file()
    assert listing(tmp_path / "deploy") == ["de-en"]


def test_commands_with_ctranslate2_give_our_hypotheses(runs, tmp_path):
    run = runs("pre-norm relu")
    model_dir = tmp_path / "model"
    export = run_cli("translate.export", f"checkpoint={run.checkpoint}", f"output={model_dir}")
    assert export.returncode == 0, export.stderr
    assert {"model.bin", "sentencepiece.model", "translate.json"} <= {
        p.name for p in model_dir.iterdir()
    }
    short = ["decode=greedy", "decode.max_len_a=1.0", "decode.max_len_b=5"]
    ours = run.ours.translator
    ours.decode = decode_settings(compose_config("translate", short).decode)
    _, sources, _ = load_raw_split(run.ours.data, "test")
    lines = sources[:30]
    translated = run_cli(
        "translate.translate", "engine=ctranslate2", f"model_dir={model_dir}", *short,
        stdin="".join(line + "\n" for line in lines),
    )  # fmt: skip
    assert translated.returncode == 0, translated.stderr
    assert translated.stdout.splitlines() == ours.translate(lines)
    out = tmp_path / "eval"
    evaluated = run_cli(
        "translate.evaluate", "engine=ctranslate2", f"model_dir={model_dir}", *short,
        f"hydra.run.dir={out}",
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    assert (out / "hyp.txt").read_text(encoding="utf-8").splitlines() == ours.translate(sources)
    scores = json.loads((out / "scores.json").read_text())
    assert scores["engine"] == "ctranslate2" and scores["model_dir"] == str(model_dir)


def test_export_without_ctranslate2_is_one_line(tmp_path):
    # As if it were not installed: an import of a module mapped to None raises ImportError.
    code = (
        "import runpy, sys; sys.modules['ctranslate2'] = None; "
        f"sys.argv = ['export', 'checkpoint=x.pt', 'output={tmp_path / 'out'}']; "
        "runpy.run_module('translate.export', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert_one_line_error(proc, 'pip install -e ".[ct2]"')
    assert not (tmp_path / "out").exists()
