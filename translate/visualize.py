"""Attention heatmaps (one panel per head, token labels on both axes) for TensorBoard and PNG."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # headless: training boxes and CI have no display
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from translate.model import AttentionMaps  # noqa: E402


def attention_figure(weights: Tensor, keys: list[str], queries: list[str], title: str):
    """A grid with one heatmap per head. ``weights (H, T, S)`` for ``T`` queries, ``S`` keys."""
    heads = weights.size(0)
    cols = min(heads, 4)
    rows = math.ceil(heads / cols)
    size = max(2.5, 0.22 * max(len(keys), len(queries)))
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows), squeeze=False)
    data = weights.float().cpu().numpy()
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        ax.imshow(data[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {h}", fontsize=8)
        ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=6)
        ax.set_yticks(range(len(queries)), queries, fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def attention_figures(maps: AttentionMaps, src: list[str], tgt: list[str], index: int = 0):
    """``{tag: figure}`` for every layer of every attention type, for batch row ``index``.

    ``src`` labels the encoder positions, ``tgt`` the decoder input positions.
    """
    figures = {}
    kinds = (
        ("encoder_self", maps.encoder, src, src),
        ("decoder_self", maps.decoder_self, tgt, tgt),
        ("decoder_cross", maps.decoder_cross, src, tgt),
    )
    for kind, layers, keys, queries in kinds:
        for layer, weights in enumerate(layers):
            w = weights[index, :, : len(queries), : len(keys)]  # (H, T, S), padding cut off
            tag = f"attention/{kind}/layer{layer}"
            figures[tag] = attention_figure(w, keys, queries, tag)
    return figures


@torch.no_grad()
def log_attention(writer, model, src_ids: list[int], tgt_ids: list[int], tokenizer, device, step):
    """Heatmaps of every head of every layer for one sentence pair, to TensorBoard."""
    tok = tokenizer
    src = torch.tensor([[*src_ids, tok.EOS]], device=device)  # (1, S)
    tgt_in = torch.tensor([[tok.BOS, *tgt_ids]], device=device)  # (1, T)
    was_training = model.training
    model.eval()
    maps = model.attention_maps(src, tgt_in)
    model.train(was_training)
    src_labels = [*tok.pieces(src_ids), "</s>"]
    tgt_labels = ["<s>", *tok.pieces(tgt_ids)]
    for tag, figure in attention_figures(maps, src_labels, tgt_labels).items():
        writer.add_figure(tag, figure, step)  # closes the figure


def log_hparams(writer, hparams: dict, metrics: dict) -> None:
    """Write the HParams-dashboard summaries into this run's own event file, so
    ``tensorboard --logdir <sweep_dir>`` lists one row per job."""
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    experiment, session_start, session_end = hparams_summary(hparams, metrics)
    file_writer = writer._get_file_writer()
    for summary in (experiment, session_start, session_end):
        file_writer.add_summary(summary)
    for name, value in metrics.items():
        writer.add_scalar(name, value)
