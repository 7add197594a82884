"""The per-head heatmap figures: analyze's PNGs a near-square grid at every head count, seen at
their own size; training's TensorBoard images one head a row, sized so that the Images tab,
which scales every image to its card's width, keeps each token at 12 px or more."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.text import Text

from translate.analysis.figures import attention_figure


@pytest.mark.parametrize("heads", [1, 2, 4, 8, 16])
def test_heads_fill_a_near_square_grid(heads):
    tokens = [f"tok{i}" for i in range(7)]
    scores = torch.randn(heads, 7, 7, generator=torch.Generator().manual_seed(0))
    weights = torch.softmax(scores, dim=-1)
    fig = attention_figure(weights, tokens, tokens, "attention/encoder_self/layer0")
    rows, cols, *_ = fig.axes[0].get_subplotspec().get_geometry()
    panels = [ax for ax in fig.axes if ax.axison]
    width, height = fig.get_size_inches()
    plt.close(fig)
    assert len(panels) == heads
    assert (rows - 1) * cols < heads <= rows * cols  # room for every head, no empty row
    assert cols - rows in (0, 1)  # as square as the count allows: 1x4 and 2x4 are strips
    assert 1 / 1.5 <= width / height <= (2.0 if heads == 2 else 1.5)


@pytest.mark.parametrize("heads", [4, 16])
def test_tensorboard_cards_keep_every_heads_tokens_legible(heads):
    """Training's TensorBoard image, scaled by the Images tab to its 350 px card (measured at
    1600x1300), shows every head's tokens at 12 px or more, none overlapping its neighbour:
    the 2x2 grids this replaced came out 5-6 px."""
    card_px = 350
    # 16 tokens a side, the longest pair training draws, with long pieces.
    src = [*(f"▁Großvater{i}" for i in range(15)), "</s>"]
    tgt = ["<s>", *(f"▁grandfather{i}" for i in range(15))]
    weights = torch.softmax(
        torch.randn(heads, 16, 16, generator=torch.Generator().manual_seed(0)), -1
    )
    fig = attention_figure(weights, src, tgt, "attention/decoder_cross/layer0", card=True)
    fig.canvas.draw()
    scale = card_px / fig.canvas.get_width_height()[0]
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == heads
    for ax in panels:
        for axis, lo, hi in (("x", "x0", "x1"), ("y", "y0", "y1")):
            labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
            assert [t.get_text() for t in labels] == (src if axis == "x" else tgt)
            assert all(t.get_fontsize() * fig.dpi / 72 * scale >= 12 for t in labels)
            boxes = [t.get_window_extent() for t in labels]
            spans = sorted((getattr(b, lo), getattr(b, hi)) for b in boxes)
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (axis, spans)
    title = next(t for t in fig.findobj(Text) if t.get_text() == "attention/decoder_cross/layer0")
    top = max(ax.title.get_window_extent().y1 for ax in panels)
    assert title.get_window_extent().y0 >= top  # above head 0's, not over the first panel
    plt.close(fig)


def test_tensorboard_gets_each_layers_heads_as_one_image():
    """One image per layer and attention kind, whatever the head count: a 16-head layer is
    one card, not four."""
    from translate.analysis.figures import attention_figures
    from translate.nn.model import AttentionMaps

    weights = torch.softmax(
        torch.randn(1, 16, 5, 5, generator=torch.Generator().manual_seed(1)), -1
    )
    maps = AttentionMaps(encoder=[weights, weights], decoder_self=[weights], decoder_cross=[])
    tokens = [f"t{i}" for i in range(5)]
    figures = dict(attention_figures(maps, tokens, tokens, card=True))
    titles = {tag: [ax.get_title() for ax in fig.axes if ax.axison] for tag, fig in figures.items()}
    plt.close("all")
    assert list(titles) == [
        "attention/encoder_self/layer0",
        "attention/encoder_self/layer1",
        "attention/decoder_self/layer0",
    ]
    assert all(heads == [f"head {h}" for h in range(16)] for heads in titles.values())
