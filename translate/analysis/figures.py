"""Figures: attention heatmaps (one panel per head), the per-head grids and the pruning curve of
``translate.analyze``, for PNG files and TensorBoard; a run's row in TensorBoard's HParams
table. The heads ablation's ``ablation.png`` is :mod:`translate.ablation.report`'s."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from translate.data.tokenizer import Tokenizer
from translate.nn.model import HEAD_MASK_KEYS, AttentionMaps, Seq2SeqTransformer
from translate.runtime.device import eval_mode

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend, imported on first use: every command
    imports this module, most draw nothing, and matplotlib takes half a second to import."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def head_grid(heads: int) -> tuple[int, int]:
    """``(rows, cols)`` of a near-square grid: TensorBoard scales an image to its card's width,
    so a wide strip (1x4) shrinks its tokens past reading; a square keeps them twice as large."""
    cols = math.ceil(math.sqrt(heads))
    return math.ceil(heads / cols), cols


# TensorBoard's Images tab scales every image to a 350 px wide card (measured at 1600x1300:
# docs/measurements.md, TensorBoard). Training's heatmaps are drawn at that width, one head a
# row, so their token labels reach the screen at FONT_PX, each in a CELL_PX row or column.
CARD_PX, DPI, FONT_PX, CELL_PX = 350, 100, 12, 15
# The longest sentence (tokens with EOS/BOS) whose heatmap keeps CELL_PX columns in the card,
# beside a column of target tokens.
CARD_TOKENS = 16


def _card_size(heads: int, keys: list[str], queries: list[str]) -> tuple[float, float]:
    """``(width, height)`` inches of one head a row in a TensorBoard card: each row a title,
    ``CELL_PX`` per query and the rotated key labels below (a character is under 0.7 em)."""
    labels = 0.7 * FONT_PX * max(map(len, keys)) + 2 * FONT_PX
    return CARD_PX / DPI, heads * (2 * FONT_PX + CELL_PX * len(queries) + labels) / DPI


def attention_figure(weights: Tensor, keys: list[str], queries: list[str], title: str, card=False):
    """One heatmap per head of ``weights (H, T, S)``: a near-square grid (``analyze``'s PNGs,
    seen at their own size), or with ``card`` one head a row sized for TensorBoard's card."""
    heads = weights.size(0)
    # Constrained: tight_layout leaves a tall card's title over its first head.
    if card:
        rows, cols = heads, 1
        font = FONT_PX * 72 / DPI  # points
        layout = "constrained"
        size = _card_size(heads, keys, queries)
    else:
        rows, cols = head_grid(heads)
        font = 11
        layout = "tight"
        side = max(2.5, 0.22 * max(len(keys), len(queries)))
        size = (side * cols, side * rows)
    fig, axes = pyplot().subplots(rows, cols, figsize=size, dpi=DPI, squeeze=False, layout=layout)
    data = weights.float().cpu().numpy()
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        ax.imshow(data[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {h}", fontsize=font)
        ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=font)
        ax.set_yticks(range(len(queries)), queries, fontsize=font)
    fig.suptitle(title, fontsize=font + 2)
    return fig


def attention_figures(
    maps: AttentionMaps, src: list[str], tgt: list[str], card=False
) -> Iterator[tuple[str, Figure]]:
    """``(tag, figure)`` of every layer of every attention type, batch row 0, one at a time: a
    caller closing each holds one open, not 6 or more (matplotlib warns past 20)."""
    kinds = (
        ("encoder_self", maps.encoder, src, src),
        ("decoder_self", maps.decoder_self, tgt, tgt),
        ("decoder_cross", maps.decoder_cross, src, tgt),
    )
    for kind, layers, keys, queries in kinds:
        for layer, weights in enumerate(layers):
            w = weights[0, :, : len(queries), : len(keys)]  # (H, T, S), padding cut off
            tag = f"attention/{kind}/layer{layer}"
            yield tag, attention_figure(w, keys, queries, tag, card)


@torch.no_grad()
def sentence_figures(
    model: Seq2SeqTransformer, src_ids, tgt_ids, tok: Tokenizer, device, card=False
) -> Iterator[tuple[str, Figure]]:
    """:func:`attention_figures` of one sentence pair (ids without specials): the model sees
    ``src + EOS`` and ``BOS + tgt``, labelled with their pieces."""
    src = torch.tensor([[*src_ids, tok.EOS]], device=device)  # (1, S)
    tgt_in = torch.tensor([[tok.BOS, *tgt_ids]], device=device)  # (1, T)
    with eval_mode(model):
        maps = model.attention_maps(src, tgt_in)
    src_labels = [*tok.pieces(src_ids), "</s>"]
    tgt_labels = ["<s>", *tok.pieces(tgt_ids)]
    return attention_figures(maps, src_labels, tgt_labels, card)


# Training's heatmaps sort after the scalar groups (dev, heads, hparam, train): TensorBoard's Time
# Series tab lists groups by name and opens the first two, so it opens with the curves.
TENSORBOARD_GROUP = "viz"


def log_attention(writer, model, src_ids, tgt_ids, tokenizer, device, step: int) -> None:
    """:func:`sentence_figures` to TensorBoard, one card-sized image per layer and kind."""
    for tag, figure in sentence_figures(model, src_ids, tgt_ids, tokenizer, device, card=True):
        writer.add_figure(f"{TENSORBOARD_GROUP}/{tag}", figure, step)  # closes the figure


def log_hparams(writer, hparams: dict, metrics: dict, leading=(), trial: str = "") -> None:
    """The HParams summaries into this run's own event file: ``tensorboard --logdir <sweep_dir>``
    lists one row per job, named ``trial``. TensorBoard sorts hparams by ``differs``, then name,
    and ticks the first five; torch never sets ``differs``, so ``leading`` ones are marked so."""
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    experiment, session_start, session_end = hparams_summary(hparams, metrics)
    with _plugin_data(experiment) as data:
        for info in data.experiment.hparam_infos:
            info.differs = info.name in leading
    with _plugin_data(session_start) as data:
        data.session_start_info.group_name = trial
    file_writer = writer._get_file_writer()
    for summary in (experiment, session_start, session_end):
        file_writer.add_summary(summary)
    for name, value in metrics.items():
        writer.add_scalar(name, value)


@contextmanager
def _plugin_data(summary):
    """The ``HParamsPluginData`` of an hparams summary, to edit; written back on exit."""
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    plugin = summary.value[0].metadata.plugin_data
    data = HParamsPluginData.FromString(plugin.content)
    yield data
    plugin.content = data.SerializeToString()


def figure_pixels(fig) -> np.ndarray:
    """The figure rendered once as ``(H, W, 3)`` uint8 pixels, then closed: drawing takes a
    second or so per grid, so PNG and TensorBoard share one rendering."""
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3]  # (H, W, 3)
    pyplot().close(fig)
    return pixels


def heads_figure(stats: list, num_layers: dict[str, int], num_heads: int):
    """Normalised entropy and importance per module (rows) and head; degenerate ones marked x."""
    rows = [(k, n) for k in HEAD_MASK_KEYS for n in range(num_layers[k])]
    index = {(s.kind, s.layer, s.head): s for s in stats}
    panels = (
        ("normalised entropy H / log S", lambda s: s.normalized_entropy, "viridis"),
        ("importance: dev loss increase when masked", lambda s: s.extra["loss_increase"], "magma"),
    )
    width = max(4.0, 0.45 * num_heads + 2.5)
    fig, axes = pyplot().subplots(1, 2, figsize=(2 * width, 0.45 * len(rows) + 1.8), squeeze=False)
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


def alignment_figure(alignment: dict):
    """AER of every cross-attention head (``analysis.json``'s ``alignment``), one row per
    decoder layer: lower aligns better, the best head of each layer boxed."""
    heads = alignment["heads"]
    n_layers, n_heads = 1 + max(h["layer"] for h in heads), 1 + max(h["head"] for h in heads)
    grid = np.full((n_layers, n_heads), np.nan)
    for h in heads:
        grid[h["layer"], h["head"]] = h["aer"]
    fig, ax = pyplot().subplots(figsize=(max(4.0, 0.8 * n_heads + 2.0), 0.7 * n_layers + 1.8))
    im = ax.imshow(grid, cmap="viridis_r", vmin=0.0, vmax=1.0, aspect="auto")
    fig.colorbar(im, ax=ax, fraction=0.04, label="AER (lower aligns better)")
    for (layer, head), value in np.ndenumerate(grid):
        ink = "black" if value < 0.6 else "white"  # viridis_r is light at low AER
        ax.text(head, layer, f"{value:.2f}", ha="center", va="center", color=ink, fontsize=9)
    for b in alignment["best_per_layer"]:
        box = dict(fill=False, edgecolor="red", linewidth=2)
        ax.add_patch(pyplot().Rectangle((b["head"] - 0.5, b["layer"] - 0.5), 1, 1, **box))
    ax.set_yticks(range(n_layers), [f"layer {n}" for n in range(n_layers)], fontsize=8)
    ax.set_xticks(range(n_heads), [str(h) for h in range(n_heads)], fontsize=8)
    ax.set_xlabel("cross-attention head")
    what = f"against {alignment['reference']} alignments, {alignment['sentences']} sentences"
    ax.set_title(f"AER per head {what}\n(best of each layer boxed)", fontsize=9)
    fig.tight_layout()
    return fig


def pruning_figure(curve: list[dict], num_heads: int):
    """BLEU (left axis) and dev loss (right axis) against the fraction of heads kept."""
    x = [100 * p["fraction_kept"] for p in curve]
    fig, ax = pyplot().subplots(figsize=(6, 4))
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
