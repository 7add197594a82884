"""What the heads of one checkpoint learned, the work of ``python -m translate.analyze``: on a
fixed prefix of a split, each head's entropy and degenerate flag (:mod:`.heads`), each cross
head's AER (:mod:`.alignment_heads`), its importance and the pruning curve (:mod:`.importance`),
into :data:`OUTPUTS`."""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tqdm.auto import tqdm

from translate import io
from translate.analysis import figures
from translate.analysis.alignment import pharaoh
from translate.analysis.alignment_heads import cross_links, head_aer, reference_alignments
from translate.analysis.heads import head_ids, head_statistics, make_batches, summarize
from translate.analysis.importance import MaskedBleu, importance, pruning_curve
from translate.data.corpus import load_raw_split
from translate.decoding.translator import Loaded, load_translator
from translate.errors import UserError
from translate.nn.model import count_parameters
from translate.schema import AnalysisSettings
from translate.schema.commands import CheckpointCommand
from translate.scoring import mean_nll

log = logging.getLogger(__name__)

# What an analysis writes into its dir: a second one there would replace or mix with them.
OUTPUTS = (
    "analysis.json",
    "heads.png",
    "alignment.png",
    "silver.align",
    "pruning.png",
    "heatmaps",
    "tensorboard",
)


def _pairs(loaded: Loaded, role: str, limit: int | None) -> tuple[str, list, list, list, list]:
    """``(split name, src ids, tgt ids, sources, references)`` of the non-empty pairs analysed."""
    if role not in ("valid", "test"):
        raise UserError(f"split={role} is unknown; pass split=valid or split=test")
    name, sources, references = load_raw_split(loaded.data, role)
    pairs = [(s, r) for s, r in zip(sources, references) if s.strip() and r.strip()]
    pairs = pairs if limit is None else pairs[:limit]
    if not pairs:
        raise UserError(f"split {name} has no non-empty sentence pairs to analyse")
    tok = loaded.tokenizer
    sources, refs = [s for s, _ in pairs], [r for _, r in pairs]
    return name, tok.encode(sources), tok.encode(refs), sources, refs


def analyze_heads(
    command: CheckpointCommand, a: AnalysisSettings, split: str, out_dir: Path, data_overrides=None
) -> dict:
    """Every diagnostic on ``split`` into ``out_dir``; returns the ``analysis.json`` dict.
    ``data_overrides`` (``data=<source> ...``) replace the checkpoint's data config."""
    r = command.runtime
    r.apply_to_process()
    loaded = load_translator(
        command.checkpoint, r.device, r.precision, data_overrides=data_overrides
    )
    name, src_ids, tgt_ids, sources, refs = _pairs(loaded, split, a.max_sentences)
    model, tr = loaded.model, loaded.translator
    what = f"{len(head_ids(model))} heads of {command.checkpoint} on {len(refs)} sentences"
    log.info("analysing %s of %s; outputs in %s", what, name, out_dir)
    start = time.perf_counter()
    limits = (loaded.data.eval_cap, loaded.data.eval_cap)  # as validation feeds the model
    batches = make_batches(src_ids, tgt_ids, a.max_tokens, *limits)
    log.info("1/5 attention statistics: %d teacher-forced batches", len(batches))
    stats = head_statistics(model, batches, tr.device, tr.precision, a.degenerate)
    _log_heads(summarize(stats))
    alignment = _alignment(loaded, a, batches, sources, refs, out_dir)
    base, curve = _importance(loaded, a, stats, batches, src_ids, refs)
    result = {
        "checkpoint": command.checkpoint,
        "heads": model.num_heads,
        "d_k": model.d_model // model.num_heads,
        "params": count_parameters(model),
        "layers": model.num_layers,
        "attention_impl": loaded.config["model"]["attention_impl"],
        "split": name,
        "sentences": len(refs),
        "device": str(tr.device),
        "precision": tr.precision,
        "thresholds": asdict(a.degenerate),
        "importance_metric": a.importance.metric,
        "base": base,
        "summary": summarize(stats),
        "head_stats": [s.as_dict() for s in stats],
        "pruning": curve,
        "alignment": alignment,
    }
    examples = list(zip(src_ids, tgt_ids))[: a.heatmap_sentences]
    log.info("5/5 figures: heads.png, pruning.png, heatmaps of %d sentences", len(examples))
    _write_figures(out_dir, loaded, stats, result, examples)
    result["seconds"] = time.perf_counter() - start
    io.write(out_dir / "analysis.json", json.dumps(result, indent=2) + "\n", "head analysis")
    _log_written(out_dir, result)
    return result


def _bar(what: str, unit: str) -> Callable:
    return functools.partial(tqdm, desc=what, unit=unit, leave=False, file=sys.stderr)


def _importance(loaded: Loaded, a: AnalysisSettings, stats, batches, src_ids, refs):
    """Importance of every head (into each ``HeadStats.extra``) and the pruning curve."""
    model, tr = loaded.model, loaded.translator

    loss_fn = functools.partial(mean_nll, model, batches, tr.device, tr.precision)  # (head_mask)
    n_imp, n_prune = a.importance.bleu_sentences, a.pruning.bleu_sentences
    # Importance and pruning compare masks, not systems: every checkpoint decodes with a beam
    # of analysis.beam_size, whatever its own decode settings.
    imp_bleu = MaskedBleu(tr, src_ids[:n_imp], refs[:n_imp], a.beam_size) if n_imp else None
    bleu = f" and BLEU on {n_imp} sentences" if n_imp else ""
    log.info("3/5 importance: dev loss%s with each of %d heads masked", bleu, len(stats))
    base, scores = importance(model, loss_fn, imp_bleu, tr.device, _bar("importance", "head"))
    key = "loss_increase" if a.importance.metric == "loss" else "bleu_drop"
    # Least important first; ties keep the model's order (kind, layer, head).
    order = sorted(scores, key=lambda hid: scores[hid][key])
    prune_bleu = MaskedBleu(tr, src_ids[:n_prune], refs[:n_prune], a.beam_size)
    log.info("4/5 pruning curve: BLEU on %d sentences per point, least important first", n_prune)
    prune = _bar("pruning", "point")
    curve = pruning_curve(model, order, a.pruning.fractions, loss_fn, prune_bleu, tr.device, prune)
    for p in curve:
        point = 100 * p["fraction_kept"], p["heads_kept"], p["bleu"], p["loss"]
        log.info("pruning: %3.0f%% heads kept (%d): BLEU %.2f, loss %.3f", *point)
    for rank, hid in enumerate(order):
        scores[hid]["prune_rank"] = rank
    for s in stats:
        s.extra.update(scores[s.kind, s.layer, s.head])
    return base, curve


def _alignment(loaded: Loaded, a: AnalysisSettings, batches, sources, refs, out_dir: Path):
    """Each cross head's AER, or None without reference alignments (silver: ``silver.align``)."""
    log.info("2/5 alignment heads: each cross-attention head's AER, teacher-forced")
    ref = reference_alignments(a.alignments, a.silver_train_pairs, loaded.data, sources, refs)
    if ref is None:
        return None
    if ref.kind == "silver":
        text = "".join(pharaoh(links) + "\n" for links in ref.sure)
        io.write(out_dir / "silver.align", text, "silver alignments")
    tr = loaded.translator
    links = cross_links(loaded.model, batches, loaded.tokenizer, tr.device, tr.precision)
    result = head_aer(links, ref)
    _log_alignment(result)
    return result


def _log_alignment(alignment: dict) -> None:
    best = ", ".join(
        f"layer {b['layer']} head {b['head']} {b['aer']:.3f}" for b in alignment["best_per_layer"]
    )
    what = (alignment["reference"], alignment["origin"], alignment["sentences"])
    log.info("alignment heads, AER against %s alignments (%s) of %d pairs: %s", *what, best)


def _write_figures(out_dir: Path, loaded: Loaded, stats, result: dict, examples) -> None:
    """Heatmaps of ``examples`` (ids) and the PNGs, also to TensorBoard."""
    plt = figures.pyplot()
    writer = io.summary_writer(out_dir / "tensorboard")

    def save(fig, path: Path, tag: str) -> None:
        pixels = figures.figure_pixels(fig)
        io.write(path, lambda f: plt.imsave(f, pixels, format="png"), "head analysis figure")
        writer.add_image(tag, pixels, dataformats="HWC")

    model, tok, device = loaded.model, loaded.tokenizer, loaded.translator.device
    for i, (src_ids, tgt_ids) in enumerate(examples):
        for tag, fig in figures.sentence_figures(model, src_ids, tgt_ids, tok, device):
            kind, layer = tag.split("/")[1:]
            save(fig, out_dir / f"heatmaps/sentence{i}/{kind}_{layer}.png", f"{tag}/sentence{i}")
    heads = figures.heads_figure(stats, model.num_layers, model.num_heads)
    save(heads, out_dir / "heads.png", "analysis/heads")
    if result["alignment"]:
        aligned = figures.alignment_figure(result["alignment"])
        save(aligned, out_dir / "alignment.png", "analysis/alignment")
    pruning = figures.pruning_figure(result["pruning"], result["heads"])
    save(pruning, out_dir / "pruning.png", "analysis/pruning")
    for point in result["pruning"]:
        writer.add_scalar("pruning/bleu", point["bleu"], point["heads_kept"])
        writer.add_scalar("pruning/loss", point["loss"], point["heads_kept"])
    writer.add_text("analysis/summary", "```\n" + json.dumps(result["summary"], indent=2) + "\n```")
    writer.close()


def _log_heads(summary: dict) -> None:
    entropy = ", ".join(f"{k} {v:.2f}" for k, v in summary["entropy"].items())
    counts = summary["degenerate_heads"], summary["total_heads"]
    log.info("mean entropy %s | %d of %d heads degenerate", entropy, *counts)
    for d in summary["degenerate"]:
        log.info("degenerate: %(kind)s layer %(layer)d head %(head)d: %(reason)s", d)


def _log_written(out_dir: Path, result: dict) -> None:
    heatmaps = len(list((out_dir / "heatmaps").rglob("*.png")))
    alignment = result["alignment"]
    aligned = ""
    if alignment:
        _log_alignment(alignment)  # again, among the closing lines
        silver = ", silver.align" if alignment["reference"] == "silver" else ""
        aligned = f"alignment.png (AER, {alignment['reference']}){silver}, "
    log.info(
        "wrote in %s (%.0f s): analysis.json, heads.png, %spruning.png, heatmaps/ (%d PNGs), "
        "tensorboard/ (tensorboard --logdir %s)",
        *(out_dir, result["seconds"], aligned, heatmaps, out_dir / "tensorboard"),
    )
