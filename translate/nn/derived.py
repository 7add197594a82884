"""Inference copies of parameters in the layout a decoding step reads fastest.

A cached decoding step multiplies a few rows by each weight, so it is bound by reading weights
and by operator count: weights stored ``(in, out)`` contiguous (``F.linear``'s transposed view
takes 1.3-1.9 times as long on the CPU, docs/benchmarks.md), and self-attention's three
projections as one GEMM. Only computations without autograd read the copies, rebuilt when a
parameter changes. A product through a copy may differ from ``F.linear``'s in the last bits at a
few rows (another BLAS summation order): the decoding tests compare within a tolerance.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class DerivedWeight:
    """``build(*params)``, not saved, rebuilt by :meth:`get` when a parameter's storage, version
    (an optimizer step or ``copy_`` bumps it), dtype or device changes."""

    def __init__(self, build: Callable[..., Tensor]) -> None:
        self._build = build
        self._value: Tensor | None = None
        self._key: tuple | None = None

    def get(self, *params: Tensor | None) -> Tensor:
        key = tuple(
            None if p is None else (p.data_ptr(), p._version, p.dtype, p.device) for p in params
        )
        if self._key != key:
            with torch.no_grad():
                detached = (None if p is None else p.detach() for p in params)
                self._value, self._key = self._build(*detached), key
        return self._value


def uses_derived(weight: Tensor) -> bool:
    """Only without autograd: gradients must reach the parameters themselves."""
    return not (torch.is_grad_enabled() and weight.requires_grad)


def transposed(*weights: Tensor) -> Tensor:
    """Weights ``(N_i, K)`` stacked and transposed, contiguous: ``(K, sum N_i)``."""
    return torch.cat(weights, dim=0).t().contiguous()


def stacked(*tensors: Tensor | None) -> Tensor | None:
    """Biases stacked into one projection's; None for projections without bias."""
    return None if tensors[0] is None else torch.cat(tensors, dim=0)


def linear_t(x: Tensor, weight_t: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)`` from ``weight_t = weight.t()`` stored contiguous ``(K, N)``."""
    return F.linear(x, weight_t.t(), bias)


class Linear(nn.Linear):
    """``nn.Linear`` that, without autograd, multiplies by a contiguous transposed copy."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._weight_t = DerivedWeight(transposed)  # (in, out)

    def forward(self, x: Tensor) -> Tensor:
        if uses_derived(self.weight):
            return linear_t(x, self._weight_t.get(self.weight), self.bias)
        return F.linear(x, self.weight, self.bias)
