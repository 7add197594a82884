"""Export a checkpoint as a CTranslate2 model folder (``python -m translate.export``): our
weights layer by layer through ``ctranslate2.specs`` (built directly: ``from_config`` cannot set
``num_heads_kv``), quantized, beside the SentencePiece model and the manifest. CTranslate2's
sinusoidal table is not ours (sin and cos concatenated, other frequencies, positions from 1):
ours is stored, with ``max_positions`` rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from translate.checkpoint import load_checkpoint
from translate.data.tokenizer import Tokenizer
from translate.decoding.ct2 import (
    MANIFEST,
    MANIFEST_FORMAT,
    MODEL_BIN,
    SENTENCEPIECE,
    SPECIAL_IDS,
    import_ctranslate2,
    output_limit,
    tokenizer_identity,
)
from translate.decoding.translator import model_from_checkpoint
from translate.errors import UserError
from translate.io import check_output_folder, file_sha256, write_folder
from translate.nn.model import Seq2SeqTransformer
from translate.schema import ModelSettings
from translate.settings import data_settings, decode_settings, model_settings


def _array(param) -> np.ndarray:
    return param.detach().float().cpu().numpy()


def _linear(spec, module: nn.Linear) -> None:
    spec.weight = _array(module.weight)
    if module.bias is not None:
        spec.bias = _array(module.bias)


def _fused(spec, modules: list[nn.Linear]) -> None:
    spec.weight = np.concatenate([_array(m.weight) for m in modules])  # (sum of outputs, D)
    spec.bias = np.concatenate([_array(m.bias) for m in modules])


def _norm(spec, module: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(module.weight), _array(module.bias)


def _attention(spec, attn, block, self_attention: bool) -> None:
    if self_attention:
        _fused(spec.linear[0], [attn.q_proj, attn.k_proj, attn.v_proj])
    else:
        _linear(spec.linear[0], attn.q_proj)
        _fused(spec.linear[1], [attn.k_proj, attn.v_proj])
    _linear(spec.linear[-1], attn.out_proj)
    _norm(spec.layer_norm, block.norm)


def _ffn(spec, layer) -> None:
    _linear(spec.linear_0, layer.ffn.fc1)
    _linear(spec.linear_1, layer.ffn.fc2)
    _norm(spec.layer_norm, layer.ffn_block.norm)


def _inputs(spec, model: Seq2SeqTransformer, table: np.ndarray) -> None:
    embedding = model.embedding
    spec.scale_embeddings = math.sqrt(embedding.d_model)  # TokenEmbedding's input scale
    spec.position_encodings.encodings = table
    weight = _array(embedding.embed.weight)
    (spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings).weight = weight


def _stacks(specs, settings: ModelSettings):
    activations = {"relu": specs.Activation.RELU, "gelu": specs.Activation.GELU}
    if settings.activation not in activations:
        raise UserError(f"model.activation={settings.activation} has no CTranslate2 counterpart")
    shape = dict(
        num_heads=settings.num_heads,
        pre_norm=settings.norm_first,
        activation=activations[settings.activation],
        # None keeps a multi-head model exactly what from_config would build.
        num_heads_kv=None if settings.num_kv_heads == settings.num_heads else settings.num_kv_heads,
    )
    encoder = specs.TransformerEncoderSpec(settings.num_encoder_layers, **shape)
    decoder = specs.TransformerDecoderSpec(settings.num_decoder_layers, **shape)
    return encoder, decoder


def build_spec(model: Seq2SeqTransformer, settings: ModelSettings, pieces: list[str], rows: int):
    specs = import_ctranslate2().specs
    encoder, decoder = _stacks(specs, settings)
    table = _array(model.embedding.positions(rows))  # (rows, D): ours, from position 0
    _inputs(encoder, model, table)
    _inputs(decoder, model, table)
    decoder.projection.weight = _array(model.embedding.embed.weight)  # tied output projection
    for spec, layer in zip(encoder.layer, model.encoder_layers):
        _attention(spec.self_attention, layer.self_attn, layer.attn_block, True)
        _ffn(spec.ffn, layer)
    for spec, layer in zip(decoder.layer, model.decoder_layers):
        _attention(spec.self_attention, layer.self_attn, layer.self_block, True)
        _attention(spec.attention, layer.cross_attn, layer.cross_block, False)
        _ffn(spec.ffn, layer)
    if settings.norm_first:  # a pre-norm stack ends with a LayerNorm
        _norm(encoder.layer_norm, model.encoder_norm)
        _norm(decoder.layer_norm, model.decoder_norm)
    spec = specs.TransformerSpec(encoder, decoder)
    config = spec.config
    config.add_source_eos = True
    config.unk_token, config.bos_token = pieces[Tokenizer.UNK], pieces[Tokenizer.BOS]
    config.eos_token, config.decoder_start_token = pieces[Tokenizer.EOS], pieces[Tokenizer.BOS]
    config.layer_norm_epsilon = model.encoder_layers[0].attn_block.norm.eps
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def _check_range(model: Seq2SeqTransformer, quantization: str) -> None:
    """Refuse weights float16 cannot hold: beyond 65,504 they are infinity (empty lines)."""
    if quantization != "float16":  # the one that narrows every float weight
        return
    dtype = torch.float16
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor.to(dtype)).all():
            largest = tensor.abs().max().item()
            raise UserError(
                f"quantization={quantization} cannot hold the weight {name} (largest magnitude "
                f"{largest:.3g}, beyond {torch.finfo(dtype).max:,.0f}); nothing was written; "
                "export with quantization=float32 or int8"
            )


def _positions(ckpt: dict, max_positions: int | None) -> int:
    """``max_positions``, or the longest source the run evaluates and output it allows."""
    cap = data_settings(ckpt["config"]["data"]).eval_cap
    if max_positions is not None:
        if cap is not None and max_positions < cap:
            raise UserError(
                f"max_positions={max_positions} is shorter than the checkpoint's longest "
                f"source (data.eval_max_len={cap}); pass max_positions={cap} or more"
            )
        return max_positions
    if cap is None:
        raise UserError(
            "the checkpoint sets no longest source (data.eval_max_len); pass "
            "max_positions=<tokens> for the longest source and output the export must take"
        )
    return max(cap, output_limit(cap, decode_settings(ckpt["config"]["decode"])))


def _manifest(ckpt: dict, checkpoint: Path, quantization: str, rows: int, tokenizer, model) -> dict:
    data = dict(ckpt["config"]["data"])
    data["eval_max_len"] = data_settings(data).eval_cap  # explicit for an older checkpoint
    return {
        "format_version": MANIFEST_FORMAT,
        "checkpoint": str(checkpoint),
        "step": int(ckpt["step"]),
        "quantization": quantization,
        "max_positions": rows,
        "special_ids": SPECIAL_IDS,
        "decode": ckpt["config"]["decode"],
        "data": data,
        "tokenizer": tokenizer_identity(tokenizer),
        "model_bin": {"sha256": file_sha256(model)},
        "data_fingerprints": dict(ckpt.get("data_fingerprints", {})),
    }


def export_checkpoint(
    checkpoint: str | Path, output: str | Path, quantization: str, max_positions: int | None
) -> Path:
    """Write ``checkpoint`` as the CTranslate2 model folder ``output`` (never half); its path."""
    import_ctranslate2()  # a missing package is the first thing said
    checkpoint, output = Path(checkpoint), Path(output)
    check_output_folder(output, "output")  # new or empty; its parents are made below
    ckpt = load_checkpoint(checkpoint)
    model, tokenizer = model_from_checkpoint(ckpt, checkpoint)
    rows = _positions(ckpt, max_positions)
    _check_range(model, quantization)
    pieces = tokenizer.pieces(range(tokenizer.vocab_size))
    spec = build_spec(model, model_settings(ckpt["config"]["model"]), pieces, rows)
    spec.validate()
    spec.optimize(quantization=quantization)

    def fill(folder: str) -> dict[str, bytes | str]:
        spec.save(folder)  # CTranslate2's files; then ours, the manifest naming its model.bin
        model = Path(folder) / MODEL_BIN
        manifest = _manifest(ckpt, checkpoint.resolve(), quantization, rows, tokenizer, model)
        text = json.dumps(manifest, indent=2) + "\n"
        return {SENTENCEPIECE: tokenizer.model_proto, MANIFEST: text}

    try:
        return write_folder(output, fill, "output")
    except OSError as err:
        raise UserError(
            f"cannot write output={output} ({err.strerror or err}); nothing was written"
        ) from None
