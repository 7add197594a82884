"""Score a checkpoint: ``python -m translate.evaluate checkpoint=<path> [src=<file> ref=<file>]``,
or an exported model: ``engine=ctranslate2 model_dir=<dir>``.

Without ``src``/``ref``: the test split of the checkpoint's data config. ``hyp.txt`` and
``scores.json`` go to this command's run dir, held while it runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig

from translate import io
from translate.cli import exit_on_user_error, own_output_dir, run_command
from translate.data.sources import read_input_lines
from translate.decoding.engine_switch import describe_decode, load_engine
from translate.errors import UserError
from translate.io import file_sha256
from translate.metrics import score
from translate.schema.commands import ENGINE_SOURCES, EngineCommand, EvaluateCommand
from translate.settings import command_settings, decode_overrides

if TYPE_CHECKING:
    from translate.decoding.translator import Loaded

log = logging.getLogger(__name__)

# What an evaluation writes into its dir: a second one there would replace them.
OUTPUTS = ("hyp.txt", "scores.json")


def _texts(command: EvaluateCommand, loaded) -> tuple[str, list[str], list[str]]:
    """``(name, sources, references)``: the ``src=``/``ref=`` files, or the test split."""
    src, ref = command.src, command.ref
    if src is None:
        from translate.data.corpus import load_raw_split

        name, sources, references = load_raw_split(loaded.data, "test")
        _say_if_other_text(loaded, name, sources, references)
        return name, sources, references
    # Lines end at \n (or \r\n) only, as in translate; surrounding spaces do not count.
    sources = [line.strip() for line in read_input_lines(Path(src))]
    references = [line.strip() for line in read_input_lines(Path(ref))]
    if not references:
        raise UserError(f"{ref} has no lines: nothing to score")
    if len(sources) != len(references):
        raise UserError(
            f"{src} has {len(sources)} lines but {ref} has {len(references)}; "
            "source and reference must be line-aligned"
        )
    return Path(src).name, sources, references


def _say_if_other_text(loaded, name: str, sources: list[str], references: list[str]) -> None:
    """Warn where the test split read now is not the text the run scored (the files changed,
    or data= names other ones): its scores cannot be compared with the run's results.json."""
    from translate.data.tokenizer import text_fingerprint

    d = loaded.data
    now = text_fingerprint({d.src_lang: sources, d.tgt_lang: references})
    if loaded.fingerprints.get("test", now) != now:
        log.warning(
            "the test split %s (%d sentences) is not the text the checkpoint's run scored as its "
            "test split (by its fingerprint): these scores are of the text there now and cannot "
            "be compared with the run's results.json",
            name,
            len(sources),
        )


def _stat(path: Path) -> tuple | None:
    try:
        st = path.stat()
    except OSError:
        return None  # the loader says what is wrong with it
    return st.st_ino, st.st_size, st.st_mtime_ns


def _load(command: EngineCommand, overrides: dict, data) -> tuple[Loaded, dict]:
    """The engine loaded, and what it loaded: its weights' path and SHA-256 (an export's: and its
    checkpoint), from the very file loaded: one replaced meanwhile (a live best.pt) is refused."""
    exported = command.engine == "ctranslate2"
    if exported:
        from translate.decoding.ct2 import MODEL_BIN

        weights = Path(command.model_dir) / MODEL_BIN
    else:
        weights = Path(command.checkpoint)
    before = _stat(weights)
    loaded = load_engine(command, overrides, data)
    # An export's model.bin was hashed as it loaded (decoding.ct2.check_model); a checkpoint here.
    digest = loaded.config["model_bin"]["sha256"] if exported else file_sha256(weights)
    if _stat(weights) != before:
        raise UserError(
            f"{weights} was replaced while it was loaded (a run still writing it?); run the "
            "command again to score one version of it"
        )
    scored = {"path": str(weights.resolve()), "sha256": digest, "step": loaded.step}
    if exported:
        scored["exported_from"] = loaded.config.get("checkpoint")
    return loaded, scored


def _write_outputs(out_dir: Path, hyps: list[str], result: dict) -> None:
    """hyp.txt and scores.json, both or neither (a hyp.txt alone would make a rerun refuse)."""
    hyp = out_dir / "hyp.txt"
    io.write(hyp, "".join(h + "\n" for h in hyps), "evaluation hypotheses")
    try:
        io.write(out_dir / "scores.json", json.dumps(result, indent=2) + "\n", "evaluation scores")
    except BaseException:
        io.remove(hyp)
        raise


def evaluate(cfg: DictConfig) -> dict:
    """Decode and score; returns ``{"bleu", "chrf", "bleu_signature", ...}``."""
    command = command_settings(EvaluateCommand, cfg)
    from translate.runtime.provenance import provenance  # torch's versions: once it runs

    overrides = decode_overrides(command.decode)
    with own_output_dir(Path(command.output_dir), OUTPUTS, "evaluate") as out_dir:
        loaded, scored = _load(command, overrides, command.data)
        decode = loaded.translator.decode  # the run's, with the command's keys in place
        print(describe_decode(decode, overrides))
        name, sources, references = _texts(command, loaded)
        hyps = loaded.translator.translate(sources, progress=True)
        scores = score(hyps, references)
        result = {
            "engine": command.engine,
            ENGINE_SOURCES[command.engine]: command.source,
            "scored": scored,  # what was scored, by its bytes
            "test": name,
            "sentences": len(sources),
            "beam_size": decode.beam_size,
            "decode": dataclasses.asdict(decode),
            **scores,
            "provenance": provenance(loaded.translator.device),  # what made these scores
        }
        _write_outputs(out_dir, hyps, result)
    print(
        f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  ({name}, {len(sources)} sentences, "
        f"{decode.search})"
    )
    print(f"signature: {scores['bleu_signature']}")
    print(f"hypotheses: {out_dir / 'hyp.txt'}")
    return result


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    run_command(main, "evaluate")
