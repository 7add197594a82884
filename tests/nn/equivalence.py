"""What tests/nn checks of two attention modules that should compute the same thing."""

from __future__ import annotations

import torch


def assert_same_outputs_and_grads(first, second, x: torch.Tensor, masks: dict) -> None:
    """Self-attention of ``x`` ``(B, T, D)`` through both modules: equal outputs, and equal
    gradients for the input and for each pair of parameters (in parameter order)."""
    x1 = x.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    out1, _ = first(x1, x1, x1, **masks)
    out2, _ = second(x2, x2, x2, **masks)
    torch.testing.assert_close(out2, out1, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out1)
    out1.backward(g)
    out2.backward(g)
    torch.testing.assert_close(x2.grad, x1.grad, atol=1e-5, rtol=1e-4)
    for p1, p2 in zip(first.parameters(), second.parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, atol=1e-5, rtol=1e-4)
