"""Decoding speed: greedy search with and without the attention cache, and beam search (size 5).

Without ``--checkpoint``: a seeded random model of ``experiment=multi30k_cpu``'s sizes on
synthetic Multi30k-like sources, each run to its limit (it rarely emits EOS), then timed again
with each ``--kv-heads``. With one: its model and limits on ``--src-file``; ``--ct2`` adds its
CTranslate2 exports (:mod:`translate.bench.ct2`). Batched as ``Translator`` batches, the modes
interleaved; ``greedy_no_cache`` must produce the tokens ``greedy_cache`` does.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from translate.bench import common, ct2
from translate.cli import run_plain_command
from translate.data.batching import Batch, collate, length_sorted_batches
from translate.data.sources import read_lines, sample_dir
from translate.data.tokenizer import Tokenizer
from translate.decoding.generate import SPECIAL_IDS, generate
from translate.decoding.search import greedy_search
from translate.decoding.translator import load_translator
from translate.nn.model import Seq2SeqTransformer
from translate.runtime.device import autocast, resolve_precision
from translate.schema import DecodeSettings

TARGETS = {"greedy_cache_speedup": (">=", 3.0)}
MODES = ("greedy_no_cache", "greedy_cache", "beam5")
COLUMNS = [
    ("impl", "impl", ""),
    ("mode", "mode", ""),
    *common.DECODE_COLUMNS,
    ("speedup_vs_no_cache", "cache speed-up", ".2f"),
    ("same_output", "same tokens", ""),
]
KV_MODES = ("greedy_cache", "beam5")
KV_COLUMNS = [
    ("kv_heads", "kv heads", ""),
    ("mode", "mode", ""),
    *common.DECODE_COLUMNS,
    ("kv_cache_kib_per_sentence", "KV cache KiB/sent", ".4g"),
    ("speed_vs_mha", "speed vs MHA", ".2f"),
    ("kv_cache_vs_mha", "cache vs MHA", ".3f"),
]


def synthetic_sources(n: int, vocab: int, seed: int) -> list[np.ndarray]:
    """``n`` fixed sources with lengths like Multi30k German (16.2 +- 6.3 subwords)."""
    rng = np.random.default_rng(seed)
    lengths, _ = common.multi30k_lengths(n, rng)
    return [rng.integers(4, vocab, int(n_tok)) for n_tok in lengths]


def random_model(args, device: torch.device, impl: str, kv_heads: int | None = None):
    torch.manual_seed(args.seed)
    model = Seq2SeqTransformer(
        args.vocab,
        d_model=args.d_model,
        num_heads=args.heads,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        d_ff=args.d_ff,
        attention_impl=impl,
        pad_id=Tokenizer.PAD,
        num_kv_heads=kv_heads,
    )
    return model.to(device).eval()


def random_models(args, device: torch.device) -> tuple[dict, list[np.ndarray], str]:
    """A seeded random model per ``--impls``, synthetic sources; limit: ``1.0 * src + 0``."""
    models = {impl: random_model(args, device, impl) for impl in args.impls}
    args.max_len_a = 1.0 if args.max_len_a is None else args.max_len_a
    args.max_len_b = 0.0 if args.max_len_b is None else args.max_len_b
    sources = synthetic_sources(args.sentences, args.vocab, args.seed)
    return models, sources, "random (seeded)"


def trained_model(args, device: torch.device) -> tuple[dict, list[np.ndarray], str]:
    """The checkpoint's model, its length limit unless given, and ``--src-file``'s lines."""
    loaded = load_translator(args.checkpoint, device=str(device), precision=args.precision)
    decode = loaded.translator.decode
    args.max_len_a = decode.max_len_a if args.max_len_a is None else args.max_len_a
    args.max_len_b = decode.max_len_b if args.max_len_b is None else args.max_len_b
    texts = read_lines(args.src_file)[: args.sentences]
    sources = [np.asarray(ids) for ids in loaded.tokenizer.encode(texts)]
    model = loaded.model
    return {model.encoder_layers[0].self_attn.impl: model}, sources, f"trained ({args.checkpoint})"


def make_batches(sources: list[np.ndarray], args, device) -> tuple[list[list[int]], list[Batch]]:
    """Index groups and their padded batches, as ``Translator`` batches them."""
    groups = length_sorted_batches([len(s) + 1 for s in sources], None, args.max_tokens)
    batches = [collate([(i, sources[i], sources[i][:1]) for i in g]).to(device) for g in groups]
    return groups, batches


def decode_all(model, batches: list[Batch], mode: str, args, device, precision) -> list:
    strategy = "beam" if mode == "beam5" else "greedy"
    settings = DecodeSettings(
        args.beam_size, 1.0, args.max_len_a, args.max_len_b, strategy=strategy
    )  # length penalty: beam_search's default
    hyps = []
    with autocast(device, precision):
        for b in batches:
            if mode == "greedy_no_cache":  # a benchmark of the cache: no decode setting for it
                limits = {"max_len_a": args.max_len_a, "max_len_b": args.max_len_b}
                hyps += greedy_search(
                    model, b.src, b.src_padding_mask, use_cache=False, **limits, **SPECIAL_IDS
                )
            else:
                hyps += generate(model, b, settings)
    return hyps


def speed_row(impl: str, mode: str, runs: list[float], hyps: list, n_sentences: int, args) -> dict:
    mode = mode if mode != "beam5" else f"beam{args.beam_size}"
    return {"impl": impl, **common.decode_row(mode, runs, hyps, n_sentences)}


def time_modes(impl, model, batches, n_sentences: int, args, device, precision) -> list[dict]:
    outputs = {}

    def run(mode: str) -> None:
        outputs[mode] = decode_all(model, batches, mode, args, device, precision)

    fns = {mode: (lambda m=mode: run(m)) for mode in MODES}
    times = common.interleaved(fns, device, args.warmup, args.rounds)
    rows = [speed_row(impl, mode, times[mode], outputs[mode], n_sentences, args) for mode in MODES]
    no_cache, cached = rows[0], rows[1]
    cached["speedup_vs_no_cache"] = cached["sentences_per_s"] / no_cache["sentences_per_s"]
    cached["same_output"] = outputs["greedy_cache"] == outputs["greedy_no_cache"]
    return rows


def kv_cache_bytes(model, batches: list[Batch], mode: str, args, device, precision) -> int:
    """KV-cache bytes decoding in ``mode``: the sum of each batch's peak (read by forward hooks)."""
    layers = model.decoder_layers
    now, peak = [0] * len(layers), [0]

    def record(i: int, layer, inputs, kwargs, output) -> None:
        caches = (kwargs.get("self_cache"), kwargs.get("cross_cache"))
        now[i] = sum(c.nbytes for c in caches if c is not None)
        if i == len(layers) - 1:  # every layer has updated its caches for this step
            peak[0] = max(peak[0], sum(now))

    hooks = [functools.partial(record, i) for i in range(len(layers))]
    handles = [m.register_forward_hook(h, with_kwargs=True) for m, h in zip(layers, hooks)]
    total = 0
    try:
        for b in batches:
            peak[0] = 0
            decode_all(model, [b], mode, args, device, precision)
            total += peak[0]
    finally:
        for handle in handles:
            handle.remove()
    return total


def time_kv_heads(args, batches, n_sentences: int, device, precision) -> list[dict]:
    """A row per ``--kv-heads`` and cached mode, interleaved, with ratios to multi-head's."""
    impl = args.impls[0]
    models = {kv: random_model(args, device, impl, kv) for kv in args.kv_heads}
    outputs = {}

    def run(kv: int, mode: str) -> None:
        outputs[kv, mode] = decode_all(models[kv], batches, mode, args, device, precision)

    fns = {(kv, mode): functools.partial(run, kv, mode) for kv in models for mode in KV_MODES}
    # The cache is measured in an untimed pass (the hooks cost time); it doubles as a warm-up.
    cache = {
        (kv, m): kv_cache_bytes(models[kv], batches, m, args, device, precision) for kv, m in fns
    }
    times = common.interleaved(fns, device, max(args.warmup - 1, 0), args.rounds)
    rows = []
    for kv, mode in fns:
        row = speed_row(impl, mode, times[kv, mode], outputs[kv, mode], n_sentences, args)
        row["kv_heads"] = kv
        row["kv_cache_bytes_per_sentence"] = cache[kv, mode] / n_sentences
        row["kv_cache_kib_per_sentence"] = cache[kv, mode] / n_sentences / 2**10
        rows.append(row)
    for row in rows:
        mha = next(r for r in rows if r["mode"] == row["mode"] and r["kv_heads"] == args.heads)
        row["speed_vs_mha"] = row["sentences_per_s"] / mha["sentences_per_s"]
        row["kv_cache_vs_mha"] = (
            row["kv_cache_bytes_per_sentence"] / mha["kv_cache_bytes_per_sentence"]
        )
    return rows


def kv_summary(rows: list[dict], args) -> dict:
    """The fewest key/value heads against multi-head attention (``--heads`` kv heads)."""
    lo, hi = min(args.kv_heads), args.heads
    fewest = {r["mode"]: r for r in rows if r["kv_heads"] == lo}
    greedy, beam = fewest["greedy_cache"], fewest[f"beam{args.beam_size}"]
    return {
        f"kv_cache_bytes_ratio_kv{lo}_vs_kv{hi}": greedy["kv_cache_vs_mha"],
        f"greedy_cache_speed_ratio_kv{lo}_vs_kv{hi}": greedy["speed_vs_mha"],
        f"beam{args.beam_size}_speed_ratio_kv{lo}_vs_kv{hi}": beam["speed_vs_mha"],
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("decode", __doc__)
    number = common.number
    parser.add_argument("--impls", nargs="+", choices=["sdpa", "manual"], default=["sdpa"])
    parser.add_argument("--checkpoint", type=Path, default=None, help="a trained model")
    ct2_help = "with --checkpoint: also time its CTranslate2 exports (float32, int8) beside ours"
    parser.add_argument("--ct2", action="store_true", help=ct2_help)
    parser.add_argument("--ct2-threads", type=number(), nargs="+", default=[1, 2], metavar="N")
    latency_help = "--ct2: the first N sentences also one at a time (default 100, --quick 8)"
    parser.add_argument("--latency-sentences", type=number(), default=None, help=latency_help)
    parser.add_argument("--src-file", type=Path, default=sample_dir() / "test.de")
    parser.add_argument("--precision", default="32", choices=["32", "bf16", "fp16"])
    parser.add_argument("--sentences", type=number(), default=None)
    parser.add_argument("--max-tokens", type=number(), default=2048, help="per batch, padded")
    parser.add_argument("--beam-size", type=number(), default=5)
    parser.add_argument("--max-len-a", type=number(float, 0), default=None)
    parser.add_argument("--max-len-b", type=number(float, 0), default=None)
    parser.add_argument("--rounds", type=number(), default=None)
    parser.add_argument("--warmup", type=number(low=0), default=1)
    # Synthetic sources draw ids from 4 (after the special ones) to --vocab.
    parser.add_argument("--vocab", type=number(low=5), default=5000)
    parser.add_argument("--d-model", type=number(), default=256)
    parser.add_argument("--heads", type=number(), default=8)
    parser.add_argument("--layers", type=number(), default=2, help="encoder and decoder each")
    parser.add_argument("--d-ff", type=number(), default=512)
    kv_help = "key/value head counts to compare (default: every divisor of --heads, always added)"
    kv_help += "; with no value: no comparison"
    parser.add_argument("--kv-heads", type=number(), nargs="*", default=None, help=kv_help)
    args = parser.parse_args(argv)
    args.sentences = args.sentences or (32 if args.quick else 200)
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.latency_sentences = args.latency_sentences or (8 if args.quick else 100)
    if args.ct2 and args.checkpoint is None:
        parser.error("--ct2 compares a checkpoint with its CTranslate2 exports: give --checkpoint")
    common.check_heads(parser, args.d_model, [args.heads])
    if args.kv_heads is None:
        args.kv_heads = [k for k in range(1, args.heads + 1) if args.heads % k == 0]
    elif args.kv_heads:
        if any(args.heads % k for k in args.kv_heads):
            parser.error(f"--kv-heads {args.kv_heads}: each must divide --heads {args.heads}")
        args.kv_heads = sorted({*args.kv_heads, args.heads})
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with common.session(args) as device:
        precision = resolve_precision(args.precision, device, key="--precision")
        load = random_models if args.checkpoint is None else trained_model
        models, sources, weights = load(args, device)
        groups, batches = make_batches(sources, args, device)
        rows = []
        for impl, model in models.items():
            rows += time_modes(impl, model, batches, len(sources), args, device, precision)
        first = next(r for r in rows if "speedup_vs_no_cache" in r)  # the first model's
        summary = {"greedy_cache_speedup": first["speedup_vs_no_cache"]}
        mean_len = float(np.mean([len(s) + 1 for s in sources]))
        sizes = "/".join(str(len(g)) for g in groups)
        title = (
            f"Decoding {len(sources)} sentences (source {mean_len:.1f} tokens on "
            f"average with EOS), {len(batches)} batches of {sizes}, {weights} weights, "
            f"max length {args.max_len_a} * src + {args.max_len_b}, precision {precision}"
        )
        common.print_table(rows, COLUMNS, title=title)
        kv_rows = []
        if args.checkpoint is None and args.kv_heads:
            kv_rows = time_kv_heads(args, batches, len(sources), device, precision)
            print()
            title = f"Key/value heads at {args.heads} heads ({args.impls[0]}), cached decoding"
            common.print_table(kv_rows, KV_COLUMNS, title=title)
            summary.update(kv_summary(kv_rows, args))
        engines = ct2.section(args, sources, device) if args.ct2 else None
        summary.update(engines.pop("summary") if engines else {})
        return common.finish(
            "decode",
            argv,
            args,
            device,
            summary,
            TARGETS,
            weights=weights,
            precision=precision,
            sentences=len(sources),
            batch_sizes=[len(g) for g in groups],
            mean_source_len=mean_len,
            rows=rows,
            kv_rows=kv_rows,
            ct2=engines,
        )


if __name__ == "__main__":
    run_plain_command(main)
