"""Our CPU dropout: a Bernoulli(p) mask per element from 16-bit slices of random words."""

import math

import pytest
import torch

from translate.nn.dropout import Dropout, dropout

N = 400_000  # elements per draw: the drop rate's standard error is ~0.0005 at p = 0.1


def _within(rate: float, p: float, n: int) -> bool:
    """``rate`` is within 6 standard errors of ``p`` for ``n`` Bernoulli draws."""
    return abs(rate - p) <= 6 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("p", [0.05, 0.1, 0.3, 0.5])
def test_drop_rate_is_p_in_every_slice_of_a_word(p):
    torch.manual_seed(0)
    dropped = dropout(torch.ones(N), p) == 0  # (N,)
    # Elements k, k+4, ... share a position within their 64-bit words: a biased slice (the sign
    # bit of a non-negative draw) would show as one of the four rates far from p.
    for k in range(4):
        assert _within(dropped[k::4].float().mean().item(), p, N // 4)


def test_kept_elements_are_scaled_to_keep_the_expectation():
    torch.manual_seed(0)
    x = torch.rand(N) + 0.5
    y = dropout(x, 0.1)
    kept = y != 0
    # One scale for every kept element: the inverse keep probability (0.9 up to the 2**-16
    # quantisation of p).
    scale = 1 / (1 - round(0.1 * 2**16) / 2**16)
    assert scale == pytest.approx(1 / 0.9, rel=1e-4)
    torch.testing.assert_close(y[kept], x[kept] * scale)
    keep_rate = kept.float().mean().item()
    assert keep_rate * scale == pytest.approx(1.0, abs=6 * math.sqrt(0.09 / N) / 0.9)


def test_gradient_goes_through_the_same_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)  # a size that is not a multiple of 4
    y = dropout(x, 0.25)
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach() / x.detach())


def test_a_seed_repeats_the_masks_and_the_next_draw_differs():
    x = torch.ones(1000)
    torch.manual_seed(3)
    first, second = dropout(x, 0.1), dropout(x, 0.1)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.1), first)
    assert not torch.equal(first, second)


def test_identity_in_eval_or_at_zero_and_zeros_at_one():
    x = torch.randn(8, 8)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    module = Dropout(0.5).eval()
    assert module(x) is x


def test_keeps_the_dtype_and_shape():
    x = torch.randn(3, 5, 7, dtype=torch.bfloat16)
    y = Dropout(0.2)(x)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape
