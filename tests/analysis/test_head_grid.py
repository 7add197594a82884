"""The per-head heatmap figure (TensorBoard's Images tab and analyze's PNGs): a near-square grid
at every head count, so that TensorBoard, which scales an image to its card's width, keeps the
tokens large enough to read."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
import torch

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


def test_token_labels_of_four_heads_stay_legible_in_a_tensorboard_card():
    card_px = 350  # the Images tab's default card width at 1600 px: the image is scaled to it
    tokens = [f"▁Wort{i}" for i in range(18)]  # a dev sentence of the sample corpus's length
    fig = attention_figure(torch.full((4, 18, 18), 1 / 18), tokens, tokens, "attention")
    fig.canvas.draw()
    scale = card_px / fig.canvas.get_width_height()[0]
    label = fig.axes[0].get_yticklabels()[0].get_window_extent()
    plt.close(fig)
    assert label.height * scale >= 5  # pixels on screen; the 6 pt labels came out 3.7


def test_tensorboard_gets_sixteen_heads_as_four_legible_images():
    """A 4x4 grid cannot keep its tokens readable in a 350 px card; training's TensorBoard
    images split the heads into 2x2 groups, titled by their real head numbers."""
    from translate.analysis.figures import CARD_HEADS, attention_figures
    from translate.nn.model import AttentionMaps

    weights = torch.softmax(
        torch.randn(1, 16, 5, 5, generator=torch.Generator().manual_seed(1)), -1
    )
    maps = AttentionMaps(encoder=[weights], decoder_self=[], decoder_cross=[])
    tokens = [f"t{i}" for i in range(5)]
    split = dict(attention_figures(maps, tokens, tokens, per_image=CARD_HEADS))
    whole = dict(attention_figures(maps, tokens, tokens))
    titles = {tag: [ax.get_title() for ax in fig.axes if ax.axison] for tag, fig in split.items()}
    plt.close("all")
    assert list(whole) == ["attention/encoder_self/layer0"]  # analyze's PNG: one 4x4 grid
    assert list(titles) == [
        f"attention/encoder_self/layer0/heads_{a}-{a + 3}" for a in range(0, 16, 4)
    ]
    assert titles["attention/encoder_self/layer0/heads_12-15"] == [
        f"head {h}" for h in range(12, 16)
    ]
