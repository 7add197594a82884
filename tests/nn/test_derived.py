"""Inference copies of parameters (translate/nn/derived.py): the same function as the
parameters they copy, never stale, and never in the way of gradients."""

import pytest
import torch
import torch.nn.functional as F

from translate.nn.derived import Linear


@pytest.mark.parametrize("rows", [1, 5, 60])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_without_autograd_is_f_linear_within_rounding(rows, bias):
    torch.manual_seed(0)
    layer = Linear(32, 48, bias=bias)
    x = torch.randn(rows, 3, 32)
    with torch.no_grad():
        out = layer(x)
    expected = F.linear(x, layer.weight, layer.bias)
    assert out.shape == (rows, 3, 48)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)


def test_linear_with_autograd_is_f_linear_exactly_and_trains_its_parameters():
    torch.manual_seed(0)
    layer = Linear(8, 4)
    x = torch.randn(5, 8)
    out = layer(x)
    assert torch.equal(out, F.linear(x, layer.weight, layer.bias))
    out.square().sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None


def test_linear_reads_its_weight_again_after_an_optimizer_step():
    torch.manual_seed(0)
    layer = Linear(8, 4)
    x = torch.randn(2, 8)
    with torch.no_grad():
        before = layer(x)
    layer(x).sum().backward()
    torch.optim.SGD(layer.parameters(), lr=1.0).step()
    with torch.no_grad():
        after = layer(x)
    torch.testing.assert_close(after, F.linear(x, layer.weight, layer.bias))
    assert not torch.allclose(after, before)


def test_linear_keeps_nn_linear_state_dict_names():
    assert set(Linear(3, 2).state_dict()) == {"weight", "bias"}
    assert isinstance(Linear(3, 2), torch.nn.Linear)  # init_weights and exports find it
