"""What the heads learned: ``python -m translate.analyze checkpoint=<path> [data overrides]``.

On a fixed prefix of the dev set (``analysis.max_sentences``) this measures, per head:

- attention entropy (mean over non-pad queries) and its normalised form ``H / log S``;
- whether the head is degenerate: near-uniform, or fixed on one place (previous token, EOS, ...)
  - see :mod:`translate.heads` and the thresholds in ``conf/analysis/default.yaml``;
- importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"): the dev loss
  increase, and optionally the BLEU drop, when that head alone is masked at inference through
  the model's ``head_mask`` option (``Seq2SeqTransformer.forward/encode/decode``);

then masks heads in order of increasing importance and records BLEU and loss at each fraction
of heads kept (the pruning curve). Everything goes into this command's Hydra run dir
(``outputs/analyze/<time>/``): ``analysis.json``, ``heads.png``, ``pruning.png``,
``heatmaps/sentence<i>/<kind>_layer<l>.png`` and the same images in ``tensorboard/``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from translate.checkpoint import load_checkpoint, restore_model
from translate.config import DecodeSettings
from translate.data import load_raw_test
from translate.errors import UserError, exit_on_user_error
from translate.heads import (
    KINDS,
    HeadStats,
    Thresholds,
    head_ids,
    head_mask_without,
    head_statistics,
    make_batches,
    masked_loss,
    summarize,
)
from translate.inference import Translator
from translate.metrics import score
from translate.model import Seq2SeqTransformer, count_parameters
from translate.runtime import resolve_device, resolve_precision

log = logging.getLogger(__name__)


class HeadMasked(nn.Module):
    """``model`` with a fixed ``head_mask``, for :class:`Translator` and the search functions.

    It has the ``encode`` / ``decode`` / ``new_cache`` interface search uses and passes the mask
    into every call, so decoding runs the real model with those heads' outputs zeroed.
    """

    def __init__(self, model: Seq2SeqTransformer, head_mask: dict[str, Tensor]) -> None:
        super().__init__()
        self.model = model
        self.head_mask = head_mask

    def encode(self, src: Tensor, src_padding_mask: Tensor | None = None) -> Tensor:
        return self.model.encode(src, src_padding_mask, self.head_mask)

    def decode(self, tgt, memory, memory_padding_mask=None, cache=None) -> Tensor:
        return self.model.decode(tgt, memory, memory_padding_mask, cache, self.head_mask)

    def new_cache(self):
        return self.model.new_cache()


def _load_split(data_cfg: DictConfig, role: str) -> tuple[str, list[str], list[str]]:
    """Raw ``(name, sources, references)`` of a split role, read without building a tokenizer."""
    name = data_cfg.splits.get(role)
    if name is None:
        raise UserError(f"data.splits.{role} is null; pass split=valid or split=test")
    # load_raw_test reads one named split untouched; point its "test" role at ours.
    return load_raw_test(OmegaConf.merge(data_cfg, {"splits": {"test": name}}))


class _Bleu:
    """Greedy (or ``analysis.beam_size``) BLEU on a fixed dev subset under a head mask."""

    def __init__(self, model, tokenizer, decode, device, precision, data_cfg, src_ids, refs):
        self.model, self.tokenizer, self.decode = model, tokenizer, decode
        self.device, self.precision = device, precision
        self.max_tokens = int(data_cfg.eval_max_tokens)
        self.max_src_len = data_cfg.filter.get("max_src_len")
        self.src_ids, self.refs = src_ids, refs

    def __call__(self, head_mask: dict[str, Tensor] | None) -> float:
        if not self.src_ids:
            return float("nan")
        model = self.model if head_mask is None else HeadMasked(self.model, head_mask)
        translator = Translator(
            model,
            self.tokenizer,
            self.decode,
            self.device,
            self.precision,
            self.max_tokens,
            self.max_src_len,
        )
        hyps = self.tokenizer.decode(translator.translate_ids(self.src_ids))
        return score(hyps, self.refs)["bleu"]


def importance(model: Seq2SeqTransformer, loss_fn, bleu_fn=None, device="cpu") -> tuple[dict, dict]:
    """Each head's loss increase (and BLEU drop) when it alone is masked (Michel et al. 2019).

    Returns ``(base, {head_id: {"loss_increase", "bleu_drop"}})`` with
    ``base = {"loss", "bleu"}`` for the unmasked model.
    """
    base = {"loss": loss_fn(None), "bleu": bleu_fn(None) if bleu_fn else None}
    scores = {}
    for hid in head_ids(model):
        mask = head_mask_without(model, [hid], device)
        scores[hid] = {
            "loss_increase": loss_fn(mask) - base["loss"],
            "bleu_drop": base["bleu"] - bleu_fn(mask) if bleu_fn else None,
        }
    return base, scores


def pruning_curve(model, order: list, fractions, loss_fn, bleu_fn, device="cpu") -> list[dict]:
    """Mask the first heads of ``order`` (least important first) to keep each fraction."""
    total = len(order)
    curve = []
    for fraction in sorted({float(f) for f in fractions}, reverse=True):
        kept = round(fraction * total)
        removed = order[: total - kept]
        mask = head_mask_without(model, removed, device)
        curve.append(
            {
                "fraction_kept": kept / total,
                "heads_kept": kept,
                "bleu": bleu_fn(mask),
                "loss": loss_fn(mask),
                "removed": [list(h) for h in removed],
            }
        )
    return curve


def analyze(cfg: DictConfig) -> dict:
    """Run every diagnostic, write the outputs; returns the ``analysis.json`` dict."""
    if cfg.checkpoint is None:
        raise UserError("pass checkpoint=<run_dir>/checkpoints/best.pt")
    device = resolve_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    a = cfg.analysis
    thresholds = Thresholds.from_config(a.degenerate)
    metric = str(a.importance.metric)
    if metric not in ("loss", "bleu") or (metric == "bleu" and not a.importance.bleu_sentences):
        raise UserError(
            f"analysis.importance.metric={metric}: use loss, or bleu with "
            "analysis.importance.bleu_sentences > 0"
        )
    model, tokenizer, train_cfg = restore_model(load_checkpoint(cfg.checkpoint), device)
    data_cfg = train_cfg.data
    if cfg.get("data") is not None:  # data=<source> data.dir=... given on the command line
        data_cfg = OmegaConf.merge(data_cfg, cfg.data)
    name, sources, references = _load_split(data_cfg, str(cfg.split))
    pairs = [(s, r) for s, r in zip(sources, references) if s.strip() and r.strip()]
    if a.max_sentences is not None:
        pairs = pairs[: int(a.max_sentences)]
    if not pairs:
        raise UserError(f"split {name} has no non-empty sentence pairs to analyse")
    src_ids = tokenizer.encode([s for s, _ in pairs])
    tgt_ids = tokenizer.encode([r for _, r in pairs])
    refs = [r for _, r in pairs]
    limits = (data_cfg.filter.get("max_src_len"), data_cfg.filter.get("max_tgt_len"))
    tok_ids = (tokenizer.PAD, tokenizer.BOS, tokenizer.EOS)
    batches = make_batches(src_ids, tgt_ids, int(a.max_tokens), *tok_ids, *limits)
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log.info(
        "analysing %s heads of %s on %d sentences of %s; outputs in %s",
        len(head_ids(model)),
        cfg.checkpoint,
        len(pairs),
        name,
        out_dir,
    )

    start = time.perf_counter()
    stats = head_statistics(model, batches, device, precision, thresholds)
    decode = DecodeSettings(
        int(a.beam_size),
        float(train_cfg.decode.length_penalty),
        float(train_cfg.decode.max_len_a),
        int(train_cfg.decode.max_len_b),
    )
    bleu_args = (model, tokenizer, decode, device, precision, data_cfg)

    def bleu_on(n: int) -> _Bleu:  # the first n sentences of the subset
        return _Bleu(*bleu_args, src_ids[: int(n)], refs[: int(n)])

    def loss_fn(mask):
        return masked_loss(model, batches, device, precision, mask)

    imp_bleu = bleu_on(a.importance.bleu_sentences) if a.importance.bleu_sentences else None
    base, scores = importance(model, loss_fn, imp_bleu, device)
    key = "loss_increase" if metric == "loss" else "bleu_drop"
    for s in stats:
        s.extra.update(scores[s.kind, s.layer, s.head])
    # Least important first; ties keep the model's order (kind, layer, head).
    order = sorted(scores, key=lambda hid: scores[hid][key])
    curve = pruning_curve(
        model, order, a.pruning.fractions, loss_fn, bleu_on(a.pruning.bleu_sentences), device
    )
    for rank, hid in enumerate(order):
        scores[hid]["prune_rank"] = rank
    for s in stats:
        s.extra["prune_rank"] = scores[s.kind, s.layer, s.head]["prune_rank"]

    m = train_cfg.model
    result = {
        "checkpoint": str(cfg.checkpoint),
        "heads": model.num_heads,
        "d_k": model.d_model // model.num_heads,
        "params": count_parameters(model),
        "layers": model.num_layers,
        "attention_impl": str(m.attention_impl),
        "split": name,
        "sentences": len(pairs),
        "device": str(device),
        "precision": precision,
        "thresholds": asdict(thresholds),
        "importance_metric": metric,
        "base": base,
        "summary": summarize(stats),
        "head_stats": [s.as_dict() for s in stats],
        "pruning": curve,
        "seconds": None,
    }
    _write_figures(
        out_dir,
        model,
        tokenizer,
        device,
        stats,
        result,
        list(zip(src_ids, tgt_ids))[: a.heatmap_sentences],
    )
    result["seconds"] = time.perf_counter() - start
    (out_dir / "analysis.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    _log_summary(result, stats, out_dir)
    return result


def _write_figures(out_dir, model, tokenizer, device, stats, result, examples) -> None:
    """Heatmaps of ``examples`` (ids), ``heads.png``, ``pruning.png``; also to TensorBoard."""
    from torch.utils.tensorboard import SummaryWriter

    from translate.visualize import attention_figures  # also selects matplotlib's Agg backend

    writer = SummaryWriter(out_dir / "tensorboard")

    def save(fig, path: Path, tag: str) -> None:
        # Render once and use the pixels twice: drawing dominates (a second or so per grid).
        import matplotlib.pyplot as plt
        import numpy as np

        fig.canvas.draw()
        pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3]  # (H, W, 3) uint8
        plt.close(fig)
        path.parent.mkdir(parents=True, exist_ok=True)
        plt.imsave(path, pixels)
        writer.add_image(tag, pixels, dataformats="HWC")

    was_training = model.training
    model.eval()
    for i, (src_ids, tgt_ids) in enumerate(examples):
        src = torch.tensor([[*src_ids, tokenizer.EOS]], device=device)  # (1, S)
        tgt_in = torch.tensor([[tokenizer.BOS, *tgt_ids]], device=device)  # (1, T)
        maps = model.attention_maps(src, tgt_in)
        src_labels = [*tokenizer.pieces(src_ids), "</s>"]
        tgt_labels = ["<s>", *tokenizer.pieces(tgt_ids)]
        for tag, fig in attention_figures(maps, src_labels, tgt_labels).items():
            kind, layer = tag.split("/")[1:]
            save(
                fig,
                out_dir / "heatmaps" / f"sentence{i}" / f"{kind}_{layer}.png",
                f"{tag}/sentence{i}",
            )
    model.train(was_training)
    save(
        heads_figure(stats, model.num_layers, model.num_heads),
        out_dir / "heads.png",
        "analysis/heads",
    )
    save(
        pruning_figure(result["pruning"], result["heads"]),
        out_dir / "pruning.png",
        "analysis/pruning",
    )
    for point in result["pruning"]:
        writer.add_scalar("pruning/bleu", point["bleu"], point["heads_kept"])
        writer.add_scalar("pruning/loss", point["loss"], point["heads_kept"])
    writer.add_text("analysis/summary", "```\n" + json.dumps(result["summary"], indent=2) + "\n```")
    writer.close()


def heads_figure(stats: list[HeadStats], num_layers: dict[str, int], num_heads: int):
    """Two grids, one row per attention module, one column per head: normalised entropy and
    importance (loss increase when masked); degenerate heads are marked with x."""
    import matplotlib.pyplot as plt

    rows = [(k, n) for k in KINDS for n in range(num_layers[k])]
    index = {(s.kind, s.layer, s.head): s for s in stats}
    panels = (
        ("normalised entropy H / log S", lambda s: s.normalized_entropy, "viridis"),
        ("importance: dev loss increase when masked", lambda s: s.extra["loss_increase"], "magma"),
    )
    width = max(4.0, 0.45 * num_heads + 2.5)
    fig, axes = plt.subplots(1, 2, figsize=(2 * width, 0.45 * len(rows) + 1.8), squeeze=False)
    for ax, (title, value, cmap) in zip(axes[0], panels):
        grid = [[value(index[k, n, h]) for h in range(num_heads)] for k, n in rows]
        im = ax.imshow(grid, cmap=cmap, aspect="auto")
        fig.colorbar(im, ax=ax, fraction=0.04)
        for r, (k, n) in enumerate(rows):
            for h in range(num_heads):
                if index[k, n, h].degenerate:
                    ax.text(h, r, "x", ha="center", va="center", color="red", fontsize=9)
        ax.set_yticks(range(len(rows)), [f"{k} L{n}" for k, n in rows], fontsize=7)
        ax.set_xticks(range(num_heads), [str(h) for h in range(num_heads)], fontsize=7)
        ax.set_xlabel("head")
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{num_heads} heads per module (x = degenerate)", fontsize=10)
    fig.tight_layout()
    return fig


def pruning_figure(curve: list[dict], num_heads: int):
    """BLEU (left axis) and dev loss (right axis) against the fraction of heads kept."""
    import matplotlib.pyplot as plt

    x = [100 * p["fraction_kept"] for p in curve]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, [p["bleu"] for p in curve], "o-", color="tab:blue", label="dev BLEU")
    ax.set_xlabel("heads kept (%), least important masked first")
    ax.set_ylabel("dev BLEU", color="tab:blue")
    ax.invert_xaxis()  # read left to right as pruning proceeds
    loss_ax = ax.twinx()
    loss_ax.plot(x, [p["loss"] for p in curve], "s--", color="tab:red", label="dev loss")
    loss_ax.set_ylabel("dev loss (nats/token)", color="tab:red")
    ax.set_title(f"Pruning curve, {num_heads} heads per module", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _log_summary(result: dict, stats: list[HeadStats], out_dir: Path) -> None:
    summary = result["summary"]
    log.info(
        "base: loss %.3f, BLEU %s | mean entropy %s | %d of %d heads degenerate",
        result["base"]["loss"],
        "n/a" if result["base"]["bleu"] is None else f"{result['base']['bleu']:.2f}",
        ", ".join(f"{k} {v:.2f}" for k, v in summary["entropy"].items()),
        summary["degenerate_heads"],
        summary["total_heads"],
    )
    for d in summary["degenerate"]:
        log.info(
            "degenerate: %s layer %d head %d: %s", d["kind"], d["layer"], d["head"], d["reason"]
        )
    for point in result["pruning"]:
        log.info(
            "pruning: %3.0f%% heads kept (%d): BLEU %.2f, loss %.3f",
            100 * point["fraction_kept"],
            point["heads_kept"],
            point["bleu"],
            point["loss"],
        )
    log.info("wrote %s", out_dir / "analysis.json")


@hydra.main(version_base="1.3", config_path="../conf", config_name="analyze")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    analyze(cfg)


if __name__ == "__main__":
    main()
