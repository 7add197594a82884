"""Decoding with a model exported for CTranslate2 (``python -m translate.export``).

An export is a folder: ``model.bin``, its vocabulary, our tokenizer and :data:`MANIFEST` (the
run's settings, special ids, position rows, SHA-256s), each checked on load.
:func:`load_exported` makes it a ``Translator``; :class:`CT2Engine` decodes each batch,
searching as :mod:`translate.decoding.search` does:

* ``max_decoding_length`` per group of sources sharing our limit; ``min_decoding_length=0``;
  ``max_input_length=0`` (the translator truncates).
* ``suppress_sequences`` of PAD and BOS, removed before its softmax (ours: after, as fairseq):
  its log-probs are ours plus ``-log(1 - p(PAD) - p(BOS))``, the same greedy argmax, but beam
  scores that can tip a near tie (label smoothing gives each about ``label_smoothing / V``).
* ``return_end_token=True``: its length normalisation then counts the EOS, as ours does.
* At ``length_penalty=0`` both return the best-scoring hypothesis. Above, CTranslate2 stops at
  ``round(K * patience)`` finished; ours also needs the best live beam not to beat the ``K``-th,
  so it can search longer. ``patience=1`` agrees whenever ours stops there too.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import torch

from translate.data.tokenizer import Tokenizer
from translate.decoding.search import max_length
from translate.decoding.translator import Loaded, Translator
from translate.errors import UserError, override_word
from translate.fields import Field, field_problem, of_type, whole
from translate.io import file_sha256
from translate.runtime.device import resolve_device
from translate.schema import DecodeSettings
from translate.schema.commands import MAX_POSITIONS, QUANTIZATIONS
from translate.settings import data_settings, decode_over, decode_settings

MANIFEST = "translate.json"
SENTENCEPIECE = "sentencepiece.model"
VOCABULARY = "shared_vocabulary.json"  # the model's pieces, as CTranslate2 saves them
MODEL_BIN = "model.bin"  # CTranslate2's weights; the manifest's model_bin.sha256 is theirs
MANIFEST_FORMAT = 1
INSTALL = 'pip install -e ".[ct2]"'


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "the ctranslate2 package is not installed (it exports to and decodes with "
            f"CTranslate2); install it with {INSTALL}"
        ) from None
    return ctranslate2


def output_limit(src_len: int, decode: DecodeSettings) -> int:
    """Most output tokens (EOS included) for a source of ``src_len`` tokens: search's rule."""
    return max_length(src_len, decode.max_len_a, decode.max_len_b)


class CT2Engine:
    """``pieces``: id -> piece; ``max_positions``: the exported position rows (bound outputs)."""

    strategies = ("beam", "greedy")  # its beam search; a beam of 1 is its greedy search

    def __init__(
        self, model_dir: Path, device: torch.device, pieces: list[str], max_positions: int
    ) -> None:
        ctranslate2 = import_ctranslate2()
        try:
            # As many threads as torch uses, so both engines get the same share of the CPU.
            self.translator = ctranslate2.Translator(
                str(model_dir),
                device=device.type,
                device_index=device.index or 0,
                intra_threads=torch.get_num_threads(),
            )
        except (RuntimeError, ValueError) as err:
            raise UserError(
                f"{model_dir} holds no loadable CTranslate2 model ({str(err).splitlines()[0]}); "
                "export it again with python -m translate.export"
            ) from None
        self.device = device
        self.precision = self.translator.compute_type
        self.pieces, self.max_positions = pieces, max_positions
        self.ids = {piece: i for i, piece in enumerate(pieces)}
        self.blocked = [[pieces[Tokenizer.PAD]], [pieces[Tokenizer.BOS]]]

    def generate(self, src_ids: list[list[int]], decode: DecodeSettings) -> list[list[int]]:
        limits = [min(output_limit(len(ids) + 1, decode), self.max_positions) for ids in src_ids]
        out: list[list[int]] = [[] for _ in src_ids]
        for limit in sorted(set(limits) - {0}):  # a limit of 0 leaves the hypothesis empty
            rows = [i for i, n in enumerate(limits) if n == limit]
            for i, hyp in zip(rows, self._translate([src_ids[i] for i in rows], limit, decode)):
                out[i] = hyp
        return out

    def _translate(
        self, src_ids: list[list[int]], limit: int, decode: DecodeSettings
    ) -> list[list[int]]:
        results = self.translator.translate_batch(
            [[self.pieces[i] for i in ids] for ids in src_ids],
            beam_size=1 if decode.strategy == "greedy" else decode.beam_size,
            length_penalty=decode.length_penalty,
            patience=1.0,
            max_decoding_length=limit,
            min_decoding_length=0,
            max_input_length=0,
            suppress_sequences=self.blocked,
            return_end_token=True,
        )
        eos = self.pieces[Tokenizer.EOS]
        hyps = [r.hypotheses[0] for r in results]
        return [[self.ids[p] for p in (h[:-1] if h and h[-1] == eos else h)] for h in hyps]


def read_manifest(model_dir: Path) -> dict:
    """The export's :data:`MANIFEST`, every field checked; every way it can be bad is one line."""
    hint = "export one with python -m translate.export checkpoint=<ckpt> output=<dir>"
    if not model_dir.is_dir():
        raise UserError(f"exported model not found: {model_dir} is not a folder; {hint}")
    path = model_dir / MANIFEST
    if not path.is_file():
        raise UserError(f"{model_dir} is not a model exported by translate (no {MANIFEST}); {hint}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path} is unreadable or corrupt ({type(err).__name__}); {hint}") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{path} is not a translate export manifest; {hint}")
    if manifest.get("format_version", MANIFEST_FORMAT) != MANIFEST_FORMAT:
        raise UserError(f"{path} was written by another translate version; {hint}")
    _check_manifest(path, manifest)
    return manifest


def _sha256(value) -> bool:
    return isinstance(value, str) and re.fullmatch("[0-9a-f]{64}", value) is not None


# The ids decoding uses (Tokenizer's, which Tokenizer.from_file checks the tokenizer has).
SPECIAL_IDS = {name.lower(): getattr(Tokenizer, name) for name in ("PAD", "UNK", "BOS", "EOS")}
_IDS = ", ".join(f"{k} {v}" for k, v in SPECIAL_IDS.items())
_OBJECT = Field(of_type(dict), "an object", required=True)
_HASH = Field(_sha256, "a SHA-256 in hex", required=True)
# What an export writes; checkpoint and quantization are only said, never used.
MANIFEST_FIELDS = {
    "format_version": Field(whole(MANIFEST_FORMAT, MANIFEST_FORMAT), "1", required=True),
    "checkpoint": Field(of_type(str), "a path"),
    "step": Field(whole(0), "a whole number >= 0", required=True),
    "quantization": Field(lambda v: v in QUANTIZATIONS, f"one of {', '.join(QUANTIZATIONS)}"),
    "max_positions": Field(
        whole(1, MAX_POSITIONS), f"a whole number in [1, {MAX_POSITIONS}]", required=True
    ),
    "special_ids": _OBJECT,
    **{
        f"special_ids.{name}": Field(whole(i, i), f"{i} ({_IDS}: the tokenizer's)", required=True)
        for name, i in SPECIAL_IDS.items()
    },
    "decode": _OBJECT,
    "data": _OBJECT,
    "tokenizer": _OBJECT,
    "tokenizer.sha256": _HASH,
    "tokenizer.vocab_size": Field(whole(1), "a whole number >= 1", required=True),
    "model_bin": _OBJECT,
    "model_bin.sha256": _HASH,
    # The checkpoint's fingerprint of each split's text, for evaluate (exports since 2026-12-05).
    "data_fingerprints": Field(
        lambda v: isinstance(v, dict) and all(map(_sha256, v.values())),
        "an object of SHA-256s by split role",
    ),
}


def _check_manifest(path: Path, manifest: dict) -> None:
    """Refuse, naming it, a field missing or not as an export writes it (decoding trusts it)."""
    problem = field_problem(manifest, MANIFEST_FIELDS)
    if problem is not None:
        raise UserError(f"{path}: {problem}; {_redo(manifest)}")
    for name, settings in (("decode", decode_settings), ("data", data_settings)):
        try:
            settings(manifest[name])
        except UserError as err:
            raise UserError(
                f"{path}: field {name!r} holds a bad setting ({err}); {_redo(manifest)}"
            ) from None


def _redo(manifest: dict) -> str:
    checkpoint = manifest.get("checkpoint")
    again = override_word("checkpoint", checkpoint if isinstance(checkpoint, str) else "<ckpt>")
    return f"export the checkpoint again: python -m translate.export {again} output=<new folder>"


def tokenizer_identity(tokenizer: Tokenizer) -> dict:
    digest = hashlib.sha256(tokenizer.model_proto).hexdigest()
    return {"sha256": digest, "vocab_size": tokenizer.vocab_size}


def check_tokenizer(model_dir: Path, manifest: dict, tokenizer: Tokenizer, pieces: list) -> None:
    """Refuse a tokenizer not the export's own (another's gives wrong hypotheses silently)."""
    path, redo = model_dir / SENTENCEPIECE, _redo(manifest)
    recorded, found = manifest["tokenizer"], tokenizer_identity(tokenizer)
    if recorded["sha256"] != found["sha256"]:
        raise UserError(
            f"{path} is not the tokenizer {model_dir} was exported with (its SHA-256 differs "
            f"from the one {MANIFEST} records); {redo}"
        )
    if recorded["vocab_size"] != found["vocab_size"]:
        raise UserError(
            f"{model_dir / MANIFEST}: field 'tokenizer.vocab_size' is {recorded['vocab_size']}, "
            f"but {path}, the tokenizer whose SHA-256 it records, has {found['vocab_size']} "
            f"subwords; {redo}"
        )
    try:
        vocabulary = json.loads((model_dir / VOCABULARY).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(
            f"{model_dir / VOCABULARY} is missing or corrupt ({type(err).__name__}); {redo}"
        ) from None
    if vocabulary != pieces:
        differ = f"{len(pieces)} subwords, the model {len(vocabulary)}"
        if len(pieces) == len(vocabulary):
            differ = "other subwords than the model's"
        raise UserError(
            f"{path} is not the tokenizer of the model in {model_dir} ({differ}); {redo}"
        )


def check_model(model_dir: Path, manifest: dict) -> None:
    """Refuse a ``model.bin`` copied from another export (another model under this one's name)."""
    path = model_dir / MODEL_BIN
    if not path.is_file():
        raise UserError(f"{path} is missing; {_redo(manifest)}")
    if file_sha256(path) != manifest["model_bin"]["sha256"]:
        raise UserError(
            f"{path} is not the model {model_dir} was exported with (its SHA-256 differs from "
            f"the one {MANIFEST} records; copied from another export?); {_redo(manifest)}"
        )


def _source_cap(cap: int | None, decode: DecodeSettings, positions: int) -> int:
    """``cap`` within the export's ``positions``; warns when sources or outputs would not fit."""
    if cap is None or cap > positions:
        given = "no data.eval_max_len is set" if cap is None else f"data.eval_max_len={cap}"
        print(
            f"warning: {given}; sources are cut at the exported model's {positions} positions",
            file=sys.stderr,
        )
        cap = positions
    longest = output_limit(cap, decode)
    if longest > positions:
        print(
            f"warning: decode.max_len_a={decode.max_len_a} and decode.max_len_b="
            f"{decode.max_len_b} allow outputs of {longest} tokens; the exported model has "
            f"{positions} positions, where longer outputs stop (export with "
            f"max_positions={longest} to allow them)",
            file=sys.stderr,
        )
    return cap


def load_exported(
    model_dir: str | Path,
    device: str = "auto",
    decode: DecodeSettings | dict | None = None,
    data_overrides=None,
) -> Loaded:
    """Exported model folder -> :class:`Loaded` (``config``: the manifest), as a checkpoint's."""
    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    tokenizer = Tokenizer.from_file(model_dir / SENTENCEPIECE)
    pieces = tokenizer.pieces(range(tokenizer.vocab_size))
    check_tokenizer(model_dir, manifest, tokenizer, pieces)
    check_model(model_dir, manifest)
    data = data_settings(manifest["data"], data_overrides)
    decode = decode_over(manifest["decode"], decode)
    positions = manifest["max_positions"]
    engine = CT2Engine(model_dir, resolve_device(device), pieces, positions)
    max_src_len = _source_cap(data.eval_cap, decode, positions)
    translator = Translator(engine, tokenizer, decode, data.eval_max_tokens, max_src_len)
    fingerprints = manifest.get("data_fingerprints", {})
    return Loaded(translator, data, manifest, manifest["step"], fingerprints)
