"""Training throughput side by side: our ``Seq2SeqTransformer`` (``impl=manual`` and
``impl=sdpa``) against the same architecture built from ``torch.nn.Transformer``.

    python scripts/bench_train.py --json outputs/bench/train.json
    python scripts/bench_train.py --quick
    python scripts/bench_train.py --device cuda --precision bf16 --compile --max-tokens 8192

The sizes default to ``experiment=multi30k_cpu`` (d_model 256, 8 heads, 2+2 layers, ffn 512,
5k vocabulary, dropout 0.1, attention and activation dropout 0, pre-norm, 2048-token batches).
The baseline has the same widths, depths, dropouts and norm placement, the same tied embedding
table scaled by ``sqrt(d_model)`` plus sinusoidal positions, and the same tied output
projection, so both have the same parameter count. All three train on the same batches with the
same :class:`translate.trainer.Trainer` (Adam, label smoothing 0.1, clipping at 1.0), precision
and thread count. A timed step is ``Trainer.step``: forward, loss, backward, clipping and the
optimizer update.

Batches are synthetic token ids (``--data synthetic``, the default) with a length distribution
like Multi30k's under its joint 5k SentencePiece model (``_bench.multi30k_lengths``), cut by
:class:`translate.data.TokenBatchSampler`, or the built-in sample corpus (``--data sample``).
Runs are interleaved step by step (A B C on one batch, B C A on the next, ...): each round
trains every model once on each of the same ``--batches`` batches; a model's tokens/s in a round
is its source + target non-pad tokens over its summed step times, and the table shows the
median over rounds.

``summary``: ``train_tokens_per_s_sdpa_vs_torch`` (target >= 1.0) and
``train_tokens_per_s_manual_vs_torch`` (target >= 0.8).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import _bench
import numpy as np
import torch
from torch import Tensor, nn

from translate.config import OptimSettings
from translate.data import Batch, TokenBatchSampler, collate
from translate.layers import SinusoidalPositionalEncoding
from translate.model import Seq2SeqTransformer, count_parameters
from translate.runtime import resolve_precision
from translate.tokenizer import Tokenizer
from translate.trainer import Trainer

MODELS = ("torch", "manual", "sdpa")
TARGETS = {
    "train_tokens_per_s_sdpa_vs_torch": (">=", 1.0),
    "train_tokens_per_s_manual_vs_torch": (">=", 0.8),
}
# conf/optim/adam_inverse_sqrt.yaml
OPTIM = OptimSettings(
    lr=7e-4,
    betas=[0.9, 0.98],
    eps=1e-9,
    weight_decay=0.0,
    warmup_steps=4000,
    label_smoothing=0.1,
    clip_norm=1.0,
)


class TorchTransformer(nn.Module):
    """The baseline: ``torch.nn.Transformer`` inside the same embedding/projection as ours.

    ``nn.Transformer`` uses one dropout rate for residuals, attention weights and the
    feed-forward; the latter two are set afterwards to match our separate rates. Post-norm
    stacks get no final LayerNorm, as ours.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_encoder_layers: int,
        num_decoder_layers: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        activation: str,
        norm_first: bool,
        pad_id: int,
    ) -> None:
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.positions = SinusoidalPositionalEncoding(d_model)
        self.embed_dropout = nn.Dropout(dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": inference only
            warnings.filterwarnings("ignore", message="enable_nested_tensor")
            self.transformer = nn.Transformer(
                d_model,
                num_heads,
                num_encoder_layers,
                num_decoder_layers,
                d_ff,
                dropout,
                activation,
                batch_first=True,
                norm_first=norm_first,
            )
        for layer in (*self.transformer.encoder.layers, *self.transformer.decoder.layers):
            layer.self_attn.dropout = attention_dropout
            if hasattr(layer, "multihead_attn"):
                layer.multihead_attn.dropout = attention_dropout
            layer.dropout.p = activation_dropout  # between the two feed-forward linears
        if not norm_first:
            self.transformer.encoder.norm = None
            self.transformer.decoder.norm = None
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.embed.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[pad_id].zero_()

    def _embed(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) * math.sqrt(self.d_model)  # (B, T, D)
        return self.embed_dropout(x + self.positions(tokens.size(1)).to(x.dtype))

    def forward(self, src: Tensor, tgt_in: Tensor, src_padding_mask: Tensor | None = None):
        T = tgt_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)  # (T, T)
        out = self.transformer(
            self._embed(src),
            self._embed(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src_padding_mask,
            memory_key_padding_mask=src_padding_mask,
            tgt_is_causal=True,
        )  # (B, T, D)
        return out @ self.embed.weight.t()  # (B, T, V)


# ---------------------------------------------------------------------------- batches


def synthetic_batches(args, vocab: int) -> list[Batch]:
    rng = np.random.default_rng(args.seed)
    n = max(200, 4 * args.batches * args.max_tokens // 16)
    src_lens, tgt_lens = _bench.multi30k_lengths(n, rng)
    examples = [
        (i, rng.integers(4, vocab, s), rng.integers(4, vocab, t))
        for i, (s, t) in enumerate(zip(src_lens, tgt_lens))
    ]
    sampler = TokenBatchSampler(src_lens + 1, tgt_lens + 1, args.max_tokens, True, args.seed)
    return [collate([examples[i] for i in idx]) for idx in list(sampler)[: args.batches]]


def sample_batches(args) -> tuple[list[Batch], int]:
    from omegaconf import OmegaConf

    from translate.data import load_corpus, make_loader

    cfg = OmegaConf.load(_bench.ROOT / "conf" / "data" / "sample.yaml")
    cfg.cache_dir = str(args.cache_dir)
    corpus = load_corpus(cfg)
    loader = make_loader(corpus.splits["train"], args.max_tokens, shuffle=True, seed=args.seed)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == args.batches:
            break
    return batches, corpus.tokenizer.vocab_size


# ---------------------------------------------------------------------------- models


def model_kwargs(args, vocab: int) -> dict:
    return dict(
        vocab_size=vocab,
        d_model=args.d_model,
        num_heads=args.heads,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        d_ff=args.d_ff,
        dropout=args.dropout,
        attention_dropout=args.attention_dropout,
        activation_dropout=args.activation_dropout,
        activation=args.activation,
        norm_first=not args.post_norm,
        pad_id=Tokenizer.PAD,
    )


def build(name: str, kwargs: dict, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if name == "torch":
        return TorchTransformer(**kwargs)
    return Seq2SeqTransformer(**kwargs, attention_impl=name)


def train_flops(batch: Batch, args, vocab: int) -> float:
    """Matmul FLOPs of one forward+backward (3x forward) over the padded batch; an estimate
    that ignores norms, softmax, the loss and the optimizer."""
    B, S = batch.src.shape
    T = batch.tgt_in.size(1)
    D, F, L = args.d_model, args.d_ff, args.layers
    enc = B * S * (4 * D * D + 2 * D * F) + 2 * B * S * S * D
    dec = (
        B * T * (4 * D * D + 2 * D * F) + 2 * B * T * T * D  # self-attention, feed-forward
        + B * T * 2 * D * D + B * S * 2 * D * D + 2 * B * T * S * D  # cross-attention
    )  # fmt: skip
    macs = L * (enc + dec) + B * T * D * vocab  # + the tied output projection
    return 3 * 2 * macs


# ---------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _bench.add_common_args(parser)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--precision", default="32", choices=["32", "bf16", "fp16"])
    parser.add_argument("--compile", action="store_true", help="torch.compile every model")
    parser.add_argument("--data", choices=["synthetic", "sample"], default="synthetic")
    parser.add_argument("--cache-dir", type=Path, default=_bench.ROOT / "outputs" / "cache")
    parser.add_argument("--vocab", type=int, default=5000, help="synthetic data only")
    parser.add_argument("--max-tokens", type=int, default=2048, help="padded tokens per side")
    parser.add_argument("--batches", type=int, default=None, help="batches per round")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    parser.add_argument("--d-ff", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--attention-dropout", type=float, default=0.0)
    parser.add_argument("--activation-dropout", type=float, default=0.0)
    parser.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    parser.add_argument("--post-norm", action="store_true")
    parser.add_argument("--peak-tflops", type=float, default=None, help="for the MFU estimate")
    args = parser.parse_args(argv)
    args.batches = args.batches or (2 if args.quick else 4)
    args.rounds = args.rounds or (3 if args.quick else 7)
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with _bench.Session(args) as session:
        device = session.device
        precision = resolve_precision(args.precision, device)
        if args.data == "sample":
            batches, vocab = sample_batches(args)
        else:
            vocab = args.vocab
            batches = synthetic_batches(args, vocab)
        kwargs = model_kwargs(args, vocab)
        trainers, params = {}, {}
        for name in args.models:
            model = build(name, kwargs, args.seed).to(device)
            params[name] = count_parameters(model)
            compiled = torch.compile(model) if args.compile else None
            trainers[name] = Trainer(model, OPTIM, device, precision, Tokenizer.PAD, compiled)
        # Warm-up: kernels, allocator, Adam state; compiled models see every batch shape twice
        # (the second distinct shape recompiles with dynamic sizes), so no compile is timed.
        warmup = max(args.warmup, 2 * len(batches)) if args.compile else args.warmup
        for trainer in trainers.values():
            for i in range(warmup):
                trainer.step([batches[i % len(batches)]])
        _bench.sync(device)

        # Interleaved at the step: in round r every batch is trained on by every model in
        # turn, starting with model (r + batch index) mod 3, so a few seconds of interference
        # from elsewhere on the machine fall on all models alike.
        names = list(trainers)
        runs: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            seconds = dict.fromkeys(names, 0.0)
            tokens = dict.fromkeys(names, 0)
            for i, batch in enumerate(batches):
                shift = (r + i) % len(names)
                for name in names[shift:] + names[:shift]:
                    _bench.sync(device)
                    start = time.perf_counter()
                    tokens[name] += trainers[name].step([batch]).tokens
                    _bench.sync(device)
                    seconds[name] += time.perf_counter() - start
            for name in names:
                runs[name].append(tokens[name] / seconds[name])

        tokens_per_round = sum(b.num_src_tokens + b.num_tgt_tokens for b in batches)
        padded = sum(b.src.numel() + b.tgt_in.numel() for b in batches)
        flops_per_round = sum(train_flops(b, args, vocab) for b in batches)
        peak = args.peak_tflops or _bench.bf16_peak_tflops(device)
        rows = []
        for name in names:
            tps = _bench.median(runs[name])
            step_s = tokens_per_round / tps / len(batches)
            achieved = flops_per_round * tps / tokens_per_round / 1e12  # TFLOP/s
            rows.append(
                {
                    "model": name if name == "torch" else f"ours ({name})",
                    "impl": name,
                    "params": params[name],
                    "tokens_per_s": tps,
                    "tokens_per_s_runs": runs[name],
                    "step_s": step_s,
                    "tflops": achieved,
                    "mfu": achieved / peak if peak and precision == "bf16" else None,
                }
            )
        torch_tps = next((r["tokens_per_s"] for r in rows if r["impl"] == "torch"), None)
        for row in rows:
            row["vs_torch"] = _bench.ratio(row["tokens_per_s"], torch_tps)
            if "torch" in runs:  # a cross-check: the same ratio within each round
                paired = [a / b for a, b in zip(runs[row["impl"]], runs["torch"])]
                row["vs_torch_median_of_rounds"] = _bench.median(paired)
        by_impl = {row["impl"]: row for row in rows}
        summary = {
            "train_tokens_per_s_sdpa_vs_torch": by_impl.get("sdpa", {}).get("vs_torch"),
            "train_tokens_per_s_manual_vs_torch": by_impl.get("manual", {}).get("vs_torch"),
        }
        shapes = [tuple(b.src.shape) + (b.tgt_in.size(1),) for b in batches]
        title = (
            f"Training step, {args.data} batches (B, S, T) {shapes}, "
            f"{tokens_per_round} tokens/round ({tokens_per_round / padded:.0%} of padded), "
            f"precision {precision}, {torch.get_num_threads()} threads"
        )
        _bench.print_table(
            rows,
            [
                ("model", "model", ""),
                ("params", "params", ""),
                ("tokens_per_s", "tokens/s", ".4g"),
                ("step_s", "s/step", ".3g"),
                ("vs_torch", "vs torch", ".3f"),
                ("tflops", "TFLOP/s", ".3g"),
                ("mfu", "MFU", ".1%"),
            ],
            title=title,
        )
        _bench.print_summary(summary, TARGETS)
        result = _bench.report(
            "bench_train",
            argv,
            args,
            device,
            summary,
            targets={k: list(v) for k, v in TARGETS.items()},
            precision=precision,
            batches=[
                {
                    "src_shape": list(b.src.shape),
                    "tgt_shape": list(b.tgt_in.shape),
                    "src_tokens": b.num_src_tokens,
                    "tgt_tokens": b.num_tgt_tokens,
                }
                for b in batches
            ],
            tokens_per_round=tokens_per_round,
            model_flops_per_round=flops_per_round,
            bf16_peak_tflops=peak,
            rows=rows,
        )
    _bench.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
